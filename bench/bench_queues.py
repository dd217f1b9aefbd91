#!/usr/bin/env python3
"""bench_queues.py -- the cost of spillway's order-manager map, whose keys
are held by weak reference (docs/python.md, "Queues"), against what a plain
dictionary keyed by the queue (the strong-key design) costs in the same run.

  1. order_manager[q] for a known queue, against {q: manager}[q];
  2. order_manager[q] for a queue the map has not seen (it makes the
     manager, with a weak reference to the queue), against inserting a new
     key into a dictionary;
  3. creating a queue plus its first operation (scale() of 256 floats,
     with the queue dropped at once), against the same operation on an
     existing queue and on the device's default queue.

For scale: dpctl measured ~30 ns extra per known-queue lookup and ~4 us
per new one for its weak-key map.  Each figure is the best of several
repeats of a timed loop, in ns (or us) per iteration.

Usage: bench_queues.py [--build DIR] [--device SPEC] [--quick]
  DIR: the build directory whose python/ holds the package (default
  $SPILLWAY_BUILD_DIR, else build-release, else build); SPEC: the device
  (default: $SPILLWAY_DEVICE or sim:0); --quick: fewer iterations.
"""

import argparse
import gc
import pathlib
import platform
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchlib import best_ns, import_spillway  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", help="build directory (holds python/)")
    ap.add_argument("--device", help="device spec (default: the default)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sw, build = import_spillway(args.build, "bench_queues")
    from spillway import _testing
    quick = args.quick
    n_known = 200000 if not quick else 20000
    batch = 200            # new queues per timed batch (each holds memory)
    batches = 10 if not quick else 3
    n_create = 2000 if not quick else 300
    repeat = 7 if not quick else 3

    dev = sw.Device(args.device)
    om = sw.order_manager
    rows = []

    # 1. Known queue.
    q = sw.Queue(dev)
    mgr = om[q]
    plain = {q: mgr}

    def known(k):
        for _ in range(k):
            om[q]

    def known_dict(k):
        for _ in range(k):
            plain[q]

    known(1000)
    known_dict(1000)
    gc.disable()
    t_known = best_ns(known, n_known, repeat)
    t_dict = best_ns(known_dict, n_known, repeat)
    gc.enable()
    rows.append(("order_manager[q], known queue", t_known,
                 "dict[q] (strong keys)", t_dict, "ns"))

    # 2. New queue: queues made beforehand (not timed), each looked up once.
    def new_lookups(lookup, cleanup):
        best = float("inf")
        for _ in range(batches):
            qs = [sw.Queue(dev) for _ in range(batch)]
            gc.disable()
            t0 = time.perf_counter_ns()
            for x in qs:
                lookup(x)
            t1 = time.perf_counter_ns()
            gc.enable()
            best = min(best, (t1 - t0) / batch)
            del qs, x
            cleanup()
        return best

    store = {}

    def dict_insert(x):
        store[x] = object()

    t_new = new_lookups(om.__getitem__, om.clear)
    t_new_dict = new_lookups(dict_insert, store.clear)
    rows.append(("order_manager[q], new queue", t_new,
                 "dict[q] = obj, new key", t_new_dict, "ns"))

    # 3. A queue and its first operation.
    a = sw.zeros(256, device=dev)
    out = sw.zeros(256, device=dev)
    scale, Queue = sw.scale, sw.Queue

    def create_and_op(k):
        for _ in range(k):
            nq = Queue(dev)
            scale(a, 2.0, out=out, queue=nq)

    def op_on_queue(k):
        for _ in range(k):
            scale(a, 2.0, out=out, queue=q)

    def op_default(k):
        for _ in range(k):
            scale(a, 2.0, out=out)

    def create_only(k):
        for _ in range(k):
            Queue(dev)

    for f in (create_and_op, op_on_queue, op_default, create_only):
        f(100)
    sw.synchronize(dev)
    t_create_op = best_ns(create_and_op, n_create, repeat)
    sw.synchronize(dev)
    t_op_q = best_ns(op_on_queue, n_create, repeat)
    sw.synchronize(dev)
    t_op_default = best_ns(op_default, n_create, repeat)
    sw.synchronize(dev)
    t_create = best_ns(create_only, n_create, repeat)
    sw.synchronize(dev)
    rows.append(("Queue() + first scale() on it", t_create_op / 1000,
                 "scale() on a known queue", t_op_q / 1000, "us"))
    rows.append(("Queue() + first scale() on it", t_create_op / 1000,
                 "scale() on the default queue", t_op_default / 1000, "us"))
    rows.append(("Queue() + release (no work)", t_create / 1000,
                 "scale() on the default queue", t_op_default / 1000, "us"))

    print(f"spillway {sw.__version__} order managers, {build.name}/python, "
          f"device {dev.name}, Python {platform.python_version()}, best of "
          f"{repeat}; known lookups x{n_known}, new lookups {batches} "
          f"batches of {batch}, queue creations x{n_create}")
    w = max(len(r[0]) for r in rows)
    wb = max(len(r[2]) for r in rows)
    print(f"{'operation':<{w}}  {'time':>9}  {'baseline':<{wb}}  "
          f"{'time':>9}  {'extra':>9}  {'ratio':>6}")
    for name, t, bname, tb, unit in rows:
        print(f"{name:<{w}}  {t:6.{0 if unit == 'ns' else 2}f} {unit}  "
              f"{bname:<{wb}}  {tb:6.{0 if unit == 'ns' else 2}f} {unit}  "
              f"{t - tb:6.{0 if unit == 'ns' else 2}f} {unit}  "
              f"{t / tb:5.1f}x")

    del mgr, plain, q, a, out
    om.clear()
    _testing.wait_host_tasks()
    sw.synchronize(dev)
    if sw.memory_info(dev).in_use != 0:
        sys.exit("bench_queues: device memory left in use")
    counts = _testing.object_counts()
    if counts["queues"] or counts["managers"]:
        sys.exit(f"bench_queues: queue objects left alive: {counts}")


if __name__ == "__main__":
    main()
