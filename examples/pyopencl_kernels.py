#!/usr/bin/env python3
"""Your own OpenCL kernel on spillway's memory, under a budget.

    python examples/pyopencl_kernels.py [--device opencl:0] [--layers 8]

A small network of your own kernel, y = max(x * w + 0.5, 0), run layer
after layer with PyOpenCL on arrays that spillway owns: the activations
and weights together are 4 times the budget, so between layers spillway
spills the ones not in use to host memory and brings each back when a
layer needs it.  Inside `with sw.pinned(...)` the arrays stay put, and
each view gives the kernel its memory as OpenCL sees it: a cl_mem and a
byte offset.  The kernel runs in the context and on the queue spillway
hands out (Device.native_context, Queue.native), so spillway orders its
own copies around it on the device, without waiting on the host.  Every
layer's result is checked against NumPy bit for bit.

Runs on opencl:0: PoCL (Debian's pocl-opencl-icd) is an OpenCL device on
the CPU.  Without an OpenCL device, or without PyOpenCL, it prints
"skipped: ..." and exits 0.  Exit status 1 when a result differs.

From a source tree, after `make build`:
    PYTHONPATH=build/python python3 examples/pyopencl_kernels.py
"""

import argparse
import sys

import numpy as np

import spillway as sw

MiB = 1 << 20
WIDTH = MiB  # float32 elements per array: 4 MiB each

# Your kernel.  spillway's arrays may sit at an offset inside their
# cl_mem, so each pointer comes with its offset (in elements here).
# FP_CONTRACT OFF: no fused multiply-add, so each operation rounds once,
# as NumPy's float32 arithmetic does, and the results compare bit for bit.
KERNEL = """
#pragma OPENCL FP_CONTRACT OFF
__kernel void layer(__global const float *x, uint xo,
                    __global const float *w, uint wo,
                    __global float *y, uint yo, uint n)
{
    size_t i = get_global_id(0);
    if (i < n)
        y[yo + i] = fmax(x[xo + i] * w[wo + i] + 0.5f, 0.0f);
}
"""


def skip(why):
    print("skipped:", why)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args(argv)
    if args.layers < 1:
        ap.error("--layers must be at least 1")

    try:
        import pyopencl as cl
    except ImportError:
        return skip("PyOpenCL is not installed (pip install pyopencl)")
    try:
        dev = sw.Device(args.device)
    except ValueError as e:  # no such device: says why (no platform, ...)
        return skip(f"no OpenCL device here: {e}")
    if not dev.name.startswith("opencl"):
        return skip(f"{dev.name} is not an OpenCL device")
    print(f"device {dev.name}: {dev.description}")

    # PyOpenCL objects for spillway's own context and a spillway queue.
    # from_int_ptr takes a reference of its own: spillway keeps owning them.
    ctx = cl.Context.from_int_ptr(dev.native_context)
    q = sw.Queue(dev)
    cq = cl.CommandQueue.from_int_ptr(q.native)
    layer = cl.Program(ctx, KERNEL).build().layer

    # The data: one input and a weight array per layer, made in NumPy.
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal(WIDTH, dtype=np.float32)
    ws = [rng.standard_normal(WIDTH, dtype=np.float32)
          for _ in range(args.layers)]

    # Every activation is kept, so the live set is 2 * layers + 1 arrays;
    # the budget holds a quarter of it (a layer needs 3 at once).
    live = (2 * args.layers + 1) * WIDTH * 4
    budget = max(live // 4, 3 * WIDTH * 4)
    sw.set_memory_budget(budget, device=dev)
    print(f"{args.layers} layers, {live / MiB:.0f} MiB of arrays, budget "
          f"{budget / MiB:.0f} MiB")
    before = sw.memory_info(dev)

    acts = [sw.asarray(x0, device=dev, tag="x0")]
    weights = [sw.asarray(w, device=dev, tag=f"w{i}")
               for i, w in enumerate(ws)]
    for i, w in enumerate(weights):
        x = acts[-1]
        y = sw.empty(WIDTH, dtype="float32", device=dev, tag=f"x{i + 1}")
        # Pinned for work on q: x and w only read ("r"), y written ("w").
        with sw.pinned(x, w, y, queue=q, access="rrw") as views:
            bufs = [cl.Buffer.from_int_ptr(v.cl_mem) for v in views]
            offs = [np.uint32(v.offset // 4) for v in views]
            layer(cq, (WIDTH,), None, bufs[0], offs[0], bufs[1], offs[1],
                  bufs[2], offs[2], np.uint32(WIDTH))
            for b in bufs:  # our references only: spillway owns the memory
                b.release()
        # The pins end here in q's order: a later spill of x, w or y waits
        # for the kernel on the device; this loop does not wait at all.
        acts.append(y)

    # Check every layer against NumPy (a host read waits for the kernels).
    failed = 0
    want = x0
    for i, w in enumerate(ws):
        want = np.maximum(want * w + np.float32(0.5), np.float32(0))
        if not np.array_equal(acts[i + 1].numpy(), want):
            print(f"  FAILED: layer {i + 1} differs from NumPy")
            failed += 1
    info = sw.memory_info(dev)
    spills = info.spills - before.spills
    restores = info.restores - before.restores
    print(f"{args.layers} kernel launches on spillway memory: {spills} "
          f"spills, {restores} restores, peak in use {info.peak / MiB:.0f} "
          f"MiB")
    if spills == 0:
        print("  FAILED: nothing spilled under the budget")
        failed += 1

    # Leave the device as we found it.
    cq.finish()
    del acts, weights, x, y, views
    sw.set_memory_budget(None, device=dev)
    sw.synchronize(dev)
    del q
    info = sw.memory_info(dev)
    if info.in_use or info.spilled:
        print(f"  FAILED: {info.in_use} bytes in use, {info.spilled} "
              f"spilled at the end")
        failed += 1
    if failed:
        return 1
    print("ok: every layer matched NumPy bit for bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
