#!/usr/bin/env python3
"""Turns one `make bench` run into bench/results.md and bench/chart.svg, and
prints one side-by-side table per server.

    python3 bench/report.py CRITERION_DIR SINCE_EPOCH OUT_DIR E2E.json [E2E.json ...]

Each E2E.json comes from bench/e2e.py, one per server (the first one also
draws the chart and the scaling and log-length sections); CRITERION_DIR is
the target directory's `criterion/` (results older than SINCE_EPOCH are
ignored). Python 3 standard library only.
"""

import json
import os
import platform
import subprocess
import sys
import time

# The targets, each against a reference measured in the same run.
USEC_VS_SET_MAX = 1.0  # server µs per call at -P 16 <= SET key v PX's
USEC_VS_SET_REPLICA_MAX = 1.2  # the same with a replica attached
BYTES_PER_LOGGED_CALL_MAX = 8
# bytes/key are averages over 100,000 keys; two types that take the same
# bytes differ by a few tenths with the hash tables' growth.
SAME_BYTES = 0.5
SET_PX = "SET key 1 PX 3600000"
LARAVEL = "Lua 000 Laravel DurationLimiter"
CELL = "redis-cell CL.THROTTLE"
# The chart's reference lines (×INCR).
USEC_RATIO_MAX = 2.0
OPS_RATIO_MIN = 0.7
# "Flat": 10^6 keys cost at most 25% more per call than 10^3 keys, or no
# more than 10% above INCR's own growth (a bigger hash table costs every
# command the same cache misses).
FLAT_MAX = 1.25
FLAT_VS_INCR_MAX = 1.10
# Same criterion for the log: 100,000 entries vs 100.
LOG_FLAT_MAX = 1.25

THROTTLE = ["THROTTLE.FIXED", "THROTTLE.SLIDING", "THROTTLE.SLIDING EXACT", "THROTTLE.TOKEN", "THROTTLE.LEAKY"]


def sh(*args):
    try:
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    commit = sh("git", "-C", here, "rev-parse", "--short", "HEAD")
    dirty = sh("git", "-C", here, "status", "--porcelain", "--untracked-files=no", "--", "../src", "../Cargo.toml")
    return {
        "nproc": sh("nproc"),
        "cpu": cpu,
        "redis": "",
        "kernel": platform.release(),
        "rustc": sh("rustc", "--version"),
        "commit": commit + (" (src/ with uncommitted changes)" if dirty not in ("", "?") else ""),
    }


def criterion_results(root, since):
    found = {}
    for dirpath, _, files in os.walk(root):
        if "benchmark.json" not in files or "estimates.json" not in files:
            continue
        est_path = os.path.join(dirpath, "estimates.json")
        if os.path.getmtime(est_path) < since:
            continue
        with open(os.path.join(dirpath, "benchmark.json")) as f:
            meta = json.load(f)
        with open(est_path) as f:
            est = json.load(f)
        # the newest of new/ and the named baseline
        prev = found.get(meta["full_id"])
        if prev and prev["mtime"] >= os.path.getmtime(est_path):
            continue
        found[meta["full_id"]] = {
            "median_ns": est["median"]["point_estimate"],
            "lo_ns": est["median"]["confidence_interval"]["lower_bound"],
            "hi_ns": est["median"]["confidence_interval"]["upper_bound"],
            "mean_ns": est["mean"]["point_estimate"],
            "mtime": os.path.getmtime(est_path),
        }
    return dict(sorted(found.items()))


def ratio(a, b):
    return a / b if a is not None and b else None


def f(x, digits=2):
    if x is None:
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def ok(flag):
    return "met" if flag else "**missed**"


def table(header, rows, align=None):
    align = align or ["l"] + ["r"] * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def analyse(e2e):
    main = e2e["main"]
    base = main["INCR"]
    ref = main.get(SET_PX)
    out = {}
    for name, row in main.items():
        r = {"family": row["family"]}
        for p in ("P1", "P16"):
            m = row[p]
            r[p] = {
                "rps": m["rps"], "rps_ratio": ratio(m["rps"], base[p]["rps"]),
                "usec": m["usec_per_call"], "usec_ratio": ratio(m["usec_per_call"], base[p]["usec_per_call"]),
                "usec_vs_set": ratio(m["usec_per_call"], ref[p]["usec_per_call"]) if ref else None,
                "p50": m["p50_ms"], "p99": m["p99_ms"],
                "spread_usec": m.get("spread_usec"), "spread_rps": m.get("spread_rps"),
            }
        mem = e2e["memory"].get(name)
        r["bytes_per_key"] = mem["bytes_per_key"] if mem else None
        r["mem_keys"] = mem["keys"] if mem else None
        r["pttl"] = mem["pttl_ms"] if mem else None
        for mode in ("replica", "aof"):
            m, b, sp = e2e[mode].get(name), e2e[mode].get("INCR"), e2e[mode].get(SET_PX)
            if m and b:
                r[mode] = {"rps": m["rps"], "rps_ratio": ratio(m["rps"], b["rps"]), "usec": m["usec_per_call"],
                           "usec_ratio": ratio(m["usec_per_call"], b["usec_per_call"]),
                           "usec_vs_set": ratio(m["usec_per_call"], sp["usec_per_call"]) if sp else None}
        out[name] = r
    return out


