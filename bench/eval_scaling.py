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

--replicate R: every candidate R times (a comment line apart, so each is verified, never a cache
hit): more samples per problem, as at k = 20, where a run's fixed start (the zygote's imports, the
first judges) weighs less than in 42 candidates. Before the sets an untimed warm-up eval of one
problem (--no-warmup to skip it) leaves the host as the sets after the first find it (page cache,
the interpreter probe's cache), so the first set does not alone pay the host's cold start.
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


def replicated(candidates: Path, times: int, work: Path) -> Path:
    """A candidates dir with each problem's files 0..n-1 as samples 0..times*n-1 (replica r of
    file i is sample r*n + i, its text the original after one comment line naming both)."""
    out = work / f"candidates-x{times}"
    if out.exists():
        shutil.rmtree(out)
    for d in sorted(p for p in candidates.iterdir() if p.is_dir()):
        files = sorted(d.glob("*.py"), key=lambda f: int(f.stem))
        (out / d.name).mkdir(parents=True)
        for r in range(times):
            for i, f in enumerate(files):
                (out / d.name / f"{r * len(files) + i}.py").write_text(f"# replica {r} of sample {f.stem}\n" + f.read_text())
    return out


def warm_up(args, devices: str) -> float | None:
    """One untimed eval of the first problem with its candidates on `devices`; its wall time
    (None when no problem has candidates: the sets then fail on their own)."""
    problems, candidates = args.work / "warmup-problems", args.work / "warmup-candidates"
    for d in (problems, candidates, args.work / "warmup-run"):
        if d.exists():
            shutil.rmtree(d)
    level = args.levels.split(",")[0] if args.levels else ""
    src = args.problems / f"level{level}" if level else args.problems
    first = next((f for f in sorted(src.glob("*.py")) if (args.candidates / f.stem).is_dir()), None)
    if first is None:
        return None
    dst = problems / f"level{level}" if level else problems
    dst.mkdir(parents=True)
    shutil.copyfile(first, dst / first.name)
    shutil.copytree(args.candidates / first.stem, candidates / first.stem)
    cmd = [args.cli, "eval", "--problems", str(problems), "--candidates", str(candidates), "--out", str(args.work / "warmup-run"),
           "--verify-device", devices, "--profiles", args.profiles, "-q", *(["--levels", level] if level else []), *args.eval_args]
    t0 = time.perf_counter()
    subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    return round(time.perf_counter() - t0, 2)


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
    invocations = run_dir / "invocations.jsonl"
    if invocations.is_file():  # where each GPU lock's time went (held by a timer, draining, shared, free)
        row["gpu_lock"] = json.loads(invocations.read_text().splitlines()[-1]).get("gpu_lock")
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
    ap.add_argument("--replicate", type=int, default=1, help="each candidate this many times (samples per problem x R)")
    ap.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                    help="an untimed eval of one problem before the sets (default on)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--eval-args", nargs=argparse.REMAINDER, default=[], help="further eval options (last)")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    args.source_candidates = args.candidates
    if args.replicate > 1:
        args.candidates = replicated(args.candidates, args.replicate, args.work)
    args.warmup_s = warm_up(args, args.sets[0]) if args.warmup else None
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
        "candidates": str(args.source_candidates), "replicate": args.replicate, "warmup_s": args.warmup_s,
        "profiles": args.profiles, "complete": len(rows) == len(args.sets),
        "verdicts_identical": all(s.get("same_verdicts_as_first") for s in sets) if base else False,
        "sets": sets,
    }
    record["gpu"] = gpu_line()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    sys.exit(main())
