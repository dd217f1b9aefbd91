"""DLPack export: the array's memory under an exposure lease."""

import ctypes
import gc

import numpy as np
import pytest

import spillway as sw

MiB = 1 << 20
N = MiB // 4  # float32 elements: 1 MiB


def capsule_name(cap):
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype = ctypes.c_char_p
    get.argtypes = [ctypes.py_object]
    return get(cap).decode()


def fill_budget(d, count):
    """Allocate and touch count arrays of 1 MiB: under a small budget this
    spills the least recently used spillable arrays."""
    out = []
    for i in range(count):
        x = sw.empty(N, device=d, tag=f"pressure{i}")
        x.fill(float(i))
        out.append(x)
    return out


def test_dlpack_device(sim):
    a = sw.zeros(4, device=sim)
    assert a.__dlpack_device__() == (1, 0)  # kDLCPU


def test_numpy_view_shares_memory(sim):
    a = sw.asarray(np.arange(12, dtype=np.float64).reshape(3, 4), device=sim)
    n = np.from_dlpack(a)
    assert n.shape == (3, 4) and n.dtype == np.float64
    assert n.tolist() == np.arange(12.0).reshape(3, 4).tolist()
    n[1, 2] = -1.0           # the host writes device memory ...
    assert a[1, 2] == -1.0   # ... that spillway reads
    a.fill(7.0)              # a device operation, complete on return
    assert (n == 7.0).all()
    sw.scale(a, 2.0, out=a)
    assert (n == 14.0).all()
    for dt in ["float32", "int32", "int64"]:
        x = sw.asarray(np.arange(5).astype(dt), device=sim)
        v = np.from_dlpack(x)
        assert v.dtype == np.dtype(dt) and v.tolist() == [0, 1, 2, 3, 4]
    row = a[1]
    assert np.from_dlpack(row).tolist() == [14.0] * 4
    assert np.from_dlpack(sw.zeros(0, device=sim)).shape == (0,)
    assert np.from_dlpack(sw.zeros((), device=sim)).shape == ()


def test_lease_blocks_spilling_while_the_view_lives(sim):
    a = sw.zeros(N, device=sim, tag="exported")
    a.fill(3.0)
    n = np.from_dlpack(a)
    sw.set_memory_budget(4 * MiB, sim)
    others = fill_budget(sim, 8)   # twice the budget
    assert not a.is_spilled        # exposed: never moves
    assert any(o.is_spilled for o in others)
    assert (n == 3.0).all()
    assert sw.memory_info(sim).spills > 0
    del n
    gc.collect()
    more = fill_budget(sim, 4)     # now it may go, oldest first
    assert a.is_spilled
    assert a.numpy()[0] == 3.0     # and comes back intact
    sw.set_memory_budget(None, sim)
    del others, more


def test_lease_outlives_the_array(sim):
    a = sw.asarray(np.full(N, 5.0, np.float32), device=sim)
    n = np.from_dlpack(a)
    in_use = sw.memory_info(sim).in_use
    del a
    gc.collect()
    assert sw.memory_info(sim).in_use == in_use   # the lease holds it
    assert (n == 5.0).all()
    del n
    gc.collect()
    assert sw.memory_info(sim).in_use == in_use - MiB


def test_capsules(sim):
    a = sw.zeros(N, device=sim)
    legacy = a.__dlpack__()
    assert capsule_name(legacy) == "dltensor"
    versioned = a.__dlpack__(max_version=(1, 0))
    assert capsule_name(versioned) == "dltensor_versioned"
    old = a.__dlpack__(max_version=(0, 8))
    assert capsule_name(old) == "dltensor"
    sw.set_memory_budget(2 * MiB, sim)
    fill_budget(sim, 3)
    assert not a.is_spilled       # three unconsumed capsules hold leases
    del legacy, versioned, old    # their destructors release them
    others = fill_budget(sim, 3)
    assert a.is_spilled
    sw.set_memory_budget(None, sim)
    del others


def test_copy_export(sim):
    a = sw.asarray(np.arange(6, dtype=np.int32), device=sim)
    c = np.from_dlpack(a, copy=True)
    c[0] = 100
    assert a[0] == 0               # a copy, not the memory
    sw.set_memory_budget(MiB, sim)
    fill_budget(sim, 2)
    assert a.is_spilled            # a copy holds no lease
    assert c.tolist() == [100, 1, 2, 3, 4, 5]
    sw.set_memory_budget(None, sim)
    cap = a.__dlpack__(copy=True, dl_device=(1, 0), max_version=(1, 0))
    assert capsule_name(cap) == "dltensor_versioned"


def test_export_errors(sim):
    a = sw.zeros(4, device=sim)
    with pytest.raises(BufferError, match="stream"):
        a.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="cannot export"):
        a.__dlpack__(dl_device=(2, 0))
    with pytest.raises(TypeError):
        a.__dlpack__(max_version="1.0")
    with pytest.raises(TypeError):
        a.__dlpack__(dl_device=3)
    with pytest.raises(TypeError):
        a.__dlpack__(bogus=1)


def test_export_of_a_spilled_array_restores_it(sim):
    a = sw.asarray(np.arange(N, dtype=np.float32), device=sim)
    sw.set_memory_budget(2 * MiB, sim)
    others = fill_budget(sim, 2)
    assert a.is_spilled
    n = np.from_dlpack(a)          # the lease brings it back, and holds it
    assert not a.is_spilled
    assert n[12345] == 12345.0 and n[-1] == N - 1
    more = fill_budget(sim, 2)
    assert not a.is_spilled
    sw.set_memory_budget(None, sim)
    del n, others, more
