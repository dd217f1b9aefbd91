#!/usr/bin/env bash
# if-tests.sh DIR COMMAND [ARGS...] -- run COMMAND when DIR holds Python test
# files (test_*.py or *_test.py); otherwise say so and exit 77, which
# run-suites.sh reports as "not run" (counting nothing).
#
#   scripts/if-tests.sh tests/python .venv/bin/python -m pytest tests/python
set -uo pipefail

if (($# < 2)); then
    echo "usage: $0 DIR COMMAND [ARGS...]" >&2
    exit 2
fi
dir=$1
shift
if [[ -z "$(find "$dir" \( -name 'test_*.py' -o -name '*_test.py' \) -print -quit 2>/dev/null)" ]]; then
    echo "no tests in $dir yet"
    exit 77
fi
exec "$@"
