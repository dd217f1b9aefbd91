"""A hypothesis state machine over the Python API, checked against NumPy.

Every Array the machine holds has a NumPy shadow: a view of its base's
shadow array, so that writes through one view are seen through the others,
as on the device.  After every step the machine checks each Array's values
against its shadow and the accounting against what it holds:
in_use + spilled is the rounded size of every live base buffer (those of
its Arrays and those kept by DLPack exports), spilled is that of the
spilled ones, peak >= in_use, open peak scopes saw at least what the steps
saw, and without exports in_use + cached stays within a budget.

The steps: creating arrays of several dtypes (zeros, ones, full, asarray,
from_dlpack of NumPy, pickling, copy, astype; and float and complex arrays
of non-finite values and signed zeros), views (reshape, rows, a.T,
from_dlpack of an Array), the kernels (add, scale, axpy, sum, fill, the
operators, in place or with out=) on the default queue or on Queues, host
reads and writes, budgets set and unset (small ones force spilling; given
as bytes or as size strings), peak scopes opened and closed,
reset_peak_memory, DLPack exports held and dropped, dropping arrays,
queues, empty_cache and synchronize.  A DeviceMemoryError (a budget held
by exports) must change nothing.  Negation and subtraction, exact
operations, take the non-finite arrays too and must give NumPy's answer to
the bit (signs of zero included).  Bad input -- bool keys, bool arrays
times a number, strings with a NUL, size strings that are not whole bytes
-- must raise its TypeError or ValueError and change nothing.

Bounded and derandomized, so CI sees the same runs every time;
SPILLWAY_STATE_MACHINE_EXAMPLES (default 20) and
SPILLWAY_STATE_MACHINE_STEPS (default 40) run it longer, and
SPILLWAY_STATE_MACHINE_RANDOM=1 explores new runs instead of the fixed ones
(hypothesis then prints how to reproduce a failure).
"""

import gc
import os
import pickle
import re

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (RuleBasedStateMachine, initialize,  # noqa
                                 invariant, precondition, rule)

import spillway as sw  # noqa: E402
from spillway import _testing  # noqa: E402

EXAMPLES = int(os.environ.get("SPILLWAY_STATE_MACHINE_EXAMPLES", "20"))
STEPS = int(os.environ.get("SPILLWAY_STATE_MACHINE_STEPS", "40"))
RANDOM = os.environ.get("SPILLWAY_STATE_MACHINE_RANDOM") == "1"
VERBOSE = os.environ.get("SPILLWAY_STATE_MACHINE_VERBOSE") == "1"

GRAN = sw.ALLOC_GRANULARITY
MAX_ITEMS = 14
BIG = 1 << 10  # values stay small: float arithmetic is then exact
STORE = ["float32", "float64", "int32", "int64", "uint8", "int16",
         "float16", "complex64", "bool"]
SCALARS = [-2, -1, 0, 1, 2, 3, 0.5]
SHAPES = [(0,), (1,), (7,), (300,), (2048,), (4096,), (4, 16), (16, 512),
          (3, 1), (1, 5), (2, 0), (3, 0, 2), ()]
BUDGETS = [16 << 10, 32 << 10, 64 << 10, 128 << 10]
# The budgets as size strings: each is the same number of bytes.
BUDGET_TEXT = {16 << 10: ["16K", "16 KiB", "0.015625M", " 16kb "],
               32 << 10: ["32K", "0.03125 MiB", "32768"],
               64 << 10: ["64KiB", "0.0625M", "65536B"],
               128 << 10: ["128K", "0.125M", "0.0001220703125G"]}
# Not whole bytes, or not sizes: ValueError, the budget unchanged ("0.5"
# was no budget, "1.5" one byte).
NOT_SIZES = ["0.5", "1.5", "1.5B", "0.3K", "-1", "", " ", "1e3",
             "99999999999999999999G", "16K\x00junk"]
# Non-finite values and signed zeros, for the exact operations.
SPECIAL = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1.5, -2.0]


# What the runs did, summed over the examples: the test checks that they
# did reach spilling, restoring, exports and queues.
STATS = {"steps": 0, "checks": 0, "ooms": 0, "spills": 0, "restores": 0,
         "exports": 0, "queued": 0, "budgets": 0, "examples": 0,
         "specials": 0, "exact": 0, "exact_special": 0, "bad_inputs": 0}


