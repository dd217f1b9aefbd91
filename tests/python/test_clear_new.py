"""New memory cleared on request (sw.set_clear_new, $SPILLWAY_CLEAR_NEW):
every new array of the device reads as zeros until written, a block
reused from spillway's cache included (without it, it holds its last
owner's bytes); a bad switch is refused and changes nothing."""

import os
import subprocess
import sys

import numpy as np
import pytest

import spillway as sw

N = 1 << 16  # float32: 256 KiB


@pytest.fixture
def cleared(dev):
    sw.set_clear_new(True, device=dev)
    yield dev
    sw.set_clear_new(False, device=dev)


def _leave_secret(dev):
    a = sw.asarray(np.arange(N, dtype=np.float32) + 1, device=dev)
    del a  # its block goes to the cache, bytes and all


def test_off_by_default(dev):
    assert sw.get_clear_new(dev) is False
    assert sw.get_clear_new() is False


def test_reused_block_reads_zeros(cleared):
    dev = cleared
    assert sw.get_clear_new(dev) is True
    for _ in range(3):
        _leave_secret(dev)
        cached = sw.memory_info(dev).cached
        b = sw.empty(N, dtype="float32", device=dev)
        assert sw.memory_info(dev).cached < cached  # the cached block
        assert not b.numpy().any()
        assert float(sw.sum(b)) == 0.0
        b.fill(7)  # written, it reads what was written
        assert (b.numpy() == 7).all()
        del b


def test_fresh_block_reads_zeros(cleared):
    sw.empty_cache(cleared)
    b = sw.empty((3, N + 5), dtype="int8", device=cleared)
    assert not b.numpy().any()


def test_other_queue_sees_zeros(cleared):
    dev = cleared
    q = sw.Queue(dev)
    for _ in range(4):
        _leave_secret(dev)
        z = sw.empty(N, dtype="float32", device=dev)
        one = sw.ones(N, dtype="float32", device=dev)
        out = sw.add(z, one, queue=q)
        assert float(sw.sum(out)) == N
        del z, one, out
    del q


def test_switched_off_again(dev):
    sw.set_clear_new(True, device=dev)
    sw.set_clear_new(False, device=dev)
    assert sw.get_clear_new(dev) is False


@pytest.mark.parametrize("on", [np.True_, 1, np.False_, 0])
def test_numpy_bools_and_0_1(dev, on):
    sw.set_clear_new(on, device=dev)
    assert sw.get_clear_new(dev) is bool(on)
    sw.set_clear_new(False, device=dev)


@pytest.mark.parametrize("bad, exc", [
    ("yes", TypeError), (None, TypeError), (1.0, TypeError),
    (b"1", TypeError), ([True], TypeError), (2, ValueError),
    (-1, ValueError), (1 << 70, ValueError),
])
def test_bad_switch_changes_nothing(dev, bad, exc):
    sw.set_clear_new(True, device=dev)
    try:
        with pytest.raises(exc, match="True or False"):
            sw.set_clear_new(bad, device=dev)
        assert sw.get_clear_new(dev) is True
    finally:
        sw.set_clear_new(False, device=dev)


def test_bad_device():
    with pytest.raises((ValueError, TypeError)):
        sw.set_clear_new(True, device="sim:99")
    with pytest.raises((ValueError, TypeError)):
        sw.get_clear_new(device=42.5)


def _run(env_value, code):
    env = dict(os.environ, SPILLWAY_CLEAR_NEW=env_value,
               PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("value, on", [("1", True), ("on", True),
                                       ("TRUE", True), ("0", False),
                                       ("off", False), ("", False)])
def test_environment_at_open(dev, value, on):
    code = ("import numpy as np, spillway as sw\n"
            f"d = sw.Device({dev.name!r})\n"
            "print(sw.get_clear_new(d))\n"
            "a = sw.asarray(np.ones(4096, np.float32), device=d); del a\n"
            "b = sw.empty(4096, dtype='float32', device=d)\n"
            "print(bool(b.numpy().any()))\n")
    r = _run(value, code)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split()
    assert lines[0] == str(on)
    if on:
        assert lines[1] == "False"


def test_environment_bad_value(dev):
    r = _run("maybe", f"import spillway as sw; sw.Device({dev.name!r})")
    assert r.returncode != 0
    assert "SPILLWAY_CLEAR_NEW='maybe'" in r.stderr
