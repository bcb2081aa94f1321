#!/usr/bin/env python3
"""Verdicts and timings of `kernelllm verify` on a quiet GPU and on the same GPU loaded by other
processes (issue #3: outside load must not turn honest candidates into timing cheats, and hidden
work must still be caught).

The load is what kernelllm's per-GPU timing lock cannot order: other processes' CUDA contexts
launching matmuls between busy host loops, plus host-only spinners on the remaining cores (the
KernelBench agreement run had eight eval processes beside our verify calls). Each group is one
`kernelllm verify` call; every candidate's expected verdict comes from its `# expect:` header
(tests/cases), or is `correct` for a candidate without one (bench/eval_candidates are honest).

  python3 bench/verify_under_load.py --cli build/kernelllm --out under-load.json \
      --group strict tests/cases/problems/relu.py tests/cases/relu/correct_basic.py ... \
      --group kernelbench .kb0/KernelBench/level1/19_ReLU.py bench/eval_candidates/level1/19_ReLU/0.py
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cases"))
from case_header import parse_header  # noqa: E402

GPU_LOAD = r"""
import sys, time, torch
n = int(sys.argv[1])
x = torch.randn(n, n, device="cuda")
while True:
    for _ in range(4):
        y = x @ x
    torch.cuda.synchronize()
    t = time.perf_counter()
    while time.perf_counter() - t < 0.005:
        pass
