"""The extension module itself: multi-phase init, heap types, GC and weak
reference support, a second module instance, interpreter exit with arrays
and threads still alive."""

import gc
import importlib.util
import os
import pickle
import subprocess
import sys
import textwrap
import time
import weakref

import pytest

import spillway as sw
from spillway import _spillway

Py_TPFLAGS_HEAPTYPE = 1 << 9
Py_TPFLAGS_HAVE_GC = 1 << 14
Py_TPFLAGS_IMMUTABLETYPE = 1 << 8


@pytest.mark.parametrize("name", ["Array", "Device", "PeakScope"])
def test_heap_types_with_gc(name):
    t = getattr(sw, name)
    assert t.__flags__ & Py_TPFLAGS_HEAPTYPE
    assert t.__flags__ & Py_TPFLAGS_HAVE_GC
    assert t.__flags__ & Py_TPFLAGS_IMMUTABLETYPE
    assert t.__module__ == "spillway"
    with pytest.raises(TypeError):
        t.extra = 1


def test_arrays_are_tracked_and_traverse_their_device(dev):
    a = sw.empty(3)
    assert gc.is_tracked(a) and gc.is_tracked(dev)
    assert dev in gc.get_referents(a)
    with sw.memory_peak() as p:
        assert dev in gc.get_referents(p)


def test_weak_references_die_with_the_object(dev):
    a = sw.empty(8)
    r = a.reshape(2, 4)
    refs = [weakref.ref(a), weakref.ref(r)]
    called = []
    weakref.finalize(a, called.append, "a")
    del a
    assert refs[0]() is None and called == ["a"]
    assert refs[1]() is r
    del r
    assert refs[1]() is None


def test_what_is_not_picklable(dev):
    # Arrays and Devices pickle (test_pickle.py); queues and events are
    # live resources of one process.
    q = sw.Queue(dev)
    with pytest.raises(TypeError):
        pickle.dumps(q)
    with pytest.raises(TypeError):
        pickle.dumps(q.record_event())
    del q


def test_second_module_instance(sim):
    """Multi-phase init: a second instance of the extension has its own
    state and types, and the same devices underneath."""
    spec = importlib.util.find_spec("spillway._spillway")
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    assert other is not _spillway
    assert other.Array is not sw.Array and other.Device is not sw.Device
    d = other.Device("sim:0")
    assert d is not sim and d.name == sim.name and d == "sim:0"
    before = sw.memory_info(sim).in_use
    a = other.zeros(1024, device=d)
    assert type(a) is other.Array and other.sum(a) == 0.0
    assert sw.memory_info(sim).in_use == before + 4096  # the same device
    with pytest.raises(TypeError, match="spillway.Array"):
        sw.add(a, a)
    del a
    # Closed now, whatever becomes of the module: its pressure callback goes
    # with it (two callbacks on sim:0 would collect twice in later tests).
    d.close()
    ref = weakref.ref(other)
    # Free-threaded 3.13 makes modules immortal once a second thread has
    # started (its deferred reference counts are not finished until 3.14):
    # there the instance stays, closed.
    immortal = sys.getrefcount(other) >= (1 << 32) - 1
    del d, other
    # gc.collect() does nothing while another thread collects (any thread
    # may, on free-threaded builds): a few tries.
    for _ in range(200):
        gc.collect()
        if ref() is None or immortal:
            break
        time.sleep(0.005)
    assert immortal or ref() is None
    assert sw.memory_info(sim).in_use == before


def run_python(code, timeout=90, env_extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(sw.__file__))] +
        env.get("PYTHONPATH", "").split(os.pathsep))
    env["SPILLWAY_SIM_MEMORY"] = "64M"
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_exit_with_live_arrays_views_and_scopes():
    r = run_python("""
        import gc, numpy as np, spillway as sw
        keep = [sw.zeros(1 << 20, tag="global") for _ in range(4)]
        class C:
            def __init__(self):
                self.me = self
                self.a = sw.zeros(1 << 18)
        C()
        view = np.from_dlpack(keep[0])
        scope = sw.memory_peak(); scope.__enter__()
        sw.sum(sw.add(keep[1], keep[2]))
        sw.set_memory_budget(8 << 20)
        print("done", flush=True)
    """, env_extra={"SPILLWAY_DEVICE": "sim:0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "done" and r.stderr == ""


@pytest.mark.timeout(120)
def test_exit_while_threads_allocate_under_pressure():
    """The interpreter finalizes while a Python thread and a C thread are
    allocating under pressure: the collector is not run during
    finalization, nothing deadlocks or crashes."""
    r = run_python("""
        import gc, threading, spillway as sw
        from spillway import _testing
        gc.disable()
        class Cycle:
            def __init__(self, a):
                self.a = a; self.me = self
        def churn():
            while True:
                Cycle(sw.empty(4 << 20, tag="py-thread"))
        threading.Thread(target=churn, daemon=True).start()
        c = _testing.start_c_thread_allocating("sim:0", 8 << 20, 400, hold=3)
        for _ in range(3):
            Cycle(sw.empty(4 << 20))
        print("exiting", flush=True)
    """, env_extra={"SPILLWAY_DEVICE": "sim:0"})
    assert r.returncode == 0, r.stderr
    assert "exiting" in r.stdout
    assert "Fatal" not in r.stderr and "Segmentation" not in r.stderr


def test_default_device_from_environment():
    r = run_python("""
        import spillway as sw
        print(sw.Device().name, sw.empty(1).device.name,
              sw.memory_info().device_total)
    """, env_extra={"SPILLWAY_DEVICE": "sim:1", "SPILLWAY_SIM_DEVICES": "2",
                    "SPILLWAY_SIM_MEMORY": "32M"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["sim:1", "sim:1", str(32 << 20)]
    bad = run_python("import spillway as sw; sw.empty(1)",
                     env_extra={"SPILLWAY_DEVICE": "nope:0"})
    assert bad.returncode == 1 and "ValueError" in bad.stderr
    assert "nope" in bad.stderr
