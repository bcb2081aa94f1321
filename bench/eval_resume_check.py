"""Checks an eval run that was killed and restarted (bench/loop_device_run.sh resume).

  snapshot RUN...   the verifications each run store holds now (taken right after the kill)
  check RUN... --at-kill SNAP --resumed REPORT [--reference REPORT] --out FILE
                    after the restart: every (problem, sample, profile) verified exactly once over
                    both processes, verdicts in the resumed report equal to the stores', and, with
                    --reference (an uninterrupted run's report.json), the same verdicts as that run
                    and the ratio of speedups where both are correct. Exit 1 when a check fails.
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
from pathlib import Path


def verifications(run: Path) -> list[dict]:
    db = sqlite3.connect(f"file:{run / 'run.sqlite'}?mode=ro", uri=True)
    try:
        rows = db.execute("select seq, problem, sample, profile, verdict, cached from verifications order by seq").fetchall()
    finally:
        db.close()
    return [{"seq": r[0], "problem": r[1], "sample": r[2], "profile": r[3], "verdict": r[4], "cached": bool(r[5])}
            for r in rows]


def report_verdicts(report: dict) -> dict[tuple, dict]:
    out = {}
    for problem in report["problems"]:
        for profile, samples in problem["samples"].items():
            for s in samples:
                out[(problem["id"], s["sample"], profile)] = s
    return out


def snapshot(runs: list[Path]) -> dict:
    per_run = {str(r): verifications(r) if (r / "run.sqlite").is_file() else [] for r in runs}
    return {"verifications_before_kill": sum(len(v) for v in per_run.values()),
            "per_run": {k: len(v) for k, v in per_run.items()}}


def check(runs: list[Path], at_kill: dict, resumed: dict, reference: dict | None) -> dict:
    counts: dict[tuple, int] = {}
    cached = 0
    for run in runs:
        for v in verifications(run):
            key = (v["problem"], v["sample"], v["profile"])
            counts[key] = counts.get(key, 0) + 1
            cached += v["cached"]
    final = report_verdicts(resumed)
    result = {
        "verifications_before_kill": at_kill["verifications_before_kill"],
        "verifications_total": sum(counts.values()),
        "pairs_in_report": len(final),
        "pairs_verified_twice": sorted("/".join(map(str, k)) for k, n in counts.items() if n > 1),
        "pairs_never_verified": sorted("/".join(map(str, k)) for k in final if k not in counts),
        "answered_from_result_cache": cached,
    }
    ok = not result["pairs_verified_twice"] and not result["pairs_never_verified"] and result["verifications_total"] == len(final)
    if reference is not None:
        ref = report_verdicts(reference)
        differ = sorted("/".join(map(str, k)) + f": {ref[k]['verdict']} -> {final[k]['verdict']}"
                        for k in ref if k in final and ref[k]["verdict"] != final[k]["verdict"])
        missing = sorted("/".join(map(str, k)) for k in ref.keys() ^ final.keys())
        ratios = [final[k]["speedup"] / ref[k]["speedup"] for k in ref
                  if k in final and ref[k].get("speedup") and final[k].get("speedup")]
        result["reference"] = {
            "pairs": len(ref), "verdicts_differ": differ, "pairs_only_in_one": missing,
            "speedup_ratio_resumed_over_reference": None if not ratios else {
                "n": len(ratios), "median": round(statistics.median(ratios), 4),
                "min": round(min(ratios), 4), "max": round(max(ratios), 4)},
        }
        ok = ok and not differ and not missing
    result["ok"] = ok
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("snapshot")
    sp.add_argument("runs", nargs="+", type=Path)
    cp = sub.add_parser("check")
    cp.add_argument("runs", nargs="+", type=Path)
    cp.add_argument("--at-kill", type=Path, required=True)
    cp.add_argument("--resumed", type=Path, required=True)
    cp.add_argument("--reference", type=Path)
    cp.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.cmd == "snapshot":
        print(json.dumps(snapshot(args.runs), indent=1))
        return 0
    result = check(args.runs, json.loads(args.at_kill.read_text()), json.loads(args.resumed.read_text()),
                   json.loads(args.reference.read_text()) if args.reference else None)
    result["command"] = " ".join(sys.argv)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "command"}, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
