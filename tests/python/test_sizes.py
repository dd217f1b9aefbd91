"""One meaning per size argument (issue 34, DESIGN.md): every Python entry
that takes a size reads it through one parser.  An int (of any integer
type) or a size string is bytes; a real number of another type (float,
NumPy float, Fraction, Decimal) in (0, 1] is a fraction -- of the device
for a device budget, of the machine for a host budget -- and never less
than one byte; None is no budget where a budget is set; bools (NumPy's
too) and anything else are TypeError.  Each bad value changes nothing.

Before: set_host_budget read np.float32(0.25), Fraction(1, 4) and
Decimal("0.25") as a quarter of the *device* (16 MiB of 64), NumPy's True
as the device's whole size, and 1e-12 as no host budget at all, where
set_memory_budget gave it one byte; the Dask plugin refused a NumPy float
the setters took.
"""

import decimal
import math
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

import spillway as sw
from spillway import _plugin

MiB = 1 << 20
Dec = decimal.Decimal


def machine_memory():
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class Setter:
    """One size argument: how to set it, read it back, what a fraction of
    it is of ("device", "host", or None: bytes only) and what None does
    ("none": no budget; "keep": leaves it; TypeError)."""

    def __init__(self, name, set_, get, of, none="none"):
        self.name, self.set, self.get, self.of = name, set_, get, of
        self.none = none

    def __repr__(self):
        return self.name


def _plugin_budget(value, dev, monkeypatch):
    # The CuPy, Numba and PyTorch plug-ins set their device's budget here
    # (None: their budget= was not given).
    monkeypatch.setattr(_plugin, "device", lambda index: dev)
    _plugin.set_budget(0, value)


SETTERS = [
    Setter("set_memory_budget",
           lambda v, d, mp: sw.set_memory_budget(v, d),
           lambda d: sw.get_memory_budget(d), "device"),
    Setter("set_memory_budget-kw",
           lambda v, d, mp: sw.set_memory_budget(nbytes=v, device=d),
           lambda d: sw.memory_info(d).budget, "device"),
    Setter("plugin-set_budget", _plugin_budget,
           lambda d: sw.get_memory_budget(d), "device", none="keep"),
    Setter("set_host_budget",
           lambda v, d, mp: sw.set_host_budget(v, d),
           lambda d: sw.memory_stats(d)["host_budget"], "host"),
    Setter("set_host_pool_limit",
           lambda v, d, mp: sw.set_host_pool_limit(v, d),
           lambda d: sw.memory_stats(d)["host_pool_limit"], None,
           none=TypeError),
]

# (value, its form, what it comes to): bytes, a fraction, or the error
# of a bad value of that form.  Forms: "int" and "str" are bytes, "frac" a
# fraction, "none" None, "bad" a TypeError everywhere.
TINY = 1e-300  # below one byte of anything: one byte
VALUES = [
    (4096, "int", 4096),
    (np.int64(4096), "int", 4096),
    (np.uint32(512), "int", 512),
    (0, "int", 0),
    (-1, "int", ValueError), (2**64, "int", ValueError),
    (np.int64(-5), "int", ValueError),
    ("8M", "str", 8 * MiB),
    ("1.5K", "str", 1536),
    ("lots", "str", ValueError), ("0.5", "str", ValueError),
    (0.25, "frac", 0.25),
    (np.float64(0.25), "frac", 0.25),
    (np.float32(0.25), "frac", 0.25),
    (np.float16(0.25), "frac", 0.25),
    (Fraction(1, 4), "frac", 0.25),
    (Dec("0.25"), "frac", 0.25),
    (1.0, "frac", 1.0),
    (Fraction(1), "frac", 1.0),
    (1e-12, "frac", TINY),
    (np.float32(1e-30), "frac", TINY),
    (Fraction(1, 10**400), "frac", TINY),  # 0.0 as a float: in (0, 1]
    (Dec("1e-400"), "frac", TINY),
    # not in (0, 1]
    (0.0, "frac", ValueError), (1.5, "frac", ValueError),
    (-0.25, "frac", ValueError), (float("nan"), "frac", ValueError),
    (float("inf"), "frac", ValueError),
    (np.float32(1.5), "frac", ValueError),
    (np.float32("nan"), "frac", ValueError),
    (Fraction(3, 2), "frac", ValueError),
    (Fraction(-1, 4), "frac", ValueError),
    (Fraction(10**20 + 1, 10**20), "frac", ValueError),  # 1.0 as a float
    (Fraction(10**400), "frac", ValueError),             # no float at all
    (Dec("1.00000000000000000001"), "frac", ValueError),  # 1.0 as a float
    (Dec("NaN"), "frac", ValueError), (Dec("sNaN"), "frac", ValueError),
    (Dec("-Infinity"), "frac", ValueError),
    (None, "none", None),
    # neither sizes nor fractions
    (True, "bad", TypeError), (False, "bad", TypeError),
    (np.True_, "bad", TypeError), (np.False_, "bad", TypeError),
    (2j, "bad", TypeError), (np.complex64(0.25), "bad", TypeError),
    (b"1M", "bad", TypeError), ([1], "bad", TypeError),
    (object(), "bad", TypeError),
]
VALUE_IDS = [f"{type(v).__name__}({v!r})"[:40] for v, _, _ in VALUES]


