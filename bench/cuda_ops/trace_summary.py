#!/usr/bin/env python3
"""Where a decode step's time goes, from a kernel timeline (bench/cuda_ops/kernel_trace.cpp).

A step is one graph launch (its kernels share a correlation id). Within a step, kernels are taken
in the order they started; a kernel's share of the step is how far it moves the latest end seen so
far (end[i] - end[i-1] in a chain; the first: its whole span). Under PDL a kernel may start before
the one ahead ends, but does its work after it, so the shares add up to the step's span and say
what each kernel adds at the end of the chain. Kernels are keyed by their name (templates and
arguments cut) and grid, so one GEMM kernel at three shapes is three rows.

    python3 bench/cuda_ops/trace_summary.py trace.csv [--kernels N] [--windows 0.05,0.5,0.95]
        [--width 11] [--sequence N] [--json out.json]
"""
import argparse
import collections
import csv
import json
import statistics
import sys


def short_name(name):
    depth, out = 0, []
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    s = s.replace("void ", "").split("::")[-1]
    if s in ("Kernel", "Kernel2", "device_kernel") and "<" in name:
        s += ":" + name[name.index("<") + 1:].split("::")[-1]  # a library's generic wrapper: its argument says which
    return s[:60]


def load_steps(path):
    steps = collections.defaultdict(list)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if int(row["graph"]) == 0:
                continue  # eager launches (prefill, set-up): not a graph step
            steps[int(row["correlation"])].append(row)
    out = []
    for corr, rows in steps.items():
        rows.sort(key=lambda r: (int(r["start_ns"]), int(r["graph_node"])))
        out.append((int(rows[0]["start_ns"]), corr, rows))
    out.sort()
    return [rows for _, _, rows in out]


def step_shares(rows):
    """(kernel key, share, busy) per kernel in start order, the step's span and its idle time (ns).

    A kernel's share is how far it moves the latest end seen so far (never below zero), so the
    shares add up to the span; idle is the time no kernel ran.
    """
    shares, idle = [], 0
    latest = int(rows[0]["start_ns"])
    for r in rows:
        start, end = int(r["start_ns"]), int(r["end_ns"])
        key = f'{short_name(r["name"])} [{r["grid_x"]}x{r["grid_y"]}x{r["grid_z"]}]'
        idle += max(0, start - latest)
        shares.append((key, max(0, end - latest), end - start))
        latest = max(latest, end)
    return shares, latest - int(rows[0]["start_ns"]), idle


def summarize(steps):
    per_key = collections.defaultdict(lambda: [0, 0.0, 0.0])
    spans, idles = [], []
    for rows in steps:
        shares, span, idle = step_shares(rows)
        spans.append(span / 1e3)
        idles.append(idle / 1e3)
        for key, share, dur in shares:
            e = per_key[key]
            e[0] += 1
            e[1] += share / 1e3
            e[2] += dur / 1e3
    n = len(steps)
    table = sorted(((k, c / n, s / n, d / n) for k, (c, s, d) in per_key.items()), key=lambda t: -t[2])
    return {"steps": n, "span_us_median": statistics.median(spans), "idle_us_median": statistics.median(idles),
            "kernels": [{"kernel": k, "per_step": round(c, 2), "share_us": round(s, 2), "busy_us": round(d, 2)}
                        for k, c, s, d in table]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--kernels", type=int, default=0,
                    help="only steps of exactly this many kernels (0: the most common count)")
    ap.add_argument("--windows", default="0.05,0.5,0.95", help="where in the run to look (fractions of the steps)")
    ap.add_argument("--width", type=int, default=11, help="steps per window")
    ap.add_argument("--sequence", type=int, default=0,
                    help="also list the first N kernels of the middle step one by one")
    ap.add_argument("--json", help="write the summaries here too")
    args = ap.parse_args()
    steps = load_steps(args.trace)
    if not steps:
        sys.exit(f"{args.trace}: no graph-launched kernels (was the program run with CUDA graphs?)")
    count = args.kernels or collections.Counter(len(s) for s in steps).most_common(1)[0][0]
    steps = [s for s in steps if len(s) == count]
    result = {"trace": args.trace, "kernels_per_step": count, "windows": []}
    for frac in (float(x) for x in args.windows.split(",")):
        mid = min(len(steps) - 1, int(frac * len(steps)))
        lo = max(0, mid - args.width // 2)
        window = steps[lo:lo + args.width]
        s = summarize(window)
        s["first_step"] = lo
        result["windows"].append(s)
        print(f"\n== steps {lo}..{lo + len(window) - 1} of {len(steps)} ({count} kernels each): span "
              f"{s['span_us_median']:.1f} us median, idle {s['idle_us_median']:.1f} us")
        print(f"{'kernel [grid]':<78} {'/step':>6} {'share us':>9} {'busy us':>9}")
        for k in s["kernels"]:
            print(f"{k['kernel']:<78} {k['per_step']:>6.1f} {k['share_us']:>9.1f} {k['busy_us']:>9.1f}")
    if args.sequence:
        rows = steps[len(steps) // 2]
        t0 = latest = int(rows[0]["start_ns"])
        print(f"\n== the middle step's first {args.sequence} kernels (us from its start; lead: how long before the"
              " one ahead ended it started)")
        print(f"{'kernel [grid]':<70} {'start':>8} {'end':>8} {'busy':>7} {'lead':>7} {'share':>7}")
        shares, _, _ = step_shares(rows)
        for r, (key, share, busy) in zip(rows[:args.sequence], shares):
            start, end = int(r["start_ns"]), int(r["end_ns"])
            print(f"{key:<70} {(start - t0) / 1e3:>8.1f} {(end - t0) / 1e3:>8.1f} {busy / 1e3:>7.1f}"
                  f" {(latest - start) / 1e3:>7.1f} {share / 1e3:>7.1f}")
            latest = max(latest, end)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
