"""Helpers for spillway's own tests: not part of the API.

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
"""

from ._spillway import (
    _gc_backoff as gc_backoff,
    _gc_backoff_reset as gc_backoff_reset,
    _gc_stats as gc_stats,
    _inject_fault as inject_fault,
    _object_counts as object_counts,
    _open_devices as open_devices,
    _start_c_thread_allocating as start_c_thread_allocating,
    _track_arrays as track_arrays,
    _wait_host_tasks as wait_host_tasks,
)

__all__ = [
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
