#!/usr/bin/env bash
# tsan-exec.sh PROGRAM [ARGS...] -- run a ThreadSanitizer-built program.
#
# On kernels with more address-space randomisation than the TSan runtime
# expects (vm.mmap_rnd_bits above 28, common since Linux 6.x), TSan stops at
# start-up with "FATAL: ThreadSanitizer: unexpected memory mapping" before
# running anything.  Then this runs the program again under
# `setarch $(uname -m) -R` (no randomisation for that process alone), which
# needs no privileges.  TSAN_OPTIONS defaults to halting on the first report,
# with deadlock detection.
set -uo pipefail

if (($# == 0)); then
    echo "usage: $0 PROGRAM [ARGS...]" >&2
    exit 2
fi

export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1 detect_deadlocks=1 second_deadlock_stack=1}

first=$(mktemp "${TMPDIR:-/tmp}/tsan-exec.XXXXXX")
trap 'rm -f "$first"' EXIT

"$@" 2>&1 | tee "$first"
rc=${PIPESTATUS[0]}
if ((rc != 0)) && grep -q 'unexpected memory mapping' "$first"; then
    if command -v setarch >/dev/null 2>&1; then
        echo "tsan-exec: TSan cannot start with this kernel's address randomisation;" \
            "running again under setarch $(uname -m) -R"
        setarch "$(uname -m)" -R "$@" 2>&1
        rc=$?
    else
        echo "tsan-exec: TSan cannot start here and setarch is missing (util-linux);" \
            "try: sysctl vm.mmap_rnd_bits=28"
    fi
fi
exit "$rc"
