#!/usr/bin/env python3
"""A blocked computation on spillway arrays under Dask, checked bit for bit.

    python examples/dask_pipeline.py [--blocks 32] [--block-mib 4]
                                     [--budget 16M] [--workers 2]
                                     [--no-budget] [--threads]

Starts a LocalSpillwayCluster (2 worker processes on sim:0 and sim:1 by
default, each with its budget), and runs on it:

    x[i] = block i of a float32 dataset (made on a worker from seed i)
    k[i] = block i of an int64 dataset
    y[i] = 1.5 * x[i]
    z[i] = y[i] + x[(i + 1) % n]      the neighbour: often on the other worker
    w[i] = 0.5 * z[i]
    s[i] = sum(k[i] + k[i])           reduced on the device, exact in int64

The datasets x and k are held (persisted) on the workers while the rest
runs: by default they are 4 x the sum of the workers' budgets, so the
workers spill to host memory and restore as the steps need the blocks,
and blocks travel between workers (from their host copies when spilled).
The client computes the same with NumPy and compares every w[i] and s[i]
bit for bit; it prints each worker's spills, restores, bytes moved and the
wall time.  Exit status 0 only when everything matched.

Run from a source tree: PYTHONPATH=build/python (the Makefile's build).
"""

import argparse
import os
import sys
import time

# The simulated backend reads these when a device opens: before spillway is
# imported, so that the worker processes (which inherit them) have one
# device each.
os.environ.setdefault("SPILLWAY_SIM_DEVICES", "2")
os.environ.setdefault("SPILLWAY_SIM_MEMORY", "256M")

import numpy as np  # noqa: E402

import spillway as sw  # noqa: E402
import spillway.dask as sd  # noqa: E402


def make_x(i, n):
    rng = np.random.default_rng(i)
    return sw.asarray(rng.standard_normal(n, dtype=np.float32),
                      device=sd.worker_device(), tag=f"x{i}")


def make_k(i, n):
    rng = np.random.default_rng(10_000 + i)
    return sw.asarray(rng.integers(-1000, 1000, n, dtype=np.int64),
                      device=sd.worker_device(), tag=f"k{i}")


def step_y(x):
    return sw.scale(x, 1.5)


def step_z(y, x_next):
    return sw.add(y, x_next)


def step_w(z):
    return sw.scale(z, 0.5).numpy()  # the result travels as NumPy


def step_s(k):
    return int(sw.sum(sw.add(k, k)))


def numpy_reference(blocks, n):
    xs = [np.random.default_rng(i).standard_normal(n, dtype=np.float32)
          for i in range(blocks)]
    ks = [np.random.default_rng(10_000 + i).integers(-1000, 1000, n,
                                                      dtype=np.int64)
          for i in range(blocks)]
    half, one_half = np.float32(0.5), np.float32(1.5)
    ws = [half * (one_half * xs[i] + xs[(i + 1) % blocks])
          for i in range(blocks)]
    ss = [int((k + k).sum()) for k in ks]
    return ws, ss


def _delta(before, after):
    keys = ["spills", "restores", "spilled_bytes_total",
            "restored_bytes_total"]
    out = {}
    for addr, a in after.items():
        b = before.get(addr, {})
        out[addr] = {k: a[k] - b.get(k, 0) for k in keys}
        out[addr]["device"] = a["device"]
        out[addr]["budget"] = a["budget"]
        out[addr]["max_reserved"] = a["max_reserved"]
    return out


def run(client, blocks, n, check=True):
    """Run the pipeline on `client`'s cluster: blocks of n elements.
    Returns a report dict: seconds, matched (None without check), and
    per-worker figures (spills, restores, bytes moved, max_reserved)."""
    before = client.run(sd.worker_stats)
    t0 = time.perf_counter()
    xs = [client.submit(make_x, i, n, pure=False) for i in range(blocks)]
    ks = [client.submit(make_k, i, n, pure=False) for i in range(blocks)]
    ys = [client.submit(step_y, x, pure=False) for x in xs]
    zs = [client.submit(step_z, ys[i], xs[(i + 1) % blocks], pure=False)
          for i in range(blocks)]
    ws = [client.submit(step_w, z, pure=False) for z in zs]
    ss = [client.submit(step_s, k, pure=False) for k in ks]
    got_w = client.gather(ws)
    got_s = client.gather(ss)
    seconds = time.perf_counter() - t0
    after = client.run(sd.worker_stats)
    del xs, ks, ys, zs, ws, ss
    matched = None
    if check:
        want_w, want_s = numpy_reference(blocks, n)
        matched = (all(np.array_equal(g.view(np.uint32), w.view(np.uint32))
                       for g, w in zip(got_w, want_w))
                   and got_s == want_s)
    return {"seconds": seconds, "matched": matched,
            "data_bytes": blocks * n * (4 + 8),
            "workers": _delta(before, after)}


def print_report(rep, label=""):
    mib = 1 << 20
    print(f"{label}data {rep['data_bytes'] / mib:.0f} MiB, "
          f"{rep['seconds']:.2f} s, results "
          + {True: "match NumPy bit for bit", False: "DIFFER from NumPy",
             None: "not checked"}[rep["matched"]])
    for addr, w in sorted(rep["workers"].items(),
                          key=lambda kv: kv[1]["device"]):
        budget = f"{w['budget'] / mib:.0f} MiB" if w["budget"] else "none"
        print(f"  {w['device']}: budget {budget}, max reserved "
              f"{w['max_reserved'] / mib:.1f} MiB, {w['spills']} spills "
              f"({w['spilled_bytes_total'] / mib:.0f} MiB), "
              f"{w['restores']} restores "
              f"({w['restored_bytes_total'] / mib:.0f} MiB)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget", default="16M",
                    help="each worker's budget (default 16M)")
    ap.add_argument("--no-budget", action="store_true")
    ap.add_argument("--block-mib", type=float, default=2.0,
                    help="MiB of float32 per block (the int64 block is "
                    "twice that)")
    ap.add_argument("--blocks", type=int, default=None,
                    help="default: the datasets are 4 x the total budget")
    ap.add_argument("--threads", action="store_true",
                    help="workers as threads of this process")
    args = ap.parse_args(argv)
    n = int(args.block_mib * (1 << 20)) // 4
    budget = None if args.no_budget else args.budget
    from distributed import Client
    with sd.LocalSpillwayCluster(n_workers=args.workers, budget=budget,
                                 processes=not args.threads,
                                 dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        blocks = args.blocks
        if blocks is None:
            total = sum(s["budget"] or s["device_total"] for s in
                        client.run(sd.worker_stats).values())
            blocks = max(2, -(-4 * total // (n * 12)))
        rep = run(client, blocks, n)
    print_report(rep, f"{args.workers} workers, {blocks} blocks: ")
    return 0 if rep["matched"] else 1


if __name__ == "__main__":
    sys.exit(main())
