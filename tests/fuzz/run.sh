#!/usr/bin/env bash
# run.sh TARGET SEEDS [OPTIONS...] -- run a fuzz target (a libFuzzer binary
# or its plain replayer) on its seed corpus and end with the suite summary.
#
#   tests/fuzz/run.sh build-fuzz/tests/fuzz/fuzz_spillway \
#       tests/fuzz/seeds/spillway -seed=1 -runs=4000 -max_total_time=30
#
# A libFuzzer target gets a scratch corpus directory first (new inputs go
# there, never into the committed seeds), then SEEDS; its crash inputs
# (and the input of a divergence, divergence-HASH) are written under
# $FUZZ_ARTIFACTS/TARGET/ (default build/fuzz-artifacts/).  With
# FUZZ_CORPUS=DIR the corpus is DIR instead (kept across runs: `make fuzz`).
# A replayer (name ending in _replay) runs the seed files and then the
# random inputs OPTIONS ask for.
#
# The target prints "N passed, 0 failed" (N inputs run) when it ends
# normally; any other end (a divergence aborts, a sanitizer report, a
# timeout, a leak) makes this print "0 passed, 1 failed" last and fail.
set -uo pipefail

if (($# < 2)); then
    echo "usage: $0 TARGET SEEDS [OPTIONS...]" >&2
    exit 2
fi
target=$1 seeds=$2
shift 2

if [[ ! -x "$target" ]]; then
    echo "no fuzz target $target (make build-fuzz needs clang with libFuzzer)"
    exit 77
fi

name=$(basename "$target")
rc=0
if [[ "$name" == *_replay ]]; then
    "$target" "$seeds" "$@"
    rc=$?
else
    artifacts=${FUZZ_ARTIFACTS:-build/fuzz-artifacts}/$name
    mkdir -p "$artifacts"
    # A divergence writes its input there itself (driver.c).
    export FUZZ_ARTIFACTS=$artifacts
    if [[ -n "${FUZZ_CORPUS:-}" ]]; then
        corpus=$FUZZ_CORPUS
        mkdir -p "$corpus"
        scratch=
    else
        scratch=$(mktemp -d "${TMPDIR:-/tmp}/spillway-fuzz.XXXXXX")
        corpus=$scratch
    fi
    # -timeout: one input is a few hundred steps; a minute means a hang.
    # -rss_limit_mb: the sanitizers' shadow memory and the device arenas.
    "$target" -timeout=120 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" "$@" "$corpus" "$seeds"
    rc=$?
    [[ -n "$scratch" ]] && rm -rf "$scratch"
    if ((rc != 0)); then
        echo "fuzz: crash and divergence inputs (if any) are in $artifacts/; replay one with"
        echo "  $target FILE, or build/tests/fuzz/${name}_replay FILE (no libFuzzer; FUZZ_TRACE=1 prints each step)"
    fi
fi
if ((rc != 0)); then
    echo "fuzz $name: exit status $rc"
    echo "fuzz $name: 0 passed, 1 failed"
    exit 1
fi
exit 0
