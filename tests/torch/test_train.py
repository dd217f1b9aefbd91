"""Training under a budget of a quarter of the live set: parameters,
gradients, Adam's state and saved activations spill and come back, and the
losses and final parameters are bit-identical to the same loop on CPU."""
import gc

import pytest
import torch

import spillway
import spillway.torch

from conftest import MiB


def mlp():
    layers = [torch.nn.Linear(64, 384), torch.nn.ReLU()]
    for _ in range(6):
        layers += [torch.nn.Linear(384, 384), torch.nn.GELU()]
    layers += [torch.nn.Linear(384, 10)]
    return torch.nn.Sequential(*layers)


def transformer():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Linear(32, 128)
            self.blocks = torch.nn.ModuleList(
                torch.nn.TransformerEncoderLayer(
                    d_model=128, nhead=4, dim_feedforward=256, dropout=0.0,
                    batch_first=True)
                for _ in range(3))
            self.head = torch.nn.Linear(128, 10)

        def forward(self, x):
            h = self.embed(x)
            for b in self.blocks:
                h = b(h)
            return self.head(h.mean(dim=1))

    return Net()


def batches(kind, steps):
    g = torch.Generator().manual_seed(7)
    for _ in range(steps):
        if kind == "mlp":
            x = torch.randn(32, 64, generator=g)
        else:
            x = torch.randn(8, 16, 32, generator=g)
        yield x, torch.randint(0, 10, (x.shape[0],), generator=g)


def train(kind, device, steps=4, budget=None):
    torch.manual_seed(0)
    model = (mlp if kind == "mlp" else transformer)().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if budget is not None:
        torch.spillway.set_memory_budget(budget)
    losses = []
    for x, y in batches(kind, steps):
        x, y = x.to(device), y.to(device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_unbudgeted_matches_cpu(kind):
    cpu = train(kind, "cpu")
    dev = train(kind, "spillway")
    assert dev[0] == cpu[0]
    assert all(torch.equal(a, b) for a, b in zip(dev[1], cpu[1]))


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_quarter_budget_matches_cpu(kind):
    cpu = train(kind, "cpu", steps=5)
    # the live set: what the tensors of a step hold at most (parameters,
    # gradients, Adam's two moments, saved activations), unbudgeted
    torch.spillway.reset_peak_memory_stats()
    train(kind, "spillway", steps=2)
    live = torch.spillway.max_memory_allocated()
    gc.collect()
    torch.spillway.empty_cache()
    torch.spillway.reset_peak_memory_stats()
    info0 = torch.spillway.memory_info()
    budget = live // 4
    dev = train(kind, "spillway", steps=5, budget=budget)
    info = torch.spillway.memory_info()
    assert dev[0] == cpu[0], (dev[0], cpu[0])
    assert all(torch.equal(a, b) for a, b in zip(dev[1], cpu[1]))
    # it really ran short: tensors went out and came back, and the device
    # never held more than the budget
    assert info.peak <= budget
    assert info.spills - info0.spills > 10
    assert info.restores - info0.restores > 10
