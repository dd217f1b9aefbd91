"""Array.prefetch(): a spilled array's restore started early, on the
device's copy queue (docs/python.md, "Spilling and prefetch")."""

import numpy as np
import pytest

import spillway as sw

MiB = 1 << 20
N = MiB  # float32 elements: 4 MiB arrays


def spill_all_but_last(dev, arrays):
    """A budget that holds only the last array: the others spill."""
    sw.set_memory_budget(arrays[-1].nbytes, dev)
    for a in arrays[:-1]:
        assert a.is_spilled


@pytest.mark.spills
def test_prefetch_restores_and_keeps_the_data(dev):
    xs = [sw.asarray(np.full(N, float(i), np.float32), device=dev)
          for i in range(3)]
    spill_all_but_last(dev, xs)
    sw.set_memory_budget(None, dev)
    restores = sw.memory_info(dev).restores
    xs[0].prefetch()
    assert not xs[0].is_spilled
    assert sw.memory_info(dev).restores == restores + 1
    # Its next use on the device sees the data, as does the host.
    out = sw.zeros(N, device=dev)
    sw.add(xs[0], xs[1], out=out)
    np.testing.assert_array_equal(out.numpy(), np.full(N, 1.0, np.float32))
    np.testing.assert_array_equal(xs[0].numpy(), np.zeros(N, np.float32))
    # Resident: a no-op.
    xs[0].prefetch()
    assert sw.memory_info(dev).restores == restores + 2  # xs[1], by add
    del out, xs


@pytest.mark.spills
def test_prefetch_on_a_queue(dev):
    xs = [sw.asarray(np.full(N, float(i + 1), np.float32), device=dev)
          for i in range(2)]
    spill_all_but_last(dev, xs)
    sw.set_memory_budget(None, dev)
    q = sw.Queue(dev)
    xs[0].prefetch(queue=q)
    out = sw.zeros(N, device=dev)
    sw.scale(xs[0], 3.0, out=out, queue=q)
    sw.order_manager[q].wait()
    np.testing.assert_array_equal(out.numpy(), np.full(N, 3.0, np.float32))
    del out, xs, q


@pytest.mark.spills
def test_prefetch_then_free(dev):
    """Freed while its copy may still run: the memory's next owner keeps
    what it is given."""
    xs = [sw.asarray(np.full(N, 5.0, np.float32), device=dev)
          for _ in range(2)]
    spill_all_but_last(dev, xs)
    sw.set_memory_budget(None, dev)
    xs[0].prefetch()
    del xs[0]
    b = sw.full(N, 7.0, device=dev)
    assert float(sw.sum(b)) == 7.0 * N
    del b, xs


def test_prefetch_bad_arguments(dev, sim1):
    a = sw.zeros(16, device=dev)
    with pytest.raises(TypeError):
        a.prefetch(1)  # keyword only
    with pytest.raises(TypeError):
        a.prefetch(queue="no queue")
    if dev.name != sim1.name:
        q1 = sw.Queue(sim1)
        with pytest.raises(ValueError):
            a.prefetch(queue=q1)
        del q1
    del a


@pytest.mark.spills
def test_prefetch_budget_too_small_moves_nothing(dev):
    """A budget the array cannot fit under: DeviceMemoryError, and the
    array stays spilled with its data."""
    xs = [sw.asarray(np.full(N, float(i + 2), np.float32), device=dev)
          for i in range(2)]
    spill_all_but_last(dev, xs)
    sw.set_memory_budget(xs[0].nbytes // 2, dev)
    try:
        info = sw.memory_info(dev)
        with pytest.raises(sw.DeviceMemoryError):
            xs[0].prefetch()
        assert xs[0].is_spilled
        assert sw.memory_info(dev).restores == info.restores
    finally:
        sw.set_memory_budget(None, dev)
    np.testing.assert_array_equal(xs[0].numpy(),
                                  np.full(N, 2.0, np.float32))
    del xs
