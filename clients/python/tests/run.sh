#!/usr/bin/env bash
# make test-python: the package's pytest suite, then limits' own storage
# tests from its sdist (tests/limits_suite.py), in a virtualenv of their own
# under the build directory, against redis-servers with the freshly built
# module (THROTTLE_MODULE) on free loopback ports. `run.sh venv` only
# prepares the virtualenv and prints its python (for bench/).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
package="$(dirname "$here")"
target="$(cd "$package/../.." && mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)"
export THROTTLE_MODULE="${THROTTLE_MODULE:-$target/release/libredis_throttle.so}"
venv="$target/python-venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"${pip[@]}" install -r "$here/requirements.txt"
"${pip[@]}" install --force-reinstall --no-deps "$package"
if [ "${1:-}" = venv ]; then echo "$venv/bin/python"; exit 0; fi
"$venv/bin/python" -m pip list --disable-pip-version-check 2>/dev/null \
  | grep -iE '^(redis|valkey|limits|flask|flask-limiter|slowapi|fastapi|starlette|pytest) ' | tr -s ' ' | paste -sd, -

echo "== the package's tests"
(cd "$package" && "$venv/bin/python" -m pytest -p no:cacheprovider -q tests)

echo "== limits' own storage tests against throttle:// and throttle+cluster://"
version="$("$venv/bin/python" -c 'import limits; print(limits.__version__)')"
suite="$target/python-limits-$version"
if [ ! -d "$suite/tests" ]; then
  rm -rf "$suite.download" && mkdir -p "$suite.download"
  "${pip[@]}" download --no-deps --no-binary :all: "limits==$version" -d "$suite.download"
  tar xzf "$suite.download/limits-$version.tar.gz" -C "$suite.download"
  mv "$suite.download/limits-$version" "$suite" && rm -rf "$suite.download"
fi
cd "$suite"
PYTHONPATH="$here" "$venv/bin/python" -m pytest -p no:cacheprovider -p limits_suite -q -rxX \
  -o addopts= -o asyncio_default_fixture_loop_scope=function -W ignore::ResourceWarning \
  tests/test_storage.py tests/test_strategy.py tests/aio/test_storage.py tests/aio/test_strategy.py
