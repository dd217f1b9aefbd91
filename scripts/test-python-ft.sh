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
# (-Db_sanitize=thread), running the tests where threads share spillway
# objects (test_threads, test_pinned, test_pressure, test_queues,
# test_gc_before_oom, test_dlpack) unless PYTEST ARGS say otherwise; a
# report fails the run (halt_on_error).  The whole suite passes there too
# (about 4.5 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

env=(SPILLWAY_EXPECT_NOGIL=1)
if [[ "${FT_TSAN:-0}" == 1 ]]; then
    BUILD=build-ft-tsan
    PY=$(scripts/ft-build.sh "$BUILD" -Db_sanitize=thread -Db_lundef=false | tail -n 1)
    # CPython's own list of what its free-threaded runtime reports under
    # TSan by design or as known upstream bugs (its Tools/tsan/
    # suppressions_free_threading.txt, kept by python-ft.sh); nothing of
    # spillway's is suppressed.
    supp=$("$PY" -c 'import sys; print(sys.base_prefix)')/share/spillway/cpython-tsan.supp
    env+=(TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$supp ${TSAN_OPTIONS:-}")
    (($#)) || set -- tests/python/test_threads.py tests/python/test_pinned.py \
        tests/python/test_pressure.py tests/python/test_queues.py \
        tests/python/test_gc_before_oom.py tests/python/test_dlpack.py
else
    BUILD=build-ft
    PY=$(scripts/ft-build.sh "$BUILD" | tail -n 1)
    (($#)) || set -- tests/python
fi
echo "test-python-ft: $("$PY" -VV), $BUILD/"
exec env "${env[@]}" SPILLWAY_BUILD_DIR="$BUILD" "$PY" -m pytest -q \
    -p no:cacheprovider "$@"
