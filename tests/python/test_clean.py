"""Clean copies (issue 27): a restored array keeps the host copy it came
from until something writes it, and evicting it meanwhile copies nothing.
From Python: reads (operands, sums, host reads, pins with access "r")
keep it; writes (in-place operators, item assignment, fill, a pin without
"r", an export) end it; memory_stats() and the history carry the figures.
"""

import numpy as np
import pytest

import spillway as sw

N = 1 << 16


def spill_all(dev):
    sw.set_memory_budget(1, dev)
    sw.set_memory_budget(None, dev)


def clean_array(dev, seed=1):
    a = sw.asarray(np.arange(N, dtype=np.float32) + seed, device=dev)
    spill_all(dev)
    assert a.is_spilled
    float(a.sum())  # brought back to be read: clean
    assert not a.is_spilled
    return a


@pytest.mark.spills
def test_clean_copy_evicts_without_copying(dev):
    a = clean_array(dev)
    s0 = sw.memory_stats(dev)
    assert s0["host_copies"] == a.nbytes
    mine = [b for b in sw.memory_snapshot(dev) if b["size"] == a.nbytes]
    assert [b["host_copy"] for b in mine] == [True]
    spill_all(dev)
    s1 = sw.memory_stats(dev)
    assert a.is_spilled
    mine = [b for b in sw.memory_snapshot(dev) if b["size"] == a.nbytes]
    assert [(b["state"], b["host_copy"], b["on_disk"]) for b in mine] == \
        [("spilled", False, False)]
    assert s1["spilled_bytes_total"] == s0["spilled_bytes_total"]
    assert s1["clean_evictions"] == s0["clean_evictions"] + 1
    assert s1["host_copies"] == 0
    np.testing.assert_array_equal(a.numpy(),
                                  np.arange(N, dtype=np.float32) + 1)


def _write_inplace(a):
    a *= 1.0


def _write_item(a):
    a[3] = -1


def _write_fill(a):
    a.fill(7)


def _write_pin(a):
    with sw.pinned(a):
        pass


def _write_pin_w(a):
    with sw.pinned(a, access="w"):
        pass


def _write_export(a):
    if a.device.name.startswith("opencl"):
        pytest.skip("no host consumer reads kDLOpenCL")
    a.__dlpack__()


def _read_sum(a):
    float(a.sum())


def _read_operand(a):
    b = a + a
    del b


def _read_host(a):
    a.numpy()


def _read_pin(a):
    with sw.pinned(a, access="r") as (v,):
        assert v.readonly


@pytest.mark.spills
@pytest.mark.parametrize("use,writes", [
    (_write_inplace, True), (_write_item, True), (_write_fill, True),
    (_write_pin, True), (_write_pin_w, True), (_write_export, True),
    (_read_sum, False), (_read_operand, False), (_read_host, False),
    (_read_pin, False)])
def test_writes_end_a_clean_copy_and_reads_keep_it(dev, use, writes):
    a = clean_array(dev)
    expect = a.numpy()
    use(a)
    sw.synchronize(dev)
    expect = a.numpy()  # what it holds now, read before the eviction
    s0 = sw.memory_stats(dev)
    assert s0["host_copies"] == (0 if writes else a.nbytes)
    spill_all(dev)
    s1 = sw.memory_stats(dev)
    copied = s1["spilled_bytes_total"] - s0["spilled_bytes_total"]
    assert copied == (a.nbytes if writes else 0)
    np.testing.assert_array_equal(a.numpy(), expect)


def test_pinned_access_bad_input(dev):
    a = sw.ones(8, device=dev)
    with pytest.raises(ValueError, match="one per array"):
        sw.pinned(a, access="rr")
    with pytest.raises(ValueError, match="'r' \\(read\\) or 'w'"):
        sw.pinned(a, access="x")
    with pytest.raises(TypeError, match="access must be a str"):
        sw.pinned(a, access=1)
    with sw.pinned(a, a, access="rw") as (v1, v2):
        assert v1.readonly and not v2.readonly
    with sw.pinned(a, access=None) as (v,):
        assert not v.readonly


@pytest.mark.spills
def test_history_carries_host_copies(dev):
    with sw.memory_history(device=dev) as h:
        a = clean_array(dev)
        a *= 2.0
        spill_all(dev)
    events, _ = h.events()
    kinds = [e["kind"] for e in events]
    assert "host_copy_drop" in kinds
    restores = [e for e in events if e["kind"] == "restore_begin"]
    assert restores and restores[-1]["host_copies"] >= a.nbytes
    assert events[-1]["host_copies"] == 0


@pytest.mark.spills
@pytest.mark.parametrize("fmt", ["chrome", "snapshot"])
def test_dumps_carry_host_copies(dev, tmp_path, fmt):
    from spillway.plot import load_history
    with sw.memory_history(device=dev) as h:
        a = clean_array(dev)
        a *= 2.0
    path = tmp_path / ("h." + fmt)
    h.dump(str(path), format=fmt)
    hist = load_history(str(path))
    assert len(hist["host_copies"]) == len(hist["t"])
    assert max(hist["host_copies"]) == a.nbytes
    assert hist["host_copies"][-1] == 0