def rounded(nbytes):
    return -(-nbytes // GRAN) * GRAN


class Base:
    """One device buffer the model knows of: its size and its shadow."""

    def __init__(self, shadow):
        self.shadow = shadow
        self.nbytes = shadow.nbytes


class Item:
    """An Array, its base, and its shadow (a view of the base's)."""

    def __init__(self, arr, base, view):
        self.arr, self.base, self.view = arr, base, view


def kind(dtype):
    return np.dtype(dtype).kind


def scalar_for(dtype, s):
    """s as a value the dtype takes (docs/python.md, Values), or None."""
    k = kind(dtype)
    if k == "b":
        return None
    if k in "iu":
        if not float(s).is_integer():
            return None
        s = int(s)
        info = np.iinfo(dtype)
        return s if info.min <= s <= info.max else None
    return s


def tolerance(dtype):
    return {"e": 1e-3, "f": 1e-6, "c": 1e-6}.get(kind(dtype), 0) \
        if np.dtype(dtype) != np.float64 else 1e-12


def special_values(dtype, shape):
    """SPECIAL over the shape (a complex array gets every pair of them as
    its parts, set part by part: 1j * inf would be nan + inf j)."""
    n = int(np.prod(shape))
    if kind(dtype) != "c":
        return np.array([SPECIAL[i % 7] for i in range(n)],
                        dtype).reshape(shape)
    out = np.empty(n, dtype)
    out.real = [SPECIAL[i % 7] for i in range(n)]
    out.imag = [SPECIAL[(i // 7 + 3 * i) % 7] for i in range(n)]
    return out.reshape(shape)


def same_bits(got, want):
    """Equal to the bit, signs of zero included; a NaN matches any NaN
    (scaling by -1 keeps a NaN's sign where NumPy's negative flips it)."""
    if got.shape != want.shape:
        return False
    if kind(want.dtype) not in "fc":
        return np.array_equal(got, want)
    g, w = [np.ascontiguousarray(x).reshape(-1) for x in (got, want)]
    if kind(w.dtype) == "c":
        g, w = g.view(g.real.dtype), w.view(w.real.dtype)
    nan = np.isnan(w)
    return np.array_equal(np.isnan(g), nan) and \
        g[~nan].tobytes() == w[~nan].tobytes()


def same_values(got, want, dtype):
    if got.shape != want.shape:
        return False
    if kind(dtype) in "biu":
        return np.array_equal(got, want)
    rtol = tolerance(dtype) if np.dtype(dtype) != np.float16 else 1e-3
    return np.allclose(got, want, rtol=rtol, atol=rtol, equal_nan=True)


class SpillwayMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dev = sw.Device()
        self.kernel = [t for t in STORE if t in self.dev.dtypes]
        self.arith = [t for t in self.kernel if t != "bool"]
        self.host_addressable = \
            sw.zeros(1, device=self.dev).__dlpack_device__()[0] == 1
        self.spills = not self.dev.name.startswith("host:")
        self.items = []
        self.exports = []     # (kind, holder, base)
        # One queue from the start, so that every bounded run reaches
        # queued work whatever its draws: a derandomized run's seed comes
        # from this file's source, so any edit of it changes the run, and
        # one such run drew no queue_new before its queued ops.
        self.queues = [sw.Queue(self.dev)]
        self.scopes = []      # [scope, highest in_use seen while open]
        self.budget = None
        gc.collect()  # what an earlier example left
        sw.synchronize(self.dev)
        self.first = self.last = sw.memory_info(self.dev)
        # A failed example's traceback may keep its Arrays until hypothesis
        # is done, and they spill and restore like any other: the model is
        # checked against the buffers made since (by their ids), so that
        # the failure reported is the first one, not its leftovers
        # failing the accounting of every replay.
        self.before = {e["id"] for e in sw.memory_snapshot(self.dev)}
        STATS["examples"] += 1
        sw.set_memory_budget(None, self.dev)
        sw.reset_peak_memory(self.dev)

    # About half the examples start under the smallest budget, so that
    # every bounded run spills and restores.  Drawn, not taken from a
    # count of examples: hypothesis replays a choice sequence expecting
    # the same machine, and a start that followed the count made its
    # replays (and a fixed run's later examples) "flaky strategies".
    @initialize(small=st.booleans())
    def start(self, small):
        if self.spills and small:
            self.budget = BUDGETS[0]
            sw.set_memory_budget(self.budget, self.dev)
            STATS["budgets"] += 1
            # Two arrays of 3/4 of it: the second spills the first, and a
            # kernel on the first brings it back.  So every bounded run
            # spills and restores, whatever its draws (an edit of this
            # file changes the derandomized draws; one such run spilled
            # nothing).
            src = (np.arange(3072) % 7 - 3).astype(np.float32)
            for _ in range(2):
                self.add_base(sw.asarray(src, device=self.dev), src)
            first = self.items[-2]
            sw.scale(first.arr, 1.0, out=first.arr)

    # Every example holds one array of non-finite values and signed zeros
    # from the start, so that every bounded run negates and subtracts
    # some (exactly, as NumPy), whatever its other draws.
    @initialize(dtype=st.sampled_from(["complex64", "float32", "float64",
                                       "complex128"]),
                shape=st.sampled_from([(7,), (4, 16), (49,)]))
    def start_special(self, dtype, shape):
        if dtype not in self.arith:
            dtype = "float32"
        STATS["specials"] += 1
        src = special_values(dtype, shape)
        arr, ok = self.attempt(lambda: sw.asarray(src, device=self.dev))
        if ok:
            self.add_base(arr, src)
            other = np.roll(src.reshape(-1), 3).reshape(shape)
            with np.errstate(all="ignore"):
                sub = src - other
            self.add_exact(self.attempt(lambda: -arr), -src, keep=False)
            self.add_exact(self.attempt(
                lambda: arr - sw.asarray(other, device=self.dev)), sub,
                keep=False)

    # -- helpers -------------------------------------------------------------

    def draw_item(self, data, pred=lambda it: True):
        # An index, not the Item: what hypothesis draws it keeps for its
        # report, and an Array kept so would outlive the example.
        cands = [it for it in self.items if pred(it)]
        if not cands:
            return None
        return cands[data.draw(st.integers(0, len(cands) - 1))]

    def draw_queue(self, data):
        if not self.queues or not data.draw(st.booleans()):
            return None
        STATS["queued"] += 1
        return self.queues[data.draw(st.integers(0, len(self.queues) - 1))]

    def add_base(self, arr, shadow):
        assert arr.shape == shadow.shape, (arr.shape, shadow.shape)
        assert arr.dtype == shadow.dtype, (arr.dtype, shadow.dtype)
        assert arr.device == self.dev
        shadow = np.array(shadow, order="C", copy=True)  # 0-d stays 0-d
        self.items.append(Item(arr, Base(shadow), shadow))
        self.check_item(self.items[-1])

    def add_view(self, arr, item, view):
        assert arr.shape == view.shape, (arr.shape, view.shape)
        self.items.append(Item(arr, item.base, view))

    def attempt(self, fn):
        """fn(), or None when device memory ran out (possible only while
        exports hold memory under a budget, or on host:0)."""
        try:
            return fn(), True
        except sw.DeviceMemoryError:
            STATS["ooms"] += 1
            assert self.budget is not None or self.exports or \
                not self.spills, "DeviceMemoryError with nothing pinned"
            return None, False

    def too_big(self, item):
        v = item.view
        return v.size > 0 and kind(v.dtype) in "fc" and \
            not np.all(np.abs(v) < BIG)

    def overlap(self, a, b):
        """Partly overlapping (not the same elements): no kernel promises
        NumPy's answer there."""
        if not np.may_share_memory(a.view, b.view):
            return False
        same = (a.view.__array_interface__["data"][0] ==
                b.view.__array_interface__["data"][0])
        return not same

    def check_item(self, item):
        STATS["checks"] += 1
        got = item.arr.numpy()
        assert same_values(got, item.view, item.view.dtype), \
            (item.arr, got, item.view)

    # -- creation ------------------------------------------------------------

    @precondition(lambda self: len(self.items) < MAX_ITEMS)
    @rule(data=st.data(), count=st.integers(1, 4))
    def create(self, data, count):
        for _ in range(count):
            if len(self.items) < MAX_ITEMS:
                self.create_one(
                    data, data.draw(st.sampled_from(STORE)),
                    data.draw(st.sampled_from(SHAPES)),
                    data.draw(st.sampled_from(
                        ["zeros", "ones", "full", "asarray", "from_dlpack",
                         "pickle", "special"])))

    def create_one(self, data, dtype, shape, how):
        k = kind(dtype)
        if k == "b":
            src = (np.arange(int(np.prod(shape))) % 3 == 0).reshape(shape)
        else:
            src = (np.arange(int(np.prod(shape))) % 7 - 3).astype(dtype)
            src = src.reshape(shape)
            if k == "u":
                src = (np.arange(int(np.prod(shape))) % 7).astype(
                    dtype).reshape(shape)
        src = src.astype(dtype)
        if how == "special" and k in "fc":
            src = special_values(dtype, shape)
            STATS["specials"] += 1
        if how == "zeros":
            q = self.draw_queue(data)
            arr, ok = self.attempt(lambda: sw.zeros(
                shape, dtype=dtype, device=self.dev, queue=q))
            want = np.zeros(shape, dtype)
        elif how == "ones":
            arr, ok = self.attempt(lambda: sw.ones(shape, dtype=dtype,
                                                   device=self.dev))
            want = np.ones(shape, dtype)
        elif how == "full":
            v = True if k == "b" else scalar_for(dtype, 3)
            arr, ok = self.attempt(lambda: sw.full(shape, v, dtype=dtype,
                                                   device=self.dev))
            want = np.full(shape, v, dtype)
        elif how in ("asarray", "special"):
            arr, ok = self.attempt(lambda: sw.asarray(src, device=self.dev))
            want = src
        elif how == "from_dlpack":
            arr, ok = self.attempt(lambda: sw.from_dlpack(src,
                                                          device=self.dev))
            want = src
        else:
            a, ok = self.attempt(lambda: sw.asarray(src, device=self.dev))
            if ok:
                arr, ok = self.attempt(
                    lambda: pickle.loads(pickle.dumps(a, protocol=5)))
                del a
            want = src
        if ok:
            self.add_base(arr, want)

    @precondition(lambda self: self.items and len(self.items) < MAX_ITEMS)
    @rule(data=st.data(), how=st.sampled_from(["copy", "astype", "pickle",
                                               "pickle4", "dlpack_copy"]))
    def duplicate(self, data, how):
        it = self.draw_item(data)
        if how == "copy":
            q = self.draw_queue(data)
            arr, ok = self.attempt(lambda: it.arr.copy(queue=q))
            want = it.view
        elif how == "astype":
            if kind(it.view.dtype) == "c":
                return
            t = data.draw(st.sampled_from(["float64", "float32", "int64"]))
            if kind(t) == "i" and kind(it.view.dtype) in "fe" and not (
                    np.all(np.isfinite(it.view)) and
                    np.all(it.view == np.round(it.view))):
                return
            arr, ok = self.attempt(lambda: it.arr.astype(t))
            want = it.view.astype(t)
        elif how == "dlpack_copy":
            arr, ok = self.attempt(lambda: sw.from_dlpack(it.arr, copy=True))
            want = it.view
        else:
            proto = 5 if how == "pickle" else 4
            arr, ok = self.attempt(
                lambda: pickle.loads(pickle.dumps(it.arr, protocol=proto)))
            want = it.view
        if ok:
            self.add_base(arr, want)

    # -- views ---------------------------------------------------------------

    @precondition(lambda self: self.items and len(self.items) < MAX_ITEMS)
    @rule(data=st.data())
    def view(self, data):
        it = self.draw_item(data)
        a, v = it.arr, it.view
        how = data.draw(st.sampled_from(["flat", "rows", "two", "T",
                                         "newaxis", "dlpack", "same"]))
        if how == "flat":
            self.add_view(a.reshape(-1), it, v.reshape(-1))
        elif how == "rows" and a.ndim >= 1 and a.shape[0] > 0:
            i = data.draw(st.integers(0, a.shape[0] - 1))
            j = data.draw(st.integers(i, a.shape[0]))
            self.add_view(a[i:j], it, v[i:j])
        elif how == "two" and a.size > 0 and a.size % 2 == 0:
            self.add_view(a.reshape(2, -1), it, v.reshape(2, -1))
        elif how == "T":
            # A copy where two axes are longer than 1: under a budget
            # that exports fill, it can run out like any allocation.
            t, ok = self.attempt(lambda: a.T)
            if not ok:
                return
            if sum(d > 1 for d in a.shape) <= 1:
                self.add_view(t, it, v.T)   # the same bytes: a view
            else:
                assert t.tag == "T", (a.shape, t.tag)  # empty ones too
                self.add_base(t, v.T)       # a copy through the host
        elif how == "newaxis":
            self.add_view(a[None], it, v[None])
        elif how == "dlpack":
            b, ok = self.attempt(lambda: sw.from_dlpack(a))
            if ok:
                self.add_view(b, it, v)     # the device's own: shared
        elif how == "same":
            assert sw.asarray(a, device=self.dev) is a
            assert a.astype(a.dtype, copy=False) is a

    @precondition(lambda self: self.items)
    @rule(data=st.data())
    def drop(self, data):
        it = self.draw_item(data)
        self.items.remove(it)

    # -- the kernels -----------------------------------------------------------

    def arith_item(self, data, pred=lambda it: True, exact=False):
        """An item the kernels compute with; only small finite values
        unless exact (negation and subtraction round once, as NumPy, for
        any values)."""
        return self.draw_item(
            data, lambda it: str(it.view.dtype) in self.arith and
            (exact or not self.too_big(it)) and pred(it))

    def check_exact(self, got, want):
        STATS["exact"] += 1
        if kind(want.dtype) in "fc" and not np.all(np.isfinite(want)):
            STATS["exact_special"] += 1
        assert same_bits(got, want), \
            f"not NumPy's answer to the bit: {got!r}, want {want!r}"

    def add_exact(self, result, want, keep=True):
        """attempt()'s result, checked to the bit and kept.  A wrong Array
        is dropped before the failure: kept alive by the traceback, it
        would fail the accounting of hypothesis's replays instead, and
        that is what would be reported."""
        arr, ok = result
        del result
        if not ok:
            return
        got = arr.numpy()
        if not same_bits(got, want):
            del arr
        self.check_exact(got, want)
        if keep:
            self.add_base(arr, want)

    def refused(self, exc, fn, match=None):
        """fn() must raise exc (matching match); what it returns when it
        does not is dropped before the failure (as in add_exact)."""
        try:
            r = fn()
        except exc as e:
            assert match is None or re.search(match, str(e)), e
            return
        del r
        raise AssertionError(f"no {exc.__name__}: {fn.__doc__ or fn}")

    @precondition(lambda self: self.items)
    @rule(data=st.data(), use_out=st.booleans(), op=st.booleans())
    def add(self, data, use_out, op):
        x = self.arith_item(data)
        if x is None:
            return
        like = lambda it: it.view.shape == x.view.shape and \
            it.view.dtype == x.view.dtype  # noqa: E731
        y = self.draw_item(data, like)
        want = x.view + y.view
        q = self.draw_queue(data)
        if use_out:
            z = self.draw_item(data, like)
            if self.overlap(z, x) or self.overlap(z, y):
                return
            _, ok = self.attempt(lambda: sw.add(x.arr, y.arr, out=z.arr,
                                                queue=q))
            if ok:
                z.view[...] = want
        elif op and len(self.items) < MAX_ITEMS:
            r, ok = self.attempt(lambda: x.arr + y.arr)
            if ok:
                self.add_base(r, want)
        elif len(self.items) < MAX_ITEMS:
            r, ok = self.attempt(lambda: sw.add(x.arr, y.arr, queue=q))
            if ok:
                self.add_base(r, want)

    @precondition(lambda self: self.items)
    @rule(data=st.data(), s=st.sampled_from(SCALARS),
          how=st.sampled_from(["new", "out", "op", "iop", "neg"]))
    def scale(self, data, s, how):
        x = self.arith_item(data, exact=how == "neg")
        if x is None:
            return
        dt = x.view.dtype
        if how == "neg":
            s = -1
        s = scalar_for(dt, s)
        if s is None:
            return
        if how == "neg" and kind(dt) != "u":
            want = -x.view   # NumPy's negative, exact (not a product)
        else:
            want = (x.view * np.asarray(s).astype(dt)).astype(dt) \
                if kind(dt) in "iu" else (x.view * s).astype(dt)
        q = self.draw_queue(data)
        if how == "out":
            z = self.draw_item(data, lambda it: it.view.shape == x.view.shape
                               and it.view.dtype == dt)
            if self.overlap(z, x):
                return
            _, ok = self.attempt(lambda: sw.scale(x.arr, s, out=z.arr,
                                                  queue=q))
            if ok:
                z.view[...] = want
        elif how == "iop":
            def iop():
                a = x.arr
                a *= s
                return a
            r, ok = self.attempt(iop)
            if ok:
                assert r is x.arr
                x.view[...] = want
        elif len(self.items) < MAX_ITEMS:
            if how == "neg" and kind(dt) != "u":
                self.add_exact(self.attempt(lambda: -x.arr), want)
                return
            if how == "op":
                fn = lambda: x.arr * s  # noqa: E731
            else:
                fn = lambda: sw.scale(x.arr, s, queue=q)  # noqa: E731
            r, ok = self.attempt(fn)
            if ok:
                self.add_base(r, want)

    @precondition(lambda self: self.items)
    @rule(data=st.data(), alpha=st.sampled_from(SCALARS),
          how=st.sampled_from(["axpy", "isub", "sub"]))
    def axpy(self, data, alpha, how):
        exact = how != "axpy"  # y - x rounds once, as NumPy's subtract
        y = self.arith_item(data, exact=exact)
        if y is None:
            return
        dt = y.view.dtype
        x = self.draw_item(data, lambda it: it.view.shape == y.view.shape
                           and it.view.dtype == dt and
                           (exact or not self.too_big(it)))
        if x is None or self.overlap(x, y):
            return
        if how != "axpy":
            alpha = -1
        if kind(dt) == "u" and alpha == -1 and how == "axpy":
            return  # -1 is outside an unsigned type (OverflowError)
        a = scalar_for(dt, alpha) if kind(dt) != "u" or alpha != -1 else -1
        if a is None:
            return
        if exact:
            with np.errstate(all="ignore"):   # inf - inf
                want = y.view - x.view
        elif kind(dt) in "iu":
            want = (np.asarray(a).astype(dt) * x.view + y.view).astype(dt)
        else:
            want = (a * x.view.astype(np.complex128 if kind(dt) == "c"
                                      else np.float64)
                    + y.view).astype(dt)
        q = self.draw_queue(data)
        if how == "axpy":
            r, ok = self.attempt(lambda: sw.axpy(a, x.arr, y.arr, queue=q))
            if ok:
                assert r is y.arr
                y.view[...] = want
        elif how == "isub":
            def isub():
                b = y.arr
                b -= x.arr
                return b
            r, ok = self.attempt(isub)
            if ok:
                assert r is y.arr
                self.check_exact(r.numpy(), want)
                y.view[...] = want
        elif len(self.items) < MAX_ITEMS:
            self.add_exact(self.attempt(lambda: y.arr - x.arr), want)

    @precondition(lambda self: self.items)
    @rule(data=st.data(), method=st.booleans())
    def sum(self, data, method):
        x = self.draw_item(data, lambda it: str(it.view.dtype) in self.kernel
                           and not self.too_big(it))
        if x is None:
            return
        got, ok = self.attempt(lambda: x.arr.sum() if method
                               else sw.sum(x.arr))
        if not ok:
            return
        v, k = x.view, kind(x.view.dtype)
        if k == "b":
            assert got == int(np.count_nonzero(v))
        elif k == "i":
            assert got == int(np.sum(v, dtype=np.int64))
        elif k == "u":
            assert got == int(np.sum(v, dtype=np.uint64))
        else:
            want = np.sum(v.astype(np.complex128 if k == "c"
                                   else np.float64))
            assert np.isclose(got, want, rtol=1e-5, atol=1e-5), (got, want)

    @precondition(lambda self: self.items)
    @rule(data=st.data(), v=st.sampled_from([0, 1, 2, -3, 0.5]))
    def fill(self, data, v):
        x = self.draw_item(data)
        dt = x.view.dtype
        v = bool(v in (1, 2)) if kind(dt) == "b" else scalar_for(dt, v)
        if v is None:
            return
        q = self.draw_queue(data)
        _, ok = self.attempt(lambda: x.arr.fill(v, queue=q))
        if ok:
            x.view[...] = v

    # -- host reads and writes ------------------------------------------------

    @precondition(lambda self: self.items)
    @rule(data=st.data(), v=st.sampled_from([1, 5, -2]))
    def element(self, data, v):
        x = self.draw_item(data, lambda it: it.view.size > 0)
        if x is None:
            return
        idx = tuple(data.draw(st.integers(-n, n - 1)) for n in x.view.shape)
        got = x.arr[idx]
        want = x.view[idx]
        assert same_values(np.asarray(got, dtype=want.dtype), want,
                           want.dtype), (got, want)
        dt = x.view.dtype
        v = bool(v == 1) if kind(dt) == "b" else scalar_for(dt, v)
        if v is not None:
            x.arr[idx] = v
            x.view[idx] = v

    # -- budgets, peaks, caches ----------------------------------------------

    @rule(data=st.data(), what=st.sampled_from(
        ["budget", "budget", "peak_open", "peak_close", "reset_peak", "empty_cache",
         "synchronize", "queue_new", "queue_drop", "bad_input",
         "bad_input"]))
    def housekeeping(self, data, what):
        """The calls that take no array, in one rule (hypothesis would
        otherwise favour them, having less to draw)."""
        if what == "budget":
            b = data.draw(st.sampled_from(BUDGETS + [None]))
            written = b
            if b is not None and data.draw(st.booleans()):
                written = data.draw(st.sampled_from(BUDGET_TEXT[b]))
            sw.set_memory_budget(written, self.dev)
            self.budget = b
            STATS["budgets"] += b is not None
            assert sw.get_memory_budget(self.dev) == b
        elif what == "peak_open" and len(self.scopes) < 3:
            p = sw.memory_peak(self.dev)
            assert p.__enter__() is p
            self.scopes.append([p, sw.memory_info(self.dev).in_use])
        elif what == "peak_close" and self.scopes:
            i = data.draw(st.integers(0, len(self.scopes) - 1))
            p, seen = self.scopes.pop(i)
            p.__exit__(None, None, None)
            assert p.bytes >= seen, (p.bytes, seen)
        elif what == "reset_peak":
            sw.reset_peak_memory(self.dev)
            m = sw.memory_info(self.dev)
            assert m.peak == m.in_use
        elif what == "empty_cache":
            sw.empty_cache(self.dev)
            assert sw.memory_info(self.dev).cached == 0
        elif what == "synchronize":
            sw.synchronize(self.dev)
        elif what == "queue_new" and len(self.queues) < 3:
            self.queues.append(sw.Queue(self.dev))
        elif what == "bad_input":
            self.bad_input(data)
        elif what == "queue_drop" and self.queues:
            q = self.queues.pop(data.draw(
                st.integers(0, len(self.queues) - 1)))
            if data.draw(st.booleans()):
                sw.order_manager[q].wait()

    # -- bad input: refused, and nothing changes ----------------------------

    def bad_input(self, data):
        """One of housekeeping's draws: a rule of its own, with little to
        draw, took a quarter of the steps."""
        what = data.draw(st.sampled_from(
            ["bool_key", "bool_set", "bool_arith", "nul", "size"]))
        before = sw.memory_info(self.dev)
        limit = sw.memory_stats(self.dev)["host_pool_limit"]
        STATS["bad_inputs"] += 1
        if what in ("bool_key", "bool_set"):
            x = self.draw_item(data)
            if x is None:
                return
            # A mask to NumPy (advanced indexing), once row 0 or 1 here.
            key = data.draw(st.sampled_from(
                [True, False, (0, True), (Ellipsis, False), (None, True)]))
            v = True if kind(x.view.dtype) == "b" else 1

            def use():
                """a bool key"""
                if what == "bool_key":
                    return x.arr[key]
                x.arr[key] = v
            self.refused(TypeError, use)
        elif what == "bool_arith":
            x = self.draw_item(data, lambda it: kind(it.view.dtype) == "b")
            if x is None:
                return
            s = data.draw(st.sampled_from([2, 0, 1, True, 0.5]))
            op = data.draw(st.sampled_from(
                [lambda: x.arr * s, lambda: s * x.arr,
                 lambda: sw.scale(x.arr, s), lambda: sw.axpy(s, x.arr, x.arr),
                 lambda: -x.arr, lambda: x.arr - x.arr]))
            self.refused(TypeError, op, "bool")
        elif what == "nul":
            item = self.draw_item(data)
            spec = self.dev.name + "\x00x"
            calls = [
                lambda: sw.empty(1, dtype="float32\x00x", device=self.dev),
                lambda: sw.zeros(1, device=spec),
                lambda: sw.full(1, 1, device=self.dev, tag="a\x00b"),
                lambda: sw.asarray(np.ones(1), device=self.dev,
                                   tag="a\x00b"),
                lambda: sw.set_memory_budget("16K\x00x", self.dev),
                lambda: sw.set_host_pool_limit("1M\x00x", self.dev),
                lambda: sw.Queue(spec),
            ]
            if item is not None:
                calls.append(lambda: item.arr.astype("float64\x00"))
            call = calls[data.draw(st.integers(0, len(calls) - 1))]
            self.refused(ValueError, call, "NUL")
        else:
            text = data.draw(st.sampled_from(NOT_SIZES))
            self.refused(ValueError,
                         lambda: sw.set_memory_budget(text, self.dev))
            self.refused(ValueError,
                         lambda: sw.set_host_pool_limit(text, self.dev))
        assert sw.get_memory_budget(self.dev) == self.budget
        assert sw.memory_stats(self.dev)["host_pool_limit"] == limit
        assert sw.memory_info(self.dev).allocs == before.allocs

    # -- DLPack exports ----------------------------------------------------------

    @precondition(lambda self: self.items and len(self.exports) < 4)
    @rule(data=st.data())
    def export(self, data):
        x = self.draw_item(data)
        if self.host_addressable and data.draw(st.booleans()):
            n, ok = self.attempt(lambda: np.from_dlpack(x.arr))
            if ok:
                assert same_values(n, x.view, x.view.dtype)
                self.exports.append(("numpy", n, x.base, x.view))
                STATS["exports"] += 1
        else:
            cap, ok = self.attempt(lambda: x.arr.__dlpack__())
            if ok:
                self.exports.append(("capsule", cap, x.base, None))
                STATS["exports"] += 1

    @precondition(lambda self: self.exports)
    @rule(data=st.data(), write=st.booleans())
    def export_use(self, data, write):
        """Through a NumPy view of device memory: read what the device
        wrote (after synchronize), or write."""
        i = data.draw(st.integers(0, len(self.exports) - 1))
        kind_, n, base, view = self.exports[i]
        if kind_ != "numpy" or n.size == 0:
            return
        sw.synchronize(self.dev)
        for q in self.queues:
            sw.order_manager[q].wait()
        if not any(it.base is base for it in self.items):
            return  # the model no longer knows its values
        assert same_values(n, view, view.dtype), (n, view)
        if write and n.flags.writeable:
            v = True if kind(n.dtype) == "b" else 2
            n[...] = v
            view[...] = v

    @precondition(lambda self: self.exports)
    @rule(data=st.data())
    def export_drop(self, data):
        i = data.draw(st.integers(0, len(self.exports) - 1))
        del self.exports[i]

    # -- invariants --------------------------------------------------------------

    @invariant()
    def values_match(self):
        for it in self.items:
            self.check_item(it)

    @invariant()
    def accounting(self):
        STATS["steps"] += 1
        m = sw.memory_info(self.dev)
        for s in self.scopes:
            s[1] = max(s[1], m.in_use)
        assert m.peak >= m.in_use, m
        assert m.in_use % GRAN == 0 and m.spilled % GRAN == 0, m
        for name in ("allocs", "frees", "spills", "restores", "ooms",
                     "gc_runs", "spilled_bytes_total",
                     "restored_bytes_total"):
            assert getattr(m, name) >= getattr(self.last, name), name
        self.last = m
        if not self.spills:
            assert m.spilled == 0
        # What is live is what the model holds.  Work on a queue holds its
        # Arrays until it has run: wait for it first.
        for q in self.queues:
            sw.order_manager[q].wait()
        _testing.wait_host_tasks(timeout=60)
        bases = {id(it.base): it.base for it in self.items}
        bases.update({id(e[2]): e[2] for e in self.exports})
        spilled = {id(it.base) for it in self.items if it.arr.is_spilled}
        exported = {id(e[2]) for e in self.exports}
        assert not spilled & exported, "an exported buffer was spilled"
        want_spilled = sum(rounded(b.nbytes) for k, b in bases.items()
                           if k in spilled)
        want_total = sum(rounded(b.nbytes) for b in bases.values())

        def held():
            """(resident, spilled) bytes of this example's buffers."""
            mine = [e for e in sw.memory_snapshot(self.dev)
                    if e["id"] not in self.before]
            return tuple(sum(e["alloc_size"] for e in mine
                             if e["state"] == state)
                         for state in ("resident", "spilled")) + (mine,)
        for _ in range(50):
            res, out, mine = held()
            if res + out == want_total:
                break
            gc.collect()   # references handed back by host tasks
        if out != want_spilled:
            model = [(b.nbytes, k in spilled, [
                (it.arr.shape, str(it.arr.dtype), it.arr.tag)
                for it in self.items if it.base is b])
                for k, b in bases.items()]
            snap = [(e["size"], e["state"], e["tag"], e["leases"])
                    for e in mine]
            raise AssertionError(f"spilled {out} != {want_spilled}: "
                                 f"model {model}; device {snap}")
        assert res + out == want_total, (res, out, want_total)
        m = sw.memory_info(self.dev)
        snap = sw.memory_snapshot(self.dev)
        res = sum(e["alloc_size"] for e in snap if e["state"] == "resident")
        out = sum(e["alloc_size"] for e in snap if e["state"] == "spilled")
        assert (res, out) == (m.in_use, m.spilled), (res, out, m)
        # (host:0 cannot spill: a budget lowered below what it holds only
        # refuses new allocations there.)
        if self.budget is not None and not self.exports and self.spills:
            assert m.in_use + m.cached <= self.budget, m

    def teardown(self):
        m = sw.memory_info(self.dev)
        STATS["spills"] += m.spills - self.first.spills
        STATS["restores"] += m.restores - self.first.restores
        for p, _ in self.scopes:
            p.__exit__(None, None, None)
        for q in self.queues:
            sw.order_manager[q].wait()
        self.items.clear()
        self.exports.clear()
        self.queues.clear()
        sw.set_memory_budget(None, self.dev)
        _testing.wait_host_tasks(timeout=60)



def test_state_machine():
    hypothesis.stateful.run_state_machine_as_test(
        SpillwayMachine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            derandomize=not RANDOM,   # the same runs in CI every time
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            # No explain phase: it traces every line (sys.settrace before
            # Python 3.12), and a failure's report took past the suite's
            # 300 s timeout.
            phases=[p for p in Phase if p != Phase.explain],
            verbosity=hypothesis.Verbosity.debug if VERBOSE
            else hypothesis.Verbosity.normal,
        ))
    print(f"state machine on {sw.Device().name}: {STATS}")
    # The bounded run must reach what it is here to check.
    assert STATS["examples"] >= min(EXAMPLES, 5)
    assert STATS["exports"] > 0 and STATS["queued"] > 0
    assert STATS["budgets"] > 0 and STATS["checks"] > STATS["steps"]
    assert STATS["specials"] > 0 and STATS["exact_special"] > 0
    assert STATS["bad_inputs"] > 0
    if not sw.Device().name.startswith("host:"):
        assert STATS["spills"] > 0 and STATS["restores"] > 0