"""

CPU_LOAD = "while True:\n    pass\n"


def start_load(gpu_procs: int, cpu_procs: int, matrix: int) -> list[subprocess.Popen]:
    procs = [subprocess.Popen([sys.executable, "-c", GPU_LOAD, str(matrix)]) for _ in range(gpu_procs)]
    procs += [subprocess.Popen([sys.executable, "-c", CPU_LOAD]) for _ in range(cpu_procs)]
    return procs


def stop_load(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def toggle_load(procs: list[subprocess.Popen], on_s: float, off_s: float, stop: threading.Event) -> None:
    """Bursts: the load runs for on_s, is stopped (SIGSTOP) for off_s, and so on, so a reference
    timed in a quiet moment meets candidates timed in a busy one."""
    while not stop.wait(on_s):
        for p in procs:
            p.send_signal(signal.SIGSTOP)
        if stop.wait(off_s):
            break
        for p in procs:
            p.send_signal(signal.SIGCONT)


def expected(path: str) -> tuple[str, str | None]:
    head = parse_header(Path(path))
    return head.get("expect", "correct"), head.get("rule")


def run_group(cli: str, profile: str, problem: str, candidates: list[str], device: str, workdir: Path,
              tag: str) -> dict:
    out = workdir / f"{tag}.json"
    cmd = [cli, "verify", problem, *candidates, "--profile", profile, "--verify-device", device, "--json", str(out),
           "--no-cache"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall_s = time.monotonic() - t0
    rows = []
    report = json.loads(out.read_text()) if out.exists() else None
    by_path = {c["path"]: c for c in (report or {}).get("candidates", [])}
    for cand in candidates:
        c = by_path.get(cand) or next((v for k, v in by_path.items() if k.endswith(cand)), None)
        want, want_rule = expected(cand)
        ev = (c or {}).get("evidence") or {}
        timing = (c or {}).get("timing") or {}
        row = {"candidate": cand, "expected": want, "expected_rule": want_rule,
               "verdict": c["verdict"] if c else "missing", "rule": (c or {}).get("rule") or None,
               "message": (c or {}).get("message", ""), "speedup": (c or {}).get("speedup"),
               "median_ms": timing.get("median_ms"),
               "flush_excess_ms": timing.get("flush_excess_ms"), "ping_ms": timing.get("ping_ms"),
               "timing_unstable": bool(ev.get("timing_unstable"))}
        row["as_expected"] = row["verdict"] == want and (want_rule is None or row["rule"] == want_rule)
        rows.append(row)
    ref = (report or {}).get("reference_timing") or {}
    return {"profile": profile, "problem": problem, "exit_code": proc.returncode, "wall_s": round(wall_s, 1),
            "reference_median_ms": ref.get("median_ms"), "rows": rows,
            "stderr_tail": proc.stderr[-2000:] if report is None else ""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--group", nargs="+", action="append", required=True, metavar="PROFILE PROBLEM CANDIDATE",
                    help="one verify call: profile, problem file, candidate files")
    ap.add_argument("--gpu-load", type=int, default=8, help="processes launching matmuls (default 8)")
    ap.add_argument("--cpu-load", type=int, default=max(0, (os.cpu_count() or 2) - 8),
                    help="host-only spinners (default: cores - 8)")
    ap.add_argument("--matrix", type=int, default=2048, help="load matmul size (default 2048)")
    ap.add_argument("--ramp-s", type=float, default=5.0)
    ap.add_argument("--phases", default="quiet,loaded",
                    help="comma-separated: quiet (no load), loaded (steady load), bursty (load on/off)")
    ap.add_argument("--burst-s", default="10,10", help="bursty phase: seconds on,off (default 10,10)")
    args = ap.parse_args()
    for g in args.group:
        if len(g) < 3:
            ap.error(f"--group needs PROFILE PROBLEM CANDIDATE..., got {g}")

    workdir = Path(tempfile.mkdtemp(prefix="kllm-load-"))
    phases = {}
    wanted = [p for p in args.phases.split(",") if p]
    if not wanted or set(wanted) - {"quiet", "loaded", "bursty"}:
        ap.error(f"--phases: expected quiet, loaded, bursty, got {args.phases}")
    on_s, off_s = (float(x) for x in args.burst_s.split(","))
    for phase in wanted:
        procs = start_load(args.gpu_load, args.cpu_load, args.matrix) if phase != "quiet" else []
        stop = threading.Event()
        toggler = threading.Thread(target=toggle_load, args=(procs, on_s, off_s, stop), daemon=True)
        try:
            if procs:
                time.sleep(args.ramp_s)
            if phase == "bursty":
                toggler.start()
            phases[phase] = [run_group(args.cli, g[0], g[1], g[2:], args.device, workdir, f"{phase}-{i}")
                             for i, g in enumerate(args.group)]
        finally:
            stop.set()
            if toggler.is_alive():
                toggler.join()
            for p in procs:
                p.send_signal(signal.SIGCONT)
            stop_load(procs)
        rows = [r for g in phases[phase] for r in g["rows"]]
        unstable = [r for r in rows if r["timing_unstable"]]
        print(f"{phase}: {sum(r['as_expected'] for r in rows)}/{len(rows)} as expected, {len(unstable)} timing(s) "
              "reported unstable", flush=True)
        for r in rows:
            mark = "ok " if r["as_expected"] else "BAD"
            print(f"  {mark} {r['candidate']}: {r['verdict']}{' [' + r['rule'] + ']' if r['rule'] else ''} "
                  f"median {r['median_ms']} ms, flush excess {r['flush_excess_ms']} ms"
                  f"{' UNSTABLE' if r['timing_unstable'] else ''}", flush=True)
    try:
        import torch
        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
        versions = {"torch": torch.__version__}
        import triton
        versions["triton"] = triton.__version__
    except Exception as e:  # the record still says what ran
        gpu, versions = f"unknown ({e})", {}
    all_rows = [r for p in phases.values() for g in p for r in g["rows"]]
    record = {"what": "kernelllm verify on a quiet GPU and under outside load (bench/verify_under_load.py)",
              "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
              "gpu": gpu, "versions": versions, "host": platform.node(), "cores": os.cpu_count(),
              "load": {"gpu_processes": args.gpu_load, "cpu_processes": args.cpu_load, "matrix": args.matrix,
                       "bursty_on_off_s": [on_s, off_s]},
              "as_expected": sum(r["as_expected"] for r in all_rows), "total": len(all_rows), "phases": phases}
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0 if record["as_expected"] == record["total"] else 1


if __name__ == "__main__":
    sys.exit(main())
