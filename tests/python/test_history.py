"""The memory history from Python: recording with and without tracebacks,
dumps in both formats (valid JSON, Perfetto's schema), out-of-memory
messages that name the allocating line, pictures, and bad input."""

import importlib.util
import json
import os
import subprocess
import sys
import threading

import pytest

import spillway as sw

MIB = 1 << 20


@pytest.fixture(autouse=True)
def _no_history_left():
    yield
    # A recording left on would slow the rest of the suite.
    try:
        sw.memory_history(enabled=False)
    except ValueError:
        pass
    sw.set_memory_budget(None)


def here():
    """'test_history.py:<line of the caller>'."""
    f = sys._getframe(1)
    return "%s:%d" % (os.path.basename(f.f_code.co_filename), f.f_lineno)


def test_records_events_and_tracebacks():
    with sw.memory_history(stacks=True) as h:
        a = sw.zeros((256, 256), tag="first"); site = here()  # noqa: E702
        b = sw.add(a, a)
        del b
    assert not h.recording
    events, dropped = h.events()
    assert dropped == 0
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "start"
    assert "alloc" in kinds and "free" in kinds
    first = next(e for e in events if e["kind"] == "alloc")
    assert first["tag"] == "first"
    assert first["buffer"] == sw.history._C._buffer_id(a)
    stack = h.stack_of(first["buffer"])
    assert stack is not None
    filename, line, func = stack[0]
    assert "%s:%d" % (os.path.basename(filename), line) == site
    assert func == "test_records_events_and_tracebacks"
    # Totals after each event replay from the start.
    in_use = events[0]["in_use"]
    for e in events[1:]:
        if e["kind"] == "alloc":
            in_use += e["size"]
        elif e["kind"] == "free" and not e["aux"]:
            in_use -= e["size"]
        assert e["in_use"] == in_use
    assert sw.memory_info().in_use == in_use


TOTALS = ("in_use", "cached", "spilled", "host_copies", "spilled_disk")


def replay(events):
    """Each event with the five totals replayed up to it, from the effects
    docs/memory-history.md's table gives each kind."""
    t = {}
    for e in events:
        kind, n, aux = e["kind"], e["size"], e["aux"]
        if kind == "start":
            t = {f: e[f] for f in TOTALS}
        elif kind == "alloc":
            t["in_use"] += n
        elif kind == "free":
            t["spilled" if aux else "in_use"] -= n
        elif kind in ("cache_hit", "cache_trim"):
            t["cached"] -= n
        elif kind == "cache_put":
            t["cached"] += n
        elif kind == "spill_begin":
            t["in_use"] -= n
            t["spilled"] += n
            if aux == 3:
                t["host_copies"] -= n
            elif aux == 4:
                t["spilled_disk"] += n
        elif kind == "restore_begin":
            t["spilled"] -= n
            t["in_use"] += n
            t["host_copies"] += n
        elif kind == "host_copy_drop":
            t["host_copies"] -= n
        elif kind == "disk_write" and aux == 2:
            t["host_copies"] -= n  # a clean copy's: it stays on the device
        elif kind == "disk_write":
            t["spilled_disk"] += n
        elif kind in ("disk_read", "disk_drop"):
            t["spilled_disk"] -= n
        yield e, dict(t)


