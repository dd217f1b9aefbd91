#!/usr/bin/env bash
# test-python-ft.sh [PYTEST ARGS...] -- the Python suite on free-threaded
# CPython 3.13t, with the GIL off: `make test`'s python-ft suite.
#
# scripts/ft-build.sh makes (or reuses) the interpreter, its venv and
# build-ft/; then pytest runs tests/python (or PYTEST ARGS) with
# SPILLWAY_EXPECT_NOGIL=1: conftest.py fails the run when `import
# spillway` (or anything the session imports) turns the GIL back on.
# PYTHON_GIL is left unset, so a module that does not declare
# Py_MOD_GIL_NOT_USED would turn it on.
#
# FT_TSAN=1: the ThreadSanitizer interpreter and build-ft-tsan/
# (-Db_sanitize=thread), running the threaded tests (tests/python/
# test_threads.py) unless PYTEST ARGS say otherwise; a report fails the
# run (halt_on_error).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

env=(SPILLWAY_EXPECT_NOGIL=1)
if [[ "${FT_TSAN:-0}" == 1 ]]; then
    BUILD=build-ft-tsan
    PY=$(scripts/ft-build.sh "$BUILD" -Db_sanitize=thread -Db_lundef=false | tail -n 1)
    env+=(TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}")
    (($#)) || set -- tests/python/test_threads.py
else
    BUILD=build-ft
    PY=$(scripts/ft-build.sh "$BUILD" | tail -n 1)
    (($#)) || set -- tests/python
fi
echo "test-python-ft: $("$PY" -VV), $BUILD/"
exec env "${env[@]}" SPILLWAY_BUILD_DIR="$BUILD" "$PY" -m pytest -q \
    -p no:cacheprovider "$@"
