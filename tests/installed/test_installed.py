"""The installed package, as a user has it: run by scripts/test-installed.sh
(`make test`'s `installed` suite) with the Python of a fresh virtual
environment that holds the wheel built from the sdist, from a folder
outside any source tree.  This file lies in the unpacked sdist.

Every check runs in a subprocess of that Python, from an empty folder, with
no PYTHONPATH: what `import spillway` finds there is the installed package
and nothing else.  $SPILLWAY_INSTALLED_PKG_CONFIG_PATH names the pkgconfig
folder of the C library that `meson install` put in a temporary prefix
(the C tests skip without it).
"""

import importlib.metadata
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sysconfig.get_path("scripts"))
PKG_CONFIG_PATH = os.environ.get("SPILLWAY_INSTALLED_PKG_CONFIG_PATH")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "SPILLWAY_BUILD_DIR",
                        "SPILLWAY_DEVICE", "SPILLWAY_TEST_INSTALLED")}
    env["PATH"] = str(BIN) + os.pathsep + env.get("PATH", "")
    # (tests/python's conftest, collected in the same run, sets smaller ones)
    env.update(SPILLWAY_SIM_MEMORY="256M", SPILLWAY_SIM_DEVICES="2")
    env.update(extra)
    return env


def run(argv, cwd, timeout=300, **env):
    """Run argv (a list, or Python code for this venv's interpreter) in cwd;
    its output, or an AssertionError with it."""
    if isinstance(argv, str):
        argv = [sys.executable, "-c", textwrap.dedent(argv)]
    p = subprocess.run([str(a) for a in argv], cwd=cwd, env=clean_env(**env),
                       capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{argv} exited {p.returncode}:\n{out[-4000:]}"
    return out


def test_spillway_is_the_installed_package(tmp_path):
    out = run("""
        import os, sys, sysconfig, spillway
        site = os.path.realpath(sysconfig.get_path("platlib"))
        here = os.path.realpath(spillway.__file__)
        assert sys.prefix != sys.base_prefix, "not in a virtual environment"
        assert here.startswith(site + os.sep), (here, site)
        assert not any(os.path.isfile(os.path.join(p, "spillway",
                                                   "__init__.py"))
                       for p in sys.path if p and not
                       os.path.realpath(p).startswith(site)), sys.path
        for test_only in ("spillway._spillway_testing", "spillway._testing"):
            try:
                __import__(test_only)
            except ImportError:
                pass
            else:
                raise AssertionError(test_only + " is installed")
        print(spillway.__version__, here)
        """, tmp_path)
    assert str(SRC) not in out


# Each in a fresh process: `import distributed` loads the dask.sizeof entry
# point, which imports spillway while distributed is still initializing.
@pytest.mark.parametrize("code", [
    "import distributed",
    "import spillway; import distributed",
    "import distributed; import spillway",
    "import dask; import distributed",
    "import dask.sizeof; import distributed",
    "import spillway.dask; import distributed",
    "from distributed import Client, LocalCluster",
])
def test_import_distributed_in_any_order(tmp_path, code):
    run(code + """
import sys
assert "spillway" in sys.modules, "the dask.sizeof entry point did not run"
from distributed.protocol import dask_deserialize
import spillway
assert dask_deserialize.dispatch(spillway.Array) is not None
""", tmp_path)


def test_sizeof_entry_point(tmp_path):
    eps = [ep for ep in importlib.metadata.entry_points(group="dask.sizeof")
           if ep.name == "spillway"]
    assert [ep.value for ep in eps] == ["spillway._dask_sizeof:register"]
    run("""
        import sys
        from dask.sizeof import sizeof
        import spillway as sw
        a = sw.zeros((256, 1024), dtype="float32")
        assert sizeof(a) == a.nbytes == 1 << 20, sizeof(a)
        assert sizeof(a[:64]) == 1 << 18
        for m in ("distributed", "spillway.dask"):
            assert m not in sys.modules, m + " was imported"
        """, tmp_path)


def test_dask_array_reaches_a_process_without_spillway_dask(tmp_path):
    """A worker without the plugin has imported spillway (the entry point)
    and distributed, never spillway.dask; it reads what a worker with it
    sends through the "dask" serializer family."""
    msg = tmp_path / "msg.pickle"
    run(f"""
        import pickle, numpy as np, spillway as sw, spillway.dask
        from distributed.protocol import serialize
        a = sw.asarray(np.arange(1000, dtype=np.int64), tag="sent")
        header, frames = serialize(a, serializers=["dask"])
        assert header["serializer"] == "dask", header
        with open({str(msg)!r}, "wb") as f:
            pickle.dump((header, [bytes(x) for x in frames]), f)
        """, tmp_path)
    for first in ("import distributed", "import spillway, distributed"):
        run(first + f"""
import pickle, sys
import numpy as np
from distributed.protocol import deserialize
with open({str(msg)!r}, "rb") as f:
    header, frames = pickle.load(f)
b = deserialize(header, frames, deserializers=["dask"])
import spillway
assert type(b) is spillway.Array and b.tag == "sent", b
assert (b.numpy() == np.arange(1000)).all()
""", tmp_path)


def test_spawned_worker_starts(tmp_path):
    """A plain LocalCluster's worker processes (no plugin) start, make
    arrays and send them back."""
    run("""
        import numpy as np
        import spillway as sw
        from distributed import Client, LocalCluster

        def make(i):
            return sw.asarray(np.arange(10, dtype=np.float32) + i)

        if __name__ == "__main__":
            with LocalCluster(n_workers=1, threads_per_worker=1,
                              processes=True, dashboard_address=":0") as c, \\
                    Client(c) as client:
                got = client.gather(client.map(make, range(3)))
                assert [float(sw.sum(a)) for a in got] == [45.0, 55.0, 65.0]
                mods = client.run(lambda: __import__("sys").modules.keys()
                                  & {"spillway", "spillway.dask"})
                print(mods)
        """, tmp_path, timeout=600)


def test_example_dask_pipeline(tmp_path):
    out = run([sys.executable, SRC / "examples" / "dask_pipeline.py",
               "--blocks", "12", "--block-mib", "1", "--budget", "4M"],
              tmp_path, timeout=600)
    assert "match NumPy bit for bit" in out, out
    assert " spills" in out


def test_example_quickstart(tmp_path):
    """examples/quickstart.py: arrays under a budget, spills, the summary,
    the history and its picture (matplotlib: the plot extra)."""
    out = run([sys.executable, SRC / "examples" / "quickstart.py",
               "--out", tmp_path], tmp_path)
    assert "ok: every result matched NumPy" in out, out
    assert "spillway memory summary" in out and " spills" in out, out
    assert (tmp_path / "quickstart-memory.json").stat().st_size > 0
    png = (tmp_path / "quickstart-memory.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n"), png[:16]


def test_example_pyopencl_kernels(tmp_path):
    """examples/pyopencl_kernels.py: the user's own PyOpenCL kernel on
    spillway's memory under a budget, on opencl:0 (PoCL), or a skip."""
    out = run([sys.executable, SRC / "examples" / "pyopencl_kernels.py"],
              tmp_path)
    if out.startswith("skipped:"):
        pytest.skip(out.strip())
    assert "ok: every layer matched NumPy bit for bit" in out, out
    assert " spills" in out


def test_example_pyopencl_kernels_without_opencl(tmp_path):
    """No OpenCL platform (the ICD loader pointed at an empty folder): the
    example says so and exits 0."""
    icd = tmp_path / "no-icds"
    icd.mkdir()
    out = run([sys.executable, SRC / "examples" / "pyopencl_kernels.py"],
              tmp_path, OCL_ICD_VENDORS=str(icd))
    assert out.startswith("skipped:") and "OpenCL" in out, out


def shipped_programs():
    """The programs the wheel installs into bin/: its console and GUI
    entry points and its scripts (the C command-line program)."""
    dist = importlib.metadata.distribution("spillway")
    names = {ep.name for ep in dist.entry_points
             if ep.group in ("console_scripts", "gui_scripts")}
    for f in dist.files or ():
        p = pathlib.Path(dist.locate_file(f)).resolve()
        if p.parent == BIN.resolve():
            names.add(p.name)
    return sorted(names)


def test_the_wheel_ships_the_command_line_program():
    assert shipped_programs() == ["spillway"]


@pytest.mark.parametrize("name", shipped_programs())
def test_shipped_program_runs(tmp_path, name):
    prog = BIN / name
    assert os.access(prog, os.X_OK), prog
    out = run([prog, "--help"], tmp_path)
    assert out.strip()


def test_spillway_command(tmp_path):
    prog = shutil.which("spillway", path=str(BIN))
    assert prog == str(BIN / "spillway"), prog
    assert "sim:0" in run([prog, "info"], tmp_path)
    out = run([prog, "demo", "--steps", "8"], tmp_path, timeout=600)
    assert "every output bit-identical" in out, out


def pkg_config(*args):
    env = dict(os.environ, PKG_CONFIG_PATH=PKG_CONFIG_PATH)
    return subprocess.run(["pkg-config", *args, "spillway"], env=env,
                          capture_output=True, text=True,
                          check=True).stdout.split()


needs_prefix = pytest.mark.skipif(
    not PKG_CONFIG_PATH, reason="$SPILLWAY_INSTALLED_PKG_CONFIG_PATH names no "
    "installed C library (scripts/test-installed.sh sets it)")


@needs_prefix
def test_c_program_with_pkg_config(tmp_path):
    import spillway
    assert pkg_config("--modversion") == [spillway.__version__]
    cc = os.environ.get("CC", "cc")
    libdir = pkg_config("--variable=libdir")[0]
    src = SRC / "tests" / "installed" / "use_spillway.c"
    # Only what pkg-config says: the library is found at run time through
    # LD_LIBRARY_PATH, as its prefix is not one of the loader's.
    run([cc, "-std=c11", "-Wall", "-Werror", src, *pkg_config("--cflags",
         "--libs"), "-o", tmp_path / "plain"], tmp_path)
    out = run([tmp_path / "plain"], tmp_path, LD_LIBRARY_PATH=libdir)
    assert out.startswith("ok:"), out
    # With the rpath (README): no LD_LIBRARY_PATH needed.
    run([cc, "-std=c11", src, *pkg_config("--cflags", "--libs"),
         f"-Wl,-rpath,{libdir}", "-o", tmp_path / "rpath"], tmp_path)
    assert run([tmp_path / "rpath"], tmp_path).startswith("ok:")


@needs_prefix
def test_example_quickstart_c_with_pkg_config(tmp_path):
    """examples/quickstart.c, built as its comment says: pkg-config alone,
    -Wall -Wextra -Werror, the rpath for the temporary prefix."""
    libdir = pkg_config("--variable=libdir")[0]
    cc = os.environ.get("CC", "cc")
    run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror",
         SRC / "examples" / "quickstart.c",
         *pkg_config("--cflags", "--libs"), f"-Wl,-rpath,{libdir}",
         "-o", tmp_path / "quickstart"], tmp_path)
    out = run([tmp_path / "quickstart"], tmp_path)
    assert "ok: spilled, restored, pinned and checked" in out, out


@needs_prefix
def test_installed_c_files():
    prefix = pathlib.Path(pkg_config("--variable=prefix")[0])
    include = pathlib.Path(pkg_config("--variable=includedir")[0])
    libdir = pathlib.Path(pkg_config("--variable=libdir")[0])
    assert (include / "spillway.h").is_file()
    assert (libdir / "libspillway.a").is_file()
    assert (libdir / "libspillway.so").exists()
    assert (prefix / "bin" / "spillway").is_file()


def test_pickle_round_trip_between_processes(tmp_path):
    """An array pickled by one installed process unpickles in another."""
    path = tmp_path / "a.pickle"
    run(f"""
        import pickle, spillway as sw
        with open({str(path)!r}, "wb") as f:
            pickle.dump(sw.full((3, 4), 7, dtype="int32", tag="p"), f)
        """, tmp_path)
    run(f"""
        import pickle
        with open({str(path)!r}, "rb") as f:
            a = pickle.load(f)
        assert a.tag == "p" and a.shape == (3, 4) and int(a.sum()) == 84
        """, tmp_path)
