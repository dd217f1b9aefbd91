"""The test-only extension module, spillway._spillway_testing: apart from the
production module, yet acting on the production module's devices (it links
no libspillway of its own and goes through the capsule
spillway._spillway._testing_api); and the production module exports
nothing but its init function."""

import shutil
import subprocess

import pytest

import spillway as sw
from spillway import _spillway, _spillway_testing, _testing

HELPERS = ["start_c_thread_allocating", "inject_fault", "track_arrays",
           "gc_backoff", "gc_backoff_reset", "gc_stats", "open_devices",
           "wait_host_tasks", "object_counts"]


def test_helpers_live_in_the_testing_module_only():
    for name in HELPERS:
        assert getattr(_testing, name) is getattr(_spillway_testing, name)
        assert not hasattr(_spillway, "_" + name), name
    assert not hasattr(sw, "_testing_api")
    assert type(_spillway._testing_api).__name__ == "PyCapsule"


def test_same_devices_as_the_production_module(sim):
    """A second copy of the library would have a registry of its own: its
    devices would not be these objects, and a fault injected there would
    not fail an allocation here."""
    assert any(d is sim for d in _testing.open_devices())
    _testing.inject_fault(sim, "alloc", 1, persistent=True)
    try:
        with pytest.raises(sw.DeviceMemoryError):
            sw.empty(1 << 20, device=sim)
    finally:
        _testing.inject_fault(sim, "alloc", 0)
    sw.empty(1 << 20, device=sim)


def test_c_thread_allocates_on_the_production_device(sim):
    before = sw.memory_info(sim).allocs
    t = _testing.start_c_thread_allocating(sim, 4096, 10)
    counts = t.join(timeout=60)
    assert counts["ok"] == 10 and counts["errors"] == 0, counts
    assert sw.memory_info(sim).allocs >= before + 10


def symbols(path, *flags):
    out = subprocess.run(["nm", *flags, path], capture_output=True,
                         text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


@pytest.mark.skipif(shutil.which("nm") is None, reason="no nm")
def test_symbols():
    exported = symbols(_spillway.__file__, "-D", "--defined-only")
    assert exported == ["PyInit__spillway"]
    testing = _spillway_testing.__file__
    assert symbols(testing, "-D", "--defined-only") == \
        ["PyInit__spillway_testing"]
    # No copy of libspillway inside, and no call into one.
    assert not [s for s in symbols(testing) if s.startswith("sw_")]
