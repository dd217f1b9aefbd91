"""Train a model four times larger than the device allows.

A PyTorch training loop on the spillway device (docs/torch.md): a small
transformer (nn.TransformerEncoderLayer blocks) and Adam, under a memory
budget of a quarter of what its parameters, gradients, optimizer state and
activations hold together.  What does not fit spills to host memory and
comes back when an op needs it; the losses and final parameters are the
CPU's, bit for bit, which the script checks at the end.  Each step prints a
progress line; at the end the memory history of the budgeted run is drawn
(torch-train-memory.png: `spillway plot` draws the same from the JSON).

    python examples/torch_train.py [--steps 6] [--out DIR]

Needs spillway built with its PyTorch layer (pip install --no-build-isolation
. in an environment with torch) and, for the picture, matplotlib.
"""
import argparse
import os
import sys
import time

import torch

import spillway as sw
import spillway.torch


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 128),
        *[torch.nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0,
                                           batch_first=True)
          for _ in range(4)],
        torch.nn.Flatten(),
        torch.nn.Linear(128 * 16, 10),
    )


def batches(steps):
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        yield (torch.randn(16, 16, 32, generator=g),
               torch.randint(0, 10, (16,), generator=g))


def train(device, steps, report=None):
    net = model().to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    losses = []
    for step, (x, y) in enumerate(batches(steps)):
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(net(x.to(device)),
                                                 y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if report:
            report(step, losses[-1], time.perf_counter() - t0)
    return losses, [p.detach().cpu() for p in net.parameters()]


def mib(n):
    return f"{n / (1 << 20):6.1f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default=".", help="folder for the history")
    args = ap.parse_args()
    if spillway.torch.device_error is not None:
        print("no spillway device:", spillway.torch.device_error)
        return 1
    dev = torch.spillway.spillway_device()
    print(f"spillway:0 is {dev.name}")

    # 1. The live set: one unbudgeted step, its peak.
    torch.spillway.reset_peak_memory_stats()
    train("spillway", 2)
    live = torch.spillway.max_memory_allocated()
    budget = live // 4
    print(f"live set {mib(live)}; budget a quarter of it, {mib(budget)}")

    # 2. The same loop under the budget, its memory history recorded.
    torch.spillway.empty_cache()
    torch.spillway.set_memory_budget(budget)
    torch.spillway.reset_peak_memory_stats()
    before = torch.spillway.memory_info()
    history = sw.memory_history(device=dev)

    def progress(step, loss, secs):
        info = torch.spillway.memory_info()
        print(f"step {step + 1}/{args.steps}: loss {loss:.4f}  "
              f"{secs * 1e3:6.1f} ms  on the device {mib(info.in_use)}  "
              f"spilled {mib(info.spilled)}  "
              f"spills {info.spills - before.spills}  "
              f"restores {info.restores - before.restores}")

    losses, params = train("spillway", args.steps, progress)
    history.stop()
    after = torch.spillway.memory_info()
    torch.spillway.set_memory_budget(None)
    moved = (after.spilled_bytes_total - before.spilled_bytes_total +
             after.restored_bytes_total - before.restored_bytes_total)
    print(f"moved {mib(moved)} in {after.spills - before.spills} spills and "
          f"{after.restores - before.restores} restores "
          f"({after.clean_evictions - before.clean_evictions} of the spills "
          f"copied nothing: clean host copies); peak on the device "
          f"{mib(after.peak)} of a {mib(budget)} budget")

    # 3. The check: the CPU computes the same, bit for bit.
    cpu_losses, cpu_params = train("cpu", args.steps)
    same = losses == cpu_losses and all(
        torch.equal(a, b) for a, b in zip(params, cpu_params))
    print("losses and parameters bit-identical to the CPU's:", same)

    # 4. The picture.
    os.makedirs(args.out, exist_ok=True)
    trace = os.path.join(args.out, "torch-train-memory.json")
    sw.dump_memory_history(trace, device=dev)
    try:
        import matplotlib  # noqa: F401  (spillway[plot])
    except ImportError:
        print(f"memory history: {trace} (no picture: matplotlib is missing)")
    else:
        png = sw.plot_memory_history(trace, os.path.join(
            args.out, "torch-train-memory.png"))
        print(f"memory history: {trace}, its picture: {png}")
    return 0 if same and after.peak <= budget else 1


if __name__ == "__main__":
    sys.exit(main())
