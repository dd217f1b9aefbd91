#!/usr/bin/env bash
# bench/device_check.sh -- the body of bench/hip/check.sh and
# bench/ze/check.sh: one backend's device checked on a machine that has one,
# in one run of at most 8 minutes, ending with one table.  Not run on its
# own: each check.sh sets, then sources this file,
#
#   CHECK_NAME      "HIP", "Level Zero" (for the table's title)
#   CHECK_SPEC      the device under test, e.g. hip:0
#   CHECK_BUILD     the build directory, e.g. build-hip
#   CHECK_TESTS     C tests that say what the machine has (the device
#                   step runs them: a backend's *_gpu_device test, its
#                   compiler tests, ...)
#   CHECK_GPU_TEST  the test whose skip line says why the device is absent
#   CHECK_NOTES     one line on what the backend needs at run time
#
# SPILLWAY_CHECK_DEVICE overrides CHECK_SPEC: sim:0 dry-runs the script's
# own logic on a machine without the hardware (the figures are then the
# simulated device's).
#
# Steps, each timed, bounded with `timeout` and logged to $CHECK_BUILD/check/:
#   build    configure and build $CHECK_BUILD/ (meson + ninja, found as
#            bench/gpu/check.sh finds them: $MESON/$NINJA, .venv, PATH, a
#            carried mesonbuild package, python3 -m ninja)
#   device   `spillway info` and `spillway devices`, and CHECK_TESTS; is
#            the device there?  (if not: why, and the device steps skip)
#   c-suite  the whole C suite against the device (SW_TEST_DEVICE)
#   demo     `spillway demo --device SPEC --steps 256 --budget 64M`: a 1 GiB
#            live set under a 64 MiB budget, every output and checkpoint sum
#            required bit-identical to the unbudgeted run
#   spill    spill/restore bandwidth with the contents compared bit for bit,
#            cached and backend allocation latency, a kernel's enqueue cost
#            (bench/gpu/spill_bench.c, public API only; built by meson)
#   python   the Python suite against the device, when the build made the
#            module and a Python with pytest and numpy is here
# The table is printed whatever happened, also written to
# $CHECK_BUILD/check/summary.txt (and copied with the logs to $OUT when
# set).  It installs nothing and uses no network.  Exit status: 0 when every
# step that ran passed, 1 otherwise.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=$CHECK_BUILD
LOGS=$BUILD/check
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log "$LOGS/summary.txt"

T0=$(date +%s)
DEADLINE=$((T0 + 470)) # 8 minutes, less a margin for the table
SPEC=${SPILLWAY_CHECK_DEVICE:-$CHECK_SPEC}
PY=${PYTHON:-python3}

declare -a STEPS=() # "name|status|seconds|detail"
declare -A RES=()   # RESULT name=value from the benchmark step
DEV=0
BUILT=0
HAVE_PYMOD=0

note() { printf '== %s\n' "$*"; }
record() { STEPS+=("$1|$2|$3|$4"); }

# run_step NAME LIMIT COMMAND...: COMMAND under timeout, its output in
# $LOGS/NAME.log; sets STATUS (PASS, FAIL(rc), TIMEOUT, SKIP) and SECS.
STATUS=SKIP
SECS=0
run_step() {
    local name=$1 limit=$2
    shift 2
    local left=$((DEADLINE - $(date +%s)))
    if ((left < limit)); then limit=$left; fi
    if ((limit < 5)); then
        STATUS=SKIP SECS=0
        echo "out of time (8-minute budget)" >"$LOGS/$name.log"
        return 0
    fi
    note "$name (at most ${limit}s)"
    local start rc=0
    start=$(date +%s.%N)
    timeout -k 5 "$limit" "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
    SECS=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    case $rc in
    0) STATUS=PASS ;;
    124 | 137) STATUS=TIMEOUT ;;
    *) STATUS="FAIL($rc)" ;;
    esac
    tail -n 3 "$LOGS/$name.log" | sed 's/^/   | /'
    return 0
}

