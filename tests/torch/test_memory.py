"""Storage is spillway memory: PyTorch's figures, budgets, spilling, the
disk tier, out of memory."""
import gc
import io
import os

import pytest
import torch

import spillway
import spillway.torch

from conftest import MiB, settle


def test_accelerator_memory_stats_as_pytorch_tests_them():
    # test/test_accelerator.py::test_memory_stats, on this device
    acc = torch.accelerator.current_accelerator()
    tmp = torch.randn(100, device=acc)
    del tmp
    gc.collect()
    assert torch._C._accelerator_isAllocatorInitialized()
    torch.accelerator.empty_cache()
    stats = torch.accelerator.memory_stats()
    for st in ("allocated_bytes", "reserved_bytes", "active_bytes",
               "requested_bytes"):
        for pool in ("all", "small_pool", "large_pool"):
            for metric in ("peak", "current", "allocated", "freed"):
                assert f"{st}.{pool}.{metric}" in stats
    prev_allocated = torch.accelerator.memory_allocated()
    prev_reserved = torch.accelerator.memory_reserved()
    assert torch.accelerator.max_memory_allocated() > 0
    assert torch.accelerator.max_memory_reserved() > 0
    tmp = torch.ones(256, device=acc)
    assert torch.accelerator.memory_allocated() > prev_allocated
    assert torch.accelerator.memory_reserved() >= prev_reserved
    del tmp
    gc.collect()
    torch.accelerator.empty_cache()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.memory_allocated() == prev_allocated
    assert torch.accelerator.memory_reserved() == prev_reserved
    torch.accelerator.reset_accumulated_memory_stats()
    prev_max_allocated = torch.accelerator.max_memory_allocated()
    prev_max_reserved = torch.accelerator.max_memory_reserved()
    prev_active = torch.accelerator.memory_stats()["active_bytes.all.current"]
    tmp = torch.randn(256, device=acc)
    stats = torch.accelerator.memory_stats()
    assert stats["active_bytes.all.current"] == 1024 + prev_active
    assert stats["active_bytes.all.freed"] == 0
    del tmp
    gc.collect()
    torch.accelerator.empty_cache()
    stats = torch.accelerator.memory_stats()
    assert stats["active_bytes.all.current"] == prev_active
    assert stats["active_bytes.all.freed"] == 1024
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == prev_max_allocated
    assert torch.accelerator.max_memory_reserved() == prev_max_reserved


