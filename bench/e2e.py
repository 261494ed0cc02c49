#!/usr/bin/env python3
"""End-to-end benchmark of the THROTTLE commands against INCR and the Lua
scripts they replace (bench/lua/*.lua), on redis-servers this script starts
itself on free loopback ports and stops by PID.

    python3 bench/e2e.py MODULE.so OUT.json

Measures, each command under the same load (redis-benchmark -c 50
-r 100000, at -P 1 and -P 16):
  * ops/s, p50/p99 latency (redis-benchmark --csv), server µs per call
    (INFO commandstats after CONFIG RESETSTAT), over several interleaved
    rounds (the median is kept);
  * memory per key over 100,000 keys (used_memory delta / DBSIZE, FLUSHALL
    between), and per logged call for SLIDING EXACT;
  * the cost per call with 10^3 and 10^6 keys in the database;
  * SLIDING EXACT with a log of 100 and of 100,000 entries on one key;
  * the ratios to INCR with a replica attached, and with AOF on.

Python 3 standard library only. Sizes can be changed through the
environment (see SETTINGS) for a quick trial run; BENCH_SERVER names the
server binary (default redis-server on PATH), BENCH_PHASES a comma-separated
subset of the phases (main, memory, loglen, persistence, scaling), and
BENCH_CELL the path of a redis-cell build to compare CL.THROTTLE with (its
module is loaded next to ours, which then runs with cl-throttle no).
"""

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

SETTINGS = {
    # requests per redis-benchmark run at -P 1 and at -P 16
    "BENCH_N1": 50_000,
    "BENCH_N16": 300_000,
    # interleaved rounds of the main comparison (median kept)
    "BENCH_ROUNDS": 3,
    "BENCH_CLIENTS": 50,
    "BENCH_KEYSPACE": 100_000,
    # keys for the memory check, and the two sizes of the scaling check
    "BENCH_MEM_KEYS": 100_000,
    "BENCH_SCALE_SMALL": 1_000,
    "BENCH_SCALE_LARGE": 1_000_000,
    # log lengths of the SLIDING EXACT check
    "BENCH_LOG_SHORT": 100,
    "BENCH_LOG_LONG": 100_000,
    # niceness of the servers and redis-benchmark: ahead of other work on
    # the machine (builds), when allowed to (root); 0 leaves it alone
    "BENCH_NICE": -10 if os.geteuid() == 0 else 0,
}
CFG = {k: int(os.environ.get(k, v)) for k, v in SETTINGS.items()}
SERVER_BINARY = os.environ.get("BENCH_SERVER", "redis-server")
PHASES = [p for p in os.environ.get("BENCH_PHASES", "main,memory,loglen,persistence,scaling").split(",") if p]
CELL_MODULE = os.environ.get("BENCH_CELL", "")


def niced(args):
    return ["nice", "-n", str(CFG["BENCH_NICE"]), *args] if CFG["BENCH_NICE"] else list(args)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
from resp import Client, encode, free_port  # scripts/resp.py
NOW_S = int(time.time())
NOW_US = NOW_S * 1_000_000
RATE_PER_S = "0.277778"  # 1000 per hour, for the Lua buckets

# ---------------------------------------------------------------- servers

SERVERS = []


