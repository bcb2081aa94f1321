"""Whether a released judge process may serve another problem (the orchestrator's judge pool,
docs/verification.md "Judges across problems"). A problem's code runs in the judge and could leave
it set up otherwise for the next one (TF32, a default dtype, a function replaced): the process is
snapshotted at its greeting; each release puts back what can be put back exactly and compares the
rest, and any difference retires the process. Trusted: no candidate code runs here."""
from __future__ import annotations

import gc
import os
import random
import sys
import threading
import warnings
from typing import Any, Dict, List, Sequence, Tuple

import numpy
import torch
import torch.utils.deterministic  # noqa: F401 (read by _flags)

# Modules whose functions a problem could replace for the next one (torch's every module besides).
WATCHED_EXTRA = ("builtins", "math", "operator", "numpy", "triton", "triton.language")
# GPU memory a released judge may hold allocated (not cached) beyond what it held at its greeting:
# more is something of the problem still alive.
MAX_LEFT_ALLOCATED = 64 << 20
DESCRIPTORS = (staticmethod, classmethod, property)


def _watched(name: str) -> bool:
    return name == "torch" or name.startswith("torch.") or name in WATCHED_EXTRA


def _read(f: Dict[str, Any], name: str, read: Any) -> None:
    try:
        f[name] = read()
    except Exception as e:  # not in this torch, or not readable now: compared as what it says
        f[name] = f"unreadable: {type(e).__name__}"


def _flags() -> Dict[str, Any]:
    """The process-wide settings a reference's values or a judge's requests depend on."""
    f: Dict[str, Any] = {}
    cuda = torch.backends.cuda
    for name, read in (
            ("default_dtype", lambda: str(torch.get_default_dtype())),
            ("default_device", lambda: str(torch.get_default_device())),
            ("num_threads", torch.get_num_threads),
            ("grad_enabled", torch.is_grad_enabled),
            ("inference_mode", torch.is_inference_mode_enabled),
            ("deterministic", torch.are_deterministic_algorithms_enabled),
            ("deterministic_warn_only", torch.is_deterministic_algorithms_warn_only_enabled),
            ("float32_matmul_precision", torch.get_float32_matmul_precision),
            ("anomaly", torch.is_anomaly_enabled),
            ("matmul_tf32", lambda: cuda.matmul.allow_tf32),
            ("matmul_fp16_reduced", lambda: cuda.matmul.allow_fp16_reduced_precision_reduction),
            ("matmul_bf16_reduced", lambda: cuda.matmul.allow_bf16_reduced_precision_reduction),
            ("matmul_fp16_accumulation", lambda: cuda.matmul.allow_fp16_accumulation),
            ("cudnn_enabled", lambda: torch.backends.cudnn.enabled),
            ("cudnn_benchmark", lambda: torch.backends.cudnn.benchmark),
            ("cudnn_deterministic", lambda: torch.backends.cudnn.deterministic),
            ("cudnn_tf32", lambda: torch.backends.cudnn.allow_tf32),
            ("mkldnn_enabled", lambda: torch.backends.mkldnn.enabled),
            ("opt_einsum", lambda: torch.backends.opt_einsum.enabled),
            ("flash_sdp", cuda.flash_sdp_enabled),
            ("mem_efficient_sdp", cuda.mem_efficient_sdp_enabled),
            ("math_sdp", cuda.math_sdp_enabled),
            ("cudnn_sdp", cuda.cudnn_sdp_enabled),
            ("math_sdp_reduced", cuda.fp16_bf16_reduction_math_sdp_allowed),
            ("mha_fastpath", torch.backends.mha.get_fastpath_enabled),
            ("blas_library", lambda: str(cuda.preferred_blas_library())),
            ("linalg_library", lambda: str(cuda.preferred_linalg_library())),
            ("fill_uninitialized_memory", lambda: torch.utils.deterministic.fill_uninitialized_memory),
            ("matmul_fp32_precision", lambda: cuda.matmul.fp32_precision),
            ("cudnn_fp32_precision", lambda: torch.backends.cudnn.fp32_precision),
            ("function_modes", lambda: torch._C._len_torch_function_stack()),
            ("dispatch_modes", lambda: torch._C._len_torch_dispatch_stack()),
            ("module_global_hooks", lambda: {k: len(v) for k, v in vars(torch.nn.modules.module).items()
                                             if k.startswith("_global_") and isinstance(v, dict)}),
            ("sys_path", lambda: list(sys.path)),
            ("environment", lambda: dict(os.environ))):
        _read(f, name, read)
    if torch.cuda.is_initialized():
        _read(f, "cuda_device", torch.cuda.current_device)
    return f


