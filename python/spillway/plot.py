"""Pictures of a memory history: ``python -m spillway.plot TRACE.json``.

Draws what people would rather look at than read: in use, cached and
spilled stacked over time, the budget as a line, spills and restores as
marks, OOMs flagged, and the largest holders labelled at the moment they
were allocated (with their allocating line when tracebacks were recorded).
Reads either format of ``dump_memory_history`` / ``sw_trace_dump``.

matplotlib is an optional dependency (``pip install spillway[plot]``); the
rest of spillway never imports it.  The picture is drawn with the Agg
backend, so no display is needed.
"""

import argparse
import json
import os
import sys

__all__ = ["plot_memory_history", "load_history", "main"]

MIB = 1024.0 * 1024.0


def load_history(path, device_time=True):
    """The timeline of a dump, normalized: a dict with ``device``, ``t``
    (seconds), ``in_use``, ``cached``, ``spilled``, ``budget``,
    ``host_copies``, ``spilled_disk`` (lists of the same length), ``spills`` and ``restores`` ([(t, bytes, tag)]),
    ``ooms`` ([(t, requested, tag)]), ``allocs`` ([(t, bytes, tag,
    site)]), ``moves`` ([(t, buffer, what, bytes, tag)], what one of
    "alloc", "spill", "restore", "dirty", "disk", "undisk", "free": each
    buffer's changes of place, for the lanes), ``timed`` ([(t, begin,
    end, what, buffer, bytes, tag)]: when a move's work ran, as the
    device timed its copies and the host its file I/O; t is the move's
    own time) and ``dropped``.

    Where copies are timed, the picture is on device time: each timed
    move happens when its copy (or I/O) ended, with the copy itself shown
    in the lanes, and a spill's or restore's bytes count on the device
    until its copy ended (the accounting moves them when it is queued).
    ``device_time=False`` keeps the host's timeline."""
    with open(path) as f:
        doc = json.load(f)
    h = dict(device="?", t=[], in_use=[], cached=[], spilled=[], budget=[],
             host_copies=[], spilled_disk=[], moves=[], spills=[],
             restores=[], ooms=[], allocs=[], timed=[], dropped=0)
    if "traceEvents" in doc:
        _from_chrome(doc, h)
    elif doc.get("format") == "spillway-snapshot":
        _from_snapshot(doc, h)
    else:
        raise ValueError("%s is not a spillway memory history (neither a "
                         "Chrome trace nor a snapshot)" % path)
    if device_time:
        _retime(h)
    return h


def _from_chrome(doc, h):
    other = doc.get("otherData", {})
    h["device"] = other.get("spillway_device", "?")
    h["dropped"] = other.get("dropped", 0)
    budget = 0
    renamed = {}  # (buffer, ts): a move _move renamed
    for ev in doc["traceEvents"]:
        ph, name, args = ev.get("ph"), ev.get("name"), ev.get("args", {})
        t = ev.get("ts", 0) / 1e6
        if ph == "C" and name == "budget":
            budget = args.get("budget", 0)
            if h["t"]:
                _append(h, t, h["in_use"][-1], h["cached"][-1],
                        h["spilled"][-1], budget, h["host_copies"][-1],
                        h["spilled_disk"][-1])
        elif ph == "C" and name == "memory":
            _append(h, t, args.get("in_use", 0), args.get("cached", 0),
                    args.get("spilled", 0), budget,
                    args.get("host_copies", 0), args.get("spilled_disk", 0))
        elif name in ("spill", "restore"):
            if args.get("aux", 0) < 2:  # 2, 3, 4: nothing was copied
                h[name + "s"].append((t, args.get("bytes", 0),
                                      args.get("tag")))
            h["moves"].append((t, args.get("buffer"),
                               _move(name, args.get("aux", 0)),
                               args.get("bytes", 0), args.get("tag")))
        elif name == "OOM":
            h["ooms"].append((t, args.get("requested", 0), args.get("tag")))
        elif name == "alloc":
            stack = args.get("stack")
            h["allocs"].append((t, args.get("bytes", 0), args.get("tag"),
                                stack[0] if stack else None))
        if name in _MOVES and name not in ("spill", "restore"):
            what = _move(_MOVES[name], args.get("aux", 0))
            h["moves"].append((t, args.get("buffer"), what,
                               args.get("bytes", 0), args.get("tag")))
            if what != _MOVES[name]:  # its I/O slice follows: the same
                renamed[(args.get("buffer"), t)] = what
        if name in _TIMED and ph == "X" and "event_ts" in args:
            begin, at = t, args["event_ts"] / 1e6
            h["timed"].append((at, begin, begin + ev.get("dur", 0) / 1e6,
                               renamed.get((args.get("buffer"), at),
                                           _TIMED[name]),
                               args.get("buffer"), args.get("bytes", 0),
                               args.get("tag")))


