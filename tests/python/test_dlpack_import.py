"""spillway.from_dlpack, and DLPack export on every device.

Zero-copy only where the memory truly is the device's own; the producer
kept alive while its memory is used; copies otherwise; every refusal
leaves the capsule to its producer.
"""

import ctypes
import gc
import weakref

import numpy as np
import pytest

import spillway as sw

MiB = 1 << 20
N = MiB // 4  # float32 elements: 1 MiB

_name = ctypes.pythonapi.PyCapsule_GetName
_name.restype = ctypes.c_char_p
_name.argtypes = [ctypes.py_object]
_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_ptr.restype = ctypes.c_void_p
_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]


def capsule_name(cap):
    return _name(cap).decode()


def tensor_field(cap, offset, ctype):
    """A field of the capsule's DLManagedTensor(Versioned), by offset."""
    p = _ptr(cap, _name(cap))
    return ctype.from_address(p + offset)


# DLManagedTensorVersioned: version (0), manager_ctx, deleter, flags (24),
# dl_tensor (32: data, device (40), ndim (48), dtype (52), ...).  The
# legacy DLManagedTensor starts with dl_tensor.
V_FLAGS, V_DEVICE, V_DTYPE = 24, 40, 52
L_DTYPE = 20


def info_of(arr, dev):
    """memory_snapshot's entry of the base buffer holding arr's tag."""
    return [b for b in sw.memory_snapshot(dev) if b["tag"] == arr.tag]


def can_spill(dev):
    """Every device but host:0, whose memory is the host's own."""
    return not dev.name.startswith("host:")


def is_host_addressable(dev):
    return sw.zeros(1, device=dev).__dlpack_device__()[0] == 1


# ---------------------------------------------------------------------------
# Copies and zero-copy


def test_numpy_is_copied(dev):
    x = np.arange(10, dtype=np.float32)
    a = sw.from_dlpack(x, device=dev, tag="imported")
    assert a.device is dev and a.numpy().tolist() == x.tolist()
    x[0] = 100.0
    assert a[0] == 0.0  # a copy: a NumPy array is not the device's memory
    (entry,) = info_of(a, dev)
    assert not entry["external"] and entry["alloc_size"] > 0
    assert sw.from_dlpack(x).device is sw.Device()  # device=None: default


def test_numpy_refused_without_a_copy(dev):
    x = np.arange(10, dtype=np.float32)
    wr = weakref.ref(x)
    before = sw.memory_info(dev).allocs
    with pytest.raises(BufferError, match="copy=False"):
        sw.from_dlpack(x, device=dev, copy=False)
    assert sw.memory_info(dev).allocs == before
    del x
    gc.collect()
    assert wr() is None  # the refused capsule went back to NumPy


def test_strided_producers_are_gathered(dev):
    x = np.arange(24, dtype=np.int16).reshape(4, 6)[:, ::2]
    a = sw.from_dlpack(x, device=dev)
    assert a.shape == (4, 3) and a.numpy().tolist() == x.tolist()
    r = np.arange(6.0)[::-1]
    assert sw.from_dlpack(r, device=dev).numpy().tolist() == r.tolist()
    with pytest.raises(BufferError, match="contiguous"):
        sw.from_dlpack(x, device=dev, copy=False)


def test_another_spillway_array_is_shared(dev, sim1):
    a = sw.asarray(np.arange(4, dtype=np.float32), device=dev, tag="shared")
    b = sw.from_dlpack(a)
    assert b is not a and b.device is dev
    b[1] = 7.0
    assert a[1] == 7.0  # the same buffer ...
    (entry,) = info_of(a, dev)
    assert not entry["external"]  # ... still spillway's own
    c = sw.from_dlpack(a, copy=True)
    c[2] = -1.0
    assert a[2] == 2.0
    d = sw.from_dlpack(a, device=sim1)
    assert d.device is sim1 and d.numpy().tolist() == a.numpy().tolist()
    with pytest.raises(BufferError, match="copy"):
        sw.from_dlpack(a, device=sim1, copy=False)


