#!/usr/bin/env bash
# make valgrind: runs integration tests with every redis-server under
# valgrind memcheck, then sums up the "definitely lost" blocks and the
# memory errors whose stack passes through the module.
#
# Debian's redis-server allocates with a statically linked jemalloc, which
# valgrind cannot see into: the module's memory (it allocates through
# RedisModule_Alloc) would never show as lost. So the servers run a
# redis-server built from Debian's source package with MALLOC=libc (built
# once into $VALGRIND_REDIS_DIR), unless THROTTLE_REDIS_SERVER names one.
#
# Environment: VALGRIND_TESTS (test files, default "smoke commands
# extensions persistence propagation replication"), VALGRIND_SKIP (test
# names left out; none by default: no test bounds how long the server
# takes, so a server slowed down 20-50 times by memcheck passes them all),
# VALGRIND_LOGS (log dir), CARGO_TARGET_DIR. THROTTLE_REDIS_SERVER may name
# a Valkey server (valkey-server; Valkey builds with libc malloc).
set -euo pipefail
cd "$(dirname "$0")/.."

TESTS=${VALGRIND_TESTS:-smoke commands extensions persistence propagation replication}
SKIP=${VALGRIND_SKIP-}
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
LOGS=${VALGRIND_LOGS:-$TARGET/valgrind}
REDIS_DIR=${VALGRIND_REDIS_DIR:-$TARGET/redis-libc}

if ! command -v valgrind >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind
  else
    echo "valgrind is missing: sudo apt-get install -y valgrind"; exit 1
  fi
fi

# A libc-malloc redis-server of the installed version.
server=${THROTTLE_REDIS_SERVER:-}
if [ -z "$server" ]; then
  server=$REDIS_DIR/src/redis-server
  if [ ! -x "$server" ]; then
    version=$(redis-server --version | sed -n 's/.* v=\([0-9.]*\).*/\1/p')
    work=$TARGET/redis-src
    rm -rf "$work" && mkdir -p "$work"
    if ! (cd "$work" && apt-get source --download-only redis >/dev/null 2>&1); then
      if [ "$(id -u)" = 0 ] && ! grep -rqs '^Types: deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
        echo "adding Debian deb-src entries to fetch redis's source package"
        sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > /etc/apt/sources.list.d/debian-src.sources
        apt-get update -qq
      fi
      (cd "$work" && apt-get source --download-only redis >/dev/null)
    fi
    tarball=$(ls "$work"/redis_*.orig.tar.gz | head -1)
    rm -rf "$REDIS_DIR" && mkdir -p "$REDIS_DIR"
    tar xzf "$tarball" -C "$REDIS_DIR" --strip-components=1
    echo "building redis-server $(basename "$tarball") with MALLOC=libc (installed: $version)"
    make -C "$REDIS_DIR" -j"$(nproc)" MALLOC=libc BUILD_TLS=no redis-server >"$REDIS_DIR/build.log" 2>&1 \
      || { tail -20 "$REDIS_DIR/build.log"; exit 1; }
  fi
fi
"$server" --version

rm -rf "$LOGS" && mkdir -p "$LOGS"
args=()
for t in $TESTS; do args+=(--test "$t"); done
skips=()
for t in $SKIP; do skips+=(--skip "$t"); done
echo "running ${TESTS} under valgrind; logs in $LOGS"
status=0
HOSTILE_COMMANDS=${HOSTILE_COMMANDS:-20000} \
THROTTLE_REDIS_SERVER=$server \
THROTTLE_SERVER_WRAPPER="valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite --num-callers=40 --log-file=$LOGS/vg-%p.log" \
  cargo test --no-fail-fast "${args[@]}" -- --test-threads=2 "${skips[@]}" || status=$?

summary=0
python3 - "$LOGS" <<'EOF' || summary=$?
import glob, re, sys
logs = sorted(glob.glob(sys.argv[1] + "/vg-*.log"))
servers = def_bytes = def_blocks = 0
module_leaks, module_errors, other_errors = [], [], 0
for path in logs:
    text = open(path, errors="replace").read()
    if not re.search(r"(redis|valkey)-server", text):
        continue
    servers += 1
    m = re.search(r"definitely lost: ([\d,]+) bytes in ([\d,]+) blocks", text)
    if m:
        def_bytes += int(m.group(1).replace(",", ""))
        def_blocks += int(m.group(2).replace(",", ""))
    # Each record: a paragraph starting "==pid== <what>" up to a blank line.
    for record in re.split(r"\n==\d+== \n", text):
        lines = [l.split("== ", 1)[-1] for l in record.splitlines()]
        head = next((l for l in lines if l.strip()), "")
        in_module = any("libredis_throttle" in l for l in lines)
        if "definitely lost in loss record" in head:
            if in_module:
                module_leaks.append((path, "\n".join(lines[:20])))
        elif re.match(r"(Invalid|Conditional|Use of uninitialised|Mismatched|Syscall param|Source and destination)", head):
            if in_module:
                module_errors.append((path, "\n".join(lines[:20])))
            else:
                other_errors += 1
print(f"valgrind: {servers} server runs; definitely lost in all: {def_bytes} bytes in {def_blocks} blocks")
print(f"  loss records with a frame in libredis_throttle.so: {len(module_leaks)}")
print(f"  memory errors with a frame in libredis_throttle.so: {len(module_errors)}; elsewhere: {other_errors}")
for path, rec in (module_leaks + module_errors)[:10]:
    print(f"--- {path}\n{rec}")
if servers == 0:
    print("no server ran under valgrind"); sys.exit(2)
sys.exit(1 if module_leaks or module_errors else 0)
EOF
[ "$status" = 0 ] || echo "some tests failed under valgrind (exit $status); see above"
exit $(( summary != 0 ? summary : status ))
