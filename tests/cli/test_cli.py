"""Tests of the command-line program (tools/spillway/), run as a user would.

They run the built binary, $SPILLWAY_BUILD_DIR/spillway (default build/),
on a small simulated device (64 MiB, so the demo's arrays and runs stay
small and the whole file takes about a second), and check exit statuses
(0 done, 1 a failed call or check, 2 a usage error) and what is printed.

The help must be generated from the command table: the expected commands
and summaries are read from the table in tools/spillway/main.c itself, so
a command added there without showing up in `spillway --help` fails here.
"""

import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("SPILLWAY_BUILD_DIR", ROOT / "build"))
BINARY = BUILD / "spillway"
MAIN_C = ROOT / "tools" / "spillway" / "main.c"


def table():
    """(name, summary) of every row of the command table, in order."""
    text = MAIN_C.read_text()
    lit = r'((?:"(?:[^"\\]|\\.)*"\s*)+)'  # adjacent C string literals

    def join(literals):
        return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', literals))

    names = [join(m) for m in re.findall(r"\.name\s*=\s*" + lit, text)]
    summaries = [join(m) for m in re.findall(r"\.summary\s*=\s*" + lit, text)]
    assert names and len(names) == len(summaries), (
        "cannot read the command table in %s" % MAIN_C)
    return list(zip(names, summaries))


COMMANDS = table()
NAMES = [name for name, _ in COMMANDS]


def run(*args, env=None, timeout=60):
    """Run the program; returns the CompletedProcess (text, both streams)."""
    assert BINARY.exists(), "%s not built (make build)" % BINARY
    e = {k: v for k, v in os.environ.items() if not k.startswith("SPILLWAY_")}
    e["SPILLWAY_SIM_MEMORY"] = "64M"
    e.update(env or {})
    return subprocess.run([str(BINARY), *args], capture_output=True,
                          text=True, env=e, timeout=timeout)


def usage_error(p, *needles):
    """p is a usage error (status 2, nothing on stdout) whose first line of
    stderr holds every needle."""
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == ""
    first = p.stderr.splitlines()[0]
    assert first.startswith("spillway: "), first
    for needle in needles:
        assert needle in first, (needle, first)
    # The usage follows the message, so the user sees what would be right.
    assert "usage: spillway" in p.stderr


# --- help -------------------------------------------------------------------


def test_the_table_has_the_commands():
    assert set(NAMES) >= {"info", "devices", "demo", "tour", "help"}
    assert len(set(NAMES)) == len(NAMES)


@pytest.mark.parametrize("flag", ["--help", "-h", "help"])
def test_help_lists_every_command_with_its_summary(flag):
    p = run(flag)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    assert p.stdout.startswith("usage: spillway COMMAND")
    listed = p.stdout.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    lines = listed.splitlines()
    assert len(lines) == len(COMMANDS), listed
    for line, (name, summary) in zip(lines, COMMANDS):
        assert re.fullmatch(r"  %s( \S+)? +%s" % (re.escape(name),
                                                   re.escape(summary)),
                            line), (line, name, summary)


@pytest.mark.parametrize("name", NAMES)
def test_command_help(name):
    p = run(name, "--help")
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    assert p.stdout.startswith("usage: spillway %s" % name)
    assert "  -h, --help" in p.stdout
    # Three spellings, one text.
    assert run(name, "-h").stdout == p.stdout
    assert run("help", name).stdout == p.stdout


@pytest.mark.parametrize("args", [["--help"]] + [[n, "--help"] for n in NAMES])
def test_help_fits_a_terminal(args):
    for line in run(*args).stdout.splitlines():
        assert len(line) <= 79, line


def test_help_of_an_unknown_command():
    usage_error(run("help", "frob"), "help: unknown command 'frob'")


def test_version():
    p = run("--version")
    assert p.returncode == 0
    assert re.fullmatch(r"spillway \d+\.\d+\.\d+\n", p.stdout)


# --- usage errors -------------------------------------------------------------


def test_no_command():
    usage_error(run(), "no command given")


def test_unknown_command():
    usage_error(run("frob"), "unknown command 'frob'")


@pytest.mark.parametrize("name", ["demo", "tour"])
def test_unknown_option(name):
    usage_error(run(name, "--frob"), name + ":", "unknown option '--frob'")