def test_the_devices_own_export_comes_back_without_a_copy(dev):
    """numpy.from_dlpack(a) views the simulated device's memory; handed
    back, it is that memory: wrapped as external, never spilled, and the
    NumPy array (so the lease) lives as long as the import does."""
    if not is_host_addressable(dev):
        pytest.skip("NumPy views device memory only where it is host memory")
    a = sw.asarray(np.arange(N, dtype=np.float32), device=dev, tag="origin")
    n = np.from_dlpack(a)
    b = sw.from_dlpack(n, tag="back")
    (entry,) = info_of(b, dev)
    assert entry["external"] and entry["alloc_size"] == 0
    b[3] = -3.0
    assert a[3] == -3.0 and n[3] == -3.0
    part = sw.from_dlpack(n[N // 2:], copy=False)  # inside the export too
    assert part[0] == N // 2
    wr = weakref.ref(n)
    del n
    gc.collect()
    assert wr() is not None  # kept by the imports
    if not can_spill(dev):  # host:0: no pressure to hold out against
        del b, part
        gc.collect()
        assert wr() is None
        return
    sw.set_memory_budget(2 * MiB, dev)
    others = [sw.zeros(N, device=dev) for _ in range(3)]
    assert not a.is_spilled and not b.is_spilled  # leased / external
    del b, part
    gc.collect()
    assert wr() is None  # the producer's deleter ran
    more = [sw.zeros(N, device=dev) for _ in range(2)]
    assert a.is_spilled  # the lease is gone: spillable again
    assert a[3] == -3.0
    sw.set_memory_budget(None, dev)
    del others, more


def test_empty_tensors(dev):
    for shape in [(0,), (3, 0), ()]:
        a = sw.zeros(shape, dtype="int16", device=dev)
        b = sw.from_dlpack(a.__dlpack__(), copy=False)
        assert b.shape == shape and b.dtype == np.int16
        c = sw.from_dlpack(np.zeros(shape, np.int16), device=dev,
                           copy=None)
        assert c.shape == shape


def test_capsules(dev):
    a = sw.asarray(np.arange(6, dtype=np.int32), device=dev, tag="cap")
    cap = a.__dlpack__(max_version=(1, 0))
    b = sw.from_dlpack(cap)
    assert capsule_name(cap) == "used_dltensor_versioned"
    assert b.numpy().tolist() == list(range(6))
    with pytest.raises(BufferError, match="already consumed"):
        sw.from_dlpack(cap)
    legacy = np.arange(3.0).__dlpack__()
    c = sw.from_dlpack(legacy, device=dev)
    assert capsule_name(legacy) == "used_dltensor"
    with pytest.raises(BufferError, match="already consumed"):
        sw.from_dlpack(legacy)
    assert c.numpy().tolist() == [0.0, 1.0, 2.0]


def test_refused_capsules_stay_with_their_producer(dev):
    x = np.arange(4, dtype=np.float32)
    cap = x.__dlpack__(max_version=(1, 0))
    tensor_field(cap, 0, ctypes.c_uint32).value = 2  # DLPack 2.x
    with pytest.raises(BufferError, match="newer"):
        sw.from_dlpack(cap, device=dev)
    assert capsule_name(cap) == "dltensor_versioned"
    tensor_field(cap, 0, ctypes.c_uint32).value = 1
    cap2 = x.__dlpack__()
    tensor_field(cap2, L_DTYPE, ctypes.c_uint8).value = 3  # opaque handle
    with pytest.raises(TypeError, match="DLPack element type"):
        sw.from_dlpack(cap2, device=dev)
    assert capsule_name(cap2) == "dltensor"
    tensor_field(cap, V_DTYPE + 2, ctypes.c_uint16).value = 4  # 4 lanes
    with pytest.raises(TypeError, match="lanes"):
        sw.from_dlpack(cap, device=dev)
    wr = weakref.ref(x)
    del x, cap, cap2
    gc.collect()
    assert wr() is None  # their destructors handed the tensors back


def test_read_only_memory_is_copied(dev):
    if not is_host_addressable(dev):
        pytest.skip("needs NumPy views of device memory")
    a = sw.asarray(np.arange(4, dtype=np.float32), device=dev)
    n = np.from_dlpack(a)
    n.flags.writeable = False
    cap = n.__dlpack__(max_version=(1, 0))
    assert tensor_field(cap, V_FLAGS, ctypes.c_uint64).value & 1
    with pytest.raises(BufferError, match="read-only"):
        sw.from_dlpack(cap, copy=False)
    b = sw.from_dlpack(cap)
    b[0] = 5.0
    assert a[0] == 0.0  # a copy
    del n, cap


# ---------------------------------------------------------------------------
# Other producers


class Producer:
    """A DLPack producer on an arbitrary device, backed by NumPy."""

    def __init__(self, x, device=(7, 0), host_copy=True, legacy=False):
        self.x, self.device = x, device
        self.host_copy, self.legacy = host_copy, legacy
        self.calls = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, **kw):
        if self.legacy and kw:
            raise TypeError("unexpected keyword argument")
        self.calls.append(dict(kw, stream=stream))
        if kw.get("dl_device") == (1, 0) and kw.get("copy"):
            if not self.host_copy:
                raise BufferError("no host copy here")
            return self.x.copy().__dlpack__()
        if self.device[0] == 1:
            return self.x.__dlpack__()
        raise BufferError("memory on a device the host cannot read")


def test_a_producer_on_a_device_spillway_does_not_manage(dev):
    p = Producer(np.arange(5, dtype=np.int64))  # kDLVulkan
    a = sw.from_dlpack(p, device=dev)
    assert a.numpy().tolist() == list(range(5))
    assert p.calls[-1]["dl_device"] == (1, 0) and p.calls[-1]["copy"]
    refusing = Producer(np.arange(5), host_copy=False)
    before = sw.memory_info(dev).allocs
    with pytest.raises(BufferError, match="does not manage") as e:
        sw.from_dlpack(refusing, device=dev)
    assert isinstance(e.value.__cause__, BufferError)
    with pytest.raises(BufferError, match="copy=False"):
        sw.from_dlpack(p, device=dev, copy=False)
    assert sw.memory_info(dev).allocs == before


def test_a_producer_from_before_dlpack_1(dev):
    p = Producer(np.arange(3, dtype=np.uint16), device=(1, 0), legacy=True)
    a = sw.from_dlpack(p, device=dev)
    assert a.dtype == np.uint16 and a.numpy().tolist() == [0, 1, 2]
    assert p.calls == [{"stream": None}]


def test_not_a_producer(dev):
    with pytest.raises(TypeError, match="__dlpack__"):
        sw.from_dlpack(3)
    with pytest.raises(TypeError, match="list"):
        sw.from_dlpack([1, 2, 3])
    with pytest.raises(TypeError):
        sw.from_dlpack(np.zeros(3), device=5)
    with pytest.raises(TypeError, match="unexpected keyword"):
        sw.from_dlpack(np.zeros(3), stream=1)


def test_asarray_takes_dlpack_producers(dev):
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.int16).reshape(2, 3)
    a = sw.asarray(t, device=dev)
    assert a.dtype == np.int16 and a.numpy().tolist() == t.tolist()
    t[0, 0] = 9
    assert a[0, 0] == 0  # asarray copies


