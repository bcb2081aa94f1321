"""The judge's comparison of a candidate's outputs (the `compare` op, and the whole-output checks
of timed calls that share it): against the trial's references under the profile's tolerance, then
the cheat rules of the run facts, the failing output's values and the candidate's other trials.
A mixin of worker/judge.py's Judge, whose trials, references and fingerprints it reads."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from . import accounting, compare, inputs, protocol, rules
from .judge_timing import release_cached as _release_cached
from .protocol import WorkerError


class Comparisons:
    """Judge ops: compare."""

    def compare(self, msg: dict) -> dict:
        self._steps = steps = protocol.Steps()
        try:
            reply = self._compare(msg)
        finally:
            self._steps = None
            _release_cached()
        steps.mark("release")
        return dict(reply, steps_ms=steps.ms())

    def _mark(self, step: str) -> None:
        """A step of the compare request under way, if any (its steps_ms)."""
        if self._steps is not None:
            self._steps.mark(step)

    def _compare(self, msg: dict) -> dict:
        self._need_problem()
        trial = int(msg["trial"])
        if trial not in self.trials:
            raise WorkerError("protocol", f"compare: no inputs were made for trial {trial}")
        t = self.trials[trial]
        report = msg.get("run_report")
        if report is not None:
            bad = rules.malformed_report(report)
            if bad:
                return self._fail("cheat", bad, rule="malformed_report", evidence=bad)
            found = rules.evaluate_run(report, require_triton=bool(msg.get("require_triton", True)))
            self._mark("rules")
            if found:
                return {"match": False, "verdict_hint": rules.verdict_of_rule(found[0]["rule"]), "rule": found[0]["rule"],
                        "evidence": found[0]["evidence"], "violations": found, "message": found[0]["evidence"]}
        full = self._full(trial)
        self._mark("reference")
        if report is not None and report.get("inputs_checksum") != t["checksum"]:
            # Made in the candidate's process from this trial's seed (inputs.py): other values mean
            # its code changed how they are made (a default device or dtype, a patched generator).
            return self._fail("wrong_output", "the candidate's process made other inputs from this trial's seed than the "
                                              "judge did (input checksum differs): its code changed how get_inputs() "
                                              "runs, e.g. torch's default device or dtype, or a random generator",
                              rule="inputs_differ")
        ref = full["ref"]
        limit = 4 * sum(r.numel() * r.element_size() for r in ref) + (1 << 20)
        try:
            outs = protocol.load_tensors(msg["outputs_file"], limit, untrusted_writer=True)
        except protocol.UntrustedFile as e:
            return self._fail("cheat", f"outputs: {e.message}", rule="output_file_tampered", evidence=e.message)
        except WorkerError as e:
            return self._fail("wrong_shape", f"outputs: {e.message}")
        self._mark("load")
        return self._judge_outputs(trial, full, outs, report, str(msg.get("candidate", "")))

    def _judge_outputs(self, trial: int, full: Dict[str, Any], outs: Dict[str, Any], report: Optional[Dict[str, Any]],
                       candidate: str) -> dict:
        """A candidate's outputs for a trial (from its file, or from the output region of a timed
        call, without a run report) against the trial's references and the cheat rules."""
        t = self.trials[trial]
        ref, ref64 = full["ref"], full["ref64"]
        probe_outs = {k[len(protocol.PROBE_PREFIX):]: v for k, v in outs.items() if k.startswith(protocol.PROBE_PREFIX)}
        outs = {k: v for k, v in outs.items() if not k.startswith(protocol.PROBE_PREFIX)}
        self.candidate = candidate
        on = self._on_compare_device
        outs = {k: on(v) for k, v in outs.items()}  # onto the judge's device once
        probe_outs = {k: on(v) for k, v in probe_outs.items()}
        self._mark("to_device")
        if sorted(outs) != [str(i) for i in range(len(ref))]:
            return self._fail("wrong_shape", f"expected {len(ref)} output(s) named 0..{len(ref) - 1}, found {sorted(outs)}")
        if report is not None:
            rewritten = _rewritten_outputs(report.get("output_checksums"), [outs[str(i)] for i in range(len(ref))])
            if rewritten:
                return self._fail("cheat", rewritten, rule="output_rewritten", evidence=rewritten)
        self._keep_outputs(t, [outs[str(i)] for i in range(len(ref))], ref)
        self._mark("keep")
        all_stats, trusted, passing_baselines = [], True, {}
        # References live on the judge's device; outputs are compared there (on the CPU the fp64
        # arithmetic over every element dominated the correctness phase of large problems).
        for i, r in enumerate(ref):
            o, r = on(outs[str(i)]), on(r)
            if tuple(o.shape) != tuple(r.shape):
                return self._fail("wrong_shape", f"output {i}: expected shape {list(r.shape)}, found {list(o.shape)}")
            if o.dtype != r.dtype:
                return self._fail("wrong_output", f"output {i}: expected dtype {r.dtype}, found {o.dtype}", rule="dtype")
            checker, base = self._whole(full, i)
            self._mark("whole")
            s = compare.stats(o, r, ref64[i] if ref64 else None, checker.ref_norm_error) if not checker.exact else {"exact": True}
            self._mark("stats")
            s["tolerance"] = checker.describe
            if base:
                trusted = False
                passing_baselines[str(i)] = list(base)  # its own: a note below may be added to it
            all_stats.append(s)
            passes = checker.passes(o)
            self._mark("passes")
            if passes and checker.profile == "kernelbench":
                # A blind tolerance (trivial outputs pass it) decides nothing: the output's own
                # distance from the reference does, the same in every run.
                blind = compare.blind_tolerance_error(s, base)
                if blind:
                    return self._fail("wrong_output", f"output {i}: {blind} ({checker.describe})", rule="blind_tolerance",
                                      stats=all_stats, tolerance_trusted=False, baselines_passing=passing_baselines,
                                      distribution=t["distribution"])
            if not passes:
                detail = dict(stats=all_stats, first_mismatch=compare.first_mismatch(checker, o),
                              tolerance_trusted=trusted, baselines_passing=passing_baselines,
                              distribution=t["distribution"])
                # Memory never written (NaN fill / poison) and all zeros are the more specific
                # stale_memory and zeros_pass, though such outputs are also input-independent.
                cheat = compare.value_cheat(o, r, t["distribution"], ref64[i] if ref64 else None, checker)
                if cheat is None or cheat["rule"] not in ("stale_memory", "zeros_pass"):
                    cheat = self._history_cheat(trial, i, o, checker, on(probe_outs.get(str(i)))) or cheat
                if cheat is not None:
                    return self._fail("cheat", f"output {i}: {cheat['evidence']}", rule=cheat["rule"],
                                      evidence=cheat["evidence"], **detail)
                norm = s.get("normalized_error") if checker.profile == "strict" else None
                where = compare.describe_mismatch(detail["first_mismatch"], norm if isinstance(norm, float) else None,
                                                  getattr(checker, "norm_bound", None))
                return self._fail("wrong_output", f"output {i}: {where} ({checker.describe})", **detail)
        # Right values computed by torch's own ops (strict): decided only for a matching output,
        # so a wrong output stays wrong_output whatever it used.
        if self.profile == "strict" and report is not None:
            fallback = [v for v in rules.evaluate_run(self._beyond_baseline(report, t, full), require_triton=False,
                                                      torch_fallback=True)
                        if v["rule"] == "torch_fallback"]
            self._mark("fallback")
            if fallback:
                return {"match": False, "verdict_hint": "cheat", "rule": "torch_fallback", "evidence": fallback[0]["evidence"],
                        "violations": fallback, "message": fallback[0]["evidence"], "stats": all_stats}
        hint = "correct"
        message = "all outputs match"
        notes = [f"trivial outputs would also pass: {dict(passing_baselines)}"] if not trusted else []
        # Per element, at the last correctness trial: elements no trial told apart from zero.
        undisc = self._undiscriminated_elements() if self.profile == "strict" and trial == self.n_trials - 1 else {}
        for k, u in undisc.items():
            trusted = False
            passing_baselines.setdefault(k, []).append("zeros_per_element")
            notes.append(f"output {k}: {u['count']} of {u['of']} non-zero reference elements (first at "
                         f"{u['first_index']}) are within tolerance of 0 in every trial (trials {u['trials']}), "
                         "so zeros there would pass")
        if notes:
            message = "outputs match, but " + "; ".join(notes)
            if self.profile == "strict":
                hint = "undiscriminating"
        return {"match": True, "verdict_hint": hint, "rule": None, "stats": all_stats, "message": message,
                "tolerance_trusted": trusted, "baselines_passing": passing_baselines,
                "undiscriminated_elements": undisc, "distribution": t["distribution"]}

    def _whole(self, full: Dict[str, Any], i: int) -> tuple:
        """Output i's checker over the whole reference (with the reference's own normalized error)
        and the trivial outputs that pass it: (checker, baselines). They depend on the trial's
        reference alone, so they are made once while it is kept, not in every candidate's
        comparison (for a large output, 8 of a comparison's 12 passes over it)."""
        made = full.setdefault("whole", {})
        if i in made:
            return made[i]
        r = self._on_compare_device(full["ref"][i])
        r64 = full["ref64"][i] if full["ref64"] else None
        checker = full.get("checkers", {}).get(i) or compare.Checker(self.profile, r, r64, self.kb_tolerance)
        whole = (checker, compare.baselines_passing(checker))
        # A strict checker without an fp64 reference holds an fp64 copy of the reference of its
        # own: not kept beside the trial's references.
        if self.profile != "strict" or r64 is not None:
            made[i] = whole
        return whole

    @staticmethod
    def _beyond_baseline(report: Dict[str, Any], t: Dict[str, Any], full: Dict[str, Any]) -> Dict[str, Any]:
        """The run report with its torch-op accounting less this trial's baseline (what making and
        checksumming the inputs and outputs reads in the judge), against the judge's input size."""
        aten = report.get("aten_compute")
        base = (t.get("baseline") or {}).get("ops")
        if not isinstance(aten, dict) or base is None:
            return report
        extra = accounting.ops_beyond(aten.get("ops"), base)
        return dict(report, aten_compute={"read_bytes": sum(extra.values()), "input_bytes": full["meta"]["input_bytes"],
                                          "ops": extra})

    def _on_compare_device(self, x: Any) -> Any:
        """A tensor moved to the judge's GPU for comparing (itself on a CPU judge)."""
        if isinstance(x, torch.Tensor) and self.device.startswith("cuda"):
            return x.to(self.device)
        return x

    def _fail(self, hint: str, message: str, rule: Optional[str] = None, **extra: Any) -> dict:
        out = {"match": False, "verdict_hint": hint, "rule": rule, "message": message}
        out.update(extra)
        return out


def _rewritten_outputs(bound: Any, outs: List[torch.Tensor]) -> Optional[str]:
    """Evidence when the outputs read from the file are not the ones the candidate's process
    checksummed at the end of its accounted span (None when they are)."""
    if not isinstance(bound, list) or len(bound) != len(outs):
        return (f"the run reported {len(bound) if isinstance(bound, list) else 'no'} output checksum(s) for "
                f"{len(outs)} output(s): the outputs were not bound when forward's request ended")
    for i, o in enumerate(outs):
        if inputs.checksum(o) != bound[i]:
            return (f"output {i} in the file differs from the output the candidate's process checksummed when "
                    "forward's request ended: it was changed afterwards (work done outside the accounted run)")
    return None