class Server:
    def __init__(self, module, workdir, name, *extra):
        self.port = free_port()
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir, exist_ok=True)
        modules = ["--loadmodule", module]
        if CELL_MODULE:
            modules = ["--loadmodule", CELL_MODULE, "--loadmodule", module, "cl-throttle", "no"]
        args = [
            SERVER_BINARY, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", self.dir,
            "--logfile", "redis.log", "--daemonize", "no",
            *modules, *extra,
        ]
        # nice execs redis-server: the PID is the server's
        self.proc = subprocess.Popen(niced(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        SERVERS.append(self)
        deadline = time.time() + 10
        while True:
            try:
                self.client = Client(self.port)
                if self.client.call("PING") == "PONG":
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"redis-server {name} did not start; see {self.dir}/redis.log")
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # this PID only: a server we started
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self in SERVERS:
            SERVERS.remove(self)


def stop_all(*_):
    for s in list(SERVERS):
        s.stop()


def pipe(port, commands):
    """Sends every command through `redis-cli --pipe`; fails on any error."""
    proc = subprocess.Popen(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), "--pipe"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    batch = []
    for c in commands:
        batch.append(encode(c))
        if len(batch) == 10_000:
            proc.stdin.write(b"".join(batch))
            batch = []
    proc.stdin.write(b"".join(batch))
    proc.stdin.close()
    out = proc.stdout.read().decode()
    proc.wait()
    if proc.returncode != 0 or "errors: 0," not in out:
        raise RuntimeError(f"redis-cli --pipe failed: {out}")


# ---------------------------------------------------------------- commands


class Cmd:
    """One benchmarked command: `argv(key)` builds its arguments; `stat` is
    its name in INFO commandstats."""

    def __init__(self, name, tag, family, stat, argv):
        self.name, self.tag, self.family, self.stat, self.argv = name, tag, family, stat, argv

    def bench_argv(self):
        return self.argv(self.prefix() + "__rand_int__")

    def prefix(self):
        # two letters for every command, so all keys have the same length
        # (15 bytes) and the memory check compares values, not names
        return self.tag + ":"

    def populate(self, n, tail=()):
        """One call on each of n keys (as redis-benchmark names them)."""
        p = self.prefix()
        for i in range(n):
            yield self.argv("%s%012d" % (p, i), i) + list(tail)


def throttle(name, tag, *params):
    stat = "throttle." + name.split()[0].lower()
    return Cmd("THROTTLE." + name, tag, "THROTTLE", stat,
               lambda key, i=None: ["THROTTLE." + name.split()[0], key, *params])


def lua_commands(shas):
    now_f = "%d.5000" % NOW_S

    def evalsha(script, *args):
        def argv(key, i=None):
            tail = [a if a != "MEMBER" else ("__rand_int__" if i is None else "m%d" % i) for a in args]
            return ["EVALSHA", shas[script], "1", key, *tail]
        return argv

    return [
        Cmd("Lua 000 Laravel DurationLimiter", "la", "Lua", "evalsha",
            evalsha("laravel_duration_limiter", now_f, NOW_S, 3600, 1000)),
        Cmd("Lua 002 sliding ZSET", "zs", "Lua", "evalsha",
            evalsha("sliding_zset", NOW_S, 3600, 6, 1000, "MEMBER")),
        Cmd("Lua 002 leaky hash", "lh", "Lua", "evalsha",
            evalsha("leaky_hash", 1000, RATE_PER_S, 1, NOW_S)),
        Cmd("Lua 002 token hash", "th", "Lua", "evalsha",
            evalsha("token_hash", 1000, RATE_PER_S, 1, NOW_S)),
        Cmd("Lua 003 token bucket", "tb", "Lua", "evalsha",
            evalsha("token_bucket_003", 1000, RATE_PER_S, NOW_S)),
    ]


# The same quota for all, scripts included: 1000 per hour (EXACT: a small
# limit, 100 per hour). A bucket with one unit taken is idle again after
# 3.6 s, so its key expires then (its TTL is its reset_after).
INCR = Cmd("INCR", "in", "baseline", "incr", lambda key, i=None: ["INCR", key])
# Not a target, a reference: the cheapest write that also sets a TTL, as
# every limiter key has one.
SET_PX = Cmd("SET key 1 PX 3600000", "st", "reference", "set",
             lambda key, i=None: ["SET", key, "1", "PX", "3600000"])
# redis-cell, when BENCH_CELL names a build: the same quota (its burst is
# max_burst + 1 = 1000).
CELL = Cmd("redis-cell CL.THROTTLE", "ce", "reference", "cl.throttle",
           lambda key, i=None: ["CL.THROTTLE", key, "999", "1000", "3600"])
THROTTLES = [
    throttle("FIXED", "fx", "1000", "1h"),
    throttle("SLIDING", "sl", "1000", "1h"),
    throttle("SLIDING EXACT", "ex", "100", "1h", "EXACT"),
    throttle("TOKEN", "tk", "1000", "1h"),
    throttle("LEAKY", "lk", "1000", "1h"),
]
# The memory check fills 100,000 keys before reading used_memory: the
# buckets take 100 units (6 minutes to refill or drain) so no key expires
# meanwhile. The state's size does not depend on the cost.
MEMORY_EXTRA = {"THROTTLE.TOKEN": ["COST", "100"], "THROTTLE.LEAKY": ["COST", "100"]}
# For the scaling check every call must be admitted on both sides and no
# key may expire meanwhile: limits no run reaches; EXACT at a fixed AT so
# every log keeps one entry; the buckets deep (BURST 10^6) and slow (1000
# per hour), filled with COST 1000 so each key lives an hour.
SCALE = [
    INCR,
    throttle("FIXED", "fx", "1000000000", "1h"),
    throttle("SLIDING", "sl", "1000000000", "1h"),
    throttle("SLIDING EXACT", "ex", "1000000000", "1h", "EXACT", "AT", str(NOW_US)),
    throttle("TOKEN", "tk", "1000", "1h", "BURST", "1000000"),
    throttle("LEAKY", "lk", "1000", "1h", "BURST", "1000000"),
]
SCALE_FILL_EXTRA = {"THROTTLE.TOKEN": ["COST", "1000"], "THROTTLE.LEAKY": ["COST", "1000"]}

# ---------------------------------------------------------------- measuring


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f}] {msg}", file=sys.stderr, flush=True)


