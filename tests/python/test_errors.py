"""Bad input: each a clear Python exception, never a crash."""

import numpy as np
import pytest

import spillway as sw
from spillway import _testing


@pytest.mark.parametrize("shape", [-1, (2, -3), (-1,), [4, -4]])
def test_negative_shapes(dev, shape):
    with pytest.raises(ValueError, match="negative"):
        sw.empty(shape)


@pytest.mark.parametrize("shape", [2**63, 2**70, (2**40, 2**40),
                                   (2**31, 2**31, 2**31), (2**62, 2)])
def test_overflowing_shapes(dev, shape):
    with pytest.raises(ValueError, match="too (large|big)"):
        sw.empty(shape)


def test_too_many_dimensions(dev):
    with pytest.raises(ValueError, match="at most 32"):
        sw.empty((1,) * 33)


@pytest.mark.parametrize("shape", [3.0, "abc", (2, 2.5), None, object()])
def test_shapes_of_wrong_type(dev, shape):
    with pytest.raises(TypeError):
        sw.empty(shape)


def test_larger_than_the_device(sim):
    with pytest.raises(sw.DeviceMemoryError) as e:
        sw.empty(1 << 40, dtype="int64", device=sim)  # 8 TiB
    assert "sim:0" in str(e.value)
    assert isinstance(e.value, MemoryError)
    with pytest.raises(sw.DeviceMemoryError):
        sw.empty(65 << 18, device=sim)  # 65 MiB on 64


@pytest.mark.parametrize("dtype", ["nope", "float128", np.longdouble,
                                   "datetime64[s]", "U3", "V8",
                                   np.dtype(">f4"), np.dtype(">i8"),
                                   np.dtype(">c16"), object, 3])
def test_unknown_dtypes(dev, dtype):
    before = sw.memory_info(dev).allocs
    with pytest.raises(TypeError, match="dtype"):
        sw.empty(3, dtype=dtype)
    assert sw.memory_info(dev).allocs == before


def test_non_native_dtypes_say_so(dev):
    with pytest.raises(TypeError, match="non-native"):
        sw.empty(3, dtype=">f8")
    with pytest.raises(TypeError, match="non-native"):
        sw.zeros(3, dtype=np.dtype("i2").newbyteorder())


def test_asarray_unsupported_data(dev):
    with pytest.raises(TypeError, match="element type|dtype"):
        sw.asarray(np.array(["a", "b"]))
    with pytest.raises(TypeError, match="non-native"):
        sw.asarray(np.arange(3, dtype=">i4"))
    with pytest.raises(TypeError, match="non-native"):
        sw.asarray(np.arange(3, dtype=">u2"))
    with pytest.raises(TypeError):
        sw.asarray(np.arange(3, dtype=np.longdouble))
    with pytest.raises(TypeError):
        sw.asarray(np.arange(3).astype("datetime64[s]"))
    with pytest.raises(TypeError):
        sw.asarray(object())


def test_wrong_devices(dev, sim, sim1):
    with pytest.raises(ValueError, match="no backend named 'nope'"):
        sw.empty(3, device="nope:0")
    with pytest.raises(ValueError, match="sim:9"):
        sw.empty(3, device="sim:9")
    with pytest.raises(ValueError, match="malformed"):
        sw.empty(3, device="sim:x")
    with pytest.raises(TypeError, match="device must be"):
        sw.empty(3, device=0)
    with pytest.raises(TypeError):
        sw.memory_info(device=3.5)
    with pytest.raises(TypeError):
        sw.Device(0)
    a = sw.zeros(4, device=sim)
    b = sw.zeros(4, device=sim1)
    with pytest.raises(ValueError, match="same device"):
        sw.add(a, b)
    with pytest.raises(ValueError, match="same device"):
        sw.axpy(1.0, a, b)
    with pytest.raises(ValueError, match="same device"):
        sw.add(a, a, out=b)


def test_mismatched_operands(dev):
    a = sw.zeros((2, 3))
    with pytest.raises(ValueError, match=r"shapes \(2, 3\).*\(3, 2\)"):
        sw.add(a, sw.zeros((3, 2)))
    with pytest.raises(ValueError, match="do not match"):
        sw.add(a, sw.zeros(6))
    with pytest.raises(TypeError, match="same dtype"):
        sw.add(a, sw.zeros((2, 3), dtype="float64"))
    with pytest.raises(ValueError, match="do not match"):
        sw.add(a, a, out=sw.zeros(5))
    with pytest.raises(TypeError, match="same dtype"):
        sw.scale(a, 2.0, out=sw.zeros((2, 3), dtype="int32"))
    with pytest.raises(TypeError, match="spillway.Array"):
        sw.add(a, np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="spillway.Array"):
        sw.sum([1, 2, 3])
    with pytest.raises(TypeError, match="missing required argument 'b'"):
        sw.add(a)
    with pytest.raises(TypeError, match="unexpected keyword"):
        sw.add(a, a, bogus=1)
    with pytest.raises(TypeError, match="multiple values"):
        sw.add(a, a, a=a)


