"""The memory API people know from PyTorch and CuPy: memory_stats,
reset_accumulated_memory_stats, mem_get_info, memory_snapshot, budgets as
written, and memory_summary's section on the largest buffers."""

import gc

import numpy as np
import pytest

import spillway as sw

G = sw.ALLOC_GRANULARITY
MiB = 1 << 20
INFO_FIELDS = ["in_use", "peak", "cached", "spilled", "device_free",
               "device_total", "budget", "allocs", "frees", "spills",
               "restores", "spilled_bytes_total", "restored_bytes_total",
               "spill_seconds", "restore_seconds", "alloc_retries", "ooms",
               "gc_runs", "live_buffers", "max_reserved", "host_pool",
               "host_pool_limit", "host_copies", "clean_evictions",
               "host_budget", "spilled_disk", "disk_write_bytes",
               "disk_read_bytes", "disk_write_seconds", "disk_read_seconds"]
TORCH_KEYS = {
    "allocated_bytes.all.current": "in_use",
    "allocated_bytes.all.peak": "peak",
    "reserved_bytes.all.current": "reserved",
    "reserved_bytes.all.peak": "max_reserved",
    "allocation.all.current": "live_buffers",
    "allocation.all.allocated": "allocs",
    "allocation.all.freed": "frees",
    "num_alloc_retries": "alloc_retries",
    "num_ooms": "ooms",
}


def test_memory_stats(sim):
    sw.empty_cache(sim)
    sw.reset_peak_memory(sim)
    a = sw.empty(1000, device=sim)       # 4000 B -> 4096
    b = sw.empty(10, device=sim)         # 512
    del b                                # cached: 512
    s = sw.memory_stats(sim)
    info = sw.memory_info(sim)
    assert list(type(info).__match_args__) == INFO_FIELDS
    for name in INFO_FIELDS:  # every memory_info field, the same value
        assert s[name] == getattr(info, name), name
    assert s["in_use"] == 4096 and s["cached"] == G
    assert s["reserved"] == s["in_use"] + s["cached"]
    assert s["max_reserved"] >= 4096 + G and s["live_buffers"] == 1
    assert s["num_spills"] == info.spills
    assert s["num_restores"] == info.restores
    for torch_name, ours in TORCH_KEYS.items():
        assert s[torch_name] == s[ours], torch_name
    assert isinstance(s["spill_seconds"], float)
    del a


