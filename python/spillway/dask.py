"""spillway under Dask: sizes, serializers, a worker plugin, a cluster.

Importing this module (``import spillway.dask``) imports Dask and
distributed, which plain ``import spillway`` never does, and registers:

- ``dask.sizeof`` for ``spillway.Array``: its bytes (``nbytes``), resident
  or spilled, so the scheduler sees the memory the data really takes;
- Dask serializers (``distributed.protocol`` ``dask_serialize`` /
  ``dask_deserialize``): a header (dtype, shape, device, tag) and one frame,
  the array's bytes read into host memory.  A spilled array is read from its
  host copy and stays spilled (no restore); the receiving process builds the
  array on its worker's device (the plugin's), where its budget may spill it
  again.  Pickling stays the fallback (``pickle.dumps(a)`` works anywhere).

It gives:

- ``SpillwayPlugin(device=None, budget=None, host_pool=None)``, a worker
  plugin: each worker opens its device (a spec such as ``"sim:1"``, or a
  kind such as ``"sim"`` for one device per worker: worker *k* gets
  ``sim:k``), sets its budget and host staging pool, reports its figures as
  worker metrics (``spillway_in_use``, ``spillway_spilled``, ...: the
  dashboard's worker table, ``client.scheduler_info()``), and on close
  drops what the worker holds, empties the device and closes it;
- ``dask_setup(worker)``, so that ``--preload spillway.dask`` installs the
  plugin from Dask's config (``spillway.device``, ``spillway.budget``,
  ``spillway.host-pool``; ``DASK_SPILLWAY__BUDGET=256M`` in the
  environment);
- ``LocalSpillwayCluster(n_workers=None, device="sim", budget=None, ...)``,
  a ``distributed.LocalCluster`` with one worker per device of a kind, the
  plugin installed in each;
- ``worker_device()``, the device of the worker running a task (in a worker
  process it is also the default device, ``device=None``);
- ``worker_stats()``, a worker's figures, for ``client.run(worker_stats)``.

docs/dask.md has the whole story.
"""

import gc
import json
import logging
import os
import threading

import dask
import dask.config
from dask.sizeof import sizeof
from distributed import LocalCluster, WorkerPlugin
from distributed.protocol import dask_deserialize, dask_serialize

import spillway as sw
from spillway import _dask_sizeof, _spillway

__all__ = ["LocalSpillwayCluster", "SpillwayPlugin", "dask_setup",
           "worker_device", "worker_stats"]

logger = logging.getLogger("distributed.spillway")

# ---------------------------------------------------------------------------
# Sizes and serialization
# ---------------------------------------------------------------------------


_dask_sizeof.register(sizeof)


# Which device this process's spillway worker uses: {id(worker): spec}.
# Deserialization runs on the event loop, outside any task, so it cannot ask
# distributed.get_worker(); with one worker per process (processes=True, the
# usual case) the one entry is the answer.  With several workers in one
# process (processes=False, where distributed passes objects without
# serializing them anyway) an array lands on the device it was sent from.
_worker_devices = {}
_worker_devices_lock = threading.Lock()
# The worker whose device is the process's default device (one alone in its
# process), or None.
_default_owner = None


def _receiving_device(sent_from):
    with _worker_devices_lock:
        specs = set(_worker_devices.values())
    if len(specs) == 1:
        return specs.pop()
    return sent_from


@dask_serialize.register(sw.Array)
def _serialize_array(a):
    # Array.__reduce_ex__(5) reads the bytes once into a bytearray behind a
    # PickleBuffer (from the host copy when spilled, which stays spilled);
    # that memory is the frame, no second copy.
    _rebuild, (fmt, dtype, shape, device, tag, data) = a.__reduce_ex__(5)
    header = {"format": fmt, "dtype": dtype, "shape": list(shape),
              "device": device, "tag": tag}
    return header, [data.raw()]


@dask_deserialize.register(sw.Array)
def _deserialize_array(header, frames):
    data = frames[0] if len(frames) == 1 else b"".join(frames)
    return _spillway._rebuild_array(
        header["format"], header["dtype"], tuple(header["shape"]),
        _receiving_device(header["device"]), header["tag"], data)