@pytest.mark.parametrize("name", ["info", "devices"])
def test_unexpected_argument(name):
    usage_error(run(name, "extra"), name + ":",
                "unexpected argument 'extra'")


@pytest.mark.parametrize("name", ["demo", "tour"])
@pytest.mark.parametrize("size", ["12Q", "-1", "1.5.5G", "M", ""])
def test_malformed_size(name, size):
    # The library's size parser says what it could not read, quoting it.
    usage_error(run(name, "--budget", size), name + ": --budget:",
                '"%s"' % size)
    usage_error(run(name, "--budget=" + size), '"%s"' % size)


def test_budget_of_zero():
    usage_error(run("demo", "--budget", "0"), "--budget: '0'",
                "not a size above 0")


@pytest.mark.parametrize("args, needle", [
    (["demo", "--steps", "3"], "--steps: '3' is not a number from 4 to 4096"),
    (["demo", "--steps", "many"], "--steps: 'many'"),
    (["tour", "--rounds", "0"], "--rounds: '0' is not a number from 1"),
    (["demo", "--budget"], "--budget needs a value"),
    (["tour", "--device"], "--device needs a value"),
])
def test_bad_option_value(args, needle):
    usage_error(run(*args), needle)


# --- the commands -------------------------------------------------------------


def test_devices_lists_sim0():
    p = run("devices")
    assert p.returncode == 0, p.stderr
    assert "sim:0" in p.stdout.splitlines()


def test_devices_counts_simulated_devices():
    p = run("devices", env={"SPILLWAY_SIM_DEVICES": "2"})
    assert p.returncode == 0, p.stderr
    assert {"sim:0", "sim:1"} <= set(p.stdout.splitlines())


def test_info_prints_a_table():
    p = run("info")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert re.match(r"spillway \d+\.\d+\.\d+: \d+ devices?$", lines[0])
    header = [l for l in lines if l.startswith("DEVICE")]
    assert len(header) == 1
    assert header[0].split()[:9] == ["DEVICE", "TOTAL", "FREE", "IN", "USE",
                                     "CACHED", "PEAK", "BUDGET",
                                     "DESCRIPTION"]
    row = [l for l in lines if l.startswith("sim:0 ")]
    assert len(row) == 1
    # total and free are the simulated device's 64 MiB, nothing in use.
    assert row[0].split()[1:9] == ["64.00", "MiB", "64.00", "MiB", "0", "B",
                                   "0", "B"]


def test_info_lists_a_backend_that_does_not_load(tmp_path):
    """SPILLWAY_BACKENDS naming a path that does not load, and one that is
    no backend: each listed with the reason, the rest of the table as it
    was, and its devices refused by name."""
    notso = tmp_path / "libspillway_text.so"
    notso.write_text("not a shared object\n")
    env = {"SPILLWAY_BACKENDS":
           f"/nonexistent/libspillway_gone.so:{notso}:libm.so.6"}
    p = run("info", env=env)
    assert p.returncode == 0, p.stderr
    out = p.stdout + p.stderr
    assert re.search(r"libspillway_gone\.so: .*does not load", out), out
    assert re.search(r"libspillway_text\.so: .*does not load", out), out
    assert re.search(r"libm\.so\.6: .*exports no sw_backend_entry", out), out
    assert any(l.startswith("sim:0 ") for l in p.stdout.splitlines())
    p = run("demo", "--device", "gone:0", "--steps", "4", env=env)
    assert p.returncode != 0
    assert "libspillway_gone.so" in p.stderr, p.stderr


@pytest.mark.parametrize("budget", ["8M", "12.5MiB"])
def test_demo_with_a_budget(budget):
    p = run("demo", "--steps", "4", "--budget", budget)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "bit-identical: yes (5 arrays, 4 sums)" in out
    assert "demo finished: sim:0 closed, every output bit-identical" in out
    # Not a terminal: the progress shows as plain lines.
    assert "run 2: 8/8 steps" in out
    # The second row of the table: its budget, and it had to spill.
    row = [l for l in out.splitlines() if l.startswith("2 ")]
    assert len(row) == 1, out
    cols = row[0].split()
    shown = {"8M": "8.00", "12.5MiB": "12.50"}[budget]
    assert cols[1:3] == [shown, "MiB"], row
    assert int(cols[6]) > 0 and int(cols[7]) > 0, row  # spills, restores


