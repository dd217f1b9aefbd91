"""Every element type, and every operation on each, checked against NumPy.

Storage, host reads and writes, copies, fills and DLPack work for every
dtype on every device.  Kernels (add, scale, axpy, sum, and the operators
built on them) run for the dtypes the device declares (Device.dtypes; bool
has fill, copy and sum only): those are checked against NumPy, the others
must be a clean TypeError naming the device and the dtype, with nothing
allocated.  So this file covers new kernels as soon as a backend declares
them.  bfloat16 has no NumPy type: its reference is float32 on values that
bfloat16 holds exactly.
"""

import array

import numpy as np
import pytest

import spillway as sw

ALL = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
       "uint32", "uint64", "float16", "bfloat16", "float32", "float64",
       "complex64", "complex128"]
NUMPY = [d for d in ALL if d != "bfloat16"]
ARITH = {"add", "sub", "scale", "axpy", "neg", "iadd", "isub", "imul"}
OPS = sorted(ARITH | {"sum"})


def kernel_runs(dev, dt, op):
    return dev.supports(dt) and not (dt == "bool" and op in ARITH)


def sample(dt, n=12, shift=0):
    """Reference values of dt that every type holds exactly."""
    i = np.arange(n) + shift
    if dt == "bool":
        return i % 3 == 0
    if dt == "bfloat16":
        return ((i - 5) * 0.5).astype(np.float32)
    kind = np.dtype(dt).kind
    if kind == "u":
        return (i * 7 % 200).astype(dt)
    if kind == "i":
        return (i * 7 % 100 - 50).astype(dt)
    if kind == "c":
        return ((i - 5) + 1j * (i % 4)).astype(dt)
    return ((i - 5) * 0.5).astype(dt)


def ref_dtype(dt):
    """The NumPy dtype results are compared in."""
    return np.float32 if dt == "bfloat16" else np.dtype(dt)


def host(a):
    """An Array's values as NumPy (bfloat16 widened to float32)."""
    if str(a.dtype) == "bfloat16":
        return a.astype("float32").numpy()
    return a.numpy()


