#!/usr/bin/env python3
"""bench_torch.py -- spillway as a PyTorch device (docs/torch.md): what the
fallback costs, as ratios against the same work on CPU tensors measured in
the same run.

  1. One op through the fallback (PyTorch's CPU kernel run in place on
     pinned spillway memory) against the same op on CPU tensors: `a + b` of
     1 M float32 (goal <= 1.10x) and of 256 float32 (goal <= 3 us more).
  2. A training step of an MLP (forward, backward, Adam) with no budget,
     against the same step on CPU (goal <= 1.15x).
  3. The same loop under a budget of a quarter of its live set, against
     the unbudgeted loop plus the bytes it moved at memcpy's speed (measured
     in the same run): goal <= 1.1x, the demo's measure; and the bytes
     moved over their floor, 2 x (live set - budget) per step, printed.

Each figure is the best (min) and the median of 5 runs.  Needs torch and
spillway built with its layer: the torch suite's venv has both
(.venv-torch/bin/python bench/bench_torch.py, after `make test
SUITES=torch`); `make bench` runs it there when it exists.

Usage: bench_torch.py [--quick]
"""

import argparse
import gc
import statistics
import sys
import time

import numpy as np


def timed(fn, n, runs=5):
    """Seconds per call of fn over n calls: (min, median) over runs."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n)
    return min(out), statistics.median(out)


def part1(torch, quick):
    print("1. one op through the fallback, against the CPU")
    for n, goal in ((1 << 20, "ratio"), (256, "us")):
        a, b = torch.randn(n), torch.randn(n)
        da, db = a.to("spillway"), b.to("spillway")
        assert torch.equal((da + db).cpu(), a + b)
        reps = 30 if n > 1000 else 3000
        if quick:
            reps //= 3
        cpu_min, cpu_med, dev_min, dev_med = [], [], [], []
        for _ in range(5):  # alternate, so drift hits both
            c = timed(lambda: a + b, reps, runs=1)
            d = timed(lambda: da + db, reps, runs=1)
            cpu_min.append(c[0])
            dev_min.append(d[0])
        c, d = min(cpu_min), min(dev_min)
        cm, dm = statistics.median(cpu_min), statistics.median(dev_min)
        if goal == "ratio":
            print(f"  add of {n} float32: cpu {c * 1e6:.0f} us, spillway "
                  f"{d * 1e6:.0f} us: {d / c:.2f}x min, {dm / cm:.2f}x median "
                  f"(goal <= 1.10x)")
        else:
            print(f"  add of {n} float32: cpu {c * 1e6:.2f} us, spillway "
                  f"{d * 1e6:.2f} us: +{(d - c) * 1e6:.2f} us min, "
                  f"+{(dm - cm) * 1e6:.2f} us median (goal <= +3 us)")


def mlp(torch):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(256, 512), torch.nn.ReLU()]
    for _ in range(6):
        layers += [torch.nn.Linear(512, 512), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(512, 10))


def make_loop(torch, device):
    model = mlp(torch).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 256, generator=g).to(device)
    y = torch.randint(0, 10, (128,), generator=g).to(device)

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step, model


def part2(torch, quick):
    print("2. an MLP training step, no budget, against the CPU")
    steps = 3 if quick else 10
    ratios = []
    for _ in range(5):
        cpu_step, _ = make_loop(torch, "cpu")
        dev_step, _ = make_loop(torch, "spillway")
        cpu_step(), dev_step()  # warm
        c = timed(cpu_step, steps, runs=1)[0]
        d = timed(lambda: dev_step().item(), steps, runs=1)[0]
        ratios.append(d / c)
        del dev_step
        gc.collect()
    print(f"  cpu {c * 1e3:.1f} ms, spillway {d * 1e3:.1f} ms a step: "
          f"{min(ratios):.2f}x min, {statistics.median(ratios):.2f}x median "
          f"(goal <= 1.15x)")


def memcpy_bps(nbytes):
    a = np.ones(nbytes, np.uint8)
    b = np.empty_like(a)
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = max(best, nbytes / (time.perf_counter() - t0))
    return best


def part3(torch, quick):
    print("3. the same loop under a quarter of its live set")
    steps = 3 if quick else 8
    torch.spillway.reset_peak_memory_stats()
    step, _ = make_loop(torch, "spillway")
    step(), step()
    live = torch.spillway.max_memory_allocated()
    del step
    gc.collect()
    budget = live // 4
    speed = memcpy_bps(64 << 20)
    ratios, floors = [], []
    for _ in range(5):
        free_step, _ = make_loop(torch, "spillway")
        free_step()
        free = timed(lambda: free_step().item(), steps, runs=1)[0] * steps
        del free_step
        gc.collect()
        torch.spillway.empty_cache()
        tight_step, _ = make_loop(torch, "spillway")
        tight_step()
        torch.spillway.set_memory_budget(budget)
        tight_step()  # into the budget
        info0 = torch.spillway.memory_info()
        tight = timed(lambda: tight_step().item(), steps, runs=1)[0] * steps
        info = torch.spillway.memory_info()
        torch.spillway.set_memory_budget(None)
        del tight_step
        gc.collect()
        moved = (info.spilled_bytes_total - info0.spilled_bytes_total +
                 info.restored_bytes_total - info0.restored_bytes_total)
        ratios.append(tight / (free + moved / speed))
        floors.append(moved / (2 * (live - budget) * steps))
    print(f"  live set {live >> 20} MiB, budget {budget >> 20} MiB; "
          f"unbudgeted {free / steps * 1e3:.1f} ms, budgeted "
          f"{tight / steps * 1e3:.1f} ms a step, {moved / steps / 2**20:.0f} "
          f"MiB moved a step, memcpy {speed / 1e9:.2f} GB/s")
    print(f"  budgeted / (unbudgeted + moved / memcpy): min {min(ratios):.2f}, "
          f"median {statistics.median(ratios):.2f} (goal <= 1.1)")
    print(f"  bytes moved / floor (2 x (live set - budget) a step): min "
          f"{min(floors):.2f}, median {statistics.median(floors):.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    try:
        import torch
        import spillway.torch
    except ImportError as e:
        print(f"bench_torch: {e}: not run")
        return 0
    if spillway.torch.device_error is not None:
        print(f"bench_torch: {spillway.torch.device_error}: not run")
        return 0
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, spillway:0 = "
          f"{torch.spillway.spillway_device().name}, 1 intra-op thread")
    part1(torch, args.quick)
    part2(torch, args.quick)
    part3(torch, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
