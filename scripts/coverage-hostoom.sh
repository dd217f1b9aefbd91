#!/usr/bin/env bash
# scripts/coverage-hostoom.sh -- does the host-allocation fault suite reach
# every SW_ERR_HOST_OOM return of the core?
#
#   scripts/coverage-hostoom.sh [DEVICE...]     (default: sim:0)
#
# Builds build-cov/ (gcov instrumentation, no Python module), runs the
# hostoom_* tests of the C suite on each device, and lists every line of
# src/core/*.c that returns SW_ERR_HOST_OOM with its execution count.
# Exits 1 if any was never executed.  `make coverage-hostoom` runs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MESON=${MESON:-.venv/bin/meson}
NINJA=${NINJA:-.venv/bin/ninja}
BUILD=build-cov
devices=("$@")
[[ ${#devices[@]} -gt 0 ]] || devices=(sim:0)

if [[ ! -f $BUILD/build.ninja ]]; then
    "$MESON" setup "$BUILD" -Db_coverage=true -Dpython=disabled \
        --buildtype=debug >/dev/null
fi
"$NINJA" -C "$BUILD" tests/c/test_spillway >/dev/null
find "$BUILD" -name '*.gcda' -delete
for d in "${devices[@]}"; do
    SW_TEST_DEVICE=$d "$BUILD/tests/c/test_spillway" hostoom_every_path \
        hostoom_persistent hostoom_order_records | tail -1
done

objdir=$(dirname "$(find "$BUILD" -name 'src_core_buffer.c.gcda' | head -1)")
python3 - "$objdir" <<'PY'
import json, os, re, subprocess, sys, glob
objdir = sys.argv[1]
missed, total = [], 0
for src in sorted(glob.glob("src/core/*.c")):
    base = os.path.basename(src)
    gcda = os.path.join(objdir, "src_core_" + base + ".gcda")
    counts = {}
    if os.path.exists(gcda):
        out = subprocess.run(["gcov", "--json-format", "--stdout", gcda],
                             capture_output=True, text=True, check=True)
        for doc in out.stdout.splitlines():
            for f in json.loads(doc)["files"]:
                if f["file"].endswith("src/core/" + base):
                    for ln in f["lines"]:
                        counts[ln["line_number"]] = max(
                            counts.get(ln["line_number"], 0), ln["count"])
    for no, line in enumerate(open(src), 1):
        if "SW_ERR_HOST_OOM" not in line or line.strip().startswith("*"):
            continue
        total += 1
        n = counts.get(no, 0)
        print(f"{src}:{no}: {n:6d}  {line.strip()[:70]}")
        if n == 0:
            missed.append(f"{src}:{no}")
print(f"{total - len(missed)} of {total} SW_ERR_HOST_OOM returns reached")
sys.exit(1 if missed else 0)
PY