# Events that change where a buffer is, by their names in the history.
_MOVES = {"alloc": "alloc", "free": "free", "host_copy_drop": "dirty",
          "spill_begin": "spill", "restore_begin": "restore",
          "disk_write": "disk", "disk_read": "undisk"}


def _move(what, aux):
    """The move an event makes, its aux considered: a clean copy evicted
    to the spill file that held its bytes (a spill, aux 4) is on disk at
    once; a clean copy's host block written to the file (a disk write, aux
    2) leaves its buffer on the device, without a host copy."""
    if what == "spill" and aux == 4:
        return "disk"
    if what == "disk" and aux == 2:
        return "dirty"
    return what


# The device-time slices of the Chrome format: the move each one times.
_TIMED = {"spill (device)": "spill", "restore (device)": "restore",
          "disk write (I/O)": "disk", "disk read (I/O)": "undisk"}


def _from_snapshot(doc, h):
    h["device"] = doc.get("device", "?")
    hist = doc.get("history", {})
    h["dropped"] = hist.get("dropped", 0)
    events = hist.get("events", [])
    t0 = events[0]["time_ns"] if events else 0
    queued = {}  # (what, buffer): when its copy was queued
    for ev in events:
        t = (ev["time_ns"] - t0) / 1e9
        kind = ev["kind"]
        if kind in ("spill_begin", "restore_begin"):
            queued[(kind[:-6], ev["buffer"])] = t
        if ev.get("dev_end_ns"):
            what = {"spill_end": "spill", "restore_end": "restore",
                    "disk_write": "disk", "disk_read": "undisk"}.get(kind)
            at = queued.pop((what, ev["buffer"]), None) \
                if what in ("spill", "restore") else t
            what = _move(what, ev["aux"])
            if what is not None and at is not None:
                h["timed"].append((at, (ev["dev_begin_ns"] - t0) / 1e9,
                                   (ev["dev_end_ns"] - t0) / 1e9, what,
                                   ev["buffer"], ev["size"], ev["tag"]))
        _append(h, t, ev["in_use"], ev["cached"], ev["spilled"],
                ev["budget"], ev.get("host_copies", 0),
                ev.get("spilled_disk", 0))
        if kind in _MOVES:
            h["moves"].append((t, ev["buffer"],
                               _move(_MOVES[kind], ev["aux"]), ev["size"],
                               ev["tag"]))
        if kind == "spill_end" and not ev["aux"]:
            h["spills"].append((t, ev["size"], ev["tag"]))
        elif kind == "restore_end" and not ev["aux"]:
            h["restores"].append((t, ev["size"], ev["tag"]))
        elif kind == "oom":
            h["ooms"].append((t, ev["size"], ev["tag"]))
        elif kind == "alloc":
            stack = ev.get("stack")
            h["allocs"].append((t, ev["size"], ev["tag"],
                                stack[0] if stack else None))


def _append(h, t, in_use, cached, spilled, budget, host_copies,
            spilled_disk):
    h["t"].append(t)
    h["host_copies"].append(host_copies)
    h["spilled_disk"].append(spilled_disk)
    h["in_use"].append(in_use)
    h["cached"].append(cached)
    h["spilled"].append(spilled)
    h["budget"].append(budget)