# ---------------------------------------------------------------------------
# The worker plugin
# ---------------------------------------------------------------------------

# Metric name -> memory_stats() key.  Numbers only: the dashboard's worker
# table shows numeric (and string) metrics as extra columns.
_METRICS = {
    "spillway_in_use": "in_use",
    "spillway_cached": "cached",
    "spillway_spilled": "spilled",
    "spillway_peak": "peak",
    "spillway_max_reserved": "max_reserved",
    "spillway_spills": "spills",
    "spillway_restores": "restores",
    "spillway_spilled_bytes": "spilled_bytes_total",
    "spillway_restored_bytes": "restored_bytes_total",
    "spillway_gc_runs": "gc_runs",
    "spillway_ooms": "ooms",
    "spillway_spilled_disk": "spilled_disk",
    "spillway_host_copies": "host_copies",
}


def _backend_kinds():
    return {s.partition(":")[0] for s in _spillway._device_specs()}


def _kind_specs(kind):
    """The specs of every device of one backend, without opening them."""
    return [s for s in _spillway._device_specs()
            if s.partition(":")[0] == kind]


def _worker_index(name):
    """Worker k's k: LocalCluster names its workers 0, 1, ...; a worker
    started by hand gets it from ``dask worker --name 3``."""
    if isinstance(name, int) and name >= 0:
        return name
    if isinstance(name, str) and name.isdigit():
        return int(name)
    return 0


def _check_size_arg(what, value, of):
    """A size argument's type, checked at once by the parser every setter
    uses (its value is read on the worker, in setup); None leaves the
    worker's own setting."""
    if value is not None:
        _spillway._check_size_type(value, f"SpillwayPlugin {what}=", of)