def test_bad_scalars(dev):
    f = sw.zeros(3)
    i = sw.zeros(3, dtype="int32")
    with pytest.raises(TypeError, match="real number"):
        f.fill("x")
    with pytest.raises(TypeError, match="integer"):
        i.fill(1.5)
    with pytest.raises(OverflowError, match="out of range for int32"):
        i.fill(2**40)
    with pytest.raises(OverflowError):
        sw.zeros(1, dtype="int64").fill(2**70)
    with pytest.raises(TypeError, match="integer"):
        sw.scale(i, 0.5)
    with pytest.raises(TypeError, match="real number"):
        sw.axpy(None, f, f)
    with pytest.raises(TypeError):
        f[0] = "x"


def test_indexing_errors(dev):
    a = sw.zeros(10)
    with pytest.raises(IndexError, match="out of bounds"):
        a[10]
    with pytest.raises(IndexError, match="out of bounds"):
        a[-11]
    assert a[-10] == 0.0
    with pytest.raises(IndexError, match="out of bounds"):
        a[10] = 1.0
    with pytest.raises(IndexError, match="too many indices"):
        a[1, 2]
    with pytest.raises(TypeError):
        a["x"]
    with pytest.raises(TypeError, match="not contiguous.*step"):
        a[::2]
    with pytest.raises(TypeError):
        a[1.0]
    with pytest.raises(TypeError, match="deleted"):
        del a[0]
    m = sw.zeros((2, 2))
    with pytest.raises(TypeError, match="single elements"):
        m[0] = 1.0
    with pytest.raises(IndexError):
        m[0, 2]
    with pytest.raises(IndexError, match="out of bounds"):
        m[5]
    z = sw.zeros(())
    with pytest.raises(IndexError):
        z[0]
    with pytest.raises(TypeError):
        len(z)


def test_reshape_errors(dev):
    a = sw.zeros(6)
    with pytest.raises(ValueError, match="cannot reshape"):
        a.reshape(7)
    with pytest.raises(ValueError):
        a.reshape(-1, -1)
    with pytest.raises(ValueError):
        a.reshape(4, -1)
    with pytest.raises(ValueError, match="negative"):
        a.reshape(-2, -3)
    with pytest.raises(TypeError):
        a.reshape(2.0, 3)


def test_budget_errors(dev):
    with pytest.raises(ValueError, match="negative"):
        sw.set_memory_budget(-1)
    with pytest.raises(ValueError, match="1MB"):
        sw.set_memory_budget("1MB of it")
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        sw.set_memory_budget(1.5)
    with pytest.raises(TypeError):
        sw.set_memory_budget(b"1M")
    with pytest.raises(ValueError, match="too large"):
        sw.set_memory_budget(2**64)
    with pytest.raises(TypeError):
        sw.set_memory_budget()
    assert sw.get_memory_budget() is None


def test_array_cannot_be_instantiated():
    with pytest.raises(TypeError):
        sw.Array()


def test_array_after_its_device_is_closed(sim1):
    a = sw.zeros(4, device=sim1, tag="orphan")
    v = a.reshape(2, 2)
    allocs = sw.memory_info(sim1).allocs
    sim1.close()
    assert sim1.closed and "closed" in repr(sim1)
    assert "device closed" in repr(a)
    for use in [lambda: a.numpy(), lambda: a[0], lambda: a.fill(1.0),
                lambda: a.is_spilled, lambda: a.tag, lambda: a.reshape(4),
                lambda: sw.add(a, a), lambda: sw.sum(v),
                lambda: sw.asarray(a), lambda: a.__dlpack__(),
                lambda: sw.memory_info(sim1),
                lambda: sw.empty(3, device=sim1)]:
        with pytest.raises(ValueError, match="closed"):
            use()
    assert a.shape == (4,) and a.device is sim1  # metadata still reads
    # The spec opens the device again, as a new Device: while the old
    # arrays live the device is still open underneath, with their memory.
    again = sw.Device("sim:1")
    assert again is not sim1 and not again.closed and again == sim1
    assert sw.memory_info(again).allocs == allocs
    again.close()  # no arrays on it: closes its reference now
    del a, v
    # Once the old arrays are gone the last reference goes too: a fresh
    # open starts from zero.
    fresh = sw.Device("sim:1")
    assert fresh is not again
    assert sw.memory_info(fresh).allocs == 0
    sim1.close()  # closing twice is harmless


def test_device_failure_is_an_exception(sim):
    """A device whose copies fail (a lost device): clear errors, and the
    data survives once it works again."""
    a = sw.asarray(np.arange(8, dtype=np.float32), device=sim)
    sw.synchronize(sim)
    _testing.inject_fault(sim, "copy", 1, persistent=True)
    try:
        with pytest.raises(sw.DeviceError):
            a.numpy()
        with pytest.raises(sw.DeviceError):
            a[3]
        with pytest.raises(sw.DeviceError):
            sw.asarray(np.ones(4, np.float32), device=sim)
    finally:
        _testing.inject_fault(sim, "copy", 0)
    assert a.numpy().tolist() == list(range(8))
    with pytest.raises(ValueError):
        _testing.inject_fault(sim, "launch", 1)


def test_injected_allocation_failure(sim):
    _testing.inject_fault(sim, "alloc", 1, persistent=True)
    try:
        with pytest.raises(sw.DeviceMemoryError, match="sim:0"):
            sw.empty(1 << 20, device=sim)
    finally:
        _testing.inject_fault(sim, "alloc", 0)
    sw.empty(1 << 20, device=sim)
