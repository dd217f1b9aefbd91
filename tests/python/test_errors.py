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


# -- bool keys: a mask to NumPy (advanced indexing), never row 0 or 1 --------

@pytest.mark.parametrize("key", [True, False, (1, True), (True, 0),
                                 (Ellipsis, False), (None, True),
                                 np.True_])
def test_bool_keys_are_refused(dev, key):
    m = sw.asarray(np.arange(6, dtype=np.float32).reshape(3, 2))
    v = sw.asarray(np.arange(4, dtype=np.float32))
    with pytest.raises(TypeError, match="bool|valid ind"):
        m[key]
    with pytest.raises(TypeError, match="bool|valid ind"):
        v[key]
    with pytest.raises(TypeError, match="bool|valid ind"):
        sw.zeros(())[key]
    with pytest.raises(TypeError, match="bool|valid ind"):
        v[key] = 7
    with pytest.raises(TypeError, match="bool|valid ind"):
        m[key] = 7
    assert v.numpy().tolist() == [0, 1, 2, 3]
    assert m.numpy().tolist() == [[0, 1], [2, 3], [4, 5]]
    assert m[1, 1] == 3.0 and v[1] == 1.0  # integers still index


# -- bool arrays have no arithmetic: TypeError whatever the scalar ------------

@pytest.mark.parametrize("s", [2, 0, 1, True, 0.5, -1])
def test_bool_arithmetic_is_a_type_error_whatever_the_scalar(dev, s):
    bo = sw.asarray(np.array([True, False, True]))
    allocs = sw.memory_info(dev).allocs
    for op in [lambda: bo * s, lambda: s * bo, lambda: sw.scale(bo, s),
               lambda: sw.scale(bo, s, out=bo), lambda: sw.axpy(s, bo, bo)]:
        with pytest.raises(TypeError, match="bool"):
            op()
    with pytest.raises(TypeError, match="bool"):
        b = bo
        b *= s
    for op in [lambda: -bo, lambda: bo - bo, lambda: bo + bo]:
        with pytest.raises(TypeError, match="bool"):
            op()
    assert sw.memory_info(dev).allocs == allocs
    assert bo.numpy().tolist() == [True, False, True]


# -- embedded NULs: the library takes C strings, which would end there --------

def _nul_calls(dev):
    a = sw.zeros(2, device=dev)
    spec = dev.name + "\x00x"
    return {
        "dtype": lambda: sw.empty(2, dtype="float32\x00x", device=dev),
        "dtype-zeros": lambda: sw.zeros(2, dtype="int32\x00", device=dev),
        "astype": lambda: a.astype("float64\x00junk"),
        "device": lambda: sw.empty(2, device=spec),
        "device-asarray": lambda: sw.asarray(np.ones(2), device=spec),
        "Device": lambda: sw.Device(spec),
        "Queue": lambda: sw.Queue(spec),
        "memory_info": lambda: sw.memory_info(spec),
        "tag-empty": lambda: sw.empty(2, device=dev, tag="a\x00b"),
        "tag-full": lambda: sw.full(2, 1.0, device=dev, tag="\x00"),
        "tag-asarray": lambda: sw.asarray(np.ones(2), device=dev,
                                          tag="a\x00b"),
        "tag-from_dlpack": lambda: sw.from_dlpack(np.ones(2), device=dev,
                                                  tag="a\x00b"),
        "budget": lambda: sw.set_memory_budget("512M\x00junk", dev),
        "budget-tail": lambda: sw.set_memory_budget("16K\x00", dev),
        "host_pool": lambda: sw.set_host_pool_limit("1M\x00x", dev),
        "history-path": lambda: sw.dump_memory_history("x\x00y.json", dev),
        "history-device": lambda: sw.dump_memory_history("x.json", spec),
        "unpickle-dtype": lambda: sw._spillway._rebuild_array(
            1, "float32\x00", (2,), dev.name, None, bytes(8)),
        "unpickle-device": lambda: sw._spillway._rebuild_array(
            1, "float32", (2,), spec, None, bytes(8)),
        "unpickle-tag": lambda: sw._spillway._rebuild_array(
            1, "float32", (2,), dev.name, "a\x00b", bytes(8)),
        "testing-op": lambda: _testing.inject_fault(dev, "alloc\x00x", 1),
    }