@pytest.mark.spills
def test_history_replays_every_total(dev, tmp_path, monkeypatch):
    """Event by event, the five totals every event carries follow from the
    kinds' documented effects, through clean copies, the disk tier, a
    prefetch and frees of a clean copy, of an array on disk and of one
    spilled to host memory."""
    import numpy as np
    monkeypatch.setenv("SPILLWAY_SPILL_DIR", str(tmp_path))
    n = 1 << 16  # float32: 256 KiB

    def spill_all():
        sw.set_memory_budget(1, dev)
        sw.set_memory_budget(None, dev)

    try:
        with sw.memory_history(device=dev) as h:
            t = sw.empty(n, device=dev)
            del t
            t = sw.empty(n, device=dev)  # from the cache
            del t
            sw.empty_cache(dev)
            a, b, c, d = (sw.asarray(np.arange(n, dtype=np.float32) + i,
                                     device=dev) for i in range(4))
            spill_all()
            for x in (a, b, c, d):
                float(x.sum())  # back to be read: clean copies
            del x
            del a  # a clean copy freed
            c *= 2.0  # written: its host copy goes
            spill_all()  # b and d evicted clean, c copied out
            float(d.sum())
            sw.set_host_budget(1, dev)  # b, c and d's clean copy to disk
            del b  # on disk, freed
            c.prefetch()  # from disk, ahead of its use
            sw.synchronize(dev)
            sw.set_host_budget(None, dev)
            spill_all()  # c evicted clean, d evicted to its copy on disk
            float(d.sum())  # back from disk
            d *= 2.0  # written
            spill_all()  # d copied out
            sw.synchronize(dev)
            del d  # spilled to host memory, freed
            sw.synchronize(dev)
        stats = sw.memory_stats(dev)
        np.testing.assert_array_equal(
            c.numpy(), 2 * (np.arange(n, dtype=np.float32) + 2))
    finally:
        sw.set_host_budget(None, dev)
        sw.set_memory_budget(None, dev)
    del c
    events, dropped = h.events()
    assert dropped == 0
    kinds = {e["kind"] for e in events}
    for k in ("alloc", "free", "cache_hit", "cache_put", "cache_trim",
              "spill_begin", "restore_begin", "host_copy_drop", "prefetch",
              "host_budget", "disk_write", "disk_read", "disk_drop"):
        assert k in kinds, k
    pairs = list(zip(events, events[1:]))
    assert any(e["kind"] == "host_copy_drop" and f["kind"] == "free" and
               e["buffer"] == f["buffer"] and f["aux"] == 0
               for e, f in pairs)  # the clean copy freed
    assert any(e["kind"] == "disk_drop" and f["kind"] == "free" and
               e["buffer"] == f["buffer"] and f["aux"] == 1
               for e, f in pairs)  # the array on disk freed
    for kind, aux in (("spill_begin", 3), ("spill_begin", 4),
                      ("disk_write", 2)):
        assert any(e["kind"] == kind and e["aux"] == aux for e in events), \
            (kind, aux)
    assert any(e["kind"] == "free" and e["aux"] == 1 and
               p["kind"] != "disk_drop" for p, e in pairs)  # d freed
    for e, t in replay(events):
        assert {f: e[f] for f in TOTALS} == t, (e["seq"], e["kind"],
                                                e["aux"])
    assert {f: stats[f] for f in TOTALS} == t


def test_without_stacks_and_stopping():
    h = sw.memory_history(stacks=False, max_entries=128)
    a = sw.empty(1000)
    assert h.stacks is None
    sw.memory_history(enabled=False)
    assert not h.recording
    n = len(h.events()[0])
    b = sw.empty(1000)
    assert len(h.events()[0]) == n  # nothing more recorded
    del a, b
    with pytest.raises(ValueError, match="no memory history"):
        sw.memory_history(enabled=False)


def test_ring_bound_and_dropped(tmp_path):
    h = sw.memory_history(stacks=False, max_entries=100)
    for _ in range(500):
        sw.empty(64)
    h.stop()
    events, dropped = h.events()
    assert len(events) == 100
    assert dropped == events[-1]["seq"] + 1 - 100
    assert dropped > 0
    path = tmp_path / "t.json"
    sw.dump_memory_history(path)
    assert json.loads(path.read_text())["otherData"]["dropped"] == dropped


def check_chrome_schema(doc):
    """What Perfetto and chrome://tracing need of a trace."""
    assert isinstance(doc["traceEvents"], list)
    for ev in doc["traceEvents"]:
        assert ev["ph"] in ("M", "C", "X", "i", "B", "E"), ev
        assert isinstance(ev["pid"], int)
        assert isinstance(ev["name"], str)
        if ev["ph"] != "M":
            assert isinstance(ev["ts"], (int, float)) and ev["ts"] >= 0
            assert "tid" in ev
        if ev["ph"] == "C":
            assert ev["args"] and all(isinstance(v, (int, float))
                                      for v in ev["args"].values())
        if ev["ph"] == "X":
            assert ev["dur"] >= 0


