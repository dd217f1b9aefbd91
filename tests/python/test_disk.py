"""The host budget and the disk tier (issue 27): sw.set_host_budget bounds
the host memory a device holds for spilled arrays; past it they go to a
file under $SPILLWAY_SPILL_DIR and come back bit-identical."""

import numpy as np
import pytest

import spillway as sw

N = 1 << 18  # float32: 1 MiB


@pytest.fixture
def budgets(dev, tmp_path, monkeypatch):
    monkeypatch.setenv("SPILLWAY_SPILL_DIR", str(tmp_path))
    yield dev
    sw.set_memory_budget(None, dev)
    sw.set_host_budget(None, dev)


def host_held(s):
    return s["spilled"] - s["spilled_disk"] + s["host_copies"] + \
        s["host_pool"]


@pytest.mark.spills
def test_spilled_arrays_go_to_disk_and_come_back(budgets):
    dev = budgets
    sw.set_host_budget("2M", dev)
    assert sw.memory_stats(dev)["host_budget"] == 2 << 20
    sw.set_memory_budget(2 << 20, dev)
    want = [np.arange(N, dtype=np.float32) * (i + 1) for i in range(8)]
    arrays = [sw.asarray(w, device=dev) for w in want]
    sw.set_host_budget("2M", dev)  # met once the copies have landed
    s = sw.memory_stats(dev)
    assert s["spilled_disk"] >= 4 << 20
    assert s["disk_write_bytes"] >= 4 << 20 and s["disk_write_seconds"] > 0
    assert host_held(s) <= 2 << 20
    snap = sw.memory_snapshot(dev)       # which are on disk: all of it
    assert all(b["state"] == "spilled" for b in snap if b["on_disk"])
    assert sum(b["alloc_size"] for b in snap if b["on_disk"]) == \
        s["spilled_disk"]
    for a, w in zip(arrays, want):       # host reads: from the file
        np.testing.assert_array_equal(a.numpy(), w)
    for a, w in zip(arrays, want):       # restored through a kernel
        assert float(a.sum()) == float(w.sum())
    arrays[3][5] = -1.0                  # a host write of a spilled array
    want[3][5] = -1.0
    for a, w in zip(arrays, want):
        np.testing.assert_array_equal(a.numpy(), w)
    assert sw.memory_stats(dev)["disk_read_bytes"] > 0
    del arrays
    assert sw.memory_stats(dev)["spilled_disk"] == 0


@pytest.mark.spills
def test_memory_info_carries_the_host_and_disk_tiers(budgets):
    """memory_info() -- the record users read -- has every tier, as
    memory_stats() does: the host budget, what is on disk and its traffic,
    clean copies and the staging pool (issue 34: they were only in
    memory_stats())."""
    dev = budgets
    sw.set_memory_budget(1 << 20, dev)
    sw.set_host_budget(1, dev)
    a = sw.ones(N, device=dev)
    b = sw.ones(N, device=dev)  # a goes out ...
    sw.set_host_budget(1, dev)  # ... to the file, once its copy landed
    assert float(a.sum()) == N  # back, clean; b out
    sw.set_host_budget("64M", dev)
    sw.set_memory_budget(1, dev)  # a (clean) evicted, copying nothing
    sw.set_memory_budget(None, dev)
    info, s = sw.memory_info(dev), sw.memory_stats(dev)
    assert info.host_budget == 64 << 20
    assert info.disk_write_bytes >= 1 << 20 and info.disk_read_bytes > 0
    assert info.disk_write_seconds > 0 and info.clean_evictions >= 1
    assert info.live_buffers == 2 and info.max_reserved >= 1 << 20
    for name in ["host_budget", "spilled_disk", "host_copies",
                 "clean_evictions", "host_pool", "host_pool_limit",
                 "disk_write_bytes", "disk_read_bytes", "disk_write_seconds",
                 "disk_read_seconds", "live_buffers", "max_reserved"]:
        assert getattr(info, name) == s[name], name
        assert f"{name}=" in repr(info)
    del a, b
    info = sw.memory_info(dev)
    assert info.spilled_disk == 0 and info.host_copies == 0


