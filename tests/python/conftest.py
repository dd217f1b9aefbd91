"""pytest configuration for spillway's Python suite.

Which spillway is tested: the build tree's (BUILD/python, BUILD being
$SPILLWAY_BUILD_DIR or build/), put first on sys.path; with
SPILLWAY_TEST_INSTALLED=1, whatever `import spillway` finds (an installed
package, which must not come from this source tree: the `installed` suite,
scripts/test-installed.sh).  An installed package has no test-only module
(spillway._spillway_testing and spillway._testing are built in the build
tree only): there, stand-ins take their names, and a test that uses them
is skipped -- before it runs when its code names them, else when it calls
one -- while every other test runs; the leak check after each test, which
needs them, is left out (budgets are still reset).

The simulated device reads SPILLWAY_SIM_MEMORY and SPILLWAY_SIM_DEVICES when
it is opened, which in a process is once.  The suite sets them here, before
spillway is imported, for the whole session: two simulated devices of
64 MiB each, small enough that the memory-pressure tests fill one quickly.
Tests that need a different size start a subprocess.  The pressure tests
use the simulated device sim:0 ("sim" fixture); the others use the default
device ("dev" fixture: $SPILLWAY_DEVICE, or sim:0), so the suite can run
against other backends too.  Tests marked `spills` need the default device
to spill, and are skipped on host:0, which never does.

After every test an autouse fixture checks for leaks: every Array created
during the test must be gone after gc.collect() (weak references), no
Queue, SequentialOrderManager or Event may be left alive, and every open
device must have nothing in use and nothing spilled.  Work on a queue keeps
its Arrays alive until a host task drops them, so the fixture first waits
for this thread's order managers (order_manager.clear()) and for every
Python host task.
"""

import gc
import inspect
import os
import pathlib
import re
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SIM_MEMORY = 64 << 20

os.environ["SPILLWAY_SIM_MEMORY"] = "64M"
os.environ["SPILLWAY_SIM_DEVICES"] = "2"

INSTALLED = os.environ.get("SPILLWAY_TEST_INSTALLED") == "1"

if not INSTALLED:
    _build = pathlib.Path(os.environ.get("SPILLWAY_BUILD_DIR", ROOT / "build"))
    if not _build.is_absolute():
        _build = ROOT / _build
    sys.path.insert(0, str(_build / "python"))

import spillway  # noqa: E402

_where = pathlib.Path(spillway.__file__).resolve().parent
if not INSTALLED and _where != (_build / "python" / "spillway").resolve():
    raise RuntimeError(f"testing spillway from {_where}, not from the "
                       f"build tree {_build}")
if INSTALLED and ROOT in _where.parents:
    raise RuntimeError(f"SPILLWAY_TEST_INSTALLED=1, but spillway comes from "
                       f"the source tree: {_where}")

NEEDS_TESTING = ("needs spillway._spillway_testing, the test-only module, "
                 "which is built in the build tree only and never installed")


class _NeedsTesting(types.ModuleType):
    """Stands in for a test-only module in an installed package: each of its
    names is a function that skips the calling test.  Dunder names are
    missing, as on any module, so that tools probing sys.modules (inspect,
    warnings) see an ordinary module."""

    _sw_needs_testing = True

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def needs_testing(*args, **kwargs):
            pytest.skip(NEEDS_TESTING)
        needs_testing._sw_needs_testing = True
        return needs_testing


try:
    from spillway import _testing  # noqa: E402
    HAVE_TESTING = True
except ImportError:
    if not INSTALLED:
        raise
    for _name in ("spillway._testing", "spillway._spillway_testing"):
        sys.modules[_name] = _NeedsTesting(_name)
    from spillway import _testing  # noqa: E402
    HAVE_TESTING = False


# The python-ft suite (scripts/test-python-ft.sh) runs this suite on a
# free-threaded interpreter with SPILLWAY_EXPECT_NOGIL=1: importing spillway
# (the test-only modules too) must leave the GIL off, and so must the whole
# session (pytest_sessionfinish checks again: an import made by a test, of
# a spillway submodule or a plug-in, counts).
EXPECT_NOGIL = os.environ.get("SPILLWAY_EXPECT_NOGIL") == "1"


def _gil_enabled():
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    return True if is_enabled is None else is_enabled()


if EXPECT_NOGIL and _gil_enabled():
    raise RuntimeError("SPILLWAY_EXPECT_NOGIL=1, but the GIL is on after "
                       "importing spillway (a module without "
                       "Py_mod_gil = Py_MOD_GIL_NOT_USED, or not a "
                       "free-threaded interpreter)")


