"""What torch computed, and which GPU kernels ran, over a span of a process's work: the facts
of the strict profile's torch_fallback rule (docs/trust-boundary.md, Triton).

A candidate's `run` measures the whole request, from making the trial's inputs to the checksums
of its outputs, not forward alone: work done while the inputs are made (a wrapped input maker
that runs the problem's own Model) or after forward returned (an output filled in later) is
counted too. What the candidate's own process must do besides forward (make the inputs from the
seed, checksum inputs and outputs) is the baseline: the judge measures the same steps on its
own copy of the same trial, and only what the candidate did beyond it is the candidate's."""
from __future__ import annotations

import re
import warnings
from typing import Any, Dict, List, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

MAX_OPS = 256      # op names kept per measurement (the rest are summed under one name)
MAX_KERNELS = 128  # kernel names kept per profile


class AtenCompute(TorchDispatchMode):
    """Bytes read by torch's compute ops while the mode is on (CPU mode's fact): every ATen op
    except allocation, views, copies and fills. Triton kernels, compiled or run by the
    interpreter in NumPy, do not go through these ops."""

    _NOT_COMPUTE = re.compile(r"^(empty|zeros|ones|full|fill|zero|copy|clone|view|reshape|_reshape|as_strided|t$|"
                              r"transpose|permute|expand|contiguous|detach|alias|unsqueeze|squeeze|select|slice|"
                              r"_to_copy|to$|lift|resize|set_|new_|_unsafe_view|split|chunk|unbind|cat|stack|"
                              r"narrow|flatten|unflatten|movedim|_local_scalar_dense|item|is_|size|stride|numel|"
                              r"sym_|arange|scalar_tensor|_has_compatible|equal|record_stream)")

    def __init__(self) -> None:
        super().__init__()
        self.ops: Dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if not self._NOT_COMPUTE.match(name):
            read = sum(a.numel() * a.element_size() for a in list(args) + list((kwargs or {}).values())
                       if isinstance(a, torch.Tensor))
            self.ops[name] = self.ops.get(name, 0) + read
        return func(*args, **(kwargs or {}))

    def facts(self, input_bytes: int) -> Dict[str, Any]:
        """{"read_bytes", "input_bytes", "ops": {name: bytes}} (the largest MAX_OPS names)."""
        return {"read_bytes": sum(self.ops.values()), "input_bytes": input_bytes, "ops": _top_ops(self.ops)}


def _top_ops(ops: Dict[str, int]) -> Dict[str, int]:
    rows = sorted(ops.items(), key=lambda kv: -kv[1])
    kept = dict(rows[:MAX_OPS])
    if len(rows) > MAX_OPS:
        kept["(other ops)"] = sum(b for _, b in rows[MAX_OPS:])
    return kept


def merge_ops(*parts: Dict[str, int], times: Optional[List[int]] = None) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for k, part in enumerate(parts):
        n = times[k] if times else 1
        for name, b in part.items():
            out[name] = out.get(name, 0) + n * int(b)
    return out


def ops_beyond(measured: Any, baseline: Dict[str, int]) -> Dict[str, int]:
    """Per op, the bytes `measured` (a candidate's reported ops) read beyond `baseline` (the
    judge's own measurement of the same non-forward steps). Malformed entries count as 0."""
    out: Dict[str, int] = {}
    if not isinstance(measured, dict):
        return out
    for name, b in measured.items():
        if isinstance(b, bool) or not isinstance(b, (int, float)) or b != b:
            continue
        extra = int(b) - int(baseline.get(str(name), 0))
        if extra > 0:
            out[str(name)[:100]] = extra
    return out


def warm_profiler(device: str) -> None:
    """Starts and stops torch.profiler's CUDA tracing once, on nothing: kineto's and CUPTI's
    one-time start-up in a process (4.8 s in a fresh one on a cold H200 machine, ms afterwards) is
    then paid here, before the profiled run, which holds the GPU to itself. Never raises: a
    profiler that cannot start fails again in KernelProfiler, which says why."""
    if not device.startswith("cuda"):
        return
    try:
        from torch.profiler import ProfilerActivity, profile
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=False, with_stack=False):
                torch.zeros(1, device=device).add_(1)
                torch.cuda.synchronize(device)
    except BaseException:
        pass


