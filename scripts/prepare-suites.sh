#!/usr/bin/env bash
# prepare-suites.sh [NAME ...] -- build, in the background of `make test`,
# what the longest-building suites need before they can start: the
# free-threaded interpreters and their builds (python-ft, python-ft-tsan:
# scripts/ft-build.sh) and the torch suite's venv and build-torch/
# (scripts/test-torch.sh --prepare).  Those are CPU-bound compiles of 4 to
# 10 minutes each; most suites before them run on one core, so on CI's two
# cores the compiles take the other one instead of adding to the wall
# time.  Each step holds the lock its suite takes (BUILD.lock,
# build-torch.lock): a suite that starts first waits for it and then finds
# everything built; a step that fails here is simply done again, with its
# error, by its suite.
#
# NAMEs are the suites `make test` runs (SW_SUITES); none: all of them.
# Output goes to $SW_LOG_DIR/prepare.log (default build/logs).  Runs at
# nice 10, so the suites keep the first claim on the CPUs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

LOG_DIR=${SW_LOG_DIR:-build/logs}
mkdir -p "$LOG_DIR"
exec >"$LOG_DIR/prepare.log" 2>&1 </dev/null

want() { # NAME: whether the suite runs
    (($# == 0)) && return 1
    [[ -z ${SELECTED:-} ]] && return 0
    [[ " $SELECTED " == *" $1 "* ]]
}
SELECTED="$*"

step() { # NAME COMMAND...
    local name=$1 t0=$SECONDS
    shift
    echo "prepare: $name: $*"
    if nice -n 10 "$@"; then
        echo "prepare: $name ready ($((SECONDS - t0)) s)"
    else
        echo "prepare: $name failed (exit $?) after $((SECONDS - t0)) s: its suite will build it again"
    fi
}

want python-ft && step python-ft scripts/ft-build.sh build-ft
want python-ft-tsan && step python-ft-tsan env FT_TSAN=1 \
    scripts/ft-build.sh build-ft-tsan -Db_sanitize=thread -Db_lundef=false
want torch && step torch scripts/test-torch.sh --prepare
exit 0