@pytest.mark.spills
def test_memory_summary_shows_the_host_tier(budgets):
    """memory_summary() reads memory_info(): the spill file's share of
    what is spilled, the clean copies and the host budget."""
    dev = budgets
    text = sw.memory_summary(dev)
    assert "Host budget" in text and "none" in text.split("Host budget")[1]
    sw.set_memory_budget(1 << 20, dev)
    sw.set_host_budget(1, dev)
    a = sw.ones(N, device=dev)
    b = sw.ones(N, device=dev)  # a goes out ...
    sw.set_host_budget(1, dev)  # ... to the file, once its copy landed
    lines = sw.memory_summary(dev).splitlines()
    assert all(len(l) == len(lines[0]) for l in lines)

    def value(label):
        (line,) = [l for l in lines if l.startswith(f"| {label}")]
        return line.strip("| ").split()[-2:]

    assert value("  of it in the spill file") == ["1.00", "MiB"]
    assert value("Host budget") == ["1", "B"]
    assert value("Clean copies on the host") == ["0", "B"]
    del a, b


@pytest.mark.spills
def test_history_records_the_disk(budgets):
    dev = budgets
    with sw.memory_history(device=dev) as h:
        sw.set_memory_budget(1 << 20, dev)
        sw.set_host_budget(1, dev)
        a = sw.ones(N, device=dev)
        b = sw.ones(N, device=dev)  # a goes out ...
        sw.set_host_budget(1, dev)  # ... to the file, once its copy landed
        assert sw.memory_stats(dev)["spilled_disk"] >= 1 << 20
        assert float(a.sum()) == N  # and back
        del a, b
    events, _ = h.events()
    kinds = [e["kind"] for e in events]
    assert "disk_write" in kinds and "disk_read" in kinds
    assert "host_budget" in kinds
    assert max(e["spilled_disk"] for e in events) >= 1 << 20


@pytest.mark.spills
@pytest.mark.parametrize("fmt", ["chrome", "snapshot"])
def test_lanes_show_clean_copies_in_the_file(budgets, tmp_path, fmt):
    """Under a host budget a clean copy goes to the spill file and stays on
    the device; evicted, it is on disk at once: the picture's lanes say
    so."""
    from spillway.plot import buffer_lanes, load_history
    dev = budgets
    with sw.memory_history(device=dev) as h:
        a = sw.asarray(np.arange(N, dtype=np.float32), device=dev)
        sw.set_memory_budget(1, dev)  # spilled
        sw.set_memory_budget(None, dev)
        float(a.sum())  # back to be read: clean
        sw.set_host_budget(1, dev)  # its host copy to the file
        assert not a.is_spilled
        s = sw.memory_stats(dev)
        assert s["host_copies"] == 0
        sw.set_memory_budget(1, dev)  # evicted: on disk at once
        sw.set_memory_budget(None, dev)
        assert sw.memory_stats(dev)["spilled_disk"] - s["spilled_disk"] \
            == a.nbytes
        assert float(a.sum()) == float(np.arange(N, dtype=np.float32).sum())
        small = sw.ones(8, device=dev)  # the history goes on after it
        del small
    events, _ = h.events()
    assert any(e["kind"] == "disk_write" and e["aux"] == 2 for e in events)
    assert any(e["kind"] == "spill_begin" and e["aux"] == 4 for e in events)
    path = tmp_path / ("h." + fmt)
    h.dump(str(path), format=fmt)
    # On the host's timeline: on device time a copy's end may be placed
    # after the host's next event (opencl:0 placed the restore's after the
    # disk write that followed it), which is not what this is about.
    hist = load_history(str(path), device_time=False)
    lanes = buffer_lanes(hist, lanes=1)
    places = [p for _, _, p in lanes[0][1] if p != "copy"]
    runs = [p for i, p in enumerate(places) if i == 0 or places[i - 1] != p]
    assert runs == ["resident", "spilled", "clean", "resident", "disk",
                    "spilled", "clean"], runs
    del a


def test_set_host_budget_forms_and_bad_input(budgets):
    dev = budgets
    sw.set_host_budget(1 << 30, dev)
    assert sw.memory_stats(dev)["host_budget"] == 1 << 30
    sw.set_host_budget("512M", dev)
    assert sw.memory_stats(dev)["host_budget"] == 512 << 20
    sw.set_host_budget(0.5, dev)  # half of the machine's memory
    assert sw.memory_stats(dev)["host_budget"] > 0
    sw.set_host_budget(None, dev)
    assert sw.memory_stats(dev)["host_budget"] is None
    with pytest.raises(TypeError, match="not a bool"):
        sw.set_host_budget(True, dev)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        sw.set_host_budget(1.5, dev)
    with pytest.raises(ValueError):
        sw.set_host_budget("12 parsecs", dev)
    assert sw.memory_stats(dev)["host_budget"] is None  # unchanged