def _retime(h):
    """Put a loaded history on device time (``load_history``): each timed
    move at the end of its copy, with a "copy" move at its start for the
    lanes; the spill and restore marks at their copies' ends; and a
    spill's or restore's bytes on the device until its copy ended."""
    if not h["timed"]:
        return
    when = {}
    for at, begin, end, what, buf, size, tag in h["timed"]:
        # (A copy may run before its begin event's time: the event is
        # recorded once the whole batch is queued.)
        when.setdefault((buf, what, at), []).append((min(begin, end), end))
    moves = []
    for t, buf, what, size, tag in h["moves"]:
        got = when.get((buf, what, t))
        if got:
            begin, end = got.pop(0)
            moves.append((begin, buf, "copy", size, tag))
            moves.append((end, buf, what, size, tag))
        else:
            moves.append((t, buf, what, size, tag))
    moves.sort(key=lambda m: m[0])
    h["moves"] = moves
    ends = {}
    for at, begin, end, what, buf, size, tag in h["timed"]:
        ends.setdefault((what, tag, size), []).append(end)
    for key in ("spills", "restores"):
        what = key[:-1]
        marks = []
        for t, size, tag in h[key]:
            e = ends.get((what, tag, size))
            marks.append((e.pop(0) if e else t, size, tag))
        h[key] = sorted(marks, key=lambda m: m[0])
    # The tiers: a copy's bytes leave the device (a spill) or reach it (a
    # restore) when the copy ends, not when it was queued.
    fix = []
    for at, begin, end, what, buf, size, tag in h["timed"]:
        if what in ("spill", "restore") and end > at:
            sign = 1 if what == "spill" else -1
            fix.append((at, sign * size))
            fix.append((end, -sign * size))
    if not fix or not h["t"]:
        return
    fix.sort(key=lambda f: f[0])
    t_old = h["t"]
    times = sorted(set(t_old) | {f[0] for f in fix})
    keys = ("in_use", "cached", "spilled", "budget", "host_copies",
            "spilled_disk")
    out = {k: [] for k in keys}
    i, j, moved = 0, 0, 0
    for t in times:
        while i + 1 < len(t_old) and t_old[i + 1] <= t:
            i += 1
        while j < len(fix) and fix[j][0] <= t:
            moved += fix[j][1]
            j += 1
        for k in keys:
            out[k].append(h[k][i])
        out["in_use"][-1] = max(0, out["in_use"][-1] + moved)
        out["spilled"][-1] = max(out["spilled_disk"][-1],
                                 out["spilled"][-1] - moved)
    h["t"] = times
    h.update(out)


# Lane colours: where a buffer is.
_PLACES = {"resident": ("#4878d0", "on the device"),
           "clean": ("#8c7ae6", "on the device, clean host copy"),
           "spilled": ("#ee854a", "spilled (host)"),
           "disk": ("#8c564b", "spilled (disk)"),
           "copy": ("#222222", "being copied (device time) or written")}


