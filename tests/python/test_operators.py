"""Operators and methods on the built-in kernels, indexing, iteration, .T,
and what stays unsupported (with a clear TypeError)."""

import numpy as np
import pytest

import spillway as sw


def f32(*shape, start=0):
    n = int(np.prod(shape)) if shape else 1
    return np.arange(start, start + n, dtype=np.float32).reshape(shape)


def test_arithmetic(dev):
    x, y = f32(2, 3), f32(2, 3, start=10)
    a, b = sw.asarray(x, device=dev), sw.asarray(y, device=dev)
    assert np.array_equal((a + b).numpy(), x + y)
    assert np.array_equal((a - b).numpy(), x - y)
    assert np.array_equal((b - a).numpy(), y - x)
    assert np.array_equal((a - a).numpy(), np.zeros((2, 3), np.float32))
    assert np.array_equal((a * 2.5).numpy(), x * 2.5)
    assert np.array_equal((0.5 * a).numpy(), x * 0.5)
    assert np.array_equal((a * np.float32(3)).numpy(), x * 3)
    assert np.array_equal((-a).numpy(), -x)
    assert (a + b).tag == "add" and (-a).tag == "neg"
    assert a.numpy().tolist() == x.tolist()  # operands untouched
    i = sw.asarray(np.array([5, -7, 2**31 - 1], np.int32), device=dev)
    assert (i - i).numpy().tolist() == [0, 0, 0]
    assert (i + i).numpy().tolist() == [10, -14, -2]  # wraps
    assert (-i).numpy().tolist() == [-5, 7, -(2**31 - 1)]


def test_subtraction_rounds_once(dev):
    """a - b is a copy of a, then axpy(-1, b, .): (-1) * b is exact, so
    the result is a - b rounded once, as NumPy's."""
    rng = np.random.default_rng(12)
    for dt in ("float32", "float64"):
        if not dev.supports(dt):
            continue
        x = rng.standard_normal(1000).astype(dt) * 1e3
        y = rng.standard_normal(1000).astype(dt)
        got = (sw.asarray(x, device=dev) - sw.asarray(y, device=dev)).numpy()
        assert np.array_equal(got, x - y)


SPECIAL = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1.5, -2.25, 3e38]


def special_values(dt, shift=0):
    """Every pair of SPECIAL as the parts of a complex array (built part
    by part: 1j * inf is nan + inf j), or SPECIAL itself for a real one."""
    n = len(SPECIAL)
    if np.dtype(dt).kind != "c":
        return np.roll(np.array(SPECIAL * n, dt), shift)
    out = np.empty(n * n, dt)
    out.real = np.repeat(SPECIAL, n)
    out.imag = np.tile(SPECIAL, n)
    return np.roll(out, shift)


def same_bits(got, want):
    """Equal to the bit, signs of zero included; a NaN matches any NaN
    (scaling by -1 keeps a NaN's sign, NumPy's negative flips it)."""
    parts = [np.ascontiguousarray(x).reshape(-1) for x in (got, want)]
    g, w = [x.view(x.real.dtype) if x.dtype.kind == "c" else x
            for x in parts]
    nan = np.isnan(w)
    return (g.shape == w.shape and np.array_equal(np.isnan(g), nan) and
            g[~nan].tobytes() == w[~nan].tobytes())


@pytest.mark.parametrize("dt", ["complex64", "complex128", "float32",
                                "float64"])
def test_negation_and_subtraction_are_exact(dev, dt):
    """-b, a - b and a -= b are NumPy's negative and subtract, part by part,
    to the bit: -(inf + 0j) is -inf - 0j, not the product by -1 + 0j
    (-inf + nan j), and -(0 + 0j) is -0 - 0j."""
    if not dev.supports(dt):
        pytest.skip(f"{dev.name} does not compute with {dt}")
    x, y = special_values(dt, 5), special_values(dt)
    a, b = sw.asarray(x, device=dev), sw.asarray(y, device=dev)
    with np.errstate(all="ignore"):
        neg, sub, rsub = -y, x - y, y - x
    assert same_bits((-b).numpy(), neg), ((-b).numpy(), neg)
    assert same_bits((a - b).numpy(), sub)
    assert same_bits((b - a).numpy(), rsub)
    keep = a
    a -= b
    assert a is keep and same_bits(a.numpy(), sub)
    assert same_bits(b.numpy(), y)  # the operand is untouched
    # Through views, and of one array with itself.
    m = sw.asarray(np.stack([x, y]), device=dev)
    assert same_bits((-m[1]).numpy(), neg)
    with np.errstate(all="ignore"):
        assert same_bits((b - b).numpy(), y - y)


def test_in_place(dev):
    x, y = f32(4), f32(4, start=1)
    a, b = sw.asarray(x, device=dev), sw.asarray(y, device=dev)
    keep = a
    a += b
    assert a is keep and a.numpy().tolist() == (x + y).tolist()
    a -= b
    assert a is keep and a.numpy().tolist() == x.tolist()
    a *= 3
    assert a is keep and a.numpy().tolist() == (x * 3).tolist()
    before = sw.memory_info(dev).allocs
    a += b
    a *= 0.5
    assert sw.memory_info(dev).allocs == before  # no new buffers
    m = sw.zeros((2, 4), device=dev)
    row = m[1]
    row += b  # through a view
    assert m.numpy().tolist() == [[0] * 4, y.tolist()]