def test_torch_round_trips(dev):
    torch = pytest.importorskip("torch")
    t = torch.arange(8, dtype=torch.float32)
    a = sw.from_dlpack(t, device=dev)
    assert a.numpy().tolist() == t.tolist()
    if is_host_addressable(dev):
        back = torch.from_dlpack(a)  # the device's memory, leased
        back[0] = 42.0
        assert a[0] == 42.0
        again = sw.from_dlpack(back)  # the export, handed back: no copy
        again[1] = -1.0
        assert back[1] == -1.0
        del back, again
    for dt in (torch.bool, torch.int8, torch.uint8, torch.float16,
               torch.bfloat16, torch.complex64):
        x = torch.ones(3, dtype=dt)
        y = sw.from_dlpack(x, device=dev)
        assert str(y.dtype) == str(dt).split(".")[1]


# ---------------------------------------------------------------------------
# Export on every device


def test_export_device_and_streams(dev):
    a = sw.zeros(4, device=dev)
    kind, idx = a.__dlpack_device__()
    expected = {"sim": 1, "host": 1, "opencl": 4, "cuda": 2, "hip": 10,
                "ze": 14}[dev.name.split(":")[0]]
    assert kind == expected and idx == int(dev.name.split(":")[1]) * \
        (kind != 1)
    if kind == 1:
        with pytest.raises(BufferError, match="stream"):
            a.__dlpack__(stream=1)
    else:
        cap = a.__dlpack__(stream=7)  # a consumer stream: data is ready
        assert capsule_name(cap) == "dltensor"
        del cap
        with pytest.raises(TypeError, match="stream"):
            a.__dlpack__(stream="s")
    if kind == 2:
        with pytest.raises(BufferError, match="ambiguous"):
            a.__dlpack__(stream=0)
    with pytest.raises(BufferError, match="cannot export"):
        a.__dlpack__(dl_device=(kind, idx + 1))


