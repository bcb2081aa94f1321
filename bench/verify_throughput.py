"""Verifier throughput: every candidate of every problem verified with one `kernelllm verify` call
per problem, as an eval run would, --concurrency calls at once (as eval shards sharing a GPU:
timing stays exclusive per GPU through the verifier's lock). Problems: the labelled cases (tests/cases), or with
--problems-dir/--candidates-dir a KernelBench-style set (PROBLEMS/<stem>.py, CANDIDATES/<stem>/*.py,
e.g. .kb/KernelBench/level1 with bench/eval_candidates/level1). Records candidates per minute, the
wall time of each call, and per-phase times summed over candidates (start: waiting for a
pre-warmed worker; compile: import + construction + first launch; correctness: the trials;
timing: the timed loops; multishape: the check on other sizes), as the verifier reports them in
each candidate's evidence.phases, and each call's timeline (the report's timeline_ms: set-up done,
every candidate done, finalists re-timed, end), its use of the GPU's lock by purpose (gpu_use:
takings, waits and holds, yields to timers, summed over calls as gpu_use_summed) and its judges'
requests by op (judge_ms, summed as judge_ms_summed).

  python3 bench/verify_throughput.py --cli build/kernelllm --device cuda:0 --out bench/results/verify-throughput-h100.json
  python3 bench/verify_throughput.py --cli build/kernelllm --problems-dir .kb/KernelBench/level1 \
      --candidates-dir bench/eval_candidates/level1 --out OUT.json

With --kernelbench DIR (a KernelBench checkout beside the tree, never committed) the same
candidates then go through KernelBench's own eval_kernel_against_ref on the same device, in the
same run: one fresh process per candidate, --kb-jobs at once (1: one after another, as its own
scripts run), correctness trials as ours and --kb-perf-trials timed calls (its timing on, as ours
is). The record then holds both rates and their ratio (issue #43: ours >= 6x).

With --driver eval, ours is one `kernelllm eval` run over the same candidates instead (strict profile,
--multishape, timing; --concurrency problems at once through --problem-jobs): one process, one
zygote and one set of GPU locks for all problems, as someone scoring thousands of candidates runs
it. Per-candidate phases then come from the run store's results; eval selects no finalist, so there
is no re-timing. --driver both runs the verify calls, then the eval run, and records both.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cases"))
from case_header import parse_header as header  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import kernelbench_agreement  # noqa: E402
from gpu_facts import gpu_line  # noqa: E402
CASES = ROOT / "tests" / "cases"
PHASES = ("start_ms", "compile_ms", "correctness_ms", "kernel_profile_ms", "timing_ms", "timing_wait_ms", "multishape_ms")


def problems_from_dirs(problem_dir: Path, candidate_dir: Path) -> dict[Path, list[Path]]:
    found: dict[Path, list[Path]] = {}
    for sub in sorted(d for d in candidate_dir.iterdir() if d.is_dir()):
        problem = problem_dir / f"{sub.name}.py"
        if not problem.is_file():
            raise SystemExit(f"{sub}: expected the problem {problem}, found no such file")
        found[problem] = sorted(sub.glob("*.py"), key=lambda c: (len(c.stem), c.stem))
    if not found:
        raise SystemExit(f"{candidate_dir}: expected <problem stem>/<sample>.py candidate dirs, found none")
    return found


def problems(device: str) -> dict[Path, list[Path]]:
    found: dict[Path, list[Path]] = {}
    for problem in sorted((CASES / "problems").glob("*.py")):
        for case in sorted((CASES / problem.stem).glob("*.py")):
            if header(case).get("device", "any") == "cuda" and not device.startswith("cuda"):
                continue
            found.setdefault(problem, []).append(case)
    return found


def write_partial(out: Path, calls: list, n_candidates: int, wall_s: float) -> None:
    """The rows so far (a device call can end before the last problem); replaced by the full record."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"complete": False, "command": " ".join(sys.argv), "candidates": n_candidates,
                               "wall_s": round(wall_s, 2), "calls": calls}, indent=1))