def _objects() -> Tuple[Dict[Tuple[str, ...], Any], Dict[Tuple[str, str], frozenset]]:
    """Every function and class of the watched modules, and every method and descriptor of the
    classes torch defines (each in its own module, private bases included), kept by reference so
    that a replaced one cannot come back with a reused id; and each such class's method names, so
    that one added over an inherited method (Tensor.__matmul__ lives on the C base) shows too."""
    out: Dict[Tuple[str, ...], Any] = {}
    names: Dict[Tuple[str, str], frozenset] = {}
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
            if isinstance(v, type) and name.startswith("torch") and getattr(v, "__module__", None) == name:
                methods = [(ck, cv) for ck, cv in list(vars(v).items()) if callable(cv) or isinstance(cv, DESCRIPTORS)]
                for ck, cv in methods:
                    out[(name, k, ck)] = cv
                names[(name, k)] = frozenset(ck for ck, _ in methods)
    return out, names


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
    """The judge process as it greeted: put back or compared after each problem it served."""

    def __init__(self) -> None:
        self.flags = _flags()
        self.objects, self.methods = _objects()
        self.threads = {t.ident for t in threading.enumerate()}
        self.allocated = torch.cuda.memory_allocated() if torch.cuda.is_initialized() else 0
        # Put back at each release (a fresh judge forked from the zygote starts from these).
        self.random = random.getstate()
        self.numpy_random = numpy.random.get_state()
        self.numpy_err = numpy.geterr()
        self.torch_random = torch.get_rng_state()
        self.cuda_random = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        self.warning_filters = list(warnings.filters)
        self.cwd = os.getcwd()

    def restore(self) -> None:
        random.setstate(self.random)
        numpy.random.set_state(self.numpy_random)
        numpy.seterr(**self.numpy_err)
        torch.set_rng_state(self.torch_random)
        if self.cuda_random is not None:
            torch.cuda.set_rng_state_all(self.cuda_random)
        torch.set_flush_denormal(False)  # (it cannot be read; the judge never sets it)
        warnings.filters[:] = self.warning_filters
        for name in ("_filters_mutated", "_filters_mutated_lock_held"):  # the caches of earlier decisions
            if callable(getattr(warnings, name, None)):
                getattr(warnings, name)()
                break
        os.chdir(self.cwd)

    def changes(self) -> List[str]:
        """What differs from the snapshot, in words (empty: nothing)."""
        found: List[str] = []
        now = _flags()
        for k, v in self.flags.items():
            if now.get(k) != v:
                if k == "environment" and isinstance(now.get(k), dict) and isinstance(v, dict):
                    keys = sorted(n for n in set(v) | set(now[k]) if v.get(n) != now[k].get(n))
                    found.append(f"environment variables changed: {keys[:4]}")
                else:
                    found.append(f"{k}: {v!r} -> {now.get(k)!r}")
        for key, obj in self.objects.items():
            if _member(key) is not obj:
                found.append(f"{'.'.join(key)} was replaced")
                if len(found) >= 8:
                    return found
        for (mod, cls), had in self.methods.items():
            c = _member((mod, cls))
            if not isinstance(c, type):
                continue  # (the class itself replaced: named above)
            added = [k for k, v in list(vars(c).items()) if k not in had and (callable(v) or isinstance(v, DESCRIPTORS))]
            if added:
                found.append(f"{mod}.{cls} gained {added[:3]}")
                if len(found) >= 8:
                    return found
        extra = [t.name for t in threading.enumerate() if t.ident not in self.threads]
        if extra:
            found.append(f"threads started since the greeting: {extra[:4]}")
        return found


def _left_on_gpu(limit: int = 3) -> str:
    """The largest GPU tensors still alive and what holds them, for the reason a judge is retired."""
    found = []
    for o in gc.get_objects():
        try:
            if isinstance(o, torch.Tensor) and o.is_cuda:
                found.append(o)
        except Exception:
            continue
    found.sort(key=lambda t: -t.untyped_storage().nbytes())
    parts = []
    for t in found[:limit]:
        holders = [type(r).__name__ for r in gc.get_referrers(t) if r is not found][:4]
        parts.append(f"{tuple(t.shape)} {t.dtype} held by {holders}")
    del found
    return "; ".join(parts) if parts else "no tensor object found"


def _holders(obj: Any) -> List[str]:
    """What still refers to `obj` (two levels up), in words."""
    out = []
    for r in gc.get_referrers(obj)[:4]:
        up = [f"{type(u).__name__}:{str(u)[:60]}" for u in gc.get_referrers(r)[:3]]
        out.append(f"{type(r).__name__}:{str(r)[:80]}{'<' + ','.join(up) + '>' if up else ''}")
    return out


def released(state: ProcessState, dropped: Sequence[Any] = ()) -> Dict[str, Any]:
    """After every slot's judge was dropped (`dropped`: weak references to them): the memory they
    held given back and the process put back as it greeted where it can be, then whether it can
    serve another problem as it served the first ({reusable, why})."""
    for name in [n for n in sys.modules if n.startswith("kllm_problem_")]:
        del sys.modules[name]
    gc.collect()
    for ref in dropped:
        if ref() is not None:
            return {"reusable": False, "why": f"a dropped judge is still referenced by {_holders(ref())}"}
    try:
        state.restore()
    except Exception as e:
        return {"reusable": False, "why": f"could not put the process back as it greeted: {type(e).__name__}: {e}"}
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
                why.append(f"{left >> 20} MiB more GPU memory allocated than at the greeting ({_left_on_gpu()})")
        except RuntimeError as e:  # a sticky CUDA error: this context is done
            why.append(f"CUDA: {e}")
    return {"reusable": not why, "why": "; ".join(why)}