def buffer_lanes(h, lanes=8):
    """The largest buffers of a loaded history (``load_history``: by bytes
    held over time), each
    as (label, [(start, end, place)]), place one of "resident", "clean"
    (resident with a clean host copy), "spilled" (in host memory) and
    "disk" (in the spill file); in the order they first appear."""
    if not h["t"]:
        return []
    t0, t1 = h["t"][0], h["t"][-1]
    per = {}
    for when, buf, what, size, tag in h["moves"]:
        if buf:
            per.setdefault(buf, []).append((when, what, size, tag))
    size_of = {b: max(m[2] for m in ms) for b, ms in per.items()}
    first = {b: ms[0][0] for b, ms in per.items()}
    # The largest by bytes held over time (a big buffer freed at once
    # matters less than one that lived through the run).
    last = {b: ms[-1][0] if ms[-1][1] == "free" else t1
            for b, ms in per.items()}
    weight = {b: size_of[b] * max(last[b] - (t0 if ms[0][1] != "alloc"
                                             else first[b]), 1e-9)
              for b, ms in per.items()}
    chosen = sorted(per, key=lambda b: (-weight[b], first[b]))[:lanes]
    out = []
    for b in sorted(chosen, key=lambda b: first[b]):
        ms = per[b]
        what0 = ms[0][1]
        # Before its first event: where that event says it was.
        place = {"spill": "resident", "restore": "spilled",
                 "dirty": "clean", "free": "resident", "disk": "spilled",
                 "undisk": "disk"}.get(what0)
        if what0 == "copy" and len(ms) > 1:
            place = {"spill": "resident", "restore": "spilled",
                     "disk": "spilled", "undisk": "disk"}.get(ms[1][1])
        start = t0
        segs = []
        for when, what, _, _ in ms:
            nxt = {"alloc": "resident", "spill": "spilled",
                   "restore": "clean", "dirty": "resident",
                   "disk": "disk", "undisk": "spilled",
                   "copy": "copy", "free": None}[what]
            if place is not None and when > start:
                segs.append((start, when, place))
            place, start = nxt, when
        if place is not None and t1 > start:
            segs.append((start, t1, place))
        tag = next((m[3] for m in ms if m[3]), None) or "(untagged)"
        out.append(("%s %.1f MiB" % (tag, size_of[b] / MIB), segs))
    return out


