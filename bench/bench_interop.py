#!/usr/bin/env python3
"""bench_interop.py -- arrays that travel: the cost of spillway's element
types and of pickling, as ratios against baselines measured in the same
run (absolute times on shared machines mean little; ratios do).

  1. empty() + release of a small array (1 KiB) for every element type,
     against the same for float32 (the dtype name is parsed and the
     element size looked up on every call; the ratio says whether any type
     costs more) and against bytearray(1024);
  2. pickle.dumps of a 64 MiB array, resident and spilled, in band and
     with protocol 5's out-of-band buffers, against pickle.dumps of a
     numpy.ndarray of the same size and, out of band (where NumPy hands
     out its own memory and costs nothing), against one host copy
     (ndarray.copy()), the floor for device memory: the array is read once
     into the buffer pickle writes (a spilled one from its host copy,
     without a restore, which the run checks);
  3. pickle.loads of the same, against NumPy's.

Usage: bench_interop.py [--build DIR] [--quick]
  DIR: the build directory whose python/ holds the package (default
  $SPILLWAY_BUILD_DIR, else build-release, else build); --quick: fewer
  iterations.
"""

import argparse
import gc
import pathlib
import pickle
import platform
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchlib import best_ns, import_spillway  # noqa: E402

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
          "uint32", "uint64", "float16", "bfloat16", "float32", "float64",
          "complex64", "complex128"]
MiB = 1 << 20


def best_s(fn, repeat):
    """Best seconds of fn() over repeat runs."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", help="build directory (holds python/)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sw, build = import_spillway(args.build, "bench_interop")
    import numpy as np
    n = 20000 if args.quick else 200000
    repeat = 5 if args.quick else 9
    big_repeat = 3 if args.quick else 7

    dev = sw.Device()
    empty, bytearray_ = sw.empty, bytearray
    gc.disable()  # no collections inside the timed loops

    def loop_bytearray(k):
        for _ in range(k):
            bytearray_(1024)

    def loop_empty(dt, count):
        def loop(k):
            for _ in range(k):
                empty(count, dt)
        return loop

    rows = []
    base_loop = loop_empty("float32", 256)
    base_loop(1000)
    t_f32 = best_ns(base_loop, n, repeat)
    t_ba = best_ns(loop_bytearray, n, repeat)
    for dt in DTYPES:
        itemsize = 2 if dt == "bfloat16" else np.dtype(dt).itemsize
        loop = loop_empty(dt, max(1, 1024 // itemsize))
        loop(1000)
        t = best_ns(loop, n, repeat)
        rows.append((f"empty(1 KiB {dt}) + release", t, t / t_f32,
                     t / t_ba))

    # Pickling 64 MiB: resident, then spilled (a budget below what is held
    # spills at once), against NumPy in the same run.
    count = 64 * MiB // 4
    ref = np.arange(count, dtype=np.float32)
    a = sw.asarray(ref, device=dev, tag="pickled")
    sw.synchronize(dev)

    def dumps(obj, oob):
        if oob:
            bufs = []
            return pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
        return pickle.dumps(obj, protocol=5)

    big = []

    def measure_big(name, fn, base_name, base_fn):
        fn()
        base_fn()
        t = best_s(fn, big_repeat)
        tb = best_s(base_fn, big_repeat)
        big.append((name, t, base_name, tb, t / tb))

    def both(state):
        measure_big(f"pickle.dumps(a), {state}, in band",
                    lambda: dumps(a, False),
                    "pickle.dumps(ndarray), in band",
                    lambda: dumps(ref, False))
        measure_big(f"pickle.dumps(a), {state}, out of band",
                    lambda: dumps(a, True),
                    "pickle.dumps(ndarray), out of band",
                    lambda: dumps(ref, True))
        # Out of band NumPy hands out its own memory; device memory takes
        # one copy to the host, whose floor is a host copy.
        measure_big(f"pickle.dumps(a), {state}, out of band",
                    lambda: dumps(a, True), "ndarray.copy()",
                    lambda: ref.copy())

    both("resident")
    data_sw = pickle.dumps(a, protocol=5)
    data_np = pickle.dumps(ref, protocol=5)
    measure_big("pickle.loads (in band)", lambda: pickle.loads(data_sw),
                "pickle.loads, ndarray", lambda: pickle.loads(data_np))
    del data_sw, data_np
    gc.collect()

    sw.set_memory_budget(MiB, dev)
    assert a.is_spilled, "bench_interop: the array did not spill"
    restores = sw.memory_info(dev).restores
    both("spilled")
    if not a.is_spilled or sw.memory_info(dev).restores != restores:
        sys.exit("bench_interop: pickling restored the spilled array")
    sw.set_memory_budget(None, dev)
    gc.enable()

    print(f"spillway {sw.__version__} element types and pickling, "
          f"{build.name}/python, device {dev.name}, Python "
          f"{platform.python_version()}, NumPy {np.__version__}, "
          f"{n} iterations, best of {repeat}")
    w = max(len(r[0]) for r in rows)
    print(f"{'operation':<{w}}  {'ns':>7}  {'/ float32':>9}  "
          f"{'/ bytearray(1024)':>17}")
    for name, t, r1, r2 in rows:
        print(f"{name:<{w}}  {t:7.0f}  {r1:8.2f}x  {r2:16.2f}x")
    print()
    w = max(len(r[0]) for r in big)
    wb = max(len(r[2]) for r in big)
    print(f"64 MiB of float32 (best of {big_repeat}):")
    print(f"{'operation':<{w}}  {'ms':>7}  {'baseline':<{wb}}  {'ms':>7}  "
          f"{'ratio':>8}")
    for name, t, bname, tb, ratio in big:
        print(f"{name:<{w}}  {t * 1e3:7.2f}  {bname:<{wb}}  {tb * 1e3:7.2f}  "
              f"{ratio:7.2f}x")
    del a
    gc.collect()
    if sw.memory_info(dev).in_use != 0 or sw.memory_info(dev).spilled != 0:
        sys.exit("bench_interop: device memory left in use")


if __name__ == "__main__":
    main()
