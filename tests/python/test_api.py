"""The Python API of DESIGN.md: devices, arrays, views, operations."""

import array
import weakref

import numpy as np
import pytest

import spillway as sw

DTYPES = ["float32", "float64", "int32", "int64"]


def test_api_names():
    for name in ["devices", "Device", "empty", "zeros", "asarray", "Array",
                 "add", "scale", "axpy", "sum", "memory_info",
                 "reset_peak_memory", "memory_peak", "set_memory_budget",
                 "get_memory_budget", "empty_cache", "synchronize",
                 "memory_summary", "DeviceMemoryError"]:
        assert hasattr(sw, name), name
    assert issubclass(sw.DeviceMemoryError, MemoryError)
    assert issubclass(sw.DeviceError, RuntimeError)
    assert sw.__version__.count(".") == 2


def test_devices(sim, sim1):
    devs = sw.devices()
    names = [d.name for d in devs]
    assert "sim:0" in names and "sim:1" in names
    d = devs[names.index("sim:0")]
    assert d is sim
    assert sw.Device("sim:0") is sim
    assert sw.Device("sim") is sim
    assert sim == "sim:0" and sim != "sim:1" and sim != sim1
    assert str(sim) == "sim:0" and repr(sim) == "Device('sim:0')"
    assert "simulated" in sim.description and "64.00 MiB" in sim.description
    assert hash(sim) == hash("sim:0")
    assert not sim.closed


def test_default_device(dev):
    assert sw.Device() is dev
    assert sw.Device(None) is dev
    a = sw.empty(3)
    assert a.device is dev


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_zeros_shapes_dtypes(dev, dtype):
    a = sw.empty((2, 3, 4), dtype=dtype, device=dev)
    assert a.shape == (2, 3, 4) and a.ndim == 3 and a.size == 24
    assert a.dtype == np.dtype(dtype) and a.dtype == dtype
    assert a.itemsize == np.dtype(dtype).itemsize
    assert a.nbytes == 24 * a.itemsize
    assert a.device is dev and len(a) == 2
    z = sw.zeros(7, dtype=np.dtype(dtype), device=dev.name)
    assert z.shape == (7,)
    out = z.numpy()
    assert out.dtype == np.dtype(dtype) and not out.any()


def test_dtype_spellings(dev):
    assert sw.empty(1).dtype == np.float32  # the default
    assert sw.empty(1, dtype="f8").dtype == np.float64
    assert sw.empty(1, dtype=np.int32).dtype == np.int32
    assert sw.empty(1, dtype=float).dtype == np.float64
    assert sw.empty(1, dtype=np.dtype("i8")).dtype == np.int64
    assert sw.empty(1, dtype="<f4").dtype == np.float32


