"""Where an `eval`-driven throughput run's time went, from its record and reports
(bench/verify_throughput.py --driver eval --reports-dir DIR): the GPU lock's wall split, the lock's
holds by purpose (with how long each kind went on while a timer waited), the judges' requests by op
(time_prepare's own steps included), the candidates' paired round trips and profiled runs by step,
and each problem's timeline from its set-up.

Usage: python3 bench/throughput_breakdown.py RECORD.json [REPORTS_DIR]
(REPORTS_DIR defaults to `reports` beside RECORD.json; verify-calls.jsonl and eval-candidates.jsonl.)"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def s(ms: float) -> str:
    return f"{ms / 1e3:6.1f}"


def breakdown(record: dict, reports: Path) -> list[str]:
    ev = record.get("eval") or {}
    out = [f"{record.get('commit', 'this run')}: {ev.get('candidates', '?')} candidates over {ev.get('problems', '?')} problems "
           f"in {ev.get('total_wall_s', '?')} s ({ev.get('candidates_per_min', '?')}/min)"]
    for gpu, t in (ev.get("gpu_lock") or {}).items():
        out.append(f"GPU lock {gpu}: span {s(t['span_ms'])} s = exclusive {s(t['exclusive_ms'])} + draining {s(t['draining_ms'])}"
                   f" ({t['drains']} drains) + shared {s(t['shared_ms'])} + free {s(t['free_ms'])}")
    out.append("holds by purpose (summed s):     n   hold   wait  timer_waited")
    uses = ev.get("gpu_use_summed") or {}
    for what, u in sorted(uses.items(), key=lambda kv: -kv[1].get("hold_ms", 0)):
        out.append(f"  {what:24s} {u['n']:5d} {s(u['hold_ms'])} {s(u['wait_ms'])} {s(u.get('timer_waited_ms', 0)):>12s}")
    out.append("judges' requests by op (summed s):")
    for op, u in sorted((ev.get("judge_ms_summed") or {}).items(), key=lambda kv: -kv[1].get("ms", 0)):
        if u.get("ms", 0) >= 500:
            out.append(f"  {op:24s} {u['n']:6d} {s(u['ms'])}")
    calls = reports / "verify-calls.jsonl"
    if not calls.is_file():
        out.append(f"(no {calls}: no per-problem timelines)")
        return out
    multishape = defaultdict(float)  # the problem's longest multi-shape check (one candidate's)
    # Summed over candidates, by step: the paired batches' round trips (trip_steps_ms) and the
    # profiled runs with their checks (profiled_steps_ms); with how many candidates had each.
    steps: dict[str, list[dict]] = {"trip_steps_ms": [], "profiled_steps_ms": [], "load_steps_ms": []}
    check_heavy = []  # (share of the published time charged as check beyond the reference's, candidate)
    cands = reports / "eval-candidates.jsonl"
    for line in (cands.read_text().splitlines() if cands.is_file() else []):
        c = json.loads(line)
        name = c["problem"].split("/")[-1]
        multishape[name] = max(multishape[name], (c.get("phases") or {}).get("multishape_ms", 0.0))
        for key, rows in steps.items():
            if c.get(key):
                rows.append(c[key])
        if (c.get("check_excess_share") or 0) > 0.25:
            check_heavy.append((c["check_excess_share"], f"{name.removesuffix('.py')} #{c.get('sample')}"))
    def summed(key: str) -> dict[str, float]:
        out_ms: dict[str, float] = defaultdict(float)
        for row in steps[key]:
            for k, v in row.items():
                out_ms[k] += v
        return out_ms

    def by_step(key: str, what: str) -> str:
        return (f"{what} ({len(steps[key])}), by step (summed s): " +
                ", ".join(f"{k} {s(v).strip()}" for k, v in sorted(summed(key).items(), key=lambda kv: -kv[1])))

    if steps["trip_steps_ms"]:
        # ("check.judge" and the like are parts of their step: not in the total.)
        total = sum(v for k, v in summed("trip_steps_ms").items() if "." not in k)
        out.append(by_step("trip_steps_ms", "round trips of candidates' paired batches") + f"; total {s(total).strip()}")
    if steps["profiled_steps_ms"]:
        # run.* are the candidate's own account of its request (untrusted), check.* the judge's.
        out.append(by_step("profiled_steps_ms", "profiled runs and their checks"))
    if steps["load_steps_ms"]:
        # Candidates' loads: the judge's audit (its wait for the judge included), the wait for a
        # shared hold, the request, and worker.* the candidate's own account of it (untrusted).
        out.append(by_step("load_steps_ms", "candidates' loads"))
    if check_heavy:
        # Published times mostly the clocked check beyond the reference's (docs/verification.md, Timing).
        out.append(f"published times over a quarter check beyond the reference's ({len(check_heavy)}): " +
                   ", ".join(f"{who} {share:.2f}" for share, who in sorted(check_heavy, reverse=True)))
    out.append("per problem, s from its set-up: prep = the reference's preparation; matched = a candidate's first "
               "matched trial; batch = the first timed batch begins")
    out.append(f"  {'problem':30s} n  setup   prep matched  batch    end    multishape")
    total = 0.0
    for line in calls.read_text().splitlines():
        c = json.loads(line)
        tl = c.get("timeline_ms") or {}
        setup = tl.get("setup", 0.0)
        prep = tl.get("reference_prepared", 0.0) - tl.get("reference_prepare_started", 0.0)
        # The first timed batch (its key before the reference lost its own batch: reference_batch_started).
        tl.setdefault("first_timed_batch", tl.get("reference_batch_started", float("nan")))
        rel = {k: (tl[k] - setup if k in tl else float("nan")) for k in ("variants_started", "first_timed_batch", "total")}
        total += tl.get("total", 0.0)
        name = c["problem"].split("/")[-1]
        out.append(f"  {name[:30]:30s} {c.get('samples', 0):1d} {s(setup)} {s(prep)} {s(rel['variants_started'])} "
                   f"{s(rel['first_timed_batch'])} {s(rel['total'])} {s(multishape.get(name, 0.0)):>10s}")
    out.append(f"summed problem walls {s(total)} s; their longest multi-shape checks {s(sum(multishape.values()))} s")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("record", type=Path)
    ap.add_argument("reports", type=Path, nargs="?")
    a = ap.parse_args()
    record = json.loads(a.record.read_text())
    print("\n".join(breakdown(record, a.reports or a.record.parent / "reports")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