def reset(client, flush=True):
    if flush:
        client.call("FLUSHALL", "SYNC")
    client.call("CONFIG", "RESETSTAT")


def cmdstat(client, stat):
    for k, v in client.info("commandstats").items():
        if k.lower() == "cmdstat_" + stat:
            f = dict(kv.split("=") for kv in v.split(","))
            calls, usec = int(f["calls"]), int(f["usec"])
            return {"calls": calls, "usec_per_call": usec / calls if calls else None}
    return {"calls": 0, "usec_per_call": None}


def redis_benchmark(port, argv, n, pipeline, keyspace):
    args = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-n", str(n),
            "-c", str(CFG["BENCH_CLIENTS"]), "-P", str(pipeline), "--csv"]
    if keyspace:
        args += ["-r", str(keyspace)]
    out = subprocess.run(niced(args + [str(a) for a in argv]), capture_output=True, text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith('"') and not line.startswith('"test"')]
    fields = [f.strip('"') for f in rows[-1].split('","')]
    return {"rps": float(fields[1]), "avg_ms": float(fields[2]), "p50_ms": float(fields[4]),
            "p95_ms": float(fields[5]), "p99_ms": float(fields[6]), "max_ms": float(fields[7])}


def measure(server, cmd, pipeline, n, keyspace=None, flush=True, argv=None):
    """One redis-benchmark run of `cmd`, with the server's µs per call."""
    keyspace = CFG["BENCH_KEYSPACE"] if keyspace is None else keyspace
    reset(server.client, flush)
    load = os.getloadavg()[0]
    row = redis_benchmark(server.port, argv or cmd.bench_argv(), n, pipeline, keyspace)
    stat = cmdstat(server.client, cmd.stat)
    if stat["calls"] < n:
        raise RuntimeError(f"{cmd.name}: {stat['calls']} calls counted for {n} sent")
    row.update(stat)
    row["load1"] = load
    return row


def median_rows(rows):
    keys = [k for k in rows[0] if isinstance(rows[0][k], (int, float)) and rows[0][k] is not None]
    out = {k: statistics.median(r[k] for r in rows) for k in keys}
    out["rounds"] = len(rows)
    out["spread_usec"] = [round(r["usec_per_call"], 3) for r in rows]
    out["spread_rps"] = [round(r["rps"]) for r in rows]
    return out


def used_memory(client):
    return int(client.info("memory")["used_memory"])


