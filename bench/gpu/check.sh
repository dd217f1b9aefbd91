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
#              (bench/gpu/copy_rates.c, driver API only; built by meson)
#   spill      spill/restore bandwidth (and contents compared bit for bit),
#              cached and backend allocation latency, a kernel's enqueue cost
#              (bench/gpu/spill_bench.c; built by meson)
#   wait-cpu   host CPU time while waiting ~1 s for queued work (blocking-
#              sync events: ~0; a spinning wait: ~1)
#   managed    one pipeline (16 x 64 MiB, 1 GiB live) under a 256 MiB
#              budget, against CuPy on managed memory with the device filled
#              to leave the same 256 MiB (bench/gpu/plugin_bench.py)
#   plugins    tests/python/test_cuda_plugins.py on cuda:0 with the real
#              torch, cupy and numba
#   torch-cyc  the torch-spyre scenario: tensors held by reference cycles
#   cupy-cyc   under a 2 GiB limit, with the framework's allocator (OOM
#              expected) and with spillway's plug-in (completes)
#   pinned-cupy, pinned-numba
#              CuPy's and Numba's own kernels on spillway.pinned views
#              (__cuda_array_interface__, on spillway's queue's stream) in
#              an 8-layer pipeline under a quarter budget, checked against
#              NumPy (bench/gpu/plugin_bench.py pinned)
#   torch-lat  torch.empty through spillway's plug-in
#   python     the Python suite against cuda:0, when the build made the module
#              and this Python has pytest
#   torch/cupy cached allocation latency of torch.empty and cupy.empty
#              (bench/gpu/alloc_latency.py), when importable
# The device step also says whether NVRTC was found and where (beside a
# pip-installed PyTorch's nvidia/*/lib too, which it then uses through
# SPILLWAY_NVRTC_LIBRARY when spillway's own search finds none).
# A summary table is printed at the end whatever happened, also written to
# build-gpu/check/summary.txt (and copied with the logs to $OUT when set).
#
# Assumptions -- it installs nothing and uses no network:
#  - A C compiler (cc).  The NVIDIA driver (libcuda.so.1) and NVRTC (libnvrtc,
#    from the CUDA toolkit; SPILLWAY_NVRTC_LIBRARY may name it) for the GPU
#    steps.
#  - meson and ninja, the one build description (meson.build: the library,
#    the tool, the C suite, the fake driver, bench/gpu/ and the embedded
#    kernels).  meson: $MESON, else .venv/bin/meson (if that venv still
#    runs), else `meson` on PATH, else the mesonbuild package importable by
#    python3 -- including one carried alone, as .venv/lib/python3*/
#    site-packages/mesonbuild (11 MB; the whole .venv is ~125 MB).  ninja:
#    $NINJA, .venv/bin/ninja, `ninja` or `samu` on PATH, or python3 -m
#    ninja.  Without both the build step says what it looked for and every
#    later step is skipped (nothing is compiled by hand).
#  - CUDA_HOME (or CUDA_PATH), when set, is passed to meson as -Dcuda-home
#    (where cuda.h and nvcc are; the usual places are probed otherwise).
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
NVRTC_NOTE="not looked for"
# A dry run (sim:0) shrinks the Python benchmarks' sizes.
if [[ $SPEC != cuda:* ]]; then export SPILLWAY_CHECK_SCALE=${SPILLWAY_CHECK_SCALE:-64}; fi
export SPILLWAY_CHECK_DEVICE=$SPEC

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
        printf '%-44s %12s  %s\n' "pinned 64 MiB alloc, device busy (ms)" "${RES[pinned_alloc_busy_ms]:--}" \
            "idle ${RES[pinned_alloc_idle_ms]:--} ms; waited for the device: ${RES[pinned_alloc_waits]:--} (of ${RES[pinned_busy_ms]:-?} ms queued)"
        printf '%-44s %12s  %s\n' "pinned 64 MiB free, device busy (ms)" "${RES[pinned_free_busy_ms]:--}" \
            "idle ${RES[pinned_free_idle_ms]:--} ms; waited for the device: ${RES[pinned_free_waits]:--} (1: hostpool.c must not free under the lock)"
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
        local tse=${RES[torch_spillway_empty_ns]:-}
        printf '%-44s %12s  %s\n' "torch.empty 1 MiB, spillway plug-in (ns)" "${tse:--}" \
            "$(ratio "$tse" "$te")x PyTorch's caching allocator (goal <= 2)"
        printf '%-44s %12s  %s\n' "host CPU while waiting for the device" "${RES[wait_cpu_fraction]:--}" \
            "of ${RES[wait_wall_s]:-?} s waited (blocking sync: ~0)"
        local ms=${RES[managed_s]:-} mw=${RES[managed_spillway_s]:-}
        printf '%-44s %12s  %s\n' "pipeline, managed memory oversubscribed (s)" "${ms:--}" \
            "spillway ${mw:--} s: managed/spillway ${RES[managed_over_spillway]:--} (goal >= 2), same result ${RES[managed_same_result]:--}"
        printf '%-44s %12s  %s\n' "torch cycles, PyTorch's allocator" "${RES[torch_default_cycles]:--}" "2 GiB limit, 200 x 64 MiB in cycles"
        printf '%-44s %12s  %s\n' "torch cycles, spillway's plug-in" "${RES[torch_spillway_cycles]:--}" "2 GiB budget"
        printf '%-44s %12s  %s\n' "cupy cycles, CuPy's pool" "${RES[cupy_default_cycles]:--}" "2 GiB limit"
        printf '%-44s %12s  %s\n' "cupy cycles, spillway's plug-in" "${RES[cupy_spillway_cycles]:--}" "2 GiB budget"
        echo
        echo "NVRTC: $NVRTC_NOTE"
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