def bf16(x):
    """float32 values rounded to bfloat16 (nearest even), as float32."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def close(got, want, dt):
    if dt in ("float16", "bfloat16"):
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
    elif np.dtype(ref_dtype(dt)).kind in "fc":
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    else:
        assert np.array_equal(got, want), (got, want)


def scalar_for(dt):
    kind = np.dtype(ref_dtype(dt)).kind
    return {"b": True, "u": 3, "i": -3, "f": 2.5, "c": 1 - 2j}[kind]


# ---------------------------------------------------------------------------
# Creation, elements, NumPy, buffers


def test_the_library_knows_every_dtype(dev):
    assert set(dev.dtypes) <= set(ALL)
    assert {"float32", "float64", "int32", "int64"} <= set(dev.dtypes) or \
        dev.name.startswith("opencl")  # an OpenCL device may lack fp64
    for dt in ALL:
        assert dev.supports(dt) == (dt in dev.dtypes)
    with pytest.raises(TypeError, match="dtype"):
        dev.supports("float128")


@pytest.mark.parametrize("dt", ALL)
def test_creation(dev, dt):
    e = sw.empty((2, 3), dtype=dt, device=dev)
    assert e.shape == (2, 3) and str(e.dtype) == dt
    assert e.itemsize == (2 if dt == "bfloat16" else np.dtype(dt).itemsize)
    assert e.nbytes == 6 * e.itemsize
    z = sw.zeros(5, dtype=dt, device=dev)
    assert np.array_equal(host(z), np.zeros(5, ref_dtype(dt)))
    o = sw.ones((2, 2), dtype=dt, device=dev)
    assert np.array_equal(host(o), np.ones((2, 2), ref_dtype(dt)))
    v = scalar_for(dt)
    f = sw.full(7, v, dtype=dt, device=dev)
    assert np.array_equal(host(f), np.full(7, v, ref_dtype(dt)))
    assert host(sw.zeros(0, dtype=dt, device=dev)).shape == (0,)
    assert sw.ones((), dtype=dt, device=dev)[()] == 1


def test_full_infers_its_dtype(dev):
    assert sw.full(2, True).dtype == np.bool_
    assert sw.full(2, 7).dtype == np.int64
    assert sw.full(2, 0.5).dtype == np.float32
    assert sw.full(2, 1j).dtype == np.complex64
    assert sw.full(2, np.float16(1.5)).dtype == np.float16
    assert sw.full(2, np.uint8(3)).numpy().tolist() == [3, 3]


@pytest.mark.parametrize("dt", ALL)
def test_element_reads_and_writes(dev, dt):
    a = sw.zeros(4, dtype=dt, device=dev)
    kind = np.dtype(ref_dtype(dt)).kind
    if dt == "bool":
        a[1] = True
        assert a[1] is True and a[0] is False
    elif kind in "ui":
        hi = np.iinfo(dt).max
        a[1] = hi
        a[2] = np.iinfo(dt).min
        assert a[1] == hi and type(a[1]) is int
        assert a[2] == np.iinfo(dt).min
    elif kind == "c":
        a[1] = 1.5 - 2.25j
        assert a[1] == 1.5 - 2.25j and type(a[1]) is complex
        a[2] = 3  # a real number is a complex one
        assert a[2] == 3 + 0j
    else:
        a[1] = 3.3
        want = (float(bf16(np.float32(3.3))[()]) if dt == "bfloat16"
                else float(np.dtype(dt).type(3.3)))
        assert a[1] == want and type(a[1]) is float
        a[2] = float("inf")
        assert a[2] == float("inf")
        a[3] = 1e6  # past float16's range: infinity, as NumPy rounds it
        if dt == "float16":
            assert a[3] == float("inf")


@pytest.mark.parametrize("dt", ALL)
def test_bad_element_values(dev, dt):
    a = sw.zeros(2, dtype=dt, device=dev)
    kind = np.dtype(ref_dtype(dt)).kind
    before = host(a)
    if dt == "bool":
        with pytest.raises(ValueError, match="truth value"):
            a[0] = 2
        with pytest.raises(TypeError, match="bool"):
            a[0] = 1.0
    elif kind in "ui":
        with pytest.raises(OverflowError, match=f"out of range for {dt}"):
            a[0] = int(np.iinfo(dt).max) + 1
        with pytest.raises(OverflowError, match=f"out of range for {dt}"):
            a[0] = int(np.iinfo(dt).min) - 1
        with pytest.raises(TypeError, match="integer"):
            a[0] = 1.5
    elif kind == "f":
        with pytest.raises(TypeError, match="real number"):
            a[0] = 1j
    with pytest.raises(TypeError):
        a[0] = "x"
    assert np.array_equal(host(a), before)


@pytest.mark.parametrize("dt", NUMPY)
def test_numpy_round_trip(dev, dt):
    x = sample(dt).reshape(3, 4)
    a = sw.asarray(x, device=dev)
    assert a.dtype == x.dtype and a.shape == (3, 4)
    out = a.numpy()
    assert out.dtype == x.dtype and np.array_equal(out, x)
    assert np.array_equal(np.asarray(a), x)
    t = sw.asarray(x.T, device=dev)  # strided source
    assert np.array_equal(t.numpy(), x.T)


@pytest.mark.parametrize("code,dt", [("b", "int8"), ("B", "uint8"),
                                     ("h", "int16"), ("H", "uint16"),
                                     ("i", "int32"), ("I", "uint32"),
                                     ("q", "int64"), ("Q", "uint64"),
                                     ("f", "float32"), ("d", "float64")])
def test_buffer_protocol_import(dev, code, dt):
    src = array.array(code, [1, 2, 3])
    a = sw.asarray(src, device=dev)
    assert a.dtype == np.dtype(dt) and a.numpy().tolist() == [1, 2, 3]


def test_buffer_protocol_odd_formats(dev):
    assert sw.asarray(b"\x01\x02").numpy().tolist() == [1, 2]  # uint8
    half = memoryview(np.arange(3, dtype=np.float16))
    assert half.format == "e" and sw.asarray(half).dtype == np.float16
    c = np.arange(3, dtype=np.complex64)
    assert sw.asarray(memoryview(c)).numpy().tolist() == c.tolist()
    flags = memoryview(np.array([True, False])).cast("B").cast("?")
    assert sw.asarray(flags).numpy().tolist() == [True, False]


@pytest.mark.parametrize("dt", ALL)
def test_asarray_with_dtype(dev, dt):
    a = sw.asarray([[1, 0], [2, 3]], dtype=dt, device=dev)
    assert str(a.dtype) == dt and a.shape == (2, 2)
    assert np.array_equal(host(a),
                          np.array([[1, 0], [2, 3]]).astype(ref_dtype(dt)))
    s = sw.asarray(3.0)
    assert s.shape == () and s.dtype == np.float64 and s[()] == 3.0


def test_bfloat16_and_numpy(dev):
    a = sw.asarray([1.0, 2.5, -3.0], dtype="bfloat16", device=dev)
    assert str(a.dtype) == "bfloat16" and a.itemsize == 2
    assert a[1] == 2.5 and a.astype("float32").numpy().tolist() == \
        [1.0, 2.5, -3.0]
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        with pytest.raises(TypeError, match=r"astype\('float32'\)"):
            a.numpy()
        with pytest.raises(TypeError, match="bfloat16"):
            np.asarray(a)
    else:
        n = a.numpy()
        assert str(n.dtype) == "bfloat16"
        assert sw.asarray(n).astype("float32").numpy().tolist() == \
            [1.0, 2.5, -3.0]
    # rounding to nearest even, once, from the double
    b = sw.asarray([1.00390625, 1.01171875, 3.3], dtype="bfloat16")
    assert b.astype("float32").numpy().tolist() == \
        bf16([1.00390625, 1.01171875, 3.3]).tolist()


# ---------------------------------------------------------------------------
# DLPack, per dtype


def numpy_from_dlpack(a):
    if a.__dlpack_device__()[0] == 1:  # kDLCPU: the memory itself
        return np.from_dlpack(a)
    return np.from_dlpack(a, device="cpu")  # a host copy


@pytest.mark.parametrize("dt", NUMPY)
def test_dlpack_round_trip_with_numpy(dev, dt):
    x = sample(dt).reshape(4, 3)
    a = sw.asarray(x, device=dev)
    n = numpy_from_dlpack(a)
    assert n.dtype == x.dtype and np.array_equal(n, x)
    b = sw.from_dlpack(x, device=dev)
    assert b.dtype == x.dtype and np.array_equal(b.numpy(), x)
    c = sw.from_dlpack(n, device=dev)
    assert np.array_equal(c.numpy(), x)
    del n, c


def test_bfloat16_travels_through_dlpack(dev):
    a = sw.asarray([1.5, -2.0], dtype="bfloat16", device=dev)
    cap = a.__dlpack__(max_version=(1, 0))
    b = sw.from_dlpack(cap)
    assert str(b.dtype) == "bfloat16" and b[0] == 1.5 and b[1] == -2.0
    del cap, b


def test_bfloat16_with_torch(dev):
    torch = pytest.importorskip("torch")
    t = torch.tensor([1.5, -2.0, 3.0], dtype=torch.bfloat16)
    a = sw.asarray(t, device=dev)
    assert str(a.dtype) == "bfloat16"
    assert a.astype("float32").numpy().tolist() == [1.5, -2.0, 3.0]
    if a.__dlpack_device__()[0] == 1:
        back = torch.from_dlpack(a)
        assert back.dtype == torch.bfloat16 and back.tolist() == \
            [1.5, -2.0, 3.0]
        del back
    assert sw.empty(2, dtype=torch.bfloat16).dtype is not None


# ---------------------------------------------------------------------------
# Kernels and operators, per dtype


def reference(op, dt, x, y, s):
    """NumPy's answer (x, y of ref_dtype(dt))."""
    if dt == "bool":
        return {"sum": int(np.count_nonzero(x))}[op]
    if op == "sum":
        if np.dtype(ref_dtype(dt)).kind == "f":
            return float(np.sum(x.astype(np.float64)))
        return np.sum(x).item()
    with np.errstate(over="ignore"):
        sv = np.array(s, ref_dtype(dt))
        r = {"add": lambda: x + y, "iadd": lambda: x + y,
             "sub": lambda: x - y, "isub": lambda: x - y,
             "scale": lambda: x * sv, "imul": lambda: x * sv,
             "axpy": lambda: sv * x + y, "neg": lambda: -x}[op]()
    return bf16(r) if dt == "bfloat16" else r


