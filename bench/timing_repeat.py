#!/usr/bin/env python3
"""Do verdicts and published times repeat? Verifies the same candidates several times, under
both profiles, and records per run each candidate's verdict, rule, median, IQR and speedup
(issue #42: "same file, same verdict, 5 runs"; "a speedup whose repeated measurements disagree
beyond their noise is re-timed or reported as unstable"). A candidate's verdicts are stable when
every run of a profile gave the same verdict and rule; its speedups repeat when their spread over
every run and profile is within the largest IQR of a run's paired speedups (each round trip's
reference over the candidate's, docs/verification.md, Timing). Its medians are compared the same
way against their IQRs and recorded beside (a median alone moves with the machine). --parallel
runs that many verify calls at once (the GPU timing lock spans processes, so timed calls still
run one at a time).

  python3 bench/timing_repeat.py --cli build/vdev/kernelllm --device cuda:0 --runs 5 \
      --out timing-repeat-h100.json  PROBLEM.py CAND.py [CAND.py ...] :: PROBLEM.py CAND.py ...
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def groups(args: list[str]) -> list[list[str]]:
    out, cur = [], []
    for a in args + ["::"]:
        if a == "::":
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append(a)
    return out


def per_call_parts(t: dict) -> dict:
    """A timed batch's charges and clocks, per call (the timing JSON's totals over n round trips of
    calls_per_trip calls)."""
    calls = t["n"] * max(1, t.get("calls_per_trip") or 1)
    return {"load_excess_ms": t.get("load_excess_ms"), "flush_excess_ms": t.get("flush_excess_ms"),
            "round_trips_ms_per_call": (t.get("wall_total_ms") or 0) / calls,
            "worker_events_ms_per_call": (t.get("event_total_ms") or 0) / calls}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--profiles", default="strict,kernelbench")
    ap.add_argument("--parallel", type=int, default=1, help="verify calls at once")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no verify call after this many seconds (runs are ordered run by run, so what "
                         "finished is whole runs of every group)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reports-dir", default=None,
                    help="keep every verify call's JSON report here (each round trip's times and loads), "
                         "else they go with a temporary directory")
    ap.add_argument("--from-reports", action="store_true",
                    help="run nothing: summarize the reports already in --reports-dir (a run cut off before its "
                         "summary keeps them there); the items still name the groups")
    ap.add_argument("items", nargs="+", help="PROBLEM CAND... groups separated by ::")
    args = ap.parse_args()
    if args.from_reports and not args.reports_dir:
        ap.error("--from-reports needs --reports-dir")
    tmp = Path(args.reports_dir) if args.reports_dir else Path(tempfile.mkdtemp(prefix="kllm-repeat-"))
    tmp.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict] = {}
    commands = []
    t_start = time.monotonic()
    jobs = []
    for run in range(args.runs):
        for g in groups(args.items):
            problem, cands = g[0], g[1:]
            for profile in args.profiles.split(","):
                out = tmp / f"{Path(problem).stem}-{profile}-{run}.json"
                cmd = [args.cli, "verify", problem, *cands, "--verify-device", args.device, "--profile", profile,
                       "--no-cache", "--no-multishape", "--json", str(out)]
                commands.append(" ".join(cmd))
                jobs.append((problem, run, profile, out, cmd))

    skipped = []
    # SIGTERM (a phase limit: bench/device_phases.sh stops the process group, then kills it 5 s
    # later) starts no more verify calls; the calls in flight get it too, and the summary of what
    # finished is still written.
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    def verify(job):
        problem, run, profile, out, cmd = job
        if args.from_reports:
            report = json.loads(out.read_text()) if out.exists() else {}
            if not report:
                skipped.append(f"{Path(problem).stem} {profile} run {run}")
            return job, report
        if stopping.is_set() or (args.budget_s is not None and time.monotonic() - t_start > args.budget_s):
            skipped.append(f"{Path(problem).stem} {profile} run {run}")
            return job, {}
        proc = subprocess.run(cmd, capture_output=True, text=True)
        report = json.loads(out.read_text()) if out.exists() else {}
        if not report:
            print(f"{problem} {profile} run {run}: no report (exit {proc.returncode}): {proc.stderr[-500:]}",
                  file=sys.stderr)
        return job, report

    with concurrent.futures.ThreadPoolExecutor(max(1, args.parallel)) as pool:
        reports = list(pool.map(verify, jobs))
        for (problem, run, profile, _, _), report in reports:
            ref = report.get("reference_timing") or {}
            for c in report.get("candidates", []):
                t = c.get("timing") or {}
                row = rows.setdefault(c["path"], {"problem": problem, "candidate": c["path"], "runs": []})
                # The message too, so that a verdict that differs between runs says why.
                row["runs"].append({"run": run, "profile": profile, "verdict": c.get("verdict"), "rule": c.get("rule"),
                                    "message": str(c.get("message", ""))[:600],
                                    "traceback": str((c.get("evidence") or {}).get("traceback", ""))[-1500:] or None,
                                    "median_ms": t.get("median_ms"), "iqr_ms": t.get("iqr_ms"),
                                    "calls_per_trip": t.get("calls_per_trip"), "speedup": c.get("speedup"),
                                    "speedup_iqr": (t["speedup_q3"] - t["speedup_q1"]) if "speedup_q1" in t else None,
                                    "paired_reference_median_ms": t.get("paired_reference_median_ms"),
                                    "unstable": bool((c.get("evidence") or {}).get("timing_unstable")),
                                    # Where a median's spread comes from (docs/verification.md, Timing):
                                    # the charges, the round trips alone, the worker's own claim.
                                    **({} if not t.get("n") else per_call_parts(t)),
                                    "reference_median_ms": ref.get("median_ms")})
    summary = []
    for row in rows.values():
        per_profile = {}
        for r in row["runs"]:
            per_profile.setdefault(r["profile"], set()).add((r["verdict"], r["rule"] or ""))
        row["verdicts"] = {p: sorted(f"{v}:{rule}" if rule else str(v) for v, rule in got) for p, got in per_profile.items()}
        row["verdict_stable"] = all(len(got) == 1 for got in per_profile.values())
        summary.append(row)
        print(f"{Path(row['candidate']).name}: verdicts {row['verdicts']} {'stable' if row['verdict_stable'] else 'UNSTABLE'}")
        timed = [r for r in row["runs"] if r["median_ms"]]
        if not timed:
            continue
        medians = [r["median_ms"] for r in timed]
        spread = max(medians) - min(medians)
        noise = max(r["iqr_ms"] or 0 for r in timed)
        speedups = [r["speedup"] for r in timed if r["speedup"]]
        s_noise = max((r["speedup_iqr"] or 0 for r in timed), default=0)
        s_spread = max(speedups) - min(speedups) if speedups else None
        row.update({"median_of_medians_ms": statistics.median(medians), "medians_spread_ms": spread,
                    "largest_iqr_ms": noise, "medians_within_noise": spread <= noise,
                    "speedup_min": min(speedups) if speedups else None, "speedup_max": max(speedups) if speedups else None,
                    "speedups_spread": s_spread, "largest_speedup_iqr": s_noise,
                    "agree_within_noise": s_spread is not None and s_spread <= s_noise,
                    "reported_unstable": sum(r["unstable"] for r in timed)})
        print(f"{Path(row['candidate']).name}: speedups {min(speedups or [0]):.3f}-{max(speedups or [0]):.3f} "
              f"(largest paired IQR {s_noise:.3f}) {'agree' if row['agree_within_noise'] else 'DISAGREE'}; "
              f"medians {min(medians):.4f}-{max(medians):.4f} ms (largest IQR {noise:.4f}) "
              f"{'agree' if row['medians_within_noise'] else 'disagree'}; unstable flags {row['reported_unstable']}")
    first = next((r for _, r in reports if r), {})
    if args.from_reports:  # the machine that made the reports, not this one
        env = first.get("environment") or {}
        gpu = ((env.get("devices") or [{}])[0]).get("hardware", "unknown")
        versions = {k: env.get(k) for k in ("torch", "triton", "python_version")}
        host = (first.get("run") or {}).get("host")
    else:
        host = platform.node()
        try:
            import torch
            gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
            versions = {"torch": torch.__version__}
            import triton
            versions["triton"] = triton.__version__
        except Exception as e:  # the record still says what ran
            gpu, versions = f"unknown ({e})", {}
    timed_rows = [r for r in summary if "agree_within_noise" in r]
    record = {"what": "the same candidates verified repeatedly under both profiles: do verdicts repeat, and do "
                      "speedups repeat within their noise (medians beside)?",
              "host": host, "gpu": gpu, "versions": versions, "runs": args.runs, "commands": commands,
              "from_reports": args.from_reports,
              "wall_s": round(time.monotonic() - t_start, 1), "budget_s": args.budget_s,
              "skipped_calls": skipped, "candidates": summary,
              "verdict_stable": sum(r["verdict_stable"] for r in summary), "candidates_total": len(summary),
              "agreeing": sum(r["agree_within_noise"] for r in timed_rows), "total": len(timed_rows),
              "medians_agreeing": sum(r["medians_within_noise"] for r in timed_rows)}
    Path(args.out).write_text(json.dumps(record, indent=1))
    print(f"{record['verdict_stable']}/{record['candidates_total']} candidates with the same verdict in every run; "
          f"{record['agreeing']}/{record['total']} timed candidates' speedups agree within noise "
          f"({record['medians_agreeing']} by medians); wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
