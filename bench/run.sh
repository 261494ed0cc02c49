#!/usr/bin/env bash
# `make bench`: criterion micro-benchmarks of the pure algorithms, then the
# end-to-end comparison on each server make test runs (bench/e2e.py: its
# own servers on free loopback ports, redis-benchmark for INCR, SET ... PX,
# every THROTTLE command and the Lua scripts of bench/lua/), then
# bench/results.md and bench/chart.svg (bench/report.py, from the
# measurements it keeps in bench/e2e-<server>.json), and one side-by-side
# table per server on stdout; then a ban check against an ordinary call
# (bench/penalties.md), the Python and Node packages through their
# frameworks (bench/python-frameworks.md, bench/django.md, bench/node.md),
# the Rust tower layer in axum (bench/rust-layer.md), and the funnel: a
# concurrency limit through THROTTLE.ACQUIRE BLOCK against Laravel's
# ConcurrencyLimiter and redis-semaphore (bench/funnel.md).
#
# Honours CARGO_TARGET_DIR (default target/) to find the module and the
# criterion results, CARGO (default cargo), BENCH_CELL (a redis-cell build
# to compare with) and BENCH_SERVERS (which servers: debian, redis8, valkey).
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
module="$target/release/libredis_throttle.so"
cargo="${CARGO:-cargo}"
[ -f "$module" ] || { echo "no module at $module: run make build (with the same CARGO_TARGET_DIR)" >&2; exit 1; }
for tool in redis-server redis-benchmark redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "bench needs $tool" >&2; exit 1; }
done

start="$(date +%s)"

echo "== 1/3 criterion micro-benchmarks (cargo bench --bench algorithms)" >&2
# Criterion's own report goes to stderr; the numbers are read back from
# $target/criterion by report.py.
"$cargo" bench --bench algorithms -- --noplot >&2

servers_dir="$target/servers"
scripts/servers.sh "$servers_dir" >/dev/null
runs=()
for server in ${BENCH_SERVERS:-debian redis8 valkey}; do
  case "$server" in
    # Debian's Redis 7.0 gets every phase; the others the ones the targets
    # need (their scaling and log-length behaviour is the same code).
    debian) binary=redis-server; phases=main,memory,loglen,persistence,scaling ;;
    redis8) binary="$servers_dir/redis-8.2.3/redis-server"; phases=main,memory,persistence ;;
    valkey) binary="$servers_dir/valkey-8.1.8/valkey-server"; phases=main,memory,persistence ;;
    *) echo "unknown server $server (debian, redis8, valkey)" >&2; exit 1 ;;
  esac
  echo "== 2/3 end-to-end on $server (bench/e2e.py)" >&2
  BENCH_SERVER="$binary" BENCH_PHASES="${BENCH_PHASES:-$phases}" python3 bench/e2e.py "$module" "bench/e2e-$server.json"
  runs+=("bench/e2e-$server.json")
done

echo "== 3/3 report" >&2
python3 bench/report.py "$target/criterion" "$start" bench "${runs[@]}"

# A ban check against an ordinary call with the same words, in
# instructions (callgrind: the machine's load does not move them).
echo "== a banned key's call against an ordinary one (bench/profile.sh)" >&2
{
  echo "# A ban check against an ordinary call"
  echo
  echo "Written by \`make bench\` (\`bench/profile.sh\`, callgrind, whole server, Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'))"
  echo "on $(date -u '+%Y-%m-%d %H:%M UTC'). WITH_BAN: admitted calls that carry \`BAN 1h\` (limit 1000);"
  echo "BANNED: the same words on keys banned by their second call (limit 1), so every later call meets"
  echo "its ban; FIXED: the plain call, two words shorter."
  echo
  echo '```'
  BENCH_PROF_ONLY="SET FIXED WITH_BAN BANNED" bench/profile.sh "$module" "$target/profile-penalties" 2>/dev/null | grep '^=='
  echo '```'
} > bench/penalties.md

# The packages through their frameworks, each against the store users have.
echo "== Flask-Limiter and SlowAPI, redis:// against throttle:// (bench/python_frameworks.py)" >&2
python3 bench/python_frameworks.py "$module" bench/python-frameworks.md
echo "== Django REST framework, its cache throttle against redis_throttle.django's (bench/django_drf.py)" >&2
python3 bench/django_drf.py "$module" bench/django.md
echo "== express and fastify, their usual Redis stores against redis-throttle's (bench/node.mjs)" >&2
node bench/node.mjs "$module" bench/node.md
echo "== axum: tower_governor, INCR+EXPIRE and the redis-throttle tower layer (bench/rust-layer)" >&2
(cd bench/rust-layer && "$cargo" build --release --quiet)
bench/rust-layer/target/release/rust-layer-bench "$(realpath "$module")" bench/rust-layer.md
echo "== the funnel: THROTTLE.ACQUIRE BLOCK, Laravel's ConcurrencyLimiter and redis-semaphore (bench/funnel)" >&2
(cd bench/funnel && npm ci --no-audit --no-fund --loglevel=error)
node bench/funnel/funnel.mjs "$module" bench/funnel.md
