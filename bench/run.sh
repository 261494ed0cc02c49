#!/usr/bin/env bash
# `make bench`: criterion micro-benchmarks of the pure algorithms, then the
# end-to-end comparison (bench/e2e.py: its own redis-servers on free
# loopback ports, redis-benchmark for INCR, every THROTTLE command and the
# Lua scripts of bench/lua/), then bench/results.md and bench/chart.svg
# (bench/report.py), and the side-by-side table on stdout.
#
# Honours CARGO_TARGET_DIR (default target/) to find the module and the
# criterion results, and CARGO (default cargo).
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
module="$target/release/libredis_throttle.so"
cargo="${CARGO:-cargo}"
[ -f "$module" ] || { echo "no module at $module: run make build (with the same CARGO_TARGET_DIR)" >&2; exit 1; }
for tool in redis-server redis-benchmark redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "bench needs $tool" >&2; exit 1; }
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start="$(date +%s)"

echo "== 1/3 criterion micro-benchmarks (cargo bench --bench algorithms)" >&2
# Criterion's own report goes to stderr; the numbers are read back from
# $target/criterion by report.py.
"$cargo" bench --bench algorithms -- --noplot >&2

echo "== 2/3 end-to-end (bench/e2e.py)" >&2
python3 bench/e2e.py "$module" "$work/e2e.json"

echo "== 3/3 report" >&2
python3 bench/report.py "$work/e2e.json" "$target/criterion" "$start" bench
