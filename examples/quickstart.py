#!/usr/bin/env python3
"""spillway in one page: arrays, a budget, spills, the summary, the picture.

    python examples/quickstart.py [--device SPEC] [--out DIR]

Eight arrays of 4 MiB are made under a budget of 16 MiB, room for four:
as each new one is made, spillway copies the least recently used ones to
host memory (a *spill*) and brings each back when the device needs it (a
*restore*).  The arithmetic runs on the device all the same, and every
result is checked against NumPy.  At the end it prints memory_summary(),
writes the memory history (quickstart-memory.json: open it at
https://ui.perfetto.dev) and draws its picture (quickstart-memory.png).
Exit status 0 only when every check passed.

The device is the default one: $SPILLWAY_DEVICE, or else sim:0, the
simulated device (no hardware needed); host:0 never spills (its budget
is a hard limit: there the program stops with the out-of-memory report,
which names what holds the memory).  From a source tree, after
`make build`:  PYTHONPATH=build/python python3 examples/quickstart.py
The picture needs matplotlib:  pip install "spillway[plot]"
"""

import argparse
import os
import sys

import numpy as np

import spillway as sw

MiB = 1 << 20
N = MiB  # float32 elements per array: 4 MiB each

failures = []


def check(ok, what):
    """Note a failed check (the exit status says it at the end)."""
    if not ok:
        failures.append(what)
        print("  FAILED:", what)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None,
                    help="a device spec such as sim:0 or opencl:0 "
                    "(default: $SPILLWAY_DEVICE, else sim:0)")
    ap.add_argument("--out", default=".",
                    help="folder for the history and its picture")
    args = ap.parse_args(argv)

    dev = sw.Device(args.device)
    print(f"device {dev.name}: {dev.description}")

    # -- 1. Arrays --------------------------------------------------------
    # sw.asarray copies a NumPy array to the device; a tag names where an
    # array came from (memory_summary and out-of-memory reports list it).
    # Whole numbers below 100: every sum below is exact, so results can be
    # compared with NumPy's bit for bit.
    rng = np.random.default_rng(0)
    data = [rng.integers(0, 100, N).astype(np.float32) for _ in range(8)]

    # Record what happens to memory from here on, for the picture.
    history = sw.memory_history(device=dev)

    # -- 2. A budget ------------------------------------------------------
    # It bounds the device memory spillway holds (bytes, or "16M", or a
    # fraction of the device such as 0.25).  Past it, the least recently
    # used arrays spill to host memory.
    sw.set_memory_budget("16M", device=dev)
    xs = [sw.asarray(d, device=dev, tag=f"x{i}") for i, d in enumerate(data)]

    # -- 3. Spills --------------------------------------------------------
    where = ["host" if x.is_spilled else "device" for x in xs]
    print("8 arrays of 4 MiB under a budget of 16 MiB:")
    print("  x0..x7 are on:", " ".join(where))
    info = sw.memory_info(dev)
    print(f"  in use {info.in_use / MiB:.0f} MiB, spilled to host "
          f"{info.spilled / MiB:.0f} MiB, {info.spills} spills")
    check(info.spills > 0 and xs[0].is_spilled, "the first arrays spilled")
    check(info.in_use <= 16 * MiB, "in use stays within the budget")

    # A host read of a spilled array uses its host copy: it stays spilled.
    check(np.array_equal(xs[0].numpy(), data[0]), "x0 read while spilled")
    check(xs[0].is_spilled, "a host read leaves x0 spilled")

    # Device work brings spilled arrays back (and spills others to make
    # room).  y[i] = 2 * x[i] + x[i+1], on the device, checked bit for bit.
    with sw.memory_peak(dev) as peak:
        for i in range(8):
            y = xs[i] * 2 + xs[(i + 1) % 8]
            want = data[i] * np.float32(2) + data[(i + 1) % 8]
            check(np.array_equal(y.numpy(), want), f"y{i} matches NumPy")
            check(sw.sum(y) == float(want.sum(dtype=np.float64)),
                  f"sum(y{i}) on the device matches NumPy")
            del y
    info = sw.memory_info(dev)
    print(f"computed y = 2 * x[i] + x[i+1] for every i: {info.restores} "
          f"restores, {info.spills} spills in all; the peak of that loop "
          f"was {peak.bytes / MiB:.0f} MiB in use")
    check(info.restores > 0, "spilled arrays came back for the device")
    check(peak.bytes <= 16 * MiB, "the loop's peak stays within the budget")

    # -- 4. The summary ---------------------------------------------------
    print(sw.memory_summary(dev))

    # -- 5. The picture ---------------------------------------------------
    history.stop()
    trace = os.path.join(args.out, "quickstart-memory.json")
    sw.dump_memory_history(trace, device=dev)
    print(f"memory history: {trace} (open it at https://ui.perfetto.dev)")
    try:
        import matplotlib  # noqa: F401  (spillway[plot])
    except ImportError:
        print("no picture: matplotlib is missing "
              "(pip install \"spillway[plot]\")")
    else:
        png = sw.plot_memory_history(trace, os.path.join(
            args.out, "quickstart-memory.png"), title="examples/quickstart.py")
        check(os.path.getsize(png) > 0, "the picture was drawn")
        print(f"its picture: {png} (from a shell: spillway plot {trace})")

    # -- 6. Done: free everything, leave the device as we found it --------
    del xs
    sw.set_memory_budget(None, device=dev)
    sw.synchronize(dev)
    info = sw.memory_info(dev)
    check(info.in_use == 0 and info.spilled == 0,
          "nothing left on the device or in host memory")

    if failures:
        print(f"{len(failures)} checks FAILED")
        return 1
    print("ok: every result matched NumPy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
