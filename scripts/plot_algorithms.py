#!/usr/bin/env python3
"""Draws docs/algorithms.svg: which calls each algorithm admits under the
boundary burst of the Laravel article (20 calls a second, traffic bunched at
a window edge), from real replies of the module.

    make plot                                   # build, then this script
    python3 scripts/plot_algorithms.py [--port N] [--out FILE]

Without --port it starts its own redis-server with the built module
($THROTTLE_MODULE, else $CARGO_TARGET_DIR/release/libredis_throttle.so, else
target/release/...) on a free loopback port and stops it afterwards. Time is
driven with AT, so the picture is the same on every run. Python standard
library only.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from resp import free_port, pipeline  # scripts/resp.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_700_000_000_000_000  # Unix µs; a whole second, so SLIDING's windows start at 0 s, 1 s, 2 s
LIMIT, PERIOD = 20, "1s"
END_MS = 4000  # the axis; traffic ends at 3 s, LEAKY runs its queue after

# (label, command, extra arguments, colour)
ALGORITHMS = [
    ("FIXED", "THROTTLE.FIXED", [], "#d62728"),
    ("SLIDING", "THROTTLE.SLIDING", [], "#ff7f0e"),
    ("SLIDING EXACT", "THROTTLE.SLIDING", ["EXACT"], "#2ca02c"),
    ("TOKEN", "THROTTLE.TOKEN", [], "#1f77b4"),
    ("LEAKY", "THROTTLE.LEAKY", [], "#9467bd"),
]


def traffic_ms():
    """Call times in ms: one call at 0 s (it opens FIXED's first window at
    0 s, as Laravel's windows start on a whole second), 40 calls at
    0.50-0.89 s, 40 calls at 1.000-1.195 s, then a steady 30 a second to 3 s."""
    calls = [0.0]
    calls += [500 + 10 * i for i in range(40)]
    calls += [1000 + 5 * i for i in range(40)]
    calls += [1200 + 1000 * i / 30 for i in range(54)]
    return calls


# --- the server ---------------------------------------------------------------

def module_path():
    if os.environ.get("THROTTLE_MODULE"):
        return Path(os.environ["THROTTLE_MODULE"])
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    return target / "release" / "libredis_throttle.so"


def start_server():
    module = module_path()
    if not module.exists():
        sys.exit(f"plot: {module} is missing: run make build first")
    if not shutil.which("redis-server"):
        sys.exit("plot: redis-server is not on PATH (make deps installs it)")
    port = free_port()
    tmp = tempfile.mkdtemp()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", tmp, "--logfile", os.path.join(tmp, "redis.log"), "--loadmodule", str(module)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            pipeline(port, [["PING"]])
            return port, server, tmp
        except OSError:
            if server.poll() is not None:
                sys.exit(f"plot: redis-server exited: {Path(tmp, 'redis.log').read_text()}")
            time.sleep(0.05)
    server.kill()
    sys.exit("plot: redis-server did not answer")


# --- the data -------------------------------------------------------------------

def run(port):
    calls = traffic_ms()
    results = {}
    for label, command, extra, _ in ALGORITHMS:
        key = "plot:" + label.lower().replace(" ", "-")
        cmds = [["DEL", key]] + [[command, key, LIMIT, PERIOD, "AT", T0 + round(t * 1000)] + extra for t in calls]
        replies = pipeline(port, cmds)[1:]
        pipeline(port, [["DEL", key]])
        results[label] = [(t, r[0] == 1, r[3]) for t, r in zip(calls, replies)]
    return calls, results


def most_in_any_second(times):
    """The most times in any interval [a, a + 1 s)."""
    times = sorted(times)
    best, j = 0, 0
    for i, a in enumerate(times):
        while times[j] <= a - 1000 + 1e-9:
            j += 1
        best = max(best, i - j + 1)
    return best


def trailing_counts(times, at):
    """For each t in at: how many of times fall in (t - 1 s, t]."""
    return [sum(1 for x in times if t - 1000 < x <= t) for t in at]


# --- the picture ------------------------------------------------------------------

def svg(calls, results):
    W, left, right = 1000, 250, 30
    x = lambda ms: left + (W - left - right) * ms / END_MS
    rows = [("offered", [(t, True) for t in calls], "#555555")]
    for label, _, _, colour in ALGORITHMS:
        rows.append((label, [(t, ok) for t, ok, _ in results[label]], colour))
        if label == "LEAKY":
            run_at = [(t + retry, True) for t, ok, retry in results[label] if ok]
            rows.append(("LEAKY, runs", run_at, colour))
    row_h, top = 34, 70
    raster_bottom = top + row_h * len(rows)
    chart_top, chart_h = raster_bottom + 70, 220
    H = chart_top + chart_h + 95
    o = []
    o.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
             'font-family="Helvetica, Arial, sans-serif" font-size="13">')
    o.append(f'<rect width="{W}" height="{H}" fill="white"/>')
    o.append(f'<text x="{W / 2}" y="26" text-anchor="middle" font-size="17" font-weight="bold">'
             f'20 calls per second, traffic bunched at a window edge: which calls each algorithm admits</text>')
    o.append(f'<text x="{W / 2}" y="46" text-anchor="middle" fill="#444">real replies of THROTTLE.* key 20 1s, '
             f'time driven with AT (scripts/plot_algorithms.py); coloured tick: admitted, grey: refused</text>')
    # whole seconds: the windows of FIXED (opened at 0 s) and SLIDING
    for s in range(0, END_MS + 1, 500):
        dash = "" if s % 1000 == 0 else ' stroke-dasharray="3,4"'
        o.append(f'<line x1="{x(s):.1f}" y1="{top - 8}" x2="{x(s):.1f}" y2="{raster_bottom}" stroke="#ccc"{dash}/>')
        o.append(f'<text x="{x(s):.1f}" y="{raster_bottom + 16}" text-anchor="middle" fill="#444">{s / 1000:g} s</text>')
    for i, (label, points, colour) in enumerate(rows):
        y = top + i * row_h
        if i % 2 == 0:
            o.append(f'<rect x="{left - 5}" y="{y - 6}" width="{W - left - right + 10}" height="{row_h}" fill="#f6f6f6"/>')
        o.append(f'<text x="{left - 12}" y="{y + 14}" text-anchor="end" font-weight="bold" fill="{colour}">{label}</text>')
        admitted = [t for t, ok in points if ok]
        if label == "LEAKY, runs":
            note = f"at t + retry_after; most in any 1 s: {most_in_any_second(admitted)}"
            o.append(f'<text x="{left - 12}" y="{y + 27}" text-anchor="end" font-size="11" fill="#666">{note}</text>')
        elif label != "offered":
            note = f"{len(admitted)} admitted, most in any 1 s: {most_in_any_second(admitted)}"
            o.append(f'<text x="{left - 12}" y="{y + 27}" text-anchor="end" font-size="11" fill="#666">{note}</text>')
        else:
            o.append(f'<text x="{left - 12}" y="{y + 27}" text-anchor="end" font-size="11" fill="#666">'
                     f'{len(calls)} calls, most in any 1 s: {most_in_any_second(calls)}</text>')
        for t, ok in points:
            if ok:
                o.append(f'<line x1="{x(t):.1f}" y1="{y}" x2="{x(t):.1f}" y2="{y + 20}" stroke="{colour}" stroke-width="1.6"/>')
            else:
                o.append(f'<line x1="{x(t):.1f}" y1="{y + 7}" x2="{x(t):.1f}" y2="{y + 13}" stroke="#bbb" stroke-width="1.2"/>')
    # the chart: admitted calls in the trailing second
    ymax = 45
    yv = lambda v: chart_top + chart_h - chart_h * v / ymax
    o.append(f'<text x="{left}" y="{chart_top - 18}" font-weight="bold">Calls admitted in the last second '
             f'(LEAKY: calls run), against the limit of 20</text>')
    for v in range(0, ymax + 1, 10):
        o.append(f'<line x1="{left}" y1="{yv(v):.1f}" x2="{W - right}" y2="{yv(v):.1f}" stroke="#eee"/>')
        o.append(f'<text x="{left - 8}" y="{yv(v) + 4:.1f}" text-anchor="end" fill="#444">{v}</text>')
    o.append(f'<line x1="{left}" y1="{yv(LIMIT):.1f}" x2="{W - right}" y2="{yv(LIMIT):.1f}" stroke="#000" '
             'stroke-dasharray="6,4"/>')
    o.append(f'<text x="{W - right}" y="{yv(LIMIT) - 5:.1f}" text-anchor="end" font-size="11">limit: 20 per second</text>')
    for s in range(0, END_MS + 1, 500):
        o.append(f'<text x="{x(s):.1f}" y="{chart_top + chart_h + 16}" text-anchor="middle" fill="#444">{s / 1000:g} s</text>')
    grid = list(range(0, END_MS + 1, 5))  # every 5 ms
    for label, _, _, colour in ALGORITHMS:
        res = results[label]
        times = [t + retry for t, ok, retry in res if ok] if label == "LEAKY" else [t for t, ok, _ in res if ok]
        counts = trailing_counts(times, grid)
        pts = " ".join(f"{x(t):.1f},{yv(c):.1f}" for t, c in zip(grid, counts))
        o.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2" stroke-linejoin="round"/>')
    # legend
    lx, ly = left, chart_top + chart_h + 40
    for i, (label, _, _, colour) in enumerate(ALGORITHMS):
        cx = lx + i * 150
        o.append(f'<line x1="{cx}" y1="{ly}" x2="{cx + 24}" y2="{ly}" stroke="{colour}" stroke-width="3"/>')
        o.append(f'<text x="{cx + 30}" y="{ly + 4}">{label}</text>')
    o.append(f'<text x="{left}" y="{ly + 30}" font-size="11" fill="#666">Traffic: 1 call at 0 s, 40 calls at '
             f'0.50-0.89 s, 40 at 1.00-1.20 s, then 30 a second. TOKEN and LEAKY: BURST 20 (the default).</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, help="use the redis-server (with the module) on 127.0.0.1:PORT")
    ap.add_argument("--out", default=str(ROOT / "docs" / "algorithms.svg"))
    args = ap.parse_args()
    server = tmp = None
    port = args.port
    if port is None:
        port, server, tmp = start_server()
    try:
        calls, results = run(port)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
            shutil.rmtree(tmp, ignore_errors=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(svg(calls, results))
    print(f"{'':14} {'admitted':>8} {'most in any 1 s':>16}   (of {len(calls)} calls, limit {LIMIT} per second)")
    for label, *_ in ALGORITHMS:
        res = results[label]
        admitted = [t for t, ok, _ in res if ok]
        line = f"{label:14} {len(admitted):8} {most_in_any_second(admitted):16}"
        if label == "LEAKY":
            ran = [t + retry for t, ok, retry in res if ok]
            line += f"   run at t + retry_after: most in any 1 s {most_in_any_second(ran)}"
        print(line)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
