"""Accounting through arrays, views and frees; peaks and peak scopes."""

import pytest

import spillway as sw

G = sw.ALLOC_GRANULARITY
MiB = 1 << 20


def info(d):
    return sw.memory_info(d)


def test_memory_info_fields(sim):
    m = info(sim)
    fields = ["in_use", "peak", "cached", "spilled", "device_free",
              "device_total", "budget", "allocs", "frees", "spills",
              "restores", "spilled_bytes_total", "restored_bytes_total",
              "spill_seconds", "restore_seconds", "alloc_retries", "ooms",
              "gc_runs",
              # appended (issue 34): the host and disk tiers
              "live_buffers", "max_reserved", "host_pool", "host_pool_limit",
              "host_copies", "clean_evictions", "host_budget",
              "spilled_disk", "disk_write_bytes", "disk_read_bytes",
              "disk_write_seconds", "disk_read_seconds"]
    assert type(m).__name__ == "MemoryInfo" and len(m) == len(fields)
    assert type(m).__match_args__ == tuple(fields)
    for name in fields:
        getattr(m, name)
    assert m._fields == tuple(fields) if hasattr(m, "_fields") else True
    assert m.device_total == 64 * MiB
    assert 0 < m.device_free <= m.device_total
    assert m.budget is None
    text = repr(m)
    for name in fields:
        assert f"{name}=" in text
    assert isinstance(m.spill_seconds, float)
    assert isinstance(m.disk_read_seconds, float)
    assert m.host_budget is None and m.live_buffers == 0


def test_rounding_and_counters(sim):
    before = info(sim)
    a = sw.empty(1, device=sim)            # 4 bytes -> 512
    b = sw.empty(G // 4 + 1, device=sim)   # 516 bytes -> 1024
    c = sw.empty(0, device=sim)            # nothing
    m = info(sim)
    assert m.in_use - before.in_use == G + 2 * G
    assert a.nbytes == 4 and b.nbytes == G + 4 and c.nbytes == 0
    assert m.allocs - before.allocs >= 2
    del a, b, c
    m2 = info(sim)
    assert m2.in_use == before.in_use
    assert m2.frees - before.frees == m.allocs - before.allocs


def test_views_and_frees(sim):
    base = info(sim).in_use
    a = sw.empty((256, 1024), device=sim)  # 1 MiB
    assert info(sim).in_use == base + MiB
    r = a.reshape(-1)
    row = a[3]
    part = a[10:20]
    assert info(sim).in_use == base + MiB  # views add nothing
    del a
    assert info(sim).in_use == base + MiB  # the views keep the buffer
    del r, row
    assert info(sim).in_use == base + MiB
    frees = info(sim).frees
    del part
    m = info(sim)
    assert m.in_use == base and m.frees == frees + 1
    assert m.cached >= MiB


def test_results_of_operations_are_accounted(sim):
    base = info(sim).in_use
    a = sw.zeros(MiB // 4, device=sim)
    b = sw.add(a, a)
    c = sw.scale(b, 2.0)
    assert info(sim).in_use == base + 3 * MiB
    sw.axpy(1.0, a, c)  # in place: nothing new
    assert info(sim).in_use == base + 3 * MiB
    del a, b, c
    assert info(sim).in_use == base


def test_peak_and_reset(sim):
    sw.reset_peak_memory(sim)
    base = info(sim).in_use
    assert info(sim).peak == base
    a = sw.empty(2 * MiB // 4, device=sim)
    b = sw.empty(MiB // 4, device=sim)
    del a
    m = info(sim)
    assert m.peak == base + 3 * MiB and m.in_use == base + MiB
    sw.reset_peak_memory(sim)
    assert info(sim).peak == base + MiB
    del b
    assert info(sim).peak == base + MiB
    sw.reset_peak_memory(sim.name)
    assert info(sim).peak == base


def test_memory_peak_nested(sim):
    base = info(sim).in_use
    with sw.memory_peak(sim) as outer:
        assert outer.bytes == base
        a = sw.empty(4 * MiB // 4, device=sim)
        assert outer.bytes == base + 4 * MiB   # so far
        with sw.memory_peak(sim) as inner:
            b = sw.empty(8 * MiB // 4, device=sim)
            del b
            sw.reset_peak_memory(sim)          # disturbs neither scope
        assert inner.bytes == base + 12 * MiB
        del a
        with sw.memory_peak(sim) as later:
            c = sw.empty(MiB // 4, device=sim)
            del c
        assert later.bytes == base + MiB
    assert outer.bytes == base + 12 * MiB
    assert inner.bytes == base + 12 * MiB      # fixed after exit
    assert info(sim).peak == base + 4 * MiB    # reset with a alive
    assert repr(outer).startswith("memory_peak('sim:0', bytes=")


def test_memory_peak_default_device_and_misuse(dev):
    scope = sw.memory_peak()
    assert scope.bytes is None and scope.device is dev
    with scope:
        x = sw.empty(1000)
        del x
    assert scope.bytes >= 4000
    with pytest.raises(RuntimeError):
        scope.__enter__()
    # A scope dropped while open is ended (the device can close later).
    s2 = sw.memory_peak(dev)
    s2.__enter__()
    del s2


def test_devices_have_separate_accounting(sim, sim1):
    before0, before1 = info(sim).in_use, info(sim1).in_use
    a = sw.empty(MiB // 4, device=sim1)
    assert info(sim1).in_use == before1 + MiB
    assert info(sim).in_use == before0
    del a


def test_budget_get_set(sim):
    assert sw.get_memory_budget(sim) is None
    sw.set_memory_budget(32 * MiB, sim)
    assert sw.get_memory_budget(sim) == 32 * MiB
    assert info(sim).budget == 32 * MiB
    sw.set_memory_budget(0, sim)
    assert sw.get_memory_budget(sim) is None
    sw.set_memory_budget(8 * MiB, device="sim:0")
    assert sw.get_memory_budget("sim:0") == 8 * MiB
    sw.set_memory_budget(None, sim)
    assert sw.get_memory_budget(sim) is None
