"""The torch suite (scripts/test-torch.sh): spillway as a PyTorch device on
real PyTorch, from the installed wheel.

Two simulated devices of 256 MiB each (unless the environment says
otherwise), spillway:0 = sim:0 and spillway:1 = sim:1 where a test names
them; every test leaves both as it found them: no budget, no tensor, no
buffer.
"""
import gc
import os

os.environ.setdefault("SPILLWAY_SIM_DEVICES", "2")
os.environ.setdefault("SPILLWAY_SIM_MEMORY", "256M")

import pytest  # noqa: E402
import torch  # noqa: E402

import spillway  # noqa: E402
import spillway.torch  # noqa: E402

MiB = 1 << 20


def live_blocks():
    return spillway.torch._layer._live_blocks()


def settle():
    """Everything dropped is freed, every device idle."""
    gc.collect()
    for d in spillway.torch.devices():
        spillway.synchronize(device=d)


@pytest.fixture(autouse=True)
def leaves_the_devices_empty():
    assert spillway.torch.device_error is None, spillway.torch.device_error
    settle()
    before = [spillway.memory_info(device=d).in_use
              for d in spillway.torch.devices()]
    yield
    for i in range(torch.spillway.device_count()):
        torch.spillway.set_memory_budget(None, i)
        torch.spillway.set_host_budget(None, i)
    settle()
    assert live_blocks() == 0, f"{live_blocks()} blocks outlived the test"
    for d, b in zip(spillway.torch.devices(), before):
        info = spillway.memory_info(device=d)
        assert info.in_use == b and info.spilled == 0, (d, info)
    torch.spillway.set_device(0)


@pytest.fixture
def two_devices():
    """spillway:0 = sim:0, spillway:1 = sim:1 for the test."""
    old = [d.name for d in spillway.torch.devices()]
    settle()
    spillway.torch.set_devices(["sim:0", "sim:1"])
    yield
    settle()
    spillway.torch.set_devices(old)