class KernelProfiler:
    """GPU kernels run while the context is open, by torch.profiler (kineto / CUPTI,
    ProfilerActivity.CUDA): result() is {"available", "reason", "kernels": [{"name", "us", "count"}]}
    (aggregated by name, longest first). In a candidate's process native code could tamper with
    the profiler or CUPTI: there it is a cross-check below Python, not a proof. Never raises: a
    profiler that fails or records no CUDA event is reported as unavailable with the reason."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.prof: Any = None
        self.reason = ""

    def __enter__(self) -> "KernelProfiler":
        if not self.device.startswith("cuda"):
            self.reason = "CPU mode: no GPU kernels to profile"
            return self
        try:
            from torch.autograd.profiler import _is_profiler_enabled
            if _is_profiler_enabled:
                self.reason = "a profiler was already running in the process (started by the candidate)"
                return self
        except Exception:
            pass
        try:
            from torch.profiler import ProfilerActivity, profile
            # CPU activity too: kernels are correlated with their launches through it.
            self.prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=False,
                                with_stack=False)
            self.prof.__enter__()
        except BaseException as e:  # CUPTI missing, profiler already active, ...
            self.prof, self.reason = None, f"torch.profiler did not start: {type(e).__name__}: {e}"[:300]
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self.prof is not None:
            try:
                self.prof.__exit__(None, None, None)
            except BaseException as e:
                self.prof, self.reason = None, f"torch.profiler did not stop: {type(e).__name__}: {e}"[:300]
        return False

    def result(self, allow_empty: bool = False) -> Dict[str, Any]:
        if self.prof is None:
            return {"available": False, "reason": self.reason or "not profiled"}
        try:
            from torch.autograd import DeviceType
            per: Dict[str, List[float]] = {}
            for e in self.prof.events():
                if getattr(e, "device_type", None) != DeviceType.CUDA:
                    continue
                tr = getattr(e, "time_range", None)
                us = float(tr.elapsed_us()) if tr is not None else float(getattr(e, "device_time", 0.0) or 0.0)
                row = per.setdefault(str(e.name)[:300], [0.0, 0])
                row[0] += max(us, 0.0)
                row[1] += 1
        except BaseException as e:
            return {"available": False, "reason": f"reading the profile failed: {type(e).__name__}: {e}"[:300]}
        if not per and not allow_empty:
            return {"available": False, "reason": "the profiler recorded no CUDA kernel events (CUPTI unavailable, "
                                                  "or no GPU work ran)"}
        rows = sorted(per.items(), key=lambda kv: -kv[1][0])
        kernels = [{"name": n, "us": v[0], "count": int(v[1])} for n, v in rows[:MAX_KERNELS]]
        rest = rows[MAX_KERNELS:]
        if rest:
            kernels.append({"name": f"({len(rest)} more kernel names)", "us": sum(v[0] for _, v in rest),
                            "count": int(sum(v[1] for _, v in rest))})
        return {"available": True, "kernels": kernels, "n_events": int(sum(v[1] for v in per.values()))}


def kernel_counts(*profiles: Dict[str, Any]) -> Dict[str, int]:
    """Launches per kernel name over trusted profiles (the judge's)."""
    out: Dict[str, int] = {}
    for p in profiles:
        for row in (p or {}).get("kernels") or []:
            out[row["name"]] = out.get(row["name"], 0) + int(row["count"])
    return out


def kernels_beyond(kernels: Any, baseline: Dict[str, int]) -> List[Dict[str, Any]]:
    """A candidate's reported kernels less the baseline's launches of the same names (the judge's
    count of the non-forward steps); the time of a name is reduced in proportion. Malformed
    rows are dropped (kernel_audit.check_kernel_profile drops the same)."""
    out: List[Dict[str, Any]] = []
    if not isinstance(kernels, list):
        return out
    for row in kernels:
        if not isinstance(row, dict):
            continue
        try:
            name, us, count = str(row.get("name", ""))[:400], float(row.get("us", 0.0)), int(row.get("count", 1))
        except (TypeError, ValueError, OverflowError):
            continue
        if count <= 0 or not us == us:
            continue
        left = count - baseline.get(name, 0)
        if left <= 0:
            continue
        out.append({"name": name, "us": us * left / count, "count": left})
    return out
