"""Whether a judge process may serve another problem once it is done with one (the orchestrator's
judge pool, docs/verification.md "Judges across problems"): a fresh process costs a fork, a CUDA
context the driver makes one at a time, and the first use of every kernel, while a process that
served a problem holds nothing of it once released. A problem's own code runs in the judge,
though, and it could leave torch set up otherwise for the next one (TF32 allowed, a default
dtype, a function replaced): a reference made under another problem's settings could change a
verdict. So the process is snapshotted at its greeting and compared at each release; any change
retires it (the orchestrator ends it and starts a fresh one). Trusted: no candidate code runs here.
"""
from __future__ import annotations

import gc
import sys
import threading
from typing import Any, Dict, List, Tuple

import torch

# Modules whose functions and classes a problem could replace for the next one; with every
# class they name from torch, torch.nn and torch.nn.functional, the methods of those classes
# (nn.Linear.forward, Tensor.add). Entries added later (lazy imports) are not compared.
WATCHED_EXTRA = ("builtins", "math", "operator", "numpy", "triton", "triton.language")
CLASS_OWNERS = ("torch", "torch.nn", "torch.nn.functional")
# GPU memory a released judge may hold allocated (not cached) beyond what it held at its greeting:
# more is something of the problem still alive.
MAX_LEFT_ALLOCATED = 64 << 20


def _watched(name: str) -> bool:
    return name == "torch" or name.startswith("torch.") or name in WATCHED_EXTRA


def _flags() -> Dict[str, Any]:
    """The process-wide settings a reference's values or a judge's requests depend on."""
    f: Dict[str, Any] = {
        "default_dtype": str(torch.get_default_dtype()),
        "num_threads": torch.get_num_threads(),
        "grad_enabled": torch.is_grad_enabled(),
        "inference_mode": torch.is_inference_mode_enabled(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "anomaly": torch.is_anomaly_enabled(),
        "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
        "matmul_fp16_reduced": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "matmul_bf16_reduced": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "cudnn_enabled": torch.backends.cudnn.enabled,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_tf32": torch.backends.cudnn.allow_tf32,
        "flash_sdp": torch.backends.cuda.flash_sdp_enabled(),
        "mem_efficient_sdp": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "math_sdp": torch.backends.cuda.math_sdp_enabled(),
        "sys_path": list(sys.path),
    }
    for name, read in (("default_device", lambda: str(torch.get_default_device())),
                       ("function_modes", lambda: torch._C._len_torch_function_stack()),
                       ("dispatch_modes", lambda: torch._C._len_torch_dispatch_mode(None))):
        try:
            f[name] = read()
        except Exception as e:  # not in this torch: compared as what it says
            f[name] = f"unreadable: {type(e).__name__}"
    if torch.cuda.is_initialized():
        f["cuda_device"] = torch.cuda.current_device()
    return f


def _objects() -> Dict[Tuple[str, ...], Any]:
    """Every callable (and class attribute) of the watched modules, kept by reference so that
    a replaced one cannot come back with a reused id."""
    out: Dict[Tuple[str, ...], Any] = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not _watched(name):
            continue
        try:
            members = list(vars(mod).items())
        except TypeError:
            continue
        for k, v in members:
            if not callable(v):
                continue
            out[(name, k)] = v
            if isinstance(v, type) and name in CLASS_OWNERS and str(getattr(v, "__module__", "")).startswith("torch"):
                for ck, cv in list(vars(v).items()):
                    if callable(cv) or isinstance(cv, (staticmethod, classmethod, property)):
                        out[(name, k, ck)] = cv
    return out


def _member(key: Tuple[str, ...]) -> Any:
    """What `key` (module, name[, attribute]) names now; None when nothing."""
    try:
        cur: Any = vars(sys.modules[key[0]]).get(key[1])
        if len(key) == 3:
            cur = vars(cur).get(key[2]) if isinstance(cur, type) else None
        return cur
    except (KeyError, TypeError):
        return None


class ProcessState:
    """The judge process as it greeted: compared after each problem it served."""

    def __init__(self) -> None:
        self.flags = _flags()
        self.objects = _objects()
        self.threads = {t.ident for t in threading.enumerate()}
        self.allocated = torch.cuda.memory_allocated() if torch.cuda.is_initialized() else 0

    def changes(self) -> List[str]:
        """What differs from the snapshot, in words (empty: nothing)."""
        found: List[str] = []
        now = _flags()
        for k, v in self.flags.items():
            if now.get(k) != v:
                found.append(f"{k}: {v!r} -> {now.get(k)!r}")
        for key, obj in self.objects.items():
            if _member(key) is not obj:
                found.append(f"{'.'.join(key)} was replaced")
                if len(found) >= 8:
                    break
        extra = [t.name for t in threading.enumerate() if t.ident not in self.threads]
        if extra:
            found.append(f"threads started since the greeting: {extra[:4]}")
        return found


def released(state: ProcessState) -> Dict[str, Any]:
    """After every slot's judge was dropped: the memory they held given back, then whether this
    process can serve another problem as it served the first ({reusable, why})."""
    for name in [n for n in sys.modules if n.startswith("kllm_problem_")]:
        del sys.modules[name]
    gc.collect()
    why = state.changes()
    if torch.cuda.is_initialized():
        try:
            torch.cuda.synchronize()
            try:  # cuBLAS's workspaces, kept per handle and stream once a GEMM ran
                torch._C._cuda_clearCublasWorkspaces()
            except AttributeError:
                pass
            torch.cuda.empty_cache()
            left = torch.cuda.memory_allocated() - state.allocated
            if left > MAX_LEFT_ALLOCATED:
                why.append(f"{left >> 20} MiB more GPU memory allocated than at the greeting")
        except RuntimeError as e:  # a sticky CUDA error: this context is done
            why.append(f"CUDA: {e}")
    return {"reusable": not why, "why": "; ".join(why)}
