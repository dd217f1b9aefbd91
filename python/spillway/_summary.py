"""memory_summary(): a readable table of a device's accounting."""

import textwrap

from ._spillway import memory_info, memory_snapshot, Device, _format_bytes

__all__ = ["memory_summary", "format_bytes"]


def format_bytes(n):
    """1536 -> '1.50 KiB'; None -> 'n/a'.  The library's formatter
    (sw_format_bytes), so sizes read the same here as in its messages."""
    if n is None:
        return "n/a"
    return _format_bytes(n)


def memory_summary(device=None):
    """A text table of the device's memory: what is in use and its peak,
    what the cache keeps, what is spilled (and of it, in the spill file),
    the clean copies on the host, the budget and the host budget, the
    driver's view, the counters (allocations, spills and restores with
    their bytes and time, retries, failures, collections run under
    pressure), and the largest live buffers (tag, size, state, and what
    holds them in place).

    device: a Device, a spec string such as 'sim:0', or None (the default
    device).  Print it: ``print(spillway.memory_summary())``.
    """
    info = memory_info(device)
    dev = device if isinstance(device, Device) else Device(device)
    width = 66
    rule = "|" + "=" * (width - 2) + "|"
    thin = "|" + "-" * (width - 2) + "|"

    def row(label, value):
        text = f" {label:<30}{value:>32} "
        return "|" + text[: width - 2].ljust(width - 2) + "|"

    if info.device_total is None:
        driver = "unknown"
    elif info.device_free is None:
        driver = f"? free of {format_bytes(info.device_total)}"
    else:
        driver = (f"{format_bytes(info.device_free)} free of "
                  f"{format_bytes(info.device_total)}")
    budget = "none" if info.budget is None else format_bytes(info.budget)
    host_budget = "none" if info.host_budget is None \
        else format_bytes(info.host_budget)
    title = f" spillway memory summary: {dev.name} "
    # The description is wrapped at spaces, never cut inside a word.
    desc = ["|" + f" {part} ".center(width - 2) + "|"
            for part in textwrap.wrap(dev.description, width - 4,
                                      break_long_words=False,
                                      break_on_hyphens=False) or [""]]
    lines = [
        rule,
        "|" + title.center(width - 2) + "|",
        *desc,
        rule,
        row("In use", format_bytes(info.in_use)),
        row("Peak in use", format_bytes(info.peak)),
        row("Cached (free, kept for reuse)", format_bytes(info.cached)),
        row("Spilled to host memory", format_bytes(info.spilled)),
        row("  of it in the spill file", format_bytes(info.spilled_disk)),
        row("Clean copies on the host", format_bytes(info.host_copies)),
        row("Budget (in use + cached)", budget),
        row("Host budget", host_budget),
        row("Device (driver)", driver),
        thin,
        row("Allocations / frees", f"{info.allocs} / {info.frees}"),
        row("Spills", f"{info.spills} ({format_bytes(info.spilled_bytes_total)}"
                      f", {info.spill_seconds:.3f} s)"),
        row("Restores", f"{info.restores} "
                        f"({format_bytes(info.restored_bytes_total)}, "
                        f"{info.restore_seconds:.3f} s)"),
        row("Allocation retries", str(info.alloc_retries)),
        row("Out-of-memory errors", str(info.ooms)),
        row("GC runs under pressure", str(info.gc_runs)),
        *_largest(dev, width, rule, thin),
        rule,
    ]
    return "\n".join(lines)


def _largest(dev, width, rule, thin, count=5):
    """The section on the largest live buffers: one line each."""
    bufs = sorted(memory_snapshot(dev), key=lambda b: b["size"],
                  reverse=True)
    if not bufs:
        return []
    out = [thin, "|" + f" Largest live buffers ({len(bufs)} live)"
           .ljust(width - 2) + "|"]
    for b in bufs[:count]:
        flags = [b["state"]]
        if b.get("on_disk"):
            flags.append("on disk")
        if b.get("host_copy"):
            flags.append("host copy")
        if b["external"]:
            flags.append("external")
        if b["leases"]:
            flags.append(f"{b['leases']} lease(s)")
        if b["pins"]:
            flags.append("pinned")
        tag = b["tag"] or "(untagged)"
        right = f"{format_bytes(b['size'])}  {', '.join(flags)}"
        room = width - 4 - len(right) - 2
        if len(tag) > room:
            tag = tag[: max(room - 3, 1)] + "..."
        out.append("| " + f"{tag:<{room}}  {right}"[: width - 4].ljust(
            width - 4) + " |")
    return out