def test_export_leases_on_every_device(dev):
    """A capsule holds a lease on any device: no spill while it lives."""
    a = sw.asarray(np.full(N, 2.0, np.float32), device=dev, tag="exported")
    cap = a.__dlpack__(max_version=(1, 0))
    (entry,) = info_of(a, dev)
    assert entry["leases"] == 1 and entry["exposed"]
    if not can_spill(dev):  # host:0: the lease is all there is to see
        del cap
        gc.collect()
        (entry,) = info_of(a, dev)
        assert entry["leases"] == 0
        return
    sw.set_memory_budget(2 * MiB, dev)
    others = [sw.zeros(N, device=dev) for _ in range(3)]
    assert not a.is_spilled
    del cap
    gc.collect()
    more = [sw.zeros(N, device=dev) for _ in range(2)]
    assert a.is_spilled
    sw.set_memory_budget(None, dev)
    del others, more


def test_copy_exports(dev):
    a = sw.asarray(np.arange(4, dtype=np.float32), device=dev, tag="src")
    kind, idx = a.__dlpack_device__()
    cap = a.__dlpack__(max_version=(1, 0), copy=True)
    assert tensor_field(cap, V_FLAGS, ctypes.c_uint64).value & 2  # copied
    assert tensor_field(cap, V_DEVICE, ctypes.c_int32).value == kind
    b = sw.from_dlpack(cap, device=dev)
    b[0] = 9.0
    assert a[0] == 0.0
    host = np.from_dlpack(a, device="cpu", copy=True)
    assert host.tolist() == [0.0, 1.0, 2.0, 3.0]
    del cap, b


def test_reexport_of_imported_memory_keeps_the_producer(dev):
    if not is_host_addressable(dev):
        pytest.skip("needs NumPy views of device memory")
    a = sw.asarray(np.arange(4, dtype=np.float32), device=dev)
    n = np.from_dlpack(a)
    b = sw.from_dlpack(n)  # external
    wr = weakref.ref(n)
    del n
    m = np.from_dlpack(b)  # an export of the external buffer
    del b
    gc.collect()
    assert wr() is not None and m.tolist() == [0.0, 1.0, 2.0, 3.0]
    del m
    gc.collect()
    assert wr() is None


def test_opencl_capsule_round_trip(dev):
    if not dev.name.startswith("opencl"):
        pytest.skip("OpenCL exports a cl_mem")
    a = sw.asarray(np.arange(8, dtype=np.float32), device=dev, tag="ocl")
    cap = a.__dlpack__()
    b = sw.from_dlpack(cap)  # its own cl_mem: wrapped, not copied
    assert b.device is dev and b.numpy().tolist() == list(range(8))
    b.fill(3.0)
    assert a.numpy().tolist() == [3.0] * 8
    with pytest.raises(RuntimeError):
        np.from_dlpack(a)  # NumPy imports CPU memory only
    assert np.from_dlpack(a, device="cpu").tolist() == [3.0] * 8
    del b