def test_reset_accumulated_memory_stats(sim):
    a = sw.zeros(N := MiB // 4, device=sim)
    sw.set_memory_budget(MiB, sim)
    b = sw.zeros(N, device=sim)  # spills a
    s = sw.memory_stats(sim)
    assert s["allocs"] > 0 and s["spills"] > 0
    sw.reset_accumulated_memory_stats(sim)
    r = sw.memory_stats(sim)
    for name in ("allocs", "frees", "spills", "restores",
                 "spilled_bytes_total", "alloc_retries", "ooms", "gc_runs"):
        assert r[name] == 0, name
    assert r["spill_seconds"] == 0.0
    # levels and peaks are not counters
    assert r["in_use"] == s["in_use"] and r["spilled"] == s["spilled"]
    assert r["peak"] == s["peak"] and r["max_reserved"] == s["max_reserved"]
    sw.set_memory_budget(None, sim)
    del a, b


def test_mem_get_info(dev):
    free, total = sw.mem_get_info(dev)
    info = sw.memory_info(dev)
    assert total == info.device_total and 0 < free <= total
    if info.device_free is not None:
        assert free == info.device_free
    a = sw.zeros(MiB // 4, device=dev)
    free2, _ = sw.mem_get_info(dev)
    assert free2 <= free - MiB or info.device_free is not None
    del a


def test_budget_spellings(sim):
    for spec, want in [("8M", 8 * MiB), ("8MiB", 8 * MiB),
                       ("1.5M", 3 * MiB // 2), ("4096", 4096),
                       (16 * MiB, 16 * MiB), (0.25, 16 * MiB),
                       (1.0, 64 * MiB), (np.float64(0.5), 32 * MiB),
                       (np.int64(MiB), MiB)]:
        sw.set_memory_budget(spec, sim)
        assert sw.get_memory_budget(sim) == want, spec
    sw.set_memory_budget(None, sim)
    assert sw.get_memory_budget(sim) is None
    sw.set_memory_budget("0", sim)
    assert sw.get_memory_budget(sim) is None


@pytest.mark.parametrize("bad,exc,match", [
    ("lots", ValueError, "lots"), ("-1M", ValueError, "-1M"),
    ("", ValueError, "empty|invalid|size"), ("12 parsecs", ValueError, "parsecs"),
    (0.0, ValueError, r"\(0, 1\]"), (1.5, ValueError, r"\(0, 1\]"),
    (-0.5, ValueError, r"\(0, 1\]"), (float("nan"), ValueError, "nan"),
    (True, TypeError, "bool"), ([1], TypeError, "list"),
    (-5, ValueError, "negative"), (2**64, ValueError, "too large")])
def test_budget_errors_change_nothing(sim, bad, exc, match):
    sw.set_memory_budget(8 * MiB, sim)
    with pytest.raises(exc, match=match):
        sw.set_memory_budget(bad, sim)
    assert sw.get_memory_budget(sim) == 8 * MiB
    sw.set_memory_budget(None, sim)


def test_a_budget_below_what_is_held_spills_at_once(sim):
    arrays = [sw.zeros(MiB // 4, device=sim, tag=f"held{i}") for i in range(6)]
    assert sw.memory_info(sim).in_use == 6 * MiB
    sw.set_memory_budget("2M", sim)
    info = sw.memory_info(sim)
    assert info.in_use + info.cached <= 2 * MiB
    assert info.spilled == 4 * MiB
    assert [a.is_spilled for a in arrays] == [True] * 4 + [False] * 2
    sw.set_memory_budget(None, sim)
    assert all(a.sum() == 0.0 for a in arrays)  # all intact


def test_memory_snapshot(sim):
    q = sw.Queue(sim)
    a = sw.zeros((256, 256), device=sim, tag="big")   # 256 KiB
    b = sw.zeros(10, device=sim, tag="small")
    v = a[1:3]
    sw.scale(b, 2.0, out=b, queue=q)
    sw.order_manager[q].wait()
    cap = b.__dlpack__()
    snap = sw.memory_snapshot(sim)
    assert isinstance(snap, list) and len(snap) == 2
    by_tag = {s["tag"]: s for s in snap}
    big, small = by_tag["big"], by_tag["small"]
    assert big["size"] == a.nbytes and big["alloc_size"] == a.nbytes
    assert big["state"] == "resident" and big["views"] == 1
    assert big["leases"] == 0 and not big["exposed"] and not big["external"]
    assert small["leases"] == 1 and small["exposed"]
    assert small["size"] == 40 and small["alloc_size"] == G
    assert len(small["queues"]) == 1 and small["queues"][0] > 0
    assert big["queues"] == ()
    assert all(s["device"] == "sim:0" for s in snap)
    assert snap[0]["id"] > snap[1]["id"]  # most recent first
    assert {"pins", "pinned", "moving", "handles", "last_use"} <= set(big)
    del cap
    gc.collect()
    sw.set_memory_budget(1, sim)  # spill everything that can move
    snap = {s["tag"]: s for s in sw.memory_snapshot(sim)}
    assert snap["big"]["state"] == "spilled"
    assert snap["small"]["state"] == "spilled"
    sw.set_memory_budget(None, sim)
    assert sw.memory_snapshot("sim:1") == [] or all(
        s["device"] == "sim:1" for s in sw.memory_snapshot("sim:1"))
    del a, b, v, q


def test_memory_summary_lists_the_largest_buffers(sim):
    arrays = [sw.zeros(1024 * (i + 1), device=sim, tag=f"buffer{i}")
              for i in range(7)]
    text = sw.memory_summary(sim)
    assert "Largest live buffers (7 live)" in text
    lines = text.splitlines()
    first = next(i for i, l in enumerate(lines) if "Largest" in l)
    shown = [l for l in lines[first + 1:first + 6]]
    assert [l.split()[1] for l in shown] == \
        [f"buffer{i}" for i in (6, 5, 4, 3, 2)]
    assert all(len(l) == len(lines[0]) for l in lines)
    del arrays
    assert "Largest" not in sw.memory_summary(sim)


def test_memory_summary_never_cuts_the_description_in_a_word(dev):
    words = dev.description.split()
    text = sw.memory_summary(dev)
    body = " ".join(l.strip("| ") for l in text.splitlines()[2:6])
    for w in words:
        assert w in body.split(), w
    assert all(len(l) == 66 for l in text.splitlines())


def test_host_pool_limit(dev):
    """set_host_pool_limit bounds the host staging pool (bytes or a size
    string) and memory_stats shows it; bad values change nothing."""
    before = sw.memory_stats(dev)["host_pool_limit"]
    try:
        sw.set_host_pool_limit("8M", dev)
        assert sw.memory_stats(dev)["host_pool_limit"] == 8 << 20
        sw.set_host_pool_limit(1 << 20, device=dev)
        st = sw.memory_stats(dev)
        assert st["host_pool_limit"] == 1 << 20
        assert 0 <= st["host_pool"]
        for bad, exc in [("lots", ValueError), (-1, ValueError),
                         (None, TypeError), (0.5, TypeError)]:
            with pytest.raises(exc):
                sw.set_host_pool_limit(bad, dev)
        assert sw.memory_stats(dev)["host_pool_limit"] == 1 << 20
    finally:
        sw.set_host_pool_limit(before, dev)


@pytest.mark.spills
def test_max_reserved_stays_under_the_budget(dev):
    """A spill moves a block from in_use to cached: max_reserved (the
    highest in_use + cached) never counts it twice, so under a budget it
    never passes the budget (spillway.dask's workers report it)."""
    sw.set_memory_budget(8 * MiB, dev)
    sw.reset_peak_memory(dev)
    xs = [sw.zeros(MiB, dtype="float32", device=dev) for _ in range(5)]
    st = sw.memory_stats(dev)
    assert st["spills"] >= 3
    assert st["max_reserved"] <= 8 * MiB, st["max_reserved"]
    del xs
