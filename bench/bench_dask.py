#!/usr/bin/env python3
"""bench_dask.py -- spillway under Dask, as ratios against baselines
measured in the same run (absolute times on shared machines mean little;
ratios do).

  1. Dask serialization (distributed.protocol serialize + deserialize, the
     "dask" serializers of spillway.dask) of a 64 MiB float32 array,
     resident and spilled, against the same for a numpy.ndarray of the
     same size; serialize alone too (for a spilled array: from its host
     copy, without a restore, which the run checks).  GB/s and the ratio
     to NumPy's time.
  2. examples/dask_pipeline.py's computation on a LocalSpillwayCluster of
     2 worker processes, its datasets 4 x the sum of the budgets: wall
     time with the budgets (spilling) against without (everything fits),
     and the spills, restores and bytes moved.

Usage: bench_dask.py [--build DIR] [--quick]
  DIR: the build directory whose python/ holds the package (default
  $SPILLWAY_BUILD_DIR, else build-release, else build); --quick: fewer
  repeats and a smaller pipeline.
"""

import argparse
import os
import pathlib
import sys
import time

# Before spillway opens a device: two simulated devices, room for 64 MiB
# arrays and for the pipeline without a budget.
os.environ.setdefault("SPILLWAY_SIM_DEVICES", "2")
os.environ.setdefault("SPILLWAY_SIM_MEMORY", "512M")

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib import import_spillway  # noqa: E402

MiB = 1 << 20


def best_s(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_serialize(sw, repeat):
    import numpy as np
    from distributed.protocol import deserialize, serialize

    import spillway.dask  # noqa: F401  (registers the serializers)

    n = 64 * MiB // 4
    host = np.arange(n, dtype=np.float32)
    dev = sw.Device("sim:0")
    a = sw.asarray(host, device=dev)

    def roundtrip(x):
        return lambda: deserialize(*serialize(x, serializers=["dask"]))

    def dumps(x):
        return lambda: serialize(x, serializers=["dask"])

    # NumPy's frames are its own memory (no copy): the floor for device
    # memory is one host copy, so that is the second baseline.
    t_copy = best_s(host.copy, repeat)
    t_np_rt = best_s(roundtrip(host), repeat)
    t_np_s = best_s(dumps(host), repeat)
    t_res_rt = best_s(roundtrip(a), repeat)
    t_res_s = best_s(dumps(a), repeat)
    # Spill it: a budget below what it holds spills at once.
    sw.set_memory_budget(MiB, dev)
    assert a.is_spilled
    restores = sw.memory_info(dev).restores
    t_sp_s = best_s(dumps(a), repeat)
    frames = serialize(a, serializers=["dask"])
    assert a.is_spilled and sw.memory_info(dev).restores == restores, \
        "serializing a spilled array restored it"
    # The receiving end allocates on the device: measured without the
    # budget (which would spill the result at once), added to the send.
    sw.set_memory_budget(None, dev)
    t_sp_rt = t_sp_s + best_s(lambda: deserialize(*frames), repeat)
    assert np.array_equal(deserialize(*frames).numpy(), host)
    gb = (64 * MiB) / 1e9
    print("Dask serialization of 64 MiB (best of %d); x numpy: against the "
          "same for a numpy.ndarray, x copy: against one host copy "
          "(ndarray.copy())" % repeat)
    print(f"  {'':34} {'ms':>8} {'GB/s':>7} {'x numpy':>8} {'x copy':>7}")
    for name, t, base in [
            ("ndarray.copy()", t_copy, None),
            ("numpy serialize", t_np_s, t_np_s),
            ("resident serialize", t_res_s, t_np_s),
            ("spilled serialize (no restore)", t_sp_s, t_np_s),
            ("numpy round trip", t_np_rt, t_np_rt),
            ("resident round trip", t_res_rt, t_np_rt),
            ("spilled round trip", t_sp_rt, t_np_rt)]:
        ratio = f"{t / base:8.1f}" if base else f"{'':8}"
        print(f"  {name:34} {t * 1e3:8.2f} {gb / t:7.2f} {ratio} "
              f"{t / t_copy:7.2f}")
    del a


def bench_pipeline(sw, quick):
    sys.path.insert(0, str(HERE.parent / "examples"))
    import dask_pipeline
    from distributed import Client

    import spillway.dask as sd

    budget = 8 * MiB if quick else 32 * MiB
    n = (MiB if quick else 2 * MiB) // 4
    blocks = -(-4 * 2 * budget // (n * 12))
    results = {}
    for label, b in [("no budget", None), ("budget", budget)]:
        with sd.LocalSpillwayCluster(n_workers=2, budget=b,
                                     dashboard_address=":0") as cluster, \
                Client(cluster) as client:
            client.run(lambda: None)
            dask_pipeline.run(client, 2, n, check=False)  # warm up
            results[label] = dask_pipeline.run(client, blocks, n)
    base = results["no budget"]["seconds"]
    print(f"\nexamples/dask_pipeline.py, 2 worker processes, {blocks} "
          f"blocks, datasets {results['budget']['data_bytes'] / MiB:.0f} "
          f"MiB = 4 x the budgets ({budget // MiB} MiB each):")
    for label, rep in results.items():
        w = rep["workers"].values()
        print(f"  {label:10} {rep['seconds']:7.2f} s  "
              f"x{rep['seconds'] / base:5.2f}"
              f"  spills {sum(x['spills'] for x in w):5d} "
              f"({sum(x['spilled_bytes_total'] for x in w) / MiB:6.0f} MiB)"
              f"  restores {sum(x['restores'] for x in w):5d} "
              f"({sum(x['restored_bytes_total'] for x in w) / MiB:6.0f} MiB)"
              f"  {'matches NumPy' if rep['matched'] else 'DIFFERS'}")
        if not rep["matched"]:
            sys.exit("bench_dask: results differ from NumPy")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sw, build = import_spillway(args.build, "bench_dask")
    try:
        import distributed  # noqa: F401
    except ImportError:
        sys.exit("bench_dask: needs dask and distributed "
                 "(pip install spillway[dask])")
    print(f"spillway from {build}, distributed {distributed.__version__}")
    bench_serialize(sw, 3 if args.quick else 7)
    bench_pipeline(sw, args.quick)


if __name__ == "__main__":
    main()
