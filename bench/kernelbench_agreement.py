"""Agreement of `kernelllm verify --profile kernelbench` with KernelBench's own eval on honest
candidates (tests/cases/kernelbench_agreement/*.py, each naming its problem in a
`# kernelbench: level1/NN_Name.py` header). Needs a GPU and a KernelBench checkout fetched by the
user (nothing of KernelBench is vendored here):

  python3 bench/kernelbench_agreement.py --kernelbench ~/src/KernelBench --device cuda:0 \
      --out bench/results/kernelbench-agreement-h100.json

KernelBench runs each candidate in its own child process (its eval is same-process: reference then
candidate); ours runs one `kernelllm verify` per problem. Verdicts are compared as pass/fail, and
the finer class (compile_error, runtime_error, wrong_shape, wrong_output) is recorded. Exit 1 on
any pass/fail disagreement.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import inspect
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cases"))
from case_header import parse_header as header  # noqa: E402
CASES = ROOT / "tests" / "cases" / "kernelbench_agreement"
# Verdicts either evaluator can give a candidate; anything else means that side did not judge it.
VERDICTS = {"correct", "wrong_output", "wrong_shape", "compile_error", "runtime_error", "crash", "timeout", "cheat",
            "sandbox_violation", "undiscriminating"}
HONEST_KINDS = {"correct", "wrong_output", "wrong_shape", "compile_error", "runtime_error"}


def problem_path(kernelbench: Path, rel: str) -> Path:
    for base in (kernelbench / "KernelBench", kernelbench):
        if (base / rel).is_file():
            return base / rel
    raise SystemExit(f"problem {rel} not found under {kernelbench}/KernelBench or {kernelbench}")


def _stand_in_modules(names: list[str]) -> None:
    import importlib

    class _Unused:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("an LLM client stand-in was called: the eval is not expected to use it")

    def _stand_in_attr(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unused

    for name in names:
        try:
            importlib.import_module(name)
        except Exception:
            mod = types.ModuleType(name)
            mod.__getattr__ = _stand_in_attr  # type: ignore[attr-defined]
            mod.__path__ = []  # type: ignore[attr-defined]
            sys.modules[name] = mod
            parent, _, child = name.rpartition(".")
            if parent in sys.modules:
                setattr(sys.modules[parent], child, mod)


# --- KernelBench side (runs in a child process with the checkout on sys.path) ------------------

def kernelbench_one(kernelbench: Path, problem: Path, candidate: Path, trials: int, device: str, perf_trials: int = 0) -> dict:
    """Calls KernelBench's eval_kernel_against_ref with the keyword arguments its version has."""
    sys.path[:0] = [str(kernelbench / "src"), str(kernelbench)]
    pkg_dir = kernelbench / "src" / "kernelbench"
    if (pkg_dir / "eval.py").is_file():
        # Current layout. The package's __init__ imports its LLM-client helpers (dotenv, openai,
        # litellm), which the eval never uses; register the package without running it. The eval
        # imports kernelbench.utils, which imports those clients too (and calls load_dotenv()):
        # stand-ins where they are not installed, a no-op load_dotenv.
        _stand_in_modules(["dotenv", "openai", "litellm", "tqdm", "requests"])
        if not hasattr(sys.modules["dotenv"], "__file__"):
            sys.modules["dotenv"].load_dotenv = lambda *args, **kwargs: False  # type: ignore[attr-defined]
        pkg = types.ModuleType("kernelbench")
        pkg.__path__ = [str(pkg_dir)]
        sys.modules["kernelbench"] = pkg
        from kernelbench.eval import eval_kernel_against_ref
    else:
        # Older layout (src/eval.py, KernelLLM's era): src/utils.py imports LLM-client packages
        # (together, openai, google.generativeai, anthropic) that the eval never calls; where
        # one is not installed, register an empty stand-in so that the import succeeds.
        _stand_in_modules(["together", "openai", "google", "google.generativeai", "anthropic", "tqdm", "requests"])
        from src.eval import eval_kernel_against_ref
    import torch

    dev = torch.device(device)
    wanted = {"original_model_src": problem.read_text(), "custom_model_src": candidate.read_text(),
              "seed_num": 42, "num_correct_trials": trials, "num_perf_trials": perf_trials or 10,
              "measure_performance": perf_trials > 0,
              "verbose": False, "device": dev, "backend": "triton", "build_dir": tempfile.mkdtemp(prefix="kb-build-"),
              "precision": torch.float32, "check_for_excessive_speedup": False}
    accepted = inspect.signature(eval_kernel_against_ref).parameters
    kwargs = {k: v for k, v in wanted.items() if k in accepted}
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    print("kb-eval-started", file=sys.stderr, flush=True)
    result = eval_kernel_against_ref(**kwargs)
    if result is None:  # some versions return None on a lock/compile race
        return {"verdict": "compile_error", "raw": None}
    metadata = {k: str(v) for k, v in (getattr(result, "metadata", None) or {}).items()}
    if not result.compiled:
        verdict = "compile_error"
    elif result.correctness:
        verdict = "correct"
    elif any("runtime_error" in k for k in metadata):
        verdict = "runtime_error"
    elif "shape" in json.dumps(metadata).lower():
        verdict = "wrong_shape"
    else:
        verdict = "wrong_output"
    runtime = getattr(result, "runtime", None)
    return {"verdict": verdict, "metadata": metadata, "kwargs_used": sorted(kwargs),
            "runtime_ms": runtime if isinstance(runtime, (int, float)) and runtime >= 0 else None}


