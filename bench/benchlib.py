"""benchlib.py -- what the Python benchmarks share: finding the built
package, and timing a loop as the best ns per iteration over repeats."""

import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def import_spillway(build, who):
    """Import spillway from BUILD/python (default $SPILLWAY_BUILD_DIR, else
    build-release, else build); returns (module, build path)."""
    if build is None:
        build = os.environ.get("SPILLWAY_BUILD_DIR")
    candidates = [build] if build else ["build-release", "build"]
    for c in candidates:
        p = pathlib.Path(c)
        if not p.is_absolute():
            p = ROOT / p
        if (p / "python" / "spillway").is_dir():
            sys.path.insert(0, str(p / "python"))
            import spillway
            return spillway, p
    sys.exit(f"{who}: no built package in {candidates} "
             "(build with Python headers available)")


def best_ns(loop, n, repeat):
    """Best ns per iteration of loop(n) over repeat runs."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        loop(n)
        t1 = time.perf_counter_ns()
        best = min(best, (t1 - t0) / n)
    return best
