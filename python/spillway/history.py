"""The memory history: what held the memory, since when, and what moved.

``memory_history()`` starts recording a device's memory events (the C
library's ring, docs/memory-history.md) and, with ``stacks=True``, the
Python traceback of every allocation; ``dump_memory_history(path)`` writes
them as a Chrome trace (Perfetto, chrome://tracing) or a JSON snapshot,
with the allocating lines added; ``plot_memory_history()`` draws it.  Names
follow PyTorch's ``torch.cuda.memory._record_memory_history`` and
``_dump_snapshot``::

    import spillway as sw
    with sw.memory_history(stacks=True):
        train_step()
    sw.dump_memory_history("memory.json")     # open in ui.perfetto.dev
    sw.plot_memory_history("memory.json", "memory.png")

While tracebacks are recorded, a ``DeviceMemoryError`` names the largest
holders by tag *and* by the line of user code that allocated them.
"""

import json
import os
import threading

from . import _spillway as _C

__all__ = ["memory_history", "dump_memory_history", "MemoryHistory",
           "memory_history_events"]

DEFAULT_MAX_ENTRIES = 65536
DEFAULT_MAX_FRAMES = 8

_lock = threading.Lock()
_recordings = {}  # device name -> MemoryHistory (the latest)


def _device(device):
    """The Device for a device= argument (opening it on first use)."""
    if isinstance(device, _C.Device):
        return device
    if device is not None and not isinstance(device, str):
        raise TypeError("device must be a Device, a spec string or None, "
                        "not %s" % type(device).__name__)
    return _C.Device(device)


