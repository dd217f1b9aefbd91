"""The seed's contract on real tensors: Python's collector runs before an
allocation fails, under spillway's lock order (device lock -> GIL), from
Python threads and from PyTorch's autograd threads alike.

torch-spyre's five scenarios (tests/test_memory_pressure_gc.py there), in
this project's words, on device="spillway" with sizes scaled to the
simulated device (256 MiB): dead tensors dropped, then an allocation
succeeds; a thread allocating beside one running Python; tensors held only
by reference cycles with the collector disabled; nothing freeable -> OOM,
never a hang; four threads under pressure, half of them dropping their
tensors.  With no budget, the collector runs before anything is spilled
(DESIGN.md's allocation ladder): the first, third and autograd scenarios
check that nothing was.
"""
import gc
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import spillway
import spillway.torch

from conftest import MiB

SIZE = 48 * MiB  # five of them nearly fill a 256 MiB device


class Holder:
    def __init__(self, tensor):
        self.tensor = tensor
        self.me = self  # a cycle: only the collector frees it


@pytest.fixture
def no_gc():
    gc.collect()
    gc.disable()
    yield
    gc.enable()
    gc.collect()


def counters():
    info = torch.spillway.memory_info()
    return info.gc_runs, info.spills


def test_dead_tensors_are_collected_then_the_allocation_succeeds(no_gc):
    runs, spills = counters()
    holders = [Holder(torch.randn(SIZE // 4, device="spillway"))
               for _ in range(4)]
    holders.clear()  # garbage, in cycles, with the collector off
    fresh = [torch.randn(SIZE // 4, device="spillway") for _ in range(3)]
    assert all(t.numel() == SIZE // 4 for t in fresh)
    runs2, spills2 = counters()
    assert runs2 > runs, "the collector did not run"
    assert spills2 == spills, "spilled before collecting"
    del fresh


def test_a_thread_allocating_beside_one_running_python():
    done = threading.Event()
    errors = []

    def allocate():
        try:
            keep = [torch.randn(4 * MiB, device="spillway") for _ in range(4)]
            keep.clear()
            torch.randn(4 * MiB, device="spillway").add_(1).sum().item()
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            done.set()

    def python():
        for _ in range(300):
            sum(j * j for j in range(200))
            time.sleep(0.001)

    t1 = threading.Thread(target=allocate)
    t2 = threading.Thread(target=python)
    t1.start()
    time.sleep(0.05)
    t2.start()
    assert done.wait(60), "the allocating thread hung"
    t1.join(10)
    t2.join(10)
    assert not t1.is_alive() and not t2.is_alive()
    assert not errors, errors


def test_tensors_in_reference_cycles_with_gc_disabled(no_gc):
    runs, spills = counters()
    for _ in range(5):
        Holder(torch.ones(SIZE // 4, device="spillway"))
    t = torch.ones(SIZE // 4, device="spillway")
    u = torch.ones(SIZE // 4, device="spillway")
    assert (t + u).sum().item() == 2.0 * (SIZE // 4)
    runs2, spills2 = counters()
    assert runs2 > runs and spills2 == spills
    del t, u


def test_autograd_threads_collect_too(no_gc):
    """A backward pass allocates on autograd's own device thread, which
    holds no GIL: the collector runs there, and nothing spills."""
    x = torch.randn(1024, 1024, device="spillway", requires_grad=True)
    w = torch.randn(1024, 1024, device="spillway", requires_grad=True)
    loss = (x @ w).sum()
    threads = set()

    def phase(p, info):
        if p == "start":
            threads.add(threading.get_ident())

    gc.callbacks.append(phase)
    try:
        # Fill the device, then make the fillers garbage: what is left is
        # less than the backward pass needs (three 4 MiB tensors), so its
        # allocations on autograd's thread meet the pressure.  (Filled with
        # live tensors first: garbage would be collected by the filling's
        # own pressure, which a fragmented arena may meet early.)
        torch.spillway.empty_cache()
        keep = []
        spills0 = torch.spillway.memory_info().spills
        while (torch.spillway.mem_get_info()[0] >= 12 * MiB and
               torch.spillway.memory_info().spills == spills0):
            keep.append(torch.empty(MiB, device="spillway"))
        for t in keep:
            Holder(t)
        keep.clear()
        runs, spills = counters()
        loss.backward()
    finally:
        gc.callbacks.remove(phase)
    runs2, spills2 = counters()
    assert x.grad is not None and w.grad is not None
    assert runs2 > runs and spills2 == spills
    assert threads - {threading.get_ident()}, \
        "no collection ran on autograd's thread"
    del x, w, loss


def test_nothing_freeable_is_oom_never_a_hang(tmp_path):
    """Every tier full: the device (a budget), the host budget, and a spill
    directory that cannot be written; the error says which."""
    code = """
import torch, spillway, spillway.torch
torch.spillway.set_memory_budget("8M")
torch.spillway.set_host_budget("4M")
keep = []
try:
    for i in range(64):
        keep.append(torch.empty(1 << 18, device="spillway"))
    print("no OOM")
except torch.OutOfMemoryError as e:
    print("OOM after", len(keep), "|", e)
    print("gc_runs", torch.spillway.memory_info().gc_runs)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        timeout=120,
        env=dict(os.environ, SPILLWAY_SPILL_DIR=str(tmp_path / "missing")))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("OOM after 12 |"), out.stdout
    assert "spill file" in out.stdout and "missing" in out.stdout
    runs = int(out.stdout.split("gc_runs")[1])
    assert runs >= 1


def test_four_threads_under_pressure_half_dropping_theirs():
    results = []
    lock = threading.Lock()
    done = [threading.Event() for _ in range(4)]

    def work(i):
        try:
            mine = [torch.empty(8 * MiB, device="spillway") for _ in range(2)]
            if i % 2 == 0:
                mine.clear()
            t = torch.ones(4 * MiB, device="spillway")
            ok = t.sum().item() == 4 * MiB
            with lock:
                results.append(("ok" if ok else "wrong", i))
        except torch.OutOfMemoryError:
            with lock:
                results.append(("oom", i))
        except Exception as e:  # noqa: BLE001
            with lock:
                results.append(("error", i, repr(e)))
        finally:
            done[i].set()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for e in done:
        assert e.wait(60), "a thread hung"
    for t in threads:
        t.join(10)
    assert len(results) == 4
    # 4 x 64 MiB + 4 x 16 MiB > 256 MiB: with no budget, what does not fit
    # spills, so every thread succeeds
    assert sorted(r[0] for r in results) == ["ok"] * 4, results