def test_what_the_kernels_do_not_express(dev):
    a, b = sw.asarray(f32(3), device=dev), sw.asarray(f32(3), device=dev)
    before = sw.memory_info(dev).allocs
    with pytest.raises(TypeError, match="no elementwise product"):
        a * b
    with pytest.raises(TypeError, match="no elementwise product"):
        a *= b
    with pytest.raises(TypeError, match="scalar"):
        a + 1.0
    with pytest.raises(TypeError, match="scalar"):
        1.0 - a
    with pytest.raises(TypeError, match="scalar"):
        a += 1
    with pytest.raises(TypeError):
        a / 2
    with pytest.raises(TypeError):
        a @ b
    with pytest.raises(TypeError):
        a + [1, 2, 3]
    with pytest.raises(TypeError):
        a * "x"
    with pytest.raises(TypeError):  # NumPy hands it back, not computes
        a + np.ones(3, np.float32)
    with pytest.raises(TypeError):
        np.ones(3, np.float32) + a
    with pytest.raises(TypeError):
        np.add(a, a)
    assert sw.memory_info(dev).allocs == before
    assert a.numpy().tolist() == [0.0, 1.0, 2.0]


def test_mismatched_operands(dev, sim, sim1):
    a = sw.zeros((2, 3), device=dev)
    before = sw.memory_info(dev).allocs
    with pytest.raises(ValueError, match="do not match"):
        a + sw.zeros((3, 2), device=dev)
    with pytest.raises(TypeError, match="same dtype"):
        a - sw.zeros((2, 3), dtype="int32", device=dev)
    with pytest.raises(TypeError, match="integer"):
        sw.zeros(3, dtype="int32", device=dev) * 0.5
    with pytest.raises(TypeError, match="real number"):
        a * 1j
    # A scalar the dtype cannot hold: OverflowError, on the smallest integer
    # dtype the device computes with (host:0 has int32, not int8; the kernel
    # is checked first, so int8 there is the TypeError that names it).
    small = next((t for t in ("int8", "int16", "int32") if t in dev.dtypes),
                 None)
    if small is not None:
        with pytest.raises(OverflowError):
            sw.zeros(3, dtype=small, device=dev) * (1 << 40)
    if "int8" not in dev.dtypes:
        with pytest.raises(TypeError, match="cannot compute with int8"):
            sw.zeros(3, dtype="int8", device=dev) * 1000
    assert sw.memory_info(dev).allocs - before == 3 + (small is not None) + \
        ("int8" not in dev.dtypes)  # the operands only
    with pytest.raises(ValueError, match="same device"):
        sw.zeros(2, device=sim) + sw.zeros(2, device=sim1)


def test_comparisons_are_refused(dev):
    a = sw.zeros(3, device=dev)
    for cmp in (lambda: a == a, lambda: a != a, lambda: a < a,
                lambda: a >= 0, lambda: a == None):  # noqa: E711
        with pytest.raises(TypeError, match="comparisons"):
            cmp()
    with pytest.raises(TypeError):
        hash(a)
    assert a in [a]  # identity still finds it in a list (no __eq__ call)


def test_sum_copy_astype(dev):
    x = f32(2, 3)
    a = sw.asarray(x, device=dev)
    assert a.sum() == sw.sum(a) == 15.0
    assert np.sum(a) == 15.0  # numpy.sum calls a.sum(axis=None, ...)
    with pytest.raises(TypeError, match="axis"):
        a.sum(axis=0)
    with pytest.raises(TypeError, match="axis"):
        np.sum(a, axis=1)
    c = a.copy()
    c.fill(1.0)
    assert a.numpy().tolist() == x.tolist() and c.tag == "copy"
    i = a.astype("int16")
    assert i.dtype == np.int16 and i.numpy().tolist() == x.tolist()
    assert i.device is dev and i.tag == "astype"
    q = sw.Queue(dev)
    d = a.copy(queue=q)
    sw.order_manager[q].wait()
    assert d.numpy().tolist() == x.tolist()
    del q
    with pytest.raises(TypeError, match="dtype"):
        a.astype("float128")
    with pytest.raises(TypeError):
        a.copy(queue=3)


def test_len_and_iteration(dev):
    m = sw.asarray(f32(3, 2), device=dev)
    assert len(m) == 3
    rows = list(m)
    assert [r.numpy().tolist() for r in rows] == f32(3, 2).tolist()
    assert list(sw.asarray(np.arange(3), device=dev)) == [0, 1, 2]
    assert list(reversed(sw.asarray(np.arange(3), device=dev))) == [2, 1, 0]
    with pytest.raises(TypeError, match="0-d"):
        iter(sw.zeros((), device=dev))
    with pytest.raises(TypeError, match="0-d"):
        len(sw.zeros((), device=dev))