@pytest.mark.spills
def test_dumps_chrome_and_snapshot(tmp_path):
    with sw.memory_history(stacks=True):
        sw.set_memory_budget(MIB)
        keep = [sw.zeros(64 * 1024, tag="held-%d" % i) for i in range(6)]
        s = sw.sum(keep[0])  # restores the first one
    assert s == 0
    chrome = tmp_path / "trace.json"
    sw.dump_memory_history(chrome)
    doc = json.loads(chrome.read_text())
    check_chrome_schema(doc)
    names = {e["name"] for e in doc["traceEvents"]}
    assert {"memory", "budget", "spill", "restore", "alloc"} <= names
    allocs = [e for e in doc["traceEvents"] if e["name"] == "alloc"]
    assert all("test_history.py" in e["args"]["stack"][0] for e in allocs)
    snap = tmp_path / "snap.json"
    sw.dump_memory_history(snap, format="snapshot")
    doc = json.loads(snap.read_text())
    assert doc["format"] == "spillway-snapshot"
    tags = {b["tag"]: b for b in doc["buffers"]}
    assert tags["held-0"]["state"] == "resident"
    assert tags["held-5"]["stack"][0].startswith(
        os.path.abspath(__file__) if False else tags["held-5"]["stack"][0])
    assert any(b["state"] == "spilled" for b in doc["buffers"])
    assert doc["totals"]["spilled"] > 0
    del keep


