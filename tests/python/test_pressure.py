"""Python's garbage collector under memory pressure, and the lock contract.

sim:0 holds 64 MiB (conftest.py).  The collector runs when an allocation
fails on the device, before anything is spilled; with the GIL released
around every spillway call and the device lock released before the
callback takes the GIL, no path can deadlock.  Threaded tests carry
timeouts: a deadlock fails them instead of hanging the suite.
"""

import gc
import sysconfig
import threading
import weakref

import numpy as np
import pytest

import spillway as sw
from spillway import _testing

MiB = 1 << 20

# The free-threaded collector has no generations (gc.collect(1) walks the
# whole heap): in a back-off the callback's first call collects nothing
# there, and the allocation spills (pressure.c).
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def mib(n):
    """Elements of float32 in n MiB."""
    return n * MiB // 4


class Cycle:
    """Holds arrays in a reference cycle: only the collector frees them."""

    def __init__(self, *arrays):
        self.arrays = list(arrays)
        self.me = self


def make_cycles(d, count, size_mib, tag="cycle"):
    """count arrays, each held only by its own cycle; weak refs to them."""
    refs = []
    for i in range(count):
        c = Cycle(sw.empty(mib(size_mib), device=d, tag=f"{tag}{i}"))
        refs.append(weakref.ref(c.arrays[0]))
        del c
    return refs


