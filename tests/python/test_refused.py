"""An operation or a pin refused for the budget changes nothing (issue 34,
item 4; include/spillway.h, "Conventions"): no array moves, the cache holds
what it held, the spill counters stay.  An operation that makes its result
checks that the launch on its operands and the result can fit before it
allocates the result: allocated first, the result's room was made by
spilling an operand and trimming the cache, and the launch then refused."""

import numpy as np
import pytest

import spillway as sw

pytestmark = pytest.mark.spills

N = 512  # float32: 2 KiB, four allocation granules


def world(dev):
    """a resident, b spilled, 1 KiB cached, under a budget of 3 KiB: one
    array beside the cache, never two."""
    b = sw.asarray(np.arange(N, dtype=np.float32), device=dev)
    a = sw.asarray(np.full(N, 3.0, np.float32), device=dev)
    sw.empty_cache(dev)
    sw.set_memory_budget(2 * 1024, dev)  # b, the least recently used, goes
    sw.empty_cache(dev)
    sw.set_memory_budget(3 * 1024, dev)
    t = sw.zeros(N // 2, device=dev)
    del t  # its 1 KiB to the cache
    assert not a.is_spilled and b.is_spilled
    assert sw.memory_info(dev).cached == 1024
    return a, b


def expect_refused(dev, a, b, call):
    before = sw.memory_info(dev)
    with pytest.raises(sw.DeviceMemoryError, match="nothing was moved"):
        call()
    after = sw.memory_info(dev)
    for field in ("in_use", "cached", "spilled", "spills", "restores",
                  "spilled_bytes_total"):
        assert getattr(after, field) == getattr(before, field), field
    assert not a.is_spilled and b.is_spilled


def finish(dev, a, b):
    sw.set_memory_budget(None, dev)
    assert np.array_equal(a.numpy(), np.full(N, 3.0, np.float32))
    assert np.array_equal(b.numpy(), np.arange(N, dtype=np.float32))
    assert np.array_equal(sw.add(a, b).numpy(),
                          np.arange(N, dtype=np.float32) + 3)


CALLS = {
    "sw.scale(a, 2)": lambda a, b, q: sw.scale(a, 2),
    "sw.scale(b, 2)": lambda a, b, q: sw.scale(b, 2),
    "sw.scale(a, 2, queue=q)": lambda a, b, q: sw.scale(a, 2, queue=q),
    "sw.add(a, b)": lambda a, b, q: sw.add(a, b),
    "sw.add(a, a)": lambda a, b, q: sw.add(a, a),
    "sw.add(b, a, queue=q)": lambda a, b, q: sw.add(b, a, queue=q),
    "a + b": lambda a, b, q: a + b,
    "b + a": lambda a, b, q: b + a,
    "a - b": lambda a, b, q: a - b,
    "a * 2": lambda a, b, q: a * 2,
    "-a": lambda a, b, q: -a,
    "a.copy()": lambda a, b, q: a.copy(),
    "a.copy(queue=q)": lambda a, b, q: a.copy(queue=q),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_operation_refused_before_its_result(dev, name):
    a, b = world(dev)
    q = sw.Queue(dev)
    expect_refused(dev, a, b, lambda: CALLS[name](a, b, q))
    del q
    finish(dev, a, b)


@pytest.mark.parametrize("queue", [False, True])
def test_pin_refused_keeps_the_cache(dev, queue):
    a, b = world(dev)
    q = sw.Queue(dev) if queue else None

    def pin(*arrays):
        with sw.pinned(*arrays, queue=q):
            pass

    expect_refused(dev, a, b, lambda: pin(a, b))
    expect_refused(dev, a, b, lambda: pin(b, a))
    del q
    finish(dev, a, b)


def test_operation_that_fits_spills_no_operand(dev):
    """Room for the result is made by spilling other arrays, never an
    operand (which the launch would bring back, spilling another)."""
    x = sw.asarray(np.full(N, 2.0, np.float32), device=dev)
    y = sw.asarray(np.full(N, 5.0, np.float32), device=dev)
    other = sw.zeros(N, device=dev)
    sw.empty_cache(dev)
    sw.set_memory_budget(6 * 1024, dev)  # x, y, other: full; x the LRU
    restores = sw.memory_info(dev).restores
    out = sw.add(x, y)
    assert other.is_spilled and not x.is_spilled and not y.is_spilled
    assert sw.memory_info(dev).restores == restores
    sw.set_memory_budget(None, dev)
    assert out[N - 1] == 7.0
