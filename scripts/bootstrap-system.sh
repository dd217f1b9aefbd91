#!/usr/bin/env bash
# bootstrap-system.sh -- make sure the system tools spillway builds with are
# present, installing only what is missing.
#
# Needed: a C compiler (gcc), pkg-config, python3 with venv support and its C
# headers, the OpenCL ICD loader and headers (ocl-icd-opencl-dev,
# opencl-c-headers) and PoCL (pocl-opencl-icd), the CPU OpenCL runtime the
# OpenCL backend is tested on, and clang with its sanitizer and libFuzzer
# runtimes (clang, libclang-rt-dev) for the fuzz suites (tests/fuzz; without
# them those suites are "not run").  clinfo is optional (handy for looking).
#
# Wanted, not needed (no backend needs them to build or run; see
# debian_optional below): ROCm's HIP headers (libamdhip64-dev, which brings
# Debian's ROCm 5.2 runtime and hipRTC) and Level Zero's (libze-dev, which
# brings the loader), against which the build checks the HIP and Level Zero
# backends' own declarations, and clang-14 with llvm-spirv-14, which compile
# the built-in OpenCL kernels to SPIR-V for the Level Zero backend.  They are
# installed in a separate apt call whose failure is only a warning: without
# them those checks are skipped, saying so, and the ze backend has no
# kernels (and the c-ze-fake suites do not run).  liburing-dev lets
# bench/bench_disk.c measure io_uring beside the disk tier's I/O threads
# (without it that column is skipped).
#
# On Debian (/etc/debian_version) the missing packages are found with
# dpkg-query, then `apt-get update` runs once and `apt-get install -y
# --no-install-recommends` installs them -- as root, or through sudo.  When
# everything is present no apt command runs at all, so this is cheap enough
# to run before every build.  SW_BOOTSTRAP_DRY_RUN=1 prints the apt commands
# instead of running them.  Elsewhere it lists what is needed and fails only
# if the compiler or python are missing (the OpenCL parts are optional for a
# build: the simulated device needs none of them).
#
# The python checks are done on the python3 that the build will use ($PYTHON,
# default: the python3 on PATH, which may be a pyenv or other non-Debian
# python): Debian's python3-venv / python3-dev are only asked for when that
# python lacks venv / its headers.
set -euo pipefail

PYTHON=${PYTHON:-python3}

say() { printf 'bootstrap-system: %s\n' "$*"; }
warn() { printf 'bootstrap-system: %s\n' "$*" >&2; }

have() { command -v "$1" >/dev/null 2>&1; }

# ---------------------------------------------------------------------------
# Probes: each answers "is this capability there?" without any package tool.
# ---------------------------------------------------------------------------

probe_cc() { have "${CC:-gcc}" || have cc; }
probe_pkgconfig() { have pkg-config || have pkgconf; }
probe_python() { have "$PYTHON"; }
# `python3 -m venv` needs ensurepip (Debian moves it into python3.X-venv).
probe_venv() { "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; }
probe_pyheaders() {
    "$PYTHON" - <<'EOF' >/dev/null 2>&1
import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)
EOF
}

is_debian() { [[ -f /etc/debian_version ]] && have dpkg-query && have apt-get; }

