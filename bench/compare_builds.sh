#!/bin/bash
# compare_builds.sh BEFORE AFTER [OUT] -- the small-path and demo figures of
# docs/performance.md for two source trees with release builds
# (build-release/, e.g. `meson setup build-release --buildtype=release
# -Db_ndebug=true && ninja -C build-release` in each), run alternately in
# the same session, two rounds each, so that a shared machine's load falls
# on both; then 5 demo runs per device and step count of each, alternated.
# Writes one
# file per run under OUT (default ./compare-out).  Uses AFTER's .venv for
# Python.
set -u
B=$(cd "${1:?before tree}" && pwd)
A=$(cd "${2:?after tree}" && pwd)
out=${3:-compare-out}
mkdir -p "$out"
for r in 1 2; do
  for w in before after; do
    d=$([ $w = before ] && echo "$B" || echo "$A")
    "$d/build-release/bench/bench_queue" > "$out/queue.$w.$r" 2>&1
    "$d/build-release/bench/bench_spill" > "$out/spill.$w.$r" 2>&1
    "$A/.venv/bin/python" "$A/bench/bench_python.py" --build "$d/build-release" > "$out/py.$w.$r" 2>&1
    "$A/.venv/bin/python" "$A/bench/bench_queues.py" --build "$d/build-release" > "$out/pyq.$w.$r" 2>&1
  done
done
for dev in sim:0 opencl:0; do
  for s in 32 128 512; do
    for r in 1 2 3 4 5; do
      for w in before after; do
        d=$([ $w = before ] && echo "$B" || echo "$A")
        "$d/build-release/spillway" demo --device "$dev" --steps "$s" --json 2>/dev/null | tail -1 >> "$out/demo.$w.$dev.$s"
      done
    done
  done
done
echo "figures in $out/"