def kernelbench_pass(args, work: dict[Path, list[Path]], ours: dict) -> dict:
    """KernelBench's eval on the same (problem, candidate) pairs, timed as a whole. Each row as it
    comes is written beside our record (`ours`, already complete), so a cut-off run keeps them."""
    pairs = [(problem, c) for problem, cases in work.items() for c in cases]
    t0 = time.perf_counter()
    done: list = []
    lock = threading.Lock()

    def one(pc):
        r = kernelbench_agreement.run_kernelbench(args, *pc)
        with lock:
            done.append({"problem": pc[0].stem, "candidate": str(pc[1]), "verdict": r["verdict"],
                         "wall_s": r.get("wall_s")})
            partial = dict(ours, kernelbench={"complete": False, "candidates": len(pairs),
                                              "wall_s": round(time.perf_counter() - t0, 2), "rows": done})
            args.out.write_text(json.dumps(partial, indent=1))
        return pc, r

    with ThreadPoolExecutor(max_workers=max(1, args.kb_jobs)) as pool:
        rows = list(pool.map(one, pairs))
    wall_s = time.perf_counter() - t0
    verdicts: dict[str, int] = {}
    per = []
    for (problem, candidate), r in rows:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
        per.append({"problem": problem.stem, "candidate": str(candidate), "verdict": r["verdict"],
                    "wall_s": r.get("wall_s"), "runtime_ms": r.get("runtime_ms")})
        print(f"kernelbench {problem.stem:<22} {Path(candidate).name:<12} {r['verdict']:<14} {r.get('wall_s', 0):7.1f} s",
              flush=True)
    return {"what": "KernelBench's eval_kernel_against_ref, one fresh process per candidate",
            "kernelbench": str(args.kernelbench), "jobs": args.kb_jobs, "correct_trials": args.trials,
            "perf_trials": args.kb_perf_trials, "candidates": len(pairs), "total_wall_s": round(wall_s, 2),
            "candidates_per_min": round(60.0 * len(pairs) / wall_s, 2) if wall_s > 0 else None,
            "verdicts": verdicts, "rows": per}


def add_use(gpu_use: dict, judge_ms: dict, report: dict) -> None:
    """Adds one verify call's use of the GPU lock (by purpose) and its judges' requests (by op),
    from its report or its line in an eval run's verify-calls.jsonl."""
    for what, u in (report.get("gpu_use") or {}).items():
        acc = gpu_use.setdefault(what, {"mode": u.get("mode"), "n": 0, "wait_ms": 0.0, "hold_ms": 0.0, "max_hold_ms": 0.0})
        acc["n"] += u.get("n", 0)
        acc["wait_ms"] += u.get("wait_ms", 0.0)
        acc["hold_ms"] += u.get("hold_ms", 0.0)
        acc["max_hold_ms"] = max(acc["max_hold_ms"], u.get("max_hold_ms", 0.0))
        if "timer_waited_ms" in u:
            acc["timer_waited_ms"] = acc.get("timer_waited_ms", 0.0) + u["timer_waited_ms"]
        if u.get("yields"):
            acc["yields"] = acc.get("yields", 0) + u["yields"]
            acc["yield_ms"] = acc.get("yield_ms", 0.0) + u.get("yield_ms", 0.0)
    for op, u in (report.get("judge_ms") or {}).items():
        acc = judge_ms.setdefault(op, {"n": 0, "ms": 0.0, "max_ms": 0.0})
        acc["n"] += u.get("n", 0)
        acc["ms"] += u.get("ms", 0.0)
        acc["max_ms"] = max(acc["max_ms"], u.get("max_ms", 0.0))


def rounded_use(gpu_use: dict, judge_ms: dict) -> dict:
    def r(d: dict) -> dict:
        return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in d.items()}
    return {"gpu_use_summed": {w: r(u) for w, u in gpu_use.items()},
            "judge_ms_summed": {op: r(u) for op, u in judge_ms.items()}}


