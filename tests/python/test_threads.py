"""Threads really running at once (issue 26): shared arrays and views,
capsules, queues and the collector under pressure, with every result
checked.

On a free-threaded interpreter (the python-ft suite: the GIL stays off,
conftest.py checks) these threads run Python code in parallel; on a GIL
build they interleave at every spillway call, which releases the GIL.  The
same assertions hold either way.  Each test starts its threads at a
barrier, joins them with a timeout (a deadlock fails the test instead of
hanging the suite) and re-raises the first error a thread met.
"""

import gc
import os
import pickle
import threading
import time

import numpy as np
import pytest

import spillway as sw
from spillway import _plugin, _testing

MiB = 1 << 20

os.environ.setdefault("SPILLWAY_PLUGIN_BACKEND",
                      sw.Device().name.partition(":")[0])


def mib(n):
    """float32 elements in n MiB."""
    return int(n * MiB) // 4


def run(n, target, timeout=150):
    """target(k) in n threads started together; the first error raised."""
    barrier = threading.Barrier(n)
    errors = []

    def body(k):
        try:
            barrier.wait(30)
            target(k)
        except BaseException as e:  # re-raised below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(k,), daemon=True)
               for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads still running after {timeout}s: {hung}"
    if errors:
        raise errors[0]


class Cycle:
    """Holds arrays (or anything) in a reference cycle."""

    def __init__(self, *items):
        self.items = list(items)
        self.me = self


@pytest.fixture
def gc_off():
    gc.collect()
    gc.disable()
    yield
    gc.enable()
    gc.collect()


# --- shared arrays and views ------------------------------------------------

THREADS, ROUNDS, N, M = 8, 30, 4096, 2048


@pytest.mark.timeout(300)
@pytest.mark.parametrize("budget", [None, 512 << 10], ids=["resident",
                                                           "spilling"])
def test_shared_arrays_and_views_from_eight_threads(dev, budget):
    """Eight threads, each round: an in-place add on one shared array (the
    adds are whole operations, so the sum is exact), fill / in-place scale
    and add / item assignment on its own view of a shared base, reads,
    DLPack exports and pickles of a shared array and of views of it, and
    arrays and views made and dropped.  Under a budget the threads' own
    arrays spill and come back meanwhile."""
    if budget is not None and dev.name.startswith("host:"):
        pytest.skip("host:0 never spills")
    acc = sw.zeros(N, dtype="float64", device=dev, tag="acc")
    one = sw.asarray(np.ones(N), device=dev, tag="one")
    base = sw.zeros((THREADS, M), device=dev, tag="base")
    ones_m = sw.asarray(np.ones(M, np.float32), device=dev, tag="ones_m")
    src = np.arange(N, dtype=np.float32)
    const = sw.asarray(src, device=dev, tag="const")
    sw.synchronize(dev)
    before = sw.memory_info(dev)
    if budget is not None:
        sw.set_memory_budget(budget, device=dev)

    consume = (np.from_dlpack if const.__dlpack_device__()[0] == 1
               else sw.from_dlpack)

    def work(k):
        row = base[k]                       # a view, this thread's alone
        mine = [sw.zeros(mib(1 / 32), device=dev, tag=f"mine{k}")
                for _ in range(4)]          # 32 KiB each: they spill
        rng = np.random.default_rng(k)
        for r in range(ROUNDS):
            acc.__iadd__(one)               # shared, in place
            v = float(k + r)
            row.fill(v)
            row *= 2.0
            row += ones_m
            j = (k * 7 + r) % M
            row[j] = -v
            assert row[j] == -v and row[(j + 1) % M] == 2 * v + 1
            got = row.numpy()
            assert got[j] == -v and (np.delete(got, j) == 2 * v + 1).all()
            # Reads of the shared array, and of views of it.
            i = int(rng.integers(N))
            assert const[i] == src[i]
            lo = int(rng.integers(N - 64))
            view = const[lo:lo + 64]
            assert np.array_equal(view.numpy(), src[lo:lo + 64])
            # A lease while it lives: NumPy reads a CPU-addressable export;
            # on OpenCL (kDLOpenCL, which NumPy cannot read) spillway is the
            # consumer.
            exported = consume(const)
            assert exported[i] == src[i]
            del exported
            assert np.array_equal(pickle.loads(pickle.dumps(view)).numpy(),
                                  src[lo:lo + 64])
            if r % 5 == 0:
                whole = pickle.loads(pickle.dumps(const))
                assert np.array_equal(whole.numpy(), src)
                del whole
            # Made and dropped: a base dropped under its view.
            t = sw.asarray(np.full(256, v, np.float32), device=dev)
            tv = t[16:32]
            del t
            assert np.array_equal(tv.numpy(), np.full(16, v, np.float32))
            del tv, view
            # This thread's arrays, written and checked round to round.
            m = mine[r % 4]
            if r >= 4:
                assert m[0] == float(k * 1000 + r - 4)
            m.fill(float(k * 1000 + r))
        for idx, m in enumerate(mine):
            last = max(x for x in range(ROUNDS) if x % 4 == idx)
            assert (m.numpy() == float(k * 1000 + last)).all()

    try:
        run(THREADS, work)
    finally:
        sw.set_memory_budget(None, device=dev)
    assert (acc.numpy() == THREADS * ROUNDS).all()
    got = base.numpy()
    for k in range(THREADS):
        v = float(k + ROUNDS - 1)
        j = (k * 7 + ROUNDS - 1) % M
        assert got[k, j] == -v
        assert (np.delete(got[k], j) == 2 * v + 1).all()
    assert np.array_equal(const.numpy(), src)
    if budget is not None:
        assert sw.memory_info(dev).spills > before.spills