def pytest_sessionfinish(session, exitstatus):
    if EXPECT_NOGIL and _gil_enabled():
        mods = sorted(m for m in sys.modules if m.split(".")[0] == "spillway")
        print(f"\nSPILLWAY_EXPECT_NOGIL=1: the GIL was turned back on during "
              f"the session (spillway modules loaded: {', '.join(mods)})")
        session.exitstatus = 1


# An import of a test-only module in source text.
_IMPORTS_TESTING = re.compile(r"^\s*(from\s+spillway\s+import\s.*\b_testing\b"
                              r"|import\s+spillway\._(spillway_)?testing\b)",
                              re.M)


def _names_testing(func):
    """Whether func's code (nested functions included) names a test-only
    module or something imported from one."""
    func = inspect.unwrap(func)
    code = getattr(func, "__code__", None)
    glb = getattr(func, "__globals__", {})
    todo = [code] if code is not None else []
    while todo:
        co = todo.pop()
        for name in co.co_names:
            if name in ("_testing", "_spillway_testing") or \
                    getattr(glb.get(name), "_sw_needs_testing", False):
                return True
        # Code run in a subprocess (run_python's source strings) too.
        if any(isinstance(c, str) and _IMPORTS_TESTING.search(c)
               for c in co.co_consts):
            return True
        todo.extend(c for c in co.co_consts if isinstance(c, types.CodeType))
    return False


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "spills: needs the default device to spill (every device "
        "but host:0, whose memory is the host's own)")


def pytest_collection_modifyitems(config, items):
    """Tests marked `spills` are skipped, with the reason, where the
    default device never spills (host:0: docs/host.md); in an installed
    package, so are those that name the test-only module."""
    if not HAVE_TESTING:
        needs = pytest.mark.skip(reason=NEEDS_TESTING)
        here = pathlib.Path(__file__).parent
        for item in items:  # this folder's (tests/installed runs alongside)
            if here in pathlib.Path(item.path).parents and \
                    _names_testing(getattr(item, "function", None)):
                item.add_marker(needs)
    name = spillway.Device().name
    if not name.startswith("host:"):
        return
    skip = pytest.mark.skip(reason=f"{name} never spills: its memory is the "
                            f"host's own (docs/host.md)")
    for item in items:
        if "spills" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    return [f"spillway {spillway.__version__} from "
            f"{pathlib.Path(spillway.__file__).parent}, default device "
            f"{spillway.Device().name}"]


@pytest.fixture
def sim():
    """The small simulated device the pressure tests fill (sim:0), with an
    empty cache and no frees pending: frees are stream-ordered, and one
    still queued would make the first allocation of a test meet pressure
    (and run the collector) before the device catches up."""
    d = spillway.Device("sim:0")
    spillway.empty_cache(d)
    spillway.synchronize(d)
    if HAVE_TESTING:
        _testing.gc_backoff_reset()
    return d


@pytest.fixture
def sim1():
    """A second simulated device (sim:1)."""
    return spillway.Device("sim:1")


@pytest.fixture
def dev():
    """The device under test: $SPILLWAY_DEVICE or sim:0."""
    return spillway.Device()


@pytest.fixture(autouse=True)
def no_leaks():
    if not HAVE_TESTING:
        yield from _installed_reset()
        return
    _testing.gc_backoff_reset()
    _testing.track_arrays(True)
    gc_was_enabled = gc.isenabled()
    yield
    tracked = _testing.track_arrays(False) or []
    if gc_was_enabled:
        gc.enable()
    spillway.order_manager.clear()
    _testing.wait_host_tasks(timeout=60)
    _testing.collect()
    alive = [w() for w in tracked if w() is not None]
    problems = []
    if alive:
        problems.append(f"{len(alive)} array(s) still alive after the test: "
                        f"{alive[:5]}")
    del alive
    counts = _testing.object_counts()
    if counts["queues"] or counts["managers"] or counts["events"]:
        problems.append(f"queue objects still alive after the test: {counts}")
    for d in _testing.open_devices():
        spillway.set_memory_budget(None, d)
        spillway.synchronize(d)
        info = spillway.memory_info(d)
        if info.in_use or info.spilled:
            problems.append(f"{d.name}: in_use={info.in_use} "
                            f"spilled={info.spilled} after the test")
    _testing.gc_backoff_reset()
    assert not problems, "; ".join(problems)


def _installed_reset():
    """no_leaks without the test-only module: what each test leaves behind is
    undone (the collector re-enabled, work waited for, budgets removed on
    the suite's devices), nothing is checked."""
    gc_was_enabled = gc.isenabled()
    yield
    if gc_was_enabled:
        gc.enable()
    spillway.order_manager.clear()
    gc.collect()
    for spec in dict.fromkeys([spillway.Device().name, "sim:0", "sim:1"]):
        d = spillway.Device(spec)
        spillway.set_memory_budget(None, d)
        spillway.synchronize(d)