@pytest.mark.spills
@pytest.mark.parametrize("fmt", ["chrome", "snapshot"])
def test_lanes_show_where_a_buffer_was(dev, tmp_path, fmt):
    from spillway.plot import buffer_lanes, load_history
    with sw.memory_history(device=dev) as h:
        a = sw.asarray(np.arange(N, dtype=np.float32), device=dev)
        small = sw.ones(8, device=dev)
        spill_all(dev)
        float(a.sum())  # back, clean
        a *= 2.0        # written: resident, no host copy
        del small
    path = tmp_path / ("h." + fmt)
    h.dump(str(path), format=fmt)
    lanes = buffer_lanes(load_history(str(path)), lanes=1)
    assert len(lanes) == 1  # the largest: a
    label, segs = lanes[0]
    assert "%.1f MiB" % (a.nbytes / 2**20) in label
    places = [p for _, _, p in segs]
    # Collapsed runs: on the device, spilled, back with a clean copy,
    # then written; each copy between, where the device timed it.
    runs = [p for i, p in enumerate(places) if i == 0 or places[i - 1] != p]
    moved = [p for p in runs if p != "copy"]
    assert moved == ["resident", "spilled", "clean", "resident"]
    if dev.name.split(":")[0] in ("sim", "opencl", "cuda"):
        assert runs == ["resident", "copy", "spilled", "copy", "clean",
                        "resident"]
    assert all(b >= a_ for a_, b, _ in segs)


@pytest.mark.spills
def test_advise_cold_goes_first(dev):
    """a.advise("cold"): evicted before the arrays in use, the newest
    included, until its next use; "normal" undoes it; bad input raises and
    changes nothing."""
    a = sw.asarray(np.arange(N, dtype=np.float32), device=dev)
    b = sw.asarray(np.arange(N, dtype=np.float32) + 1, device=dev)
    a *= 1.0
    b *= 1.0  # b used last
    b.advise("cold")
    assert not b.is_spilled  # nothing moves now
    in_use = sw.memory_stats(dev)["in_use"]
    sw.set_memory_budget(in_use - b.nbytes, dev)
    assert b.is_spilled and not a.is_spilled
    sw.set_memory_budget(None, dev)
    b *= 1.0  # back, and used: ordinary again
    a.advise("cold")
    a.advise("normal")
    sw.set_memory_budget(in_use - b.nbytes, dev)
    assert a.is_spilled and not b.is_spilled  # plain LRU: a is older
    sw.set_memory_budget(None, dev)
    with pytest.raises(ValueError, match="cold"):
        b.advise("warm")
    with pytest.raises(TypeError, match="cold"):
        b.advise(1)  # a wrong type (issue 34: was ValueError)
    with pytest.raises(TypeError):
        b.advise()
    np.testing.assert_array_equal(a.numpy(), np.arange(N, dtype=np.float32))
    np.testing.assert_array_equal(b.numpy(),
                                  np.arange(N, dtype=np.float32) + 1)
    del a, b


def test_advise_wrong_types_are_type_errors(dev):
    """advise(None), advise(1), advise(b"cold") were ValueError; a str
    other than "cold" or "normal" still is."""
    a = sw.zeros(4, device=dev)
    for bad in [None, 1, b"cold", 0.5, ["cold"]]:
        with pytest.raises(TypeError, match="str"):
            a.advise(bad)
    with pytest.raises(ValueError, match="cold"):
        a.advise("warm")
    with pytest.raises(ValueError, match="cold"):
        a.advise("cold\x00")
    a.advise("cold")
    a.advise(how="normal")
    del a


def _evict_one(dev, arrays):
    """Which of arrays spill when the budget leaves room for one less."""
    in_use = sw.memory_stats(dev)["in_use"]
    sw.set_memory_budget(in_use - arrays[0].nbytes, dev)
    out = [a.is_spilled for a in arrays]
    sw.set_memory_budget(None, dev)
    return out


@pytest.mark.spills
def test_the_spilling_order_is_not_lru(dev):
    """The order README, docs/python.md and spillway.h state (issue 34:
    they said least recently used first): a clean copy restored once and
    read on the device since goes before every other array, however
    recently used; restored a second time it is in LRU order again; a
    prefetched copy not used yet is not cold; among cold arrays the clean
    go before the advised dirty ones, whatever their age."""
    a = sw.asarray(np.arange(N, dtype=np.float32), device=dev)
    spill_all(dev)
    d = sw.asarray(np.arange(N, dtype=np.float32) + 1, device=dev)
    d *= 1.0
    float(a.sum())  # a: restored once, read by an operation
    e = sw.asarray(np.arange(N, dtype=np.float32) + 2, device=dev)
    e *= 1.0
    s0 = sw.memory_stats(dev)
    assert _evict_one(dev, [a, d, e]) == [True, False, False]  # LRU: d
    assert sw.memory_stats(dev)["clean_evictions"] == \
        s0["clean_evictions"] + 1
    spill_all(dev)
    d *= 1.0
    e *= 1.0
    float(a.sum())  # a second restore: LRU order for good
    assert _evict_one(dev, [a, d, e]) == [False, True, False]
    del a, d, e

    a = sw.asarray(np.arange(N, dtype=np.float32), device=dev)
    spill_all(dev)
    d = sw.asarray(np.arange(N, dtype=np.float32) + 1, device=dev)
    d *= 1.0
    a.prefetch()  # back, clean, but not used: not cold
    sw.synchronize(dev)
    assert _evict_one(dev, [a, d]) == [False, True]
    float(a.sum())
    d *= 1.0
    d.advise("cold")  # cold, dirty, and older than a's last use
    assert _evict_one(dev, [a, d]) == [True, False]  # the clean one first
    del a, d
    for doc in [sw.set_memory_budget.__doc__, sw.Array.advise.__doc__,
                sw.__doc__]:
        assert "cold" in doc
