"""Ops: the minimal set and the fallback, which runs PyTorch's own CPU
kernel in place on the device's memory.  Every result is checked against
the same op on CPU tensors, bit for bit."""
import os
import subprocess
import sys

import pytest
import torch

import spillway
import spillway.torch

from conftest import MiB


def same(dev_result, cpu_result):
    if isinstance(dev_result, (tuple, list)):
        assert len(dev_result) == len(cpu_result)
        for a, b in zip(dev_result, cpu_result):
            same(a, b)
        return
    if isinstance(dev_result, torch.Tensor):
        assert dev_result.device.type == "spillway", dev_result.device
        got = dev_result.cpu()
        assert got.dtype == cpu_result.dtype and got.shape == cpu_result.shape
        assert torch.equal(got, cpu_result) or (
            got.is_floating_point() and torch.equal(got.isnan(), cpu_result.isnan())
            and torch.equal(got.nan_to_num(), cpu_result.nan_to_num())), \
            (got, cpu_result)
    else:
        assert dev_result == cpu_result


def both(*tensors):
    return [t.to("spillway") for t in tensors], list(tensors)


CASES = {
    "add": lambda a, b: a + b,
    "mul_scalar": lambda a, b: a * 3 - 1,
    "div": lambda a, b: a / (b.abs() + 1),
    "matmul": lambda a, b: a @ b.T,
    "sum_dim": lambda a, b: a.sum(dim=1, keepdim=True),
    "mean_max": lambda a, b: (a.mean(), a.max(), a.argmax(dim=0)),
    "softmax": lambda a, b: torch.softmax(a, dim=-1),
    "log_softmax": lambda a, b: torch.log_softmax(a, dim=0),
    "layer_norm": lambda a, b: torch.nn.functional.layer_norm(a, a.shape[-1:]),
    "gelu_tanh": lambda a, b: torch.nn.functional.gelu(torch.tanh(a)),
    "where": lambda a, b: torch.where(a > b, a, b),
    "cat_stack": lambda a, b: (torch.cat([a, b]), torch.stack([a, b], dim=2)),
    "transpose_contig": lambda a, b: a.t().contiguous(),
    "index": lambda a, b: a[torch.tensor([0, 2, 2])],
    "index_dev": lambda a, b: a[(b[:, 0] > 0)],
    "masked_select": lambda a, b: torch.masked_select(a, b > 0),
    "nonzero": lambda a, b: torch.nonzero(a > 0),
    "sort_topk": lambda a, b: (a.sort(dim=1), a.topk(3, dim=1)),
    "cumsum": lambda a, b: a.cumsum(0),
    "unique": lambda a, b: torch.unique((a * 2).round(), return_counts=True),
    "clamp_pow": lambda a, b: a.clamp(-0.5, 0.5).pow(2),
    "to_dtype": lambda a, b: (a.to(torch.float16), a.to(torch.int32), a.double()),
    "slice_step": lambda a, b: a[::2, 1::3],
    "expand_add": lambda a, b: a[:, :1].expand(-1, 5) + b[:, :5],
    "einsum": lambda a, b: torch.einsum("ij,kj->ik", a, b),
    "conv2d": lambda a, b: torch.nn.functional.conv2d(
        a.reshape(1, 1, 6, 8), b[:3, :3].reshape(1, 1, 3, 3)),
    "embedding": lambda a, b: torch.nn.functional.embedding(
        torch.tensor([[1, 3], [5, 0]], device=a.device), a),
    "complex": lambda a, b: torch.view_as_complex(
        a[:, :2].contiguous()).mul(1j).abs(),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_cpu(name):
    torch.manual_seed(0)
    a = torch.randn(6, 8)
    b = torch.randn(6, 8)
    (da, db), (ca, cb) = both(a, b)
    fn = CASES[name]
    same(fn(da, db), fn(ca, cb))


def test_in_place_and_out_write_device_memory():
    a = torch.arange(12.0).reshape(3, 4)
    d = a.to("spillway")
    view = d[1]
    allocs = torch.spillway.memory_info().allocs
    view.mul_(10)                    # a view's in-place op: the base changes
    d.add_(1)
    assert torch.spillway.memory_info().allocs == allocs  # in place: nothing new
    a[1] *= 10
    a += 1
    assert torch.equal(d.cpu(), a)
    out = torch.empty(3, 4, device="spillway")
    r = torch.add(d, d, out=out)
    assert r is out and torch.equal(out.cpu(), a + a)
    # an out= of the wrong size is resized on the device, as on the CPU
    small = torch.empty(0, device="spillway")
    torch.mul(d, 2, out=small)
    assert small.shape == (3, 4) and torch.equal(small.cpu(), a * 2)
    assert small.device.type == "spillway"


def test_outputs_are_written_where_they_live():
    a = torch.randn(MiB // 4, device="spillway")
    b = torch.randn(MiB // 4, device="spillway")
    info = torch.spillway.memory_info()
    c = a + b
    after = torch.spillway.memory_info()
    # one allocation, the output; no copy in or out of the device
    assert after.allocs == info.allocs + 1
    assert after.restored_bytes_total == info.restored_bytes_total
    assert after.spilled_bytes_total == info.spilled_bytes_total
    assert torch.equal(c.cpu(), a.cpu() + b.cpu())


def test_views_share_their_base():
    d = torch.zeros(4, 6, device="spillway")
    v = d.view(24)[3:9].view(2, 3)
    t = d.t()
    v.fill_(5)
    assert spillway.torch.buffer_id(v) == spillway.torch.buffer_id(d)
    assert t.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    ref = torch.zeros(4, 6)
    ref.view(24)[3:9] = 5
    assert torch.equal(d.cpu(), ref) and torch.equal(t.cpu(), ref.t())
    d.unsqueeze(0).squeeze(0).transpose(0, 1)[2].zero_()
    ref[:, 2] = 0
    assert torch.equal(d.cpu(), ref)


def test_set_and_storage():
    a = torch.arange(10.0, device="spillway")
    b = torch.empty(0, device="spillway")
    b.set_(a.untyped_storage(), 2, (3,), (2,))
    assert torch.equal(b.cpu(), torch.tensor([2.0, 4.0, 6.0]))
    c = torch.empty(0, device="spillway").set_(a)
    c[0] = 42
    assert a[0].item() == 42
    c.set_()
    assert c.numel() == 0 and a.numel() == 10


def test_items_and_scalars():
    d = torch.tensor([1.5, -2.0, 3.25], device="spillway")
    assert d[2].item() == 3.25
    assert d.sum().item() == 2.75
    assert d.tolist() == [1.5, -2.0, 3.25]
    assert bool((d > 0).any())
    assert int(torch.tensor(7, device="spillway")) == 7
    assert torch.tensor(1 + 2j, device="spillway").item() == 1 + 2j


def test_autograd_matches_cpu():
    torch.manual_seed(1)
    x = torch.randn(5, 7, requires_grad=True)
    w = torch.randn(7, 3, requires_grad=True)
    xd = x.detach().to("spillway").requires_grad_()
    wd = w.detach().to("spillway").requires_grad_()
    (torch.tanh(x @ w) ** 2).sum().backward()
    (torch.tanh(xd @ wd) ** 2).sum().backward()
    assert torch.equal(xd.grad.cpu(), x.grad)
    assert torch.equal(wd.grad.cpu(), w.grad)


def test_foreach_runs_element_by_element():
    """No call needs the whole list resident: a budget that holds three of
    eight tensors, and _foreach_ ops over all eight."""
    ts = [torch.full((MiB // 4,), float(i), device="spillway") for i in range(8)]
    us = [torch.ones(MiB // 4, device="spillway") for _ in range(8)]
    torch.spillway.set_memory_budget(3 * MiB)
    torch._foreach_add_(ts, us, alpha=2)
    torch._foreach_mul_(ts, 0.5)
    norms = torch._foreach_norm(ts)
    torch.spillway.set_memory_budget(None)
    for i, (t, n) in enumerate(zip(ts, norms)):
        want = torch.full((MiB // 4,), (float(i) + 2) * 0.5)
        assert torch.equal(t.cpu(), want)
        assert torch.equal(n.cpu(), torch.linalg.vector_norm(want))


def test_a_launch_that_cannot_fit_moves_nothing():
    ts = [torch.ones(MiB // 4, device="spillway") for _ in range(3)]
    torch.spillway.set_memory_budget(2 * MiB)
    info = torch.spillway.memory_info()
    with pytest.raises(torch.OutOfMemoryError, match="budget"):
        torch.cat(ts)
    assert torch.spillway.memory_info().spilled_bytes_total == \
        info.spilled_bytes_total


def test_the_fallback_on_a_device_the_host_cannot_address():
    if not any(d.name == "opencl:0" for d in spillway.devices()):
        pytest.skip("no opencl:0 here")
    code = """
import torch, spillway.torch
spillway.torch.set_devices(["opencl:0"])
a = torch.arange(8.0).to("spillway")
b = torch.empty(8, device="spillway")
b.copy_(a)
print(b.cpu().tolist() == list(range(8)), a[3].item())
try:
    a + 1
except (RuntimeError, NotImplementedError) as e:
    print("ERR", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "True 3.0"
    assert "opencl:0" in lines[1] and "cannot address" in lines[1]
    assert "docs/torch.md" in lines[1]
