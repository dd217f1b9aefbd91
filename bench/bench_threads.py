#!/usr/bin/env python3
"""bench_threads.py -- small-array calls from 1 and 2 threads: what the
free-threaded build gains, as ratios within one run.

Two workloads on sim:0, each thread with arrays of its own (256 float32):
  empty    a = sw.empty(256); del a      (an allocation and its release)
  add      c = sw.add(a, b); del c       (a kernel, its output made and freed)
Throughput is the calls of all threads over the wall time of the slowest,
best of 5 runs; 2 threads start together at a barrier.

The machine's own ceiling is measured in the same run: a pure-Python loop
(no spillway, no shared object) from 1 and 2 threads.  Its 2/1 ratio is
what any Python workload can reach on these cores (on 3.13t; with the GIL
it stays near 1).  The peer, NumPy's own np.empty(256) and np.add of
small arrays, runs beside it: spillway's ratios read against both.

Run under any interpreter (the GIL build's or 3.13t's); `make bench` runs
it under both, on their own release builds, and prints the comparison
(--compare GIL_JSON FT_JSON): the goals are >= 1.7x the 1-thread
throughput at 2 threads on 3.13t, and a 1-thread cost on 3.13t within
1.3x of the GIL build's.  bench_lock (C) measures the device lock alone:
2 threads on one device against 2 on two devices.

Usage: bench_threads.py [--build DIR] [--quick] [--json FILE]
       bench_threads.py --compare GIL_JSON FT_JSON
"""

import argparse
import json
import pathlib
import sys
import sysconfig
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchlib import import_spillway  # noqa: E402


KINDS = ("loop", "numpy-empty", "numpy-add", "empty", "add")


def measure(sw, dev, kind, threads, n, runs=5):
    """Calls per second, all threads together: the best of runs."""
    best = 0.0
    for _ in range(runs):
        barrier = threading.Barrier(threads)
        start, done = [], []

        # Each kind's loop is written out in place: a helper called per
        # iteration would add a Python call's own cost (and its sharing
        # between threads) to every figure.
        def work():
            if kind == "loop":
                # The ceiling: 20 additions per call, thread-local values.
                barrier.wait()
                start.append(time.perf_counter())
                x = 0
                for i in range(n):
                    for j in range(20):
                        x += j
                done.append(time.perf_counter())
                return
            if kind.startswith("numpy"):
                # The peer: NumPy's own small arrays, the same calls.
                import numpy as np
                a = np.ones(256, np.float32)
                b = np.ones(256, np.float32)
                barrier.wait()
                start.append(time.perf_counter())
                if kind == "numpy-empty":
                    for _ in range(n):
                        x = np.empty(256, np.float32)
                        del x
                else:
                    for _ in range(n):
                        c = np.add(a, b)
                        del c
                done.append(time.perf_counter())
                return
            a = sw.ones(256, device=dev)
            b = sw.ones(256, device=dev)
            barrier.wait()
            start.append(time.perf_counter())
            if kind == "empty":
                for _ in range(n):
                    x = sw.empty(256, device=dev)
                    del x
            else:
                for _ in range(n):
                    c = sw.add(a, b)
                    del c
            done.append(time.perf_counter())

        ts = [threading.Thread(target=work) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        # From the first thread's start to the last one's end (not the
        # main thread's clock: with the GIL it may not run in between).
        best = max(best, threads * n / (max(done) - min(start)))
    sw.synchronize(dev)
    return best


def run(args):
    sw, build = import_spillway(args.build, "bench_threads")
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    ft = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    name = "3.13t (GIL off)" if ft and not gil else \
        f"{sys.version.split()[0]} (GIL)"
    dev = sw.Device("sim:0")
    n = 2000 if args.quick else 20000
    out = {"python": name, "build": str(build), "n": n}
    print(f"bench_threads: {name}, {build}, {n} calls per thread")
    for kind in KINDS:
        one = measure(sw, dev, kind, 1, n)
        two = measure(sw, dev, kind, 2, n)
        out[kind] = {"1": one, "2": two}
        print(f"  {kind:11s} 1 thread {one / 1e3:8.1f} k/s   2 threads "
              f"{two / 1e3:8.1f} k/s   x{two / one:.2f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out))


def compare(gil_file, ft_file):
    g = json.loads(pathlib.Path(gil_file).read_text())
    f = json.loads(pathlib.Path(ft_file).read_text())
    print(f"free-threaded ({f['python']}) against the GIL build "
          f"({g['python']}), same run:")
    print(f"  {'':11s} {'GIL 1':>9s} {'GIL 2':>9s} {'3.13t 1':>9s} "
          f"{'3.13t 2':>9s}  {'2/1 on 3.13t':>12s}  {'1-thread cost':>13s}")
    for kind in KINDS:
        if kind not in g or kind not in f:
            continue
        g1, g2 = g[kind]["1"], g[kind]["2"]
        f1, f2 = f[kind]["1"], f[kind]["2"]
        print(f"  {kind:11s} {g1 / 1e3:8.1f}k {g2 / 1e3:8.1f}k "
              f"{f1 / 1e3:8.1f}k {f2 / 1e3:8.1f}k  {f2 / f1:11.2f}x  "
              f"{g1 / f1:12.2f}x")
    print("  (k calls/s; loop: a pure-Python loop, the machine's "
          "ceiling for 2/1; numpy-*: NumPy's\n   own small arrays, the "
          "peer; goals: 2/1 on 3.13t >= 1.7x, 1-thread cost "
          "of 3.13t against the GIL build <= 1.3x)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json")
    p.add_argument("--compare", nargs=2, metavar=("GIL_JSON", "FT_JSON"))
    args = p.parse_args()
    if args.compare:
        compare(*args.compare)
    else:
        run(args)


if __name__ == "__main__":
    main()
