#!/usr/bin/env bash
# if-device.sh SPEC COMMAND [ARGS...] -- run COMMAND with SW_TEST_DEVICE=SPEC
# when `spillway devices` lists SPEC; otherwise say so and exit 77, which
# run-suites.sh reports as "not run" (counting nothing).
#
#   scripts/if-device.sh opencl:0 build/tests/c/test_spillway
set -uo pipefail

if (($# < 2)); then
    echo "usage: $0 SPEC COMMAND [ARGS...]" >&2
    exit 2
fi
spec=$1
shift
tool=${SPILLWAY_TOOL:-build/spillway}

# Asked up to three times: on a loaded machine an OpenCL platform has
# once failed to list its device, which silently skipped a whole suite.
listed=0
for attempt in 1 2 3; do
    if "$tool" devices 2>/dev/null | grep -qxF "$spec"; then
        listed=1
        break
    fi
    [[ $spec == opencl:* ]] || break  # the others' absence is not a fluke
    sleep 1
done
if ((listed == 0)); then
    echo "no $spec device here ($tool devices does not list it)"
    exit 77
fi
export SW_TEST_DEVICE=$spec
exec "$@"
