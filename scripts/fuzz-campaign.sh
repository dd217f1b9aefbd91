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
#   threads-hip-fake  threaded replayer, hip:0 (CPU stand-in),sim:0
#   threads-ze-fake   threaded replayer, ze:0 (CPU stand-in),sim:0
#   threads-cuda-fake threaded replayer, cuda:0 (CPU stand-in),sim:0
#   threads-sim-faults the soak: 4 workers on sim:0, every command queued,
#                     a moving budget and device faults under their feet
#
# FUZZ_CAMPAIGN_CPU=N (or NAME=N,...,N) makes each configuration (or the
# one named) run for N CPU seconds (its
# processes' user + system time, every thread counted) rather than once:
# it runs in pieces of SECONDS_EACH of wall time, each with the next seed,
# until its CPU time reaches N, and a piece that fails does not end it (its
# input is kept and the next piece goes on).  On a shared machine this is
# the figure that can be compared.  A file build/fuzz-campaign/STOP starts
# no further piece.  Without it, each configuration runs one piece.
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
tsan='TSAN_OPTIONS=halt_on_error=1:detect_deadlocks=1:second_deadlock_stack=1'
hip="SPILLWAY_HIP_LIBRARY=build/tests/c/libamdhip64_fake.so SPILLWAY_HIPRTC_LIBRARY=build/tests/c/libhiprtc_fake.so"
ze="SPILLWAY_ZE_LIBRARY=build/tests/c/libze_loader_fake.so"
cuda_fz="SPILLWAY_CUDA_LIBRARY=build-fuzz/tests/c/libcuda_fake.so SPILLWAY_NVRTC_LIBRARY=build-fuzz/tests/c/libnvrtc_fake.so"
fz=build-fuzz/tests/fuzz
seeds=tests/fuzz/seeds
lf="-seed=SEED -max_total_time=$each -max_len=4096"
rp="-seed=SEED -runs=100000000 -max_total_time=$each -max_len=4096"
# The threaded configurations on the CUDA stand-in: its NVRTC where the
# build has one (the kernels need one), else the machine's.
cuda="SPILLWAY_CUDA_LIBRARY=build/tests/c/libcuda_fake.so"
[[ -f build/tests/c/libnvrtc_fake.so ]] &&
    cuda+=" SPILLWAY_NVRTC_LIBRARY=build/tests/c/libnvrtc_fake.so"

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
"threads-hip-fake|-|FUZZ_DEVICES=hip:0,sim:0 $hip|build/tests/fuzz/fuzz_spillway_threads_replay|$seeds/threads|$rp"
"threads-ze-fake|-|FUZZ_DEVICES=ze:0,sim:0 $ze|build/tests/fuzz/fuzz_spillway_threads_replay|$seeds/threads|$rp"
"threads-cuda-fake|-|FUZZ_DEVICES=cuda:0,sim:0 $cuda|build/tests/fuzz/fuzz_spillway_threads_replay|$seeds/threads|$rp"
"threads-sim-faults|-|SPILLWAY_SIM_INLINE=0 SOAK_TRACE_DIR=$out/artifacts|build/tests/soak/spillway-soak|-|--device sim:0 --threads 4 --faults 1 --duration ${each}s --seed SEED"
)

# Listed once: PoCL's first open is slow, and a listing beside a busy
# fuzzer could time out.
devices=$(build/spillway devices 2>/dev/null)
have_device() {
    [[ "$1" == - ]] || grep -qx "$1" <<<"$devices"
}

# The children's CPU seconds so far (bash's `times`, second line:
# "XmY.YYYs XmY.YYYs", user and system).
children_cpu() {
    times | awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, p, "m");
                 sub("s", "", p[2]); n += p[1] * 60 + p[2] } printf "%.0f", n }'
}

