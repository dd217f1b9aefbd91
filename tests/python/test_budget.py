"""A budget far below a pipeline's peak: the same results, by spilling."""

import numpy as np

import spillway as sw

MiB = 1 << 20
N = MiB // 2  # float32 elements: 2 MiB per array


def pipeline(d, steps=6):
    """Keeps every intermediate alive: the peak is about 2 * steps + 2
    arrays (28 MiB for 6 steps); each operation needs at most 3 resident."""
    x = sw.asarray(np.arange(N, dtype=np.float32) % 97, device=d, tag="x")
    y = sw.asarray(np.ones(N, dtype=np.float32), device=d, tag="y")
    keep = [x, y]
    for i in range(steps):
        z = sw.add(x, y)
        sw.axpy(0.5, x, z)
        w = sw.scale(z, 1.0 / (i + 1))
        keep += [z, w]
        x = w
    sums = [sw.sum(a) for a in keep]
    outs = [a.numpy() for a in keep]
    spilled = sum(a.is_spilled for a in keep)
    return outs, sums, spilled


def test_budget_pipeline_same_results(sim):
    sw.set_memory_budget(None, sim)
    with sw.memory_peak(sim) as free_peak:
        ref_outs, ref_sums, ref_spilled = pipeline(sim)
    assert ref_spilled == 0
    assert free_peak.bytes >= 14 * 2 * MiB

    budget = 8 * MiB  # four arrays, against a peak of fourteen
    sw.empty_cache(sim)
    sw.set_memory_budget(budget, sim)
    before = sw.memory_info(sim)
    with sw.memory_peak(sim) as tight_peak:
        outs, sums, spilled = pipeline(sim)
    after = sw.memory_info(sim)
    sw.set_memory_budget(None, sim)

    assert sums == ref_sums
    for got, want in zip(outs, ref_outs):
        assert np.array_equal(got, want)
    assert after.spills > before.spills
    assert after.restores > before.restores
    assert after.spilled_bytes_total > before.spilled_bytes_total
    assert spilled > 0
    assert tight_peak.bytes <= budget
    assert after.ooms == before.ooms


def test_operations_restore_spilled_arguments(sim):
    """Only the device brings an array back: host reads leave it spilled,
    an operation makes it resident (and pins it while it runs)."""
    a = sw.asarray(np.full(N, 2.0, np.float32), device=sim, tag="a")
    sw.set_memory_budget(4 * MiB, sim)
    b = sw.zeros(N, device=sim, tag="b")
    c = sw.zeros(N, device=sim, tag="c")  # 6 MiB > 4: a, the LRU, spills
    assert a.is_spilled and not c.is_spilled
    assert a[5] == 2.0 and a.numpy()[0] == 2.0
    assert a.is_spilled                     # host reads used the host copy
    restores = sw.memory_info(sim).restores
    assert sw.sum(a) == 2.0 * N             # the device needs it back
    assert not a.is_spilled
    assert sw.memory_info(sim).restores == restores + 1
    sw.add(a, a, out=c)                     # a and c resident: b goes
    assert b.is_spilled and not a.is_spilled and not c.is_spilled
    assert c[N - 1] == 4.0
    sw.set_memory_budget(None, sim)
