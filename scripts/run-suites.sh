#!/usr/bin/env bash
# run-suites.sh -- run test suites, streaming and logging each, and finish
# with one table and one total line.
#
#   scripts/run-suites.sh NAME 'COMMAND' [NAME 'COMMAND' ...]
#
# Each COMMAND is a bash command line, run from the current directory with no
# standard input.  Its output (stdout and stderr) is streamed and saved to
# $SW_LOG_DIR/NAME.log (default build/logs).  The last line of that output
# that carries a summary gives the suite's counts; two formats are read:
#
#   12 passed, 1 failed, 3 skipped            (the C runner; any prefix)
#   ==== 1 failed, 12 passed, 3 skipped in 1.52s ====       (pytest)
#
# (pytest's "N error(s)" count as failed, "xfailed"/"xpassed" as passed.)
#
# A suite that exits non-zero without reporting a failure, that prints no
# summary, that ran no test at all, or that runs past $SW_SUITE_TIMEOUT
# seconds (default 1800) counts one failure of its own.  A COMMAND that
# exits 77 having printed no summary was not applicable here (say, no such
# device): it is listed as "not run" with its last line as the reason and
# counts nothing.
#
# SW_SUITES="NAME ..." runs only the suites named (an unknown name is an
# error).
#
# The output ends with a table of the suites and, alone on the last line,
#
#   N passed, N failed, N skipped
#
# summed over all suites.  The exit status is 0 only when nothing failed.
set -uo pipefail

if (($# == 0 || $# % 2)); then
    echo "usage: $0 NAME 'COMMAND' [NAME 'COMMAND' ...]" >&2
    exit 2
fi

LOG_DIR=${SW_LOG_DIR:-build/logs}
TIMEOUT=${SW_SUITE_TIMEOUT:-1800}
mkdir -p "$LOG_DIR"

have_timeout=0
command -v timeout >/dev/null 2>&1 && have_timeout=1

# Results, one entry per suite.
names=() results=() npass=() nfail=() nskip=() secs=()
total_pass=0 total_fail=0 total_skip=0

# Print "passed failed skipped" parsed from the last summary line of a log,
# or nothing when there is none.
parse_summary() {
    local log=$1 line
    # Drop colour codes and carriage returns, then keep the last line that
    # holds "<n> passed" or "<n> failed" (or pytest's "<n> error").
    line=$(sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' -e 's/\r$//' "$log" |
        grep -E '(^|[^[:alnum:]_])[0-9]+ (passed|failed|errors?)([^[:alnum:]_]|$)' |
        tail -n 1) || true
    [[ -n "$line" ]] || return 0
    local p=0 f=0 s=0 n word
    while read -r n word; do
        case "$word" in
            passed | xfailed | xpassed) p=$((p + n)) ;;
            failed | error | errors) f=$((f + n)) ;;
            skipped) s=$((s + n)) ;;
        esac
    done < <(grep -oE '[0-9]+ (passed|failed|skipped|errors?|xfailed|xpassed)' <<<"$line")
    echo "$p $f $s"
}

run_one() {
    local name=$1 cmd=$2
    local log="$LOG_DIR/$name.log"
    local rule="------------------------------------------------------------------------"
    printf '\n%s\n== suite %s: %s\n%s\n' "$rule" "$name" "$cmd" "$rule"
    local t0 t1 rc
    t0=$(date +%s.%N)
    if ((have_timeout)); then
        # timeout runs the suite in its own process group and signals the
        # whole group, so forked test children go too.
        timeout -k 30 "$TIMEOUT" bash -c "$cmd" </dev/null 2>&1 | tee "$log"
    else
        bash -c "$cmd" </dev/null 2>&1 | tee "$log"
    fi
    rc=${PIPESTATUS[0]}
    t1=$(date +%s.%N)

    local counts p=0 f=0 s=0 result
    counts=$(parse_summary "$log")
    if [[ -n "$counts" ]]; then
        read -r p f s <<<"$counts"
    fi
    if [[ -z "$counts" && $rc -eq 77 ]]; then
        result="not run: $(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | cut -c1-60)"
    elif ((have_timeout && (rc == 124 || rc == 137))) &&
        awk -v a="$t0" -v b="$t1" -v t="$TIMEOUT" 'BEGIN { exit !(b - a >= t - 1) }'; then
        result="FAILED: timed out after ${TIMEOUT}s"
        f=$((f + 1))
    elif [[ -z "$counts" ]]; then
        result="FAILED: no summary line (exit $rc)"
        f=$((f + 1))
    elif ((rc != 0 && f == 0)); then
        result="FAILED: exit $rc after its summary"
        f=$((f + 1))
    elif ((p + f + s == 0)); then
        result="FAILED: ran no test"
        f=$((f + 1))
    elif ((f > 0)); then
        result="FAILED"
    else
        result="ok"
    fi

    names+=("$name")
    results+=("$result")
    npass+=("$p")
    nfail+=("$f")
    nskip+=("$s")
    secs+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')")
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    total_skip=$((total_skip + s))
}

# Pick the suites to run.
declare -A known=()
sel_names=() sel_cmds=()
while (($#)); do
    known[$1]=1
    if [[ -z "${SW_SUITES:-}" || " ${SW_SUITES} " == *" $1 "* ]]; then
        sel_names+=("$1")
        sel_cmds+=("$2")
    fi
    shift 2
done
for want in ${SW_SUITES:-}; do
    if [[ -z "${known[$want]:-}" ]]; then
        echo "run-suites: no suite named '$want' (suites: ${!known[*]})" >&2
        exit 2
    fi
done

for i in "${!sel_names[@]}"; do
    run_one "${sel_names[$i]}" "${sel_cmds[$i]}"
done

printf '\n%s\n' "========================================================================"
printf '%-14s %7s %7s %7s %8s  %s\n' suite passed failed skipped seconds result
for i in "${!names[@]}"; do
    printf '%-14s %7s %7s %7s %8s  %s\n' "${names[$i]}" "${npass[$i]}" \
        "${nfail[$i]}" "${nskip[$i]}" "${secs[$i]}" "${results[$i]}"
done
printf 'logs: %s/\n' "$LOG_DIR"
# What failed, by name, where a CI log that keeps only the last lines
# still shows it: the first lines of each failing suite's log that say so.
for i in "${!names[@]}"; do
    ((${nfail[$i]} > 0)) || continue
    grep -m 6 -E '^(FAIL |FAILED |ERROR |not ok )|^E +[A-Za-z]+Error|ERROR: (Address|Leak|ThreadSanitizer|UndefinedBehavior)|WARNING: ThreadSanitizer|runtime error:' \
        "$LOG_DIR/${names[$i]}.log" 2>/dev/null | cut -c1-230 |
        sed "s/^/${names[$i]}: /" || true
done
printf '%s\n' "========================================================================"
printf '%d passed, %d failed, %d skipped\n' "$total_pass" "$total_fail" "$total_skip"
((total_fail == 0))
