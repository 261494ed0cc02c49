# make run   build the module, start redis-server with it, show it working
# make test  install what is missing, build, run every test on every server
.PHONY: all deps build run demo test unit integration lint fmt clippy clean servers check-links

CARGO   ?= cargo
MODULE  := target/release/libredis_throttle.so
PORT    ?= 6399
APT_PACKAGES := libclang-dev redis-server redis-tools

all: build

# Installs the Debian packages $(1) that are missing (as root), or says how.
define apt_install
	@missing=""; \
	for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else \
	    echo "missing Debian packages:$$missing"; \
	    echo "install them with: sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi
endef

# The Debian packages the build and the tests need.
deps:
	$(call apt_install,$(APT_PACKAGES))

build: deps
	$(CARGO) build --release

# Starts redis-server with redis.conf.example on 127.0.0.1:$(PORT), runs a
# short demo through redis-cli, and stays up until Ctrl-C.
run: build
	@scripts/run.sh $(PORT)

# The servers the tests run on besides Debian's Redis 7.0: Redis 8.2.3,
# Valkey 8.1.8 and Valkey 9.1.2, fetched once (pinned, hash-checked) into
# the build directory. THROTTLE_SERVERS lists all four for the package
# suites (space-separated binaries; redis-server is Debian's 7.0).
SERVERS_DIR = $(abspath $(or $(CARGO_TARGET_DIR),target))/servers
REDIS_8     = $(SERVERS_DIR)/redis-8.2.3/redis-server
VALKEY_8    = $(SERVERS_DIR)/valkey-8.1.8/valkey-server
VALKEY_9    = $(SERVERS_DIR)/valkey-9.1.2/valkey-server
export THROTTLE_SERVERS := redis-server $(REDIS_8) $(VALKEY_8) $(VALKEY_9)

servers:
	@scripts/servers.sh $(SERVERS_DIR) >/dev/null

# The module under test is the release build (what users load); the test
# binaries themselves build in the faster debug profile. The unit tests run
# once; every integration test runs on each server.
test: build servers lint
	@$(MAKE) --no-print-directory check-links
	$(CARGO) test --all-targets
	THROTTLE_REDIS_SERVER=$(REDIS_8) $(CARGO) test --test '*'
	THROTTLE_REDIS_SERVER=$(VALKEY_8) $(CARGO) test --test '*'
	THROTTLE_REDIS_SERVER=$(VALKEY_9) $(CARGO) test --test '*'
	@$(MAKE) --no-print-directory valgrind-short
	@$(MAKE) --no-print-directory test-laravel
	@$(MAKE) --no-print-directory test-python
	@$(MAKE) --no-print-directory test-node
	@$(MAKE) --no-print-directory test-rust-client

# Benchmarks: criterion micro-benchmarks, then redis-benchmark against INCR
# and the Lua scripts it replaces; writes bench/results.md and bench/chart.svg.
.PHONY: bench
bench: build
	CARGO="$(CARGO)" bench/run.sh

# make lint: the formatting (rustfmt.toml) and clippy's lints, as errors,
# on the workspace (the module and clients/rust) and on the fuzz and bench
# crates' formatting; make test runs it first. make fmt formats the tree.
lint:
	$(CARGO) fmt --all --check
	cd fuzz && $(CARGO) fmt --check
	cd bench/rust-layer && $(CARGO) fmt --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all
	cd fuzz && $(CARGO) fmt
	cd bench/rust-layer && $(CARGO) fmt

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# make check-links: every relative link and #anchor in the tracked Markdown
# files resolves (scripts/check_links.py, after its self-test on links
# planted broken); make test runs it after lint.
check-links:
	@python3 scripts/check_links.py --self-test
	@python3 scripts/check_links.py

clean:
	$(CARGO) clean

# make examples  run every client example (examples/) against its own server
# make plot      redraw docs/algorithms.svg from real replies of the module
# make install   install the module to $(PREFIX)/lib/redis/modules/
.PHONY: examples plot install
PREFIX     ?= /usr/local
MODULE_DIR  = $(DESTDIR)$(PREFIX)/lib/redis/modules
BUILT_SO    = $(or $(CARGO_TARGET_DIR),target)/release/libredis_throttle.so

# Starts redis-server with the module on a free loopback port, runs each
# example against it (installing PHP, redis-py, node-redis when missing),
# then stops that server. EXAMPLES="python node" runs some only.
examples: build
	@scripts/examples.sh

plot: build
	python3 scripts/plot_algorithms.py

install: build
	install -d $(MODULE_DIR)
	install -m 0755 $(BUILT_SO) $(MODULE_DIR)/libredis_throttle.so
	@echo "installed $(MODULE_DIR)/libredis_throttle.so; load it with this line in redis.conf:"
	@echo "    loadmodule $(PREFIX)/lib/redis/modules/libredis_throttle.so"

# make fuzz        cargo fuzz on each target for FUZZ_SECONDS (60) seconds
# make fuzz-short  the same for 10 s each, to run from make test
# make valgrind    integration tests with redis-server under valgrind memcheck
# make valgrind-short  the same for a few test files, run by make test
.PHONY: fuzz fuzz-short valgrind valgrind-short
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := parse_call decode_state algorithms
# libFuzzer's instrumentation needs -Z flags; RUSTC_BOOTSTRAP=1 lets the
# stable compiler take them (no nightly toolchain needed). Fuzz builds keep
# their own target dir, fuzz/target. Crashes land in fuzz/artifacts/<target>/;
# copy them to fuzz/regressions/<target>/ to replay them in cargo test.
FUZZ := RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=$(CURDIR)/fuzz/target $(CARGO) fuzz

