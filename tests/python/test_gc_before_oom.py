"""The collector runs before every DeviceMemoryError (issue 24, item 3): on
every device, whatever the back-off did before, the last step before an
allocation fails for good is a collection that can free cyclic garbage of
any generation, unless one ran since the last free."""

import gc
import sysconfig

import pytest

import spillway as sw


class _Holder:
    """An array and its unconsumed DLPack capsule (an exposure lease: the
    array cannot spill), in a reference cycle with itself."""

    def __init__(self, n, dev):
        self.a = sw.empty(n, dtype="float32", device=dev)
        self.capsule = self.a.__dlpack__()
        self.me = self


def _eighth(dev):
    # 1/8 of what the device can hold for arrays: its capacity, less what
    # the library keeps for itself (a scratch block, queue reserves).
    total = sw.memory_info(dev).device_total
    return (total - (2 << 20)) // 8 // 4


def _empty_cache(dev):
    # Blocks an earlier test left cached go back to the device first
    # (frees go back in stream order, hence the second synchronize).
    sw.synchronize(dev)
    sw.empty_cache(dev)
    sw.synchronize(dev)


@pytest.mark.spills
def test_cyclic_garbage_is_collected_before_oom(dev):
    if sw.memory_info(dev).device_total > (64 << 30):
        pytest.skip("device too large to fill in a test")
    n = _eighth(dev)
    _empty_cache(dev)
    gc.disable()
    try:
        # Exposed eighths until the device is full: seven or eight, as the
        # library's own small blocks (a scratch block the first reduction
        # placed wherever there was room) split its memory.
        held = []
        with pytest.raises(sw.DeviceMemoryError):
            # Nothing is freeable: a fruitless full collection, then the
            # error.
            for _ in range(9):
                a = sw.empty(n, dtype="float32", device=dev)
                held.append((a, a.__dlpack__()))
                del a
        count = len(held)
        assert count >= 7
        del held
        # The same blocks again (they come back from the cache), now held
        # by reference cycles only.
        for _ in range(count):
            _Holder(n, dev)
        before = sw.memory_info(dev)
        assert before.in_use >= count * n * 4
        # The cycles hold the whole device: only a collection frees it.
        x = sw.empty(n, dtype="float32", device=dev)
        assert sw.memory_info(dev).gc_runs > before.gc_runs
        del x
    finally:
        gc.enable()
        gc.collect()


@pytest.mark.spills
def test_cyclic_garbage_is_collected_for_a_queue(dev):
    """A queue's own device memory (the simulated device reserves some per
    queue) is made room for as an array's is: cyclic garbage holding the
    whole device is collected, and Queue() succeeds."""
    if not dev.name.startswith("sim"):
        pytest.skip("only the simulated device reserves memory per queue")
    n = _eighth(dev)
    _empty_cache(dev)
    gc.disable()
    try:
        # Exposed arrays until the device is full to the last MiB (eighths,
        # then MiBs), then each put in a reference cycle of its own.
        held = []
        for size in (n, 1 << 18):
            with pytest.raises(sw.DeviceMemoryError):
                for _ in range(4096):
                    a = sw.empty(size, dtype="float32", device=dev)
                    held.append((a, a.__dlpack__()))
                    del a
        for pair in held:
            cycle = [pair]
            cycle.append(cycle)
        del held, pair, cycle
        before = sw.memory_info(dev)
        q = sw.Queue(dev)
        assert sw.memory_info(dev).gc_runs > before.gc_runs
        b = sw.ones(16, device=dev)
        assert float(sw.add(b, b, queue=q).sum()) == 32.0
        q.synchronize()
        del q, b
    finally:
        gc.enable()
        gc.collect()


def _mib(n):
    return n * (1 << 20) // 4  # float32 elements


@pytest.fixture
def long_backoff():
    from spillway import _testing
    old = _testing.gc_backoff(30.0)
    yield _testing
    _testing.gc_backoff(old)


@pytest.mark.timeout(120)
def test_old_garbage_collected_before_a_c_threads_oom(sim, long_backoff):
    """Garbage a young collection cannot see (it survived a full collection
    while alive) holds the device in a back-off, and a C thread -- no
    DeviceMemoryError to retry, no Python call around it -- allocates: the
    allocator's last chance collects in full, and the allocation succeeds."""
    _testing = long_backoff
    gc.disable()
    try:
        old = [_Holder(_mib(16), sim) for _ in range(3)]
        gc.collect()  # now in the oldest generation
        with pytest.raises(sw.DeviceMemoryError):
            sw.empty(_mib(24), device=sim)  # fruitless: they are alive
        assert _testing.gc_stats()["backoff_left"] > 20
        del old
        stats = _testing.gc_stats()
        res = _testing.start_c_thread_allocating(
            sim, 24 << 20, 1, hold=1).join(timeout=60)
        assert res["errors"] == 0, res["last_error"]
        assert res["ok"] == 1 and res["oom"] == 0
        now = _testing.gc_stats()
        # The back-off's choice: a young collection, or none at all where
        # the collector has no generations (free-threaded builds).
        young = 0 if sysconfig.get_config_var("Py_GIL_DISABLED") else 1
        assert now["young"] == stats["young"] + young
        assert now["full"] == stats["full"] + 1    # then the last chance
    finally:
        gc.enable()
        gc.collect()
