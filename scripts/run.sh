#!/usr/bin/env bash
# Starts redis-server with redis.conf.example (which loads the module) on a
# local port, shows the four commands working, then stays up until Ctrl-C.
# It runs from the repository root, where the example's relative loadmodule
# path points; the example saves nothing to disk.
set -euo pipefail
cd "$(dirname "$0")/.."
port="${1:-6399}"
redis-server redis.conf.example --port "$port" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null' EXIT INT TERM
for _ in $(seq 100); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.05; done

show() { printf '\n> %s\n' "$*"; redis-cli -p "$port" "$@"; }
echo "== redis-server with the throttle module on 127.0.0.1:$port"
show MODULE LIST
echo; echo "== 3 calls per second, fixed window: the 4th is limited (allowed limit remaining retry_after reset_after)"
for _ in 1 2 3 4; do show THROTTLE.FIXED demo:fixed 3 1s; done
show TYPE demo:fixed
show PTTL demo:fixed
echo; echo "== sliding window, exact log, token and leaky buckets"
show THROTTLE.SLIDING demo:sliding 10 1m COST 4
show THROTTLE.SLIDING demo:exact 10 1m EXACT
show THROTTLE.TOKEN demo:token 5 1s BURST 10 COST 10
show THROTTLE.TOKEN demo:token 5 1s BURST 10
show THROTTLE.LEAKY demo:leaky 2 1s
show THROTTLE.LEAKY demo:leaky 2 1s
echo; echo "== a peek (COST 0) changes nothing; bad input is an error"
show THROTTLE.TOKEN demo:token 5 1s BURST 10 COST 0
show THROTTLE.FIXED demo:fixed 0 1s
echo
echo "Redis is up on 127.0.0.1:$port: try  redis-cli -p $port THROTTLE.TOKEN mykey 10 1s"
echo "Ctrl-C stops it."
wait "$server"
