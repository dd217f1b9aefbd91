#!/usr/bin/env bash
# test-torch.sh -- `make test`'s `torch` suite: spillway as a PyTorch device
# (docs/torch.md) on real PyTorch, installed as users install it.
#
#   scripts/test-torch.sh [PYTEST ARGS...]     (from the repository root)
#
#   1. venv     .venv-torch, a virtual environment of the machine's python3
#               holding requirements-torch.txt: torch==2.13.0 (the CPU build
#               the python-kernels machines keep on disk: the pin never
#               downloads; any other torch would pull a CUDA build of
#               several GB) and the pinned build and test tools.  Made once,
#               redone when requirements-torch.txt changes.
#   2. wheel    a wheel of this checkout built by that venv without build
#               isolation, so that meson finds torch and the C++ layer is in
#               it (-Dtorch=enabled: no layer, no wheel); build-torch/ is its
#               build folder, kept between runs.
#   3. install  the wheel into .venv-torch, over the previous one.
#   4. pytest   tests/torch with that venv, from an empty folder: nothing of
#               the checkout or its build trees on sys.path.
#
# Exits 77 ("not run") where torch 2.13.0 is not on this machine's disk
# (SW_TORCH_DOWNLOAD=1 lets pip fetch it).  Ends with pytest's summary line.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV=$ROOT/.venv-torch
REQ=$ROOT/requirements-torch.txt
STAMP=$VENV/.requirements.stamp
PYTHON=${PYTHON:-python3}
TORCH_PIN=$(grep -E '^torch==' "$REQ")

say() { echo "test-torch: $*"; }

# --prepare: the venv and build-torch/ only (scripts/prepare-suites.sh runs
# it in the background while other suites run); the suite itself then
# finds them built.  One at a time: build-torch.lock.
PREPARE=0
if [[ ${1:-} == --prepare ]]; then
    PREPARE=1
    shift
fi
exec 9>"$ROOT/build-torch.lock"
flock 9

# 1. The venv.
if [[ ! -f $STAMP || $REQ -nt $STAMP ]]; then
    if [[ -e $VENV ]] && ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
        rm -rf "$VENV"
    fi
    if [[ ! -x $VENV/bin/python ]]; then
        say "creating $VENV with $(command -v "$PYTHON")"
        "$PYTHON" -m venv "$VENV" || { say "venv failed"; exit 1; }
    fi
    rm -f "$STAMP"
    # torch first, from this machine's disk only (pip's find-links), unless
    # told otherwise: the CPU build lies there on python-kernels machines.
    # The wheel itself from the disk (pip's find-links: a dry run without
    # the index says where it is), its dependencies (filelock, sympy, ...)
    # from the index: a clean machine has only the wheel on disk.
    if [[ ${SW_TORCH_DOWNLOAD:-0} != 1 ]] &&
        ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
        wheel=$("$VENV/bin/python" -m pip install --disable-pip-version-check \
            -q --dry-run --no-index --no-deps --ignore-installed --report - \
            "$TORCH_PIN" 2>/dev/null | "$VENV/bin/python" -c '
import json, sys, urllib.parse
url = json.load(sys.stdin)["install"][0]["download_info"]["url"]
print(urllib.parse.unquote(url[len("file://"):]) if url.startswith("file://") else "")
' 2>/dev/null)
        if [[ -z $wheel || ! -f $wheel ]]; then
            echo "$TORCH_PIN is not on this machine's disk (pip --no-index found"
            echo "no wheel); SW_TORCH_DOWNLOAD=1 downloads it: not run"
            exit 77
        fi
        say "installing $(basename "$wheel") from the disk"
        "$VENV/bin/python" -m pip install --disable-pip-version-check -q \
            "$wheel" || { say "pip install $wheel failed"; exit 1; }
    fi
    say "installing $REQ into $VENV"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQ" ||
        { say "pip install -r $REQ failed"; exit 1; }
    touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/spillway-torch.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT

# 2. The wheel, with the layer.
t0=$SECONDS
if ! "$VENV/bin/python" -m pip wheel --disable-pip-version-check -q \
        --no-build-isolation --no-deps -w "$WORK/wheel" \
        -Cbuild-dir="$ROOT/build-torch" -Csetup-args=-Dtorch=enabled \
        "$ROOT" >"$WORK/wheel.log" 2>&1; then
    say "building the wheel failed; the end of its log:"
    tail -n 60 "$WORK/wheel.log" | sed 's/^/    /'
    echo "0 passed, 1 failed"
    exit 1
fi
WHEEL=$(ls "$WORK"/wheel/spillway-*.whl)
say "wheel $(basename "$WHEEL") ($((SECONDS - t0)) s)"
if ((PREPARE)); then
    exit 0
fi
flock -u 9

# 3. Installed over the previous one.
"$VENV/bin/python" -m pip install --disable-pip-version-check -q \
    --no-deps --force-reinstall "$WHEEL" ||
    { say "installing the wheel failed"; echo "0 passed, 1 failed"; exit 1; }

# 4. The suite, from an empty folder.
mkdir -p "$WORK/run"
cd "$WORK/run" &&
    env -u PYTHONPATH -u SPILLWAY_BUILD_DIR -u VIRTUAL_ENV \
        SW_TORCH_ROOT="$ROOT" \
        "$VENV/bin/python" -m pytest -p no:cacheprovider -q -rs \
        "$ROOT/tests/torch" "$@"
