#!/usr/bin/env bash
# make examples: starts its own redis-server with the built module on a free
# loopback port, runs every client example under examples/ against it (each
# exits non-zero when a reply is not what it expects), and stops the server.
#
#   scripts/examples.sh                   # all: redis-cli python php node rust
#   EXAMPLES="python node" scripts/examples.sh
#
# Installs what an example needs when it is missing (as root, from Debian's
# packages and npm); otherwise says what to install and fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
module="${THROTTLE_MODULE:-$CARGO_TARGET_DIR/release/libredis_throttle.so}"
examples="${EXAMPLES:-redis-cli python php node rust}"
cargo="${CARGO:-cargo}"

[ -f "$module" ] || { echo "examples: $module is missing: run make build first" >&2; exit 1; }

apt_updated=""
apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "examples: missing Debian packages: $*; install them with: sudo apt-get install -y $*" >&2
    exit 1
  fi
  echo "examples: installing $*"
  if [ -z "$apt_updated" ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# The Python that has redis-py: the one on PATH, else Debian's (python3-redis).
python_with_redis() {
  local py
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import redis' >/dev/null 2>&1; then
      command -v "$py"; return 0
    fi
  done
  return 1
}

# Installs what each selected example needs, before the server starts.
python=""
for ex in $examples; do
  case "$ex" in
    redis-cli) command -v redis-cli >/dev/null || apt_install redis-tools ;;
    python)
      python="$(python_with_redis)" || { apt_install python3-redis; python="$(python_with_redis)"; } ;;
    php)
      command -v php >/dev/null && php -r 'exit(class_exists("Redis") ? 0 : 1);' \
        || apt_install php-cli php-redis ;;
    node)
      command -v node >/dev/null && command -v npm >/dev/null || apt_install nodejs npm
      # package-lock.json pins node-redis; node_modules/ is not committed.
      [ -f examples/node/node_modules/redis/package.json ] \
        || (cd examples/node && npm ci --no-audit --no-fund --loglevel=error) ;;
    rust) "$cargo" build --release --quiet --example rust ;;
    *) echo "examples: unknown example '$ex' (known: redis-cli python php node rust)" >&2; exit 1 ;;
  esac
done

# A free loopback port, never 6379 (a developer's own Redis may be there).
port=""
while [ -z "$port" ] || [ "$port" = 6379 ]; do
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
done
dir="$(mktemp -d)"
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  --logfile "$dir/redis.log" --loadmodule "$module" &
server=$!
stop() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -rf "$dir"
}
trap stop EXIT
trap 'exit 130' INT TERM
for _ in $(seq 200); do
  redis-cli -p "$port" PING >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { echo "examples: redis-server exited:" >&2; cat "$dir/redis.log" >&2; exit 1; }
  sleep 0.05
done
redis-cli -p "$port" PING >/dev/null
echo "== redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') with the module on 127.0.0.1:$port (pid $server)"

export REDIS_HOST=127.0.0.1 REDIS_PORT="$port"
passed=0 failed=0 failures=""
start_all=$(date +%s%N)
for ex in $examples; do
  case "$ex" in
    redis-cli) cmd=(bash examples/redis-cli/example.sh) ;;
    python) cmd=("$python" examples/python/example.py) ;;
    php) cmd=(php examples/php/example.php) ;;
    node) cmd=(node examples/node/example.js) ;;
    rust) cmd=("$cargo" run --release --quiet --example rust) ;;
  esac
  echo; echo "== $ex: ${cmd[*]}"
  t0=$(date +%s%N)
  if "${cmd[@]}"; then status=ok; passed=$((passed + 1)); else status=FAILED; failed=$((failed + 1)); failures="$failures $ex"; fi
  echo "== $ex: $status in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
done
echo
echo "examples: $(( ($(date +%s%N) - start_all) / 1000000 )) ms against 127.0.0.1:$port"
[ "$failed" = 0 ] || echo "examples that failed:$failures"
echo "examples: $passed passed, $failed failed"
[ "$failed" = 0 ]