def test_cuda_through_the_fake_driver(tmp_path):
    """On CUDA an export is kDLCUDA device memory under a lease, and a
    kDLCUDA tensor of the same device is imported without a copy.  Run
    against the CPU stand-in for libcuda.so.1 (tests/cuda/fake_libcuda.c),
    in a subprocess: the driver library is chosen when the backend loads."""
    import os
    import pathlib
    import subprocess
    import sys
    import textwrap
    build = pathlib.Path(sw.__file__).resolve().parents[2]
    fake = build / "tests" / "c" / "libcuda_fake.so"
    nvrtc = build / "tests" / "c" / "libnvrtc_fake.so"  # goes with it
    if not fake.exists() or not nvrtc.exists():
        pytest.skip(f"no {fake} or {nvrtc}")
    where = os.path.dirname(os.path.dirname(sw.__file__))
    code = textwrap.dedent(f"""
        import gc, sys
        sys.path.insert(0, {where!r})
        import numpy as np
        import spillway as sw
        d = sw.Device("cuda:0")
        a = sw.asarray(np.arange(4, dtype=np.float32), device=d, tag="a")
        assert a.__dlpack_device__() == (2, 0)
        cap = a.__dlpack__(stream=1, max_version=(1, 0))
        b = sw.from_dlpack(cap)
        snap = {{s["tag"]: s for s in sw.memory_snapshot(d)}}
        assert snap["a"]["leases"] == 1
        assert snap["dlpack import"]["external"]
        b.fill(2.0)
        assert a.numpy().tolist() == [2.0] * 4
        try:
            a.__dlpack__(stream=0)
            raise SystemExit("stream=0 accepted")
        except BufferError:
            pass
        assert np.from_dlpack(a, device="cpu").tolist() == [2.0] * 4
        c = sw.from_dlpack(a.__dlpack__(copy=True))
        c.fill(5.0)
        assert a[0] == 2.0
        del b, c, cap
        gc.collect()
        assert sw.memory_info(d).in_use == 512
        print("ok")
    """)
    env = dict(os.environ, SPILLWAY_CUDA_LIBRARY=str(fake),
               SPILLWAY_NVRTC_LIBRARY=str(nvrtc))
    env.pop("SPILLWAY_DEVICE", None)
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("kind,dl_type,libs", [
    ("hip", 10, {"SPILLWAY_HIP_LIBRARY": "libamdhip64_fake.so",
                 "SPILLWAY_HIPRTC_LIBRARY": "libhiprtc_fake.so"}),
    ("ze", 14, {"SPILLWAY_ZE_LIBRARY": "libze_loader_fake.so"}),
])
def test_hip_and_ze_through_the_fake_drivers(kind, dl_type, libs):
    """HIP memory is exported as kDLROCM and Level Zero memory as kDLOneAPI
    (device addresses, under a lease).  A kDLROCM tensor of the device is
    imported without a copy (one primary context per device, as on CUDA);
    on Level Zero only the device's own exports are (a USM pointer of
    another context is not ours to use), which the capsule round trip
    here is.  Run against the CPU stand-ins, in a subprocess."""
    import os
    import pathlib
    import subprocess
    import sys
    import textwrap
    build = pathlib.Path(sw.__file__).resolve().parents[2]
    env = dict(os.environ)
    env.pop("SPILLWAY_DEVICE", None)
    for var, lib in libs.items():
        path = build / "tests" / "c" / lib
        if not path.exists():
            pytest.skip(f"no {path}")
        env[var] = str(path)
    where = os.path.dirname(os.path.dirname(sw.__file__))
    code = textwrap.dedent(f"""
        import gc, sys
        sys.path.insert(0, {where!r})
        import numpy as np
        import spillway as sw
        d = sw.Device("{kind}:0")
        a = sw.asarray(np.arange(4, dtype=np.float32), device=d, tag="a")
        assert a.__dlpack_device__() == ({dl_type}, 0), a.__dlpack_device__()
        cap = a.__dlpack__(max_version=(1, 0))
        b = sw.from_dlpack(cap)
        assert b.device == d
        snap = {{s["tag"]: s for s in sw.memory_snapshot(d)}}
        assert snap["a"]["leases"] == 1
        assert snap["dlpack import"]["external"]
        b[1] = 7.0
        assert a.numpy().tolist() == [0.0, 7.0, 2.0, 3.0]
        assert np.from_dlpack(a, device="cpu").tolist() == [0.0, 7.0, 2.0, 3.0]
        c = sw.from_dlpack(a.__dlpack__(copy=True))
        c[0] = 5.0
        assert a[0] == 0.0
        del b, c, cap
        gc.collect()
        assert sw.memory_info(d).in_use == 512
        del a
        gc.collect()
        assert sw.memory_info(d).in_use == 0
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", \
        out.stdout + out.stderr