def memory_per_key(server, cmd, n):
    c = server.client
    c.call("FLUSHALL", "SYNC")
    before = used_memory(c)
    pipe(server.port, cmd.populate(n, MEMORY_EXTRA.get(cmd.name, ())))
    after = used_memory(c)
    keys = c.call("DBSIZE")
    if keys != n:
        raise RuntimeError(f"memory: {cmd.name}: {keys} keys for {n} calls (did keys expire?)")
    sample = cmd.prefix() + "%012d" % (n // 2)
    return {"keys": keys, "bytes_per_key": (after - before) / keys, "pttl_ms": c.call("PTTL", sample),
            "type": c.call("TYPE", sample)}


def exact_entries(server, n_keys, calls):
    """used_memory of n_keys EXACT logs of `calls` entries each (distinct µs)."""
    c = server.client
    c.call("FLUSHALL", "SYNC")
    before = used_memory(c)

    def commands():
        for j in range(calls):
            for i in range(n_keys):
                yield ["THROTTLE.SLIDING", "ex:%012d" % i, "100", "1h", "EXACT", "AT", NOW_US + j]
    pipe(server.port, commands())
    assert c.call("DBSIZE") == n_keys
    return used_memory(c) - before


def wait_for(check, what, timeout=120):
    deadline = time.time() + timeout
    while not check():
        if time.time() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


# ---------------------------------------------------------------- phases


def main_comparison(server, cmds, results):
    for pipeline, n in ((1, CFG["BENCH_N1"]), (16, CFG["BENCH_N16"])):
        runs = {c.name: [] for c in cmds}
        for r in range(CFG["BENCH_ROUNDS"]):
            for c in cmds:
                row = measure(server, c, pipeline, n)
                runs[c.name].append(row)
                log(f"-P {pipeline} round {r + 1}: {c.name}: {row['rps']:.0f} ops/s, "
                    f"{row['usec_per_call']:.2f} µs/call")
        for c in cmds:
            results["main"].setdefault(c.name, {"family": c.family})[f"P{pipeline}"] = median_rows(runs[c.name])


def memory_phase(server, cmds, results):
    n = CFG["BENCH_MEM_KEYS"]
    for c in cmds:
        m = memory_per_key(server, c, n)
        results["memory"][c.name] = m
        log(f"memory: {c.name}: {m['bytes_per_key']:.1f} B/key over {m['keys']} keys ({m['type']})")
    one = exact_entries(server, n, 1)
    ten = exact_entries(server, n, 10)
    results["exact_memory"] = {
        "keys": n, "bytes_1_entry": one, "bytes_10_entries": ten,
        "bytes_per_extra_entry": (ten - one) / (n * 9),
    }
    log(f"memory: EXACT per extra logged call (100k keys, 1 -> 10 entries): "
        f"{results['exact_memory']['bytes_per_extra_entry']:.2f} B")


def scaling_phase(server, results):
    n = CFG["BENCH_N16"]
    for c in SCALE:
        row = {}
        for keys in (CFG["BENCH_SCALE_SMALL"], CFG["BENCH_SCALE_LARGE"]):
            server.client.call("FLUSHALL", "SYNC")
            before = used_memory(server.client)
            pipe(server.port, c.populate(keys, SCALE_FILL_EXTRA.get(c.name, ())))
            dbsize = server.client.call("DBSIZE")
            mem = (used_memory(server.client) - before) / dbsize
            r = measure(server, c, 16, n, keyspace=keys, flush=False)
            after = server.client.call("DBSIZE")
            if min(dbsize, after) < keys:
                raise RuntimeError(f"scaling: {c.name}: {dbsize} keys before the run, {after} after, {keys} wanted")
            r["dbsize"], r["bytes_per_key"] = dbsize, mem
            row[str(keys)] = r
            log(f"scaling: {c.name} with {dbsize} keys: {r['usec_per_call']:.2f} µs/call, {r['rps']:.0f} ops/s")
        results["scaling"][c.name] = row
    server.client.call("FLUSHALL", "SYNC")


def loglen_phase(server, results):
    n = CFG["BENCH_N16"] // 2
    big = "1000000000000000"
    exact = throttle("SLIDING EXACT", "lg", big, "1h", "EXACT")
    for length in (CFG["BENCH_LOG_SHORT"], CFG["BENCH_LOG_LONG"]):
        c = server.client
        c.call("FLUSHALL", "SYNC")
        before = used_memory(c)
        base = int(time.time() * 1_000_000) - length - 1_000_000
        pipe(server.port, (["THROTTLE.SLIDING", "log:1", big, "1h", "EXACT", "AT", base + i] for i in range(length)))
        mem = used_memory(c) - before
        usage = c.call("MEMORY", "USAGE", "log:1")
        # denied: the limit is the log's length, the log is full
        deny = measure(server, exact, 16, n, keyspace=0, flush=False,
                       argv=["THROTTLE.SLIDING", "log:1", str(length), "1h", "EXACT"])
        # admitted: added to the newest entry (same µs), the log keeps its
        # length (the newest entry's count grows: after this run a limited
        # call would walk the whole log to find its retry_after)
        admit = measure(server, exact, 16, n, keyspace=0, flush=False,
                        argv=["THROTTLE.SLIDING", "log:1", big, "1h", "EXACT", "AT", base + length - 1])
        results["loglen"][str(length)] = {"used_memory_delta": mem, "memory_usage": usage,
                                          "admit": admit, "deny": deny}
        log(f"log length {length}: admit {admit['usec_per_call']:.2f} µs, deny {deny['usec_per_call']:.2f} µs, "
            f"{mem} B")
    s, l = CFG["BENCH_LOG_SHORT"], CFG["BENCH_LOG_LONG"]
    results["loglen"]["bytes_per_entry"] = (
        results["loglen"][str(l)]["used_memory_delta"] - results["loglen"][str(s)]["used_memory_delta"]) / (l - s)
    server.client.call("FLUSHALL", "SYNC")


def persistence_phase(server, module, workdir, cmds, results):
    n = CFG["BENCH_N16"]
    c = server.client
    c.call("FLUSHALL", "SYNC")
    replica = Server(module, workdir, "replica")
    try:
        replica.client.call("REPLICAOF", "127.0.0.1", str(server.port))
        wait_for(lambda: replica.client.info("replication").get("master_link_status") == "up", "replica link")
        wait_for(lambda: "state=online" in c.info("replication").get("slave0", ""), "replica online")
        for cmd in cmds:
            row = measure(server, cmd, 16, n)
            results["replica"][cmd.name] = row
            log(f"replica attached: {cmd.name}: {row['rps']:.0f} ops/s, {row['usec_per_call']:.2f} µs/call")
    finally:
        replica.stop()
    wait_for(lambda: c.info("replication").get("connected_slaves") == "0", "replica gone")
    c.call("FLUSHALL", "SYNC")
    c.call("CONFIG", "SET", "appendonly", "yes")
    wait_for(lambda: c.info("persistence").get("aof_enabled") == "1"
             and c.info("persistence").get("aof_rewrite_in_progress") == "0"
             and c.info("persistence").get("aof_rewrite_scheduled") == "0", "AOF on")
    results["aof_config"] = {"appendfsync": c.call("CONFIG", "GET", "appendfsync")[1]}
    try:
        for cmd in cmds:
            row = measure(server, cmd, 16, n)
            results["aof"][cmd.name] = row
            log(f"AOF on: {cmd.name}: {row['rps']:.0f} ops/s, {row['usec_per_call']:.2f} µs/call")
    finally:
        c.call("CONFIG", "SET", "appendonly", "no")
        c.call("FLUSHALL", "SYNC")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    module, out_path = os.path.abspath(sys.argv[1]), sys.argv[2]
    if not os.path.exists(module):
        sys.exit(f"no module at {module}: build it first (make build)")
    def terminate(*_):
        # once: the cleanup below must not be cut short by a second signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sys.exit(143)

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    workdir = tempfile.mkdtemp(prefix="throttle-bench-")
    results = {"settings": CFG, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
               "load_start": os.getloadavg(), "main": {}, "memory": {}, "scaling": {}, "loglen": {},
               "replica": {}, "aof": {}, "phases": {}}
    t0 = time.time()
    try:
        server = Server(module, workdir, "master")
        c = server.client
        shas = {}
        for f in sorted(os.listdir(os.path.join(HERE, "lua"))):
            if f.endswith(".lua"):
                with open(os.path.join(HERE, "lua", f)) as fh:
                    shas[f[:-4]] = c.call("SCRIPT", "LOAD", fh.read())
        cmds = [INCR, SET_PX, *THROTTLES, *lua_commands(shas)]
        if CELL_MODULE:
            cmds.insert(2, CELL)
        # every command once, to check it answers before timing anything
        for cmd in cmds:
            c.call(*cmd.argv(cmd.prefix() + "check", 0))
        c.call("FLUSHALL", "SYNC")
        info = c.info("server")
        results["redis_version"] = info["redis_version"]
        results["server"] = ("Valkey " + info["valkey_version"]) if "valkey_version" in info else ("Redis " + info["redis_version"])
        results["server_version"] = subprocess.run([SERVER_BINARY, "--version"], capture_output=True, text=True).stdout.strip()

        phases = [
            ("main", lambda: main_comparison(server, cmds, results)),
            ("memory", lambda: memory_phase(server, cmds, results)),
            ("loglen", lambda: loglen_phase(server, results)),
            ("persistence", lambda: persistence_phase(server, module, workdir, cmds, results)),
            ("scaling", lambda: scaling_phase(server, results)),
        ]
        for name, run in phases:
            if name not in PHASES:
                continue
            start = time.time()
            log(f"phase {name}")
            run()
            results["phases"][name] = {"seconds": time.time() - start, "load_end": os.getloadavg()[0]}
    finally:
        stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    results["seconds"] = time.time() - t0
    results["load_end"] = os.getloadavg()
    with open(out_path, "w") as fh:
        json.dump(results, fh, indent=1)
    log(f"end-to-end done in {results['seconds']:.0f} s: {out_path}")


if __name__ == "__main__":
    try:
        main()
    finally:
        stop_all()
