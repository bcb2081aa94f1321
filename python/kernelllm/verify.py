"""`kernelllm.verify(problem, candidates, ...)`: the sandboxed verifier from Python. The C++
orchestrator (through `_native`) runs a trusted judge and one disposable sandboxed worker
per candidate, exactly as `kernelllm verify` does, and returns the report as plain dicts.

    report = kernelllm.verify("problem.py", ["cand_a.py", "cand_b.py"], device="cpu")
    for c in report["candidates"]:
        print(c["path"], c["verdict"], c["rule"], c["speedup"])
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Sequence, Union

from . import _native

PathLike = Union[str, "os.PathLike[str]"]


def verify(problem: PathLike, candidates: Union[PathLike, Sequence[PathLike]], profile: str = "strict",
           device: Optional[str] = None, *, jobs: int = 0, trials: int = 5, sandbox: bool = True,
           cache: bool = True, cache_path: Optional[PathLike] = None, timing: bool = True,
           time_compile: bool = False, load_timeout_s: float = 120.0, run_timeout_s: float = 30.0,
           select: bool = True, python: Optional[str] = None) -> Dict[str, Any]:
    """Verifies candidate files (each defining `ModelNew`) against a problem file (`Model`,
    `get_inputs`, `get_init_inputs`).

    profile: "strict" (fp64 reference, normalized error, a heavy-tailed trial) or "kernelbench".
    device: "cpu" (Triton interpreter; timing not meaningful), "cuda" (all visible GPUs),
        "cuda:N" or "cuda:0,cuda:1"; None picks "cuda" when torch sees a GPU, else "cpu".
    Returns the report: {"candidates": [{"path", "verdict", "rule", "message", "stats",
    "timing", "speedup", "cached", "evidence", ...}], "sandbox": "...", "selected": i or None,
    ...}. Verdicts never raise; an infrastructure failure (no torch, a broken problem file)
    raises RuntimeError/ValueError/FileNotFoundError.
    """
    if isinstance(candidates, (str, os.PathLike)):
        candidates = [candidates]
    if device is None:
        device = _default_device()
    if sandbox is False:
        import warnings

        warnings.warn("kernelllm.verify(sandbox=False): candidate code runs unconfined", RuntimeWarning, stacklevel=2)
    options = {
        "profile": profile, "device": device, "jobs": jobs, "trials": trials, "sandbox": sandbox,
        "cache": cache, "cache_path": os.fspath(cache_path) if cache_path else "", "timing": timing,
        "time_compile": time_compile, "load_timeout_s": load_timeout_s, "run_timeout_s": run_timeout_s,
        "select": select, "python": python or "",
        # The workers live next to this file: kernelllm/worker/.
        "package_dir": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    }
    text = _native.verify_json(os.fspath(problem), [os.fspath(c) for c in candidates], json.dumps(options))
    return json.loads(text)


def _default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"