def scaling_rows(e2e):
    rows = {}
    for name, by_keys in e2e["scaling"].items():
        small, large = sorted(by_keys, key=int)
        s, l = by_keys[small], by_keys[large]
        rows[name] = {"small": small, "large": large, "usec_small": s["usec_per_call"],
                      "usec_large": l["usec_per_call"], "growth": ratio(l["usec_per_call"], s["usec_per_call"]),
                      "rps_small": s["rps"], "rps_large": l["rps"], "bytes_large": l["bytes_per_key"],
                      "dbsize_small": s["dbsize"], "dbsize_large": l["dbsize"]}
    return rows


def targets(a, e2e):
    """Per THROTTLE command: (target, value, met) rows, against references
    measured on the same server in the same run."""
    laravel = a.get(LARAVEL, {}).get("bytes_per_key")
    cell = a.get(CELL, {}).get("bytes_per_key")
    out = {}
    for name in THROTTLE:
        r = a.get(name)
        if not r:
            continue
        checks = []
        v = r["bytes_per_key"]
        if laravel is not None:
            checks.append((f"bytes/key ≤ the Laravel Lua hash's ({f(laravel, 1)})", f"{f(v, 1)} B",
                           v is not None and v <= laravel + SAME_BYTES))
        if name == "THROTTLE.FIXED" and cell is not None:
            checks.append((f"bytes/key ≤ redis-cell's ({f(cell, 1)})", f"{f(v, 1)} B",
                           v is not None and v <= cell + SAME_BYTES))
        v = r["P16"]["usec_vs_set"]
        checks.append(("µs/call -P 16 ≤ SET … PX's", f"{f(v)}×", v is not None and v <= USEC_VS_SET_MAX))
        v = r.get("replica", {}).get("usec_vs_set")
        if "replica" in r:
            checks.append(("µs/call -P 16 with a replica ≤ 1.2× SET … PX's", f"{f(v)}×",
                           v is not None and v <= USEC_VS_SET_REPLICA_MAX))
        if name == "THROTTLE.SLIDING EXACT":
            v = e2e.get("exact_memory", {}).get("bytes_per_extra_entry")
            checks.append(("≤ 8 B per logged call (100k keys, 1→10 calls)", f"{f(v)} B",
                           v is not None and v <= BYTES_PER_LOGGED_CALL_MAX))
            v = e2e.get("loglen", {}).get("bytes_per_entry")
            if v is not None:
                checks.append(("≤ 8 B per logged call (one key, 100→100,000 calls)", f"{f(v)} B",
                               v <= BYTES_PER_LOGGED_CALL_MAX))
        out[name] = checks
    return out


# ---------------------------------------------------------------- chart

