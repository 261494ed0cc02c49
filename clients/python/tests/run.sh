#!/usr/bin/env bash
# make test-python: the package's pytest suite, then limits' own storage
# tests from its sdist (tests/limits_suite.py), in a virtualenv of their own
# under the build directory, against redis-servers with the freshly built
# module (THROTTLE_MODULE) on free loopback ports, on every server binary in
# THROTTLE_SERVERS (space-separated; the Makefile names four; default
# THROTTLE_REDIS_SERVER, or redis-server on PATH). `run.sh venv` only
# prepares the virtualenv and prints its python (for bench/).
#
# Then Django REST framework's own throttling tests from its sdist
# (drf_suite.sh, tests/drf_suite.py), a few seconds a server.
#
# Where the time goes: the package's suite takes ~15 s a server; the tests
# that are the same on every server (mypy, a pip install into a fresh
# virtualenv; marked server_independent) run on the first server only.
# limits' own suite takes ~2 min a server, nearly all of it in its own
# sleeps (its tests wait for real windows to pass): it runs on every server,
# the runs side by side in the background while the package's suites run,
# each into a log of its own, printed when it ends.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
package="$(dirname "$here")"
root="$(cd "$package/../.." && pwd)"
target="$(cd "$root" && mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)"
export THROTTLE_MODULE="${THROTTLE_MODULE:-$target/release/libredis_throttle.so}"
venv="$target/python-venv"
python="$venv/bin/python"
pip=("$python" -m pip --disable-pip-version-check -q)

[ -x "$python" ] || python3 -m venv "$venv"
"${pip[@]}" install -r "$here/requirements.txt"
"${pip[@]}" install --force-reinstall --no-deps "$package"
if [ "${1:-}" = venv ]; then echo "$python"; exit 0; fi
"$python" -m pip list --disable-pip-version-check 2>/dev/null \
  | grep -iE '^(redis|valkey|limits|flask|flask-limiter|slowapi|fastapi|starlette|pytest) ' | tr -s ' ' | paste -sd, -

read -r -a servers <<< "${THROTTLE_SERVERS:-${THROTTLE_REDIS_SERVER:-redis-server}}"
# A server's name in the output: the directory its binary is in (redis-8.2.3), or the binary.
name() { local dir; dir="$(basename "$(dirname "$1")")"; if [ "$dir" = . ]; then echo "$1"; else echo "$dir"; fi; }
for binary in "${servers[@]}"; do
  command -v "$binary" >/dev/null || { echo "no server binary $binary (THROTTLE_SERVERS)"; exit 1; }
done

# limits' sdist, for its tests
version="$("$python" -c 'import limits; print(limits.__version__)')"
suite="$target/python-limits-$version"
if [ ! -d "$suite/tests" ]; then
  rm -rf "$suite.download" && mkdir -p "$suite.download"
  "${pip[@]}" download --no-deps --no-binary :all: "limits==$version" -d "$suite.download"
  tar xzf "$suite.download/limits-$version.tar.gz" -C "$suite.download"
  mv "$suite.download/limits-$version" "$suite" && rm -rf "$suite.download"
fi

logs="$(mktemp -d "$target/python-logs.XXXXXX")"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$logs"
}
trap cleanup EXIT

echo "== limits' own storage tests against throttle:// and throttle+cluster:// (started: ${#servers[@]} servers side by side)"
for binary in "${servers[@]}"; do
  (cd "$suite" && THROTTLE_REDIS_SERVER="$binary" PYTHONPATH="$here" exec "$python" -m pytest -p no:cacheprovider \
     -p limits_suite -q -rxX -o addopts= -o asyncio_default_fixture_loop_scope=function -W ignore::ResourceWarning \
     tests/test_storage.py tests/test_strategy.py tests/aio/test_storage.py tests/aio/test_strategy.py) \
    >"$logs/limits-$(name "$binary").log" 2>&1 &
  pids+=($!)
done

status=0
first=1
for binary in "${servers[@]}"; do
  echo "== the package's tests on $(name "$binary")"
  only=()
  [ $first = 1 ] || only=(-m "not server_independent")
  # below limits' suites in priority: their assertions time real sleeps to a few hundredths of a second,
  # where the package's own tests bracket every time they check
  (cd "$package" && THROTTLE_REDIS_SERVER="$binary" nice -n 10 "$python" -m pytest -p no:cacheprovider -q -rs \
     "${only[@]}" tests) || status=1
  first=0
done

"$here/drf_suite.sh" "$python" "$target" "${servers[@]}" || status=1

for i in "${!servers[@]}"; do
  binary="${servers[$i]}"
  log="$logs/limits-$(name "$binary").log"
  echo "== limits' own storage tests on $(name "$binary")"
  if wait "${pids[$i]}"; then
    # the reruns of tests limits marks flaky, then its summary (skips) if it has one, else its count
    grep -o 'rerun: .*' "$log" || true
    sed -n '/short test summary info/,$p' "$log" | grep . || tail -n 1 "$log"
  else
    status=1
    cat "$log"
  fi
done
pids=()
exit $status