def plot_memory_history(trace, out=None, title=None, holders=5, lanes=8,
                        device_time=True):
    """Draw the memory history in ``trace`` (a path) to ``out`` (a PNG path,
    default: the trace's path with .png): the device's totals over time,
    and below them the ``lanes`` largest buffers, each showing when it was
    on the device (with or without a clean host copy), being copied,
    spilled to host memory or on disk.  Where the backend timed the
    copies, on device time (``load_history``); ``device_time=False``
    draws the host's timeline.  Returns ``out``."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("spillway.plot needs matplotlib: pip install "
                          "spillway[plot]") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = load_history(trace, device_time=device_time)
    if out is None:
        out = os.path.splitext(os.fspath(trace))[0] + ".png"
    rows = buffer_lanes(h, lanes) if lanes > 0 else []
    xlabel = "seconds" + (" (copies and disk I/O when they ran)"
                          if device_time and h["timed"] else "")
    if rows:
        fig, (ax, lx) = plt.subplots(
            2, 1, sharex=True, figsize=(11, 5.5 + 0.3 * len(rows)), dpi=100,
            gridspec_kw={"height_ratios": [5.5, 0.3 * len(rows) + 0.6]})
    else:
        fig, ax = plt.subplots(figsize=(11, 5.5), dpi=100)
        lx = None
    t = h["t"]
    if t:
        # The tiers: the device (in use, cached), the host (spilled copies
        # in host memory), the disk (those in the spill file).
        ax.stackplot(t, [v / MIB for v in h["in_use"]],
                     [v / MIB for v in h["cached"]],
                     [max(0, s - d) / MIB for s, d in zip(h["spilled"],
                                                           h["spilled_disk"])],
                     [v / MIB for v in h["spilled_disk"]],
                     labels=["in use", "cached", "spilled (host)",
                             "spilled (disk)"],
                     colors=["#4878d0", "#a1c9f4", "#ee854a", "#8c564b"],
                     step="post", alpha=0.9)
        if any(h["host_copies"]):
            # Part of in use: resident buffers whose host copy, kept since
            # their restore, still holds their bytes (evicted for free).
            ax.step(t, [v / MIB for v in h["host_copies"]], where="post",
                    color="#6a3d9a", linewidth=1.2, linestyle=":",
                    label="clean host copies (of in use)")
        if any(h["budget"]):
            ax.step(t, [b / MIB if b else float("nan") for b in h["budget"]],
                    where="post", color="#d62728", linewidth=1.5,
                    label="budget")
    top = max((a + c + s for a, c, s in zip(h["in_use"], h["cached"],
                                            h["spilled"])), default=0) / MIB
    for key, color, y, label in (("spills", "#ee854a", 0.97, "spill"),
                                 ("restores", "#2ca02c", 0.93, "restore")):
        xs = [e[0] for e in h[key]]
        if xs:
            ax.plot(xs, [top * y] * len(xs), linestyle="none", marker="|",
                    markersize=9, color=color,
                    label="%s (%d)" % (label, len(xs)))
    for i, (when, req, tag) in enumerate(h["ooms"]):
        ax.axvline(when, color="black", linestyle="--", linewidth=1,
                   label="OOM" if i == 0 else None)
        ax.annotate("OOM: %.1f MiB%s" % (req / MIB,
                                         " for %r" % tag if tag else ""),
                    (when, top * 0.5), rotation=90, fontsize=8,
                    va="center", ha="right")
    # The largest holders, labelled where they were allocated.
    biggest = sorted(h["allocs"], key=lambda a: a[1], reverse=True)[:holders]
    span = (t[-1] - t[0]) if len(t) > 1 else 1.0
    for rank, (when, size, tag, site) in enumerate(
            sorted(biggest, key=lambda a: a[0])):
        text = "%s %.1f MiB" % (tag or "(untagged)", size / MIB)
        if site:
            text += "\n" + _short(site)
        # Staggered, so that labels of allocations made together stay
        # readable; each points at the moment its allocation was made.
        ax.annotate(text, (when, 0), fontsize=7,
                    xytext=(when + span * 0.01, top * (0.15 + 0.14 * rank)),
                    textcoords="data",
                    bbox=dict(boxstyle="round,pad=0.2", fc="white",
                              ec="gray", lw=0.5, alpha=0.85),
                    arrowprops=dict(arrowstyle="-", color="gray", lw=0.5))
    if lx is not None:
        for i, (label, segs) in enumerate(rows):
            for place in _PLACES:
                bars = [(a, b - a) for a, b, p in segs if p == place]
                if bars:
                    lx.broken_barh(bars, (i - 0.4, 0.8),
                                   color=_PLACES[place][0])
        lx.set_yticks(range(len(rows)))
        lx.set_yticklabels([r[0] for r in rows], fontsize=7)
        lx.invert_yaxis()
        lx.set_xlabel(xlabel)
        lx.grid(True, axis="x", alpha=0.3)
        from matplotlib.patches import Patch
        lx.legend(handles=[Patch(color=c, label=n)
                           for c, n in _PLACES.values()],
                  loc="lower right", bbox_to_anchor=(1.0, 1.0),
                  fontsize=7, ncol=3, frameon=False)
    else:
        ax.set_xlabel(xlabel)
    ax.set_ylabel("MiB")
    name = title or "spillway memory history: %s" % h["device"]
    if h["dropped"]:
        name += " (%d earliest events dropped)" % h["dropped"]
    ax.set_title(name)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def _short(site):
    """'dir/file.py:12 in f' for a long path."""
    path, _, rest = site.partition(":")
    parts = path.split(os.sep)
    return os.sep.join(parts[-2:]) + ":" + rest


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="spillway plot",
        description="Draw a spillway memory history (a Chrome trace or a "
                    "snapshot from dump_memory_history / sw_trace_dump) as "
                    "a PNG.")
    p.add_argument("trace", help="the dumped history (JSON)")
    p.add_argument("-o", "--output", help="the PNG to write (default: "
                   "TRACE with .png)")
    p.add_argument("--title", help="the picture's title")
    p.add_argument("--holders", type=int, default=5,
                   help="how many of the largest allocations to label")
    p.add_argument("--lanes", type=int, default=8,
                   help="how many of the largest buffers to draw as lanes "
                   "(where each was, over time); 0 for none")
    p.add_argument("--host-time", action="store_true",
                   help="draw when the host queued each copy, not when the "
                   "device ran it")
    args = p.parse_args(argv)
    try:
        out = plot_memory_history(args.trace, args.output, args.title,
                                  args.holders, args.lanes,
                                  device_time=not args.host_time)
    except (OSError, ValueError, KeyError) as e:
        print("spillway plot: %s" % e, file=sys.stderr)
        return 1
    except ImportError as e:
        print("spillway plot: %s" % e, file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
