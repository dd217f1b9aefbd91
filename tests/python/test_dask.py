"""spillway under Dask (spillway.dask, docs/dask.md): sizes, serializers
from host copies, the worker plugin, the preload, LocalSpillwayCluster, on
real distributed.LocalClusters with worker processes and with threads.

Costs: a cluster of worker processes takes seconds to start on a loaded
2-core machine, so one is shared by the module (`procs`), with 2 workers
on sim:0 and sim:1 (the suite's 2 simulated devices of 64 MiB, inherited
from conftest's environment), an 8 MiB budget each, and
$SPILLWAY_DASK_CLOSE_REPORT set so that each worker process writes its
device's figures when it closes: the fixture checks that every worker
closed its device with nothing in use.  Clusters of threads are cheap and
made per test; their workers run in this process, so the suite's leak
check sees their arrays too.  Time limits are generous; nothing is timed.

The tests of worker processes run on the `python` suite only: under ASan
every worker process loads the sanitizer runtimes (tens of seconds each on
CI), and with another default device (python-opencl, python-host) they
would rerun the same sim workers; the thread tests run everywhere.
"""

import gc
import json
import os
import pathlib
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest

import spillway as sw

distributed = pytest.importorskip("distributed")
import dask  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402
from distributed.protocol import deserialize, serialize  # noqa: E402

import spillway.dask as sd  # noqa: E402

MiB = 1 << 20
BUDGET = 8 * MiB
# float32 elements: 2 MiB arrays, four fit a budget (room for an operation's
# operands and result while the worker receives another array).
N = MiB // 2

_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
_NOT_SIM = not sw.Device().name.startswith("sim:")
procs_only_here = pytest.mark.skipif(
    _ASAN or _NOT_SIM,
    reason="worker processes are tested in the python suite only: under "
    "ASan each loads the sanitizer runtimes (slow on CI); on another "
    "default device they would rerun the same sim:k workers")

CLUSTER_ARGS = dict(dashboard_address=":0", silence_logs=False)


def settle(client, timeout=120):
    """Wait until the workers hold no data: releasing futures is
    asynchronous, and the suite's leak check runs right after a test."""
    deadline = time.monotonic() + timeout
    while True:
        held = client.run(lambda dask_worker: len(dask_worker.data))
        if not any(held.values()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"workers still hold data: {held}")
        time.sleep(0.05)


def assert_reason(exc, pattern):
    """distributed says "Worker failed to start" and chains the reason."""
    import re
    chain = []
    while exc is not None and len(chain) < 10:
        chain.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    assert any(re.search(pattern, m) for m in chain), chain
    assert any("spillway on Dask worker" in m for m in chain), chain


def make(i, n=N, device=None):
    """A task: a float32 array of n elements i, i+1, ... on the worker."""
    if device is None:
        device = sd.worker_device()
    return sw.asarray(np.arange(n, dtype=np.float32) + i, device=device,
                      tag=f"make{i}")


def expected(i, n=N):
    return np.arange(n, dtype=np.float32) + i


def double(a):
    return a * 2


def where(a):
    return a.device.name, a.is_spilled


def restores(dask_worker):
    return sd.worker_stats(dask_worker)["restores"]


# ---------------------------------------------------------------------------
# Without a cluster
# ---------------------------------------------------------------------------


