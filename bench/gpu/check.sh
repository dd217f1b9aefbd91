#!/usr/bin/env bash
# bench/gpu/check.sh -- spillway's CUDA backend on a real GPU, in one run of
# at most 8 minutes (sized for one H200 and 16 cores), ending with one table.
#
#   bash bench/gpu/check.sh            (from anywhere; works on the repo root)
#
# Steps, each timed, bounded with `timeout` and logged to build-gpu/check/:
#   build      configure and build build-gpu/ (meson + ninja; see below)
#   device     is cuda:0 there?  (if not: why, and the GPU steps are skipped)
#   c-suite    the whole C suite against cuda:0 (SW_TEST_DEVICE=cuda:0,
#              SW_TEST_QUICK=1), the cuda_gpu_* tests included
#   demo       `spillway demo --device cuda:0 --steps 256 --budget 64M`: a
#              1 GiB live set under a 64 MiB budget; the demo itself requires
#              every output and checkpoint sum to be bit-identical to the
#              unbudgeted run and fails otherwise
#   copy-rates the device's pageable and pinned host<->device copy rates
#              (bench/gpu/copy_rates.c, driver API only)
#   spill      spill/restore bandwidth (and contents compared bit for bit),
#              cached and backend allocation latency, a kernel's enqueue cost
#              (bench/gpu/spill_bench.c)
#   python     the Python suite against cuda:0, when the build made the module
#              and this Python has pytest
#   torch/cupy cached allocation latency of torch.empty and cupy.empty
#              (bench/gpu/alloc_latency.py), when importable
# A summary table is printed at the end whatever happened, also written to
# build-gpu/check/summary.txt (and copied with the logs to $OUT when set).
#
# Assumptions -- it installs nothing and uses no network:
#  - A C compiler (cc).  The NVIDIA driver (libcuda.so.1) and NVRTC (libnvrtc,
#    from the CUDA toolkit; SPILLWAY_NVRTC_LIBRARY may name it) for the GPU
#    steps.
#  - meson: $MESON, else .venv/bin/meson (if that venv still runs), else
#    `meson` on PATH, else the mesonbuild package importable by python3 --
#    including one carried alone, as .venv/lib/python3*/site-packages/
#    mesonbuild (11 MB; the whole .venv is ~125 MB).  ninja: $NINJA,
#    .venv/bin/ninja, `ninja` or `samu` on PATH, or python3 -m ninja.
#    Without both, the library, the tool and the C suite are compiled with
#    cc directly (no Python module then).
#  - python3 (or $PYTHON) for the Python steps; torch and cupy are used if
#    importable and noted as absent otherwise.
# Exit status: 0 when every step that ran passed, 1 otherwise.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUILD=build-gpu
LOGS=$BUILD/check
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log "$LOGS/summary.txt"

T0=$(date +%s)
DEADLINE=$((T0 + 470)) # 8 minutes, less a margin for the table
# The device under test.  Another spec (sim:0) dry-runs the script's own
# logic on a machine without a GPU; the figures are then not the GPU's.
SPEC=${SPILLWAY_CHECK_DEVICE:-cuda:0}
PY=${PYTHON:-python3}

declare -a STEPS=()      # "name|status|seconds|detail"
declare -A RES=()        # RESULT name=value from the benchmark steps
GPU=0                    # cuda:0 present
BUILT=0
HAVE_PYMOD=0

# ---------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------

note() { printf '== %s\n' "$*"; }

record() { STEPS+=("$1|$2|$3|$4"); }

# run_step NAME LIMIT COMMAND...: runs COMMAND under timeout with its output
# in $LOGS/NAME.log; sets STATUS (PASS, FAIL(rc), TIMEOUT, SKIP) and SECS.
# Never fails itself.
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

