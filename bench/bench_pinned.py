#!/usr/bin/env python3
"""bench_pinned.py -- your own kernels on spillway's memory: what a pin
costs, as ratios against a baseline measured in the same run.

  1. `with sw.pinned(...)` entered and left, for 1 and for 8 resident
     arrays, on a Queue and for the host, against a bare PyOpenCL kernel
     launch of 8 arguments on the same queue (PoCL's opencl:0; its buffers
     PyOpenCL's own).  Goal: pinning 8 arrays adds at most 10% to that
     launch.  The whole step -- the pin, a PyOpenCL Buffer for each view,
     the launch -- is reported beside it.
  2. A pipeline of the user's own PyOpenCL kernels (8 layers of
     y = max(x * w + 0.5, 0) on 4 MiB float32 arrays, every activation
     kept) under a budget of a quarter of its live set, against the same
     pipeline unbudgeted plus the bytes it moved at memcpy's speed
     (measured in the same run): the goal is at most 1.1x, the demo's
     measure of a budgeted run.

Without opencl:0 (or PyOpenCL) part 1 is measured against an empty loop
on the default device, and part 2 is skipped.  Each figure is the best
(min) and the median of 5 runs.

Usage: bench_pinned.py [--build DIR] [--quick]
"""

import argparse
import pathlib
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchlib import import_spillway  # noqa: E402


def timed(loop, n, runs=5):
    """ns per iteration of loop(n): (min, median) over runs."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        loop(n)
        out.append((time.perf_counter_ns() - t0) / n)
    return min(out), statistics.median(out)


KERNEL8 = """
__kernel void k8(__global float *a, __global float *b, __global float *c,
                 __global float *d, __global float *e, __global float *f,
                 __global float *g, __global float *h)
{ size_t i = get_global_id(0); a[i] = b[i] + c[i] + d[i] + e[i] + f[i]
                                      + g[i] + h[i]; }
"""

LAYER = """
#pragma OPENCL FP_CONTRACT OFF
__kernel void layer(__global const float *x, uint xo,
                    __global const float *w, uint wo,
                    __global float *y, uint yo)
{ size_t i = get_global_id(0);
  float v = x[xo + i] * w[wo + i]; v = v + 0.5f;
  y[yo + i] = fmax(v, 0.0f); }