class SpillwayPlugin(WorkerPlugin):
    """Gives each Dask worker its spillway device, budget and host pool, and
    reports the device's figures as worker metrics.

    device: a spec (``"sim:1"``, ``"cuda:0"``) for that device; a kind
      (``"sim"``, ``"cuda"``, ``"opencl"``) for one device per worker, worker
      *k* (its name in a LocalCluster, or ``dask worker --name k``) taking
      ``kind:k``; None for the kind of the process's default device
      (``$SPILLWAY_DEVICE``, else ``sim``), one per worker.
    budget: bytes, a size string (``"256M"``) or a fraction of the device
      (``0.5``, a NumPy float, a Fraction), as ``sw.set_memory_budget``
      reads it; None for no budget.  Beyond it the worker spills arrays to
      host memory.  A budget larger than the device fails the worker start.
    host_pool: the bound of the device's host staging pool (bytes or a size
      string); None leaves ``$SPILLWAY_HOST_POOL`` (or 1 GiB).
    host_budget: the bound on the host memory the worker's device holds
      for spilled arrays (bytes, a size string, or a fraction of the
      machine's memory, ``0.25``): past it, spilled arrays go to files
      under ``$SPILLWAY_SPILL_DIR`` (``sw.set_host_budget``); None leaves
      ``$SPILLWAY_HOST_BUDGET`` (or no bound).

    A configuration that cannot work (no such device, a malformed size, a
    budget larger than the device) raises ``ValueError`` in setup, which
    fails the worker's start (or ``client.register_plugin``) with the
    reason.
    """

    name = "spillway"
    idempotent = False

    def __init__(self, device=None, budget=None, host_pool=None,
                 host_budget=None):
        if device is not None and not isinstance(device, (str, sw.Device)):
            raise TypeError("SpillwayPlugin device= takes a spec ('sim:0'), "
                            "a kind ('sim') or None, not "
                            f"{type(device).__name__}")
        _check_size_arg("budget", budget, "device")
        _check_size_arg("host_pool", host_pool, "bytes")
        _check_size_arg("host_budget", host_budget, "host")
        # A Device is sent to the workers as its spec.
        self.device_spec = device.name if isinstance(device, sw.Device) \
            else device
        self.budget = budget
        self.host_pool = host_pool
        self.host_budget = host_budget
        self.device = None
        self.worker_name = None

    def __repr__(self):
        return (f"SpillwayPlugin(device={self.device_spec!r}, "
                f"budget={self.budget!r}, host_pool={self.host_pool!r}, "
                f"host_budget={self.host_budget!r})")

    # Only the configuration travels; the opened device stays behind.
    def __getstate__(self):
        return {"device_spec": self.device_spec, "budget": self.budget,
                "host_pool": self.host_pool,
                "host_budget": self.host_budget}

    def __setstate__(self, state):
        self.host_budget = None  # pickled before host_budget= existed
        self.__dict__.update(state)
        self.device = None
        self.worker_name = None

    def spec_for(self, worker_name):
        """The device spec worker ``worker_name`` opens."""
        spec = self.device_spec
        if spec is None:
            spec = os.environ.get("SPILLWAY_DEVICE") or "sim"
            spec = spec.partition(":")[0]
        if ":" in spec:
            return spec
        kind = spec
        specs = _kind_specs(kind)
        k = _worker_index(worker_name)
        if not specs:
            raise ValueError(
                f"no spillway device of kind {kind!r} for worker "
                f"{worker_name!r} (this machine has: "
                f"{' '.join(sorted(_backend_kinds())) or 'none'})")
        if k >= len(specs):
            raise ValueError(
                f"worker {worker_name!r} would take {kind}:{k}, but {kind} "
                f"has {len(specs)} device(s) ({specs[0]}..{specs[-1]}): "
                f"start fewer workers, give a spec such as {specs[0]!r}"
                + (", or set SPILLWAY_SIM_DEVICES" if kind == "sim" else ""))
        return f"{kind}:{k}"

    def setup(self, worker):
        name = getattr(worker, "name", None)
        try:
            dev = self._open(name)
        except (ValueError, TypeError) as e:
            raise ValueError(f"spillway on Dask worker {name!r}: {e}") \
                from None
        self.device = dev
        self.worker_name = name
        # A worker process's tasks allocate on its device: device=None means
        # it there.  Several workers in one process (processes=False) cannot
        # share one default: the process's own comes back, and their tasks
        # name worker_device().
        global _default_owner
        with _worker_devices_lock:
            _worker_devices[id(worker)] = dev.name
            if len(_worker_devices) == 1:
                _spillway._set_default_device(dev)
                _default_owner = id(worker)
            elif _default_owner is not None:
                _spillway._set_default_device(None)
                _default_owner = None
        metrics = getattr(worker, "metrics", None)
        if metrics is not None:
            for metric, key in _METRICS.items():
                metrics[metric] = _metric(dev, key)
            metrics["spillway_budget"] = \
                lambda w, d=dev: sw.get_memory_budget(d) or 0
            metrics["spillway_device"] = lambda w, d=dev: d.name
        logger.info("spillway: worker %r on %s (%s), budget %s", name,
                    dev.name, dev.description, sw.get_memory_budget(dev))

    def _open(self, worker_name):
        dev = sw.Device(self.spec_for(worker_name))
        before = sw.get_memory_budget(dev)
        host_before = sw.memory_stats(dev)["host_budget"]
        try:
            if self.budget is not None:
                total = sw.memory_info(dev).device_total
                sw.set_memory_budget(self.budget, dev)
                got = sw.get_memory_budget(dev)
                if total and got and got > total:
                    raise ValueError(
                        f"budget {self.budget!r} ({got} bytes) is larger "
                        f"than {dev.name}, which has {total} bytes")
            if self.host_pool is not None:
                sw.set_host_pool_limit(self.host_pool, dev)
            if self.host_budget is not None:
                sw.set_host_budget(self.host_budget, dev)
        except BaseException:
            sw.set_memory_budget(before, dev)  # a failed setup changes nothing
            sw.set_host_budget(host_before, dev)
            raise
        # max_reserved then tells the most this worker held at once.
        sw.reset_peak_memory(dev)
        return dev

    def teardown(self, worker):
        dev, self.device = self.device, None
        global _default_owner
        with _worker_devices_lock:
            _worker_devices.pop(id(worker), None)
            if _default_owner == id(worker):
                _spillway._set_default_device(None)
                _default_owner = None
        metrics = getattr(worker, "metrics", None)
        if metrics is not None:
            for metric in list(metrics):
                if metric.startswith("spillway_"):
                    del metrics[metric]
        if dev is None:
            return
        status = getattr(getattr(worker, "status", None), "name", "")
        if status in ("closing", "closed", "closing_gracefully", "failed"):
            # The worker is going away with its data: let go of its arrays
            # now, so their device memory is freed before the device closes.
            try:
                worker.data.clear()
            except Exception:  # a disk store already closed, ...
                logger.exception("spillway: clearing worker data failed")
        gc.collect()
        sw.synchronize(dev)
        sw.empty_cache(dev)
        stats = sw.memory_stats(dev)
        report = {k: stats[k] for k in ("in_use", "spilled", "cached",
                                        "max_reserved", "spills", "restores",
                                        "budget")}
        report.update(device=dev.name, worker=str(self.worker_name))
        if stats["in_use"] or stats["spilled"]:
            # Someone outside the worker still holds arrays on it (with
            # processes=False: the client, which shares the process).
            logger.warning("spillway: %s left open on closing worker %r: "
                           "%d bytes in use and %d spilled are still held",
                           dev.name, self.worker_name, stats["in_use"],
                           stats["spilled"])
            report["closed"] = False
        else:
            sw.set_memory_budget(None, dev)
            dev.close()
            report["closed"] = True
        _write_close_report(report)


