#!/usr/bin/env bash
# test-installed.sh -- the installed package's suite (`make test`'s
# `installed`): what a user gets from `pip install "spillway[dask]"` and
# from `meson install`, tested the way they have it, nothing of this
# checkout or its build trees on the path.
#
#   scripts/test-installed.sh            (from the repository root)
#
#   1. sdist   the source distribution, as `python -m build --sdist` makes
#              it (meson-python's hook, i.e. `meson dist`: the files of the
#              last commit, not the working tree's changes)
#   2. wheel   a wheel built from that sdist by pip (so a file the sdist
#              lacks fails here), without build isolation: the build tools
#              are .venv's pinned ones
#   3. venv    a fresh virtual environment of the machine's Python (the one
#              .venv was made from), the wheel installed into it with its
#              dask, plot and test extras, and PyOpenCL (not spillway's:
#              examples/pyopencl_kernels.py's own kernel runs through it),
#              every version as requirements.txt pins it (from PyPI,
#              through pip's cache)
#   4. c-lib   the C library from the unpacked sdist: configured with a
#              temporary prefix, the library and the program built, `meson
#              install`ed
#   5. pytest  in the fresh environment, from an empty folder: the sdist's
#              tests/installed (imports in every order, the entry points,
#              the console program, examples/dask_pipeline.py with worker
#              processes, examples/quickstart.py and pyopencl_kernels.py,
#              a C program and examples/quickstart.c built with pkg-config
#              alone) and
#              tests/python with SPILLWAY_TEST_INSTALLED=1 (every test that
#              does not need the test-only module)
#
# Steps 1-4 count one test each; pytest's tests are added.  The output ends
# with "N passed, N failed, N skipped"; the exit status is 0 only when
# nothing failed.  Each step's log is in the work folder, a temporary one
# removed at the end (SW_INSTALLED_KEEP=1 keeps it, or SW_INSTALLED_WORK=DIR
# uses DIR, emptied first).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV_PY=${VENV_PY:-$ROOT/.venv/bin/python}

if [[ -n "${SW_INSTALLED_WORK:-}" ]]; then
    WORK=$SW_INSTALLED_WORK
    rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
else
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/spillway-installed.XXXXXX") || exit 1
    if [[ "${SW_INSTALLED_KEEP:-0}" != 1 ]]; then
        trap 'rm -rf "$WORK"' EXIT
    fi
fi
WORK=$(cd "$WORK" && pwd -P)
echo "test-installed: working in $WORK"

passed=0 failed=0 skipped=0

finish() {
    echo "$passed passed, $failed failed, $skipped skipped"
    ((failed == 0))
    exit
}

# step NAME COMMAND...: run it with its output in WORK/NAME.log; on failure
# show the log's end and stop (each step needs the ones before).
step() {
    local name=$1 t0=$SECONDS
    shift
    if "$@" >"$WORK/$name.log" 2>&1; then
        passed=$((passed + 1))
        echo "test-installed: $name ok ($((SECONDS - t0)) s)"
    else
        failed=$((failed + 1))
        echo "test-installed: $name FAILED ($((SECONDS - t0)) s); the end of $WORK/$name.log:"
        tail -n 60 "$WORK/$name.log" | sed 's/^/    /'
        finish
    fi
}

if [[ ! -x "$VENV_PY" ]]; then
    echo "test-installed: no $VENV_PY (make bootstrap makes .venv)"
    failed=1
    finish
fi
# The build tools' meson and ninja first, as the Makefile has them.
export PATH="$(dirname "$VENV_PY"):$PATH"

# 1. The sdist.  Its meson build folder goes in WORK, not in the tree.
build_sdist() {
    "$VENV_PY" - "$WORK/dist" "$WORK/sdist-build" <<'EOF'
import sys, mesonpy
name = mesonpy.build_sdist(sys.argv[1], {"build-dir": sys.argv[2]})
print("sdist:", name)
EOF
}
step sdist build_sdist
SDIST=$(ls "$WORK"/dist/spillway-*.tar.gz)

# 2. The wheel, from the sdist.  pip unpacks it in a folder of its own;
# --no-cache-dir: no wheel of an earlier sdist is reused, none is kept.
step wheel "$VENV_PY" -m pip wheel -v --no-cache-dir --no-build-isolation \
    --no-deps -w "$WORK/wheel" "$SDIST"
WHEEL=$(ls "$WORK"/wheel/spillway-*.whl)

# 3. A fresh environment of the interpreter .venv was made from, and
# nothing else: the installed side runs with .venv off PATH and no
# PYTHONPATH.
BASE_PY=$("$VENV_PY" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
CLEAN_PATH=$(tr ':' '\n' <<<"$PATH" | grep -v -x -F "$(dirname "$VENV_PY")" | paste -sd:)
make_venv() {
    env -u PYTHONPATH -u VIRTUAL_ENV "$BASE_PY" -m venv "$WORK/venv" &&
        env -u PYTHONPATH -u VIRTUAL_ENV PATH="$CLEAN_PATH" \
            "$WORK/venv/bin/python" -m pip install --disable-pip-version-check \
            -c "$ROOT/requirements.txt" "$WHEEL[dask,plot,test]" pyopencl
}
step venv make_venv

# 4. The C library, from the unpacked sdist, into a temporary prefix: only
# what is installed is built (the library, the program), unoptimized, as
# the suites build the rest elsewhere.
install_c() {
    mkdir -p "$WORK/src" &&
        tar -xzf "$SDIST" -C "$WORK/src" --strip-components=1 &&
        meson setup "$WORK/c-build" "$WORK/src" --prefix="$WORK/prefix" \
            --buildtype=plain -Dpython=disabled -Dfuzz=disabled \
            -Dnvcc_check=disabled -Dgpu_bench=disabled &&
        meson compile -C "$WORK/c-build" spillway:shared_library \
            spillway:static_library spillway:executable &&
        meson install -C "$WORK/c-build" --no-rebuild
}
step c-lib install_c
PC_DIR=$(dirname "$(find "$WORK/prefix" -name spillway.pc | head -n 1)")

# 5. The tests, in the fresh environment, from an empty folder.
mkdir -p "$WORK/run"
t0=$SECONDS
(
    cd "$WORK/run" &&
        env -u PYTHONPATH -u PYTHONHOME -u SPILLWAY_BUILD_DIR -u VIRTUAL_ENV \
            PATH="$WORK/venv/bin:$CLEAN_PATH" SPILLWAY_TEST_INSTALLED=1 \
            SPILLWAY_INSTALLED_PKG_CONFIG_PATH="$PC_DIR" \
            "$WORK/venv/bin/python" -m pytest -p no:cacheprovider -q -rs \
            --junitxml="$WORK/junit.xml" \
            "$WORK/src/tests/installed" "$WORK/src/tests/python"
)
rc=$?
echo "test-installed: pytest exited $rc ($((SECONDS - t0)) s)"
counts=$("$WORK/venv/bin/python" - "$WORK/junit.xml" <<'EOF' 2>/dev/null
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
n = {k: sum(int(s.get(k, 0)) for s in suites)
     for k in ("tests", "failures", "errors", "skipped")}
bad = n["failures"] + n["errors"]
print(n["tests"] - bad - n["skipped"], bad, n["skipped"])
EOF
)
if [[ -n "$counts" ]]; then
    read -r p f s <<<"$counts"
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
fi
# pytest failing without a failed test (a collection error, an interrupt,
# no report) is a failure of its own.
if [[ -z "$counts" ]] || ((rc != 0 && ${f:-0} == 0)); then
    failed=$((failed + 1))
fi
finish
