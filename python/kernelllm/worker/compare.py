"""Output comparison for the judge: the `kernelbench` profile (torch.allclose with KernelBench's
tolerances, argument order as KernelBench calls it) and the `strict` profile (against an fp64
reference, with a tolerance scaled to the fp32 reference's own error plus a floor, and a
normalized-error bound), error statistics, and the "would zeros or the mean also pass?" test
that says whether a tolerance can discriminate at all for a given output.

Every whole-output pass runs over flat chunks of CHUNK elements, so its fp64 temporaries are
bounded (KernelBench's level-1 outputs reach 2^31 elements: one fp64 copy is 16 GiB)."""
from __future__ import annotations

import math
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

CHUNK = 1 << 25  # elements per chunk: 256 MiB per fp64 temporary


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A flat view (a stride-0 view of an expanded scalar; a copy only for other layouts)."""
    if t.is_contiguous():
        return t.reshape(-1)
    if all(st == 0 for st in t.stride()):
        return t.as_strided((t.numel(),), (0,))
    return t.contiguous().reshape(-1)


def _max(values: Iterator[float]) -> float:
    """max() that, like torch's, is NaN when any value is."""
    best = -math.inf
    for v in values:
        if v != v:
            return math.nan
        best = max(best, v)
    return best


def _chunks(*tensors: torch.Tensor) -> Iterator[Tuple[torch.Tensor, ...]]:
    """Matching flat chunks of same-sized tensors, in fp64 where floating (complex stays)."""
    flats = [_flat(t) for t in tensors]
    n = flats[0].numel()
    for start in range(0, n, CHUNK):
        yield tuple(f[start:start + CHUNK].double() if f.is_floating_point() else f[start:start + CHUNK] for f in flats)