class MemoryHistory:
    """One recording of one device's memory history.

    Returned by ``memory_history()``; a context manager that stops
    recording at the end of its block (the history stays, for
    ``dump_memory_history`` and ``events()``).
    """

    def __init__(self, device, max_entries, stacks, max_frames):
        self.device = device
        self.max_entries = max_entries
        # buffer id -> ((filename, line, function), ...), innermost first;
        # filled by history.c's callback, bounded to max_entries.
        self.stacks = {} if stacks else None
        self._ctx = _C._trace_start(device, max_entries, self.stacks,
                                    max_frames, max_entries)
        self.recording = True

    def stop(self):
        """Stop recording (the history is kept)."""
        if self.recording:
            self.recording = False
            _C._trace_stop(self.device)
            self._ctx = None  # the callback is gone: its context may go
            with _lock:
                _C._set_oom_hook(_oom_hook if _any_stacks() else None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def events(self):
        """The kept events, oldest first, as dicts (the fields of
        docs/memory-history.md), and how many were dropped."""
        return memory_history_events(self.device)

    def dump(self, path, format="chrome"):
        dump_memory_history(path, device=self.device, format=format)

    def stack_of(self, buffer_id):
        """The allocating traceback of a buffer id, or None."""
        return None if self.stacks is None else self.stacks.get(buffer_id)

    def __repr__(self):
        return "<MemoryHistory of %s, %s, stacks %s>" % (
            self.device.name, "recording" if self.recording else "stopped",
            "on" if self.stacks is not None else "off")


def memory_history(enabled=True, max_entries=None, stacks=True, device=None,
                   max_frames=DEFAULT_MAX_FRAMES):
    """Start (or, with ``enabled=False``, stop) recording the memory
    history of a device.

    ``max_entries`` bounds the ring of events (default 65536; when full the
    oldest go and the dump says how many).  ``stacks=True`` records the
    Python traceback of every allocation (``max_frames`` frames, innermost
    first), so that dumps, snapshots and out-of-memory messages can point
    at the line of user code holding the memory.  Starting again starts
    afresh.  Returns a ``MemoryHistory`` (a context manager: ``with
    sw.memory_history(): ...`` stops at the end), or None when stopping.
    """
    dev = _device(device)
    if not enabled:
        with _lock:
            rec = _recordings.get(dev.name)
        if rec is None or not rec.recording:
            raise ValueError("%s: no memory history is being recorded"
                             % dev.name)
        rec.stop()
        with _lock:
            _C._set_oom_hook(_oom_hook if _any_stacks() else None)
        return None
    if max_entries is None:
        max_entries = DEFAULT_MAX_ENTRIES
    if isinstance(max_entries, bool) or not isinstance(max_entries, int):
        raise TypeError("max_entries must be an int, not %s"
                        % type(max_entries).__name__)
    if max_entries < 1:
        raise ValueError("max_entries must be at least 1, not %d"
                         % max_entries)
    if isinstance(max_frames, bool) or not isinstance(max_frames, int) \
            or not 1 <= max_frames <= 256:
        raise ValueError("max_frames must be an int in [1, 256]")
    with _lock:
        old = _recordings.get(dev.name)
        if old is not None and old.recording:
            old.stop()
        rec = MemoryHistory(dev, max_entries, bool(stacks), max_frames)
        _recordings[dev.name] = rec
        _C._set_oom_hook(_oom_hook if _any_stacks() else None)
    return rec


def _any_stacks():
    return any(r.recording and r.stacks is not None
               for r in _recordings.values())


def _recording_of(dev):
    with _lock:
        return _recordings.get(dev.name)


def _site(stack):
    """'file.py:12 in f' for a traceback's innermost frame."""
    if not stack:
        return None
    filename, line, func = stack[0]
    return "%s:%d in %s" % (filename, line, func)


def _oom_hook(message):
    """DeviceMemoryError's message, with the allocating lines of the
    largest holders when their tracebacks were recorded."""
    name = message.split(": ", 1)[0]
    with _lock:
        rec = _recordings.get(name)
    if rec is None or rec.stacks is None:
        return message
    try:
        live = _C._live_buffers(rec.device)
    except Exception:
        return message
    live.sort(key=lambda b: b[2] or b[1], reverse=True)
    lines = []
    for bid, size, alloc, tag, spilled, pins, leases, external in live:
        site = _site(rec.stacks.get(bid))
        if site is None:
            continue
        lines.append("  %s %r (%s) allocated at %s" % (
            _C._format_bytes(alloc or size), tag or "(untagged)",
            "spilled" if spilled else "resident", site))
        if len(lines) == 5:
            break
    if not lines:
        return message
    return message + "\nLargest holders by allocating line:\n" + \
        "\n".join(lines)


def memory_history_events(device=None):
    """(events, dropped): the kept events of the device's memory history as
    dicts, oldest first."""
    events, dropped = _C._trace_events(_device(device))
    keys = ("seq", "time_ns", "kind", "queue", "buffer", "size", "aux",
            "in_use", "cached", "spilled", "budget", "tag", "host_copies",
            "spilled_disk", "dev_begin_ns", "dev_end_ns")
    return [dict(zip(keys, e)) for e in events], dropped


def _frames(stack):
    return ["%s:%d in %s" % f for f in stack] if stack else None


def dump_memory_history(path, device=None, format="chrome"):
    """Write the device's memory history to path.

    ``format="chrome"``: the Chrome Trace Event JSON format, which
    https://ui.perfetto.dev and chrome://tracing open (counter tracks for
    in use, cached, spilled and budget; slices for spills, restores and
    pressure callbacks; OOMs with their report).  ``format="snapshot"``:
    every live buffer now, the totals and the kept history
    (docs/memory-history.md).  With tracebacks recorded, allocation events
    and live buffers carry a ``stack`` ("file:line in function", innermost
    first) and OOM events the allocating lines of the largest holders.
    """
    if format not in ("chrome", "snapshot"):
        raise ValueError("unknown memory history format %r: \"chrome\" "
                         "(Perfetto, chrome://tracing) or \"snapshot\""
                         % (format,))
    dev = _device(device)
    path = os.fspath(path)
    _C._trace_dump(dev, path, format)
    rec = _recording_of(dev)
    if rec is None or not rec.stacks:
        return
    with open(path) as f:
        doc = json.load(f)
    stacks = dict(rec.stacks)
    if format == "chrome":
        for ev in doc["traceEvents"]:
            args = ev.get("args")
            if ev.get("name") == "alloc" and args:
                fr = _frames(stacks.get(args.get("buffer")))
                if fr:
                    args["stack"] = fr
            elif ev.get("name") == "OOM" and args:
                args["report"] = _oom_hook_for(dev, args.get("report", ""))
    else:
        for b in doc["buffers"]:
            fr = _frames(stacks.get(b["id"]))
            if fr:
                b["stack"] = fr
        for ev in doc["history"]["events"]:
            if ev["kind"] == "alloc":
                fr = _frames(stacks.get(ev["buffer"]))
                if fr:
                    ev["stack"] = fr
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def _oom_hook_for(dev, report):
    if not report or "Largest holders by allocating line" in report:
        return report
    return _oom_hook(report) if report.startswith(dev.name + ":") \
        else report