def _expected(setter, form, result, total, sentinel):
    """What the setter should hold after the value, or an exception."""
    if form == "bad":
        return TypeError
    if form == "none":
        return sentinel if setter.none == "keep" else \
            None if setter.none == "none" else setter.none
    if form == "frac" and setter.of is None:
        return TypeError  # bytes only: a fraction of nothing
    if isinstance(result, type):
        return result
    if form == "frac":
        return max(1, math.floor(result * total))
    return None if result == 0 and setter.of else result  # 0: no budget


@pytest.mark.parametrize("value, form, result", VALUES, ids=VALUE_IDS)
@pytest.mark.parametrize("setter", SETTERS, ids=repr)
def test_every_size_setter_reads_every_value_one_way(dev, monkeypatch,
                                                     setter, value, form,
                                                     result):
    total = (sw.memory_info(dev).device_total if setter.of == "device"
             else machine_memory())
    before = setter.get(dev)
    sentinel = 3 * MiB
    try:
        setter.set(sentinel, dev, monkeypatch)
        want = _expected(setter, form, result, total, sentinel)
        if isinstance(want, type):
            with pytest.raises(want):
                setter.set(value, dev, monkeypatch)
            assert setter.get(dev) == sentinel  # unchanged
        else:
            setter.set(value, dev, monkeypatch)
            assert setter.get(dev) == want
    finally:
        sw.set_memory_budget(None, dev)
        sw.set_host_budget(None, dev)
        if setter.name == "set_host_pool_limit":
            sw.set_host_pool_limit(before, dev)


def test_messages_name_the_setter_and_what_it_takes(dev):
    with pytest.raises(TypeError, match=r"set_host_budget\(\) takes .*"
                       r"machine's memory.* not numpy\.bool"):
        sw.set_host_budget(np.True_, dev)
    with pytest.raises(TypeError, match=r"set_memory_budget\(\) takes .*"
                       r"device's memory.* not a bool"):
        sw.set_memory_budget(True, dev)
    with pytest.raises(TypeError, match=r"set_host_pool_limit\(\) takes "
                       r"bytes \(an int\) or a size .* not float"):
        sw.set_host_pool_limit(0.5, dev)
    with pytest.raises(ValueError, match=r"fraction of the machine's memory "
                       r"is in \(0, 1\], not Fraction\(3, 2\)"):
        sw.set_host_budget(Fraction(3, 2), dev)
    with pytest.raises(ValueError, match=r"fraction of the device's memory "
                       r"is in \(0, 1\], not nan"):
        sw.set_memory_budget(float("nan"), dev)
    assert sw.get_memory_budget(dev) is None
    assert sw.memory_stats(dev)["host_budget"] is None


def test_a_host_fraction_is_of_the_machine_not_the_device(dev):
    """The issue's case: np.float32(0.25) was a quarter of the device."""
    try:
        for v in [0.25, np.float32(0.25), Fraction(1, 4), Dec("0.25")]:
            sw.set_host_budget(v, dev)
            assert sw.memory_stats(dev)["host_budget"] == machine_memory() // 4
    finally:
        sw.set_host_budget(None, dev)


def test_numba_set_budget_keeps_nothing_it_refused(dev, monkeypatch):
    """spillway.numba.set_budget remembers the budget for the EMM plug-in's
    initialize(): a refused one was remembered all the same."""
    numba_plugin = pytest.importorskip("spillway.numba")
    monkeypatch.setattr(_plugin, "device", lambda index: dev)
    monkeypatch.setattr(numba_plugin, "_budgets", {})
    try:
        numba_plugin.set_budget("2M")
        assert sw.get_memory_budget(dev) == 2 * MiB
        for bad, exc in [(np.True_, TypeError), (1.5, ValueError)]:
            with pytest.raises(exc):
                numba_plugin.set_budget(bad)
            assert numba_plugin._budgets == {0: "2M"}
            assert sw.get_memory_budget(dev) == 2 * MiB
    finally:
        sw.set_memory_budget(None, dev)


@pytest.mark.parametrize("value, form, result", VALUES, ids=VALUE_IDS)
@pytest.mark.parametrize("arg, of", [("budget", "device"),
                                     ("host_budget", "host"),
                                     ("host_pool", None)])
def test_dask_plugin_takes_what_the_setters_take(arg, of, value, form,
                                                 result):
    """SpillwayPlugin checks each size's type at once, by the setters'
    parser (values are read on the worker, in setup): the types a setter
    takes, it takes; None leaves the worker's setting."""
    sd = pytest.importorskip("spillway.dask")
    if form == "bad" or (form == "frac" and of is None):
        with pytest.raises(TypeError, match=f"SpillwayPlugin {arg}= takes"):
            sd.SpillwayPlugin(**{arg: value})
    else:
        assert getattr(sd.SpillwayPlugin(**{arg: value}), arg) is value


@pytest.mark.parametrize("text, want", [
    ("0.000000000001", 1),  # rounds below a byte: one byte, not no budget
    ("0.25", "quarter"),
    ("4M", 4 * MiB),
    ("0", None),
])
def test_host_budget_from_the_environment_reads_the_same_way(text, want):
    """$SPILLWAY_HOST_BUDGET (read by the library at open) rounds a tiny
    fraction up to one byte, as set_host_budget does; it made it 0 bytes:
    no host budget at all."""
    if want == "quarter":
        want = machine_memory() // 4
    code = ("import spillway as sw; "
            "print(sw.memory_stats('sim:0')['host_budget'])")
    env = dict(os.environ, SPILLWAY_HOST_BUDGET=text,
               PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = out.stdout.strip()
    if want == machine_memory() // 4:  # the library's float rounding
        assert abs(int(got) - want) <= 1
    else:
        assert got == str(want)