def test_import_spillway_does_not_import_dask():
    code = ("import sys, spillway; "
            "assert 'dask' not in sys.modules, 'dask imported'; "
            "assert 'distributed' not in sys.modules, 'distributed imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))


def test_a_process_with_distributed_registers_on_import():
    """A worker without the plugin imports spillway when it unpickles the
    Array type: spillway then registers the serializers itself, so it reads
    what a worker with the plugin sends."""
    code = ("import distributed, spillway, sys; "
            "from distributed.protocol import dask_deserialize; "
            "dask_deserialize.dispatch(spillway.Array); "
            "assert 'spillway.dask' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))


def test_worker_device_outside_a_worker_is_the_default():
    assert sd.worker_device() == sw.Device()
    assert sd.worker_stats() == {}


def test_sizeof_is_the_arrays_bytes(sim):
    from dask.sizeof import sizeof
    a = sw.zeros((1024, 1024), dtype="float32", device=sim)
    v = a[:256]
    assert sizeof(a) == a.nbytes == 4 * MiB
    assert sizeof(v) == MiB
    sw.set_memory_budget(3 * MiB, sim)
    b = sw.zeros(2 * MiB, dtype="uint8", device=sim)
    assert a.is_spilled
    assert sizeof(a) == 4 * MiB  # spilled: the same bytes, on the host
    assert sizeof([a, b]) >= 6 * MiB


@pytest.mark.spills
def test_serializers_send_a_spilled_array_from_its_host_copy(dev):
    a = sw.asarray(np.arange(N, dtype=np.float32), device=dev, tag="x")
    resident = serialize(a, serializers=["dask"])
    assert resident[0]["serializer"] == "dask"
    assert sum(memoryview(f).nbytes for f in resident[1]) == a.nbytes
    sw.set_memory_budget(a.nbytes + MiB, dev)
    b = sw.zeros(2 * MiB, dtype="uint8", device=dev)  # pushes a out
    assert a.is_spilled
    before = sw.memory_info(dev).restores
    header, frames = serialize(a, serializers=["dask"])
    assert a.is_spilled and sw.memory_info(dev).restores == before
    sw.set_memory_budget(None, dev)
    for h, f in [resident, (header, frames)]:
        c = deserialize(h, f)
        assert isinstance(c, sw.Array) and c.device == dev
        assert c.tag == "x" and c.shape == a.shape and c.dtype == a.dtype
        np.testing.assert_array_equal(c.numpy(), expected(0))
        del c
    v = a[10:20]
    np.testing.assert_array_equal(
        deserialize(*serialize(v, serializers=["dask"])).numpy(),
        expected(0)[10:20])
    del b


def test_serializers_every_dtype_and_shape(dev):
    for dt in ["bool", "int8", "uint16", "float16", "int64", "complex128"]:
        x = (np.arange(24) % 2).astype(dt).reshape(2, 3, 4)
        a = sw.asarray(x, device=dev)
        b = deserialize(*serialize(a, serializers=["dask"]))
        assert b.dtype == a.dtype and b.shape == (2, 3, 4)
        np.testing.assert_array_equal(b.numpy(), x)
    z = sw.zeros((), device=dev)
    assert deserialize(*serialize(z, serializers=["dask"])).shape == ()
    e = sw.zeros((0, 5), device=dev)
    assert deserialize(*serialize(e, serializers=["dask"])).shape == (0, 5)


def test_plugin_arguments_are_checked_at_once():
    with pytest.raises(TypeError, match="budget= takes"):
        sd.SpillwayPlugin(budget=[1])
    with pytest.raises(TypeError, match="host_pool= takes"):
        sd.SpillwayPlugin(host_pool=0.5)
    with pytest.raises(TypeError, match="host_budget= takes.*machine"):
        sd.SpillwayPlugin(host_budget=[1])
    with pytest.raises(TypeError, match="device= takes"):
        sd.SpillwayPlugin(device=3)
    with pytest.raises(ValueError, match="kind such as"):
        sd.LocalSpillwayCluster(device="sim:0")
    with pytest.raises(ValueError, match="no spillway device of kind"):
        sd.LocalSpillwayCluster(device="nosuch")
    with pytest.raises(ValueError, match="SPILLWAY_SIM_DEVICES"):
        sd.LocalSpillwayCluster(n_workers=3, device="sim")
    p = pickle.loads(pickle.dumps(sd.SpillwayPlugin("sim:1", "4M", "1M",
                                                    "8M")))
    assert (p.device_spec, p.budget, p.host_pool, p.host_budget) == \
        ("sim:1", "4M", "1M", "8M")
    assert sd.SpillwayPlugin(device=sw.Device("sim:1")).device_spec == "sim:1"


def test_plugin_picks_one_device_per_worker():
    p = sd.SpillwayPlugin(device="sim")
    assert p.spec_for(0) == "sim:0" and p.spec_for("1") == "sim:1"
    assert sd.SpillwayPlugin(device="sim:1").spec_for(0) == "sim:1"
    with pytest.raises(ValueError, match="would take sim:2"):
        p.spec_for(2)


# ---------------------------------------------------------------------------
# Clusters of threads (this process)
# ---------------------------------------------------------------------------


@pytest.fixture
def threads():
    with sd.LocalSpillwayCluster(budget=BUDGET, processes=False,
                                 **CLUSTER_ARGS) as cluster, \
            Client(cluster) as client:
        yield client
        settle(client)
    gc.collect()


def test_threads_cluster_gives_each_worker_its_device(threads):
    stats = threads.run(sd.worker_stats)
    assert sorted(s["device"] for s in stats.values()) == ["sim:0", "sim:1"]
    assert all(s["budget"] == BUDGET for s in stats.values())
    futs = [threads.submit(make, i, pure=False) for i in range(6)]
    got = threads.gather(futs)
    for i, a in enumerate(got):
        np.testing.assert_array_equal(a.numpy(), expected(i))
    del got, futs


def test_threads_cluster_closes_its_devices_empty():
    with sd.LocalSpillwayCluster(budget=BUDGET, processes=False,
                                 **CLUSTER_ARGS) as cluster, \
            Client(cluster) as client:
        devs = {s["device"]: None for s in client.run(sd.worker_stats).values()}
        fut = client.submit(make, 0, pure=False)
        assert fut.result().shape == (N,)
        held = [sw.Device(name) for name in devs]
    # The workers let go of their arrays and closed their devices.
    assert all(d.closed for d in held)
    del fut
    gc.collect()


def test_register_plugin_on_a_running_cluster(sim):
    with LocalCluster(n_workers=1, processes=False, threads_per_worker=1,
                      **CLUSTER_ARGS) as cluster, Client(cluster) as client:
        assert list(client.run(sd.worker_stats).values()) == [{}]
        client.register_plugin(sd.SpillwayPlugin(device="sim:1",
                                                 budget="4M",
                                                 host_pool="2M",
                                                 host_budget="8M"))
        (stats,) = client.run(sd.worker_stats).values()
        assert stats["device"] == "sim:1" and stats["budget"] == 4 * MiB
        assert stats["host_pool_limit"] == 2 * MiB
        assert stats["host_budget"] == 8 * MiB
        with pytest.raises(ValueError, match="no backend named 'bogus'"):
            client.register_plugin(sd.SpillwayPlugin(device="bogus:0"),
                                   name="bad")


@pytest.mark.parametrize("plugin, message", [
    (dict(device="sim:7"), r"sim:7: sim has 2 devices"),
    (dict(device="sim:0", budget="12 parsecs"), r"cannot read \"12 parsecs\""),
    (dict(device="sim:0", budget="1G"), r"larger than sim:0"),
    (dict(device="sim:0", budget=1.5), r"fraction of the device"),
])
def test_bad_configuration_fails_the_worker_start(plugin, message):
    with pytest.raises(Exception) as info:
        with LocalCluster(n_workers=1, processes=False, **CLUSTER_ARGS,
                          plugins=[sd.SpillwayPlugin(**plugin)]):
            pass
    assert_reason(info.value, message)
    del info
    gc.collect()


def test_preload_reads_dasks_config():
    with dask.config.set({"spillway.device": "sim:1",
                          "spillway.budget": "4M"}):
        with LocalCluster(n_workers=1, processes=False, threads_per_worker=1,
                          preload=["spillway.dask"], **CLUSTER_ARGS) as c, \
                Client(c) as client:
            (stats,) = client.run(sd.worker_stats).values()
    assert stats["device"] == "sim:1" and stats["budget"] == 4 * MiB


# ---------------------------------------------------------------------------
# A cluster of worker processes, shared by the module
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def procs(tmp_path_factory):
    if _ASAN or _NOT_SIM:
        pytest.skip("worker processes: python suite only (module docstring)")
    reports = tmp_path_factory.mktemp("close-reports")
    old = os.environ.get("SPILLWAY_DASK_CLOSE_REPORT")
    os.environ["SPILLWAY_DASK_CLOSE_REPORT"] = str(reports)
    try:
        with sd.LocalSpillwayCluster(budget=BUDGET, processes=True,
                                     **CLUSTER_ARGS) as cluster, \
                Client(cluster, timeout="120s") as client:
            yield client
    finally:
        if old is None:
            del os.environ["SPILLWAY_DASK_CLOSE_REPORT"]
        else:
            os.environ["SPILLWAY_DASK_CLOSE_REPORT"] = old
    # Each worker process (the ones restarted by the tests too) closed its
    # device with nothing in use or spilled.
    found = [json.loads(p.read_text()) for p in reports.glob("*.json")]
    assert {r["device"] for r in found} == {"sim:0", "sim:1"}, found
    for r in found:
        assert r["closed"] and r["in_use"] == 0 and r["spilled"] == 0, r


def run_stats(client, n=2, timeout=120):
    """client.run(worker_stats) once n workers are up: after a restart or a
    killed worker, a broadcast can still meet the old worker's address."""
    from distributed.comm.core import CommClosedError
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.wait_for_workers(n, timeout=timeout)
            stats = client.run(sd.worker_stats)
            if len(stats) == n and all(stats.values()):
                return stats
        except (CommClosedError, OSError):
            pass
        assert time.monotonic() < deadline, "workers did not come back"
        time.sleep(0.2)


def workers_by_device(client):
    return {s["device"]: addr for addr, s in run_stats(client).items()}


@procs_only_here
def test_procs_gather_resident_and_spilled_arrays(procs):
    w = workers_by_device(procs)
    assert sorted(w) == ["sim:0", "sim:1"]
    a0 = w["sim:0"]
    # Eight 2 MiB arrays on one worker with an 8 MiB budget: some spill.
    futs = [procs.submit(make, i, workers=[a0], pure=False)
            for i in range(8)]
    states = procs.submit(lambda *xs: [where(x) for x in xs], *futs,
                          workers=[a0]).result(timeout=120)
    assert all(dev == "sim:0" for dev, _ in states)
    assert sum(spilled for _, spilled in states) >= 1
    before = procs.run(restores, workers=[a0])[a0]
    got = procs.gather(futs)
    # Sent from the host copies: no restore on the worker.
    assert procs.run(restores, workers=[a0])[a0] == before
    for i, a in enumerate(got):
        assert isinstance(a, sw.Array)
        np.testing.assert_array_equal(a.numpy(), expected(i))
    del got, futs
    settle(procs)


@procs_only_here
def test_procs_task_needs_an_array_from_another_worker(procs):
    w = workers_by_device(procs)
    src = procs.submit(make, 5, workers=[w["sim:0"]], pure=False)
    out = procs.submit(double, src, workers=[w["sim:1"]], pure=False)
    dev, _ = procs.submit(where, out, workers=[w["sim:1"]]).result(
        timeout=120)
    assert dev == "sim:1"  # landed on the receiving worker's device
    np.testing.assert_array_equal(out.result(timeout=120).numpy(),
                                  expected(5) * 2)
    del src, out
    settle(procs)


@procs_only_here
def test_procs_budgets_hold_and_metrics_show(procs):
    futs = [procs.submit(make, i, pure=False) for i in range(16)]
    total = procs.submit(lambda *xs: float(sum(sw.sum(x) for x in xs)),
                         *futs)
    want = float(sum(expected(i).sum(dtype=np.float64) for i in range(16)))
    assert total.result(timeout=300) == want
    stats = run_stats(procs)
    for s in stats.values():
        assert s["budget"] == BUDGET
        # max_reserved: the most in_use + cached held at once since setup.
        assert s["max_reserved"] <= BUDGET, s
    assert sum(s["spills"] for s in stats.values()) > 0
    # The worker metrics reach the scheduler with the next heartbeat.
    deadline = time.monotonic() + 120
    while True:
        metrics = [ws["metrics"] for ws in
                   procs.scheduler_info()["workers"].values()]
        if all("spillway_spills" in m for m in metrics) and \
                sum(m["spillway_spills"] for m in metrics) > 0:
            break
        assert time.monotonic() < deadline, metrics
        time.sleep(0.2)
    for m in metrics:
        for key in ["spillway_in_use", "spillway_spilled", "spillway_peak",
                    "spillway_restores", "spillway_spilled_bytes",
                    "spillway_restored_bytes", "spillway_gc_runs",
                    "spillway_budget", "spillway_device"]:
            assert key in m
        assert m["spillway_budget"] == BUDGET
    del futs, total
    settle(procs)


@procs_only_here
def test_procs_example_pipeline_4x_the_budgets(procs):
    """examples/dask_pipeline.py's computation, its datasets 4 x the sum of
    the workers' budgets, matches NumPy bit for bit."""
    examples = str(pathlib.Path(__file__).resolve().parents[2] /
                   "examples")

    def add_path(dask_worker=None):
        if examples not in sys.path:
            sys.path.insert(0, examples)

    def drop_path(dask_worker=None):
        while examples in sys.path:
            sys.path.remove(examples)

    add_path()
    procs.run(add_path)
    try:
        import dask_pipeline
        blocks = -(-4 * 2 * BUDGET // (N * 12))
        rep = dask_pipeline.run(procs, blocks, N)
    finally:
        procs.run(drop_path)
        drop_path()
        sys.modules.pop("dask_pipeline", None)
    assert rep["data_bytes"] >= 4 * 2 * BUDGET
    assert rep["matched"] is True
    for w in rep["workers"].values():
        assert w["max_reserved"] <= BUDGET
    assert sum(w["spills"] for w in rep["workers"].values()) > 0
    assert sum(w["restores"] for w in rep["workers"].values()) > 0
    settle(procs)


def _slow_double(a):
    time.sleep(0.2)
    return a * 2


@procs_only_here
def test_procs_worker_killed_mid_run(procs):
    w = workers_by_device(procs)
    victim = w["sim:1"]
    pid = procs.run(os.getpid, workers=[victim])[victim]
    srcs = [procs.submit(make, i, pure=False) for i in range(8)]
    outs = [procs.submit(_slow_double, s, pure=False) for s in srcs]
    time.sleep(0.5)
    os.kill(pid, 9)
    for i, o in enumerate(outs):
        np.testing.assert_array_equal(o.result(timeout=300).numpy(),
                                      expected(i) * 2)
    del srcs, outs, o
    settle(procs)
    # The surviving worker leaked nothing; the nanny's new worker process
    # got sim:1 again (client.restart() takes the same path for both).
    deadline = time.monotonic() + 120
    while sorted(workers_by_device(procs)) != ["sim:0", "sim:1"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    for s in run_stats(procs).values():
        assert s["in_use"] == 0 and s["spilled"] == 0, s


def _bad_cluster(**plugin):
    with LocalCluster(n_workers=1, processes=True, **CLUSTER_ARGS,
                      plugins=[sd.SpillwayPlugin(**plugin)]):
        pass


@procs_only_here
def test_procs_bad_configuration_fails_the_worker_process(procs):
    # procs only for its skip: the same reasons apply.
    with pytest.raises(Exception) as info:
        _bad_cluster(device="sim:0", budget="1G")
    assert_reason(info.value, "larger than sim:0")
