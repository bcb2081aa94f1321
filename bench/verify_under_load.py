"""Verdicts of `kernelllm verify` while other processes load the same GPU and host outside the
verifier's timing lock (as KernelBench's eval did in bench/results/kernelbench-agreement-h100.json):
N load processes each launch small CUDA kernels and synchronize in a tight loop; the same verify
call runs once without load and once with it. Honest candidates must keep their verdict.

  python3 bench/verify_under_load.py --cli build/kernelllm --problem P.py --candidates A.py B.py \
      --profile kernelbench --load 8 --out bench/results/verify-under-load-h100.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def load_loop(stop, device: str) -> None:
    import torch

    x = torch.randn(1 << 20, device=device)
    while not stop.is_set():
        for _ in range(50):
            x = torch.relu(x * 1.0001)
        torch.cuda.synchronize()


def verify(args, label: str, work: Path) -> dict:
    out = work / f"{label}.json"
    cmd = [args.cli, "verify", str(args.problem), *map(str, args.candidates), "--device", args.device,
           "--profile", args.profile, "--json", str(out), "--no-cache"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall_s = round(time.perf_counter() - t0, 2)
    if not out.is_file():
        return {"error": f"exit {r.returncode}", "stderr_tail": r.stderr[-2000:], "wall_s": wall_s}
    report = json.loads(out.read_text())
    keep = ("wall_gap_ms", "reference_wall_gap_ms", "recheck_wall_gap_ms", "recheck_reference_wall_gap_ms",
            "timing_disturbed")
    return {"wall_s": wall_s, "candidates": [
        {"path": c["path"], "verdict": c["verdict"], "rule": c.get("rule", ""), "message": c.get("message", "")[:400],
         "speedup": c.get("speedup"), "evidence": {k: v for k, v in (c.get("evidence") or {}).items() if k in keep}}
        for c in report["candidates"]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--problem", type=Path, required=True)
    ap.add_argument("--candidates", type=Path, nargs="+", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--profile", default="strict")
    ap.add_argument("--load", type=int, default=8, help="load processes")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    result = {"command": " ".join(sys.argv), "host": platform.node(), "load_processes": args.load}
    with tempfile.TemporaryDirectory(prefix="verify-load-") as tmp:
        result["quiet"] = verify(args, "quiet", Path(tmp))
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        procs = [ctx.Process(target=load_loop, args=(stop, args.device), daemon=True) for _ in range(args.load)]
        for p in procs:
            p.start()
        time.sleep(10)  # let every load process reach its loop
        try:
            result["loaded"] = verify(args, "loaded", Path(tmp))
        finally:
            stop.set()
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
    quiet = [c["verdict"] for c in result["quiet"].get("candidates", [])]
    loaded = [c["verdict"] for c in result["loaded"].get("candidates", [])]
    result["same_verdicts"] = bool(quiet) and quiet == loaded
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"quiet: {quiet}\nloaded ({args.load} load processes): {loaded}")
    return 0 if result["same_verdicts"] else 1


if __name__ == "__main__":
    sys.exit(main())
