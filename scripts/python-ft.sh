#!/usr/bin/env bash
# python-ft.sh [PREFIX] -- a free-threaded CPython 3.13 (configured
# --disable-gil) in PREFIX (default .python-ft/, ignored by git), built once
# from Debian trixie's source package of python3.13 and reused by later
# runs; prints the interpreter's path last.
#
# Where no free-threaded Python is installed (Debian 12 has none), `make
# test`'s python-ft suite obtains one here:
#  1. the build dependencies, from this system's own Debian packages;
#  2. the source, with `apt-get source --download-only python3.13` through
#     a private, source-only apt configuration for trixie (a deb-src entry
#     under PREFIX: this system's apt sources and packages are left alone,
#     and no trixie binary is installed);
#  3. the upstream tarball of that package, configured --disable-gil,
#     built (make -jN) and installed into PREFIX, with pip.
# About 3.5 CPU-minutes here; PREFIX/.stamp says which source it is, and a
# later run whose interpreter still starts does nothing.
#
# PYTHON_FT_TSAN=1 builds a second one, --with-thread-sanitizer, into
# PREFIX-tsan, for `make test`'s python-ft-tsan suite (about 5.5
# CPU-minutes, 10.5 minutes of wall time on 2 cores).  Either keeps
# CPython's TSan suppression list in PREFIX/share/spillway/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PREFIX=${1:-$PWD/.python-ft}
[[ "$PREFIX" == /* ]] || PREFIX=$PWD/$PREFIX
EXTRA_CONFIG=()
if [[ "${PYTHON_FT_TSAN:-0}" == 1 ]]; then
    PREFIX=$PREFIX-tsan
    EXTRA_CONFIG=(--with-thread-sanitizer)
fi
PY=$PREFIX/bin/python3.13t

if [[ -x "$PY" && -f $PREFIX/share/spillway/cpython-tsan.supp ]] && "$PY" -c 'import sys, ssl, zlib, ctypes; sys.exit(sys._is_gil_enabled())' \
        >/dev/null 2>&1; then
    echo "python-ft: $PY (free-threaded, built before)"
    echo "$PY"
    exit 0
fi

say() { echo "python-ft: $*" >&2; }

# 1. Build dependencies (Debian 12's own packages).
need=(build-essential pkg-config libssl-dev zlib1g-dev libffi-dev
      libbz2-dev liblzma-dev libsqlite3-dev libreadline-dev uuid-dev
      libgdbm-dev libncurses-dev xz-utils dpkg-dev)
missing=()
for p in "${need[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing+=("$p")
done
if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    sudo=()
    ((EUID == 0)) || sudo=(sudo)
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. The source of trixie's python3.13, through a private apt setup.
WORK=$PREFIX.work
rm -rf "$WORK"
mkdir -p "$WORK/apt/lists/partial" "$WORK/apt/cache/archives/partial" \
         "$WORK/src"
cat >"$WORK/apt/sources.list" <<'EOF'
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
EOF
APT=(apt-get -qq
     -o "Dir::Etc::sourcelist=$WORK/apt/sources.list"
     -o "Dir::Etc::sourceparts=-"
     -o "Dir::State::Lists=$WORK/apt/lists"
     -o "Dir::Cache=$WORK/apt/cache"
     -o "APT::Get::List-Cleanup=0"
     -o "Debug::NoLocking=1"
     -o "APT::Sandbox::User=root")
say "fetching the source of trixie's python3.13"
"${APT[@]}" update
(cd "$WORK/src" && "${APT[@]}" source --download-only python3.13)
orig=$(ls "$WORK"/src/python3.13_*.orig.tar.* | head -n 1)
version=$(basename "$orig" | sed -E 's/python3\.13_([^.]+\.[^.]+\.[^.]+).*/\1/')
say "building CPython $version --disable-gil ${EXTRA_CONFIG[*]} into $PREFIX"
tar -xf "$orig" -C "$WORK/src"
srcdir=$(find "$WORK/src" -maxdepth 1 -type d -name 'Python-*' | head -n 1)

# 3. Configure, build, install.
(
    cd "$srcdir"
    # --disable-test-modules: CPython's own test package and test
    # extensions, which nothing here imports, are a large share of what
    # `make install` byte-compiles three times over (under TSan, minutes).
    ./configure --prefix="$PREFIX" --disable-gil --with-ensurepip=install \
        --disable-test-modules "${EXTRA_CONFIG[@]}" >"$WORK/configure.log" 2>&1 ||
        { tail -n 30 "$WORK/configure.log" >&2; exit 1; }
    make -j"$(nproc)" >"$WORK/make.log" 2>&1 ||
        { tail -n 40 "$WORK/make.log" >&2; exit 1; }
    make install >"$WORK/install.log" 2>&1 ||
        { tail -n 40 "$WORK/install.log" >&2; exit 1; }
)
"$PY" -c 'import sys, ssl, zlib, ctypes; assert not sys._is_gil_enabled()'
# CPython's own list of the reports its free-threaded runtime makes under
# TSan by design or as known upstream bugs (the TSan suite appends it to
# spillway's, scripts/tsan-python-ft.supp).
mkdir -p "$PREFIX/share/spillway"
cp "$srcdir/Tools/tsan/suppressions_free_threading.txt" \
   "$PREFIX/share/spillway/cpython-tsan.supp"
echo "trixie python3.13 $version --disable-gil ${EXTRA_CONFIG[*]}" >"$PREFIX/.stamp"
rm -rf "$WORK"
say "done: $("$PY" -VV)"
echo "$PY"
