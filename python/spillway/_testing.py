"""Helpers for spillway's own tests: not part of the API.

They live in a separate extension module, spillway._spillway_testing, built
in the build tree only (neither it nor this file is installed); it reaches
spillway._spillway through the capsule spillway._spillway._testing_api.

start_c_thread_allocating(device, nbytes, count, hold=0, tag=None)
    Start a plain C thread -- one that never held the GIL and has no Python
    thread state -- that allocates `count` buffers of `nbytes` on `device`,
    writing and reading back 8 bytes of each and keeping the last `hold`
    alive.  Under memory pressure the device's pressure callback runs on that
    thread and must take the GIL itself.  Returns an object whose
    join(timeout=None) returns {'ok', 'oom', 'errors', 'last_error'}.
inject_fault(device, op, nth, persistent=False)
    Make the nth next backend 'alloc' or 'copy' fail (sw_inject_fault).
track_arrays(on)
    Keep weak references to every Array created from now on (True), or stop
    (False); returns the list kept so far (or None).
gc_backoff(min_interval=None), gc_backoff_reset(), gc_stats()
    The pressure collector's rate limit: its minimum back-off in seconds,
    ending a back-off now, and its counters.
open_devices()
    The Device objects this module holds open.
wait_host_tasks(timeout=None)
    Wait until no Python host task (q.host_task(fn), and those that keep an
    operation's arrays alive) is pending; TimeoutError after timeout
    seconds.
object_counts()
    {'queues', 'managers', 'events', 'host_tasks'}: live Queue,
    SequentialOrderManager and Event objects of spillway._spillway, and
    Python host tasks not yet finished (process-wide).
collect()
    gc.collect() that surely collects: gc.collect() does nothing while
    another thread's collection runs (routine on free-threaded builds,
    where any thread may be collecting; on GIL builds while a finalizer
    released the GIL), so it is called again until a collection of this
    call's own has run.  Returns what that one found.
"""

import gc as _gc
import threading as _threading
import time as _time

from ._spillway_testing import (
    gc_backoff,
    gc_backoff_reset,
    gc_stats,
    inject_fault,
    object_counts,
    open_devices,
    start_c_thread_allocating,
    track_arrays,
    wait_host_tasks,
)

__all__ = [
    "collect",
    "gc_backoff",
    "gc_backoff_reset",
    "gc_stats",
    "inject_fault",
    "object_counts",
    "open_devices",
    "start_c_thread_allocating",
    "track_arrays",
    "wait_host_tasks",
]


def collect(timeout=30.0):
    me = _threading.get_ident()
    ran = []

    def phase(name, info):
        if name == "start" and _threading.get_ident() == me:
            ran.append(True)

    _gc.callbacks.append(phase)
    try:
        deadline = _time.monotonic() + timeout
        while True:
            n = _gc.collect()
            if ran:
                return n
            if _time.monotonic() > deadline:
                raise TimeoutError("gc.collect() found another thread's "
                                   f"collection running for {timeout} s")
            _time.sleep(0.001)
    finally:
        _gc.callbacks.remove(phase)
