# make run   build the module, start redis-server with it, show it working
# make test  install what is missing, build, run every test
.PHONY: all deps build run demo test unit integration clippy clean

CARGO   ?= cargo
MODULE  := target/release/libredis_throttle.so
PORT    ?= 6399
APT_PACKAGES := libclang-dev redis-server redis-tools

all: build

# Installs the Debian packages the build and the tests need, when missing.
deps:
	@missing=""; \
	dpkg -s libclang-dev >/dev/null 2>&1 || missing="$$missing libclang-dev"; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null 2>&1 || missing="$$missing redis-tools"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else \
	    echo "missing Debian packages:$$missing"; \
	    echo "install them with: sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

build: deps
	$(CARGO) build --release

# Starts redis-server with redis.conf.example on 127.0.0.1:$(PORT), runs a
# short demo through redis-cli, and stays up until Ctrl-C.
run: build
	@scripts/run.sh $(PORT)

test: build
	$(CARGO) test --release --all-targets

# Benchmarks: criterion micro-benchmarks, then redis-benchmark against INCR
# and the Lua scripts it replaces; writes bench/results.md and bench/chart.svg.
.PHONY: bench
bench: build
	CARGO="$(CARGO)" bench/run.sh

clippy:
	$(CARGO) clippy --all-targets -- -D warnings

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
