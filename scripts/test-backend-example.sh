#!/usr/bin/env bash
# test-backend-example.sh [BUILD] -- the out-of-tree backend
# (examples/backend/membank.c) as a vendor builds and uses it:
#
#  1. BUILD's library and headers installed (meson install, runtime and
#     devel tags) into a temporary root;
#  2. the backend compiled there with only what pkg-config says (never
#     src/), into a shared object that needs no spillway symbol;
#  3. loaded through SPILLWAY_BACKENDS by BUILD's generic C suite on
#     membank:0, by the model-based fuzzer beside sim:0, by `spillway
#     info`, and by the Python module (which links the library statically).
#
# Ends with "N passed, N failed, N skipped" summed over the parts, and
# exits non-zero on any failure (make test's c-backend-example suite).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${1:-build}
MESON=${MESON:-.venv/bin/meson}
CC=${CC:-cc}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/spillway-backend.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0 skipped=0

fail() {
    echo "test-backend-example: $*"
    failed=$((failed + 1))
}

# Sums a suite's last "N passed, N failed[, N skipped]" line.
count() { # logfile rc
    local line
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
    if [[ -z "$line" ]]; then
        fail "$1 has no summary line (exit $2)"
        return
    fi
    local p f s
    p=$(sed -nE 's/.*\b([0-9]+) passed.*/\1/p' <<<"$line")
    f=$(sed -nE 's/.*\b([0-9]+) failed.*/\1/p' <<<"$line")
    s=$(sed -nE 's/.*\b([0-9]+) skipped.*/\1/p' <<<"$line")
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + ${s:-0}))
    if (($2 != 0 && f == 0)); then
        fail "$(basename "$1" .log) exited $2"
    fi
}

# 1. Installed into a root of our own.
if ! "$MESON" install -C "$BUILD" --destdir "$WORK/root" --no-rebuild \
        --tags runtime,devel >"$WORK/install.log" 2>&1; then
    cat "$WORK/install.log"
    fail "meson install failed"
    echo "$passed passed, $failed failed, $skipped skipped"
    exit 1
fi
pc=$(find "$WORK/root" -name spillway.pc | head -n 1)
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$WORK/root

# 2. Built against it alone.
so=$WORK/libspillway_membank.so
flags=$(pkg-config --cflags --libs spillway) || fail "pkg-config knows no spillway"
# shellcheck disable=SC2086
if "$CC" -std=c11 -O2 -ffp-contract=off -fPIC -shared -Wl,--as-needed \
        -Wall -Wextra -Werror -o "$so" examples/backend/membank.c $flags; then
    passed=$((passed + 1))
else
    fail "the example backend does not build against the installed headers"
fi
if readelf -d "$so" 2>/dev/null | grep -q 'NEEDED.*libspillway'; then
    fail "$so needs libspillway at run time (it must use the host table)"
else
    passed=$((passed + 1))
fi

export SPILLWAY_BACKENDS=$so
# 3. spillway info lists it.
if "$BUILD/spillway" info >"$WORK/info.log" 2>&1 &&
        grep -q '^membank:0 ' "$WORK/info.log"; then
    passed=$((passed + 1))
else
    cat "$WORK/info.log"
    fail "spillway info does not list membank:0"
fi

# The generic C suite on it.
SW_TEST_DEVICE=membank:0 "$BUILD/tests/c/test_spillway" >"$WORK/c.log" 2>&1
rc=$?
grep -v '^ok\|^skip' "$WORK/c.log" | tail -n 20
count "$WORK/c.log" $rc

# The fuzzer, beside the simulated device, both small so that memory runs
# short without a budget too (as the fuzz suites have them).
FUZZ_DEVICES=membank:0,sim:0 SPILLWAY_SIM_MEMORY=8M MEMBANK_MEMORY=8M \
    tests/fuzz/run.sh "$BUILD/tests/fuzz/fuzz_spillway_replay" \
    tests/fuzz/seeds/spillway -seed=25 -runs=150 >"$WORK/fuzz.log" 2>&1
rc=$?
tail -n 3 "$WORK/fuzz.log"
count "$WORK/fuzz.log" $rc

# The Python module, which holds the library statically.
if [[ -d "$BUILD/python/spillway" ]]; then
    if SPILLWAY_DEVICE=membank:0 .venv/bin/python - "$BUILD/python" \
            >"$WORK/py.log" 2>&1 <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import spillway as sw
assert "membank:0" in [d.name for d in sw.devices()], sw.devices()
a = sw.asarray(np.arange(4096, dtype=np.float32))
b = a + a
sw.set_memory_budget(40000)
c = sw.zeros(4096)
d = sw.zeros(4096)
assert a.is_spilled and sw.memory_info().spills > 0
assert float(sw.sum(b)) == float(np.arange(4096).sum() * 2)
with sw.pinned(a, b) as (va, vb):
    x = np.ctypeslib.as_array((__import__("ctypes").c_float * 4096)
                              .from_address(vb.ptr))
    assert x[4095] == 8190
sw.set_memory_budget(None)
print("python on membank:0: ok")
EOF
    then
        passed=$((passed + 1))
        cat "$WORK/py.log"
    else
        cat "$WORK/py.log"
        fail "the Python module on membank:0"
    fi
fi

echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