# RESULT lines of a log into RES.
collect() {
    local line kv
    while IFS= read -r line; do
        kv=${line#RESULT }
        RES[${kv%%=*}]=${kv#*=}
    done < <(grep -h '^RESULT ' "$1" 2>/dev/null || true)
}

# ---------------------------------------------------------------------------
# The table (also when a step failed or the script was interrupted)
# ---------------------------------------------------------------------------

ratio() { # a / b with 2 decimals, or "-" when either is missing
    awk -v a="${1:-}" -v b="${2:-}" 'BEGIN {
        if (a == "" || b == "" || b + 0 == 0) print "-";
        else printf "%.2f", a / b }'
}

summary() {
    local rc=$?
    set +e # the table comes out whatever happens
    {
        echo
        echo "spillway CUDA check ($(date -u '+%Y-%m-%d %H:%M UTC'), $(($(date +%s) - T0)) s)"
        if [[ -n ${GPU_DESC:-} ]]; then echo "device: $GPU_DESC"; fi
        echo
        printf '%-11s %-12s %7s  %s\n' step status seconds detail
        printf '%-11s %-12s %7s  %s\n' ----------- ------------ ------- ------
        local s name status secs detail
        for s in "${STEPS[@]}"; do
            IFS='|' read -r name status secs detail <<<"$s"
            printf '%-11s %-12s %7s  %s\n' "$name" "$status" "$secs" "$detail"
        done
        echo
        printf '%-44s %12s  %s\n' measurement value "relative to"
        printf '%-44s %12s  %s\n' -------------------------------------------- ------------ -----------
        local ph=${RES[pageable_h2d_gbs]:-} pd=${RES[pageable_d2h_gbs]:-}
        local nh=${RES[pinned_h2d_gbs]:-} nd=${RES[pinned_d2h_gbs]:-}
        local sp=${RES[spill_gbs]:-} rs=${RES[restore_gbs]:-}
        printf '%-44s %12s  %s\n' "copy D->H, pageable host memory (GB/s)" "${pd:--}" ""
        printf '%-44s %12s  %s\n' "copy D->H, pinned host memory (GB/s)" "${nd:--}" ""
        printf '%-44s %12s  %s\n' "copy H->D, pageable host memory (GB/s)" "${ph:--}" ""
        printf '%-44s %12s  %s\n' "copy H->D, pinned host memory (GB/s)" "${nh:--}" ""
        printf '%-44s %12s  %s\n' "spillway spill, D->H (GB/s)" "${sp:--}" \
            "$(ratio "$sp" "$pd") of pageable, $(ratio "$sp" "$nd") of pinned"
        printf '%-44s %12s  %s\n' "spillway restore, H->D (GB/s)" "${rs:--}" \
            "$(ratio "$rs" "$ph") of pageable, $(ratio "$rs" "$nh") of pinned"
        printf '%-44s %12s  %s\n' "spilled buffers read back" "${RES[spill_contents]:--}" \
            "${RES[spills]:-?} spills, ${RES[restores]:-?} restores"
        local sc=${RES[sw_cached_alloc_free_ns]:-} sb=${RES[sw_backend_alloc_free_ns]:-}
        local te=${RES[torch_empty_ns]:-} ce=${RES[cupy_empty_ns]:-}
        local pc=${RES[python_call_ns]:-}
        printf '%-44s %12s  %s\n' "spillway alloc+free 1 MiB, cached (ns, C)" "${sc:--}" ""
        printf '%-44s %12s  %s\n' "spillway alloc+free 1 MiB, backend (ns, C)" "${sb:--}" \
            "pool alloc + stream-ordered free + empty_cache"
        printf '%-44s %12s  %s\n' "torch.empty 1 MiB, cached (ns, Python)" "${te:-${TORCH_NOTE:--}}" \
            "$([[ -n $te ]] && echo "$(ratio "$te" "$sc")x spillway; empty Python call ${pc:-?} ns")"
        printf '%-44s %12s  %s\n' "cupy.empty 1 MiB, memory pool (ns, Python)" "${ce:-${CUPY_NOTE:--}}" \
            "$([[ -n $ce ]] && echo "$(ratio "$ce" "$sc")x spillway; empty Python call ${pc:-?} ns")"
        printf '%-44s %12s  %s\n' "sw_op_add 2^20 float32, enqueue (us)" "${RES[sw_op_add_enqueue_us]:--}" \
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
# 1. Build
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

meson_build() {
    local meson=$1 ninja=$2 ninja_dir
    # meson looks for ninja on PATH (or $NINJA).
    ninja_dir=$(mktemp -d)
    printf '#!/bin/sh\nexec %s "$@"\n' "$ninja" >"$ninja_dir/ninja"
    chmod +x "$ninja_dir/ninja"
    if [[ -f $BUILD/meson-private/coredata.dat ]]; then
        PATH=$ninja_dir:$PATH $meson setup --reconfigure "$BUILD" ||
            PATH=$ninja_dir:$PATH $meson setup --wipe "$BUILD"
    else
        PATH=$ninja_dir:$PATH $meson setup "$BUILD"
    fi
    PATH=$ninja_dir:$PATH $ninja -C "$BUILD" -j 16
}

# The same with cc alone: the library (static and shared), the tool and
# the C suite.  OpenCL and the cuda.h check as meson would decide them.
cc_build() {
    local cflags=(-std=c11 -O2 -g -D_GNU_SOURCE -pthread -Iinclude -Isrc)
    local libs=(-ldl -lm -pthread) opencl=() objdir=$BUILD/obj
    mkdir -p "$objdir" "$BUILD/tests/c"
    mapfile -t srcs < <(grep -o "'src/[^']*\.c'" meson.build | tr -d "'" | sort -u)
    if printf '#include <CL/cl.h>\nint main(void){return clGetPlatformIDs(0,0,0);}\n' |
        cc -x c - -lOpenCL -o "$objdir/cltest" >/dev/null 2>&1; then
        opencl=(-DSW_HAVE_OPENCL=1)
        libs+=(-lOpenCL)
    else
        mapfile -t srcs < <(printf '%s\n' "${srcs[@]}" | grep -v 'opencl\.c$')
    fi
    local s o pid objs=() pids=()
    for s in "${srcs[@]}"; do
        o=$objdir/$(echo "$s" | tr / _).o
        cc "${cflags[@]}" "${opencl[@]}" -DSW_BUILDING_LIBRARY -fPIC \
            -fvisibility=hidden -c "$s" -o "$o" &
        objs+=("$o")
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    ar rcs "$BUILD/libspillway.a" "${objs[@]}"
    cc -shared -o "$BUILD/libspillway.so" "${objs[@]}" "${libs[@]}"
    cc "${cflags[@]}" tools/spillway.c "$BUILD/libspillway.a" "${libs[@]}" \
        -o "$BUILD/spillway"
    local tsrc=(tests/c/*.c) targs=("${opencl[@]}")
    local inc
    for inc in "${CUDA_HOME:-/usr/local/cuda}/include" /usr/local/cuda/include; do
        if [[ -f $inc/cuda.h ]]; then
            tsrc+=(tests/cuda/sigcheck.c)
            targs+=(-DSW_HAVE_CUDA_H=1 "-I$inc")
            break
        fi
    done
    cc "${cflags[@]}" "${targs[@]}" "${tsrc[@]}" "$BUILD/libspillway.a" \
        "${libs[@]}" -o "$BUILD/tests/c/test_spillway"
}

build() {
    local meson ninja
    meson=$(find_meson || true)
    ninja=$(find_ninja || true)
    echo "meson: ${meson:-none}; ninja: ${ninja:-none}; cc: $(cc --version | head -1)"
    if [[ -n $meson && -n $ninja ]]; then
        meson_build "$meson" "$ninja"
    else
        echo "no meson/ninja here: building with cc directly"
        rm -rf "$BUILD/obj"
        cc_build
    fi
}
export -f find_meson find_ninja meson_build cc_build build
export ROOT BUILD PY

run_step build 200 bash -c 'set -euo pipefail; build'
detail=$(grep -m1 '^meson:' "$LOGS/build.log" || true)
grep -q '^no meson/ninja' "$LOGS/build.log" && detail="cc only (no meson/ninja found)"
record build "$STATUS" "$SECS" "$detail"
[[ $STATUS == PASS ]] && BUILT=1
ls "$BUILD"/python/spillway/_spillway*.so >/dev/null 2>&1 && HAVE_PYMOD=1

TOOL=$BUILD/spillway
SUITE=$BUILD/tests/c/test_spillway

# ---------------------------------------------------------------------------
# 2. The device
# ---------------------------------------------------------------------------

if ((BUILT)); then
    run_step device 30 bash -c "'$TOOL' info; echo; '$TOOL' devices; echo; \
        '$SUITE' cuda_gpu_device cuda_stub_driver cuda_nvrtc_ptx"
    devices=$("$TOOL" devices 2>/dev/null || true)
    if grep -qx "$SPEC" <<<"$devices"; then
        GPU=1
        GPU_DESC=$(grep -m1 "^$SPEC " "$LOGS/device.log" | tr -s ' ' || true)
        record device "$STATUS" "$SECS" "$SPEC present"
    else
        why=$(grep -m1 '^skip cuda_gpu_device:' "$LOGS/device.log" |
            sed 's/^skip cuda_gpu_device: //' || true)
        record device "SKIP" "$SECS" "no $SPEC: ${why:-see $LOGS/device.log}"
    fi
else
    record device SKIP 0 "no build"
fi

# ---------------------------------------------------------------------------
# 3. The C suite against the GPU
# ---------------------------------------------------------------------------

suite_detail() { # the runner's total line, or counts so far (timeout)
    local total
    total=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1 || true)
    if [[ -z $total ]]; then
        total="$(grep -c '^ok ' "$1" || true) passed, $(grep -c '^FAIL ' "$1" || true) failed, $(grep -c '^skip ' "$1" || true) skipped (so far)"
    fi
    local fails
    fails=$(grep '^FAIL ' "$1" | awk '{print $2}' | tr -d : | head -8 | tr '\n' ' ' || true)
    echo "$total${fails:+; failed: $fails}"
}

if ((GPU)); then
    run_step c-suite 220 env SW_TEST_DEVICE=$SPEC SW_TEST_QUICK=1 \
        SW_TEST_TIMEOUT=60 "$SUITE"
    record c-suite "$STATUS" "$SECS" "$(suite_detail "$LOGS/c-suite.log")"
else
    record c-suite SKIP 0 "no $SPEC"
fi

# ---------------------------------------------------------------------------
# 4. The demo under a budget well below its peak
# ---------------------------------------------------------------------------

if ((GPU)); then
    run_step demo 90 "$TOOL" demo --device $SPEC --steps 256 --budget 64M
    d=$(grep -i -m1 -E 'identical|differ|mismatch' "$LOGS/demo.log" || true)
    record demo "$STATUS" "$SECS" "${d:-see $LOGS/demo.log}"
else
    record demo SKIP 0 "no $SPEC"
fi

# ---------------------------------------------------------------------------
# 5. Copy rates and spillway's own figures
# ---------------------------------------------------------------------------

if ((GPU)); then
    run_step copy-rates 60 bash -c "cc -O2 -std=c11 -D_GNU_SOURCE -Isrc \
        bench/gpu/copy_rates.c -ldl -o '$BUILD/copy_rates' && \
        '$BUILD/copy_rates' 0 256"
    collect "$LOGS/copy-rates.log"
    record copy-rates "$STATUS" "$SECS" "256 MiB copies, best of 5"

    if [[ -f $BUILD/libspillway.so ]]; then
        # shellcheck disable=SC2054 # the comma belongs to -Wl,-rpath
        link=(-L"$BUILD" -lspillway -Wl,-rpath,"$ROOT/$BUILD")
    else
        link=("$BUILD/libspillway.a" -ldl -lm -pthread)
    fi
    run_step spill 90 bash -c "cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude \
        bench/gpu/spill_bench.c ${link[*]} -o '$BUILD/spill_bench' && \
        '$BUILD/spill_bench' $SPEC"
    collect "$LOGS/spill.log"
    record spill "$STATUS" "$SECS" "8 x 64 MiB under a 192 MiB budget, 3 rounds"
else
    record copy-rates SKIP 0 "no $SPEC"
    record spill SKIP 0 "no $SPEC"
fi

# ---------------------------------------------------------------------------
# 6. The Python suite
# ---------------------------------------------------------------------------

if ((GPU)) && ((HAVE_PYMOD)); then
    pysuite=""
    for p in "$ROOT/.venv/bin/python" "$PY"; do
        if "$p" -c 'import pytest, numpy' >/dev/null 2>&1; then pysuite=$p; break; fi
    done
    if [[ -n $pysuite ]] && [[ -d tests/python ]]; then
        run_step python 90 env SPILLWAY_BUILD_DIR="$BUILD" SPILLWAY_DEVICE=$SPEC \
            "$pysuite" -m pytest -q -p no:cacheprovider tests/python
        record python "$STATUS" "$SECS" "$(grep -E '[0-9]+ (passed|failed)' "$LOGS/python.log" | tail -1 || true)"
    else
        record python SKIP 0 "no Python with pytest and numpy here"
    fi
elif ((GPU)); then
    record python SKIP 0 "the build made no Python module"
else
    record python SKIP 0 "no $SPEC"
fi

# ---------------------------------------------------------------------------
# 7. PyTorch and CuPy
# ---------------------------------------------------------------------------

if ((GPU)); then
    for lib in torch cupy; do
        run_step "$lib" 60 "$PY" bench/gpu/alloc_latency.py "$lib"
        collect "$LOGS/$lib.log"
        n=$(grep -m1 '^NOTE ' "$LOGS/$lib.log" | sed 's/^NOTE //' || true)
        if [[ -n $n ]]; then
            [[ $lib == torch ]] && TORCH_NOTE="absent" || CUPY_NOTE="absent"
            record "$lib" SKIP "$SECS" "$n"
        else
            record "$lib" "$STATUS" "$SECS" "$(grep -m1 -E '^(torch|cupy) ' "$LOGS/$lib.log" || true)"
        fi
    done
else
    record torch SKIP 0 "no $SPEC"
    record cupy SKIP 0 "no $SPEC"
fi
