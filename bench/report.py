#!/usr/bin/env python3
"""Turns one `make bench` run into bench/results.md and bench/chart.svg, and
prints the side-by-side table.

    python3 bench/report.py E2E.json CRITERION_DIR SINCE_EPOCH OUT_DIR

E2E.json comes from bench/e2e.py; CRITERION_DIR is the target directory's
`criterion/` (results older than SINCE_EPOCH are ignored). Python 3
standard library only.
"""

import json
import os
import platform
import subprocess
import sys
import time

# The targets.
USEC_RATIO_MAX = 2.0  # server µs per call <= 2 x INCR's
OPS_RATIO_MIN = 0.7  # ops/s at -P 16 >= 0.7 x INCR's
BYTES_PER_KEY_MAX = 160
BYTES_PER_LOGGED_CALL_MAX = 8
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
        "redis": sh("redis-server", "--version"),
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
    out = {}
    for name, row in main.items():
        r = {"family": row["family"]}
        for p in ("P1", "P16"):
            m = row[p]
            r[p] = {
                "rps": m["rps"], "rps_ratio": ratio(m["rps"], base[p]["rps"]),
                "usec": m["usec_per_call"], "usec_ratio": ratio(m["usec_per_call"], base[p]["usec_per_call"]),
                "p50": m["p50_ms"], "p99": m["p99_ms"],
                "spread_usec": m.get("spread_usec"), "spread_rps": m.get("spread_rps"),
            }
        mem = e2e["memory"].get(name)
        r["bytes_per_key"] = mem["bytes_per_key"] if mem else None
        r["mem_keys"] = mem["keys"] if mem else None
        r["pttl"] = mem["pttl_ms"] if mem else None
        for mode in ("replica", "aof"):
            m, b = e2e[mode].get(name), e2e[mode].get("INCR")
            if m and b:
                r[mode] = {"rps": m["rps"], "rps_ratio": ratio(m["rps"], b["rps"]), "usec": m["usec_per_call"],
                           "usec_ratio": ratio(m["usec_per_call"], b["usec_per_call"])}
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


def targets(a, scale, e2e):
    """Per THROTTLE command: (target, value, met) rows."""
    incr_growth = scale.get("INCR", {}).get("growth")
    loglen = e2e["loglen"]
    lengths = sorted((k for k in loglen if k.isdigit()), key=int)
    out = {}
    for name in THROTTLE:
        r = a[name]
        checks = []
        for p in ("P1", "P16"):
            v = r[p]["usec_ratio"]
            checks.append((f"µs/call ≤ 2×INCR, -P {p[1:]}", f"{f(v)}×", v is not None and v <= USEC_RATIO_MAX))
        v = r["P16"]["rps_ratio"]
        checks.append(("ops/s ≥ 0.7×INCR, -P 16", f"{f(v)}×", v is not None and v >= OPS_RATIO_MIN))
        v = r["bytes_per_key"]
        checks.append((f"≤ 160 B/key ({r['mem_keys']:,} keys)", f"{f(v, 1)} B", v is not None and v <= BYTES_PER_KEY_MAX))
        s = scale.get(name)
        if s:
            g = s["growth"]
            flat = g is not None and (g <= FLAT_MAX or (incr_growth and g <= incr_growth * FLAT_VS_INCR_MAX))
            checks.append(("flat in keys, 10^6 vs 10^3", f"{f(g)}× (INCR {f(incr_growth)}×)", flat))
        if name == "THROTTLE.SLIDING EXACT":
            em = e2e.get("exact_memory", {})
            v = em.get("bytes_per_extra_entry")
            checks.append(("≤ 8 B per logged call (100k keys, 1→10 calls)", f"{f(v)} B",
                           v is not None and v <= BYTES_PER_LOGGED_CALL_MAX))
            v = loglen.get("bytes_per_entry")
            checks.append((f"≤ 8 B per logged call (1 key, {lengths[0]}→{int(lengths[-1]):,} calls)", f"{f(v)} B",
                           v is not None and v <= BYTES_PER_LOGGED_CALL_MAX))
            for path in ("admit", "deny"):
                g = ratio(loglen[lengths[-1]][path]["usec_per_call"], loglen[lengths[0]][path]["usec_per_call"])
                checks.append((f"flat in log length ({path}), {int(lengths[-1]):,} vs {lengths[0]}", f"{f(g)}×",
                               g is not None and g <= LOG_FLAT_MAX))
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