def test_shapes(dev):
    assert sw.empty(5).shape == (5,)
    assert sw.empty([2, 3]).shape == (2, 3)
    assert sw.empty(()).shape == () and sw.empty(()).size == 1
    assert sw.empty((0, 4)).nbytes == 0
    assert sw.empty(np.int64(3)).shape == (3,)
    assert sw.empty((np.int32(2), 2)).shape == (2, 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_asarray_roundtrip(dev, dtype):
    src = (np.arange(24) * 3 - 20).astype(dtype).reshape(4, 6)
    a = sw.asarray(src)
    assert a.shape == (4, 6) and a.dtype == src.dtype
    out = a.numpy()
    assert out.dtype == src.dtype and np.array_equal(out, src)
    assert np.array_equal(np.asarray(a), src)  # __array__
    assert np.asarray(a, dtype=np.float64).dtype == np.float64


def test_asarray_sources(dev, sim1):
    t = np.arange(12, dtype=np.float64).reshape(3, 4).T  # not contiguous
    assert np.array_equal(sw.asarray(t).numpy(), t)
    z = sw.asarray(np.float32(2.5))  # 0-d
    assert z.shape == () and z[()] == 2.5
    arr = sw.asarray(array.array("i", [1, 2, 3]))
    assert arr.dtype == np.int32 and arr.numpy().tolist() == [1, 2, 3]
    mv = sw.asarray(memoryview(np.arange(4, dtype=np.int64).tobytes()).cast("q"))
    assert mv.numpy().tolist() == [0, 1, 2, 3]
    lst = sw.asarray([[1.5, 2.5], [3.5, 4.5]])
    assert lst.dtype == np.float64 and lst.shape == (2, 2)
    a = sw.asarray(np.ones(3, np.float32), tag="from-numpy")
    assert a.tag == "from-numpy"
    assert sw.asarray(a) is a and sw.asarray(a, device=a.device) is a
    b = sw.asarray(a, device=sim1)
    assert b.device is sim1 and b is not a
    assert np.array_equal(b.numpy(), a.numpy())


def test_indexing(dev):
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = sw.asarray(src)
    assert a[1, 2] == 6.0 and isinstance(a[1, 2], float)
    assert a[-1, -1] == 11.0 and a[(-3, 0)] == 0.0
    row = a[2]  # a view of one row
    assert row.shape == (4,) and row.numpy().tolist() == [8, 9, 10, 11]
    assert row[-2] == 10.0
    part = a[1:3]
    assert part.shape == (2, 4) and part[0, 0] == 4.0
    assert a[5:].shape == (0, 4)
    i = sw.asarray(np.array([7, -8, 9], dtype=np.int64))
    assert i[1] == -8 and isinstance(i[1], int)
    a[0, 1] = 42
    assert a[0, 1] == 42.0 and a.numpy()[0, 1] == 42.0
    i[-1] = -5
    assert i.numpy().tolist() == [7, -8, -5]


def test_views_share_the_buffer(dev):
    a = sw.zeros(12, dtype="int64")
    r = a.reshape(3, 4)
    assert r.shape == (3, 4) and r.device is a.device
    r[2, 3] = 99
    assert a[11] == 99
    assert a.reshape((2, -1)).shape == (2, 6)
    assert a.reshape(-1).shape == (12,)
    assert a.reshape(2, 2, 3).shape == (2, 2, 3)
    row = r[1]
    row.fill(5)
    assert a.numpy().tolist() == [0] * 4 + [5] * 4 + [0] * 3 + [99]
    s = a[4:8]
    sw.scale(s, 2, out=s)
    assert a.numpy()[4:8].tolist() == [10] * 4
    assert sw.sum(r) == 40 + 99


def test_fill_and_tag(dev):
    a = sw.empty((2, 2), dtype="float64", tag="weights")
    a.fill(1.25)
    assert a.numpy().tolist() == [[1.25, 1.25], [1.25, 1.25]]
    assert a.tag == "weights"
    assert sw.empty(1).tag is None
    long = sw.empty(1, tag="x" * 100)
    assert long.tag == "x" * 47  # SW_TAG_MAX
    i = sw.empty(3, dtype="int32")
    i.fill(-7)
    assert i.numpy().tolist() == [-7, -7, -7]


@pytest.mark.parametrize("dtype", DTYPES)
def test_operations(dev, dtype):
    n = 1000
    x = np.arange(n).astype(dtype)
    y = (np.arange(n) % 7).astype(dtype)
    a, b = sw.asarray(x), sw.asarray(y)
    c = sw.add(a, b)
    assert np.array_equal(c.numpy(), x + y) and c.tag == "add"
    out = sw.empty(n, dtype=dtype)
    assert sw.add(a, b, out=out) is out
    assert np.array_equal(out.numpy(), x + y)
    s = sw.scale(a, 3)
    assert np.array_equal(s.numpy(), x * 3)
    r = sw.axpy(2, a, b)
    assert r is b
    assert np.array_equal(b.numpy(), 2 * x + y)
    total = sw.sum(a)
    assert total == x.sum(dtype=np.float64 if dtype.startswith("f") else np.int64)
    assert isinstance(total, float if dtype.startswith("f") else int)


def test_float_scale_and_sum(dev):
    x = np.linspace(-1, 1, 4097, dtype=np.float32)
    a = sw.asarray(x)
    assert np.allclose(sw.scale(a, 0.5).numpy(), x * np.float32(0.5))
    assert sw.sum(sw.empty(0)) == 0.0
    assert abs(sw.sum(a) - float(x.astype(np.float64).sum())) < 1e-3
    y = sw.zeros(4097)
    sw.axpy(-1.5, a, y)
    assert np.allclose(y.numpy(), -1.5 * x)


def test_integer_wrap(dev):
    a = sw.asarray(np.array([2**62, 2**62], dtype=np.int64))
    assert sw.add(a, a).numpy().tolist() == [-(2**63), -(2**63)]
    b = sw.asarray(np.array([2**31 - 1], dtype=np.int32))
    assert sw.add(b, b).numpy().tolist() == [-2]


def test_weakrefs(dev):
    a = sw.empty(4)
    wa = weakref.ref(a)
    wd = weakref.ref(dev)
    assert wa() is a and wd() is dev
    del a
    assert wa() is None
    assert wd() is dev


def test_repr(dev):
    a = sw.empty((2, 3), dtype="int32")
    assert repr(a) == f"spillway.Array(shape=(2, 3), dtype=int32, device='{dev.name}')"
    assert "MemoryInfo(in_use=" in repr(sw.memory_info())


def test_synchronize_and_empty_cache(dev):
    a = sw.zeros(1 << 16)
    sw.add(a, a, out=a)
    sw.synchronize()
    sw.synchronize(dev)
    sw.synchronize(dev.name)
    del a
    assert sw.memory_info(dev).cached > 0
    sw.empty_cache(dev)
    assert sw.memory_info(dev).cached == 0


def test_memory_summary(dev):
    a = sw.zeros(1 << 20, tag="summary")  # 4 MiB
    text = sw.memory_summary()
    assert dev.name in text
    for label in ["In use", "Peak", "Cached", "Spilled", "Budget",
                  "Allocations", "Spills", "Restores", "GC runs"]:
        assert label in text, label
    assert "4.00 MiB" in text
    assert sw.memory_summary(dev.name) == sw.memory_summary(dev)
    del a