# dpkg-query: installed means status "install ok installed".
deb_installed() {
    [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

# ---------------------------------------------------------------------------
# Debian: collect the missing packages, install them in one apt call.
# ---------------------------------------------------------------------------

debian_bootstrap() {
    local -a want=(gcc libc6-dev make pkg-config ocl-icd-opencl-dev
                   opencl-c-headers pocl-opencl-icd clang libclang-rt-dev)
    # The python packages only matter for Debian's own python3: a python3 from
    # elsewhere (pyenv, a venv) brings its own venv module and headers.
    if ! probe_python; then
        want+=(python3 python3-venv python3-dev)
    else
        probe_venv || want+=(python3-venv)
        probe_pyheaders || want+=(python3-dev)
    fi
    if [[ -n "${SW_WANT_CLINFO:-}" ]]; then want+=(clinfo); fi

    local -a missing=()
    local p
    for p in "${want[@]}"; do
        deb_installed "$p" || missing+=("$p")
    done
    if ((${#missing[@]} == 0)); then
        debian_optional
        check_after_install
        return
    fi

    say "missing Debian packages: ${missing[*]}"
    local -a sudo=()
    if ((EUID != 0)); then
        # -n: never prompt (CI has no terminal); a prompting sudo only when
        # there is a terminal to prompt on.
        if have sudo && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        elif have sudo && [[ -t 0 ]]; then
            sudo=(sudo)
        else
            # No way to install: say what to run, and go on if what is
            # missing is not needed for a build (check_after_install decides).
            warn "not root and no usable sudo; to install them, run as root:"
            warn "  apt-get install -y --no-install-recommends ${missing[*]}"
            check_after_install
            return
        fi
    fi
    if [[ -n "${SW_BOOTSTRAP_DRY_RUN:-}" ]]; then
        say "dry run: would run: ${sudo[*]} apt-get update; ${sudo[*]} apt-get install -y --no-install-recommends ${missing[*]}"
        return
    fi
    say "installing them with apt-get"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}"
    APT_UPDATED=1
    debian_optional
    check_after_install
}

# The wanted-not-needed packages (see the top): installed when apt can, a
# warning when it cannot (another Debian release, no root, no network).
# libamdhip64-dev and libze-dev are Debian bookworm's names (ROCm 5.2.3,
# Level Zero 1.8.12); clang-14 and llvm-spirv-14 are a matching pair (the
# SPIR-V translator reads only its own LLVM's bitcode).
APT_UPDATED=0
debian_optional() {
    local -a opt=(libamdhip64-dev libze-dev clang-14 llvm-spirv-14
                  liburing-dev)
    local -a missing=()
    local p
    for p in "${opt[@]}"; do
        deb_installed "$p" || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    local -a sudo=()
    if ((EUID != 0)); then
        if have sudo && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            warn "optional packages missing (not root, no usable sudo): ${missing[*]};" \
                "the HIP/Level Zero header checks and the SPIR-V kernels are skipped"
            return 0
        fi
    fi
    if [[ -n "${SW_BOOTSTRAP_DRY_RUN:-}" ]]; then
        say "dry run: would install the optional packages: ${missing[*]}"
        return 0
    fi
    say "installing optional packages: ${missing[*]}"
    if ((APT_UPDATED == 0)); then
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q || true
        APT_UPDATED=1
    fi
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}"; then
        warn "could not install ${missing[*]} (not Debian bookworm's names" \
            "here?): the HIP/Level Zero header checks and the SPIR-V kernels" \
            "are skipped"
    fi
    return 0
}

# After (or without) installing: the probes must pass now.  A python3 that is
# not Debian's can still lack venv or headers, which no apt package fixes.
check_after_install() {
    local bad=0
    probe_cc || { warn "no C compiler (gcc) found"; bad=1; }
    probe_pkgconfig || { warn "pkg-config not found"; bad=1; }
    if ! probe_python; then
        warn "$PYTHON not found"; bad=1
    else
        probe_venv || { warn "$PYTHON ($(command -v "$PYTHON")) has no working venv/ensurepip module"; bad=1; }
        probe_pyheaders || warn "$PYTHON has no C headers (Python.h): the Python extension will not build"
    fi
    ((bad == 0)) || exit 1
}

# ---------------------------------------------------------------------------
# Not Debian: say what is needed; fail only without compiler or python.
# ---------------------------------------------------------------------------

other_bootstrap() {
    local bad=0
    local -a notes=()
    probe_cc || { notes+=("a C11 compiler (gcc or clang)"); bad=1; }
    probe_pkgconfig || notes+=("pkg-config")
    if ! probe_python; then
        notes+=("python3 (3.9+) with the venv module and C headers"); bad=1
    else
        probe_venv || { notes+=("the venv module for $PYTHON"); bad=1; }
        probe_pyheaders || notes+=("the C headers of $PYTHON (python3-devel)")
    fi
    if [[ ! -e /usr/include/CL/cl.h && ! -e /usr/local/include/CL/cl.h ]]; then
        notes+=("OpenCL headers and ICD loader (opencl-headers, ocl-icd-devel)")
    fi
    if [[ ! -d /etc/OpenCL/vendors ]]; then
        notes+=("an OpenCL runtime such as PoCL (pocl) -- optional, for the OpenCL device")
    fi
    if ! have clang; then
        notes+=("clang with its compiler-rt (sanitizers, libFuzzer) -- optional, for the fuzz suites")
    fi
    if ((${#notes[@]})); then
        warn "not a Debian system: install these with your package manager:"
        local n
        for n in "${notes[@]}"; do warn "  - $n"; done
    fi
    ((bad == 0)) || exit 1
}

if is_debian; then
    debian_bootstrap
else
    other_bootstrap
fi