def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    e2e_path, crit_root, since, out_dir = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    with open(e2e_path) as fh:
        e2e = json.load(fh)
    meta = machine()
    crit = criterion_results(crit_root, since) if os.path.isdir(crit_root) else {}
    a = analyse(e2e)
    scale = scaling_rows(e2e)
    tg = targets(a, scale, e2e)
    date = e2e["started"]
    s = e2e["settings"]

    side_by_side = []
    for n, r in a.items():
        p1, p16 = r["P1"], r["P16"]
        side_by_side.append([
            f"**{n}**" if r["family"] == "THROTTLE" else f"*{n}* (reference)" if r["family"] == "reference" else n,
            f"{f(p1['usec'])} ({f(p1['usec_ratio'])}×)", f"{f(p16['usec'])} ({f(p16['usec_ratio'])}×)",
            f"{f(p1['rps'])} ({f(p1['rps_ratio'])}×)", f"{f(p16['rps'])} ({f(p16['rps_ratio'])}×)",
            f"{f(p1['p50'], 3)} / {f(p1['p99'], 3)}", f"{f(p16['p50'], 3)} / {f(p16['p99'], 3)}",
            f(r["bytes_per_key"], 1),
        ])
    side_header = ["command", "µs/call -P 1 (×INCR)", "µs/call -P 16 (×INCR)", "ops/s -P 1 (×INCR)",
                   "ops/s -P 16 (×INCR)", "p50 / p99 ms -P 1", "p50 / p99 ms -P 16", "bytes/key"]
    side_table = table(side_header, side_by_side)

    target_rows = []
    missed = 0
    for n, checks in tg.items():
        for t, v, met in checks:
            target_rows.append([n, t, v, ok(met)])
            missed += not met
    target_table = table(["command", "target", "measured", ""], target_rows, ["l", "l", "r", "l"])

    crit_rows = [[k, f(v["median_ns"], 1), f"{f(v['lo_ns'], 1)} – {f(v['hi_ns'], 1)}"] for k, v in crit.items()]
    crit_table = table(["benchmark", "ns per decision (median)", "95% CI"], crit_rows) if crit_rows else \
        "(no criterion results found)"

    scale_rows = [[n, f"{r['dbsize_small']:,}", f(r["usec_small"]), f"{r['dbsize_large']:,}", f(r["usec_large"]),
                   f"{f(r['growth'])}×", f(r["rps_small"]), f(r["rps_large"]), f(r["bytes_large"], 1)]
                  for n, r in scale.items()]
    scale_table = table(["command", "keys", "µs/call", "keys", "µs/call", "growth", "ops/s", "ops/s",
                         "bytes/key at 10^6"], scale_rows)

    ll = e2e["loglen"]
    lengths = sorted((k for k in ll if k.isdigit()), key=int)
    log_rows = [[f"{int(k):,}", f(ll[k]["deny"]["usec_per_call"]), f(ll[k]["admit"]["usec_per_call"]),
                 f(ll[k]["deny"]["rps"]), f(ll[k]["admit"]["rps"]), f"{ll[k]['used_memory_delta']:,}",
                 f"{ll[k]['memory_usage']:,}"] for k in lengths]
    log_table = table(["log entries", "µs/call denied", "µs/call admitted", "ops/s denied", "ops/s admitted",
                       "used_memory delta (B)", "MEMORY USAGE (B)"], log_rows)
    em = e2e.get("exact_memory", {})

    persist_rows = []
    for n, r in a.items():
        cells = [n]
        for mode in ("replica", "aof"):
            m = r.get(mode)
            cells += [f"{f(m['usec'])} ({f(m['usec_ratio'])}×)", f"{f(m['rps'])} ({f(m['rps_ratio'])}×)"] if m \
                else ["n/a", "n/a"]
        persist_rows.append(cells)
    persist_table = table(["command", "replica: µs/call (×INCR)", "replica: ops/s (×INCR)",
                           "AOF: µs/call (×INCR)", "AOF: ops/s (×INCR)"], persist_rows)

    spread_rows = [[n, " / ".join(f(x) for x in (r["P1"]["spread_usec"] or [])),
                    " / ".join(f(x) for x in (r["P16"]["spread_usec"] or []))] for n, r in a.items()]
    spread_table = table(["command", "µs/call per round, -P 1", "µs/call per round, -P 16"], spread_rows)

    phases = ", ".join(f"{k} {v['seconds']:.0f} s (load {v['load_end']:.2f} after)" for k, v in e2e["phases"].items())
    load_s = " / ".join(f"{x:.2f}" for x in e2e["load_start"])
    load_e = " / ".join(f"{x:.2f}" for x in e2e["load_end"])
    md = f"""# Benchmark results

Generated by `make bench` (bench/run.sh); chart: [chart.svg](chart.svg).

| | |
|---|---|
| date | {date} |
| machine | `nproc` = {meta['nproc']}, {meta['cpu']}, Linux {meta['kernel']} |
| redis | {meta['redis']} |
| module | commit {meta['commit']}, {meta['rustc']}, release build |
| load average (1/5/15 min) | {load_s} at start, {load_e} at the end of the end-to-end run |
| end-to-end run | {e2e['seconds']:.0f} s: {phases} |
| priority | redis-server and redis-benchmark at nice {s.get('BENCH_NICE', 0)} (other work on the machine at 0) |

The machine's 2 cores run the server, redis-benchmark (and, in the replica
run, the replica) and whatever else is running: the load average above says
how much else. Every ratio is taken against INCR measured in the same run,
under the same load.

## Side by side

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
*SET key 1 PX 3600000* is a reference, not a target: the cheapest write
that also gives its key a TTL, as every limiter key has one (INCR's keys
have none).

{side_table}

## Targets

{target_table}

{missed} target(s) missed. "Flat" means at most {FLAT_MAX}× the cost per call, or
at most {FLAT_VS_INCR_MAX}× INCR's own growth between the same two key counts.

## Micro-benchmarks (criterion, pure algorithms, clock passed in)

`cargo bench --bench algorithms`: one decision on an in-memory state, no
Redis. `admit` calls are admitted and change the state, `deny` calls are
refused; `exact/admit` is the steady state of a log of 100 (one entry
expires, one is logged).

{crit_table}

## Cost per call with 10^3 and 10^6 keys

The database holds only that many keys of the command's type (filled one
call per key first), then redis-benchmark `-P 16 -n {s['BENCH_N16']:,} -r <keys>`. Limits no
run reaches, so every call is admitted on both sides; EXACT at a fixed `AT`,
so every log keeps one entry.

{scale_table}

## SLIDING EXACT: log length

One key whose log holds N entries (distinct µs), `-P 16 -n {s['BENCH_N16'] // 2:,}`. Denied:
the limit is N, so the log is full. Admitted: at the newest entry's µs
(`AT`), so the call adds to that entry and the log keeps its length.

{log_table}

Memory per logged call: {f(ll.get('bytes_per_entry'))} B between {lengths[0]} and {int(lengths[-1]):,} entries on
one key; {f(em.get('bytes_per_extra_entry'))} B between 1 and 10 entries on each of {em.get('keys', 0):,} keys
({em.get('bytes_1_entry', 0):,} B and {em.get('bytes_10_entries', 0):,} B).

## With a replica attached, and with AOF on

`-P 16 -n {s['BENCH_N16']:,}`, one run each. Replica: a second redis-server with the module on
the same machine, `REPLICAOF` the first. AOF: `CONFIG SET appendonly yes`
(appendfsync {e2e.get('aof_config', {}).get('appendfsync', '?')}), after the initial rewrite.

{persist_table}

## Round-to-round spread

{spread_table}

## Reproduce

    export CARGO_TARGET_DIR=/tmp/target-bench   # optional; default target/
    make bench

Needs redis-server and redis-benchmark 7.0+ and Python 3 (standard
library only); starts its own servers on free loopback ports and stops
them. Sizes can be overridden for a quick trial, e.g.
`BENCH_ROUNDS=1 BENCH_N16=200000 make bench` (see bench/e2e.py).
"""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.md"), "w") as fh:
        fh.write(md)
    svg_chart(a, os.path.join(out_dir, "chart.svg"), meta, date)

    print(f"\n{date} · nproc {meta['nproc']} · {meta['cpu']} · {meta['redis'].split(' sha=')[0]} · "
          f"load {load_s} → {load_e}\n")
    print(side_table)
    print(f"\n{missed} target(s) missed; details in {out_dir}/results.md, chart in {out_dir}/chart.svg")


if __name__ == "__main__":
    main()
