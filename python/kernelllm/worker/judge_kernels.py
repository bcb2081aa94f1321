"""The judge's ops on whether Triton did the work (a mixin of worker/judge.py's Judge): the
static audit of a candidate's source before any of its code runs, and the classification of a
profiled run's GPU kernels against the audit's @triton.jit names (worker/kernel_audit.py)."""
from __future__ import annotations

import torch

from . import accounting, protocol, rules
from .protocol import WorkerError


class KernelChecks:
    """Judge ops: audit_source, kernel_check."""

    def audit_source(self, msg: dict) -> dict:
        """Static audit of a candidate's source text, sent by the orchestrator (never read from a
        file the candidate can rewrite), before any of its code runs. The reply's `load_verdict`
        (compile_error) ends the candidate at once; `after_correct` (no_triton_kernel for a source
        without @triton.jit kernels; precision_downgrade for a default-precision tl.dot in CPU mode,
        strict profile, fp32) is applied by the orchestrator if the candidate passes correctness; `kernel_names` are the
        names the kernel profile is matched against (kernel_check)."""
        from . import kernel_audit
        try:
            source = protocol.decode_source(msg)
        except ValueError as e:
            raise WorkerError("protocol", f"audit_source: {e}") from None
        device = getattr(self, "device", None) or str(msg.get("device", "cpu"))
        precision = getattr(self, "precision", torch.float32)
        return kernel_audit.audit_source(source, str(msg.get("path", "<candidate>")), device=device,
                                         precision_fp32=precision == torch.float32,
                                         profile=getattr(self, "profile", "strict"),
                                         require_triton=bool(msg.get("require_triton", True)))

    def kernel_check(self, msg: dict) -> dict:
        """Classifies the GPU kernels of a profiled forward (the candidate's `kernel_profile`)
        against the audit's @triton.jit names (`kernel_names`, which the orchestrator got from
        audit_source, not from the candidate). Strict profile: no Triton kernel ->
        no_triton_kernel, non-Triton compute kernels over half the GPU time -> torch_fallback;
        kernelbench profile: the shares are reported only."""
        from . import kernel_audit
        names = [str(n) for n in (msg.get("kernel_names") or []) if isinstance(n, str)]
        launches = msg.get("triton_launches")
        profile = msg.get("kernel_profile")
        # The profiled span is the whole run request: the kernels the judge's own steps besides
        # forward launched on the same trial are taken off (accounting.py), and the reference
        # forward's kernels measure how much torch work the problem is.
        rec = self.trials.get(int(msg["trial"])) if isinstance(msg.get("trial"), int) else None
        if rec is not None and rec.get("kernels_pending"):
            self._profile_baseline(int(msg["trial"]))
        base = (rec or {}).get("baseline") or {}
        if isinstance(profile, dict) and profile.get("available") and "kernels" in base:
            profile = dict(profile, kernels=accounting.kernels_beyond(profile.get("kernels"), base["kernels"]),
                           baseline_taken_off=True)
        res = kernel_audit.check_kernel_profile(profile, names, getattr(self, "profile", "strict"),
                                                launches if isinstance(launches, int) else None,
                                                reference=base.get("reference"))
        res["summary"]["baseline_taken_off"] = bool(isinstance(profile, dict) and profile.get("baseline_taken_off"))
        if res["violation"] is not None:
            res["violation"] = rules.violation(res["violation"]["rule"], res["violation"]["evidence"])
        return res