def test_torch_spillway_mirrors_torch_cuda():
    t = torch.empty(MiB // 4, device="spillway")
    assert torch.spillway.memory_allocated() >= MiB
    assert torch.spillway.max_memory_allocated() >= MiB
    assert torch.spillway.memory_reserved() >= MiB
    free, total = torch.spillway.mem_get_info()
    assert total == 256 * MiB and 0 < free < total
    assert torch.accelerator.get_memory_info() == (free, total)
    info = torch.spillway.memory_info()
    assert info.in_use >= MiB
    assert "torch" in torch.spillway.memory_summary()
    assert any(b["tag"] == "torch" for b in torch.spillway.memory_snapshot())
    del t
    torch.spillway.empty_cache()
    assert torch.spillway.memory_info().cached == 0


def test_a_request_larger_than_the_device_is_oom_and_counted():
    ooms = torch.accelerator.memory_stats()["num_ooms"]
    before = spillway.memory_info().in_use
    with pytest.raises(torch.OutOfMemoryError, match="spillway"):
        torch.empty(512 * MiB, dtype=torch.uint8, device="spillway")
    assert torch.accelerator.memory_stats()["num_ooms"] == ooms + 1
    assert spillway.memory_info().in_use == before


def test_resize_past_what_fits_moves_nothing():
    t = torch.arange(16.0, device="spillway")
    keep = t.cpu()
    with pytest.raises(torch.OutOfMemoryError):
        t.resize_(512 * MiB)
    assert t.shape == (16,) and torch.equal(t.cpu(), keep)
    t.resize_(32)
    assert torch.equal(t.cpu()[:16], keep)
    t.untyped_storage().resize_(16)
    assert t.untyped_storage().nbytes() == 16


def test_a_budget_string_that_is_not_a_size():
    with pytest.raises(ValueError, match="12 parsecs"):
        torch.spillway.set_memory_budget("12 parsecs")
    assert torch.spillway.get_memory_budget() is None


def test_tensors_spill_under_a_budget_and_come_back():
    torch.spillway.set_memory_budget(4 * MiB)
    ts = [torch.full((MiB // 4,), float(i), device="spillway") for i in range(12)]
    info = torch.spillway.memory_info()
    assert info.in_use <= 4 * MiB and info.spilled >= 8 * MiB
    assert spillway.torch.is_spilled(ts[0])
    # an op needing a spilled one brings it back (and, only read, it keeps
    # its host copy: it is the first to go again, copying nothing)
    restores = torch.spillway.memory_info().restores
    ts[0].add_(1)
    assert not spillway.torch.is_spilled(ts[0])
    assert torch.spillway.memory_info().restores == restores + 1
    s = (ts[0] + ts[1]).sum().item()
    assert s == 2.0 * (MiB // 4)
    ts[0].sub_(1)
    for i, t in enumerate(ts):
        assert t.cpu().eq(float(i)).all()


def test_a_spilled_tensor_is_read_from_its_host_copy():
    torch.spillway.set_memory_budget(2 * MiB)
    a = torch.arange(MiB // 4, dtype=torch.float32, device="spillway")
    b = torch.zeros(MiB // 4, device="spillway")
    c = torch.zeros(MiB // 4, device="spillway")
    assert spillway.torch.is_spilled(a)
    restores = torch.spillway.memory_info().restores
    assert torch.equal(a.cpu(), torch.arange(MiB // 4, dtype=torch.float32))
    assert a[5].item() == 5.0
    text = str(a)
    assert "device='spillway:0'" in text and "1.0000e+00" in text
    buf = io.BytesIO()
    torch.save(a, buf)
    assert torch.spillway.memory_info().restores == restores
    assert spillway.torch.is_spilled(a)
    buf.seek(0)
    back = torch.load(buf)
    assert back.device.type == "spillway"
    assert torch.equal(back.cpu(), a.cpu())
    cpu = torch.load(io.BytesIO(buf.getvalue()), map_location="cpu")
    assert torch.equal(cpu, a.cpu())
    del a, b, c, back


def test_tensors_go_to_the_disk_tier(tmp_path):
    torch.spillway.set_memory_budget(2 * MiB)
    torch.spillway.set_host_budget(2 * MiB)
    ts = [torch.full((MiB // 4,), float(i), device="spillway") for i in range(8)]
    info = torch.spillway.memory_stats()
    sw = spillway.memory_stats(device=torch.spillway.spillway_device())
    assert sw["spilled_disk"] > 0
    total = sum(t.sum().item() for t in ts)
    assert total == sum(float(i) * (MiB // 4) for i in range(8))
    assert info["allocated_bytes.all.current"] >= 8 * MiB
    del ts


def test_every_tier_full_says_which(tmp_path):
    d = tmp_path / "gone"
    d.mkdir()
    code = f"""
import torch, spillway, spillway.torch
torch.spillway.set_memory_budget("2M")
torch.spillway.set_host_budget("1M")
keep = []
try:
    for i in range(16):
        keep.append(torch.ones(1 << 18, device="spillway"))
except torch.OutOfMemoryError as e:
    print("OOM", e)
"""
    import subprocess
    import sys
    d.rmdir()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=120,
                         env=dict(os.environ, SPILLWAY_SPILL_DIR=str(d)))
    assert out.returncode == 0, out.stderr
    assert "OOM" in out.stdout
    assert "spill" in out.stdout.lower() or "disk" in out.stdout.lower()


def test_reset_peak_and_accumulated():
    t = torch.empty(MiB, dtype=torch.uint8, device="spillway")
    del t
    assert torch.spillway.max_memory_allocated() >= MiB
    torch.spillway.reset_peak_memory_stats()
    assert torch.spillway.max_memory_allocated() == torch.spillway.memory_allocated()
    torch.spillway.reset_accumulated_memory_stats()
    assert torch.spillway.memory_stats()["allocated_bytes.all.freed"] == 0
    assert torch.spillway.memory_info().allocs == 0
