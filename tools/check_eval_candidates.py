#!/usr/bin/env python3
"""Checks the KernelBench Level-1 eval candidates under bench/eval_candidates/level1/<problem>/<sample>.py
with `kernelllm verify`: sample 0 and 2 (honest) must be `correct` (and pass the multi-shape check), sample 1
(deliberately flawed) must not be `correct`. The problems come from a KernelBench tree (--kernelbench, the
.kb layout) or the git mirror; by default each is scaled down (size globals rewritten) so the CPU Triton
interpreter finishes quickly. Prints a table; exits 1 when any candidate misses its expectation."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ROOT / "bench" / "eval_candidates" / "level1"
MIRROR = Path("/work/.mirror/ScalingIntelligence+KernelBench/repo")

_ELEMENTWISE = {"batch_size": "16", "dim": "1000"}
_REDUCE = {"batch_size": "4", "dim1": "1000", "dim2": "37"}
_ROWS = {"batch_size": "8", "dim": "5000"}  # rows longer than the 4096-wide blocks: the column loops run
# Module-level size globals of each problem, rewritten for the scaled-down CPU run. Ints below 8 (reduce
# dims) are left alone, as the verifier's multi-shape check leaves them; names used by __init__ (features,
# normalized_shape) are globals read at call time, so they stay consistent with the inputs.
SCALED = {
    "1_Square_matrix_multiplication_": {"N": "200"},
    "4_Matrix_vector_multiplication_": {"M": "64", "K": "5000"},
    "5_Matrix_scalar_multiplication": {"M": "64", "N": "300"},
    "19_ReLU": _ELEMENTWISE, "20_LeakyReLU": _ELEMENTWISE, "21_Sigmoid": _ELEMENTWISE, "22_Tanh": _ELEMENTWISE,
    "23_Softmax": _ROWS, "24_LogSoftmax": _ROWS,
    "25_Swish": _ELEMENTWISE, "26_GELU_": _ELEMENTWISE, "28_HardSigmoid": _ELEMENTWISE,
    "29_Softplus": _ELEMENTWISE, "30_Softsign": _ELEMENTWISE, "31_ELU": _ELEMENTWISE, "32_HardTanh": _ELEMENTWISE,
    "36_RMSNorm_": {"batch_size": "4", "features": "20", "dim1": "12", "dim2": "20"},
    "38_L1Norm_": {"batch_size": "16", "dim": "5000"},
    "39_L2Norm_": {"batch_size": "16", "dim": "5000"},
    "40_LayerNorm": {"batch_size": "4", "features": "8", "dim1": "24", "dim2": "40"},
    "47_Sum_reduction_over_a_dimension": _REDUCE,
    "48_Mean_reduction_over_a_dimension": _REDUCE,
    "49_Max_reduction_over_a_dimension": _REDUCE,
    "51_Argmax_over_a_dimension": _REDUCE,
    "53_Min_reduction_over_a_dimension": _REDUCE,
    "88_MinGPTNewGelu": _ELEMENTWISE,
    "94_MSELoss": {"batch_size": "64", "input_shape": "(3000,)"},
}
HONEST_SAMPLES = {"0", "2"}
FLAWED_SAMPLES = {"1"}


def find_cli(given: str | None) -> str:
    for c in (given, os.environ.get("KERNELLLM_CLI"), str(ROOT / "build" / "release" / "kernelllm")):
        if c and Path(c).is_file():
            return c
    found = shutil.which("kernelllm")
    if found is None:
        sys.exit("no kernelllm CLI: pass --cli, set KERNELLLM_CLI, or build build/release/kernelllm")
    return found


def problem_source(stem: str, kb_dir: Path | None, mirror: Path) -> str:
    """The problem's text: from <kb_dir>/KernelBench/level1/<stem>.py when a tree is given (or ./.kb exists),
    else from HEAD of the bare git mirror."""
    for base in ([kb_dir] if kb_dir else []) + [ROOT / ".kb"]:
        f = base / "KernelBench" / "level1" / f"{stem}.py"
        if f.is_file():
            return f.read_text()
        if kb_dir is not None and base == kb_dir:
            sys.exit(f"{f} does not exist (expected the .kb layout: DIR/KernelBench/level1/*.py)")
    r = subprocess.run(["git", "--git-dir", str(mirror), "show", f"HEAD:KernelBench/level1/{stem}.py"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"cannot read level1/{stem}.py from the mirror {mirror}: {r.stderr.strip()}")
    return r.stdout


def scale_problem(text: str, stem: str) -> str:
    """Rewrites the module-level `NAME = ...` lines named in SCALED[stem]; every one must be found."""
    for name, value in SCALED[stem].items():
        pattern = re.compile(rf"^{re.escape(name)}\s*=.*$", re.MULTILINE)
        if not pattern.search(text):
            sys.exit(f"{stem}: expected a module-level assignment to `{name}` to scale, found none")
        text = pattern.sub(f"{name} = {value}", text)
    return text


def multishape_of(entry: dict) -> str | None:
    m = entry.get("multishape")
    return m.get("verdict") if isinstance(m, dict) else None


def short(text: str, n: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "~"


def run_problem(stem: str, args, cli: str, work: Path) -> list[dict]:
    cands = sorted((CANDIDATES / stem).glob("*.py"), key=lambda p: p.stem)
    text = problem_source(stem, args.kernelbench, args.mirror)
    if not args.full_size:
        text = scale_problem(text, stem)
    prob_dir = work / stem
    prob_dir.mkdir(parents=True, exist_ok=True)
    problem = prob_dir / f"{stem}.py"
    problem.write_text(text)
    report_path = (args.json_dir / f"{stem}.json") if args.json_dir else prob_dir / "report.json"
    cmd = [cli, "verify", str(problem), *map(str, cands), "--device", args.device, "--json", str(report_path),
           "--jobs", str(args.jobs), "-q"]
    if not args.cache:
        cmd.append("--no-cache")
    if not args.timing:
        cmd.append("--no-timing")
    env = dict(os.environ)
    if args.device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=prob_dir, timeout=args.timeout)
    if not report_path.is_file():
        return [{"problem": stem, "sample": c.stem, "verdict": "no_report", "ok": False,
                 "detail": short(f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}", 200),
                 "multishape": None} for c in cands]
    entries = {str(Path(e.get("path", "")).resolve()): e for e in json.loads(report_path.read_text())["candidates"]}
    rows = []
    for c in cands:
        e = entries.get(str(c.resolve()), {})
        verdict = e.get("verdict", "missing")
        shapes = multishape_of(e)
        if c.stem in HONEST_SAMPLES:
            ok = verdict == "correct" and shapes != "fail"
            expect = "correct"
        elif c.stem in FLAWED_SAMPLES:
            ok = verdict not in ("correct", "missing")
            expect = "not correct"
        else:
            ok, expect = False, f"unknown sample name {c.stem!r}"
        detail = e.get("rule") or e.get("message", "")
        rows.append({"problem": stem, "sample": c.stem, "expect": expect, "verdict": verdict, "ok": ok,
                     "detail": short(detail), "multishape": shapes, "speedup": e.get("speedup")})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernelbench", type=Path, help="a KernelBench tree in the .kb layout (DIR/KernelBench/level1)")
    ap.add_argument("--mirror", type=Path, default=MIRROR, help="bare git mirror of KernelBench (fallback source)")
    ap.add_argument("--cli", help="the kernelllm binary (default: $KERNELLLM_CLI, build/release/kernelllm, PATH)")
    ap.add_argument("--device", default="cpu", help="cpu (Triton interpreter) or cuda / cuda:N")
    ap.add_argument("--jobs", type=int, default=2, help="parallel candidate workers per verify call")
    ap.add_argument("--only", nargs="*", default=None, help="problem stems to check (default: all)")
    ap.add_argument("--full-size", action="store_true", help="use the problems' own sizes (GPU); default scales down")
    ap.add_argument("--timing", action="store_true", help="time correct candidates (default off)")
    ap.add_argument("--cache", action="store_true", help="use the verifier's result cache (default --no-cache)")
    ap.add_argument("--json-dir", type=Path, help="keep each problem's verify report here as <stem>.json")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per verify call")
    args = ap.parse_args()
    cli = find_cli(args.cli)
    stems = sorted((p.name for p in CANDIDATES.iterdir() if p.is_dir()), key=lambda s: int(s.split("_")[0]))
    unknown = [s for s in stems if s not in SCALED]
    if unknown:
        sys.exit(f"candidate folders without a SCALED entry: {unknown}")
    if args.only:
        missing = sorted(set(args.only) - set(stems))
        if missing:
            sys.exit(f"--only names problems with no candidates: {missing}")
        stems = [s for s in stems if s in args.only]
    if args.json_dir:
        args.json_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="kllm-evalcands-") as tmp:
        for stem in stems:
            got = run_problem(stem, args, cli, Path(tmp))
            for r in got:
                print(f"{r['problem']:<36} {r['sample']:>2}  {r['verdict']:<17} {str(r['multishape'] or '-'):<5} "
                      f"{'ok' if r['ok'] else 'MISS':<4} {r['detail']}", flush=True)
            rows += got
    honest = [r for r in rows if r["sample"] in HONEST_SAMPLES]
    flawed = [r for r in rows if r["sample"] in FLAWED_SAMPLES]
    print(f"\n{len(stems)} problems, {len(rows)} candidates on {args.device}: honest correct "
          f"{sum(r['ok'] for r in honest)}/{len(honest)}, flawed rejected {sum(r['ok'] for r in flawed)}/{len(flawed)}")
    misses = [r for r in rows if not r["ok"]]
    for r in misses:
        print(f"MISS {r['problem']}/{r['sample']}.py: expected {r['expect']}, got {r['verdict']} ({r['detail']})")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