collect() {
    local line kv
    while IFS= read -r line; do
        kv=${line#RESULT }
        RES[${kv%%=*}]=${kv#*=}
    done < <(grep -h '^RESULT ' "$1" 2>/dev/null || true)
}

summary() {
    local rc=$?
    set +e
    {
        echo
        echo "spillway $CHECK_NAME check on $SPEC ($(date -u '+%Y-%m-%d %H:%M UTC'), $(($(date +%s) - T0)) s)"
        if [[ -n ${DEV_DESC:-} ]]; then echo "device: $DEV_DESC"; fi
        echo "needs: $CHECK_NOTES"
        echo
        printf '%-9s %-12s %7s  %s\n' step status seconds detail
        printf '%-9s %-12s %7s  %s\n' --------- ------------ ------- ------
        local s name status secs detail
        for s in "${STEPS[@]}"; do
            IFS='|' read -r name status secs detail <<<"$s"
            printf '%-9s %-12s %7s  %s\n' "$name" "$status" "$secs" "$detail"
        done
        echo
        printf '%-44s %12s  %s\n' measurement value note
        printf '%-44s %12s  %s\n' -------------------------------------------- ------------ ----
        printf '%-44s %12s  %s\n' "spillway spill, D->H (GB/s)" "${RES[spill_gbs]:--}" ""
        printf '%-44s %12s  %s\n' "spillway restore, H->D (GB/s)" "${RES[restore_gbs]:--}" ""
        printf '%-44s %12s  %s\n' "spilled buffers read back" "${RES[spill_contents]:--}" \
            "${RES[spills]:-?} spills, ${RES[restores]:-?} restores"
        printf '%-44s %12s  %s\n' "spillway alloc+free 1 MiB, cached (ns, C)" \
            "${RES[sw_cached_alloc_free_ns]:--}" ""
        printf '%-44s %12s  %s\n' "spillway alloc+free 1 MiB, backend (ns, C)" \
            "${RES[sw_backend_alloc_free_ns]:--}" "the cache emptied each time"
        printf '%-44s %12s  %s\n' "sw_op_add 2^20 float32, enqueue (us)" \
            "${RES[sw_op_add_enqueue_us]:--}" \
            "with execution: ${RES[sw_op_add_total_us]:--} us, result ${RES[sw_op_add_result]:--}"
    } | tee "$LOGS/summary.txt"
    if [[ -n ${OUT:-} && -d ${OUT:-} && -w ${OUT:-} ]]; then
        cp "$LOGS"/*.log "$LOGS/summary.txt" "$OUT"/ 2>/dev/null || true
    fi
    local failed=0 s2
    for s2 in "${STEPS[@]}"; do
        [[ $s2 == *"|FAIL"* || $s2 == *"|TIMEOUT|"* ]] && failed=1
    done
    if ((rc != 0)); then exit "$rc"; fi
    exit "$failed"
}
trap summary EXIT

# ---------------------------------------------------------------------------
# 1. Build (meson and ninja found as bench/gpu/check.sh finds them)
# ---------------------------------------------------------------------------

find_meson() {
    if [[ -n ${MESON:-} ]]; then echo "$MESON"; return; fi
    if [[ -x .venv/bin/meson ]] && .venv/bin/meson --version >/dev/null 2>&1; then
        echo "$ROOT/.venv/bin/meson"; return
    fi
    if command -v meson >/dev/null 2>&1; then command -v meson; return; fi
    if "$PY" -c 'import mesonbuild' >/dev/null 2>&1; then
        echo "$PY -m mesonbuild.mesonmain"; return
    fi
    local d
    for d in .venv/lib/python3*/site-packages; do
        if [[ -d $d/mesonbuild ]] &&
            PYTHONPATH=$ROOT/$d "$PY" -c 'import mesonbuild' >/dev/null 2>&1; then
            echo "env PYTHONPATH=$ROOT/$d $PY -m mesonbuild.mesonmain"; return
        fi
    done
}

find_ninja() {
    if [[ -n ${NINJA:-} ]]; then echo "$NINJA"; return; fi
    if [[ -x .venv/bin/ninja ]] && .venv/bin/ninja --version >/dev/null 2>&1; then
        echo "$ROOT/.venv/bin/ninja"; return
    fi
    local n
    for n in ninja samu; do
        if command -v "$n" >/dev/null 2>&1; then command -v "$n"; return; fi
    done
    if "$PY" -c 'import ninja' >/dev/null 2>&1; then echo "$PY -m ninja"; fi
}

build() {
    local meson ninja ninja_dir
    meson=$(find_meson || true)
    ninja=$(find_ninja || true)
    echo "meson: ${meson:-none}; ninja: ${ninja:-none}; cc: $(cc --version | head -1)"
    if [[ -z $meson || -z $ninja ]]; then
        echo "no meson or ninja found: looked at \$MESON and \$NINJA, .venv/bin," \
            "PATH, $PY -m mesonbuild.mesonmain and $PY -m ninja; the build" \
            "and every step after it are skipped"
        return 3
    fi
    if [[ $meson == "env PYTHONPATH="* ]]; then
        local pp=${meson#env PYTHONPATH=}
        export PYTHONPATH=${pp%% *}
    fi
    ninja_dir=$(mktemp -d)
    printf '#!/bin/sh\nexec %s "$@"\n' "$ninja" >"$ninja_dir/ninja"
    chmod +x "$ninja_dir/ninja"
    if [[ -f $BUILD/meson-private/coredata.dat ]]; then
        PATH=$ninja_dir:$PATH $meson setup --reconfigure "$BUILD" -Dgpu_bench=enabled ||
            PATH=$ninja_dir:$PATH $meson setup --wipe "$BUILD" -Dgpu_bench=enabled
    else
        PATH=$ninja_dir:$PATH $meson setup "$BUILD" -Dgpu_bench=enabled
    fi
    PATH=$ninja_dir:$PATH $ninja -C "$BUILD" -j "$(nproc 2>/dev/null || echo 4)"
}
export -f find_meson find_ninja build
export ROOT BUILD PY

run_step build 200 bash -c 'set -euo pipefail; build'
detail=$(grep -m1 '^meson:' "$LOGS/build.log" || true)
if [[ $STATUS == "FAIL(3)" ]] && grep -q '^no meson or ninja found' "$LOGS/build.log"; then
    STATUS=SKIP
    detail="no meson or ninja"
fi
record build "$STATUS" "$SECS" "$detail"
[[ $STATUS == PASS ]] && BUILT=1
ls "$BUILD"/python/spillway/_spillway*.so >/dev/null 2>&1 && HAVE_PYMOD=1

TOOL=$BUILD/spillway
SUITE=$BUILD/tests/c/test_spillway

# ---------------------------------------------------------------------------
# 2. The device
# ---------------------------------------------------------------------------

if ((BUILT)); then
    # shellcheck disable=SC2086 # CHECK_TESTS is a list of test names
    run_step device 60 bash -c "'$TOOL' info; echo; '$TOOL' devices; echo; \
        '$SUITE' $CHECK_TESTS"
    devices=$("$TOOL" devices 2>/dev/null || true)
    if grep -qx "$SPEC" <<<"$devices"; then
        DEV=1
        DEV_DESC=$(grep -m1 "^$SPEC " "$LOGS/device.log" | tr -s ' ' || true)
        record device "$STATUS" "$SECS" "$SPEC present"
    else
        why=$(grep -m1 "^skip $CHECK_GPU_TEST:" "$LOGS/device.log" |
            sed "s/^skip $CHECK_GPU_TEST: //" || true)
        record device SKIP "$SECS" "no $SPEC: ${why:-see $LOGS/device.log}"
    fi
else
    record device SKIP 0 "no build"
fi

# ---------------------------------------------------------------------------
# 3. The C suite, the demo, the benchmark
# ---------------------------------------------------------------------------

suite_detail() {
    local total fails
    total=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1 || true)
    if [[ -z $total ]]; then
        total="$(grep -c '^ok ' "$1" || true) passed, $(grep -c '^FAIL ' "$1" || true) failed, $(grep -c '^skip ' "$1" || true) skipped (so far)"
    fi
    fails=$(grep '^FAIL ' "$1" | awk '{print $2}' | tr -d : | head -8 | tr '\n' ' ' || true)
    echo "$total${fails:+; failed: $fails}"
}

if ((DEV)); then
    run_step c-suite 220 env SW_TEST_DEVICE="$SPEC" SW_TEST_QUICK=1 \
        SW_TEST_TIMEOUT=60 "$SUITE"
    record c-suite "$STATUS" "$SECS" "$(suite_detail "$LOGS/c-suite.log")"

    run_step demo 90 "$TOOL" demo --device "$SPEC" --steps 256 --budget 64M
    d=$(grep -i -m1 -E 'identical|differ|mismatch' "$LOGS/demo.log" || true)
    record demo "$STATUS" "$SECS" "${d:-see $LOGS/demo.log}"

    if [[ -x $BUILD/bench/gpu/spill_bench ]]; then
        run_step spill 90 "$BUILD/bench/gpu/spill_bench" "$SPEC"
        collect "$LOGS/spill.log"
        record spill "$STATUS" "$SECS" "8 x 64 MiB under a 192 MiB budget, 3 rounds"
    else
        record spill SKIP 0 "no $BUILD/bench/gpu/spill_bench (-Dgpu_bench)"
    fi
else
    for s in c-suite demo spill; do record "$s" SKIP 0 "no $SPEC"; done
fi

# ---------------------------------------------------------------------------
# 4. The Python suite
# ---------------------------------------------------------------------------

if ((DEV)) && ((HAVE_PYMOD)); then
    pysuite=""
    for p in "$ROOT/.venv/bin/python" "$PY"; do
        if "$p" -c 'import pytest, numpy' >/dev/null 2>&1; then pysuite=$p; break; fi
    done
    if [[ -n $pysuite ]] && [[ -d tests/python ]]; then
        run_step python 90 env SPILLWAY_BUILD_DIR="$BUILD" SPILLWAY_DEVICE="$SPEC" \
            "$pysuite" -m pytest -q -p no:cacheprovider tests/python
        record python "$STATUS" "$SECS" "$(grep -E '[0-9]+ (passed|failed)' "$LOGS/python.log" | tail -1 || true)"
    else
        record python SKIP 0 "no Python with pytest and numpy here"
    fi
elif ((DEV)); then
    record python SKIP 0 "the build made no Python module"
else
    record python SKIP 0 "no $SPEC"
fi
