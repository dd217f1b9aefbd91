#!/usr/bin/env bash
# fuzz-campaign.sh [SECONDS_EACH] [JOBS] [NAMES] -- the model-based fuzzer across
# every device and variant this machine has, each for SECONDS_EACH (default
# 300) of wall time, JOBS at once (default 2), with fixed seeds; then a
# table of what each ran (inputs, steps, checks, spills, faults, CPU
# seconds) and what it found.  `make fuzz-campaign` runs it; docs/testing.md.
#
# Configurations (a configuration whose binary or device is absent is
# listed as not run):
#   sim-asan          libFuzzer, ASan+UBSan, sim:0,sim:1 (small work inline)
#   sim-queued        plain replayer, sim:0,sim:1, every command queued
#   sim-jitter        plain replayer, sim:0,sim:1, SPILLWAY_SIM_JITTER=50
#   opencl-asan       libFuzzer, ASan+UBSan, opencl:0,sim:0 (PoCL)
#   opencl            plain replayer, opencl:0,sim:0
#   cuda-fake-asan    libFuzzer, ASan+UBSan, cuda:0 (CPU stand-in),sim:0
#   hip-fake          plain replayer, hip:0 (CPU stand-in),sim:0
#   ze-fake           plain replayer, ze:0 (CPU stand-in),sim:0
#   host-asan         libFuzzer, ASan+UBSan, host:0,sim:0
#   threads-asan      libFuzzer, threaded, ASan+UBSan, sim:0,sim:1
#   threads-tsan      threaded replayer under TSan, sim:0,sim:1
#   threads-jitter    threaded replayer, sim:0,sim:1, queued and jittered
#   threads-opencl    threaded replayer, opencl:0,sim:0
#
# Findings: a configuration that fails keeps its log in
# build/fuzz-campaign/NAME.log and its input under
# build/fuzz-campaign/artifacts/ (replay it as docs/testing.md says).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