HALF_PRECISION_NORM_ERROR = 1e-2  # bf16 eps is 7.8e-3; fp16/bf16/TF32 results land below this
# precision_downgrade needs error spread like rounding (value_cheat): at least this many elements and
# this share of the output fail the fp32 bound, and no element is further from fp64 than
# HALF_PRECISION_ELEMENT_ERROR x its rounding scale |ref64| + mean |ref64| (8 bf16 unit roundoffs,
# 2^-8 each; fp16 and TF32 round at 2^-11).
SPREAD_MIN_ELEMENTS = 8
SPREAD_MIN_SHARE = 0.1  # fp16 rounding of the result alone fails the fp32 bound at ~25% of a softmax
HALF_PRECISION_ELEMENT_ERROR = 2.0 ** -5
# Per-element discrimination (strict): a problem whose own input distribution leaves at least this
# share of the non-zero reference elements within tolerance of zero gets an extra `near_unit` trial;
# a share this large that no trial discriminates makes a matching output `undiscriminating`.
DEGENERATE_SHARE = 1e-3
DEGENERATE_MIN_COUNT = 2  # and at least this many elements (the extra trial)
REF_ERROR_MULTIPLE = 10.0  # candidate may be this many times further from fp64 than the fp32 reference
# kernelbench profile: an output that passes only because KernelBench's tolerance cannot tell the
# reference from zeros (or its mean) is still wrong_output when it is this far from the reference
# in norm (||out - ref|| / ||ref||, and beyond REF_ERROR_MULTIPLE x the fp32 reference's own error).
# Rounding to fp16/bf16 stays under 1e-2. Without it such an output's verdict hung on whether the
# trial's random inputs held a rare element above the tolerance (23_Softmax/1.py, atol 1e-2:
# correct in one run, wrong_output in others).
BLIND_TOLERANCE_NORM_ERROR = 0.1
# Floors per output dtype: (relative to the output's mean magnitude, relative per element).
_FLOORS = {torch.float64: 1e-7, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
# KernelBench: v0/v0.1 used atol = rtol = 1e-2; current code uses 1e-4 for fp32, 1e-2 for fp16/bf16.
KERNELBENCH_TOLERANCES = {"v0": {torch.float32: 1e-2, torch.float16: 1e-2, torch.bfloat16: 1e-2},
                          "current": {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}}


class Checker:
    """Decides whether one output passes, for one profile, given the references."""

    def __init__(self, profile: str, ref: torch.Tensor, ref64: Optional[torch.Tensor], kb_tolerance: str,
                 limits: Optional[Dict[str, float]] = None, defer: bool = False) -> None:
        """`limits`: the tolerance of a whole output (its checker's `limits()`) for a checker of part
        of it (a fingerprint); the part's own statistics are then not computed. `defer`: the
        statistics are summed on the device and left there (`pending`, None when there is nothing
        to read) for the caller to read back with others' and hand to `finish`; the checker has no
        tolerance until then."""
        self.pending: Optional[torch.Tensor] = None
        self.profile = profile
        self.ref = ref
        self.exact = not (ref.is_floating_point() or ref.is_complex())
        self.ref_norm_error: Optional[float] = None  # strict, statistics computed here: ||ref - ref64|| / ||ref64||
        if profile == "kernelbench":
            self.tol = KERNELBENCH_TOLERANCES[kb_tolerance].get(ref.dtype, 1e-2)
            self.describe = f"torch.allclose(ref, out, atol={self.tol}, rtol={self.tol}) as KernelBench ({kb_tolerance})"
            return
        if self.exact:
            # Integer and bool outputs are compared for equality: no tolerance, no statistics
            # (they cost a read-back per checker, one per timing set of an argmax), no fp64 copy.
            self.ref64 = ref64 if ref64 is not None else ref
            self.atol = self.rtol = self.norm_bound = self.scale = self.ref_norm_error = 0.0
            self.describe = "out == ref exactly (an integer or bool output)"
            return
        self.ref64 = ref64 if ref64 is not None else ref.double()
        if limits:
            self.set_limits(limits)
        else:
            # Summed where the tensors live and read back once (a timing set's checker is made per
            # set, hundreds a problem: each read-back is a device synchronize).
            parts = []
            for r, r64 in _chunks(ref, self.ref64):
                finite = torch.isfinite(r64)
                err = torch.where(finite & torch.isfinite(r), (r - r64).abs(), 0).max()
                parts.append(torch.cat([torch.stack([err, torch.where(finite, r64.abs(), 0).sum(),
                                                     finite.sum(dtype=torch.float64)]), _norm_part(r, r64)]))
            self._has_fp64 = ref64 is not None
            if defer and parts:
                self.pending = _fold(parts, (0,))
                return
            self.finish(_read_back(parts, (0,), 6))
            return
        self._describe(ref64 is not None, bool(limits))

    def finish(self, stats: List[float]) -> None:
        """The strict tolerance from the reference's statistics read back (see `defer`)."""
        ref_err_max, mag_sum, mag_n, d2, n2, seen = stats
        floor = _FLOORS.get(self.ref.dtype, 1e-4)
        self.pending = None
        # The fp32 reference's own normalized error against fp64 (also a comparison's statistic).
        self.ref_norm_error = _norm_from_sums(d2, n2, seen)
        self.scale = mag_sum / mag_n if mag_n else 0.0
        self.atol = REF_ERROR_MULTIPLE * ref_err_max + floor * self.scale
        self.rtol = floor
        self.norm_bound = max(REF_ERROR_MULTIPLE * self.ref_norm_error, floor)
        self._describe(self._has_fp64, False)

    def _describe(self, has_fp64: bool, whole: bool) -> None:
        floor = _FLOORS.get(self.ref.dtype, 1e-4)
        whose = "the whole output's tolerance: " if whole else ""
        self.describe = (f"|out - ref64| <= {self.atol:.3g} + {self.rtol:g}*|ref64| elementwise and normalized "
                         f"error <= {self.norm_bound:.3g} ({whose}{REF_ERROR_MULTIPLE:g}x the fp32 reference's error, "
                         f"floor {floor:g}; fp64 reference: {has_fp64})")

    def limits(self) -> Optional[Dict[str, float]]:
        """The tolerance this output's whole reference gives (strict profile), for a checker built on
        part of it (a fingerprint): the reference's own largest error is not in every sample."""
        if self.exact or self.profile == "kernelbench":
            return None
        return {"atol": self.atol, "rtol": self.rtol, "norm_bound": self.norm_bound, "scale": self.scale}

    def set_limits(self, limits: Optional[Dict[str, float]]) -> None:
        if limits:
            self.atol, self.rtol = limits["atol"], limits["rtol"]
            self.norm_bound, self.scale = limits["norm_bound"], limits["scale"]

    def passes(self, out: torch.Tensor) -> bool:
        if self.exact:
            return bool(torch.equal(out, self.ref))
        if self.profile == "kernelbench":
            fr, fo = _flat(self.ref), _flat(out)
            return all(bool(torch.allclose(fr[k:k + CHUNK], fo[k:k + CHUNK], atol=self.tol, rtol=self.tol))
                       for k in range(0, fr.numel(), CHUNK))
        bad = sum(int(self._bad(o, r).sum()) for o, r in _chunks(out, self.ref64))
        return bad == 0 and norm_err(out, self.ref64) <= self.norm_bound

    def _bad(self, o: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        both_nan = torch.isnan(o) & torch.isnan(r)
        same_inf = torch.isinf(r) & (o == r)
        ok = (o - r).abs() <= self.atol + self.rtol * r.abs()
        return ~(ok | both_nan | same_inf)

    def mismatch(self, out: torch.Tensor) -> torch.Tensor:
        """Boolean mask of failing elements (strict profile)."""
        res = torch.empty(out.shape, dtype=torch.bool, device=out.device)
        flat, k = res.view(-1), 0
        for o, r in _chunks(out, self.ref64):
            flat[k:k + o.numel()] = self._bad(o, r)
            k += o.numel()
        return res


def _norm_part(o: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """[sum (o - r)^2, sum r^2, count] over one chunk's elements finite in both, where they live."""
    finite = torch.isfinite(r) & torch.isfinite(o)
    diff, rr = torch.where(finite, o - r, 0), torch.where(finite, r, 0)
    return torch.stack([(diff * diff).sum(), (rr * rr).sum(), finite.sum(dtype=diff.dtype)])


def _fold(parts: list, maxed: tuple) -> Optional[torch.Tensor]:
    """Per-chunk rows of statistics folded into one where they live (the columns in `maxed` by
    max, the others by sum), not read back; None when there were no chunks."""
    if not parts:
        return None
    rows = torch.stack(parts)
    out = rows.sum(0)
    for k in maxed:
        out[k] = rows[:, k].max()
    return out


def _read_back(parts: list, maxed: tuple, width: int) -> list:
    """_fold's row read back from the device once; zeros when there were no chunks."""
    out = _fold(parts, maxed)
    return out.tolist() if out is not None else [0.0] * width


def _norm_from_sums(d2: float, n2: float, seen: float) -> float:
    if not seen:
        return 0.0
    d, n = math.sqrt(d2), math.sqrt(n2)
    return d / n if n > 0 else (0.0 if d == 0 else float("inf"))


def norm_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| over the elements finite in both (fp64, chunked); one read-back."""
    return _norm_from_sums(*_read_back([_norm_part(o, r) for o, r in _chunks(out, ref)], (), 3))


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
    base = ref64 if ref64 is not None else ref
    bound = max(REF_ERROR_MULTIPLE * norm_err(ref, base),
                REPLAY_FLOOR_FRACTION * _FLOORS.get(ref.dtype, 1e-4))
    return norm_err(out, base) <= bound


def _finite_or_str(x: float) -> Any:
    return x if x == x and abs(x) != float("inf") else str(x)


def stats(out: torch.Tensor, ref: torch.Tensor, ref64: Optional[torch.Tensor],
          ref_norm_error: Optional[float] = None) -> Dict[str, Any]:
    """Error statistics of `out` against the fp64 reference (else the reference itself), summed
    where the tensors live and read back once. `ref_norm_error`: the reference's own normalized
    error against ref64 when already known (it depends on the reference alone)."""
    base = ref64 if ref64 is not None else ref
    parts = []
    for o, b in _chunks(out, base):
        diff = (o - b).abs()
        finite = torch.isfinite(diff)
        nonfinite = (~finite & ~(torch.isnan(o) & torch.isnan(b)) & ~(o == b)).sum(dtype=torch.float64)
        d = torch.where(finite, diff, 0)
        rel = torch.where(finite, d / b.abs().clamp_min(1e-12), 0)
        parts.append(torch.cat([torch.stack([nonfinite, finite.sum(dtype=torch.float64), d.max(), d.sum(), rel.max(),
                                             rel.sum()]), _norm_part(o, b)]))
    got = _read_back(parts, (2, 4), 9)
    n_nonfinite, n_fin, abs_max, abs_sum, rel_max, rel_sum = got[:6]
    if ref_norm_error is None:
        ref_norm_error = norm_err(ref, base) if ref64 is not None else 0.0
    return {
        "against": "fp64" if ref64 is not None else str(ref.dtype),
        "n_elements": out.numel(),
        "n_nonfinite_mismatch": int(n_nonfinite),
        "max_abs": _finite_or_str(abs_max),
        "mean_abs": _finite_or_str(abs_sum / n_fin) if n_fin else 0.0,
        "max_rel": _finite_or_str(rel_max),
        "mean_rel": _finite_or_str(rel_sum / n_fin) if n_fin else 0.0,
        "normalized_error": _finite_or_str(_norm_from_sums(*got[6:])),
        "ref_normalized_error": _finite_or_str(ref_norm_error) if ref64 is not None else 0.0,
    }


def first_mismatch(checker: Checker, out: torch.Tensor) -> Optional[Dict[str, Any]]:
    """The first failing element (row-major) and how many fail; `index` is [] for a 0-d output.
    In the strict profile `expected` is the fp64 reference's value and `expected_fp32` the fp32 one."""
    if checker.exact:
        bad = out != checker.ref
    elif checker.profile == "kernelbench":
        bad = torch.empty(out.shape, dtype=torch.bool, device=out.device)
        fb, k = bad.view(-1), 0
        for r, o in _chunks(checker.ref, out):
            fb[k:k + o.numel()] = ~((r - o).abs() <= checker.tol + checker.tol * o.abs())
            k += o.numel()
    else:
        bad = checker.mismatch(out)
    flat = bad.reshape(-1)
    if not bool(flat.any()):
        return None
    k = int(flat.view(torch.uint8).argmax())
    where = tuple(int(i) for i in torch.unravel_index(torch.tensor(k), tuple(out.shape))) if out.dim() else ()
    res = {"index": list(where), "got": _finite_or_str(float(out[where])),
           "expected": _finite_or_str(float(checker.ref[where])), "n_mismatch": int(bad.sum()),
           "n_elements": out.numel()}
    if not checker.exact and checker.profile == "strict":
        res["expected"] = _finite_or_str(float(checker.ref64[where]))
        res["expected_fp32"] = _finite_or_str(float(checker.ref[where]))
    return res


def describe_mismatch(fm: Optional[Dict[str, Any]], norm_err: Optional[float] = None,
                      norm_bound: Optional[float] = None) -> str:
    """Words for a failing output: how many elements fail and the first one (or, when every
    element is within the elementwise bound, the normalized error that failed)."""
    if fm is None:
        if norm_err is not None and norm_bound is not None:
            return f"every element within the elementwise bound, normalized error {norm_err:.3g} > {norm_bound:.3g}"
        return "values differ"
    where = fm["index"] if fm["index"] else "the 0-d output"
    return (f"{fm['n_mismatch']} of {fm.get('n_elements', '?')} elements differ, first at {where}: "
            f"got {fm['got']}, expected {fm['expected']}")


def zero_passes_elementwise(checker: Checker) -> tuple:
    """(non-zero, zero passes) element masks of one strict-profile output: the reference (fp64 where
    there is one) is finite and non-zero there, and an output of 0 would meet the elementwise bound
    at that element, i.e. the element lies below the tolerance's noise."""
    nonzero = torch.isfinite(checker.ref64) & (checker.ref64 != 0)
    zeros = torch.zeros((), dtype=checker.ref.dtype, device=checker.ref.device).expand(checker.ref.shape)
    return nonzero, nonzero & ~checker.mismatch(zeros)


def blind_tolerance_error(stats_: Dict[str, Any], baselines: list) -> str:
    """Empty, or why an output that passed a tolerance which `baselines` (trivial outputs) also
    pass is wrong anyway: its normalized error (stats) is beyond BLIND_TOLERANCE_NORM_ERROR."""
    norm, ref_norm = stats_.get("normalized_error"), stats_.get("ref_normalized_error", 0.0)
    if not baselines or not isinstance(norm, float) or not math.isfinite(norm):
        return ""
    ref_norm = ref_norm if isinstance(ref_norm, float) and math.isfinite(ref_norm) else 0.0
    if norm <= BLIND_TOLERANCE_NORM_ERROR or norm <= REF_ERROR_MULTIPLE * ref_norm:
        return ""
    return (f"within the tolerance only because it cannot tell the reference from {' or '.join(baselines)}: the output is "
            f"{norm:.3g} away from the reference in norm (||out - ref|| / ||ref||; rounding stays under "
            f"{BLIND_TOLERANCE_NORM_ERROR:g})")


def baselines_passing(checker: Checker) -> list:
    """Which trivial outputs (all zeros, the reference's mean everywhere) would also pass."""
    if checker.exact or checker.ref.numel() == 0:
        return []
    ref = checker.ref
    total, count = 0.0, 0
    for (r,) in _chunks(ref):
        fin = torch.isfinite(r)
        total, count = total + r[fin].sum().item(), count + int(fin.sum())
    mean = total / count if count else 0.0
    # Constants as stride-0 views: no output-sized memory.
    cands = {"zeros": torch.zeros((), dtype=ref.dtype, device=ref.device).expand(ref.shape)}
    if ref.numel() > 1:  # for a single value the mean is the answer itself, not a baseline
        cands["mean"] = torch.full((), mean, dtype=ref.dtype, device=ref.device).expand(ref.shape)
    return [name for name, t in cands.items() if checker.passes(t)]


def value_cheat(out: torch.Tensor, ref: torch.Tensor, distribution: str,
                ref64: Optional[torch.Tensor] = None, checker: Optional[Checker] = None) -> Optional[Dict[str, str]]:
    """For an output that failed: the cheat its values show, if any. NaN, or magnitudes 1e6x
    beyond the reference's, where the reference is finite (memory the candidate never wrote;
    the candidate worker fills freed memory with NaN where it can): `stale_memory`; all zeros
    where the reference is not: `zeros_pass`; (wrong only on the heavy-tailed trial is a wrong
    output, not a cheat; outputs that ignore the inputs are the judge's history checks); an fp32
    output whose error vs fp64 is spread like half-precision rounding (precision_spread): `precision_downgrade`.
    A localized error (one element, one row, a scalar loss) is not a cheat: wrong_output."""
    if not (out.is_floating_point() and ref.is_floating_point()) or out.numel() == 0:
        return None
    ref_max = 0.0
    for (r,) in _chunks(ref):
        fin = torch.isfinite(r)
        if bool(fin.any()):
            ref_max = max(ref_max, r[fin].abs().max().item())
    if distribution != "heavy_tailed" and not bool((out == 0).all()):
        n_nan, n_wild = 0, 0
        for o, r in _chunks(out, ref):
            fin = torch.isfinite(r)
            n_nan += int((torch.isnan(o) & fin).sum())
            n_wild += int(((o.abs() > 1e6 * max(ref_max, 1e-30)) & fin & torch.isfinite(o)).sum())
        if n_nan or n_wild:
            return {"rule": "stale_memory", "evidence": f"{n_nan} output elements are NaN (the poison written to "
                                                        f"freed memory) and {n_wild} exceed 1e6 x the reference's "
                                                        f"max |value| {ref_max:.3g}, where the reference is finite: "
                                                        "memory the candidate never wrote"}
    if bool((out == 0).all()) and not bool((ref == 0).all()):
        return {"rule": "zeros_pass", "evidence": f"output is all zeros; reference max |value| "
                                                  f"{_max(r.abs().max().item() for (r,) in _chunks(ref)):.3g}"}
    if ref.dtype in (torch.float32, torch.float64) and bool(torch.isfinite(out).all()) and ref64 is not None:
        spread = precision_spread(out, ref64, checker if checker is not None and checker.profile == "strict"
                                  else Checker("strict", ref, ref64, "v0"))
        if spread["downgrade"]:
            return {"rule": "precision_downgrade",
                    "evidence": f"error spread like half-precision rounding: {spread['n_mismatch']} of "
                                f"{spread['n_elements']} elements beyond the {ref.dtype} bound, every element within "
                                f"{spread['max_scaled_error']:.3g} x its rounding scale (<= {HALF_PRECISION_ELEMENT_ERROR:g}), "
                                f"normalized error vs fp64 {spread['normalized_error']:.3g} (<= {HALF_PRECISION_NORM_ERROR:g})"}
    return None


def precision_spread(out: torch.Tensor, ref64: torch.Tensor, checker: Checker) -> Dict[str, Any]:
    """Whether a failing fp32 output's error vs fp64 looks like half-precision (bf16/fp16/TF32)
    arithmetic rather than a bug. All of: normalized error <= HALF_PRECISION_NORM_ERROR; at least
    SPREAD_MIN_ELEMENTS elements and SPREAD_MIN_SHARE of the output fail the fp32 elementwise bound
    (rounding touches every element; a masking bug, a wrong row or a scalar loss does not spread);
    and every element's error is at most HALF_PRECISION_ELEMENT_ERROR x its rounding scale
    |ref64| + mean |ref64| (the mean term: a reduction's or GEMM's rounding follows the magnitude
    of its terms, not of a result that cancels to near 0), so no element is far outside rounding.
    A scalar or an output of fewer than SPREAD_MIN_ELEMENTS elements can never show spread."""
    n = out.numel()
    res: Dict[str, Any] = {"downgrade": False, "n_elements": n, "n_mismatch": 0, "max_scaled_error": float("inf"),
                           "normalized_error": norm_err(out, ref64)}
    if n < SPREAD_MIN_ELEMENTS or not all(bool(torch.isfinite(r).all()) for (r,) in _chunks(ref64)) or \
            res["normalized_error"] > HALF_PRECISION_NORM_ERROR:
        return res
    res["n_mismatch"] = sum(int(checker._bad(o, r).sum()) for o, r in _chunks(out, checker.ref64))
    if res["n_mismatch"] < max(SPREAD_MIN_ELEMENTS, SPREAD_MIN_SHARE * n):
        return res
    scale = sum(r.abs().sum().item() for (r,) in _chunks(ref64)) / n
    if scale == 0.0:
        return res
    res["max_scaled_error"] = _max(float(((o - r).abs() / (r.abs() + scale)).max()) for o, r in _chunks(out, ref64))
    res["downgrade"] = res["max_scaled_error"] <= HALF_PRECISION_ELEMENT_ERROR
    return res


def rows_pass(checkers: Sequence[Checker], got: torch.Tensor, limits: Optional[tuple] = None) -> int:
    """The elementwise part of values_pass for several calls at once: row j of `got` (calls x
    values) against checkers[j], in a few kernels and one synchronize. `limits`: the strict
    profile's (atol, rtol) as (calls x 1) fp64 tensors on got's device, made ahead (rows_limits).
    Returns -1 when every row passes, else the first failing row (values_pass on it says why)."""
    c0 = checkers[0]
    if got.numel() == 0:
        return -1
    if c0.exact:
        bad = got != torch.stack([c.ref.reshape(-1) for c in checkers]).to(got.device)
    elif c0.profile == "kernelbench":
        g = got.double()
        r = torch.stack([c.ref.reshape(-1) for c in checkers]).to(got.device).double()
        bad = ~((r - g).abs() <= c0.tol + c0.tol * g.abs())
    else:
        g = got.double()
        r = torch.stack([c.ref64.reshape(-1) for c in checkers]).to(got.device).double()
        atol, rtol = limits if limits is not None else rows_limits(checkers, got.device)
        ok = (g - r).abs() <= atol + rtol * r.abs()
        bad = ~(ok | (torch.isnan(g) & torch.isnan(r)) | (torch.isinf(r) & (g == r)))
    rows = bad.reshape(bad.shape[0], -1).any(dim=1)
    if not bool(rows.any()):
        return -1
    return int(rows.nonzero()[0])


# The strict profile's normalized-error bound on every timed round trip, not only in the last
# one's whole-output check (red team: a candidate that predicted the last round trip put errors
# just under the elementwise bound into every other one and was judged correct). Over a
# fingerprint that is a sample of a larger output (judge.FINGERPRINT_MAX), against this multiple
# of the bound, so that an honest kernel near it is never flagged by the sample's noise.
SAMPLED_NORM_MARGIN = 2.0


def rows_norm_failing(checkers: Sequence[Checker], got: torch.Tensor, sampled: bool) -> tuple:
    """The strict profile's normalized error of each row of `got` (calls x checked values) against
    checkers[j]'s fp64 reference over the elements finite in both: (-1, 0.0, bound) when every
    row is within its bound (x SAMPLED_NORM_MARGIN when `sampled`), else (first failing row, its
    error, its bound)."""
    c0 = checkers[0]
    if c0.exact or c0.profile == "kernelbench" or got.numel() == 0:
        return -1, 0.0, 0.0
    g = got.reshape(got.shape[0], -1).double()
    r = torch.stack([c.ref64.reshape(-1) for c in checkers]).to(got.device).double()
    finite = torch.isfinite(g) & torch.isfinite(r)
    zero = torch.zeros((), dtype=torch.float64, device=got.device)
    d = torch.where(finite, g - r, zero)
    rr = torch.where(finite, r, zero)
    err, bound = _rows_norm(checkers, d, rr, sampled)
    bad = err > bound
    if not bool(bad.any()):
        return -1, 0.0, 0.0
    row = int(bad.nonzero()[0])
    return row, float(err[row]), float(bound[row])


def _rows_norm(checkers: Sequence[Checker], d: torch.Tensor, r: torch.Tensor, sampled: bool) -> tuple:
    """Each row's normalized error ||d|| / ||r|| (inf where only r is all zero, 0 where both are)
    and its bound (x SAMPLED_NORM_MARGIN when `sampled`), as fp64 tensors."""
    zero = torch.zeros((), dtype=torch.float64, device=d.device)
    num, den = (d * d).sum(dim=1).sqrt(), (r * r).sum(dim=1).sqrt()
    err = torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)),
                      torch.where(num > 0, torch.full_like(num, math.inf), zero))
    bound = torch.tensor([c.norm_bound for c in checkers], dtype=torch.float64, device=d.device)
    return err, bound * (SAMPLED_NORM_MARGIN if sampled else 1.0)


