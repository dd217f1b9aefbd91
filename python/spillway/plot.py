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


def load_history(path):
    """The timeline of a dump, normalized: a dict with ``device``, ``t``
    (seconds), ``in_use``, ``cached``, ``spilled``, ``budget``,
    ``host_copies``, ``spilled_disk`` (lists of the same length), ``spills`` and ``restores`` ([(t, bytes, tag)]),
    ``ooms`` ([(t, requested, tag)]), ``allocs`` ([(t, bytes, tag,
    site)]), ``moves`` ([(t, buffer, what, bytes, tag)], what one of
    "alloc", "spill", "restore", "dirty", "disk", "undisk", "free": each
    buffer's changes of place, for the lanes) and ``dropped``."""
    with open(path) as f:
        doc = json.load(f)
    h = dict(device="?", t=[], in_use=[], cached=[], spilled=[], budget=[],
             host_copies=[], spilled_disk=[], moves=[], spills=[], restores=[], ooms=[], allocs=[], dropped=0)
    if "traceEvents" in doc:
        _from_chrome(doc, h)
    elif doc.get("format") == "spillway-snapshot":
        _from_snapshot(doc, h)
    else:
        raise ValueError("%s is not a spillway memory history (neither a "
                         "Chrome trace nor a snapshot)" % path)
    return h


def _from_chrome(doc, h):
    other = doc.get("otherData", {})
    h["device"] = other.get("spillway_device", "?")
    h["dropped"] = other.get("dropped", 0)
    budget = 0
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
            if args.get("aux", 0) < 2:  # 2, 3: nothing was copied
                h[name + "s"].append((t, args.get("bytes", 0),
                                      args.get("tag")))
            h["moves"].append((t, args.get("buffer"), name,
                               args.get("bytes", 0), args.get("tag")))
        elif name == "OOM":
            h["ooms"].append((t, args.get("requested", 0), args.get("tag")))
        elif name == "alloc":
            stack = args.get("stack")
            h["allocs"].append((t, args.get("bytes", 0), args.get("tag"),
                                stack[0] if stack else None))
        if name in _MOVES and name not in ("spill", "restore"):
            h["moves"].append((t, args.get("buffer"), _MOVES[name],
                               args.get("bytes", 0), args.get("tag")))


# Events that change where a buffer is, by their names in the history.
_MOVES = {"alloc": "alloc", "free": "free", "host_copy_drop": "dirty",
          "spill_begin": "spill", "restore_begin": "restore",
          "disk_write": "disk", "disk_read": "undisk"}


def _from_snapshot(doc, h):
    h["device"] = doc.get("device", "?")
    hist = doc.get("history", {})
    h["dropped"] = hist.get("dropped", 0)
    events = hist.get("events", [])
    t0 = events[0]["time_ns"] if events else 0
    for ev in events:
        t = (ev["time_ns"] - t0) / 1e9
        _append(h, t, ev["in_use"], ev["cached"], ev["spilled"],
                ev["budget"], ev.get("host_copies", 0),
                ev.get("spilled_disk", 0))
        kind = ev["kind"]
        if kind in _MOVES:
            h["moves"].append((t, ev["buffer"], _MOVES[kind], ev["size"],
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


# Lane colours: where a buffer is.
_PLACES = {"resident": ("#4878d0", "on the device"),
           "clean": ("#8c7ae6", "on the device, clean host copy"),
           "spilled": ("#ee854a", "spilled (host)"),
           "disk": ("#8c564b", "spilled (disk)")}


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
        start = t0
        segs = []
        for when, what, _, _ in ms:
            nxt = {"alloc": "resident", "spill": "spilled",
                   "restore": "clean", "dirty": "resident",
                   "disk": "disk", "undisk": "spilled",
                   "free": None}[what]
            if place is not None and when > start:
                segs.append((start, when, place))
            place, start = nxt, when
        if place is not None and t1 > start:
            segs.append((start, t1, place))
        tag = next((m[3] for m in ms if m[3]), None) or "(untagged)"
        out.append(("%s %.1f MiB" % (tag, size_of[b] / MIB), segs))
    return out


def plot_memory_history(trace, out=None, title=None, holders=5, lanes=8):
    """Draw the memory history in ``trace`` (a path) to ``out`` (a PNG path,
    default: the trace's path with .png): the device's totals over time,
    and below them the ``lanes`` largest buffers, each showing when it was
    on the device (with or without a clean host copy) and when spilled.
    Returns ``out``."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("spillway.plot needs matplotlib: pip install "
                          "spillway[plot]") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = load_history(trace)
    if out is None:
        out = os.path.splitext(os.fspath(trace))[0] + ".png"
    rows = buffer_lanes(h, lanes) if lanes > 0 else []
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
                     [(s - d) / MIB for s, d in zip(h["spilled"],
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
        lx.set_xlabel("seconds")
        lx.grid(True, axis="x", alpha=0.3)
        from matplotlib.patches import Patch
        lx.legend(handles=[Patch(color=c, label=n)
                           for c, n in _PLACES.values()],
                  loc="lower right", bbox_to_anchor=(1.0, 1.0),
                  fontsize=7, ncol=3, frameon=False)
    else:
        ax.set_xlabel("seconds")
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
    args = p.parse_args(argv)
    try:
        out = plot_memory_history(args.trace, args.output, args.title,
                                  args.holders, args.lanes)
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
