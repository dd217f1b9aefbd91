"""Cached allocation latency of PyTorch's and CuPy's allocators, for
comparison with spillway's (bench/gpu/spill_bench.c).

    python3 bench/gpu/alloc_latency.py [torch|cupy|all]

For each library importable here with a CUDA device, times an allocation of
1 MiB that is dropped at once (torch.empty / cupy.empty: an alloc + free
pair served by the caching allocator after the first), and the cost of an
empty Python call, which is part of every figure above (spillway's is
measured from C, without an interpreter).  Prints "RESULT name=value" lines
(nanoseconds per pair) for bench/gpu/check.sh, or "NOTE ..." when a library
is not there.  Installs nothing.
"""

import sys
import time

N = 100_000
NBYTES = 1 << 20


def per_call_ns(fn, n=N):
    for _ in range(1000):  # warm the allocator's cache and the interpreter
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e9


def bench_torch():
    try:
        import torch
    except Exception as e:  # noqa: BLE001 -- any import failure means "absent"
        print(f"NOTE torch not importable: {e.__class__.__name__}: {e}")
        return
    if not torch.cuda.is_available():
        print("NOTE torch has no CUDA device")
        return
    dev = torch.device("cuda:0")
    torch.empty(NBYTES, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    ns = per_call_ns(lambda: torch.empty(NBYTES, dtype=torch.uint8, device=dev))
    torch.cuda.synchronize()
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"RESULT torch_empty_ns={ns:.0f}")


def bench_cupy():
    try:
        import cupy
    except Exception as e:  # noqa: BLE001
        print(f"NOTE cupy not importable: {e.__class__.__name__}: {e}")
        return
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            print("NOTE cupy sees no CUDA device")
            return
    except Exception as e:  # noqa: BLE001
        print(f"NOTE cupy cannot use CUDA: {e}")
        return
    with cupy.cuda.Device(0):
        cupy.empty((NBYTES,), dtype=cupy.uint8)
        cupy.cuda.Device(0).synchronize()
        ns = per_call_ns(lambda: cupy.empty((NBYTES,), dtype=cupy.uint8))
        cupy.cuda.Device(0).synchronize()
    print(f"cupy {cupy.__version__} (default MemoryPool)")
    print(f"RESULT cupy_empty_ns={ns:.0f}")


def main(argv):
    which = argv[1] if len(argv) > 1 else "all"
    print(f"RESULT python_call_ns={per_call_ns(lambda: None):.0f}")
    if which in ("torch", "all"):
        bench_torch()
    if which in ("cupy", "all"):
        bench_cupy()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
