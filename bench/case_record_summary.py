"""Summarizes device runs of the labelled case suite (records written by tests/python/test_cases.py
with KERNELLLM_CASES_RECORD) into bench/results/verify-cases-*.json: one row per case with its
label, verdict, rule, multi-shape result and per-phase times. When several records hold the same
problem (the suite run in parts), the first record listing it wins; later duplicates are kept
under "reruns" when their verdict or rule differs.

  python3 bench/case_record_summary.py rec_part1.json rec_part2.json --commit SHA --command "..." --out OUT.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cases"))
from case_header import parse_header  # noqa: E402


def row(problem: str, cand: dict) -> dict:
    name = Path(cand["path"]).name
    head = parse_header(ROOT / "tests" / "cases" / problem / name)
    timing = cand.get("timing") or {}
    ms = cand.get("multishape") or {}
    verdict_ok = cand["verdict"] == head.get("expect")
    rule_ok = not head.get("rule") or head.get("rule") == cand.get("rule")
    return {"case": f"{problem}/{name}", "expected": head.get("expect"), "expected_rule": head.get("rule"),
            "verdict": cand["verdict"], "rule": cand.get("rule", ""), "multishape": ms.get("verdict"),
            "match": verdict_ok and rule_ok, "phases_ms": (cand.get("evidence") or {}).get("phases"),
            "median_ms": timing.get("median_ms", (timing.get("stats") or {}).get("median_ms")), "speedup": cand.get("speedup")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--command", action="append", default=[])
    ap.add_argument("--gpu", type=Path, help="gpu.txt from the device run")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows: dict[str, dict] = {}
    reruns = []
    sandbox = ""
    for rec in args.records:
        data = json.loads(rec.read_text())
        for problem, report in data["reports"].items():
            sandbox = sandbox or report.get("sandbox", "")
            for cand in report["candidates"]:
                r = row(problem, cand)
                first = rows.get(r["case"])
                if first is None:
                    rows[r["case"]] = r
                elif (first["verdict"], first["rule"]) != (r["verdict"], r["rule"]):
                    reruns.append({"case": r["case"], "record": rec.name, "verdict": r["verdict"], "rule": r["rule"],
                                   "first": [first["verdict"], first["rule"]]})
    ordered = [rows[k] for k in sorted(rows)]
    # Every case a GPU run has (all of them: `# device: cuda` ones run only there), so a record
    # of a run cut off by the device's call limits says what it did not reach.
    suite = sorted(f"{c.parent.name}/{c.name}" for problem in (ROOT / "tests" / "cases" / "problems").glob("*.py")
                   for c in (ROOT / "tests" / "cases" / problem.stem).glob("*.py"))
    not_run = [c for c in suite if c not in rows]
    summary = {"what": "tests/cases through kernelllm verify on the GPU (CUDA tensors, sandboxed candidates, strict profile)",
               "commands": args.command, "commit": args.commit,
               "gpu": args.gpu.read_text().strip() if args.gpu else None, "sandbox": sandbox,
               "cases_in_suite": len(suite), "complete": not not_run, "not_run": not_run,
               "candidates": len(ordered), "matching_label": sum(r["match"] for r in ordered),
               "mismatches": [r for r in ordered if not r["match"]], "reruns_differing": reruns, "rows": ordered}
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{summary['matching_label']}/{summary['candidates']} as labelled; {len(reruns)} rerun(s) differ; "
          f"{len(not_run)} of {len(suite)} cases not run")
    return 0 if summary["matching_label"] == summary["candidates"] else 1


if __name__ == "__main__":
    sys.exit(main())