fuzz:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz
	$(FUZZ) build
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p fuzz/corpus/$$t; \
	  dict=""; [ -f fuzz/dict/$$t.dict ] && dict="-dict=fuzz/dict/$$t.dict"; \
	  echo "== fuzz $$t for $(FUZZ_SECONDS) s"; \
	  $(FUZZ) run $$t fuzz/corpus/$$t fuzz/regressions/$$t -- \
	    -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 $$dict \
	    2>fuzz/corpus/$$t.log || { tail -60 fuzz/corpus/$$t.log; exit 1; }; \
	  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' fuzz/corpus/$$t.log | sed "s/^/$$t /"; \
	done

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=10

valgrind: build
	@scripts/valgrind.sh

valgrind-short: build
	@VALGRIND_TESTS="smoke commands persistence" scripts/valgrind.sh

# make test-laravel  the Laravel package (clients/laravel/): composer validate, then its
# PHPUnit suite against the freshly built module, on Debian's Laravel 8.83,
# once on each server of THROTTLE_SERVERS (THROTTLE_REDIS_SERVER names it to
# the suite). Installs the Debian packages it needs when missing (as root).
.PHONY: test-laravel
PHP_APT_PACKAGES := php-cli php-redis php-laravel-framework phpunit php-nrk-predis composer

test-laravel: build servers
	$(call apt_install,$(PHP_APT_PACKAGES))
	cd clients/laravel && HOME="$${HOME:-/tmp}" COMPOSER_ALLOW_SUPERUSER=1 composer validate --strict --no-check-publish --no-check-lock
	@cd clients/laravel && for server in $(THROTTLE_SERVERS); do \
	  echo "== phpunit on $$server"; \
	  THROTTLE_REDIS_SERVER=$$server THROTTLE_MODULE=$(abspath $(BUILT_SO)) phpunit || exit 1; \
	done

# make test-python  the Python package (clients/python/): its pytest suite and limits'
# own storage tests, in a virtualenv under the build directory with the
# libraries from PyPI (clients/python/tests/requirements.txt), against the freshly
# built module on a three-node cluster and single servers (TCP, TLS, unix
# socket), on each server in THROTTLE_SERVERS. The TLS tests make their
# certificates with the openssl tool.
.PHONY: test-python
test-python: build servers
	$(call apt_install,openssl)
	THROTTLE_MODULE=$(abspath $(BUILT_SO)) clients/python/tests/run.sh

# make test-node  the npm package (clients/node/): npm ci (package-lock.json pins the
# frameworks and clients), its build, then its node --test suite against the
# freshly built module, on every server in THROTTLE_SERVERS at once (the
# type checks and the tarball from a fresh clone once; clients/node/README.md
# says which run where). Needs Node 20 or later with npm, as the project's
# machines have (Debian 12's own nodejs is 18: too old for NestJS 12 and
# node-redis 6).
.PHONY: test-node
test-node: build servers
	@command -v node >/dev/null && command -v npm >/dev/null \
	  && node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' \
	  || { echo "make test-node needs Node 20 or later and npm (found: $$(node --version 2>/dev/null || echo no node))"; exit 1; }
	cd clients/node && npm ci --no-audit --no-fund --loglevel=error
	cd clients/node && npm run build
	cd clients/node && THROTTLE_MODULE=$(abspath $(BUILT_SO)) npm test

# make test-node-rlf RLF_REPO=dir  rate-limiter-flexible's own RateLimiterRedis
# tests (mocha, from its repository: the npm package ships none) against the
# package's RateLimiterThrottle, on Redis 7.0. RLF_REPO is a checkout of the
# repository at the tag of the installed release; the cases that cannot pass
# are listed in clients/node/README.md and test/rlf-suite.test.js.
.PHONY: test-node-rlf
test-node-rlf: build
	@test -n "$(RLF_REPO)" || { echo "make test-node-rlf needs RLF_REPO=<a checkout of rate-limiter-flexible at the installed release's tag>"; exit 1; }
	cd clients/node && npm ci --no-audit --no-fund --loglevel=error && npm run build
	cd clients/node && THROTTLE_MODULE=$(abspath $(BUILT_SO)) THROTTLE_RLF_REPO=$(abspath $(RLF_REPO)) node --test test/rlf-suite.test.js

# make test-node-semaphore SEMAPHORE_REPO=dir  redis-semaphore's own tests
# (mocha, from its repository: the npm package ships none) against the
# package's Semaphore, on Redis 7.0. SEMAPHORE_REPO is a checkout of the
# repository at the tag of the npm release; the tests that cannot pass are
# listed in clients/node/README.md and test/redis-semaphore-suite.test.js.
.PHONY: test-node-semaphore
test-node-semaphore: build
	@test -n "$(SEMAPHORE_REPO)" || { echo "make test-node-semaphore needs SEMAPHORE_REPO=<a checkout of redis-semaphore at the npm release's tag>"; exit 1; }
	cd clients/node && npm ci --no-audit --no-fund --loglevel=error && npm run build
	cd clients/node && THROTTLE_MODULE=$(abspath $(BUILT_SO)) THROTTLE_SEMAPHORE_REPO=$(abspath $(SEMAPHORE_REPO)) node --test test/redis-semaphore-suite.test.js

# make test-rust-client  the Rust crate (clients/rust/, a workspace member):
# its unit tests, doc examples and the examples' builds, then its
# integration tests (the client, its leases, the tower layer in an axum app
# over real HTTP, a three-node cluster), each on every server of THROTTLE_SERVERS,
# against the freshly built module. The module's own `cargo test` runs
# above, on the top-level package only.
.PHONY: test-rust-client
test-rust-client: build servers
	THROTTLE_MODULE=$(abspath $(BUILT_SO)) $(CARGO) test -p redis-throttle-client