NUL_CALLS = ["dtype", "dtype-zeros", "astype", "device", "device-asarray",
             "Device", "Queue", "memory_info", "tag-empty", "tag-full",
             "tag-asarray", "tag-from_dlpack", "budget", "budget-tail",
             "host_pool", "history-path", "history-device",
             "unpickle-dtype", "unpickle-device", "unpickle-tag",
             "testing-op"]


def test_every_nul_call_is_tested(dev):
    assert sorted(_nul_calls(dev)) == sorted(NUL_CALLS)


@pytest.mark.parametrize("what", NUL_CALLS)
def test_embedded_nul_is_a_value_error(dev, what):
    """"512M\\0junk" was 512 MiB, "float32\\0x" float32, "sim:0\\0x"
    sim:0 and the tag "a\\0b" "a": each is ValueError, and changes
    nothing."""
    call = _nul_calls(dev)[what]
    sw.set_memory_budget(1 << 20, dev)
    limit = sw.memory_stats(dev)["host_pool_limit"]
    allocs = sw.memory_info(dev).allocs
    try:
        with pytest.raises(ValueError, match="NUL|null"):
            call()
        assert sw.memory_info(dev).allocs == allocs
        assert sw.get_memory_budget(dev) == 1 << 20
        assert sw.memory_stats(dev)["host_pool_limit"] == limit
    finally:
        sw.set_memory_budget(None, dev)


# -- size strings: bytes exactly, or refused ----------------------------------

SIZES = {"4096": 4096, "512K": 512 << 10, "512 KiB": 512 << 10,
         "1.5G": 3 << 29, "1.5 GiB": 3 << 29, "0.5K": 512, "0.25k": 256,
         " 64mb ": 64 << 20, "2.0M": 2 << 20, "3.000": 3, "4096B": 4096,
         "0.0009765625M": 1024,
         # 2**-20 M: a fraction longer than the library keeps
         "0.00000095367431640625M": 1,
         "16383.9990234375K": (16 << 20) - 1}
NOT_SIZES = ["0.5", "1.5", "1.5B", "0.3K", "1.3K", "0.05K", "2.5 bytes",
             "-1", "+1", "", " ", "1e3", "0x10", ".5K", "1.", "nan", "inf",
             "99999999999999999999G", "18446744073709551616",
             "16777216T", "1.5 X", "512M of it", "٥"]


@pytest.mark.parametrize("text", sorted(SIZES))
def test_size_strings_are_bytes(dev, text):
    limit = sw.memory_stats(dev)["host_pool_limit"]
    try:
        sw.set_memory_budget(text, dev)
        assert sw.get_memory_budget(dev) == SIZES[text]
        sw.set_host_pool_limit(text, dev)
        assert sw.memory_stats(dev)["host_pool_limit"] == SIZES[text]
    finally:
        sw.set_memory_budget(None, dev)
        sw.set_host_pool_limit(limit, dev)


@pytest.mark.parametrize("text", NOT_SIZES)
def test_strings_that_are_not_whole_bytes_are_refused(dev, text):
    """"0.5" was no budget at all (0 bytes) and "1.5" one byte, while the
    float 0.5 is half the device: a string is bytes exactly, or refused,
    and the settings stay as they were."""
    sw.set_memory_budget(1 << 20, dev)
    limit = sw.memory_stats(dev)["host_pool_limit"]
    try:
        with pytest.raises(ValueError):
            sw.set_memory_budget(text, dev)
        assert sw.get_memory_budget(dev) == 1 << 20
        with pytest.raises(ValueError):
            sw.set_host_pool_limit(text, dev)
        assert sw.memory_stats(dev)["host_pool_limit"] == limit
    finally:
        sw.set_memory_budget(None, dev)


@pytest.mark.parametrize("value", [np.float32(0.5), np.float16(1.0), 0.5,
                                   None, True, 2j])
def test_host_pool_limit_takes_bytes_only(dev, value):
    """A NumPy float is no Python float: it read as a fraction of the
    device (np.float32(0.5): half the device's memory as a host bound)."""
    limit = sw.memory_stats(dev)["host_pool_limit"]
    with pytest.raises(TypeError):
        sw.set_host_pool_limit(value, dev)
    assert sw.memory_stats(dev)["host_pool_limit"] == limit