def eval_pass(args, work: dict[Path, list[Path]], env: dict, tmp: str) -> dict:
    """Ours through one `kernelllm eval` run: the problems and candidates copied into the layout eval
    reads (PROBLEMS/<stem>.py, CANDIDATES/<stem>/<i>.py), strict profile, multi-shape check on."""
    root = Path(tmp) / "eval"
    problems_dir, cands_dir, run_dir = root / "problems", root / "candidates", root / "run"
    for problem, cases in work.items():
        problems_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(problem, problems_dir / problem.name)
        (cands_dir / problem.stem).mkdir(parents=True, exist_ok=True)
        for i, case in enumerate(cases):
            shutil.copyfile(case, cands_dir / problem.stem / f"{i}.py")
    cmd = [args.cli, "eval", "--problems", str(problems_dir), "--candidates", str(cands_dir), "--out", str(run_dir),
           "--verify-device", args.device, "--profiles", "strict",
           "--no-multishape" if args.no_multishape else "--multishape", "--problem-jobs",
           str(max(1, args.concurrency)), "--jobs", str(args.jobs), "-q"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall_s = time.perf_counter() - t0
    store = run_dir / "run.sqlite"
    if r.returncode != 0 or not store.is_file():
        raise SystemExit(f"eval driver: exit {r.returncode}\n{r.stderr[-3000:]}")
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT problem, sample, verdict, result FROM verdicts ORDER BY problem, sample").fetchall()
    finally:
        db.close()
    totals, verdicts, per_problem, shapes = {p: 0.0 for p in PHASES}, {}, {}, {}
    for problem, sample, verdict, result in rows:
        stem = problem.split("/")[-1]
        res = json.loads(result)
        phases = (res.get("evidence") or {}).get("phases") or {}
        for ph in PHASES:
            totals[ph] += phases.get(ph, 0.0)
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
        ms = res.get("multishape")
        if ms:
            shapes[ms["verdict"]] = shapes.get(ms["verdict"], 0) + 1
        row = per_problem.setdefault(stem, {"problem": stem, "candidates": 0, "verdicts": [], "multishape": [],
                                            "phases_ms": {ph: 0.0 for ph in PHASES}})
        row["candidates"] += 1
        row["verdicts"].append(verdict)
        row["multishape"].append(ms["verdict"] if ms else None)
        for ph in PHASES:
            row["phases_ms"][ph] = round(row["phases_ms"][ph] + phases.get(ph, 0.0), 1)
    gpu_use, judge_ms = {}, {}
    calls = run_dir / "verify-calls.jsonl"
    if args.reports_dir:
        # Each verify call's timeline and each candidate's phases, to take the wall time apart.
        args.reports_dir.mkdir(parents=True, exist_ok=True)
        if calls.is_file():
            shutil.copyfile(calls, args.reports_dir / "verify-calls.jsonl")
        with open(args.reports_dir / "eval-candidates.jsonl", "w") as f:
            for problem, sample, verdict, result in rows:
                res = json.loads(result)
                ev = res.get("evidence") or {}
                f.write(json.dumps({"problem": problem, "sample": sample, "verdict": verdict,
                                    "phases": ev.get("phases"), "worker_start": ev.get("worker_start"),
                                    "trip_steps_ms": (res.get("timing") or {}).get("trip_steps_ms"),
                                    "check_excess_share": (res.get("timing") or {}).get("check_excess_share"),
                                    "profiled_steps_ms": ev.get("profiled_steps_ms"),
                                    "load_steps_ms": ev.get("load_steps_ms")}) + "\n")
    for line in (calls.read_text().splitlines() if calls.is_file() else []):
        add_use(gpu_use, judge_ms, json.loads(line))
    # Where the GPU lock's time went in the run (exclusive, draining for a timer, shared, free).
    inv = run_dir / "invocations.jsonl"
    runs = inv.read_text().splitlines() if inv.is_file() else []
    last = json.loads(runs[-1]) if runs else {}
    gpu_lock = {g: {k: round(v, 1) for k, v in t.items()} for g, t in (last.get("gpu_lock") or {}).items()}
    n = len(rows)
    print(f"eval driver: GPU lock time {json.dumps(gpu_lock)}", flush=True)
    print(f"eval driver: {n} candidates over {len(per_problem)} problems in {wall_s:.1f} s: "
          f"{round(60.0 * n / wall_s, 2)} candidates/min", flush=True)
    return {"what": f"one kernelllm eval run (strict profile, {'no multi-shape check' if args.no_multishape else '--multishape'}, "
                    "timing on; no finalist re-timing: eval selects none)",
            "command": " ".join(cmd), "problem_jobs": max(1, args.concurrency), "problems": len(per_problem),
            "candidates": n, "total_wall_s": round(wall_s, 2),
            "candidates_per_min": round(60.0 * n / wall_s, 2) if wall_s > 0 else None,
            "phases_ms_summed": {ph: round(v, 1) for ph, v in totals.items()}, "verdicts": verdicts,
            "multishape": shapes, "gpu_lock": gpu_lock, **rounded_use(gpu_use, judge_ms),
            "per_problem": list(per_problem.values())}


def warm_up(env: dict, device: str) -> float:
    """Imports torch, Triton and NumPy once and makes a CUDA context, in the interpreter the CLI's
    workers use (its seconds): the file cache and the driver are then as warm for ours as for
    KernelBench's eval, which runs after it."""
    code = "import torch, triton, numpy\n" + (f"torch.zeros(1, device={device!r})\n" if device != "cpu" else "")
    t0 = time.perf_counter()
    r = subprocess.run([env.get("KERNELLLM_PYTHON") or "python3", "-c", code], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"warm-up failed (exit {r.returncode}): {r.stderr[-2000:]}")
    return round(time.perf_counter() - t0, 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=0, help="passed to verify --jobs (0: its default)")
    ap.add_argument("--concurrency", type=int, default=1,
                    help="verify calls at once (they share the GPU; timing stays exclusive through its lock)")
    ap.add_argument("--problems-dir", type=Path, help="KernelBench-style problems (with --candidates-dir)")
    ap.add_argument("--candidates-dir", type=Path, help="<problem stem>/<sample>.py candidates")
    ap.add_argument("--kernelbench", type=Path, help="also run KernelBench's eval on the same candidates (its checkout)")
    ap.add_argument("--kb-jobs", type=int, default=1, help="KernelBench evals at once (one fresh process each)")
    ap.add_argument("--kb-perf-trials", type=int, default=100, help="KernelBench's timed calls per candidate (its default)")
    ap.add_argument("--trials", type=int, default=5, help="KernelBench's correctness trials (ours: 5)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per KernelBench eval")
    ap.add_argument("--reports-dir", type=Path, help="keep each verify call's JSON report here (<problem stem>.json)")
    ap.add_argument("--driver", choices=("calls", "eval", "both"), default="calls",
                    help="calls: one verify call per problem, --concurrency at once; eval: one eval run with "
                         "--problem-jobs --concurrency and --multishape; both: the calls, then the eval run")
    ap.add_argument("--no-multishape", action="store_true",
                    help="eval driver: without the multi-shape check (to see what it and its judges cost; a record "
                         "for the issue's target keeps it on)")
    ap.add_argument("--no-warmup", action="store_true",
                    help="skip the interpreter warm-up (torch, Triton and NumPy imported, a CUDA context made, once) "
                         "before ours: without it a fresh machine's cold file cache falls on ours alone, since "
                         "KernelBench's eval runs after it")
    args = ap.parse_args()
    if (args.problems_dir is None) != (args.candidates_dir is None):
        ap.error("--problems-dir and --candidates-dir go together")
    work = (problems_from_dirs(args.problems_dir, args.candidates_dir) if args.problems_dir
            else problems(args.device))
    env = dict(os.environ)
    if args.device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    warmup_s = None if args.no_warmup else warm_up(env, args.device)
    calls, totals, n_candidates, verdicts = [], {p: 0.0 for p in PHASES}, 0, {}
    gpu_use: dict[str, dict] = {}
    judge_ms: dict[str, dict] = {}
    lock = threading.Lock()
    t_all = time.perf_counter()

    def one(problem: Path, cases: list[Path], tmp: str) -> str | None:
        nonlocal n_candidates
        out = Path(tmp) / f"{problem.stem}.json"
        cmd = [args.cli, "verify", str(problem), *map(str, cases), "--verify-device", args.device, "--json", str(out),
               "--no-cache", "--quiet", "--jobs", str(args.jobs)]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall_s = time.perf_counter() - t0
        if not out.is_file():
            return f"{problem.stem}: no report (exit {r.returncode})\n{r.stderr[-2000:]}"
        report = json.loads(out.read_text())
        if args.reports_dir:
            args.reports_dir.mkdir(parents=True, exist_ok=True)
            (args.reports_dir / out.name).write_text(out.read_text())
        entries = report["candidates"]
        phase_sums = {p: sum(((e.get("evidence") or {}).get("phases") or {}).get(p, 0.0) for e in entries) for p in PHASES}
        with lock:
            for p in PHASES:
                totals[p] += phase_sums[p]
            for e in entries:
                verdicts[e["verdict"]] = verdicts.get(e["verdict"], 0) + 1
            add_use(gpu_use, judge_ms, report)
            n_candidates += len(entries)
            calls.append({"problem": problem.stem, "candidates": len(entries), "wall_s": round(wall_s, 3),
                          "started_s": round(t0 - t_all, 3), "phases_ms": {p: round(v, 1) for p, v in phase_sums.items()},
                          "verdicts": [e["verdict"] for e in entries], "sandbox": report.get("sandbox"),
                          "timeline_ms": {k: round(v, 1) for k, v in (report.get("timeline_ms") or {}).items()},
                          "gpu_use": report.get("gpu_use") or {}, "judge_ms": report.get("judge_ms") or {}})
            write_partial(args.out, calls, n_candidates, time.perf_counter() - t_all)
            print(f"{problem.stem:<22} {len(entries):>3} candidates  {wall_s:7.1f} s  "
                  + "  ".join(f"{p[:-3]} {phase_sums[p] / 1000:.1f}s" for p in PHASES), flush=True)
        return None

    result = {"complete": False, "command": " ".join(sys.argv), "device": args.device, "concurrency": args.concurrency,
              "host": platform.node(), "driver": args.driver,
              "warmup_s": warmup_s}
    with tempfile.TemporaryDirectory(prefix="verify-throughput-") as tmp:
        if args.driver in ("calls", "both"):
            with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
                futures = [pool.submit(one, problem, cases, tmp) for problem, cases in work.items()]
                failures = [f.result() for f in futures]
            failures = [f for f in failures if f]
            if failures:
                print("\n".join(failures), file=sys.stderr)
                return 1
            total_s = time.perf_counter() - t_all
            result.update({
                "complete": True,
                "what": f"kernelllm verify throughput (one verify call per problem, {args.concurrency} at a time): "
                        + (f"{args.problems_dir} with {args.candidates_dir}" if args.problems_dir else "tests/cases"),
                "problems": len(calls),
                "candidates": n_candidates,
                "total_wall_s": round(total_s, 2),
                "candidates_per_min": round(60.0 * n_candidates / total_s, 2),
                "phases_ms_summed": {p: round(v, 1) for p, v in totals.items()},
                **rounded_use(gpu_use, judge_ms),
                "verdicts": verdicts,
                "calls": calls,
            })
            result["gpu"] = gpu_line()
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1))
            print(f"{n_candidates} candidates over {len(calls)} problems in {total_s:.1f} s: "
                  f"{result['candidates_per_min']} candidates/min", flush=True)
        if args.driver in ("eval", "both"):
            ev = eval_pass(args, work, env, tmp)
            result["eval"] = ev
            if args.driver == "eval":
                result.update({"complete": True, "what": f"kernelllm eval throughput: {ev['what']}",
                               "problems": ev["problems"], "candidates": ev["candidates"],
                               "total_wall_s": ev["total_wall_s"], "candidates_per_min": ev["candidates_per_min"],
                               "phases_ms_summed": ev["phases_ms_summed"], "verdicts": ev["verdicts"]})
                result["gpu"] = gpu_line()
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1))
    kb = kernelbench_pass(args, work, result) if args.kernelbench else None
    if kb is not None:
        result["kernelbench"] = kb
        result["kernelbench_candidates_per_min"] = kb["candidates_per_min"]
        ratio = lambda ours: round(ours / kb["candidates_per_min"], 2) if kb["candidates_per_min"] and ours else None
        result["ratio_to_kernelbench"] = ratio(result["candidates_per_min"])
        if "eval" in result:
            result["eval"]["ratio_to_kernelbench"] = ratio(result["eval"]["candidates_per_min"])
        args.out.write_text(json.dumps(result, indent=1))
        print(f"KernelBench's eval: {kb['candidates_per_min']} candidates/min; ratio {result['ratio_to_kernelbench']}"
              + (f" (eval driver {result['eval']['ratio_to_kernelbench']})" if "eval" in result and args.driver == "both"
                 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
