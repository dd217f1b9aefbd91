"""The device: registration, names, moves, the device table, bad input."""
import os
import subprocess
import sys

import pytest
import torch

import spillway
import spillway.torch

from conftest import MiB


def test_import_registers_the_backend():
    assert torch._C._get_privateuse1_backend_name() == "spillway"
    assert torch.spillway.is_available()
    assert torch.accelerator.current_accelerator().type == "spillway"
    t = torch.randn(8, device="spillway")
    assert t.device == torch.device("spillway", 0)
    assert t.is_spillway
    assert str(t.device) == "spillway:0"


def test_to_cpu_and_spillway_round_trip():
    a = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    for t in (a.to("spillway"), a.spillway(), a.to(device="spillway:0")):
        assert t.device.type == "spillway"
        assert torch.equal(t.cpu(), a)
    m = torch.nn.Linear(3, 2).spillway()
    assert all(p.device.type == "spillway" for p in m.parameters())
    s = torch.UntypedStorage(16).spillway()
    assert s.device.type == "spillway" and s.nbytes() == 16


def test_every_dtype_survives_the_trip():
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16,
                  torch.int8, torch.uint8, torch.int16, torch.int32,
                  torch.int64, torch.bool, torch.complex64, torch.complex128):
        a = (torch.arange(10) % 3).to(dtype)
        assert torch.equal(a.to("spillway").cpu(), a), dtype


def test_data_ptr_is_opaque_and_views_resolve_to_their_base():
    base = torch.zeros(1000, device="spillway")
    view = base[10:20]
    # an address far from any mapping: PyTorch never holds the bytes'
    assert base.data_ptr() >= 1 << 48
    assert view.data_ptr() == base.data_ptr() + 10 * 4
    assert spillway.torch.buffer_id(view) == spillway.torch.buffer_id(base)
    view.fill_(7)
    assert base.cpu()[10:20].eq(7).all() and base.cpu()[:10].eq(0).all()
    # a storage slice (no deleter of ours) resolves too
    sl = base.untyped_storage()[40:80]
    assert torch.equal(torch.tensor([], device="spillway").set_(sl).cpu(),
                       torch.full((10,), 7.0))


def test_the_tensors_live_in_spillway_memory():
    before = spillway.memory_info().in_use
    t = torch.empty(MiB // 4, device="spillway")
    assert spillway.memory_info().in_use == before + MiB
    tags = [b["tag"] for b in spillway.memory_snapshot()]
    assert "torch" in tags
    del t


def test_current_device_and_guard(two_devices):
    assert torch.spillway.device_count() == 2
    assert torch.accelerator.device_count() == 2
    with torch.spillway.device(1):
        assert torch.spillway.current_device() == 1
        t = torch.ones(4, device="spillway")
        assert t.device.index == 1
    assert torch.spillway.current_device() == 0
    u = torch.ones(4, device="spillway:1")
    assert torch.spillway.spillway_device(1).name == "sim:1"
    assert spillway.memory_info(device="sim:1").in_use >= 512
    v = u.to("spillway:0")
    assert v.device.index == 0 and torch.equal(v.cpu(), u.cpu())
    del t, u, v


def test_a_tensor_of_another_device_in_an_op_is_an_error(two_devices):
    a = torch.ones(4, device="spillway:0")
    b = torch.ones(4, device="spillway:1")
    before = [spillway.memory_info(device=d).in_use for d in ("sim:0", "sim:1")]
    with pytest.raises(RuntimeError, match="same device.*spillway:0.*spillway:1"):
        a + b
    with pytest.raises(RuntimeError, match="same device"):
        a + torch.ones(4)
    assert [spillway.memory_info(device=d).in_use
            for d in ("sim:0", "sim:1")] == before
    # a CPU scalar is allowed, as on CUDA
    assert torch.equal((a + torch.tensor(2.0)).cpu(), torch.full((4,), 3.0))


def test_a_device_that_does_not_exist():
    before = spillway.memory_info().in_use
    with pytest.raises((RuntimeError, IndexError), match="spillway:7 does not exist"):
        torch.empty(4, device="spillway:7")
    with pytest.raises(ValueError, match="spillway:7 does not exist"):
        torch.spillway.set_device(7)
    assert spillway.memory_info().in_use == before


def test_set_devices_only_without_live_tensors():
    t = torch.ones(4, device="spillway")
    with pytest.raises(RuntimeError, match="alive"):
        spillway.torch.set_devices(["sim:1"])
    del t
    with pytest.raises(TypeError, match="list"):
        spillway.torch.set_devices("sim:0")
    with pytest.raises(ValueError):
        spillway.torch.set_devices([])
    with pytest.raises(Exception, match="nosuch"):
        spillway.torch.set_devices(["nosuch:0"])
    assert [d.name for d in spillway.torch.devices()] == ["sim:0"]


def test_devices_come_from_the_environment():
    code = ("import torch, spillway.torch; "
            "print([d.name for d in spillway.torch.devices()], "
            "torch.spillway.device_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=120,
                         env=dict(os.environ, SPILLWAY_TORCH_DEVICES="sim:1,sim:0"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['sim:1', 'sim:0'] 2"


def test_host_device_works_too():
    code = """
import torch, spillway, spillway.torch
spillway.torch.set_devices(["host:0"])
a = torch.arange(6.0, device="spillway").reshape(2, 3)
assert torch.equal((a @ a.T).cpu(), torch.arange(6.0).reshape(2, 3) @ torch.arange(6.0).reshape(2, 3).T)
print(spillway.memory_info(device="host:0").in_use > 0)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_streams_and_events():
    s = torch.Stream(device="spillway")
    e = torch.Event(device="spillway")
    e.record(s)
    e.synchronize()
    assert e.query()
    torch.spillway.synchronize()
    torch.accelerator.synchronize()
    assert torch.accelerator.current_stream().device.type == "spillway"


def test_generators_follow_the_cpu_stream():
    torch.manual_seed(123)
    a = torch.randn(100, device="spillway")
    torch.manual_seed(123)
    assert torch.equal(a.cpu(), torch.randn(100))
    g = torch.Generator(device="spillway").manual_seed(5)
    b = torch.rand(50, device="spillway", generator=g)
    assert torch.equal(b.cpu(), torch.rand(50, generator=torch.Generator().manual_seed(5)))
    torch.spillway.manual_seed(9)
    st = torch.spillway.get_rng_state()
    x = torch.randn(8, device="spillway")
    torch.spillway.set_rng_state(st)
    assert torch.equal(torch.randn(8, device="spillway").cpu(), x.cpu())
    assert torch.spillway.initial_seed() == 9