@pytest.mark.timeout(120)
def test_a_capsule_is_consumed_once_when_threads_race(dev):
    """Four threads hand one DLPack capsule to from_dlpack at once: one gets
    the tensor, the others a BufferError, and nothing leaks either way."""
    src = np.arange(1024, dtype=np.float32)
    a = sw.asarray(src, device=dev)
    for _ in range(40):
        cap = a.__dlpack__()
        got = [None] * 4

        def take(k):
            try:
                got[k] = sw.from_dlpack(cap)
            except BufferError as e:
                got[k] = e

        run(4, take)
        arrays = [g for g in got if isinstance(g, sw.Array)]
        errors = [g for g in got if isinstance(g, BufferError)]
        assert len(arrays) == 1 and len(errors) == 3, got
        assert all("already consumed" in str(e) for e in errors), errors
        assert np.array_equal(arrays[0].numpy(), src)
        del cap, got, arrays, errors


@pytest.mark.timeout(120)
def test_one_scope_and_one_pin_however_many_threads_enter(dev):
    """A memory_peak() scope or a pinned() set entered by four threads at
    once is entered once: the others get RuntimeError, and the one scope
    (or pin) ends once."""
    a = sw.zeros(1024, device=dev)
    for _ in range(20):
        scope = sw.memory_peak(dev)
        pin = sw.pinned(a)
        out = {"scope": [], "pin": []}

        def enter(k):
            for name, obj in (("scope", scope), ("pin", pin)):
                try:
                    obj.__enter__()
                    out[name].append("in")
                except RuntimeError:
                    out[name].append("refused")

        run(4, enter)
        assert sorted(out["scope"]) == ["in"] + ["refused"] * 3
        assert sorted(out["pin"]) == ["in"] + ["refused"] * 3
        assert isinstance(scope.bytes, int)

        def leave(k):
            scope.__exit__(None, None, None)
            try:
                pin.__exit__(None, None, None)
            except RuntimeError:
                pass  # another thread's exit came first

        run(4, leave)
        assert "bytes=" in repr(scope) and "ended" in repr(pin)
    a += a  # usable: no pin left behind


# --- queues and order managers ----------------------------------------------

