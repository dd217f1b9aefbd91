#!/usr/bin/env bash
# ft-build.sh BUILD [MESON OPTIONS...] -- BUILD configured and built for
# free-threaded CPython 3.13t; prints the venv's python last.
#
#  1. the interpreter: scripts/python-ft.sh (built once, from Debian
#     trixie's source package, into .python-ft/; reused after);
#  2. a venv of it, .venv-ft/, filled with the tools pinned in
#     requirements.txt that have free-threaded (cp313t) wheels or are pure
#     Python: meson, ninja, numpy, pytest, pytest-timeout (remade when
#     requirements.txt or the interpreter changes).  Hypothesis (whose
#     pinned release ships per-ABI wheels and no cp313t one: pip would
#     build its Rust part, which needs crates.io), PyOpenCL, Dask and
#     matplotlib are left out; the tests that need them skip;
#  3. BUILD (the C library, both extension modules and the stand-in
#     drivers the suite loads), configured by that venv's meson with
#     MESON OPTIONS and $MESON_OPTS, and built.
#
# FT_TSAN=1: the ThreadSanitizer interpreter instead (PYTHON_FT_TSAN=1
# scripts/python-ft.sh: .python-ft-tsan/) and its venv, .venv-ft-tsan/.
# Used by test-python-ft.sh and by `make bench` (bench/bench_threads.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${1:?usage: ft-build.sh BUILD [MESON OPTIONS...]}
shift
# One at a time per BUILD: `make test` prepares it in the background
# (scripts/prepare-suites.sh) while the suite that needs it may already be
# asking; the second waits, then finds everything built.
exec 9>"$BUILD.lock"
flock 9
if [[ "${FT_TSAN:-0}" == 1 ]]; then
    PY=$(PYTHON_FT_TSAN=1 scripts/python-ft.sh | tail -n 1)
    VENV=.venv-ft-tsan
else
    PY=$(scripts/python-ft.sh | tail -n 1)
    VENV=.venv-ft
fi

# 2. The venv, remade when what it was made from changes.
tools='^(meson|ninja|numpy|pytest|pytest-timeout)=='
want="$("$PY" -VV | tr -d '\n') $(grep -E "$tools" requirements.txt | tr '\n' ' ')"
if [[ ! -x $VENV/bin/python || "$(cat "$VENV/.stamp" 2>/dev/null)" != "$want" ]]; then
    echo "ft-build: making $VENV" >&2
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    # --only-binary numpy: a source build would take longer than the suite
    # (and would mean no cp313t wheel matches the pin: say so instead).
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        --only-binary numpy -r <(grep -E "$tools" requirements.txt) >&2
    echo "$want" >"$VENV/.stamp"
fi

# 3. The build.  The venv's ninja first on PATH: meson's reconfigure runs
# the ninja it finds there, and one of another version rewrites the build
# log, which the venv's ninja then discards -- rebuilding everything (a
# minute or two) at every call.
export PATH="$PWD/$VENV/bin:$PATH"
mkdir -p "$BUILD"
# shellcheck disable=SC2086 # MESON_OPTS is a list of options
MESON=$VENV/bin/meson scripts/configure.sh "$BUILD" -Dpython=enabled \
    ${MESON_OPTS:-} "$@" >"$BUILD.configure.log" 2>&1 ||
    { tail -n 30 "$BUILD.configure.log" >&2; exit 1; }
"$VENV/bin/ninja" -C "$BUILD" >"$BUILD.build.log" 2>&1 ||
    { tail -n 40 "$BUILD.build.log" >&2; exit 1; }
rm -f "$BUILD.configure.log" "$BUILD.build.log"
echo "$PWD/$VENV/bin/python"