def test_demo_refused_budget():
    # Below one array: run 2 cannot allocate; the failed call is named.
    p = run("demo", "--steps", "4", "--budget", "1M")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "expect run 2 to be refused" in p.stdout
    assert ("spillway: sw_buffer_alloc('demo/x[0]', 4.00 MiB) failed: "
            "SW_ERR_OOM") in p.stderr


def test_demo_on_too_small_a_device():
    p = run("demo", env={"SPILLWAY_SIM_MEMORY": "1M"})
    assert p.returncode == 1
    assert "too little for 33 arrays" in p.stderr


def test_demo_on_a_missing_device():
    p = run("demo", "--device", "nope:0")
    assert p.returncode == 1
    assert ('spillway: sw_device_open("nope:0") failed: SW_ERR_NO_DEVICE'
            in p.stderr)


@pytest.mark.parametrize("args", [[], ["--rounds", "1", "--budget", "2M"]])
def test_tour(args):
    p = run("tour", *args)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stderr == ""
    assert ("tour finished: every result verified, nothing left in use"
            in p.stdout)
    if args:
        assert "budget set to 2.00 MiB" in p.stdout


# --- top: another terminal's view ---------------------------------------------


def test_top_watches_a_running_program(tmp_path):
    stats = tmp_path / "stats.json"
    e = {k: v for k, v in os.environ.items() if not k.startswith("SPILLWAY_")}
    e.update(SPILLWAY_SIM_MEMORY="64M", SPILLWAY_STATS=str(stats))
    demo = subprocess.Popen([str(BINARY), "demo", "--steps", "256",
                             "--budget", "8M"], env=e,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        import time
        for _ in range(200):
            if stats.exists():
                break
            time.sleep(0.02)
        assert stats.exists(), "SPILLWAY_STATS was never written"
        p = run("top", "--once", str(stats))
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        assert lines[0].startswith("spillway top: %s, pid %d"
                                   % (stats, demo.pid))
        header = lines[2].split()
        for col in ("in", "use", "cached", "spilled", "budget", "spills"):
            assert col in header, header
        assert lines[3].split()[0] == "sim:0"
        # From the environment, and a few refreshes.
        p = run("top", "--count", "2", "--interval", "0.05",
                env={"SPILLWAY_STATS": str(stats)})
        assert p.returncode == 0, p.stderr
        assert p.stdout.count("spillway top:") == 2
    finally:
        demo.wait(timeout=120)
    assert demo.returncode == 0


def test_top_bad_input(tmp_path):
    usage_error(run("top"), "no stats file")
    usage_error(run("top", "--interval", "0", "x"), "--interval", "'0'")
    usage_error(run("top", "--bogus", "x"), "unknown option '--bogus'")
    p = run("top", "--once", str(tmp_path / "missing.json"))
    assert p.returncode == 1
    assert "missing.json" in p.stderr
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    p = run("top", "--once", str(other))
    assert p.returncode == 1
    assert "not a spillway stats file" in p.stderr


def test_plot_needs_a_trace():
    usage_error(run("plot"), "no TRACE file given")
    p = run("plot", "--help")
    assert p.returncode == 0
    assert "matplotlib" in p.stdout


# --- the demo's measurements ------------------------------------------------


def test_demo_json():
    import json
    p = run("demo", "--steps", "8", "--json", "--repeat", "2")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # nothing but the object on stdout
    assert doc["device"] == "sim:0" and doc["steps"] == 8
    plain, budgeted = doc["runs"]
    assert plain["budget"] == 0 and budgeted["budget"] > 0
    assert budgeted["spills"] > 0 and budgeted["restores"] > 0
    assert budgeted["peak"] <= budgeted["budget"]
    assert doc["memcpy_bytes_per_s"] > 0 and doc["ratio"] > 0
    assert doc["bit_identical"] is True
    # Bytes moved against the floor: what does not fit goes out and comes
    # back once, no less (every activation is read again going backward).
    assert doc["moved_bytes"] == budgeted["out_bytes"] + budgeted["in_bytes"]
    assert doc["floor_bytes"] == 2 * (doc["live_bytes"] - budgeted["budget"])
    assert doc["moved_over_floor"] == pytest.approx(
        doc["moved_bytes"] / doc["floor_bytes"], abs=1e-4)
    assert doc["moved_over_floor"] >= 0.9999


def test_demo_host_budget_in_every_repeat():
    """--host-budget holds for every repeat of run 2, not its first alone,
    and the figures printed are of such a run (the fastest repeat): each
    repeat wrote to disk."""
    import json
    p = run("demo", "--steps", "8", "--json", "--repeat", "3",
            "--host-budget", "quarter", timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    plain, budgeted = doc["runs"]
    hb = budgeted["host_budget"]
    assert hb == (doc["live_bytes"] - budgeted["budget"]) // 4 > 0
    assert plain["host_budget"] == 0
    assert len(budgeted["repeats"]) == len(plain["repeats"]) == 3
    for rep in budgeted["repeats"]:
        assert rep["host_budget"] == hb, budgeted["repeats"]
        assert rep["disk_out_bytes"] > 0 and rep["disk_in_bytes"] > 0, rep
    kept = min(budgeted["repeats"], key=lambda rep: rep["wall_s"])
    assert budgeted["wall_s"] == pytest.approx(kept["wall_s"], abs=2e-6)
    assert budgeted["disk_out_bytes"] == kept["disk_out_bytes"] > 0
    assert doc["moved_bytes"] == kept["moved_bytes"]
    # The table's run, too: its disk line whichever repeat was kept.
    p = run("demo", "--steps", "8", "--repeat", "2", "--host-budget",
            "quarter", timeout=120)
    assert p.returncode == 0, p.stderr
    assert "disk (host budget 5.00 MiB): wrote" in p.stdout, p.stdout


def test_demo_advice_moves_less():
    """The backward pass advises each consumed activation cold: at the turn
    the consumed ones go (one copy out each) instead of those still to come
    (out and back in).  Bytes moved are counted, not timed: the same every
    run."""
    import json
    moved = {}
    for flag in ([], ["--no-advise"]):
        p = run("demo", "--json", "--repeat", "1", *flag, timeout=300)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert doc["bit_identical"] is True
        moved[bool(flag)] = doc["moved_over_floor"]
    assert moved[False] < moved[True]
    assert moved[False] <= 1.05


def test_demo_sweep():
    p = run("demo", "--sweep", "--repeat", "1", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [l.split() for l in p.stdout.splitlines()
            if l.split() and l.split()[0] in ("32", "128", "512")]
    assert len(rows) >= 6, p.stdout
    for r in rows:
        assert float(r[-1]) > 0  # the ratio
        assert float(r[-5]) >= 0.9999  # bytes moved over their floor
    assert "demo finished" in p.stdout


def test_demo_trace(tmp_path):
    import json
    out = tmp_path / "new"  # made by the demo
    p = run("demo", "--steps", "6", "--repeat", "1", "--trace",
            str(out), env={"PYTHON": os.environ.get("PYTHON", "python3")})
    assert p.returncode == 0, p.stdout + p.stderr
    for run_no in (1, 2):
        doc = json.loads((out / ("run%d.json" % run_no)).read_text())
        names = {e["name"] for e in doc["traceEvents"]}
        assert "memory" in names
        if run_no == 2:
            assert "spill" in names
    usage_error(run("demo", "--sweep", "--trace", str(tmp_path)), "--trace")
    p = run("demo", "--trace", str(tmp_path / "no" / "such" / "dir"))
    assert p.returncode == 2 and "cannot make" in p.stderr, p.stderr
    usage_error(run("demo", "--repeat", "0"), "--repeat")


SOAK = BUILD / "tests" / "soak" / "spillway-soak"


@pytest.mark.parametrize("args, rc", [(["--help"], 0), (["-h"], 0),
                                      (["--device"], 2), (["--bogus", "1"], 2)])
def test_soak_usage(args, rc):
    """The soak answers --help and refuses a lone or unknown option at once
    (a lone --help used to start a 60 s soak)."""
    if not SOAK.exists():
        pytest.skip(f"no {SOAK}")
    p = subprocess.run([str(SOAK), *args], capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == rc, p.stderr
    out = p.stdout if rc == 0 else p.stderr
    assert "usage:" in out and "--duration" in out
