#!/usr/bin/env bash
# bootstrap-venv.sh VENV REQUIREMENTS STAMP -- make VENV a working virtual
# environment of $PYTHON (default python3) holding REQUIREMENTS, then touch
# STAMP.  The Makefile runs this only when REQUIREMENTS is newer than STAMP
# (or STAMP is missing), so pip runs once per change of the pinned list.
set -euo pipefail

venv=$1 req=$2 stamp=$3
PYTHON=${PYTHON:-python3}

# A venv whose interpreter no longer runs (its base python was removed or
# upgraded) is made anew rather than patched.
if [[ -e "$venv" ]] && ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
    echo "bootstrap-venv: $venv is broken; making it anew"
    rm -rf "$venv"
fi
if [[ ! -e "$venv/bin/python" ]]; then
    echo "bootstrap-venv: creating $venv with $(command -v "$PYTHON") ($("$PYTHON" -V 2>&1))"
    if ! "$PYTHON" -m venv "$venv"; then
        rm -rf "$venv"
        echo "bootstrap-venv: '$PYTHON -m venv' failed (on Debian: apt-get install python3-venv)" >&2
        exit 1
    fi
fi
rm -f "$stamp"
echo "bootstrap-venv: installing $req into $venv"
"$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req"
touch "$stamp"
