"""spillway under PyTorch and CuPy on a real GPU, and its peers, for
bench/gpu/check.sh.  Each mode runs in its own process (a framework's
allocator is chosen before its first CUDA allocation) and prints
"RESULT name=value" lines, or "NOTE ..." when what it needs is absent.
Installs nothing.

    python3 bench/gpu/plugin_bench.py cycles torch default
    python3 bench/gpu/plugin_bench.py cycles torch spillway
    python3 bench/gpu/plugin_bench.py cycles cupy default|spillway
    python3 bench/gpu/plugin_bench.py latency torch-spillway
    python3 bench/gpu/plugin_bench.py wait-cpu
    python3 bench/gpu/plugin_bench.py managed

cycles: the torch-spyre scenario on CUDA.  A loop allocates 64 MiB tensors
that only reference cycles hold, with the collector disabled (as a busy
training loop's generation-2 collections are rare), under a limit of
LIMIT bytes: with the framework's own allocator (PyTorch:
set_per_process_memory_fraction; CuPy: the default pool's set_limit) it
runs out of memory, since nothing collects the cycles; with spillway's
plug-in and a budget of the same bytes it completes, the collector run by
spillway's pressure callback before an allocation fails.

latency: torch.empty of 1 MiB with spillway's plug-in (compare
alloc_latency.py's torch_empty_ns, PyTorch's caching allocator).

wait-cpu: host CPU time spent while waiting about a second for queued
device work (sw.synchronize): blocking-sync events sleep, spinning would
burn a core (fraction ~1.0).

managed: the same pipeline -- 16 chunks of 64 MiB (1 GiB live), each step
y_i <- 1.0001 * y_{i+1} + y_i around the ring -- under spillway with a
256 MiB budget, and with CuPy on managed memory (cudaMallocManaged) with
the device filled by a blocker allocation so that only the same 256 MiB
(plus slack) is free: the driver's page migration against spillway's
spilling.  The figure is managed time / spillway time (goal >= 2).
"""

import gc
import os
import sys
import time

# SPILLWAY_CHECK_SCALE=N divides the sizes (the dry run on sim:0).
SCALE = max(1, int(os.environ.get("SPILLWAY_CHECK_SCALE", "1")))
LIMIT = (2 << 30) // SCALE   # the cycles' memory limit
CHUNK = (64 << 20) // SCALE
STEPS = 200                  # 200 x 64 MiB = 12.5 GiB allocated in all


def note(msg):
    print(f"NOTE {msg}")
    return 0


def _sw():
    import spillway
    return spillway


# ---------------------------------------------------------------------------
# cycles
# ---------------------------------------------------------------------------

def cycles_torch(mode):
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return note(f"torch not importable: {e}")
    if not torch.cuda.is_available():
        return note("torch has no CUDA device")
    if mode == "spillway":
        import spillway.torch
        spillway.torch.use_spillway_allocator(0, budget=LIMIT)
    else:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(LIMIT / total, 0)
    gc.disable()
    t0 = time.perf_counter()
    done = 0
    try:
        for i in range(STEPS):
            node = {"t": torch.empty(CHUNK, dtype=torch.uint8, device="cuda")}
            node["t"].fill_(i & 0xFF)
            node["self"] = node
            del node
            done = i + 1
        torch.cuda.synchronize()
        outcome = "completed"
    except torch.OutOfMemoryError:
        outcome = f"OOM_at_{done}"
    dt = time.perf_counter() - t0
    gc.enable()
    extra = ""
    if mode == "spillway":
        import spillway.torch
        st = spillway.torch.memory_stats(0)
        extra = f" gc_runs={st['spillway.gc_runs']} retries={st['num_alloc_retries']}"
    print(f"torch {mode}: {outcome} after {done} of {STEPS} allocations, "
          f"{dt:.2f} s{extra}")
    print(f"RESULT torch_{mode}_cycles={outcome}")
    return 0


def cycles_cupy(mode):
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        return note(f"cupy not usable: {e}")
    if mode == "spillway":
        import spillway.cupy
        spillway.cupy.use_spillway_allocator(0, budget=LIMIT)
    else:
        cupy.get_default_memory_pool().set_limit(size=LIMIT)
    gc.disable()
    t0 = time.perf_counter()
    done = 0
    try:
        for i in range(STEPS):
            node = {"a": cupy.empty(CHUNK, dtype=cupy.uint8)}
            node["a"].fill(i & 0xFF)
            node["self"] = node
            del node
            done = i + 1
        cupy.cuda.Device().synchronize()
        outcome = "completed"
    except (cupy.cuda.memory.OutOfMemoryError, MemoryError):
        outcome = f"OOM_at_{done}"
    dt = time.perf_counter() - t0
    gc.enable()
    print(f"cupy {mode}: {outcome} after {done} of {STEPS} allocations, "
          f"{dt:.2f} s")
    print(f"RESULT cupy_{mode}_cycles={outcome}")
    return 0


