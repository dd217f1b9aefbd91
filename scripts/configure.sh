#!/usr/bin/env bash
# configure.sh BUILDDIR [MESON OPTIONS...] -- configure BUILDDIR with the
# venv's meson: a fresh `meson setup`, or `--reconfigure` when BUILDDIR is
# already a meson build directory (so changed options take effect), and
# `--wipe` when a reconfigure fails (a directory left half-made, or made by
# another meson version).
set -euo pipefail

MESON=${MESON:-.venv/bin/meson}
dir=$1
shift

if [[ -f "$dir/meson-private/coredata.dat" ]]; then
    "$MESON" setup --reconfigure "$dir" "$@" ||
        "$MESON" setup --wipe "$dir" "$@"
else
    "$MESON" setup "$dir" "$@"
fi