def svg_chart(a, path, meta, date):
    names = [n for n in a if n != "INCR"]
    bar_h, gap, label_w, panel_w, pad = 9, 8, 230, 300, 20
    row_h = 2 * bar_h + gap
    top = 70
    height = top + row_h * len(names) + 60
    width = label_w + 2 * panel_w + 3 * pad + 70
    palette = {"THROTTLE": {"P1": "#8fb8de", "P16": "#1f5f99"},
               "Lua": {"P1": "#f2b38a", "P16": "#c0561b"},
               "reference": {"P1": "#c8c8c8", "P16": "#7a7a7a"}}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="Helvetica, Arial, sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{pad}" y="20" font-size="14" font-weight="bold">THROTTLE commands vs INCR and the Lua '
           f'scripts they replace (redis-benchmark -c 50 -r 100000)</text>',
           f'<text x="{pad}" y="36" fill="#555">{esc(date)} · {esc(meta["nproc"])} CPU {esc(meta["cpu"])} · '
           f'{esc(meta["redis"].split(" sha=")[0])} · light bar -P 1, dark bar -P 16 · '
           f'1.0 = INCR in the same run</text>']

    def panel(x0, title, key, scale_max, log, target, better):
        out.append(f'<text x="{x0}" y="{top - 14}" font-weight="bold">{esc(title)}</text>')
        out.append(f'<text x="{x0}" y="{top - 3}" fill="#555">{esc(better)}</text>')

        def pos(v):
            import math
            v = max(v, 1e-9)
            if log:
                lo, hi = math.log10(0.5), math.log10(scale_max)
                return x0 + panel_w * (min(max(math.log10(v), lo), hi) - lo) / (hi - lo)
            return x0 + panel_w * min(v, scale_max) / scale_max

        ticks = [0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000] if log else \
            [0, 0.25, 0.5, 0.7, 1.0, 1.5, 2, 3, 4, 5, 10]
        y_end = top + row_h * len(names)
        last_x = -100
        for t in ticks:
            if t > scale_max or pos(t) - last_x < 36:
                continue
            x = last_x = pos(t)
            out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{y_end}" stroke="#e4e4e4"/>')
            out.append(f'<text x="{x:.1f}" y="{y_end + 14}" text-anchor="middle" fill="#555">{t:g}×</text>')
        for i, n in enumerate(names):
            y = top + i * row_h + gap / 2
            for j, p in enumerate(("P1", "P16")):
                v = a[n][p][key]
                if v is None:
                    continue
                c = palette.get(a[n]["family"], palette["reference"])[p]
                x_start = pos(0.5) if log else x0
                w = max(pos(v) - x_start, 1)
                yy = y + j * bar_h
                out.append(f'<rect x="{x_start:.1f}" y="{yy:.1f}" width="{w:.1f}" height="{bar_h - 1}" fill="{c}">'
                           f'<title>{esc(n)} -P {p[1:]}: {v:.2f}×</title></rect>')
                out.append(f'<text x="{x_start + w + 3:.1f}" y="{yy + bar_h - 2:.1f}" font-size="9" '
                           f'fill="#333">{v:.2f}</text>')
        x = pos(target)
        out.append(f'<line x1="{x:.1f}" y1="{top - 2}" x2="{x:.1f}" y2="{y_end}" stroke="#d62728" '
                   f'stroke-width="1.5" stroke-dasharray="4,3"/>')
        out.append(f'<text x="{x + 3:.1f}" y="{y_end + 28}" fill="#d62728">target {target:g}×</text>')

    for i, n in enumerate(names):
        y = top + i * row_h + gap / 2 + bar_h + 3
        weight = ' font-weight="bold"' if a[n]["family"] == "THROTTLE" else ""
        out.append(f'<text x="{pad}" y="{y:.1f}"{weight}>{esc(n)}</text>')
    max_usec = max(a[n][p]["usec_ratio"] or 0 for n in names for p in ("P1", "P16"))
    scale_max = next(t for t in (2, 5, 10, 20, 50, 100, 1000) if t >= max_usec * 1.15)
    panel(label_w + pad, "server µs per call ÷ INCR's (log scale)", "usec_ratio", scale_max, True,
          USEC_RATIO_MAX, "lower is better")
    max_rps = max(a[n][p]["rps_ratio"] or 0 for n in names for p in ("P1", "P16"))
    panel(label_w + panel_w + 2 * pad + 30, "ops/s ÷ INCR's", "rps_ratio", max(1.25, max_rps * 1.1), False,
          OPS_RATIO_MIN, "higher is better")
    out.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(out) + "\n")


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# ---------------------------------------------------------------- report