def test_basic_indexing_views(dev):
    x = f32(3, 4, 5)
    a = sw.asarray(x, device=dev)
    cases = [(1,), (slice(1, 3),), (1, 2), (1, slice(1, 3)),
             (Ellipsis, slice(0, 5)), (2, Ellipsis), (None,), (1, None),
             (slice(None), slice(None)), (), (slice(2, 2),),
             (0, slice(2, 3), slice(None))]
    for key in cases:
        v = a[key]
        assert isinstance(v, sw.Array), key
        assert v.shape == x[key].shape, key
        assert np.array_equal(v.numpy(), x[key]), key
    m = sw.asarray(f32(4, 1), device=dev)
    col = m[:, 0]  # a column of an (n, 1) matrix is contiguous
    assert col.numpy().tolist() == [0, 1, 2, 3]
    col[2] = 9.0
    assert m[2, 0] == 9.0  # a view
    assert a[1, 2, 3] == x[1, 2, 3] and isinstance(a[1, 2, 3], float)
    z = a[1, 2, 3:4]
    assert z.shape == (1,) and z[0] == x[1, 2, 3]
    e = a[2, ...]
    assert e.shape == (4, 5)
    s = a[0, 0, 0:5:7]  # one element: its step does not matter
    assert s.shape == (1,) and s[0] == 0.0


def test_strided_indexing_is_a_clear_error(dev):
    a = sw.asarray(f32(3, 4), device=dev)
    for key in [(slice(None), 1), (Ellipsis, 0), (slice(None, None, 2),),
                (slice(None, None, -1),), (0, slice(0, 4, 2))]:
        with pytest.raises(TypeError, match="not contiguous") as e:
            a[key]
        assert "a.numpy()[" in str(e.value)
    with pytest.raises(TypeError, match="advanced"):
        a[[0, 1]]
    with pytest.raises(TypeError, match="advanced"):
        a[np.array([0, 1])]
    with pytest.raises(IndexError, match="single ellipsis"):
        a[..., ...]
    with pytest.raises(IndexError, match="too many"):
        a[0, 0, 0]
    with pytest.raises(IndexError, match="out of bounds"):
        a[:, 7]


def test_element_assignment_through_general_keys(dev):
    a = sw.zeros((2, 3), device=dev)
    a[1, 2] = 5.0
    a[(0, -1)] = 4.0
    assert a.numpy().tolist() == [[0, 0, 4], [0, 0, 5]]
    v = sw.zeros(3, device=dev)
    v[..., 1] = 2.0  # one element, though an ellipsis
    assert v.numpy().tolist() == [0, 2, 0]
    with pytest.raises(TypeError, match="single elements"):
        a[0] = 1.0
    with pytest.raises(TypeError, match="single elements"):
        a[:, 1] = 1.0


def test_transpose(dev):
    x = f32(2, 3)
    a = sw.asarray(x, device=dev)
    t = a.T
    assert t.shape == (3, 2) and t.numpy().tolist() == x.T.tolist()
    t[0, 1] = 99.0
    assert a[1, 0] == 3.0  # a copy: the layout differs
    assert t.tag == "T"
    x3 = f32(2, 3, 4)
    assert np.array_equal(sw.asarray(x3, device=dev).T.numpy(), x3.T)
    row = sw.asarray(f32(1, 4), device=dev)
    rt = row.T  # (4, 1): the same bytes in the same order -> a view
    rt[2, 0] = -1.0
    assert row[0, 2] == -1.0
    v = sw.asarray(f32(5), device=dev)
    assert v.T.shape == (5,)
    s = sw.zeros((), device=dev)
    assert s.T.shape == ()
    bf = sw.asarray(np.arange(6.0).reshape(2, 3), dtype="bfloat16",
                    device=dev)
    assert bf.T.astype("float32").numpy().tolist() == \
        np.arange(6.0).reshape(2, 3).T.tolist()


def test_transpose_of_an_empty_array_is_a_copy(dev):
    """Two axes longer than 1: a copy tagged "T", as for any array of that
    shape (it was a view with its base's tag when it had no elements)."""
    e = sw.empty((0, 2, 3), device=dev, tag="base")
    t = e.T
    assert t.shape == (3, 2, 0) and t.tag == "T"
    assert t.numpy().shape == (3, 2, 0)
    tags = sorted(b["tag"] for b in sw.memory_snapshot(dev))
    assert tags == ["T", "base"]
    assert sw.empty((2, 0), device=dev, tag="v").T.tag == "v"  # one axis: a view


def test_a_spilled_array_transposes_and_copies_from_its_host_copy(sim):
    a = sw.asarray(f32(256, 1024), device=sim)  # 1 MiB
    sw.set_memory_budget(2 << 20, sim)
    others = [sw.zeros(1 << 18, device=sim) for _ in range(2)]
    assert a.is_spilled
    restores = sw.memory_info(sim).restores
    t = a.T
    c = a.copy()
    assert a.is_spilled and sw.memory_info(sim).restores == restores
    assert c.numpy()[5, 7] == f32(256, 1024)[5, 7]
    assert t.numpy()[7, 5] == f32(256, 1024)[5, 7]
    sw.set_memory_budget(None, sim)
    del others