def run(op, a, b, s):
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "scale":
        return a * s
    if op == "neg":
        return -a
    if op == "axpy":
        return sw.axpy(s, a, b)
    if op == "sum":
        return a.sum()
    if op == "iadd":
        a += b
    elif op == "isub":
        a -= b
    elif op == "imul":
        a *= s
    return a


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dt", ALL)
def test_kernels(dev, dt, op):
    x, y = sample(dt), sample(dt, shift=5)
    a = sw.asarray(x, dtype=dt, device=dev)
    b = sw.asarray(y, dtype=dt, device=dev)
    s = scalar_for(dt)
    if not kernel_runs(dev, dt, op):
        before = sw.memory_info(dev).allocs
        msg = ("not defined for bool" if dt == "bool" and op in ARITH
               else f"{dev.name} cannot compute with {dt}")
        with pytest.raises(TypeError, match=msg):
            run(op, a, b, s)
        assert sw.memory_info(dev).allocs == before  # refused up front
        assert np.array_equal(host(a), x.astype(ref_dtype(dt)))
        assert np.array_equal(host(b), y.astype(ref_dtype(dt)))
        return
    got = run(op, a, b, s)
    want = reference(op, dt, x.astype(ref_dtype(dt)),
                     y.astype(ref_dtype(dt)), s)
    if op == "sum":
        assert type(got) is type(want) or dt in ("float16", "bfloat16")
        close(np.asarray(got), np.asarray(want), dt)
    else:
        close(host(got), want, dt)
    if op in ("iadd", "isub", "imul", "axpy"):
        assert (got is a) if op != "axpy" else (got is b)