@pytest.fixture
def gc_off():
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def run_threads(targets, timeout):
    """Start a thread per target; join each within the timeout."""
    threads = [threading.Thread(target=t, daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads still running after {timeout}s: {hung}"


def test_cycles_released_by_the_pressure_callback(sim, gc_off):
    before = sw.memory_info(sim)
    refs = make_cycles(sim, 4, 12)          # 48 MiB of garbage
    assert all(r() is not None for r in refs)
    assert sw.memory_info(sim).in_use == before.in_use + 48 * MiB
    big = sw.empty(mib(32), device=sim, tag="big")  # does not fit beside it
    after = sw.memory_info(sim)
    assert all(r() is None for r in refs)   # the callback collected them
    assert after.gc_runs == before.gc_runs + 1
    assert after.spills == before.spills    # nothing had to spill
    assert after.ooms == before.ooms
    assert after.in_use == before.in_use + 32 * MiB
    assert _testing.gc_stats()["backoff_left"] == 0  # it freed memory
    del big


def test_nothing_freeable_raises_device_memory_error(sim):
    tags = ["weights", "grads", "activations"]
    held = [sw.zeros(mib(16), device=sim, tag=t) for t in tags]
    views = [np.from_dlpack(a) for a in held]  # exposed: they cannot spill
    before = sw.memory_info(sim)
    with pytest.raises(sw.DeviceMemoryError) as e:
        sw.empty(mib(24), device=sim, tag="request")
    msg = str(e.value)
    assert isinstance(e.value, MemoryError)
    assert "25165824" in msg or "24.00 MiB" in msg, msg   # the request
    for t in tags + ["request"]:                          # the largest live
        assert t in msg, (t, msg)
    assert "sim:0" in msg and "16.00 MiB" in msg
    after = sw.memory_info(sim)
    assert after.ooms == before.ooms + 1
    assert after.gc_runs == before.gc_runs + 1  # the collector was tried
    del views


@pytest.mark.timeout(120)
def test_allocating_thread_and_pure_python_thread(sim, gc_off):
    stop = threading.Event()
    errors, counts = [], {"py": 0, "alloc": 0}
    before = sw.memory_info(sim)

    def pure_python():
        x = 0
        while not stop.is_set():
            x = (x * 31 + 7) % 1000003
            counts["py"] += 1

    def allocate():
        try:
            keep = []
            for i in range(60):
                a = sw.empty(mib(8), device=sim, tag="worker")
                a.fill(float(i))
                keep = (keep + [a])[-4:]
                if i % 2:
                    Cycle(sw.empty(mib(4), device=sim, tag="garbage"))
                counts["alloc"] += 1
            assert [k[0] for k in keep] == [56.0, 57.0, 58.0, 59.0]
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            stop.set()

    run_threads([pure_python, allocate], timeout=100)
    assert not errors, errors
    assert counts["alloc"] == 60 and counts["py"] > 0
    assert sw.memory_info(sim).gc_runs > before.gc_runs


@pytest.mark.timeout(120)
def test_four_threads_under_pressure(sim):
    results = [None] * 4
    kept = [[] for _ in range(4)]

    def work(k):
        ooms = 0
        try:
            for i in range(40):
                try:
                    a = sw.empty(mib(6), device=sim, tag=f"thread{k}")
                    a.fill(float(k * 1000 + i))
                except sw.DeviceMemoryError:
                    ooms += 1
                    continue
                if k < 2:
                    kept[k] = (kept[k] + [(i, a)])[-4:]   # holds on
                elif i % 2:
                    Cycle(a)                              # drops: garbage
                del a                                     # drops
            results[k] = ("ok", ooms)
        except BaseException as exc:
            results[k] = ("error", exc)

    run_threads([lambda k=k: work(k) for k in range(4)], timeout=100)
    assert all(r is not None and r[0] == "ok" for r in results), results
    for k in range(2):
        for i, a in kept[k]:
            assert a[0] == float(k * 1000 + i) and a[mib(6) - 1] == a[0]
    info = sw.memory_info(sim)
    assert info.allocs >= 4 * 40 - sum(r[1] for r in results)
    kept.clear()


def test_finalizer_frees_arrays_inside_the_collection(sim, gc_off):
    events, allocating = [], [False]

    class Owner:
        def __init__(self, arrays):
            self.arrays = arrays
            self.me = self

        def __del__(self):
            events.append((allocating[0], threading.get_ident(),
                           len(self.arrays)))
            self.arrays.clear()  # frees device memory, inside the callback

    Owner([sw.empty(mib(12), device=sim, tag="owned") for _ in range(4)])
    before = sw.memory_info(sim)
    allocating[0] = True
    big = sw.empty(mib(32), device=sim)
    allocating[0] = False
    assert events == [(True, threading.get_ident(), 4)]
    after = sw.memory_info(sim)
    assert after.gc_runs == before.gc_runs + 1 and after.spills == before.spills
    del big


@pytest.mark.timeout(60)
def test_lock_path_1_python_thread_holding_the_gil(sim, gc_off):
    """A Python thread (it holds the GIL) allocates under pressure: the
    module releases the GIL around the allocation and the callback, on that
    same thread, takes it back to collect."""
    refs = make_cycles(sim, 4, 12)
    where, out = [], []

    class Marker:
        def __init__(self):
            self.me = self

        def __del__(self):
            where.append(threading.get_ident())

    Marker()
    t = threading.Thread(
        target=lambda: out.append(sw.empty(mib(32), device=sim)))
    run_threads([t.run], timeout=50)
    assert len(out) == 1 and all(r() is None for r in refs)
    assert where and where[0] != threading.get_ident()  # collected there
    out.clear()


@pytest.mark.timeout(60)
def test_lock_path_2_callback_reenters_spillway(sim, gc_off):
    """Inside the collection the callback runs, finalizers call spillway
    again -- accounting, a synchronize, an allocation, an operation, frees.
    Each takes the device lock: this only works because the callback gave
    it up before taking the GIL."""
    seen = []

    class Reentrant:
        def __init__(self, arrays):
            self.arrays = arrays
            self.me = self

        def __del__(self):
            info = sw.memory_info(sim)
            sw.synchronize(sim)
            small = sw.zeros(1024, device=sim, tag="finalizer")
            total = sw.sum(sw.add(small, small))
            self.arrays.clear()
            seen.append((info.in_use, total))

    Reentrant([sw.empty(mib(12), device=sim) for _ in range(4)])
    before = sw.memory_info(sim)
    big = sw.empty(mib(32), device=sim)
    assert len(seen) == 1 and seen[0][1] == 0.0
    assert seen[0][0] >= 48 * MiB
    assert sw.memory_info(sim).gc_runs == before.gc_runs + 1
    del big


@pytest.mark.timeout(120)
def test_lock_path_3_plain_c_thread(sim, gc_off):
    """A C thread that never held the GIL allocates under pressure while
    Python threads run pure Python and one waits for the device: the
    callback on the C thread creates a thread state, takes the GIL, collects
    and gives everything back."""
    refs = make_cycles(sim, 4, 12)
    finalizer_threads = []

    class Marker:
        def __init__(self):
            self.me = self

        def __del__(self):
            finalizer_threads.append(threading.get_ident())

    Marker()
    before = sw.memory_info(sim)
    stop = threading.Event()
    py_idents, counts = set(), {"spin": 0, "sync": 0}

    def spin():
        py_idents.add(threading.get_ident())
        x = 1
        while not stop.is_set():
            x = (x * 7 + 3) % 65521
            counts["spin"] += 1

    def sync():
        py_idents.add(threading.get_ident())
        while not stop.is_set():
            sw.synchronize(sim)
            counts["sync"] += 1

    py = [threading.Thread(target=f, daemon=True) for f in (spin, spin, sync)]
    for t in py:
        t.start()
    c = _testing.start_c_thread_allocating(sim, 8 * MiB, 40, hold=4)
    try:
        res = c.join(timeout=90)
    finally:
        stop.set()
        for t in py:
            t.join(20)
    assert not any(t.is_alive() for t in py)
    assert res["errors"] == 0, res["last_error"]
    assert res["ok"] == 40 and res["oom"] == 0
    assert all(r() is None for r in refs)
    assert finalizer_threads
    py_idents.add(threading.get_ident())
    assert finalizer_threads[0] not in py_idents  # ran on the C thread
    assert counts["spin"] > 0 and counts["sync"] > 0
    assert sw.memory_info(sim).gc_runs > before.gc_runs


def test_gc_rate_limit(sim):
    """A fruitless full collection backs off the next full ones: while it
    lasts, an allocation that spilling can satisfy runs only a young
    collection (no storm of full ones in a workload that spills on every
    step); a reset (or a fruitful collection) ends it."""
    old = _testing.gc_backoff(30.0)
    held = [sw.zeros(mib(16), device=sim, tag="pinned") for _ in range(3)]
    views = [np.from_dlpack(a) for a in held]
    try:
        def runs():
            return sw.memory_info(sim).gc_runs

        r0 = runs()
        with pytest.raises(sw.DeviceMemoryError):
            sw.empty(mib(24), device=sim)  # a fruitless collection ...
        assert runs() == r0 + 1
        assert _testing.gc_stats()["backoff_left"] > 20  # ... backs off
        s = _testing.gc_stats()
        spills = sw.memory_info(sim).spills
        x = sw.zeros(mib(10), device=sim, tag="x")
        for i in range(3):                  # 48 + 10 + 10 > 64: spill x
            y = sw.zeros(mib(10), device=sim, tag=f"y{i}")
            x, y = y, None
        now = _testing.gc_stats()
        assert sw.memory_info(sim).spills >= spills + 3
        assert now["full"] == s["full"]     # no full collection meanwhile
        assert now["skipped_backoff"] == s["skipped_backoff"] + 3
        if FREE_THREADED:                   # no young collection there
            assert now["young"] == s["young"] and runs() == r0 + 1
        else:
            assert now["young"] == s["young"] + 3 and runs() == r0 + 4
        del x
        _testing.gc_backoff_reset()
        with pytest.raises(sw.DeviceMemoryError):
            sw.empty(mib(24), device=sim)
        assert _testing.gc_stats()["full"] == now["full"] + 1
        # A collection that frees memory ends the back-off.
        assert _testing.gc_stats()["backoff_left"] > 20
        _testing.gc_backoff_reset()
        gc.disable()
        refs = make_cycles(sim, 1, 8)
        x = sw.empty(mib(12), device=sim)  # 48 + 8 + 12 > 64
        assert refs[0]() is None
        assert _testing.gc_stats()["backoff_left"] == 0
        del x
    finally:
        gc.enable()
        _testing.gc_backoff(old)
        del views


def test_rate_limit_rule_is_documented():
    doc = sw.__doc__ + sw._spillway.__doc__
    assert "gc.collect()" in doc and "50 ms" in doc and "10 x" in doc
    assert sw.GC_BACKOFF_FACTOR == 10 if hasattr(sw, "GC_BACKOFF_FACTOR") \
        else sw._spillway.GC_BACKOFF_FACTOR == 10


# ---------------------------------------------------------------------------
# The back-off is sound (issue 11.6).  Each test starts the back-off itself,
# with a fruitless collection, as a program would: conftest.py's reset
# between tests must not be what makes them pass.


def start_backoff(d):
    """Fill d with exported (unspillable) arrays, fail an allocation: its
    collection frees nothing, so a back-off starts.  Returns the holders."""
    held = [sw.zeros(mib(16), device=d, tag="pinned") for _ in range(3)]
    views = [np.from_dlpack(a) for a in held]
    with pytest.raises(sw.DeviceMemoryError):
        sw.empty(mib(24), device=d, tag="first")
    assert _testing.gc_stats()["backoff_left"] > 20
    return held, views


class ExportedCycle(Cycle):
    """A cycle holding an array and a NumPy view of it (a DLPack lease): the
    array cannot be spilled while the cycle lives."""

    def __init__(self, a):
        super().__init__(a)
        self.view = np.from_dlpack(a)


@pytest.fixture
def long_backoff():
    old = _testing.gc_backoff(30.0)
    yield
    _testing.gc_backoff(old)


def test_backoff_unspillable_garbage_made_after_it_is_collected(
        sim, gc_off, long_backoff):
    """Cycles made and dropped right after a fruitless collection hold the
    whole device through exports: the next allocation must collect them,
    not raise DeviceMemoryError."""
    held, views = start_backoff(sim)
    del held, views
    refs = []
    for i in range(3):
        c = ExportedCycle(sw.zeros(mib(16), device=sim, tag=f"c{i}"))
        refs.append(weakref.ref(c.arrays[0]))
        del c
    before = sw.memory_info(sim)
    assert before.in_use >= 48 * MiB
    assert _testing.gc_stats()["backoff_left"] > 20   # still backing off
    big = sw.empty(mib(24), device=sim, tag="big")
    after = sw.memory_info(sim)
    assert all(r() is None for r in refs)
    assert after.gc_runs > before.gc_runs
    assert after.spills == before.spills
    del big


def test_backoff_spillable_garbage_is_collected_not_spilled(
        sim, gc_off, long_backoff):
    """Cycles of spillable arrays made after a fruitless collection are
    collected (a young collection) before anything is spilled."""
    held, views = start_backoff(sim)
    del held, views
    refs = make_cycles(sim, 3, 16)                 # 48 MiB of garbage
    before = sw.memory_info(sim)
    stats = _testing.gc_stats()
    big = sw.empty(mib(24), device=sim, tag="big")
    after = sw.memory_info(sim)
    if FREE_THREADED:
        # No young collection to run: the garbage spills instead.
        now = _testing.gc_stats()
        assert after.spills > before.spills and after.gc_runs == before.gc_runs
        assert now["full"] == stats["full"] and now["young"] == stats["young"]
        del big
        return
    assert all(r() is None for r in refs)
    assert after.spills == before.spills           # collected, not spilled
    assert after.spilled == 0
    assert after.gc_runs == before.gc_runs + 1
    # ... by a young collection: the full one is still backed off.
    now = _testing.gc_stats()
    assert now["full"] == stats["full"] and now["young"] == stats["young"] + 1
    del big


def test_backoff_old_garbage_gets_a_full_collection_before_oom(
        sim, gc_off, long_backoff):
    """Garbage a young collection cannot see (it survived a full collection
    while alive) still holds the device when an allocation would fail in the
    back-off: a full collection runs before any DeviceMemoryError."""
    cycles = [ExportedCycle(sw.zeros(mib(16), device=sim, tag=f"old{i}"))
              for i in range(3)]
    refs = [weakref.ref(c.arrays[0]) for c in cycles]
    gc.collect()                          # now in the oldest generation
    with pytest.raises(sw.DeviceMemoryError):
        sw.empty(mib(24), device=sim)     # fruitless: they are alive
    assert _testing.gc_stats()["backoff_left"] > 20
    del cycles                            # old garbage now
    stats = _testing.gc_stats()
    before = sw.memory_info(sim)
    big = sw.empty(mib(24), device=sim, tag="big")
    after = sw.memory_info(sim)
    assert all(r() is None for r in refs)
    assert after.spills == before.spills
    assert _testing.gc_stats()["full"] == stats["full"] + 1
    del big


def test_backoff_oom_always_follows_a_full_collection(
        sim, long_backoff):
    held, views = start_backoff(sim)
    try:
        for _ in range(3):
            stats = _testing.gc_stats()
            before = sw.memory_info(sim)
            with pytest.raises(sw.DeviceMemoryError):
                sw.empty(mib(24), device=sim)
            assert sw.memory_info(sim).gc_runs > before.gc_runs
            assert _testing.gc_stats()["full"] == stats["full"] + 1
    finally:
        del views


def test_backoff_no_retry_where_no_collection_can_help(sim, long_backoff):
    """A request over the whole budget fails before the callbacks: it is
    not made twice (one OOM counted, no full collection for it)."""
    held, views = start_backoff(sim)
    try:
        sw.set_memory_budget(mib(56), sim)
        before = sw.memory_info(sim)
        stats = _testing.gc_stats()
        with pytest.raises(sw.DeviceMemoryError, match="whole budget"):
            sw.empty(mib(60), device=sim)
        after = sw.memory_info(sim)
        assert after.ooms == before.ooms + 1
        assert _testing.gc_stats()["full"] == stats["full"]
        assert _testing.gc_stats()["last_chance"] == stats["last_chance"]
    finally:
        sw.set_memory_budget(None, sim)
        del views