def rows_strict(checkers: Sequence[Checker], got: torch.Tensor, limits: Optional[tuple], sampled: bool) -> tuple:
    """The strict profile's rows_pass and rows_norm_failing of one round trip's calls together:
    (first row failing the elementwise rule or -1, rows_norm_failing's answer). Where every
    difference from the fp64 reference is finite (an honest round trip) both come from one
    difference in fewer passes over the rows (a timed round trip's check ran ~25 passes over
    calls x values fp64 copies, twice a paired round trip under the GPU's exclusive hold); the
    same values (summed in another order: the last bit may differ). Otherwise the two checks as
    they are."""
    c0 = checkers[0]
    if c0.exact or c0.profile != "strict" or got.numel() == 0:
        return rows_pass(checkers, got, limits), rows_norm_failing(checkers, got, sampled)
    g = got.reshape(got.shape[0], -1)
    r = torch.stack([c.ref64.reshape(-1) for c in checkers]).to(g.device).double()
    d = g - r  # (fp64: g promoted exactly, as g.double() - r)
    if not bool(torch.isfinite(d).all()):
        return rows_pass(checkers, got, limits), rows_norm_failing(checkers, got, sampled)
    err, bound = _rows_norm(checkers, d, r, sampled)  # (before d and r are changed in place below)
    atol, rtol = limits if limits is not None else rows_limits(checkers, got.device)
    rows = (d.abs_() > r.abs_().mul_(rtol).add_(atol)).any(dim=1)  # (finite: ~(|d| <= atol + rtol |r|))
    over = err > bound
    flags = torch.stack([rows.any(), over.any()]).tolist()  # (one read-back)
    first = int(rows.nonzero()[0]) if flags[0] else -1
    if not flags[1]:
        return first, (-1, 0.0, 0.0)
    row = int(over.nonzero()[0])
    return first, (row, float(err[row]), float(bound[row]))