@pytest.mark.parametrize("dt", ALL)
def test_fill_and_copy_run_for_every_dtype(dev, dt):
    a = sw.asarray(sample(dt), dtype=dt, device=dev)
    c = a.copy()
    assert c is not a and str(c.dtype) == dt
    assert np.array_equal(host(c), host(a))
    v = scalar_for(dt)
    a.fill(v)
    assert np.array_equal(host(a), np.full(12, v, ref_dtype(dt)))
    assert np.array_equal(host(c), sample(dt).astype(ref_dtype(dt)))


def test_complex128_fill_without_a_pattern(dev):
    a = sw.zeros(5, dtype="complex128", device=dev)
    a.fill(1.5 - 0.25j)  # halves differ: no 8-byte pattern makes it
    assert a.numpy().tolist() == [1.5 - 0.25j] * 5
    a.fill(2 + 2j)
    assert a.numpy().tolist() == [2 + 2j] * 5


@pytest.mark.parametrize("src", ALL)
def test_astype(dev, src):
    x = sample(src)
    a = sw.asarray(x, dtype=src, device=dev)
    for dst in ["bool", "int16", "uint8", "float16", "bfloat16", "float64",
                "complex64"]:
        if np.dtype(ref_dtype(src)).kind == "c" and dst in ("bool",):
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = a.astype(dst)
                want = x.astype(ref_dtype(src)).astype(ref_dtype(dst))
        if dst == "bfloat16":
            want = bf16(x.astype(ref_dtype(src)).real.astype(np.float32)
                        if np.iscomplexobj(x) else
                        x.astype(ref_dtype(src)).astype(np.float32))
        assert str(got.dtype) == dst and got.device is dev
        assert np.array_equal(host(got), want), (src, dst)
    assert a.astype(src, copy=False) is a
    assert a.astype(src) is not a
