#!/usr/bin/env bash
# bench/hip/check.sh -- spillway's HIP backend on a real AMD GPU, in one run
# of at most 8 minutes, ending with one table.
#
#   bash bench/hip/check.sh                              (from anywhere)
#   SPILLWAY_CHECK_DEVICE=sim:0 bash bench/hip/check.sh  (a dry run here)
#
# Builds build-hip/ with meson and ninja, then: `spillway info` and the
# HIP tests that say what the machine has (hip_gpu_device, the hipRTC
# compile of the built-in kernels, the header check); the whole C suite on
# hip:0; the demo under a 64 MiB budget (bit-identical results required);
# spill/restore bandwidth and allocation latency (bench/gpu/spill_bench.c);
# the Python suite on hip:0.  Steps and the table: bench/device_check.sh.
#
# Needs, at run time only: the ROCm runtime (libamdhip64.so, or
# SPILLWAY_HIP_LIBRARY) and hipRTC (libhiprtc.so, or the runtime itself on
# ROCm 5.2 and older, or SPILLWAY_HIPRTC_LIBRARY), and access to /dev/kfd
# and /dev/dri (the video and render groups).  Nothing ROCm is needed to
# build.  docs/hip.md.
CHECK_NAME=HIP
CHECK_SPEC=hip:0
CHECK_BUILD=build-hip
CHECK_TESTS="hip_gpu_device hip_no_gpu hip_hiprtc_code_object hip_signatures"
CHECK_GPU_TEST=hip_gpu_device
CHECK_NOTES="libamdhip64.so + hipRTC (ROCm 5.x/6.x), /dev/kfd access"
# shellcheck source=../device_check.sh
source "$(dirname "${BASH_SOURCE[0]}")/../device_check.sh"