def test_oom_names_the_allocating_line():
    with sw.memory_history(stacks=True):
        sw.set_memory_budget(2 * MIB)
        big = sw.zeros(MIB // 4, tag="the-holder"); site = here()  # noqa
        with pytest.raises(sw.DeviceMemoryError) as e:
            sw.empty(3 * MIB // 4, tag="too-much")  # more than the budget
        msg = str(e.value)
        del e
        head, sep, holders = msg.partition(
            "\nLargest holders by allocating line:\n")
        assert sep, msg
        line = next(l for l in holders.splitlines() if "the-holder" in l)
        assert site in line and "resident" in line
        del big
    # Without tracebacks the message is the library's alone.
    sw.set_memory_budget(None)
    with sw.memory_history(stacks=False):
        sw.set_memory_budget(MIB)
        with pytest.raises(sw.DeviceMemoryError) as e:
            sw.empty(2 * MIB // 4)
    assert "allocating line" not in str(e.value)


def test_dump_while_threads_allocate(tmp_path):
    stop = threading.Event()
    errors = []

    def work():
        try:
            while not stop.is_set():
                a = sw.empty(4096, tag='quote " and\nnewline')
                a[0] = 1.0
                del a
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    with sw.memory_history(stacks=True, max_entries=4096):
        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            for i in range(6):
                path = tmp_path / ("d%d.json" % i)
                sw.dump_memory_history(
                    path, format="chrome" if i % 2 else "snapshot")
                json.loads(path.read_text())
        finally:
            stop.set()
            for t in threads:
                t.join()
    assert not errors


def test_c_thread_allocations_have_no_traceback():
    from spillway import _testing
    with sw.memory_history(stacks=True) as h:
        t = _testing.start_c_thread_allocating(None, 4096, 50, hold=0)
        r = t.join(timeout=60)
    assert r["errors"] == 0, r
    allocs = [e for e in h.events()[0] if e["kind"] == "alloc"]
    assert len(allocs) >= 50
    assert all(h.stack_of(e["buffer"]) is None for e in allocs)


@pytest.mark.spills
def test_plot_makes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    with sw.memory_history(stacks=True):
        sw.set_memory_budget(MIB)
        keep = [sw.zeros(64 * 1024, tag="p%d" % i) for i in range(5)]
        del keep
    trace = tmp_path / "trace.json"
    sw.dump_memory_history(trace)
    out = sw.plot_memory_history(trace, tmp_path / "m.png")
    data = open(out, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10000
    snap = tmp_path / "snap.json"
    sw.dump_memory_history(snap, format="snapshot")
    assert open(sw.plot_memory_history(snap), "rb").read(4) == b"\x89PNG"


def test_plot_command(tmp_path):
    pytest.importorskip("matplotlib")
    binary = os.path.join(os.environ.get("SPILLWAY_BUILD_DIR", "build"),
                          "spillway")
    if not os.path.exists(binary):
        pytest.skip("no spillway program in the build directory")
    with sw.memory_history(stacks=False):
        a = sw.empty(10000)
        del a
    trace = tmp_path / "trace.json"
    sw.dump_memory_history(trace)
    env = dict(os.environ, PYTHON=sys.executable)
    p = subprocess.run([binary, "plot", str(trace), "-o",
                        str(tmp_path / "cli.png")], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "cli.png").read_bytes()[:4] == b"\x89PNG"
    p = subprocess.run([binary, "plot", str(tmp_path / "missing.json")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1
    assert "missing.json" in p.stderr


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="max_entries"):
        sw.memory_history(max_entries=0)
    with pytest.raises(TypeError, match="max_entries"):
        sw.memory_history(max_entries="many")
    with pytest.raises(sw.DeviceMemoryError, match="too large"):
        sw.memory_history(max_entries=1 << 40)
    with pytest.raises(TypeError, match="device"):
        sw.memory_history(device=3.5)
    sw.memory_history(stacks=False)
    with pytest.raises(ValueError, match="unknown memory history format"):
        sw.dump_memory_history(tmp_path / "x.json", format="perfetto")
    with pytest.raises(ValueError, match="cannot write"):
        sw.dump_memory_history(tmp_path / "no" / "such" / "dir.json")
    sw.memory_history(enabled=False)
    with pytest.raises(ValueError, match="no memory history"):
        sw.memory_history(enabled=False)
    with pytest.raises(ValueError, match="not a spillway memory history"):
        bogus = tmp_path / "bogus.json"
        bogus.write_text('{"a": 1}')
        sw.plot.load_history(bogus)


@pytest.mark.spills
@pytest.mark.parametrize("fmt", ["chrome", "snapshot"])
def test_the_picture_is_on_device_time(dev, tmp_path, fmt):
    """Copies carry the device's own times: the history's events, both
    dumps, and the picture, which moves each buffer when its copy ran and
    counts a copy's bytes on the device until it ended."""
    import numpy as np
    from spillway.plot import buffer_lanes, load_history
    n = MIB // 4  # float32: 1 MiB each
    with sw.memory_history(device=dev) as h:
        arrays = [sw.asarray(np.full(n, i, np.float32), device=dev)
                  for i in range(4)]
        sw.set_memory_budget(2 * MIB, dev)  # two of them out
        for i, a in enumerate(arrays):  # each back in, another out
            assert float(a.sum()) == i * n
        sw.synchronize(dev)
        sw.set_memory_budget(None, dev)
    events, dropped = h.events()
    assert dropped == 0
    times_copies = dev.name.split(":")[0] in ("sim", "opencl", "cuda")
    # (aux 2, 3: an eviction that copied nothing, untimed)
    ends = [e for e in events
            if e["kind"] in ("spill_end", "restore_end") and e["aux"] < 2]
    timed = [e for e in ends if e["dev_end_ns"]]
    for e in events:
        if e["dev_end_ns"]:
            assert 0 < e["dev_begin_ns"] <= e["dev_end_ns"] <= e["time_ns"]
        else:
            assert e["dev_begin_ns"] == 0
    if times_copies:
        assert len(timed) == len(ends) >= 4
        # Every copy ends in the history, one a later copy of the same
        # buffer overtook included.
        for kind in ("spill", "restore"):
            begun = sum(e["kind"] == kind + "_begin" and e["aux"] < 2
                        for e in events)
            assert sum(e["kind"] == kind + "_end" and e["aux"] < 2
                       for e in events) == begun
    path = tmp_path / ("h." + fmt)
    h.dump(str(path), format=fmt)
    on_device = load_history(str(path))
    on_host = load_history(str(path), device_time=False)
    host_places = {p for _, segs in buffer_lanes(on_host, 4)
                   for _, _, p in segs}
    assert "copy" not in host_places
    if not times_copies:
        assert on_device["timed"] == []
        return
    assert len(on_device["timed"]) == len(timed)
    for at, begin, end, what, buf, size, tag in on_device["timed"]:
        assert what in ("spill", "restore") and begin <= end
    lanes = buffer_lanes(on_device, 4)
    for _, segs in lanes:
        assert all(a <= b for a, b, _ in segs)
    assert "copy" in {p for _, segs in lanes for _, _, p in segs}
    # A spill's bytes leave the device when its copy ends: on the device's
    # time in use is never below the host's picture at the same moment.
    def at(hist, key, t):
        i = max(k for k, s in enumerate(hist["t"]) if s <= t)
        return hist[key][i]
    for t in on_host["t"]:
        assert at(on_device, "in_use", t) >= at(on_host, "in_use", t) or \
            any(w == "restore" and a <= t < e
                for a, _, e, w, *_ in on_device["timed"])
    if importlib.util.find_spec("matplotlib"):
        out = sw.plot_memory_history(str(path), str(tmp_path / "d.png"))
        assert open(out, "rb").read(4) == b"\x89PNG"
    del arrays