def _metric(dev, key):
    def get(worker):
        return sw.memory_stats(dev)[key]
    return get


def _write_close_report(report):
    """With $SPILLWAY_DASK_CLOSE_REPORT naming a folder, each closing worker
    writes its device's last figures there (a JSON file per worker): how
    the tests see that worker processes closed their devices empty."""
    folder = os.environ.get("SPILLWAY_DASK_CLOSE_REPORT")
    if not folder:
        return
    path = os.path.join(folder, f"worker-{report['worker']}-{os.getpid()}"
                        f"-{id(report)}.json")
    with open(path, "w") as f:
        json.dump(report, f)


def worker_device():
    """The device of the Dask worker running the calling task (its plugin's),
    else the default device: ``sw.zeros(n, device=worker_device())``."""
    try:
        from distributed import get_worker
        plugin = get_worker().plugins.get(SpillwayPlugin.name)
    except ValueError:  # not in a task
        plugin = None
    if plugin is not None and plugin.device is not None:
        return plugin.device
    return sw.Device()


def worker_stats(dask_worker=None):
    """This worker's spillway figures: ``client.run(worker_stats)`` gives
    them per worker.  A dict: ``device`` and every key of
    ``memory_stats()``; ``{}`` on a worker without the plugin."""
    plugin = None
    if dask_worker is not None:
        plugin = dask_worker.plugins.get(SpillwayPlugin.name)
    if plugin is None or plugin.device is None:
        return {}
    stats = sw.memory_stats(plugin.device)
    stats["device"] = plugin.device.name
    return stats


# ---------------------------------------------------------------------------
# --preload spillway.dask
# ---------------------------------------------------------------------------


def plugin_from_config():
    """A SpillwayPlugin from Dask's config: ``spillway.device``,
    ``spillway.budget``, ``spillway.host-pool``, ``spillway.host-budget``
    (each may be unset)."""
    return SpillwayPlugin(device=dask.config.get("spillway.device", None),
                          budget=dask.config.get("spillway.budget", None),
                          host_pool=dask.config.get("spillway.host-pool",
                                                    None),
                          host_budget=dask.config.get("spillway.host-budget",
                                                      None))