@pytest.mark.timeout(300)
def test_queues_made_and_dropped_from_eight_threads(dev):
    """Eight threads each make a queue, run one operation on it and drop it,
    150 times: each thread's map keeps only the queues whose work is still
    running, and every result is right.  Every 10 rounds the threads meet
    and one waits for the device and the host tasks (the results' frees),
    so the count sampled after is the maps' own bound, not the pace of a
    loaded machine's worker threads."""
    x = sw.asarray(np.ones(1024, np.float32), device=dev)
    sw.synchronize(dev)
    sw.empty_cache(dev)
    sw.synchronize(dev)
    peaks = [0] * THREADS

    def settle():
        sw.synchronize(dev)
        _testing.wait_host_tasks(timeout=60)

    meet = threading.Barrier(THREADS, action=settle, timeout=120)

    def churn(k):
        for i in range(150):
            q = sw.Queue(dev)
            y = sw.scale(x, float(k + 1), queue=q)
            assert sw.order_manager[q] is sw.order_manager[q]
            del q
            if i % 10 == 0:
                # The previous 9 dead queues were idle: pruned by now.
                assert y[i] == float(k + 1)
                peaks[k] = max(peaks[k], len(sw.order_manager))
            del y
            if i % 10 == 9:
                meet.wait()
        sw.order_manager.clear()
        assert len(sw.order_manager) == 0

    free0 = sw.memory_info(dev).device_free
    run(THREADS, churn)
    assert max(peaks) <= 12, peaks  # bounded: not one per queue made
    _testing.wait_host_tasks(timeout=60)
    counts = _testing.object_counts()
    assert counts["queues"] == 0 and counts["managers"] == 0
    assert (x.numpy() == 1.0).all()
    if dev.name.startswith("sim"):
        # Every queue was destroyed (on sim:0 each held 1 MiB): the last
        # ones by their own threads, once their work was done.
        deadline = time.monotonic() + 30
        while sw.memory_info(dev).device_free < free0 - (1 << 20):
            assert time.monotonic() < deadline, sw.memory_info(dev)
            time.sleep(0.01)
            sw.synchronize(dev)


# --- the collector under pressure -------------------------------------------

@pytest.mark.timeout(300)
def test_collector_under_pressure_from_python_and_c_threads(sim, gc_off):
    """Four Python threads allocate and leave cyclic garbage while two C
    threads (no thread state) allocate too, on the 64 MiB sim:0: every
    collection runs with the device lock released; nobody runs out."""
    before = sw.memory_info(sim)
    cs = [_testing.start_c_thread_allocating(sim, 4 * MiB, 30, hold=2,
                                             tag=f"c{i}")
          for i in range(2)]

    def py(k):
        keep = []
        for i in range(30):
            a = sw.empty(mib(4), device=sim, tag=f"py{k}")
            a.fill(float(k * 100 + i))
            keep = (keep + [(i, a)])[-2:]
            if i % 2:
                Cycle(sw.empty(mib(2), device=sim, tag="garbage"))
            del a
        for i, a in keep:
            assert a[0] == float(k * 100 + i) and a[mib(4) - 1] == a[0]

    try:
        run(4, py)
    finally:
        results = [c.join(timeout=120) for c in cs]
    for res in results:
        assert res["errors"] == 0 and res["oom"] == 0, res
        assert res["ok"] == 30
    assert sw.memory_info(sim).gc_runs > before.gc_runs


class _Tensor:
    """A framework's tensor (the allocator plug-ins' malloc/free): its block
    is freed when it is collected."""

    p = 0

    def __init__(self, nbytes, index):
        self.index = index
        self.p = _plugin.malloc(nbytes, index, 0, "torch")

    def __del__(self):
        if self.p:
            _plugin.free(self.p, self.index, 0)


def _spyre_cycles_freed_by_pressure(d, k, step):
    """1: arrays held by cycles only; an allocation that does not fit
    beside them (every thread's) collects them."""
    for i in range(3):
        Cycle(sw.empty(mib(4), device=d, tag=f"cycle{k}"))
    step.wait(60)
    big = sw.empty(mib(6), device=d, tag=f"big{k}")
    big.fill(float(k))
    step.wait(60)  # 48 MiB of garbage and 24 MiB wanted at once
    assert big[mib(6) - 1] == float(k)


