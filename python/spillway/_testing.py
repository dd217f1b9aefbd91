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
"""

from ._spillway import (
    _gc_backoff as gc_backoff,
    _gc_backoff_reset as gc_backoff_reset,
    _gc_stats as gc_stats,
    _inject_fault as inject_fault,
    _open_devices as open_devices,
    _start_c_thread_allocating as start_c_thread_allocating,
    _track_arrays as track_arrays,
)

__all__ = [
    "gc_backoff",
    "gc_backoff_reset",
    "gc_stats",
    "inject_fault",
    "open_devices",
    "start_c_thread_allocating",
    "track_arrays",
]