# Options for this build: the GPU benchmarks, and the toolkit when named.
meson_opts() {
    printf '%s\n' -Dgpu_bench=enabled
    local home=${CUDA_HOME:-${CUDA_PATH:-}}
    if [[ -n $home ]]; then printf '%s\n' "-Dcuda-home=$home"; fi
}

meson_build() {
    local meson=$1 ninja=$2 ninja_dir opts
    mapfile -t opts < <(meson_opts)
    # meson looks for ninja on PATH (or $NINJA).
    ninja_dir=$(mktemp -d)
    printf '#!/bin/sh\nexec %s "$@"\n' "$ninja" >"$ninja_dir/ninja"
    chmod +x "$ninja_dir/ninja"
    if [[ -f $BUILD/meson-private/coredata.dat ]]; then
        PATH=$ninja_dir:$PATH $meson setup --reconfigure "$BUILD" "${opts[@]}" ||
            PATH=$ninja_dir:$PATH $meson setup --wipe "$BUILD" "${opts[@]}"
    else
        PATH=$ninja_dir:$PATH $meson setup "$BUILD" "${opts[@]}"
    fi
    PATH=$ninja_dir:$PATH $ninja -C "$BUILD" -j 16
}

# Exit 3 (the step then reads SKIP) when there is no meson or no ninja.
build() {
    local meson ninja
    meson=$(find_meson || true)
    ninja=$(find_ninja || true)
    echo "meson: ${meson:-none}; ninja: ${ninja:-none}; cc: $(cc --version | head -1)"
    if [[ -z $meson || -z $ninja ]]; then
        local what=ninja
        if [[ -z $meson && -z $ninja ]]; then
            what="meson or ninja"
        elif [[ -z $meson ]]; then
            what=meson
        fi
        echo "no $what found: looked at \$MESON and \$NINJA, .venv/bin, PATH," \
            "$PY -m mesonbuild.mesonmain (also with a carried" \
            ".venv/lib/python3*/site-packages/mesonbuild) and $PY -m ninja;" \
            "the build and every step after it are skipped"
        return 3
    fi
    # A carried mesonbuild package: what meson has ninja run at build time
    # (`python3 -m mesonbuild.mesonmain --internal ...`) needs it too.
    if [[ $meson == "env PYTHONPATH="* ]]; then
        local pp=${meson#env PYTHONPATH=}
        export PYTHONPATH=${pp%% *}
    fi
    meson_build "$meson" "$ninja"
}
export -f find_meson find_ninja meson_opts meson_build build
export ROOT BUILD PY

run_step build 200 bash -c 'set -euo pipefail; build'
detail=$(grep -m1 '^meson:' "$LOGS/build.log" || true)
if [[ $STATUS == "FAIL(3)" ]] && grep -q '^no .* found: looked at' "$LOGS/build.log"; then
    STATUS=SKIP
    detail=$(grep -m1 '^no .* found' "$LOGS/build.log" | cut -d: -f1)
    note "build skipped: $detail (see $LOGS/build.log)"
fi
record build "$STATUS" "$SECS" "$detail"
[[ $STATUS == PASS ]] && BUILT=1
ls "$BUILD"/python/spillway/_spillway*.so >/dev/null 2>&1 && HAVE_PYMOD=1

TOOL=$BUILD/spillway
SUITE=$BUILD/tests/c/test_spillway

# ---------------------------------------------------------------------------
# 2. The device
# ---------------------------------------------------------------------------

# Where NVRTC is: spillway's own search (the cuda_nvrtc_ptx test skips
# without it), and the copies a pip-installed PyTorch or CuPy brings
# (site-packages/nvidia/*/lib), used when spillway's search finds none.
nvrtc_probe() {
    local own pipped
    own=$("$SUITE" cuda_nvrtc_ptx 2>&1 | grep -E '^(ok|skip|FAIL) ' | head -1 || true)
    pipped=$("$PY" - <<'PYEOF' 2>/dev/null || true
import glob, os, site, sys
dirs = set(site.getsitepackages() + [site.getusersitepackages()])
for m in ("torch", "cupy", "nvidia"):
    try:
        mod = __import__(m)
        dirs.add(os.path.dirname(os.path.dirname(mod.__file__)))
    except Exception:
        pass
hits = []
for d in sorted(dirs):
    hits += glob.glob(os.path.join(d, "nvidia", "*", "lib", "libnvrtc.so*"))
hits = [h for h in hits if "builtins" not in h and "alt" not in os.path.basename(h)]
print(sorted(hits)[-1] if hits else "")
PYEOF
)
    echo "spillway's search: ${own:-?}"
    echo "pip-installed: ${pipped:-none}"
    if [[ $own == skip* && -z ${SPILLWAY_NVRTC_LIBRARY:-} && -n $pipped ]]; then
        echo "USE $pipped"
    fi
}

if ((BUILT)); then
    nvrtc_probe >"$LOGS/nvrtc.log" 2>&1 || true
    if grep -q '^USE ' "$LOGS/nvrtc.log"; then
        export SPILLWAY_NVRTC_LIBRARY=$(sed -n 's/^USE //p' "$LOGS/nvrtc.log")
        NVRTC_NOTE="spillway's search found none; using the pip-installed $SPILLWAY_NVRTC_LIBRARY"
    elif grep -q "^spillway's search: ok" "$LOGS/nvrtc.log"; then
        NVRTC_NOTE="found by spillway's search${SPILLWAY_NVRTC_LIBRARY:+ (SPILLWAY_NVRTC_LIBRARY=$SPILLWAY_NVRTC_LIBRARY)}; pip-installed: $(sed -n 's/^pip-installed: //p' "$LOGS/nvrtc.log")"
    else
        NVRTC_NOTE="not found (kernel tests skip; fills still work): $(head -2 "$LOGS/nvrtc.log" | tr '\n' ' ')"
    fi
    note "NVRTC: $NVRTC_NOTE"
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
    run_step c-suite 150 env SW_TEST_DEVICE="$SPEC" SW_TEST_QUICK=1 \
        SW_TEST_TIMEOUT=60 "$SUITE"
    record c-suite "$STATUS" "$SECS" "$(suite_detail "$LOGS/c-suite.log")"
else
    record c-suite SKIP 0 "no $SPEC"
fi

# ---------------------------------------------------------------------------
# 4. The demo under a budget well below its peak
# ---------------------------------------------------------------------------

if ((GPU)); then
    run_step demo 90 "$TOOL" demo --device "$SPEC" --steps 256 --budget 64M
    d=$(grep -i -m1 -E 'identical|differ|mismatch' "$LOGS/demo.log" || true)
    record demo "$STATUS" "$SECS" "${d:-see $LOGS/demo.log}"
else
    record demo SKIP 0 "no $SPEC"
fi

# ---------------------------------------------------------------------------
# 5. Copy rates and spillway's own figures
# ---------------------------------------------------------------------------

if ((GPU)); then
    if [[ $SPEC == cuda:* ]]; then
        run_step copy-rates 60 "$BUILD/bench/gpu/copy_rates" "${SPEC#cuda:}" 256
        detail="256 MiB copies, best of 5"
    else
        # A dry run: the program's own logic, against the fake driver the
        # build makes (host memcpy: not a device's figures), and the fake
        # NVRTC that goes with it.
        run_step copy-rates 60 env \
            SPILLWAY_CUDA_LIBRARY="$ROOT/$BUILD/tests/c/libcuda_fake.so" \
            SPILLWAY_NVRTC_LIBRARY="$ROOT/$BUILD/tests/c/libnvrtc_fake.so" \
            "$BUILD/bench/gpu/copy_rates" 0 256
        detail="256 MiB copies through the fake driver (dry run)"
    fi
    collect "$LOGS/copy-rates.log"
    record copy-rates "$STATUS" "$SECS" "$detail"

    run_step spill 90 "$BUILD/bench/gpu/spill_bench" "$SPEC"
    collect "$LOGS/spill.log"
    record spill "$STATUS" "$SECS" "8 x 64 MiB under a 192 MiB budget, 3 rounds"
else
    record copy-rates SKIP 0 "no $SPEC"
    record spill SKIP 0 "no $SPEC"
fi

# ---------------------------------------------------------------------------
# 5b. Waiting, managed memory, and the frameworks on spillway
# ---------------------------------------------------------------------------

# A Python with the module's dependencies (numpy) and, for the plug-in
# tests, pytest; the frameworks are whatever that Python has.
PYB=""
for p in "$ROOT/.venv/bin/python" "$PY"; do
    if "$p" -c 'import numpy' >/dev/null 2>&1; then PYB=$p; break; fi
done
for p in "$PY" "$ROOT/.venv/bin/python"; do # torch lives in the system one
    if "$p" -c 'import numpy, torch' >/dev/null 2>&1; then PYB=$p; break; fi
done
PYENV=(env PYTHONPATH="$ROOT/$BUILD/python" SPILLWAY_BUILD_DIR="$BUILD")

if ((GPU)) && ((HAVE_PYMOD)) && [[ -n $PYB ]]; then
    run_step wait-cpu 40 "${PYENV[@]}" "$PYB" bench/gpu/plugin_bench.py wait-cpu
    collect "$LOGS/wait-cpu.log"
    record wait-cpu "$STATUS" "$SECS" "CPU fraction ${RES[wait_cpu_fraction]:--} of ${RES[wait_wall_s]:-?} s"

    run_step managed 90 "${PYENV[@]}" "$PYB" bench/gpu/plugin_bench.py managed
    collect "$LOGS/managed.log"
    n=$(grep -m1 '^NOTE ' "$LOGS/managed.log" | sed 's/^NOTE //' || true)
    record managed "$([[ -n $n ]] && echo SKIP || echo "$STATUS")" "$SECS" \
        "${n:-managed/spillway ${RES[managed_over_spillway]:--}}"

    if "$PYB" -c 'import pytest' >/dev/null 2>&1; then
        run_step plugins 90 env SPILLWAY_BUILD_DIR="$BUILD" SPILLWAY_DEVICE="$SPEC" \
            "$PYB" -m pytest -q -p no:cacheprovider -rs tests/python/test_cuda_plugins.py
        record plugins "$STATUS" "$SECS" "$(grep -E '[0-9]+ (passed|failed)' "$LOGS/plugins.log" | tail -1 || true)"
    else
        record plugins SKIP 0 "no pytest in $PYB"
    fi

    for fw in torch cupy; do
        for mode in default spillway; do
            run_step "$fw-cyc-$mode" 45 "${PYENV[@]}" "$PYB" bench/gpu/plugin_bench.py cycles "$fw" "$mode"
            collect "$LOGS/$fw-cyc-$mode.log"
        done
        n=$(grep -h -m1 '^NOTE ' "$LOGS/$fw-cyc-default.log" | sed 's/^NOTE //' || true)
        if [[ -n $n ]]; then
            record "$fw-cyc" SKIP "$SECS" "$n"
        else
            d=${RES[${fw}_default_cycles]:-?}
            w=${RES[${fw}_spillway_cycles]:-?}
            st=PASS
            [[ $d == OOM_at_* && $w == completed ]] || st="FAIL(cycles)"
            record "$fw-cyc" "$st" "$SECS" "own allocator: $d; spillway: $w"
        fi
    done

    # Issue 25: CuPy's and Numba's own kernels on pinned views.
    for fw in cupy numba; do
        run_step "pinned-$fw" 60 "${PYENV[@]}" "$PYB" bench/gpu/plugin_bench.py pinned "$fw"
        collect "$LOGS/pinned-$fw.log"
        n=$(grep -m1 '^NOTE ' "$LOGS/pinned-$fw.log" | sed 's/^NOTE //' || true)
        record "pinned-$fw" "$([[ -n $n ]] && echo SKIP || echo "$STATUS")" "$SECS" \
            "${n:-results ${RES[${fw}_pinned_ok]:-?}, ${RES[${fw}_pinned_spills]:-?} spills, ${RES[${fw}_pinned_ms]:-?} ms}"
    done

    run_step torch-lat 40 "${PYENV[@]}" "$PYB" bench/gpu/plugin_bench.py latency torch-spillway
    collect "$LOGS/torch-lat.log"
    n=$(grep -m1 '^NOTE ' "$LOGS/torch-lat.log" | sed 's/^NOTE //' || true)
    record torch-lat "$([[ -n $n ]] && echo SKIP || echo "$STATUS")" "$SECS" \
        "${n:-${RES[torch_spillway_empty_ns]:-?} ns per torch.empty}"
else
    for s in wait-cpu managed plugins torch-cyc cupy-cyc pinned-cupy pinned-numba torch-lat; do
        record "$s" SKIP 0 "no $SPEC, no Python module, or no numpy"
    done
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
        run_step python 90 env SPILLWAY_BUILD_DIR="$BUILD" SPILLWAY_DEVICE="$SPEC" \
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