def _spyre_finalizer_reenters(d, k, step):
    """2: the collection's finalizers call spillway again (accounting, an
    allocation, an operation, frees) on whichever thread collects."""
    seen = []

    class Reentrant:
        def __init__(self, arrays):
            self.arrays = arrays
            self.me = self

        def __del__(self):
            sw.memory_info(d)
            small = sw.zeros(256, device=d, tag="finalizer")
            seen.append(sw.sum(sw.add(small, small)))
            self.arrays.clear()

    for _ in range(2):
        Reentrant([sw.empty(mib(3), device=d) for _ in range(2)])
    step.wait(60)  # 48 MiB of garbage, then 24 MiB more wanted
    big = sw.empty(mib(6), device=d)
    step.wait(60)
    del big
    for _ in range(500):  # another thread's collection may be running them
        if len(seen) == 2:
            break
        gc.collect()
        time.sleep(0.01)
    assert seen == [0.0, 0.0]


def _spyre_c_thread(d, k, step):
    """3: a C thread with no thread state allocates under pressure while
    this thread leaves garbage."""
    c = _testing.start_c_thread_allocating(d, 3 * MiB, 15, hold=2,
                                           tag=f"spyre-c{k}")
    for _ in range(6):
        Cycle(sw.empty(mib(3), device=d))
    res = c.join(timeout=120)
    assert res["errors"] == 0 and res["oom"] == 0 and res["ok"] == 15, res


def _spyre_framework_tensors(d, k, step):
    """4: framework tensors (the allocator plug-ins) in reference cycles
    under a budget: the loop finishes because the budget runs the
    collector.  In rounds (four tensors at most per round): the collector
    frees what a thread's allocation needs, but nothing reserves it for
    that thread, and threads allocating at will could take it all before
    its retry (spillway promises a full collection before any
    DeviceMemoryError, not a fair share: docs/python.md)."""
    index = int(d.name.partition(":")[2])
    for _ in range(16):
        node = {"t": _Tensor(MiB, index)}
        node["self"] = node
        del node
        step.wait(60)


def _spyre_pure_python_beside(d, k, step):
    """5: a pure-Python loop runs beside allocations that collect."""
    stop = threading.Event()
    count = [0]

    def spin():
        x = 0
        while not stop.is_set():
            x = (x * 31 + 7) % 1000003
            count[0] += 1

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    try:
        for i in range(8):
            a = sw.empty(mib(4), device=d)
            a.fill(float(i))
            assert a[0] == float(i)
            Cycle(a)
            del a
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive() and count[0] > 0


SPYRE = [_spyre_cycles_freed_by_pressure, _spyre_finalizer_reenters,
         _spyre_c_thread, _spyre_framework_tensors, _spyre_pure_python_beside]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("scenario", SPYRE, ids=lambda f: f.__name__[7:])
def test_torch_spyre_scenarios_in_four_threads(sim, gc_off, scenario):
    """The torch-spyre scenarios (arrays in cycles, finalizers re-entering
    spillway, a C thread, framework tensors in cycles under a budget, pure
    Python beside), each in four threads at once on sim:0."""
    d = _plugin.device(0) if scenario is _spyre_framework_tensors else sim
    if scenario is _spyre_framework_tensors and d.name != "sim:0":
        pytest.skip(f"the plug-ins' device 0 is {d.name}")
    _testing.gc_backoff_reset()
    before = sw.memory_info(d)
    if scenario is _spyre_framework_tensors:
        sw.set_memory_budget(8 * MiB, device=d)
    step = threading.Barrier(4)
    try:
        run(4, lambda k: scenario(d, k, step))
    finally:
        sw.set_memory_budget(None, device=d)
        gc.collect()
    assert sw.memory_info(d).gc_runs > before.gc_runs
    assert _plugin.live()[0] == 0
