#!/usr/bin/env python3
"""bench_python.py -- the cost of spillway's Python layer, as ratios against
baselines measured in the same run (absolute times on shared machines mean
little; ratios do).

  1. empty() + release of a small array (1 KiB), against bytearray() of the
     same size: the floor for "allocate a Python object with a buffer and
     free it";
  2. memory_info(), against gc.get_count() (a C call returning a tuple):
     the floor for "ask C for numbers";
  and, for context, zeros() + release, a[i], sum() of the small array and
  add() of two small arrays.

Each figure is the best of several repeats of a timed loop, in ns per call,
minus nothing (the loop's own cost is in the baseline too).

Usage: bench_python.py [--build DIR] [--quick]
  DIR: the build directory whose python/ holds the package (default
  $SPILLWAY_BUILD_DIR, else build-release, else build); --quick: fewer
  iterations.
"""

import argparse
import gc
import pathlib
import platform
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchlib import best_ns, import_spillway  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", help="build directory (holds python/)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sw, build = import_spillway(args.build, "bench_python")
    n = 20000 if args.quick else 200000
    repeat = 5 if args.quick else 9

    dev = sw.Device()
    shape, nbytes = (256,), 1024
    empty, zeros, bytearray_ = sw.empty, sw.zeros, bytearray
    a, b = sw.zeros(shape), sw.zeros(shape)
    memory_info, get_count, ssum, add = (sw.memory_info, gc.get_count,
                                         sw.sum, sw.add)

    def loop_empty(k):
        for _ in range(k):
            empty(shape)

    def loop_zeros(k):
        for _ in range(k):
            zeros(shape)

    def loop_bytearray(k):
        for _ in range(k):
            bytearray_(nbytes)

    def loop_meminfo(k):
        for _ in range(k):
            memory_info()

    def loop_meminfo_dev(k):
        for _ in range(k):
            memory_info(dev)

    def loop_get_count(k):
        for _ in range(k):
            get_count()

    def loop_getitem(k):
        for _ in range(k):
            a[7]

    def loop_list_getitem(k, lst=[0.0] * 256):
        for _ in range(k):
            lst[7]

    def loop_sum(k):
        for _ in range(k):
            ssum(a)

    def loop_add(k):
        for _ in range(k):
            add(a, b)

    gc.disable()  # no collections inside the timed loops
    rows = []

    def measure(name, loop, base_name, base_loop, count=n):
        loop(min(count, 1000))  # warm: caches, the device's cache block
        base_loop(min(count, 1000))
        t = best_ns(loop, count, repeat)
        tb = best_ns(base_loop, count, repeat)
        rows.append((name, t, base_name, tb, t / tb))

    measure("empty(256 float32) + release", loop_empty,
            "bytearray(1024) + release", loop_bytearray)
    measure("memory_info()", loop_meminfo, "gc.get_count()", loop_get_count)
    measure("memory_info(device)", loop_meminfo_dev, "gc.get_count()",
            loop_get_count)
    measure("zeros(256 float32) + release", loop_zeros,
            "bytearray(1024) + release", loop_bytearray)
    measure("a[7] (host read of one element)", loop_getitem,
            "list[7]", loop_list_getitem)
    measure("sum(a) (on the device, waits)", loop_sum,
            "bytearray(1024) + release", loop_bytearray, count=n // 10)
    measure("add(a, b) + release of the result", loop_add,
            "bytearray(1024) + release", loop_bytearray, count=n // 4)
    gc.enable()

    print(f"spillway {sw.__version__} Python layer, {build.name}/python, "
          f"device {dev.name}, Python {platform.python_version()}, "
          f"{n} iterations, best of {repeat}")
    w = max(len(r[0]) for r in rows)
    wb = max(len(r[2]) for r in rows)
    print(f"{'operation':<{w}}  {'ns':>8}  {'baseline':<{wb}}  {'ns':>8}  "
          f"{'ratio':>7}")
    for name, t, bname, tb, ratio in rows:
        print(f"{name:<{w}}  {t:8.0f}  {bname:<{wb}}  {tb:8.0f}  "
              f"{ratio:6.1f}x")
    del a, b
    if sw.memory_info(dev).in_use != 0:
        sys.exit("bench_python: device memory left in use")


if __name__ == "__main__":
    main()
