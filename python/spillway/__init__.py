"""spillway: accelerator memory management for Python.

Arrays live in device memory (the simulated device ``sim:0`` by default,
or ``$SPILLWAY_DEVICE``); spillway accounts for every byte, spills arrays
to host memory when memory or a budget runs short -- first those it can
tell are done with (advised cold, or brought back once and only read
since), then the least recently used -- brings each back on its next
device use, and runs Python's garbage collector before an allocation
fails for good::

    import spillway as sw
    a = sw.zeros((1024, 1024), dtype="float32", tag="weights")
    b = sw.add(a, a)
    sw.sum(b), sw.memory_info().in_use
    with sw.memory_peak() as p:
        c = sw.scale(b, 2.0)
    p.bytes
    sw.set_memory_budget(64 << 20)
    print(sw.memory_summary())

Every ``device=`` argument takes a ``Device``, a spec string such as
``"sim:0"``, or None for the default device.

Locks: spillway calls are made with the GIL released, and the pressure
callback releases the device lock before it takes the GIL, so the order is
always device lock -> GIL and never both at once.

The garbage collector under memory pressure: when an allocation fails on a
device, before anything is spilled, a callback runs ``gc.collect()`` (even
under ``gc.disable()``) and the allocation is retried if device memory was
freed.  Rate limit: a full collection that freed no device memory starts a
back-off of max(50 ms, 10 x its duration) during which memory pressure runs
young collections (``gc.collect(1)``) instead; a full collection that frees
memory ends it; one collection runs at a time.  No ``DeviceMemoryError``
without a full collection: a call that still fails for want of memory, with
none since it began, is made once more with one in its ladder.  A thread
that waited while another collected does not collect again.
``memory_info().gc_runs`` counts the collections, young and full.

Queues: ``q = sw.Queue()`` is an in-order stream of work on a device;
``sw.add(a, b, queue=q)`` (and scale, axpy, zeros, fill) runs there,
ordered after the events recorded in ``sw.order_manager[q]`` and recording
its own.  ``sw.order_manager`` is per thread and holds queues by weak
reference: a program that creates queues in a loop does not keep them.

DLPack: ``numpy.from_dlpack(a)`` views the array's memory (on devices the
host can address, such as the simulated one) under an exposure lease: the
array does not spill while the NumPy array lives.

See docs/python.md for the whole API.
"""

import atexit as _atexit

from ._spillway import (
    ALLOC_GRANULARITY,
    Array,
    Device,
    DeviceError,
    DeviceMemoryError,
    Event,
    MemoryInfo,
    OrderManagerMap,
    PeakScope,
    Pinned,
    PinnedView,
    Queue,
    SequentialOrderManager,
    __version__,
    add,
    asarray,
    axpy,
    devices,
    empty,
    empty_cache,
    from_dlpack,
    full,
    get_clear_new,
    get_memory_budget,
    mem_get_info,
    memory_info,
    memory_peak,
    memory_snapshot,
    memory_stats,
    ones,
    order_manager,
    pinned,
    reset_accumulated_memory_stats,
    reset_peak_memory,
    scale,
    set_host_budget,
    set_host_pool_limit,
    set_clear_new,
    set_memory_budget,
    sum,
    synchronize,
    zeros,
)
from ._spillway import _atexit as _spillway_atexit
from ._summary import memory_summary
from .history import MemoryHistory, dump_memory_history, memory_history
# matplotlib is imported only when a picture is drawn.
from .plot import plot_memory_history

# Python host tasks take the GIL on their queue's thread: wait for them
# before the interpreter finalizes (they could never get it then).
_atexit.register(_spillway_atexit)

# Importing spillway never imports Dask, not even spillway.dask: it is often
# imported from inside `import distributed` (the dask.sizeof entry point).
# The arrays' Dask serializers are registered lazily instead, now or when
# distributed is imported, so that a worker without the plugin still reads
# what a worker with it sends (_dask_hook.py, docs/dask.md).
from ._dask_hook import install as _install_dask_hook

_install_dask_hook()
del _install_dask_hook

__all__ = [
    "ALLOC_GRANULARITY",
    "Array",
    "Device",
    "DeviceError",
    "DeviceMemoryError",
    "Event",
    "MemoryHistory",
    "MemoryInfo",
    "OrderManagerMap",
    "PeakScope",
    "Pinned",
    "PinnedView",
    "Queue",
    "SequentialOrderManager",
    "add",
    "asarray",
    "axpy",
    "devices",
    "dump_memory_history",
    "empty",
    "empty_cache",
    "from_dlpack",
    "full",
    "get_clear_new",
    "get_memory_budget",
    "mem_get_info",
    "memory_history",
    "memory_info",
    "memory_peak",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "ones",
    "order_manager",
    "pinned",
    "plot_memory_history",
    "reset_accumulated_memory_stats",
    "reset_peak_memory",
    "scale",
    "set_host_budget",
    "set_host_pool_limit",
    "set_clear_new",
    "set_memory_budget",
    "sum",
    "synchronize",
    "zeros",
]
