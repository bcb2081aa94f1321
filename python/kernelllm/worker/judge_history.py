"""What the judge learns across a problem's trials (a mixin of worker/judge.py's Judge): the
history rules (a failing output that matches another trial's reference, repeats the candidate's
output for other inputs, or holds an earlier call's memory) and per-element discrimination (the
reference elements no trial tells from zero). Decided on the fingerprints the Judge keeps."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import torch

from . import compare


def as_list(out: Any) -> List[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


class AcrossTrials:
    """Judge methods over its trials' fingerprints and each candidate's outputs per trial; the op
    `forget`."""

    def _degenerate_elements(self, sample: List[Any]) -> Optional[Dict[str, Any]]:
        """On one input set of the problem's own distribution (the load sample): how many
        non-zero reference elements zero would match within tolerance (compare.zero_passes_elementwise),
        over all floating outputs; `share` is the largest share of one output. None when the
        reference cannot run on it."""
        try:
            with torch.no_grad():
                a64 = [(a.to(torch.float64, copy=True) if a.is_floating_point() else a.clone())
                       if isinstance(a, torch.Tensor) else a for a in sample] if self.model64 is not None else None
                ref = as_list(self.model(*sample))
                del sample[:]  # the caller's list: its tensors are not needed any more
                ref64 = as_list(self.model64(*a64)) if a64 is not None else None
                del a64
        except Exception:
            return None
        res = {"zero_passes": 0, "nonzero": 0, "share": 0.0}
        for i, r in enumerate(ref):
            if not isinstance(r, torch.Tensor) or not r.is_floating_point() or r.numel() == 0:
                continue
            r64 = ref64[i] if ref64 is not None and i < len(ref64) and isinstance(ref64[i], torch.Tensor) else None
            if r64 is not None and r64.shape != r.shape:
                r64 = None
            nz, zp = compare.zero_passes_elementwise(compare.Checker("strict", r.detach(), r64.detach() if r64 is not None else None, self.kb_tolerance))
            n_nz, n_zp = int(nz.sum()), int(zp.sum())
            res["zero_passes"] += n_zp
            res["nonzero"] += n_nz
            if n_nz:
                res["share"] = max(res["share"], n_zp / n_nz)
        return res

    def _note_discrimination(self, trial: int, full: Dict[str, Any]) -> None:
        """Strict profile, correctness trials: per output, the fingerprint elements this trial's
        reference discriminates from zero (non-zero, zero fails) and those where zero would pass
        (non-zero, below the tolerance's noise), accumulated over trials (compare reads them at the last)."""
        if self.profile != "strict" or trial >= self.n_trials:
            return
        fp = self.trials[trial]["fp"]
        for i, r in enumerate(fp["ref"]):
            if not r.is_floating_point() or r.numel() == 0:
                continue
            d = self.discrimination.setdefault(i, {"trials": set(), "shape": fp["shapes"][i]})
            if trial in d["trials"] or d["shape"] != fp["shapes"][i]:
                continue
            nz, zp = compare.zero_passes_elementwise(self._fp_checker(trial, i))
            d["trials"].add(trial)
            disc, below = (nz & ~zp).cpu(), zp.cpu()
            d["discriminated"] = disc if "discriminated" not in d else d["discriminated"] | disc
            d["below_noise"] = below if "below_noise" not in d else d["below_noise"] | below

    def _undiscriminated_elements(self) -> Dict[str, Dict[str, Any]]:
        """Outputs where at least DEGENERATE_SHARE of the elements that are non-zero in some trial
        are below the tolerance's noise in every trial that has them non-zero (no trial
        discriminates them from zero): {output: {count, of, first_index}} (counted over the
        fingerprint positions, every element of outputs up to FINGERPRINT_MAX)."""
        found = {}
        for i, d in sorted(self.discrimination.items()):
            if "discriminated" not in d:
                continue
            undisc = d["below_noise"] & ~d["discriminated"]
            n, of = int(undisc.sum()), int((d["below_noise"] | d["discriminated"]).sum())
            if n and of and n / of >= compare.DEGENERATE_SHARE:
                k = int(undisc.reshape(-1).nonzero()[0])
                idx = self._fp_positions(i, math.prod(d["shape"]))
                flat = k if idx is None else int(idx[k])
                where = [int(x) for x in torch.unravel_index(torch.tensor(flat), d["shape"])] if d["shape"] else []
                found[str(i)] = {"count": n, "of": of, "first_index": where, "trials": sorted(d["trials"])}
        return found

    def _history_cheat(self, trial: int, i: int, o: torch.Tensor, checker: compare.Checker,
                       probe: Optional[torch.Tensor]) -> Optional[Dict[str, str]]:
        """A failing output explained by other trials: it matches an earlier trial's reference
        (cached_result), it equals an earlier output of the candidate or its probe output while
        the references differ (closed_form: the values do not depend on the input). Decided on the
        fingerprints (every element up to FINGERPRINT_MAX; a fixed sample beyond)."""
        fp = self.trials[trial]["fp"]
        if fp["shapes"][i] != tuple(o.shape):
            return None
        of = self._fp(o, i)
        ref = fp["ref"][i]
        here = self._fp_checker(trial, i)

        def own(d: Dict[str, Any]) -> Optional[torch.Tensor]:
            outs = self._own_outputs(d)
            return outs[i] if outs is not None and i < len(outs) else None

        def same_layout(d: Dict[str, Any]) -> bool:
            return "fp" in d and i < len(d["fp"]["shapes"]) and d["fp"]["shapes"][i] == fp["shapes"][i]

        others = [(u, d) for u, d in sorted(self.trials.items()) if u != trial and same_layout(d)]
        for u, d in others:
            # Only trials the candidate has already run can have been cached; a match with the
            # reference of a trial it has not seen is chance (a closed form near that trial's
            # value), which the checks below name.
            if self._own_outputs(d) is None:
                continue
            # The match must be as close as a computation on trial u's inputs: within tolerance
            # alone, a constant near the expected value of a scalar output lands on some earlier
            # reference by chance (it is then named closed_form below, as it is on other runs).
            r = d["fp"]["ref"][i]
            r64 = d["fp"]["ref64"][i] if d["fp"]["ref64"] else None
            if r.dtype == of.dtype and not here.passes(r) and \
                    self._fp_checker(u, i).passes(of) and compare.agrees_closely(of, r, r64):
                return {"rule": "cached_result", "evidence": f"the output matches the reference of trial {u} "
                                                             f"(other inputs), not this trial's"}
        # The output failed this trial and is bit-identical for the probe inputs, whose exact
        # reference differs from this trial's: it does not follow the inputs. (Whether the two
        # references differ beyond the tolerance depends on the trial's random values, so the
        # rule must not: a constant scalar loss could otherwise read as precision_downgrade.)
        pr = fp["probe_ref"]
        if probe is not None and pr is not None and tuple(probe.shape) == tuple(o.shape) and \
                torch.equal(self._fp(probe, i), of) and not torch.equal(pr[i], ref):
            return {"rule": "closed_form", "evidence": "identical outputs for the trial's inputs and the probe inputs "
                                                       "(same shapes, other values) whose references differ: the "
                                                       "output does not depend on the input values"}
        for u, d in others:
            prev = own(d)
            if prev is not None and torch.equal(prev, of) and not here.passes(d["fp"]["ref"][i]):
                return {"rule": "closed_form", "evidence": f"output identical to the candidate's output for trial {u}, "
                                                           "whose reference differs: the output does not depend on "
                                                           "the input values"}
        for u, d in others:
            prev = own(d)
            # Zeros do not count: a kernel that writes 0 where it should compute (a zeroed tail, a
            # skipped block) writes the same zeros every call, which is a wrong output, not memory
            # left from an earlier call (that holds the earlier call's non-zero values).
            nonzero = of != 0
            if prev is not None and bool(nonzero.any()):
                same = float(((prev == of) & nonzero).sum()) / float(nonzero.sum())
                if same >= 0.5:
                    return {"rule": "stale_memory", "evidence": f"{same:.0%} of the output's non-zero elements are bit-identical "
                                                                f"to the candidate's output for trial {u}: memory left "
                                                                "from an earlier call, not computed from these inputs"}
        return None

    def _own_outputs(self, trial: Dict[str, Any]) -> Optional[List[Any]]:
        """The current candidate's own outputs for a trial, if it has run it."""
        return trial["outputs"].get(getattr(self, "candidate", ""))

    def forget(self, msg: dict) -> dict:
        """Drops what the judge kept of a finished candidate (its outputs per trial, a copy of timed
        outputs whose whole check never came)."""
        cand = str(msg.get("candidate", ""))
        for t in self.trials.values():
            t["outputs"].pop(cand, None)
        getattr(self, "snapshots", {}).pop(cand, None)
        return {}