def rows_limits(checkers: Sequence[Checker], device: Any) -> tuple:
    """The strict profile's per-row (atol, rtol) for rows_pass, as (calls x 1) fp64 tensors."""
    return rows_limits_many([checkers], device)[0]


def rows_limits_many(groups: Sequence[Sequence[Checker]], device: Any) -> list:
    """rows_limits of each group of checkers, copied to `device` in one copy."""
    if not groups:
        return []
    host = torch.tensor([[float(c.atol), float(c.rtol)] for g in groups for c in g], dtype=torch.float64)
    on = host.to(device)
    out, k = [], 0
    for g in groups:
        part = on[k:k + len(g)]
        out.append((part[:, 0:1], part[:, 1:2]))
        k += len(g)
    return out


def values_pass(checker: Checker, got: torch.Tensor, positions: Optional[torch.Tensor] = None) -> tuple:
    """Whether `got`, aligned with `checker`'s (flat) reference, passes the elementwise part of its
    rule (the normalized-error bound needs the whole output). `positions`, when given, are the
    output's flat indices the elements stand for, for the message. Returns (ok, message naming
    the first failing index and the count)."""
    if got.numel() == 0:
        return True, ""
    ref = checker.ref.reshape(-1)
    g = got.reshape(-1).to(ref.device)
    if checker.exact:
        bad, r = g != ref, ref
    elif checker.profile == "kernelbench":
        g, r = g.double(), ref.double()
        bad = ~((r - g).abs() <= checker.tol + checker.tol * g.abs())
    else:
        g, r = g.double(), checker.ref64.reshape(-1).to(ref.device).double()
        ok = (g - r).abs() <= checker.atol + checker.rtol * r.abs()
        bad = ~(ok | (torch.isnan(g) & torch.isnan(r)) | (torch.isinf(r) & (g == r)))
    if not bool(bad.any()):
        return True, ""
    k = int(bad.nonzero()[0])
    where = int(positions[k]) if positions is not None else k
    return False, (f"{int(bad.sum())} of {g.numel()} checked values wrong; first at flat index {where}: "
                   f"got {float(g[k]):.6g}, expected {float(r[k]):.6g}")
