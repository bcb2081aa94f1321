"""Output comparison for the judge: the `kernelbench` profile (torch.allclose with KernelBench's
tolerances, argument order as KernelBench calls it) and the `strict` profile (against an fp64
reference, with a tolerance scaled to the fp32 reference's own error plus a floor, and a
normalized-error bound), error statistics, and the "would zeros or the mean also pass?" test
that says whether a tolerance can discriminate at all for a given output."""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch

HALF_PRECISION_NORM_ERROR = 1e-2  # bf16 eps is 7.8e-3; fp16/bf16/TF32 results land below this
REF_ERROR_MULTIPLE = 10.0  # candidate may be this many times further from fp64 than the fp32 reference
# Floors per output dtype: (relative to the output's mean magnitude, relative per element).
_FLOORS = {torch.float64: 1e-7, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
# KernelBench: v0/v0.1 used atol = rtol = 1e-2; current code uses 1e-4 for fp32, 1e-2 for fp16/bf16.
KERNELBENCH_TOLERANCES = {"v0": {torch.float32: 1e-2, torch.float16: 1e-2, torch.bfloat16: 1e-2},
                          "current": {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}}


class Checker:
    """Decides whether one output passes, for one profile, given the references."""

    def __init__(self, profile: str, ref: torch.Tensor, ref64: Optional[torch.Tensor], kb_tolerance: str) -> None:
        self.profile = profile
        self.ref = ref
        self.exact = not (ref.is_floating_point() or ref.is_complex())
        if profile == "kernelbench":
            self.tol = KERNELBENCH_TOLERANCES[kb_tolerance].get(ref.dtype, 1e-2)
            self.describe = f"torch.allclose(ref, out, atol={self.tol}, rtol={self.tol}) as KernelBench ({kb_tolerance})"
            return
        self.ref64 = ref64 if ref64 is not None else ref.double()
        floor = _FLOORS.get(ref.dtype, 1e-4)
        finite = torch.isfinite(self.ref64)
        ref_err = (ref.double() - self.ref64).abs()[finite & torch.isfinite(ref.double())]
        ref_err_max = ref_err.max().item() if ref_err.numel() else 0.0
        mag = self.ref64.abs()[finite]
        self.scale = mag.mean().item() if mag.numel() else 0.0
        self.atol = REF_ERROR_MULTIPLE * ref_err_max + floor * self.scale
        self.rtol = floor
        self.ref_norm_err = _norm_err(ref.double(), self.ref64)
        self.norm_bound = max(REF_ERROR_MULTIPLE * self.ref_norm_err, floor)
        self.describe = (f"|out - ref64| <= {self.atol:.3g} + {self.rtol:g}*|ref64| elementwise and normalized "
                         f"error <= {self.norm_bound:.3g} ({REF_ERROR_MULTIPLE:g}x the fp32 reference's error, "
                         f"floor {floor:g}; fp64 reference: {ref64 is not None})")

    def passes(self, out: torch.Tensor) -> bool:
        if self.exact:
            return bool(torch.equal(out, self.ref))
        if self.profile == "kernelbench":
            return bool(torch.allclose(self.ref, out, atol=self.tol, rtol=self.tol))
        return bool(self.mismatch(out).sum() == 0) and _norm_err(out.double(), self.ref64) <= self.norm_bound

    def mismatch(self, out: torch.Tensor) -> torch.Tensor:
        """Boolean mask of failing elements (strict profile)."""
        o, r = out.double(), self.ref64
        both_nan = torch.isnan(o) & torch.isnan(r)
        same_inf = torch.isinf(r) & (o == r)
        ok = (o - r).abs() <= self.atol + self.rtol * r.abs()
        return ~(ok | both_nan | same_inf)


def _norm_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    finite = torch.isfinite(ref) & torch.isfinite(out)
    if not finite.any():
        return 0.0
    d = torch.linalg.vector_norm((out - ref)[finite]).item()
    n = torch.linalg.vector_norm(ref[finite]).item()
    return d / n if n > 0 else (0.0 if d == 0 else float("inf"))


# A replayed output agrees with the reference it was computed for this much more closely than the
# floor of the strict tolerance requires (see agrees_closely).
REPLAY_FLOOR_FRACTION = 1e-2


def agrees_closely(out: torch.Tensor, ref: torch.Tensor, ref64: Optional[torch.Tensor]) -> bool:
    """Whether `out` agrees with a reference as closely as a computation on that reference's own
    inputs does: normalized error within REF_ERROR_MULTIPLE times the fp32 reference's error, floor
    REPLAY_FLOOR_FRACTION of the dtype's tolerance floor. A tolerance admits far more than that, so
    a value that merely lands within tolerance of another trial's reference (a constant loss near
    its expected value, a scalar) is chance; only an answer computed for those inputs and replayed
    agrees this closely."""
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return False
    if not (ref.is_floating_point() or ref.is_complex()):
        return bool(torch.equal(out, ref))
    base = ref64 if ref64 is not None else ref.double()
    bound = max(REF_ERROR_MULTIPLE * _norm_err(ref.double(), base),
                REPLAY_FLOOR_FRACTION * _FLOORS.get(ref.dtype, 1e-4))
    return _norm_err(out.double(), base) <= bound


def _finite_or_str(x: float) -> Any:
    return x if x == x and abs(x) != float("inf") else str(x)


def stats(out: torch.Tensor, ref: torch.Tensor, ref64: Optional[torch.Tensor]) -> Dict[str, Any]:
    base = (ref64 if ref64 is not None else ref).double()
    o = out.double()
    diff = (o - base).abs()
    finite = torch.isfinite(diff)
    d = diff[finite]
    rel = (d / base.abs()[finite].clamp_min(1e-12)) if d.numel() else d
    return {
        "against": "fp64" if ref64 is not None else str(ref.dtype),
        "n_elements": out.numel(),
        "n_nonfinite_mismatch": int((~finite & ~(torch.isnan(o) & torch.isnan(base)) & ~(o == base)).sum()),
        "max_abs": _finite_or_str(d.max().item()) if d.numel() else 0.0,
        "mean_abs": _finite_or_str(d.mean().item()) if d.numel() else 0.0,
        "max_rel": _finite_or_str(rel.max().item()) if rel.numel() else 0.0,
        "mean_rel": _finite_or_str(rel.mean().item()) if rel.numel() else 0.0,
        "normalized_error": _finite_or_str(_norm_err(o, base)),
        "ref_normalized_error": _finite_or_str(_norm_err(ref.double(), base)) if ref64 is not None else 0.0,
    }


def first_mismatch(checker: Checker, out: torch.Tensor) -> Optional[Dict[str, Any]]:
    if checker.exact:
        bad = out != checker.ref
    elif checker.profile == "kernelbench":
        r, o = checker.ref.double(), out.double()
        bad = ~((r - o).abs() <= checker.tol + checker.tol * o.abs())
    else:
        bad = checker.mismatch(out)
    idx = bad.nonzero()
    if idx.numel() == 0:
        return None
    where = tuple(int(i) for i in idx[0])
    return {"index": list(where), "got": _finite_or_str(float(out[where])),
            "expected": _finite_or_str(float(checker.ref[where])), "n_mismatch": int(bad.sum())}


def baselines_passing(checker: Checker) -> list:
    """Which trivial outputs (all zeros, the reference's mean everywhere) would also pass."""
    if checker.exact or checker.ref.numel() == 0:
        return []
    ref = checker.ref
    finite = ref[torch.isfinite(ref)]
    mean = finite.double().mean().item() if finite.numel() else 0.0
    cands = {"zeros": torch.zeros_like(ref)}
    if ref.numel() > 1:  # for a single value the mean is the answer itself, not a baseline
        cands["mean"] = torch.full_like(ref, mean)
    return [name for name, t in cands.items() if checker.passes(t)]


def value_cheat(out: torch.Tensor, ref: torch.Tensor, distribution: str,
                ref64: Optional[torch.Tensor] = None) -> Optional[Dict[str, str]]:
    """For an output that failed: the cheat its values show, if any. NaN, or magnitudes 1e6x
    beyond the reference's, where the reference is finite (memory the candidate never wrote;
    the candidate worker fills freed memory with NaN where it can): `stale_memory`; all zeros
    where the reference is not: `zeros_pass`; (wrong only on the heavy-tailed trial is a wrong
    output, not a cheat; outputs that ignore the inputs are the judge's history checks); an fp32 output whose error vs fp64 is what
    half-precision arithmetic gives (it failed the fp32 bound, so it is not an fp32 rounding
    difference): `precision_downgrade`."""
    if not (out.is_floating_point() and ref.is_floating_point()) or out.numel() == 0:
        return None
    fin = torch.isfinite(ref)
    ref_max = ref[fin].abs().max().item() if bool(fin.any()) else 0.0
    if distribution != "heavy_tailed" and not bool((out == 0).all()):
        n_nan = int(torch.isnan(out[fin]).sum())
        wild = out[fin & torch.isfinite(out)].abs()
        n_wild = int((wild > 1e6 * max(ref_max, 1e-30)).sum())
        if n_nan or n_wild:
            return {"rule": "stale_memory", "evidence": f"{n_nan} output elements are NaN (the poison written to "
                                                        f"freed memory) and {n_wild} exceed 1e6 x the reference's "
                                                        f"max |value| {ref_max:.3g}, where the reference is finite: "
                                                        "memory the candidate never wrote"}
    if bool((out == 0).all()) and not bool((ref == 0).all()):
        return {"rule": "zeros_pass", "evidence": f"output is all zeros; reference max |value| "
                                                  f"{ref.abs().max().item():.3g}"}
    if ref.dtype in (torch.float32, torch.float64) and bool(torch.isfinite(out).all()) and ref64 is not None:
        err = _norm_err(out.double(), ref64)
        if err <= HALF_PRECISION_NORM_ERROR:
            return {"rule": "precision_downgrade",
                    "evidence": f"normalized error vs fp64 {err:.3g}: within what fp16/bf16 arithmetic gives "
                                f"(<= {HALF_PRECISION_NORM_ERROR:g}) but beyond the {ref.dtype} bound"}
    return None
