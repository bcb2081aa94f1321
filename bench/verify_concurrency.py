"""Does concurrency change a verdict? (issue #43: "concurrency never changes a verdict".) The
labelled cases (tests/cases) of the chosen problems go through `kernelllm verify`, one call per
problem, once with one candidate worker at a time (--jobs 1) and once with many (--jobs N, more
than the machine's cores by default, so that imports, compiles, runs and comparisons interleave as
much as they can while timing stays exclusive per GPU). Per case it records both verdicts and rules,
and multi-shape results, whether they are the same and whether they match the case's label, and
each call's wall time.

  python3 bench/verify_concurrency.py --cli build/release/kernelllm --device cpu --problems relu,softmax_odd_width \
      --out bench/results/verify-concurrency-cpu.json

On CPU the candidates run under Triton's interpreter (TRITON_INTERPRET=1), as the CPU case suite does.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cases"))
from case_header import parse_header  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from verify_throughput import problems as labelled_cases  # noqa: E402  (the same filter by device)

CASES = ROOT / "tests" / "cases"


def verify(cli: str, problem: str, cases: list[Path], device: str, jobs: int, out: Path, secret: str) -> dict:
    env = dict(os.environ, KERNELLLM_TEST_SECRET=secret)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    cmd = [cli, "verify", str(CASES / "problems" / f"{problem}.py"), *map(str, cases), "--device", device,
           "--json", str(out), "--no-cache", "--run-timeout-factor", "10", "--jobs", str(jobs), "--quiet"]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=out.parent, env=env)
    wall = time.monotonic() - t0
    if not out.is_file():
        raise SystemExit(f"`{' '.join(cmd)}` wrote no report (exit {r.returncode}):\n{r.stderr[-3000:]}")
    report = json.loads(out.read_text())
    by_name = {Path(c["path"]).name: c for c in report.get("candidates", [])}
    return {"command": " ".join(cmd), "wall_s": round(wall, 1), "exit": r.returncode, "by_name": by_name}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--device", default="cpu", help="cpu or cuda:N (passed to verify --device)")
    ap.add_argument("--problems", required=True, help="comma-separated problem names under tests/cases/problems")
    ap.add_argument("--jobs", type=int, default=max(8, 2 * (os.cpu_count() or 1)), help="the concurrent run's --jobs")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    # Each call runs in its own temporary directory: a relative path to the CLI is made absolute.
    cli = shutil.which(args.cli) if os.sep not in args.cli else str(Path(args.cli).resolve())
    if not cli or not os.access(cli, os.X_OK):
        raise SystemExit(f"{args.cli}: not an executable kernelllm CLI")
    args.cli = cli
    names = [p.strip() for p in args.problems.split(",") if p.strip()]
    for p in names:
        if not (CASES / "problems" / f"{p}.py").is_file():
            raise SystemExit(f"{p}: no such problem under {CASES / 'problems'}")
    secret = secrets.token_hex(8)
    by_problem = {problem.stem: cases for problem, cases in labelled_cases(args.device).items()}
    rows, calls = [], []
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kllm-concurrency-") as tmp:
        for p in names:
            cases = by_problem.get(p, [])
            got = {}
            for jobs in (1, args.jobs):
                d = Path(tmp) / f"{p}-j{jobs}"
                d.mkdir()
                got[jobs] = verify(args.cli, p, cases, args.device, jobs, d / "report.json", secret)
                calls.append({"problem": p, "jobs": jobs, "wall_s": got[jobs]["wall_s"], "exit": got[jobs]["exit"],
                              "command": got[jobs]["command"]})
                print(f"{p} --jobs {jobs}: {len(cases)} cases in {got[jobs]['wall_s']} s", flush=True)
            for case in cases:
                head = parse_header(case)
                one, many = got[1]["by_name"].get(case.name, {}), got[args.jobs]["by_name"].get(case.name, {})
                v1, vn = [one.get("verdict"), one.get("rule") or ""], [many.get("verdict"), many.get("rule") or ""]
                label = [head.get("expect"), head.get("rule", "")]
                # The multi-shape result beside the verdict (null where not run): the same question.
                s1, sn = (one.get("multishape") or {}).get("verdict"), (many.get("multishape") or {}).get("verdict")
                # Labelled: the header's `multishape` where it has one; else a correct case passes
                # the check or has none (a problem without size globals), any other has none.
                shape_label = head.get("multishape") or ("pass" if label[0] == "correct" else None)
                allowed = {shape_label} if head.get("multishape") or label[0] != "correct" else {"pass", None}
                rows.append({"case": f"{p}/{case.name}", "label": label, "jobs_1": v1, f"jobs_{args.jobs}": vn,
                             "multishape": {"label": shape_label, "jobs_1": s1, f"jobs_{args.jobs}": sn},
                             "same": v1 == vn and s1 == sn,
                             "labelled": all(v[0] == label[0] and (not label[1] or v[1] == label[1]) for v in (v1, vn))
                             and {s1, sn} <= allowed})
    differing = [r for r in rows if not r["same"]]
    record = {"what": "the labelled cases verified with one candidate worker at a time and with many at once: "
                      "does concurrency change a verdict?",
              "device": args.device, "host": platform.node(), "cores": os.cpu_count(), "python": platform.python_version(),
              "commit": os.environ.get("KERNELLLM_GIT_COMMIT") or subprocess.run(
                  ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
              "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "jobs": [1, args.jobs],
              "wall_s": round(time.monotonic() - t_all, 1), "calls": calls,
              "cases": len(rows), "same_verdict": sum(r["same"] for r in rows),
              "as_labelled_both": sum(r["labelled"] for r in rows), "differing": differing, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{record['same_verdict']}/{record['cases']} cases with the same verdict and multi-shape result at --jobs 1 "
          f"and --jobs {args.jobs}; "
          f"{record['as_labelled_both']} as labelled in both; wrote {args.out}")
    return 0 if not differing else 1


if __name__ == "__main__":
    sys.exit(main())
