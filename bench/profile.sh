#!/usr/bin/env bash
# Where a THROTTLE call's time goes, counted in instructions (callgrind), so
# the answer does not depend on what else the machine is running.
#
#   bench/profile.sh [MODULE.so] [OUT_DIR]
#
# For INCR, SET ... PX (the reference the targets use), each THROTTLE
# command, and a FIXED call on a banned key: redis-server runs (in an empty
# directory: an old dump.rdb with replication data would give it a
# replication backlog, and the calls a full propagated command) under
# `valgrind --tool=callgrind` on a free loopback port, instrumentation is
# switched on only around one fixed load (redis-benchmark -P 16 -c 50,
# BENCH_PROF_N calls over BENCH_PROF_KEYS keys, so about 10 calls per key as
# in `make bench`), then the server is stopped (by its PID) and the profile
# summarised: instructions per call, and the top functions by exclusive and
# inclusive cost. BENCH_PROF_REPLICA=1 attaches a replica to each server
# first; BENCH_PROF_ONLY="FIXED BANNED" profiles only the rows named. Function names in the module need a build that keeps its
# symbols:
#
#   CARGO_TARGET_DIR=/tmp/target-prof CARGO_PROFILE_RELEASE_STRIP=false \
#     CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release
#   bench/profile.sh /tmp/target-prof/release/libredis_throttle.so
set -euo pipefail
cd "$(dirname "$0")/.."
module="$(realpath "${1:-${CARGO_TARGET_DIR:-target}/release/libredis_throttle.so}")"
out="${2:-$(mktemp -d)}"
n="${BENCH_PROF_N:-50000}"
keys="${BENCH_PROF_KEYS:-5000}"
mkdir -p "$out"
for tool in valgrind callgrind_annotate callgrind_control redis-server redis-benchmark redis-cli; do
  command -v "$tool" >/dev/null || { echo "profile needs $tool" >&2; exit 1; }
done

free_port() {
  python3 -c 'import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p != 6379: print(p); break'
}

server=""
replica=""
cleanup() {
  [ -n "$replica" ] && kill "$replica" 2>/dev/null && wait "$replica" 2>/dev/null; replica=""
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; server=""
}
trap cleanup EXIT INT TERM

top() { # --inclusive=yes|no, file, [rows]
  callgrind_annotate --threshold=100 "$1" "$2" 2>/dev/null \
    | awk -v rows="${3:-25}" 'shown && n < rows && NF { print; n++ } /file:function/ { shown = 1 }'
}

profile() { # name, then the command with __rand_int__ in its key
  local name="$1"; shift
  # BENCH_PROF_ONLY="A B": only the rows named.
  if [ -n "${BENCH_PROF_ONLY:-}" ] && [[ " $BENCH_PROF_ONLY " != *" $name "* ]]; then return; fi
  local port file
  port="$(free_port)"
  file="$out/callgrind.$name.out"
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$file" \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$(mktemp -d)" --loadmodule "$module" \
    >"$out/valgrind.$name.log" 2>&1 &
  server=$!
  for _ in $(seq 600); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.1; done
  if [ -n "${BENCH_PROF_REPLICA:-}" ]; then
    # A replica (not profiled) attached, as production runs: every change
    # then goes out as its propagated command.
    local replica_port
    replica_port="$(free_port)"
    redis-server --port "$replica_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$(mktemp -d)" \
      --loadmodule "$module" --replicaof 127.0.0.1 "$port" >"$out/replica.$name.log" 2>&1 &
    replica=$!
    for _ in $(seq 600); do
      redis-cli -p "$replica_port" INFO replication 2>/dev/null | grep -q '^master_link_status:up' && break
      sleep 0.1
    done
  fi
  callgrind_control -i on "$server" >/dev/null 2>&1
  redis-benchmark -p "$port" -n "$n" -c 50 -P 16 -r "$keys" -q "$@" >/dev/null
  callgrind_control -i off "$server" >/dev/null 2>&1
  local calls
  calls="$(redis-cli -p "$port" INFO commandstats | grep -i "^cmdstat_$(echo "$1" | tr 'A-Z' 'a-z'):" \
    | sed 's/^[^:]*:calls=\([0-9]*\),.*/\1/')"
  cleanup
  local total
  total="$(callgrind_annotate "$file" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')"
  echo "== $name: $calls calls, $((total / calls)) instructions per call (whole server, event loop included)"
  echo "-- top 25 by exclusive instructions"
  top --inclusive=no "$file"
  echo "-- top 40 by inclusive instructions"
  top --inclusive=yes "$file" 40
  echo
}

{
  profile INCR INCR in:__rand_int__
  profile SET SET st:__rand_int__ 1 PX 3600000
  profile FIXED THROTTLE.FIXED fx:__rand_int__ 1000 1h
  profile SLIDING THROTTLE.SLIDING sl:__rand_int__ 1000 1h
  profile EXACT THROTTLE.SLIDING ex:__rand_int__ 100 1h EXACT
  profile TOKEN THROTTLE.TOKEN tk:__rand_int__ 1000 1h
  profile LEAKY THROTTLE.LEAKY lk:__rand_int__ 1000 1h
  # The same words twice: admitted calls that carry a BAN option, and calls
  # on keys their second call banned (after a key's first call, every
  # call meets its ban: a check, no change).
  profile WITH_BAN THROTTLE.FIXED wb:__rand_int__ 1000 1h BAN 1h
  profile BANNED THROTTLE.FIXED bn:__rand_int__ 1 1h BAN 1h
} | tee "$out/summary.txt"
echo "profiles and summary in $out" >&2