# FUZZ_CAMPAIGN_CPU: "N" for every configuration, or "NAME=N,...,N" (a
# bare N for those not named).
cpu_target_of() { # NAME
    local item n=0
    for item in ${FUZZ_CAMPAIGN_CPU//,/ }; do
        if [[ $item == "$1="* ]]; then
            echo "${item#*=}"; return
        fi
        [[ $item == *=* ]] || n=$item
    done
    echo "$n"
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
    local runner=()
    [[ "$target" == build-tsan/* ]] && runner=(scripts/tsan-exec.sh)
    local t0 rc idx=$1
    t0=$(date +%s)
    (
        IFS=' '
        piece=0 failed=0
        save=$out/artifacts/$name.input
        while :; do
            seed=$((1000 + idx + 100 * piece))
            o=${opts//SEED/$seed}
            echo "fuzz-campaign: $name piece $piece, seed $seed"
            rm -f "$save"
            # A hang is a finding too: a piece gets twice its time and more.
            if [[ "$target" == */spillway-soak ]]; then
                # shellcheck disable=SC2086
                env $envs timeout -k 30 $((2 * each + 300)) "$target" $o
            else
                # shellcheck disable=SC2086
                env $envs FUZZ_ARTIFACTS="$out/artifacts" FUZZ_SAVE="$save" \
                    timeout -k 30 $((2 * each + 300)) \
                    "${runner[@]}" tests/fuzz/run.sh "$target" "$sd" $o
            fi
            rc=$?
            if ((rc != 0)); then
                failed=$((failed + 1))
                # The input running when it failed (a divergence also
                # writes its own divergence-HASH; a crash or hang does not).
                [[ -f "$save" ]] && cp "$save" "$out/artifacts/$name-seed$seed"
                echo "fuzz-campaign: $name piece $piece (seed $seed) FAILED, exit $rc"
            fi
            rm -f "$save"
            piece=$((piece + 1))
            cpu_target=$(cpu_target_of "$name")
            ((cpu_target > 0)) || break
            (($(children_cpu) < cpu_target)) || break
            [[ ! -e "$out/STOP" ]] || break
        done
        echo "fuzz-campaign: $name: $piece pieces, $failed failed"
        times >"$out/$name.cpu" # the second line: the children's
        ((failed == 0))
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
printf '\n%-19s %8s %10s %10s %8s %8s %8s %8s  %s\n' configuration inputs steps checks spills restores faults cpu_s result
tot_in=0 tot_st=0 tot_ch=0 fails=0 ran=0
for c in "${configs[@]}"; do
    name=${c%%|*}
    log=$out/$name.log
    rc=$(cat "$out/$name.rc" 2>/dev/null || echo 1)
    if [[ $rc == 77 ]]; then
        printf '%-19s %s\n' "$name" "$(head -1 "$log")"
        continue
    fi
    ran=$((ran + 1))
    # Every piece's statistics lines (fz_world_print_stats), added up.
    # (The soak prints the device's spills and restores, "soak: spills N".)
    sum() { # FIELD-REGEX [GROUP]
        grep -E '^(fuzz [a-z-]+|soak): ' "$log" |
            sed -nE "s/.*[:,] $1.*/\\${2:-1}/p" |
            awk '{ n += $1; k++ } END { if (k) print n; else print "?" }'
    }
    inputs=$(sum '([0-9]+) inputs')
    steps=$(sum '([0-9]+) steps')
    checks=$(sum '([0-9]+) checks')
    spills=$(sum 'spills (seen )?([0-9]+)' 2)
    restores=$(sum 'restores (seen )?([0-9]+)' 2)
    faults=$(sum 'faults armed ([0-9]+)')
    # `times`: the children's user and system time, "XmY.YYYs XmY.YYYs".
    cpu=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, p, "m");
                 sub("s", "", p[2]); n += p[1] * 60 + p[2] } printf "%.0f", n }' \
          "$out/$name.cpu" 2>/dev/null)
    result=ok
    if [[ $rc != 0 ]]; then
        result="FAILED (exit $rc): $out/$name.log"
        fails=$((fails + 1))
    fi
    printf '%-19s %8s %10s %10s %8s %8s %8s %8s  %s\n' "$name" "${inputs:-?}" \
        "${steps:-?}" "${checks:-?}" "${spills:-?}" "${restores:-?}" \
        "${faults:-?}" "$cpu" "$result"
    [[ $inputs == '?' ]] || tot_in=$((tot_in + inputs))
    [[ $steps == '?' ]] || tot_st=$((tot_st + steps))
    [[ $checks == '?' ]] || tot_ch=$((tot_ch + checks))
    cpu_total=$((cpu_total + ${cpu:-0}))
done
printf '%-19s %8s %10s %10s %8s %8s %8s %8s\n' total "$tot_in" "$tot_st" \
    "$tot_ch" '' '' '' "$cpu_total"
echo "fuzz-campaign: $ran configurations ran, $fails failed, $((($(date +%s) - start))) s of wall time"
echo "$((ran - fails)) passed, $fails failed"
((fails == 0))