# ---------------------------------------------------------------------------
# latency
# ---------------------------------------------------------------------------

def latency_torch_spillway():
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return note(f"torch not importable: {e}")
    if not torch.cuda.is_available():
        return note("torch has no CUDA device")
    import spillway.torch
    spillway.torch.use_spillway_allocator(0)
    dev = torch.device("cuda:0")
    n = 50_000
    for _ in range(1000):
        torch.empty(1 << 20, dtype=torch.uint8, device=dev)
    t0 = time.perf_counter()
    for _ in range(n):
        torch.empty(1 << 20, dtype=torch.uint8, device=dev)
    ns = (time.perf_counter() - t0) / n * 1e9
    torch.cuda.synchronize()
    print(f"torch.empty 1 MiB through spillway's plug-in: {ns:.0f} ns")
    print(f"RESULT torch_spillway_empty_ns={ns:.0f}")
    return 0


# ---------------------------------------------------------------------------
# wait-cpu
# ---------------------------------------------------------------------------

def wait_cpu(spec):
    sw = _sw()
    dev = sw.Device(spec)
    n = (1 << 28) // SCALE  # 1 GiB of float32 each
    a = sw.full((n,), 1.0, dtype="float32", device=dev)
    b = sw.full((n,), 2.0, dtype="float32", device=dev)
    c = sw.empty((n,), dtype="float32", device=dev)
    sw.synchronize(dev)
    # About a second of queued work on an H200 (3 GiB of traffic per add).
    for _ in range(1000 // SCALE):
        sw.add(a, b, out=c)
    w0, c0 = time.perf_counter(), time.process_time()
    sw.synchronize(dev)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    print(f"waited {wall:.3f} s for queued work, host CPU {cpu:.3f} s")
    print(f"RESULT wait_wall_s={wall:.3f}")
    print(f"RESULT wait_cpu_fraction={cpu / wall if wall > 0 else 0:.3f}")
    return 0


# ---------------------------------------------------------------------------
# managed
# ---------------------------------------------------------------------------

K = 16
BUDGET = (256 << 20) // SCALE
MSTEPS = 64


def pipeline_spillway(spec):
    sw = _sw()
    dev = sw.Device(spec)
    n = CHUNK // 4
    ys = [sw.full((n,), float(i), dtype="float32", device=dev)
          for i in range(K)]
    sw.set_memory_budget(BUDGET, device=dev)
    sw.synchronize(dev)
    t0 = time.perf_counter()
    for s in range(MSTEPS):
        i = s % K
        sw.axpy(1.0001, ys[(i + 1) % K], ys[i])
    sw.synchronize(dev)
    dt = time.perf_counter() - t0
    check = sum(sw.sum(y) for y in ys)
    info = sw.memory_info(dev)
    del ys
    sw.set_memory_budget(None, device=dev)
    print(f"spillway: {MSTEPS} steps over {K} x {CHUNK >> 20} MiB under a "
          f"{BUDGET >> 20} MiB budget: {dt:.3f} s, {info.spills} spills, "
          f"{info.restores} restores, checksum {check:.6e}")
    return dt, check


def pipeline_managed():
    import cupy
    free, _ = cupy.cuda.runtime.memGetInfo()
    slack = 64 << 20
    blocker = cupy.cuda.runtime.malloc(max(free - BUDGET - slack, 0))
    try:
        pool = cupy.cuda.MemoryPool(cupy.cuda.malloc_managed)
        cupy.cuda.set_allocator(pool.malloc)
        n = CHUNK // 4
        ys = [cupy.full((n,), float(i), dtype=cupy.float32) for i in range(K)]
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for s in range(MSTEPS):
            i = s % K
            ys[i] += cupy.float32(1.0001) * ys[(i + 1) % K]
        cupy.cuda.Device().synchronize()
        dt = time.perf_counter() - t0
        check = float(sum(float(y.sum(dtype=cupy.float64)) for y in ys))
        del ys
        pool.free_all_blocks()
        cupy.cuda.set_allocator(None)
    finally:
        cupy.cuda.runtime.free(blocker)
    print(f"managed memory (CuPy, device filled to leave "
          f"{(BUDGET + slack) >> 20} MiB): {dt:.3f} s, checksum {check:.6e}")
    return dt, check


def managed(spec):
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        return note(f"cupy not usable (managed memory is driven through "
                    f"it): {e}")
    ts, cs = pipeline_spillway(spec)
    tm, cm = pipeline_managed()
    print(f"RESULT managed_s={tm:.3f}")
    print(f"RESULT managed_spillway_s={ts:.3f}")
    print(f"RESULT managed_over_spillway={tm / ts if ts > 0 else 0:.2f}")
    # The same arithmetic (float32 a*x + y, rounded twice), so the same sums.
    print(f"RESULT managed_same_result={'yes' if cm == cs else 'no'}")
    return 0


# ---------------------------------------------------------------------------
# pinned: the frameworks' own kernels on spillway's memory (issue 25)
# ---------------------------------------------------------------------------

def pinned_kernels(spec, fw):
    """CuPy's or Numba's kernels on the __cuda_array_interface__ views of
    spillway.pinned, on spillway's queue (its stream, from the views'
    "stream"), in a pipeline under a budget of a quarter of its live set:
    every step's result checked against NumPy, spills counted, and no
    array spilled while pinned."""
    import numpy as np
    try:
        if fw == "cupy":
            import cupy as cp
        else:
            from numba import cuda
    except ImportError as e:
        return note(f"{fw} not importable: {e}")
    sw = _sw()
    dev = sw.Device(spec)
    q = sw.Queue(dev)
    n = (4 << 20) // SCALE
    layers = 8
    rng = np.random.default_rng(25)
    ws = [rng.standard_normal(n).astype(np.float32) for _ in range(layers)]
    arrays = [sw.asarray(w, device=dev) for w in ws]
    xs = [sw.full(n, 1.0, dtype="float32", device=dev)]
    sw.set_memory_budget(2 * (layers + 1) * n * 4 // 4, dev)
    spills0 = sw.memory_info(dev).spills
    if fw == "numba":
        @cuda.jit
        def layer(x, w, y):
            i = cuda.grid(1)
            if i < y.size:
                v = x[i] * w[i] + np.float32(0.5)
                y[i] = v if v > 0 else np.float32(0)
    t0 = time.perf_counter()
    for i in range(layers):
        y = sw.empty(n, dtype="float32", device=dev)
        with sw.pinned(xs[i], arrays[i], y, queue=q) as (vx, vw, vy):
            assert vy.__cuda_array_interface__["stream"] == q.native
            for a in (xs[i], arrays[i], y):
                assert not a.is_spilled
            if fw == "cupy":
                stream = cp.cuda.ExternalStream(q.native)
                with stream:
                    x, w, o = (cp.asarray(v) for v in (vx, vw, vy))
                    cp.maximum(x * w + np.float32(0.5), np.float32(0),
                               out=o)
            else:
                stream = cuda.external_stream(q.native)
                x, w, o = (cuda.as_cuda_array(v) for v in (vx, vw, vy))
                layer[(n + 255) // 256, 256, stream](x, w, o)
        xs.append(y)
    q.synchronize()
    dt = time.perf_counter() - t0
    spills = sw.memory_info(dev).spills - spills0
    ref = np.full(n, 1.0, np.float32)
    ok = True
    for i in range(layers):
        ref = np.maximum(ref * ws[i] + np.float32(0.5), np.float32(0))
        got = xs[i + 1].numpy()
        ok &= np.allclose(got, ref, rtol=1e-5, atol=1e-6)
    sw.set_memory_budget(None, dev)
    print(f"RESULT {fw}_pinned_ok={'yes' if ok else 'no'}")
    print(f"RESULT {fw}_pinned_spills={spills}")
    print(f"RESULT {fw}_pinned_ms={dt * 1e3:.1f}")
    return 0 if ok and spills > 0 else 1


def main(argv):
    spec = os.environ.get("SPILLWAY_CHECK_DEVICE", "cuda:0")
    if len(argv) < 2:
        print(__doc__)
        return 2
    what = argv[1]
    if what == "cycles" and len(argv) == 4:
        fw, mode = argv[2], argv[3]
        return cycles_torch(mode) if fw == "torch" else cycles_cupy(mode)
    if what == "latency":
        return latency_torch_spillway()
    if what == "wait-cpu":
        return wait_cpu(spec)
    if what == "managed":
        return managed(spec)
    if what == "pinned" and len(argv) == 3:
        return pinned_kernels(spec, argv[2])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
