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
"""

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