def run_kernelbench(args, problem: Path, candidate: Path) -> dict:
    cmd = [sys.executable, __file__, "--kb-one", str(problem), str(candidate), "--kernelbench", str(args.kernelbench),
           "--device", args.device, "--trials", str(args.trials), "--kb-perf-trials", str(getattr(args, "kb_perf_trials", 0))]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    wall_s = round(time.perf_counter() - t0, 3)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        # KernelBench's eval runs the candidate in this child; a dead child is a crash only when
        # the eval itself started (it prints a marker first), otherwise the harness failed.
        started = "kb-eval-started" in r.stderr
        return {"verdict": "crash" if started else "harness_error", "returncode": r.returncode,
                "stderr_tail": r.stderr[-2000:], "wall_s": wall_s}
    return {**json.loads(lines[-1]), "wall_s": wall_s}


# --- our side --------------------------------------------------------------------------------------

def our_verdicts(args, problem: Path, candidates: list[Path], work: Path) -> dict[Path, dict]:
    out = work / f"{problem.stem}.json"
    cmd = [args.cli, "verify", str(problem), *map(str, candidates), "--profile", "kernelbench",
           "--kernelbench-tolerance", args.kernelbench_tolerance, "--verify-device", args.device, "--json", str(out),
           "--no-cache"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    wall_s = round(time.perf_counter() - t0, 3)
    if not out.is_file():
        return {c: {"verdict": "no_report", "returncode": r.returncode, "stderr_tail": r.stderr[-2000:]}
                for c in candidates}
    report = json.loads(out.read_text())
    entries = report if isinstance(report, list) else report.get("results", report.get("candidates", []))
    found = {}
    for candidate, entry in zip(candidates, entries):
        for key in ("candidate", "path", "file"):
            if isinstance(entry.get(key), str):
                match = [c for c in candidates if Path(entry[key]).resolve() == c.resolve()]
                candidate = match[0] if match else candidate
                break
        verdict = entry.get("verdict")
        if isinstance(verdict, dict):
            verdict = verdict.get("verdict") or verdict.get("kind")
        found[candidate] = {"verdict": verdict, "entry": entry, "call_wall_s": wall_s}
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernelbench", type=Path, required=True, help="a KernelBench checkout (its eval code)")
    parser.add_argument("--problems-root", type=Path,
                        help="take the problem files from this KernelBench checkout instead (e.g. the June 2025 sizes "
                             "with a later eval that runs Triton candidates)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--trials", type=int, default=5, help="correctness trials (KernelBench's default is 5)")
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--with-cases", action="store_true",
                        help="also compare on tests/cases candidates labelled correct/wrong/compile/runtime error")
    parser.add_argument("--cli", default=os.environ.get("KERNELLLM_CLI") or shutil.which("kernelllm") or "kernelllm")
    parser.add_argument("--timeout", type=int, default=1800)
    parser.add_argument("--out", type=Path, help="write the comparison as JSON")
    parser.add_argument("--candidates-dir", type=Path, action="append", default=[],
                        help="also <problem stem>/<sample>.py candidates for level1/<stem>.py (e.g. bench/eval_candidates/level1)")
    parser.add_argument("--kb-jobs", type=int, default=8, help="KernelBench evals run at once (one child process each)")
    parser.add_argument("--kernelbench-tolerance", choices=["v0", "current"], default="v0",
                        help="our kernelbench profile's tolerance version: v0 (1e-2) matches KernelBench's June 2025 "
                             "eval, current (1e-4 for fp32) its eval since")
    parser.add_argument("--ours-jobs", type=int, default=4,
                        help="`kernelllm verify` calls (one per problem) run at once; timing shares the GPU's lock")
    parser.add_argument("--kb-one", nargs=2, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--kb-perf-trials", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.kb_one:
        print(json.dumps(kernelbench_one(args.kernelbench, args.kb_one[0], args.kb_one[1], args.trials, args.device,
                                         args.kb_perf_trials)))
        return 0

    by_problem: dict[Path, list[Path]] = {}
    for candidate in sorted(args.cases.glob("*.py")):
        rel = header(candidate).get("kernelbench")
        if rel:
            by_problem.setdefault(problem_path(args.problems_root or args.kernelbench, rel), []).append(candidate)
    if args.with_cases:
        # Our own labelled cases whose outcome does not depend on cheat or sandbox rules: both
        # evaluators should agree on honest kernels and on plainly wrong or broken ones.
        suite = ROOT / "tests" / "cases"
        for problem in sorted((suite / "problems").glob("*.py")):
            for candidate in sorted((suite / problem.stem).glob("*.py")):
                head = header(candidate)
                if head.get("device", "any") == "cuda" and not args.device.startswith("cuda"):
                    continue
                if head.get("expect") in HONEST_KINDS and "multishape" not in head:
                    by_problem.setdefault(problem, []).append(candidate)
    for cdir in args.candidates_dir:
        level = cdir.name if cdir.name.startswith("level") else "level1"
        for sub in sorted(d for d in cdir.iterdir() if d.is_dir()):
            problem = problem_path(args.problems_root or args.kernelbench, f"{level}/{sub.name}.py")
            by_problem.setdefault(problem, []).extend(sorted(sub.glob("*.py")))
    if not by_problem:
        raise SystemExit(f"no candidates with a '# kernelbench:' header under {args.cases}")

    rows = []
    with tempfile.TemporaryDirectory(prefix="kb-agreement-") as tmp:
        # KernelBench's side: one child per candidate, --kb-jobs at once (correctness only, so
        # sharing the GPU does not change a verdict); ours: one verify call per problem,
        # --ours-jobs at once. The JSON is rewritten after every problem, so a run stopped
        # part-way still leaves its rows.
        pairs = [(problem, candidate) for problem, candidates in by_problem.items() for candidate in candidates]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.kb_jobs)) as pool, \
                concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.ours_jobs)) as ours_pool:
            futures = {pair: pool.submit(run_kernelbench, args, *pair) for pair in pairs}
            ours_futures = {problem: ours_pool.submit(our_verdicts, args, problem, candidates, Path(tmp))
                            for problem, candidates in by_problem.items()}
            for problem, candidates in by_problem.items():
                ours = ours_futures[problem].result()
                for candidate in candidates:
                    theirs = futures[(problem, candidate)].result()
                    mine = ours.get(candidate, {"verdict": "missing"})
                    judged = theirs["verdict"] in VERDICTS and mine["verdict"] in VERDICTS
                    rows.append({"problem": problem.name, "candidate": f"{candidate.parent.name}/{candidate.name}",
                                 "expect": header(candidate).get("expect"), "kernelbench": theirs["verdict"],
                                 "kernelllm": mine["verdict"],
                                 "agree": ((theirs["verdict"] == "correct") == (mine["verdict"] == "correct"))
                                 if judged else None,
                                 "kernelbench_wall_s": theirs.get("wall_s"),
                                 "kernelllm_call_wall_s": mine.get("call_wall_s"),
                                 "kernelbench_detail": theirs, "kernelllm_detail": mine.get("entry", mine)})
                if args.out:
                    write_out(args, rows, complete=False)
    width = max(len(r["candidate"]) for r in rows)
    for r in rows:
        print(f"{r['candidate']:<{width}}  kernelbench={r['kernelbench']:<14} kernelllm={r['kernelllm']!s:<14} "
              f"{ {True: 'agree', False: 'DISAGREE', None: 'NOT JUDGED'}[r['agree']] }")
    agreed = sum(r["agree"] is True for r in rows)
    print(f"agreement: {agreed}/{len(rows)} (not judged by one side: {sum(r['agree'] is None for r in rows)})")
    if args.out:
        write_out(args, rows, complete=True)
    return 0 if agreed == len(rows) else 1


def write_out(args, rows: list[dict], complete: bool) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"device": args.device, "host": platform.node(), "trials": args.trials,
                               "kernelbench": str(args.kernelbench), "problems_root": str(args.problems_root or args.kernelbench),
                               "kernelbench_tolerance": args.kernelbench_tolerance,
                               "complete": complete, "agreed": sum(r["agree"] is True for r in rows),
                               "total": len(rows), "rows": rows}, indent=1))
    tmp.replace(args.out)


if __name__ == "__main__":
    sys.exit(main())