@pytest.mark.spills
def test_a_disk_fault_loses_nothing(budgets):
    _testing = pytest.importorskip("spillway._testing")
    dev = budgets
    sw.set_memory_budget(1 << 20, dev)
    a = sw.asarray(np.arange(N, dtype=np.float32), device=dev)
    b = sw.ones(N, device=dev)  # a spilled
    _testing.inject_fault(dev, "disk", 1)
    sw.set_host_budget(1, dev)  # its write to disk fails; the budget stands
    _testing.inject_fault(dev, "disk", 0)
    s = sw.memory_stats(dev)
    assert s["host_budget"] == 1 and s["spilled_disk"] == 0
    np.testing.assert_array_equal(a.numpy(), np.arange(N, dtype=np.float32))
    sw.set_host_budget(1, dev)  # now it goes
    assert sw.memory_stats(dev)["spilled_disk"] >= 1 << 20
    _testing.inject_fault(dev, "disk", 1)
    with pytest.raises(MemoryError, match="injected"):
        a.numpy()  # the read from disk fails
    _testing.inject_fault(dev, "disk", 0)
    np.testing.assert_array_equal(a.numpy(), np.arange(N, dtype=np.float32))
    del a, b


@pytest.mark.spills
@pytest.mark.parametrize("fmt", ["chrome", "snapshot"])
def test_the_picture_has_the_disk_tier(budgets, tmp_path, fmt):
    from spillway.plot import buffer_lanes, load_history
    dev = budgets
    with sw.memory_history(device=dev) as h:
        sw.set_memory_budget(1 << 20, dev)
        sw.set_host_budget(1, dev)
        a = sw.ones(N, device=dev)
        b = sw.ones(N, device=dev)  # a out ...
        sw.set_host_budget(1, dev)  # ... to disk
        assert float(a.sum()) == N  # and back
        del a, b
    path = tmp_path / ("h." + fmt)
    h.dump(str(path), format=fmt)
    hist = load_history(str(path))
    assert max(hist["spilled_disk"]) >= 1 << 20
    places = {p for _, segs in buffer_lanes(hist, lanes=2)
              for _, _, p in segs}
    assert "disk" in places and "spilled" in places


@pytest.mark.spills
def test_prefetch_from_disk_runs_in_the_background(budgets, monkeypatch):
    """a.prefetch() of an array in the spill file returns before its read
    is done; the array then reaches the device by itself, and an array
    freed right after its prefetch leaves nothing behind.  (Background
    reads are the default on accelerators; on a device that computes on
    the host's CPUs, sim:0 and PoCL, only when asked.)"""
    import time
    monkeypatch.setenv("SPILLWAY_DISK_PREFETCH", "background")
    dev = budgets
    sw.set_memory_budget(2 << 20, dev)
    want = [np.arange(N, dtype=np.float32) + i for i in range(6)]
    arrays = [sw.asarray(w, device=dev) for w in want]
    sw.set_host_budget(1, dev)  # every spilled copy to disk

    def on_disk():
        ids = {b["id"] for b in sw.memory_snapshot(dev) if b["on_disk"]}
        return [i for i, a in enumerate(arrays)
                if a is not None and sw.history._C._buffer_id(a) in ids]

    disk = on_disk()
    assert len(disk) >= 3
    sw.set_host_budget(None, dev)  # room to read them back
    i = disk[0]
    arrays[i].prefetch()
    deadline = time.monotonic() + 10
    while arrays[i].is_spilled and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not arrays[i].is_spilled
    assert i not in on_disk()
    np.testing.assert_array_equal(arrays[i].numpy(), want[i])
    # Used at once: the use waits for the read.
    j = disk[1]
    arrays[j].prefetch()
    assert float(arrays[j].sum()) == float(want[j].sum())
    # Freed at once: released when the read ends.
    k = disk[2]
    arrays[k].prefetch()
    arrays[k] = None
    sw.synchronize(dev)
    for a, w in zip(arrays, want):
        if a is not None:
            np.testing.assert_array_equal(a.numpy(), w)
    del arrays
    deadline = time.monotonic() + 10
    while sw.memory_stats(dev)["spilled_disk"] and \
            time.monotonic() < deadline:
        time.sleep(0.001)
    assert sw.memory_stats(dev)["spilled_disk"] == 0
