#!/usr/bin/env bash
# Django REST framework's own throttling tests (tests/test_throttling.py from
# the installed release's sdist) against redis_throttle.django's classes, once
# on each server binary given, through tests/drf_suite.py (a pytest plugin:
# DRF's classes swapped for the package's, Django's cache a django-redis cache
# on a server with the module). Called by run.sh:
#
#     drf_suite.sh PYTHON TARGET_DIR SERVER_BINARY...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="$1" target="$2"
shift 2
pip=("$python" -m pip --disable-pip-version-check -q)

version="$("$python" -c 'import importlib.metadata as m; print(m.version("djangorestframework"))')"
suite="$target/python-drf-$version"
if [ ! -d "$suite/tests" ]; then
  rm -rf "$suite.download" && mkdir -p "$suite.download"
  "${pip[@]}" download --no-deps --no-binary :all: "djangorestframework==$version" -d "$suite.download"
  tar xzf "$suite.download/djangorestframework-$version.tar.gz" -C "$suite.download"
  mv "$suite.download/djangorestframework-$version" "$suite" && rm -rf "$suite.download"
fi

status=0
for binary in "$@"; do
  dir="$(basename "$(dirname "$binary")")"
  [ "$dir" = . ] && dir="$binary"
  echo "== Django REST framework $version's own tests/test_throttling.py on $dir"
  (cd "$suite" && THROTTLE_REDIS_SERVER="$binary" PYTHONPATH="$here" "$python" -m pytest -p no:cacheprovider \
     -p drf_suite -q -rxX -o asyncio_default_fixture_loop_scope=function tests/test_throttling.py) || status=1
done
exit $status