def server_section(e2e, a, tg):
    """The side-by-side table, the targets, and the replica/AOF table of one
    server, as Markdown; and how many targets it missed."""
    side_rows = []
    for n, r in a.items():
        p1, p16 = r["P1"], r["P16"]
        vs_set = "" if r["P16"]["usec_vs_set"] is None or n == SET_PX else f", {f(p16['usec_vs_set'])}× SET"
        side_rows.append([
            f"**{n}**" if r["family"] == "THROTTLE" else f"*{n}* (reference)" if r["family"] in ("reference", "baseline") else n,
            f"{f(p1['usec'])} ({f(p1['usec_ratio'])}×)", f"{f(p16['usec'])} ({f(p16['usec_ratio'])}×{vs_set})",
            f"{f(p16['rps'])} ({f(p16['rps_ratio'])}×)", f"{f(p16['p50'], 3)} / {f(p16['p99'], 3)}",
            f(r["bytes_per_key"], 1),
        ])
    side = table(["command", "µs/call -P 1 (×INCR)", "µs/call -P 16 (×INCR, ×SET … PX)", "ops/s -P 16 (×INCR)",
                  "p50 / p99 ms -P 16", "bytes/key"], side_rows)
    target_rows, missed = [], 0
    for n, checks in tg.items():
        for t, v, met in checks:
            target_rows.append([n, t, v, ok(met)])
            missed += not met
    targets_md = table(["command", "target", "measured", ""], target_rows, ["l", "l", "r", "l"])
    persist_rows = []
    for n, r in a.items():
        cells = [n]
        for mode in ("replica", "aof"):
            m = r.get(mode)
            vs_set = "" if not m or m.get("usec_vs_set") is None else f", {f(m['usec_vs_set'])}× SET"
            cells += [f"{f(m['usec'])} ({f(m['usec_ratio'])}×{vs_set})", f"{f(m['rps'])} ({f(m['rps_ratio'])}×)"] if m \
                else ["n/a", "n/a"]
        persist_rows.append(cells)
    persist = table(["command", "replica: µs/call (×INCR, ×SET … PX)", "replica: ops/s (×INCR)",
                     "AOF: µs/call (×INCR, ×SET … PX)", "AOF: ops/s (×INCR)"], persist_rows)
    spread_rows = [[n, " / ".join(f(x) for x in (r["P1"]["spread_usec"] or [])),
                    " / ".join(f(x) for x in (r["P16"]["spread_usec"] or []))] for n, r in a.items()]
    spread = table(["command", "µs/call per round, -P 1", "µs/call per round, -P 16"], spread_rows)
    load_s = " / ".join(f"{x:.2f}" for x in e2e["load_start"])
    load_e = " / ".join(f"{x:.2f}" for x in e2e["load_end"])
    phases = ", ".join(f"{k} {v['seconds']:.0f} s" for k, v in e2e["phases"].items())
    md = f"""## {e2e['server']}

`{e2e['server_version']}`; run started {e2e['started']}, load average {load_s} at the start and
{load_e} at the end; {e2e['seconds']:.0f} s ({phases}).

{side}

### Targets on {e2e['server']}

{targets_md}

### With a replica attached, and with AOF on

`-P 16 -n {e2e['settings']['BENCH_N16']:,}`, one run each. Replica: a second server of the same
kind with the module, `REPLICAOF` the first. AOF: `CONFIG SET appendonly yes`
(appendfsync {e2e.get('aof_config', {}).get('appendfsync', '?')}), after the initial rewrite.

{persist}

### Round-to-round spread

{spread}
"""
    return md, side, missed


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    crit_root, since, out_dir, e2e_paths = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4:]
    runs = []
    for path in e2e_paths:
        with open(path) as fh:
            runs.append(json.load(fh))
    meta = machine()
    crit = criterion_results(crit_root, since) if os.path.isdir(crit_root) else {}
    first = runs[0]
    s = first["settings"]

    sections, summaries, missed_total = [], [], 0
    for e2e in runs:
        a = analyse(e2e)
        md, side, missed = server_section(e2e, a, targets(a, e2e))
        sections.append(md)
        summaries.append((e2e["server"], side, missed))
        missed_total += missed

    crit_rows = [[k, f(v["median_ns"], 1), f"{f(v['lo_ns'], 1)} – {f(v['hi_ns'], 1)}"] for k, v in crit.items()]
    crit_table = table(["benchmark", "ns per decision (median)", "95% CI"], crit_rows) if crit_rows else \
        "(no criterion results found)"

    extra = ""
    if first.get("scaling"):
        scale = scaling_rows(first)
        scale_rows = [[n, f"{r['dbsize_small']:,}", f(r["usec_small"]), f"{r['dbsize_large']:,}", f(r["usec_large"]),
                       f"{f(r['growth'])}×", f(r["rps_small"]), f(r["rps_large"]), f(r["bytes_large"], 1)]
                      for n, r in scale.items()]
        extra += f"""
## Cost per call with 10^3 and 10^6 keys ({first['server']})

The database holds only that many keys of the command's type (filled one
call per key first), then redis-benchmark `-P 16 -n {s['BENCH_N16']:,} -r <keys>`. Limits no
run reaches, so every call is admitted on both sides; EXACT at a fixed `AT`,
so every log keeps one entry.

{table(["command", "keys", "µs/call", "keys", "µs/call", "growth", "ops/s", "ops/s", "bytes/key at 10^6"], scale_rows)}
"""
    ll = first.get("loglen", {})
    lengths = sorted((k for k in ll if k.isdigit()), key=int)
    if lengths:
        log_rows = [[f"{int(k):,}", f(ll[k]["deny"]["usec_per_call"]), f(ll[k]["admit"]["usec_per_call"]),
                     f(ll[k]["deny"]["rps"]), f(ll[k]["admit"]["rps"]), f"{ll[k]['used_memory_delta']:,}",
                     f"{ll[k]['memory_usage']:,}"] for k in lengths]
        extra += f"""
## SLIDING EXACT: log length ({first['server']})

One key whose log holds N entries (distinct µs), `-P 16 -n {s['BENCH_N16'] // 2:,}`. Denied:
the limit is N, so the log is full. Admitted: at the newest entry's µs
(`AT`), so the call adds to that entry and the log keeps its length.

{table(["log entries", "µs/call denied", "µs/call admitted", "ops/s denied", "ops/s admitted",
        "used_memory delta (B)", "MEMORY USAGE (B)"], log_rows)}

Memory per logged call: {f(ll.get('bytes_per_entry'))} B between {lengths[0]} and {int(lengths[-1]):,} entries on one key.
"""

    servers = ", ".join(e["server"] for e in runs)
    md = f"""# Benchmark results

Generated by `make bench` (bench/run.sh) on {servers}; chart (of {first['server']}):
[chart.svg](chart.svg).

| | |
|---|---|
| date | {first['started']} |
| machine | `nproc` = {meta['nproc']}, {meta['cpu']}, Linux {meta['kernel']} |
| module | commit {meta['commit']}, {meta['rustc']}, release build |
| priority | servers and redis-benchmark at nice {s.get('BENCH_NICE', 0)} (other work on the machine at 0) |

The machine's 2 cores run the server, redis-benchmark (and, in the replica
run, the replica) and whatever else is running: each server's section gives
the load average. Every ratio is taken against a row measured on the same
server in the same run, under the same load.

redis-benchmark `-c {s['BENCH_CLIENTS']} -r {s['BENCH_KEYSPACE']}`, `-n {s['BENCH_N1']:,}` at `-P 1` and
`-n {s['BENCH_N16']:,}` at `-P 16`, FLUSHALL and CONFIG RESETSTAT before each run, median of
{s['BENCH_ROUNDS']} interleaved rounds. µs/call is the server's own time per call (INFO
commandstats `usec` / `calls`; EVALSHA for the scripts); ops/s and latency
are redis-benchmark's. bytes/key: `used_memory` delta / `DBSIZE` after one
call on each of {s['BENCH_MEM_KEYS']:,} keys (15-byte names for all), TTL included.

Quota for all, scripts included: 1000 per hour (EXACT: 100 per hour). The
scripts are in bench/lua/: Laravel's DurationLimiter (seed 000), the
sorted-set sliding window, leaky and token hashes (seed 002), the token
bucket of seed 003; `now` is passed as an argument, as their callers do.
*SET key 1 PX 3600000* is the reference the targets use: the cheapest write
that also gives its key a TTL, as every limiter key has one (INCR's keys
have none). *redis-cell CL.THROTTLE* appears when `BENCH_CELL` names a
redis-cell build (see bench/e2e.py); its key is a string with a TTL.

{missed_total} target(s) missed in all (bytes/key within {SAME_BYTES} B of a reference count as equal:
they are averages, and the hash tables' growth moves them by tenths).

{chr(10).join(sections)}
## Micro-benchmarks (criterion, pure algorithms, clock passed in)

`cargo bench --bench algorithms`: one decision on an in-memory state, no
Redis. `admit` calls are admitted and change the state, `deny` calls are
refused; `exact/admit` is the steady state of a log of 100 (one entry
expires, one is logged).

{crit_table}
{extra}
## Reproduce

    export CARGO_TARGET_DIR=/tmp/target-bench   # optional; default target/
    make bench

Needs redis-server and redis-benchmark 7.0+ and Python 3 (standard
library only); fetches Redis 8.2 and Valkey 8.1 like `make test`; starts its
own servers on free loopback ports and stops them. Sizes can be overridden
for a quick trial, e.g. `BENCH_ROUNDS=1 BENCH_N16=200000 make bench` (see
bench/e2e.py).
"""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.md"), "w") as fh:
        fh.write(md)
    meta["redis"] = first["server_version"]
    svg_chart(analyse(first), os.path.join(out_dir, "chart.svg"), meta, first["started"])

    print(f"\n{first['started']} · nproc {meta['nproc']} · {meta['cpu']}")
    for server, side, missed in summaries:
        print(f"\n== {server} ({missed} target(s) missed)\n")
        print(side)
    print(f"\n{missed_total} target(s) missed in all; details in {out_dir}/results.md, chart in {out_dir}/chart.svg")


if __name__ == "__main__":
    main()