"""


def part1(sw, cl, quick):
    dev = sw.Device("opencl:0") if cl else sw.Device()
    q = sw.Queue(dev)
    arrays = [sw.ones(256, device=dev) for _ in range(8)]
    n = 2000 if quick else 20000
    print(f"1. pins on {dev.name}, arrays resident "
          f"({n} iterations, min / median of 5)")

    def pin(k, queue):
        sel = arrays[:k]  # the pin's cost, not the slice's

        def loop(m):
            for _ in range(m):
                with sw.pinned(*sel, queue=queue):
                    pass
        return loop

    rows = []
    for k in (1, 8):
        for queue, label in ((q, "on a Queue"), (None, "for the host")):
            mn, md = timed(pin(k, queue), n)
            rows.append((f"pinned({k}) {label}", mn, md))
    if cl is None:
        for name, mn, md in rows:
            print(f"  {name:32s} {mn / 1e3:8.2f} us  {md / 1e3:8.2f} us")
        return
    ctx = cl.Context.from_int_ptr(dev.native_context)
    cq = cl.CommandQueue.from_int_ptr(q.native)
    prg = cl.Program(ctx, KERNEL8).build()
    k8 = prg.k8
    own = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 256 * 4)
           for _ in range(8)]

    def launch(m):
        for i in range(m):
            k8(cq, (256,), None, *own)
            if i % 256 == 255:
                cq.finish()
        cq.finish()

    def step(m):
        for i in range(m):
            with sw.pinned(*arrays, queue=q) as views:
                bufs = [cl.Buffer.from_int_ptr(v.cl_mem) for v in views]
                k8(cq, (256,), None, *bufs)
            if i % 256 == 255:
                cq.finish()
        cq.finish()

    base_min, base_med = timed(launch, n)
    step_min, step_med = timed(step, n // 4)
    print(f"  {'PyOpenCL launch, 8 arguments':32s} {base_min / 1e3:8.2f} us"
          f"  {base_med / 1e3:8.2f} us   (the baseline)")
    for name, mn, md in rows:
        print(f"  {name:32s} {mn / 1e3:8.2f} us  {md / 1e3:8.2f} us   "
              f"{mn / base_min:6.1%} / {md / base_med:6.1%} of a launch")
    pin8 = [r for r in rows if r[0] == "pinned(8) on a Queue"][0]
    print(f"  goal: pinned(8) adds <= 10% to a launch of 8 arguments: "
          f"{pin8[1] / base_min:.1%} (min), {pin8[2] / base_med:.1%} "
          f"(median)")
    print(f"  {'the whole step (pin, 8 Buffers, launch)':32s} "
          f"{step_min / 1e3:8.2f} us  {step_med / 1e3:8.2f} us   "
          f"{step_min / base_min:5.2f}x a bare launch")
    del q


def memcpy_gbps(nbytes):
    a = np.ones(nbytes, np.uint8)
    b = np.empty_like(a)
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = max(best, nbytes / (time.perf_counter() - t0))
    return best


def part2(sw, cl, quick):
    dev = sw.Device("opencl:0")
    q = sw.Queue(dev)
    ctx = cl.Context.from_int_ptr(dev.native_context)
    cq = cl.CommandQueue.from_int_ptr(q.native)
    layer = cl.Program(ctx, LAYER).build().layer
    width = (1 << 18) if quick else (1 << 20)
    layers = 8
    rng = np.random.default_rng(25)
    ws_host = [rng.standard_normal(width).astype(np.float32)
               for _ in range(layers)]
    live = 2 * (layers + 1) * width * 4

    def run(budget):
        ws = [sw.asarray(w, device=dev) for w in ws_host]
        xs = [sw.full(width, 1.0, dtype="float32", device=dev)]
        sw.synchronize(dev)
        sw.set_memory_budget(budget, dev)
        info0 = sw.memory_info(dev)
        t0 = time.perf_counter()
        for i in range(layers):
            with sw.pinned(xs[i], ws[i], queue=q) as (vx, vw):
                y = sw.empty(width, dtype="float32", device=dev)
                with sw.pinned(y, queue=q) as (vy,):
                    bufs = [cl.Buffer.from_int_ptr(v.cl_mem)
                            for v in (vx, vw, vy)]
                    layer(cq, (width,), None, bufs[0],
                          np.uint32(vx.offset // 4), bufs[1],
                          np.uint32(vw.offset // 4), bufs[2],
                          np.uint32(vy.offset // 4))
                    for b in bufs:
                        b.release()
            xs.append(y)
        q.synchronize()
        sw.synchronize(dev)
        dt = time.perf_counter() - t0
        info = sw.memory_info(dev)
        moved = (info.spilled_bytes_total - info0.spilled_bytes_total +
                 info.restored_bytes_total - info0.restored_bytes_total)
        out = xs[-1].numpy().tobytes()
        sw.set_memory_budget(None, dev)
        del xs, ws
        sw.synchronize(dev)
        return dt, moved, out

    print(f"2. the PyOpenCL pipeline, {layers} layers of {width * 4 >> 20} "
          f"MiB, live set {live >> 20} MiB, budget a quarter of it")
    run(None)  # warm: kernels built, memory faulted in
    ratios = []
    speed = memcpy_gbps(width * 4)
    for _ in range(5):
        free_t, _, free_out = run(None)
        tight_t, moved, tight_out = run(live // 4)
        assert tight_out == free_out, "the budgeted run differs"
        ratios.append(tight_t / (free_t + moved / speed))
    print(f"  unbudgeted {free_t * 1e3:.1f} ms, budgeted {tight_t * 1e3:.1f}"
          f" ms, {moved >> 20} MiB moved, memcpy {speed / 1e9:.2f} GB/s")
    print(f"  budgeted / (unbudgeted + moved / memcpy): min "
          f"{min(ratios):.2f}, median {statistics.median(ratios):.2f} "
          f"(goal <= 1.1), results bit-identical")
    del q


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sw, build = import_spillway(args.build, "bench_pinned")
    try:
        import pyopencl as cl
        if "opencl:0" not in [d.name for d in sw.devices()]:
            cl = None
    except ImportError:
        cl = None
    print(f"bench_pinned ({build}; PyOpenCL "
          f"{'on opencl:0' if cl else 'absent: no OpenCL baseline'})")
    part1(sw, cl, args.quick)
    if cl is not None:
        part2(sw, cl, args.quick)


if __name__ == "__main__":
    main()
