"""The allocator plug-ins (spillway.torch, spillway.cupy, spillway.numba)
without the frameworks: their C exports (python/spillway/allocator.c)
through ctypes, their Python modules, and stand-ins for the frameworks'
own entry points.

In this process the plug-ins' device index names the default device's
backend (SPILLWAY_PLUGIN_BACKEND): sim:0 in CI, so that the accounting,
the budget, the leases and the garbage collection before an OOM are
checked everywhere.  Against the CPU stand-in for libcuda (tests/cuda/
fake_libcuda.c, built beside the suite) a subprocess runs the CUDA side:
the stream joins with a framework's stream.  With torch, cupy or numba
importable, the tests that need them run too (bench/gpu/check.sh runs them
on a GPU); they skip otherwise.  The frameworks are never requirements.
"""

import ctypes
import gc
import importlib.util
import os
import pathlib
import subprocess
import sys
import textwrap
import time

import pytest

import spillway
from spillway import _plugin

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("SPILLWAY_BUILD_DIR", ROOT / "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD
FAKE = BUILD / "tests" / "c" / "libcuda_fake.so"
# The stand-in for NVRTC goes with it, whatever the machine has
# (tests/cuda/fake_libnvrtc.c, docs/cuda.md).
FAKE_NVRTC = BUILD / "tests" / "c" / "libnvrtc_fake.so"

_DEFAULT = spillway.Device().name
_BACKEND, _, _INDEX = _DEFAULT.partition(":")
INDEX = int(_INDEX or 0)
os.environ["SPILLWAY_PLUGIN_BACKEND"] = _BACKEND

MiB = 1 << 20


def have(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@pytest.fixture
def plug():
    """The default device as the plug-ins see it, budget cleared after."""
    dev = _plugin.device(INDEX)
    yield dev
    spillway.set_memory_budget(None, device=dev)
    spillway.empty_cache(device=dev)


def blocks(dev, tag):
    return [b for b in spillway.memory_snapshot(dev) if b["tag"] == tag]


# ---------------------------------------------------------------------------
# Lazy imports and clear errors
# ---------------------------------------------------------------------------

def test_modules_import_without_frameworks():
    for name in ("spillway.torch", "spillway.cupy", "spillway.numba"):
        code = (f"import sys, {name}; "
                f"bad = [m for m in ('torch', 'cupy', 'numba') "
                f"if m in sys.modules]; print(bad)")
        out = subprocess.run([sys.executable, "-c", code],
                             capture_output=True, text=True, timeout=60,
                             env=dict(os.environ,
                                      PYTHONPATH=str(BUILD / "python")))
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "[]", f"{name} imported a framework"


@pytest.mark.skipif(have("torch"), reason="PyTorch is installed here")
def test_torch_missing_is_a_clear_import_error():
    import spillway.torch
    with pytest.raises(ImportError, match="PyTorch"):
        spillway.torch.use_spillway_allocator()


@pytest.mark.skipif(have("cupy"), reason="CuPy is installed here")
def test_cupy_missing_is_a_clear_import_error():
    import spillway.cupy
    with pytest.raises(ImportError, match="CuPy"):
        spillway.cupy.use_spillway_allocator()


@pytest.mark.skipif(have("numba"), reason="Numba is installed here")
def test_numba_missing_is_a_clear_import_error():
    import spillway.numba
    with pytest.raises(ImportError, match="Numba"):
        spillway.numba.SpillwayEMMPlugin
    with pytest.raises(AttributeError):
        spillway.numba.no_such_name


# ---------------------------------------------------------------------------
# The C exports
# ---------------------------------------------------------------------------

def torch_exports():
    """The pair as PyTorch's CUDAPluggableAllocator calls it."""
    lib = ctypes.CDLL(_plugin.library_path())
    m = lib.spillway_torch_malloc
    m.restype = ctypes.c_void_p
    m.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    f = lib.spillway_torch_free
    f.restype = None
    f.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                  ctypes.c_void_p]
    return m, f


def test_torch_exports_account_and_lease(plug):
    malloc, free = torch_exports()
    before = spillway.memory_info(plug)
    p = malloc(3 * MiB + 5, INDEX, None)
    assert p
    mid = spillway.memory_info(plug)
    assert mid.in_use >= before.in_use + 3 * MiB + 5
    assert _plugin.live()[0] >= 1
    snap = blocks(plug, "torch")
    assert len(snap) == 1 and snap[0]["leases"] == 1
    free(p, 3 * MiB + 5, INDEX, None)
    assert spillway.memory_info(plug).in_use == before.in_use
    assert malloc(0, INDEX, None) is None  # empty blocks are NULL
    free(None, 0, INDEX, None)


def test_unknown_or_double_free_is_refused(plug):
    p = _plugin.malloc(4096, INDEX, 0, "torch")
    _plugin.free(p, INDEX, 0)
    with pytest.raises(ValueError, match="not allocated by spillway"):
        _plugin.free(p, INDEX, 0)
    with pytest.raises(ValueError):
        _plugin.free(12345, INDEX, 0)


@pytest.mark.spills
def test_framework_memory_never_spills(plug):
    """Leased: spillway's own arrays spill around it, it stays."""
    p = _plugin.malloc(8 * MiB, INDEX, 0, "torch")
    try:
        arrays = [spillway.zeros((MiB // 4,), dtype="float32", device=plug)
                  for _ in range(8)]
        spillway.set_memory_budget(12 * MiB, device=plug)
        more = spillway.zeros((MiB // 4,), dtype="float32", device=plug)
        assert any(a.is_spilled for a in arrays)
        assert [b["state"] for b in blocks(plug, "torch")] == ["resident"]
        del arrays, more
    finally:
        _plugin.free(p, INDEX, 0)


def test_budget_oom_report_names_the_framework(plug):
    spillway.set_memory_budget(4 * MiB, device=plug)
    p = _plugin.malloc(3 * MiB, INDEX, 0, "torch")
    try:
        with pytest.raises(spillway.DeviceMemoryError) as e:
            _plugin.malloc(2 * MiB, INDEX, 0, "cupy")
        msg = str(e.value)
        assert "budget" in msg and "'torch'" in msg and "lease" in msg
        assert spillway.memory_info(plug).ooms >= 1
    finally:
        _plugin.free(p, INDEX, 0)


def test_one_budget_shared_by_two_frameworks(plug):
    spillway.set_memory_budget(6 * MiB, device=plug)
    a = _plugin.malloc(3 * MiB, INDEX, 0, "torch")
    b = _plugin.malloc(2 * MiB, INDEX, 0, "cupy")
    try:
        with pytest.raises(spillway.DeviceMemoryError):
            _plugin.malloc(2 * MiB, INDEX, 0, "numba")
        assert blocks(plug, "torch") and blocks(plug, "cupy")
    finally:
        _plugin.free(a, INDEX, 0)
        _plugin.free(b, INDEX, 0)
    c = _plugin.malloc(5 * MiB, INDEX, 0, "numba")  # room again
    _plugin.free(c, INDEX, 0)


class _Tensor:
    """A framework tensor: frees its block when collected."""

    p = 0

    def __init__(self, nbytes):
        self.p = _plugin.malloc(nbytes, INDEX, 0, "torch")

    def __del__(self):
        if self.p:
            _plugin.free(self.p, INDEX, 0)


def test_reference_cycles_collected_before_oom(plug):
    """The torch-spyre scenario: tensors held by reference cycles; the
    loop completes because the collector runs when the budget is hit."""
    # Past the collector's back-off after a collection that freed nothing
    # (an earlier test's OOM): max(50 ms, 10 x its duration).
    time.sleep(1.0)
    spillway.set_memory_budget(8 * MiB, device=plug)
    gc.collect()
    gc.disable()
    try:
        runs = spillway.memory_info(plug).gc_runs
        for _ in range(40):
            node = {"t": _Tensor(MiB)}
            node["self"] = node  # a cycle: only the collector frees it
            del node
        assert spillway.memory_info(plug).gc_runs > runs
    finally:
        gc.enable()
        gc.collect()
    assert _plugin.live()[0] == 0


def test_memory_stats_in_pytorch_terms(plug):
    import spillway.torch
    p = _plugin.malloc(MiB, INDEX, 0, "torch")
    try:
        st = spillway.torch.memory_stats(INDEX)
        info = spillway.memory_info(plug)
        assert st["allocated_bytes.all.current"] == info.in_use
        assert st["reserved_bytes.all.current"] == info.in_use + info.cached
        assert st["allocation.all.current"] == 1
        assert st["spillway.framework_bytes"] == MiB
        assert "num_ooms" in st and "num_alloc_retries" in st
    finally:
        _plugin.free(p, INDEX, 0)


# ---------------------------------------------------------------------------
# Stand-ins for the frameworks' entry points
# ---------------------------------------------------------------------------

def _stub(tmp_path, name, source):
    pkg = tmp_path / name
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(source))


TORCH_STUB = """
    import ctypes, types
    installed = []
    class CUDAPluggableAllocator:
        def __init__(self, path, alloc, free):
            lib = ctypes.CDLL(path)
            self.malloc = getattr(lib, alloc)
            self.malloc.restype = ctypes.c_void_p
            self.malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int,
                                    ctypes.c_void_p]
            self.free = getattr(lib, free)
            self.free.restype = None
            self.free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t,
                                  ctypes.c_int, ctypes.c_void_p]
    memory = types.SimpleNamespace(
        CUDAPluggableAllocator=CUDAPluggableAllocator,
        change_current_allocator=installed.append)
    cuda = types.SimpleNamespace(memory=memory)
"""

CUPY_STUB = """
    import types
    allocators = []
    class UnownedMemory:
        def __init__(self, ptr, size, owner, device_id=None):
            self.ptr, self.size, self.owner = ptr, size, owner
    class MemoryPointer:
        def __init__(self, mem, offset):
            self.mem, self.ptr = mem, mem.ptr + offset
    cuda = types.SimpleNamespace(
        set_allocator=allocators.append,
        UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
        runtime=types.SimpleNamespace(getDevice=lambda: DEVICE),
        get_current_stream=lambda: types.SimpleNamespace(ptr=0))
    DEVICE = 0
"""


def _run_with_stubs(tmp_path, body, extra_env=None):
    _stub(tmp_path, "torch", TORCH_STUB)
    _stub(tmp_path, "cupy", CUPY_STUB.replace("DEVICE = 0",
                                              f"DEVICE = {INDEX}"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path), str(BUILD / "python")]))
    env.update(extra_env or {})
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(body)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


PLUGIN_ROUNDS = """
    import spillway, spillway.torch, spillway.cupy, torch, cupy
    from spillway import _plugin
    IDX = {idx}
    alloc = spillway.torch.use_spillway_allocator(IDX, budget="16M")
    assert torch.installed == [alloc]
    assert spillway.torch.use_spillway_allocator(IDX) is alloc
    dev = _plugin.device(IDX)
    p = alloc.malloc(1 << 20, IDX, {stream})
    assert p and spillway.memory_info(dev).in_use >= 1 << 20
    assert spillway.get_memory_budget(dev) == 16 << 20
    alloc.free(p, 1 << 20, IDX, {stream})
    # too much for the budget: NULL, and spillway says why
    assert not alloc.malloc(64 << 20, IDX, {stream})
    assert "budget" in spillway.torch.last_error()
    spillway.cupy.use_spillway_allocator(IDX)
    (malloc,) = cupy.allocators
    mp = malloc(3 << 20)
    assert mp.ptr and _plugin.live()[0] == 1
    del mp
    assert _plugin.live() == (0, 0)
    spillway.set_memory_budget(None, device=dev)
    print("ok", spillway.memory_info(dev).in_use)
"""


def test_torch_and_cupy_entry_points_with_stand_ins(tmp_path):
    out = _run_with_stubs(tmp_path, PLUGIN_ROUNDS.format(idx=INDEX,
                                                         stream="None"))
    assert out.startswith("ok")


@pytest.mark.skipif(not FAKE.exists() or not FAKE_NVRTC.exists(),
                    reason=f"no {FAKE} or {FAKE_NVRTC} in this build")
def test_plugins_on_the_cuda_stand_in(tmp_path):
    """cuda:0 through the CPU stand-in for libcuda: the same rounds with
    the stream joins made, on stream 0 (the legacy stream PyTorch uses by
    default) and on a stream of the framework's own, while work still
    runs (FAKE_CUDA_DELAY_US)."""
    env = {"SPILLWAY_CUDA_LIBRARY": str(FAKE),
           "SPILLWAY_NVRTC_LIBRARY": str(FAKE_NVRTC),
           "SPILLWAY_PLUGIN_BACKEND": "",
           "FAKE_CUDA_DELAY_US": "50", "SPILLWAY_DEVICE": "cuda:0"}
    out = _run_with_stubs(tmp_path, PLUGIN_ROUNDS.format(idx=0,
                                                         stream="None"), env)
    assert out.startswith("ok")
    foreign = f"""
        import ctypes, spillway
        from spillway import _plugin
        cu = ctypes.CDLL({str(FAKE)!r})
        dev = _plugin.device(0)            # cuda:0: the driver initialized
        ctx, s = ctypes.c_void_p(), ctypes.c_void_p()
        assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert cu.cuCtxPushCurrent_v2(ctx) == 0
        assert cu.cuStreamCreate(ctypes.byref(s), 1) == 0  # non-blocking
        blocks = [_plugin.malloc(1 << 20, 0, s.value, "torch")
                  for _ in range(8)]
        for p in blocks:                     # the framework's work on them
            assert cu.cuMemsetD8Async(ctypes.c_uint64(p), 7, 1 << 20, s) == 0
        for p in blocks:
            _plugin.free(p, 0, s.value)
        a = spillway.zeros((1 << 18,), dtype="float32", device=dev)
        assert spillway.sum(a) == 0.0       # reused memory, after the memsets
        del a
        assert cu.cuStreamSynchronize(s) == 0
        assert cu.cuStreamDestroy_v2(s) == 0
        assert cu.cuCtxPopCurrent_v2(ctypes.byref(ctx)) == 0
        assert cu.cuDevicePrimaryCtxRelease_v2(0) == 0
        print("ok", _plugin.live())
    """
    out = _run_with_stubs(tmp_path, foreign, env)
    assert out.startswith("ok (0, 0)")


# ---------------------------------------------------------------------------
# With the real frameworks (a GPU machine: bench/gpu/check.sh)
# ---------------------------------------------------------------------------

@pytest.mark.skipif(not have("torch"), reason="PyTorch is not installed")
def test_real_torch_cycle_loop_completes():
    code = textwrap.dedent("""
        import gc, torch, spillway, spillway.torch
        if not torch.cuda.is_available():
            print("skip: no CUDA device for PyTorch"); raise SystemExit(0)
        spillway.torch.use_spillway_allocator(0, budget="512M")
        gc.disable()
        for i in range(200):
            node = {"t": torch.empty(16 << 20, dtype=torch.uint8,
                                     device="cuda")}
            node["self"] = node
            del node
        torch.cuda.synchronize()
        st = spillway.torch.memory_stats(0)
        assert st["spillway.gc_runs"] > 0, st
        print("ok", st["spillway.gc_runs"])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=300,
                         env=dict(os.environ, SPILLWAY_PLUGIN_BACKEND="",
                                  PYTHONPATH=str(BUILD / "python")))
    assert out.returncode == 0, out.stdout + out.stderr
    if out.stdout.startswith("skip"):
        pytest.skip(out.stdout.strip())


@pytest.mark.skipif(not have("cupy"), reason="CuPy is not installed")
def test_real_cupy_cycle_loop_completes():
    code = textwrap.dedent("""
        import gc, cupy, spillway, spillway.cupy
        try:
            cupy.cuda.runtime.getDeviceCount()
        except Exception as e:
            print("skip:", e); raise SystemExit(0)
        spillway.cupy.use_spillway_allocator(0, budget="512M")
        gc.disable()
        for i in range(200):
            node = {"a": cupy.empty(16 << 20, dtype=cupy.uint8)}
            node["self"] = node
            del node
        cupy.cuda.Device().synchronize()
        st = spillway.cupy.memory_stats(0)
        assert st["spillway.gc_runs"] > 0, st
        print("ok", st["spillway.gc_runs"])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=300,
                         env=dict(os.environ, SPILLWAY_PLUGIN_BACKEND="",
                                  PYTHONPATH=str(BUILD / "python")))
    assert out.returncode == 0, out.stdout + out.stderr
    if out.stdout.startswith("skip"):
        pytest.skip(out.stdout.strip())


@pytest.mark.skipif(not have("numba"), reason="Numba is not installed")
def test_real_numba_emm_plugin():
    code = textwrap.dedent("""
        import numpy as np, spillway, spillway.numba
        from numba import cuda
        if not cuda.is_available():
            print("skip: no CUDA device for Numba"); raise SystemExit(0)
        cuda.set_memory_manager(spillway.numba.SpillwayEMMPlugin)
        d = cuda.to_device(np.arange(1 << 20, dtype=np.float32))
        assert (d.copy_to_host() == np.arange(1 << 20)).all()
        st = spillway.memory_info("cuda:0")
        assert st.in_use >= 4 << 20, st
        del d
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=300,
                         env=dict(os.environ, SPILLWAY_PLUGIN_BACKEND="",
                                  PYTHONPATH=str(BUILD / "python")))
    assert out.returncode == 0, out.stdout + out.stderr
    if out.stdout.startswith("skip"):
        pytest.skip(out.stdout.strip())
