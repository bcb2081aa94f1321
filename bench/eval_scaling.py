"""The same `kernelllm eval` over pre-generated candidates on several device sets (e.g. one GPU, then
two and four of one host), one fresh run each: wall time, verifications per minute, the speedup
over the first set, whether every verdict is the same, and the wall time of a whole KernelBench
level 1 at k = 20 projected from the measured rate (issue #43's eval-scaling record).

  python3 bench/eval_scaling.py --cli build/kernelllm --problems .kb0/KernelBench --levels 1 \\
      --candidates bench/eval_candidates/level1 --sets cuda:0 cuda:0,cuda:1 --out eval-scaling.json

--problem-jobs-per-device problems are verified at once per device of a set (eval --problem-jobs);
extra eval options after --eval-args (e.g. --eval-args --no-timing). Each run's directory is kept
under --work (its report.json holds every verdict); a set whose run fails is recorded with its
exit status and stderr tail, and the others still run.
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_facts import gpu_line  # noqa: E402

LEVEL1_PROBLEMS = 100  # KernelBench level 1


def verdicts_of(report: dict) -> dict[str, str]:
    """{"<problem id> [<profile>] #<sample>": verdict} from an eval report.json."""
    out = {}
    for p in report.get("problems", []):
        for profile, samples in (p.get("samples") or {}).items():
            for s in samples:
                out[f"{p['id']} [{profile}] #{s['sample']}"] = s["verdict"]
    return out


def run_set(args, devices: str, index: int) -> dict:
    run_dir = args.work / f"run-{index}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    n_devices = len([d for d in devices.split(",") if d])
    jobs = max(1, args.problem_jobs_per_device * n_devices)
    cmd = [args.cli, "eval", "--problems", str(args.problems), "--candidates", str(args.candidates), "--out", str(run_dir),
           "--verify-device", devices, "--profiles", args.profiles, "--problem-jobs", str(jobs), "-q",
           *(["--levels", args.levels] if args.levels else []), *args.eval_args]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        rc, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    wall_s = time.perf_counter() - t0
    row = {"devices": devices, "problem_jobs": jobs, "command": " ".join(cmd), "exit": rc, "wall_s": round(wall_s, 2)}
    report_file = run_dir / "report.json"
    if rc != 0 or not report_file.is_file():
        row["error"] = err[-2000:]
        return row
    verdicts = verdicts_of(json.loads(report_file.read_text()))
    row["verifications"] = len(verdicts)
    row["per_min"] = round(60.0 * len(verdicts) / wall_s, 2) if wall_s > 0 else None
    row["verdicts"] = verdicts
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--problems", type=Path, required=True, help="eval --problems (a KernelBench root or a dir of problems)")
    ap.add_argument("--levels", default="", help="eval --levels (KernelBench roots)")
    ap.add_argument("--candidates", type=Path, required=True, help="eval --candidates")
    ap.add_argument("--sets", nargs="+", required=True, help="device sets in order, e.g. cuda:0 cuda:0,cuda:1")
    ap.add_argument("--profiles", default="strict")
    ap.add_argument("--problem-jobs-per-device", type=int, default=4)
    ap.add_argument("--work", type=Path, default=Path("eval-scaling-runs"))
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per eval run")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--eval-args", nargs=argparse.REMAINDER, default=[], help="further eval options (last)")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, devices in enumerate(args.sets):
        row = run_set(args, devices, i)
        rows.append(row)
        print(f"{devices:<28} {row['wall_s']:8.1f} s  " + (f"{row['verifications']} verdicts, {row['per_min']}/min"
                                                         if "verdicts" in row else f"failed ({row['exit']})"), flush=True)
        # Written after every set: a run cut off keeps the sets done.
        write(args, rows)
    return 0 if all("verdicts" in r for r in rows) else 1


def write(args, rows: list) -> None:
    base = next((r for r in rows if "verdicts" in r), None)
    profiles = len([p for p in args.profiles.split(",") if p])
    sets = []
    for r in rows:
        s = {k: v for k, v in r.items() if k != "verdicts"}
        if "verdicts" in r and base is not None:
            s["speedup"] = round(base["wall_s"] / r["wall_s"], 3) if r["wall_s"] > 0 else None
            s["same_verdicts_as_first"] = r["verdicts"] == base["verdicts"]
            s["differing"] = sorted(k for k in set(r["verdicts"]) | set(base["verdicts"])
                                    if r["verdicts"].get(k) != base["verdicts"].get(k))[:50]
            if r.get("per_min"):
                # Every problem of level 1 with 20 candidates, each verified under every profile.
                s["projected_level1_k20_hours"] = round(LEVEL1_PROBLEMS * 20 * profiles / r["per_min"] / 60, 2)
        sets.append(s)
    record = {
        "what": "the same kernelllm eval over pre-generated candidates on each device set, one fresh run each",
        "command": " ".join(sys.argv), "host": platform.node(), "problems": str(args.problems), "levels": args.levels,
        "candidates": str(args.candidates), "profiles": args.profiles, "complete": len(rows) == len(args.sets),
        "verdicts_identical": all(s.get("same_verdicts_as_first") for s in sets) if base else False,
        "sets": sets,
    }
    record["gpu"] = gpu_line()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    sys.exit(main())
