#!/usr/bin/env bash
# bench/ze/check.sh -- spillway's Level Zero backend on a real Intel GPU, in
# one run of at most 8 minutes, ending with one table.
#
#   bash bench/ze/check.sh                              (from anywhere)
#   SPILLWAY_CHECK_DEVICE=sim:0 bash bench/ze/check.sh  (a dry run here)
#
# Builds build-ze/ with meson and ninja (with the SPIR-V kernels when clang
# and llvm-spirv of one LLVM version are found: the device step's
# ze_spirv_modules says which), then: `spillway info` and the Level Zero
# tests that say what the machine has (ze_gpu_device, the SPIR-V modules,
# the header check); the whole C suite on ze:0; the demo under a 64 MiB
# budget (bit-identical results required); spill/restore bandwidth and
# allocation latency (bench/gpu/spill_bench.c); the Python suite on ze:0.
# Steps and the table: bench/device_check.sh.
#
# Needs, at run time only: the Level Zero loader (libze_loader.so.1, or
# SPILLWAY_ZE_LIBRARY) with Intel's GPU driver (compute-runtime) behind it,
# access to /dev/dri (the render group); for device_free, Sysman (loader
# 1.5+, or the process started with ZES_ENABLE_SYSMAN=1).  Nothing Level
# Zero is needed to build.  docs/level-zero.md.
CHECK_NAME="Level Zero"
CHECK_SPEC=ze:0
CHECK_BUILD=build-ze
CHECK_TESTS="ze_gpu_device ze_no_gpu ze_spirv_modules ze_signatures"
CHECK_GPU_TEST=ze_gpu_device
CHECK_NOTES="libze_loader.so.1 + Intel compute-runtime, /dev/dri access; Sysman for device_free"
# shellcheck source=../device_check.sh
source "$(dirname "${BASH_SOURCE[0]}")/../device_check.sh"