each=${1:-300}
jobs=${2:-2}
only=${3:-} # a comma-separated list of configurations to run (default: all)
out=build/fuzz-campaign
mkdir -p "$out/artifacts"
[[ -n "$only" ]] || rm -f "$out"/*.log "$out"/*.rc "$out"/*.cpu

supp=$PWD/tests/sanitizers/lsan-pocl.supp
tls=intercept_tls_get_addr=0
asan="ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:$tls UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
asan_pocl="ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:use_sigaltstack=0:$tls UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 LSAN_OPTIONS=suppressions=$supp:print_suppressions=0"
tsan='TSAN_OPTIONS=halt_on_error=1 detect_deadlocks=1 second_deadlock_stack=1'
hip="SPILLWAY_HIP_LIBRARY=build/tests/c/libamdhip64_fake.so SPILLWAY_HIPRTC_LIBRARY=build/tests/c/libhiprtc_fake.so"
ze="SPILLWAY_ZE_LIBRARY=build/tests/c/libze_loader_fake.so"
cuda_fz="SPILLWAY_CUDA_LIBRARY=build-fuzz/tests/c/libcuda_fake.so SPILLWAY_NVRTC_LIBRARY=build-fuzz/tests/c/libnvrtc_fake.so"
fz=build-fuzz/tests/fuzz
seeds=tests/fuzz/seeds
lf="-seed=SEED -max_total_time=$each -max_len=4096"
rp="-seed=SEED -runs=100000000 -max_total_time=$each -max_len=4096"

# NAME | device that must be listed (or -) | environment | target | seeds | options
configs=(
"sim-asan|-|FUZZ_DEVICES=sim:0,sim:1 $asan|$fz/fuzz_spillway|$seeds/spillway|$lf"
"sim-queued|-|FUZZ_DEVICES=sim:0,sim:1 SPILLWAY_SIM_INLINE=0|build/tests/fuzz/fuzz_spillway_replay|$seeds/spillway|$rp"
"sim-jitter|-|FUZZ_DEVICES=sim:0,sim:1 SPILLWAY_SIM_JITTER=50|build/tests/fuzz/fuzz_spillway_replay|$seeds/spillway|$rp"
"opencl-asan|opencl:0|FUZZ_DEVICES=opencl:0,sim:0 FUZZ_REOPEN=8 $asan_pocl|$fz/fuzz_spillway|$seeds/spillway|$lf"
"opencl|opencl:0|FUZZ_DEVICES=opencl:0,sim:0|build/tests/fuzz/fuzz_spillway_replay|$seeds/spillway|$rp"
"cuda-fake-asan|-|FUZZ_DEVICES=cuda:0,sim:0 $cuda_fz $asan|$fz/fuzz_spillway|$seeds/spillway|$lf"
"hip-fake|-|FUZZ_DEVICES=hip:0,sim:0 $hip|build/tests/fuzz/fuzz_spillway_replay|$seeds/spillway|$rp"
"ze-fake|-|FUZZ_DEVICES=ze:0,sim:0 $ze|build/tests/fuzz/fuzz_spillway_replay|$seeds/spillway|$rp"
"host-asan|-|FUZZ_DEVICES=host:0,sim:0 $asan|$fz/fuzz_spillway|$seeds/spillway|$lf"
"threads-asan|-|FUZZ_DEVICES=sim:0,sim:1 $asan|$fz/fuzz_spillway_threads|$seeds/threads|$lf"
"threads-tsan|-|FUZZ_DEVICES=sim:0,sim:1 $tsan|build-tsan/tests/fuzz/fuzz_spillway_threads_replay|$seeds/threads|$rp"
"threads-jitter|-|FUZZ_DEVICES=sim:0,sim:1 SPILLWAY_SIM_INLINE=0 SPILLWAY_SIM_JITTER=50|build/tests/fuzz/fuzz_spillway_threads_replay|$seeds/threads|$rp"
"threads-opencl|opencl:0|FUZZ_DEVICES=opencl:0,sim:0|build/tests/fuzz/fuzz_spillway_threads_replay|$seeds/threads|$rp"
)

# Listed once: PoCL's first open is slow, and a listing beside a busy
# fuzzer could time out.
devices=$(build/spillway devices 2>/dev/null)
have_device() {
    [[ "$1" == - ]] || grep -qx "$1" <<<"$devices"
}

run_one() { # index
    local IFS='|'
    read -r name dev envs target sd opts <<<"${configs[$1]}"
    local log=$out/$name.log
    if [[ ! -x "$target" ]]; then
        echo "not run: no $target" >"$log"; echo 77 >"$out/$name.rc"; return
    fi
    if ! have_device "$dev"; then
        echo "not run: no $dev here" >"$log"; echo 77 >"$out/$name.rc"; return
    fi
    opts=${opts//SEED/$((1000 + $1))}
    local runner=()
    [[ "$target" == build-tsan/* ]] && runner=(scripts/tsan-exec.sh)
    local t0 rc
    t0=$(date +%s)
    # /usr/bin/time is not everywhere: bash's `times` after the child.
    (
        IFS=' '
        # shellcheck disable=SC2086
        env $envs FUZZ_ARTIFACTS="$out/artifacts" \
            "${runner[@]}" tests/fuzz/run.sh "$target" "$sd" $opts
        rc=$?
        times >"$out/$name.cpu" # the second line: the children's
        exit $rc
    ) >"$log" 2>&1
    rc=$?
    echo "$rc" >"$out/$name.rc"
    echo "fuzz-campaign: $name done ($(($(date +%s) - t0)) s, exit $rc)"
}

if [[ -n "$only" ]]; then
    keep=()
    for c in "${configs[@]}"; do
        [[ ",$only," == *",${c%%|*},"* ]] && keep+=("$c")
    done
    configs=("${keep[@]}")
fi
echo "fuzz-campaign: ${#configs[@]} configurations, $each s each, $jobs at once"
start=$(date +%s)
running=0
for i in "${!configs[@]}"; do
    run_one "$i" &
    running=$((running + 1))
    if ((running >= jobs)); then
        wait -n
        running=$((running - 1))
    fi
done
wait

# The table: each log's last statistics lines (fz_world_print_stats).
cpu_total=0
printf '\n%-16s %8s %10s %10s %8s %8s %8s %8s  %s\n' configuration inputs steps checks spills restores faults cpu_s result
tot_in=0 tot_st=0 tot_ch=0 fails=0 ran=0
for c in "${configs[@]}"; do
    name=${c%%|*}
    log=$out/$name.log
    rc=$(cat "$out/$name.rc" 2>/dev/null || echo 1)
    if [[ $rc == 77 ]]; then
        printf '%-16s %s\n' "$name" "$(head -1 "$log")"
        continue
    fi
    ran=$((ran + 1))
    line=$(grep -E '^fuzz [a-z-]+: [0-9]+ inputs' "$log" | tail -1)
    more=$(grep -E '^fuzz [a-z-]+: spills seen' "$log" | tail -1)
    inputs=$(sed -nE 's/.*: ([0-9]+) inputs.*/\1/p' <<<"$line")
    steps=$(sed -nE 's/.* ([0-9]+) steps.*/\1/p' <<<"$line")
    checks=$(sed -nE 's/.* ([0-9]+) checks.*/\1/p' <<<"$line")
    spills=$(sed -nE 's/.*spills seen ([0-9]+).*/\1/p' <<<"$more")
    restores=$(sed -nE 's/.*restores seen ([0-9]+).*/\1/p' <<<"$more")
    faults=$(sed -nE 's/.*faults armed ([0-9]+).*/\1/p' <<<"$more")
    # `times`: the children's user and system time, "XmY.YYYs XmY.YYYs".
    cpu=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, p, "m");
                 sub("s", "", p[2]); n += p[1] * 60 + p[2] } printf "%.0f", n }' \
          "$out/$name.cpu" 2>/dev/null || echo 0)
    result=ok
    if [[ $rc != 0 ]]; then
        result="FAILED (exit $rc): $out/$name.log"
        fails=$((fails + 1))
    fi
    printf '%-16s %8s %10s %10s %8s %8s %8s %8s  %s\n' "$name" "${inputs:-?}" \
        "${steps:-?}" "${checks:-?}" "${spills:-?}" "${restores:-?}" \
        "${faults:-?}" "$cpu" "$result"
    tot_in=$((tot_in + ${inputs:-0})) tot_st=$((tot_st + ${steps:-0}))
    tot_ch=$((tot_ch + ${checks:-0})) cpu_total=$((cpu_total + cpu))
done
printf '%-16s %8s %10s %10s %8s %8s %8s %8s\n' total "$tot_in" "$tot_st" \
    "$tot_ch" '' '' '' "$cpu_total"
echo "fuzz-campaign: $ran configurations ran, $fails failed, $((($(date +%s) - start))) s of wall time"
echo "$((ran - fails)) passed, $fails failed"
((fails == 0))