async def dask_setup(server):
    """Preload hook (``dask worker --preload spillway.dask``, or
    ``LocalCluster(preload=["spillway.dask"])``): on a worker, install the
    plugin configured by Dask's config; elsewhere (scheduler, client),
    importing this module has registered the serializers already."""
    from distributed import Worker
    if isinstance(server, Worker):
        await server.plugin_add(plugin_from_config(), catch_errors=False)


# ---------------------------------------------------------------------------
# LocalSpillwayCluster
# ---------------------------------------------------------------------------


def _is_nanny(cls):
    from distributed import Nanny
    return isinstance(cls, type) and issubclass(cls, Nanny)


def _rotated(items, k):
    return items[k:] + items[:k]


class LocalSpillwayCluster(LocalCluster):
    """A LocalCluster with one worker per spillway device of a kind.

    n_workers: None for one per device of ``device``'s kind; fewer is fine,
      more is a ValueError.
    device: the kind (``"sim"``, ``"opencl"``, ``"cuda"``, ...).  Worker *k*
      gets ``kind:k``; for ``cuda`` (with worker processes) worker *k* sees
      the GPUs with ``CUDA_VISIBLE_DEVICES`` rotated to start at its own, as
      dask-cuda does, and opens ``cuda:0``.
    budget, host_pool, host_budget: each worker's (SpillwayPlugin's
      arguments).
    threads_per_worker: 1 by default; other LocalCluster arguments
      (``processes``, ``memory_limit``, ...) pass through.
    """

    def __init__(self, n_workers=None, device="sim", budget=None,
                 host_pool=None, threads_per_worker=1, host_budget=None,
                 **kwargs):
        if not isinstance(device, str) or ":" in device:
            raise ValueError(f"LocalSpillwayCluster device= takes a kind "
                             f"such as 'sim' or 'cuda', not {device!r}")
        specs = _kind_specs(device)
        if not specs:
            raise ValueError(
                f"no spillway device of kind {device!r} (this machine has: "
                f"{' '.join(sorted(_backend_kinds())) or 'none'})")
        if n_workers is None:
            n_workers = len(specs)
        if not isinstance(n_workers, int) or n_workers < 0:
            raise ValueError(f"n_workers must be a count, not {n_workers!r}")
        if n_workers > len(specs):
            raise ValueError(
                f"{n_workers} workers need {n_workers} {device} devices; "
                f"this machine has {len(specs)} ({' '.join(specs)})"
                + (" (SPILLWAY_SIM_DEVICES sets how many)"
                   if device == "sim" else ""))
        # Checked here too, so that a wrong argument fails at once and not
        # in every worker.
        SpillwayPlugin(device, budget, host_pool, host_budget)
        self._sw_kind = device
        self._sw_specs = specs
        self._sw_budget = budget
        self._sw_host_pool = host_pool
        self._sw_host_budget = host_budget
        super().__init__(n_workers=0, threads_per_worker=threads_per_worker,
                         **kwargs)
        self.scale(n_workers)
        if not self.asynchronous:
            self.sync(self._correct_state)

    def new_worker_spec(self):
        free = set(range(len(self._sw_specs))) - set(self.worker_spec)
        if not free:
            raise ValueError(f"cannot scale beyond the {len(self._sw_specs)} "
                             f"{self._sw_kind} devices")
        k = min(free)
        spec = dict(self.new_spec)
        options = dict(spec.get("options", {}))
        device = f"{self._sw_kind}:{k}"
        if self._sw_kind == "cuda" and _is_nanny(spec.get("cls")):
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            ids = visible.split(",") if visible else \
                [s.partition(":")[2] for s in self._sw_specs]
            env = dict(options.get("env") or {})
            env["CUDA_VISIBLE_DEVICES"] = ",".join(_rotated(ids, k))
            options["env"] = env
            device = "cuda:0"
        plugins = [p for p in options.get("plugins", ())
                   if not isinstance(p, SpillwayPlugin)]
        plugins.append(SpillwayPlugin(device, self._sw_budget,
                                      self._sw_host_pool,
                                      self._sw_host_budget))
        options["plugins"] = plugins
        spec["options"] = options
        return {k: spec}
