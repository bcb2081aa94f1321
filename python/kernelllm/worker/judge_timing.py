"""The judge's side of timed calls (docs/trust-boundary.md, Times): the reference timed by the
same loop as a candidate, the output region a candidate's timed calls write into, and the checks
of that region. A mixin of worker/judge.py's Judge, whose fingerprints and comparisons it uses;
the orchestrator clocks each request (src/harness/timed_calls.cpp)."""
from __future__ import annotations

import torch

from . import compare, protocol, region, timing
from .protocol import WorkerError


class TimedCalls:
    """Judge ops: time_prepare, time_load, time_call (the reference), time_region, check_timed,
    l2_flush, ping."""

    def _new_region(self, trial: int) -> tuple:
        """A fresh output region laid out for the outputs of `trial` (a timing set), poisoned
        (every byte 0xFF: NaN in floats) so that a call which writes nothing shows: (region, its
        layout, its output tensors)."""
        fp = self._fingerprint(trial)
        places, nbytes = region.layout(fp["shapes"], fp["dtypes"])
        reg = region.Region.create(nbytes, self.device)
        reg.data.fill_(255)
        return reg, places, reg.views(places)

    def _release(self, name: str) -> None:
        """Drops the (region, outputs) pair held as `name` ("own" or "shared") and releases it."""
        pair = getattr(self, name, None)
        setattr(self, name, None)
        if pair is not None:
            reg = pair[0]
            del pair  # the output tensors go first: a live view keeps a CPU mapping open
            for f in reg.close():
                protocol.stderr_note(f"output region not released cleanly: {f}")

    def time_prepare(self, msg: dict) -> dict:
        """The reference (torch.compile'd with `compile`) for a timed batch, its outputs copied into
        a region of the judge's own, as a candidate's are into the shared one (both pay the copy)."""
        self._need_problem()
        fn = torch.compile(self.model) if msg.get("compile") else self.model
        self.timer = None
        self._release("own")
        reg, _, views = self._new_region(int(msg["trial"]))
        self.own = (reg, views)
        self.timer = timing.CallTimer(fn, self.device, views)
        # Every timing set's references, fingerprint checkers and device positions now, before the
        # clock. Made lazily, they were built in the reference's clocked check of each set (one set
        # per timed call) and found made by every candidate's: the reference paid its own forward,
        # its fp64 copy and the accounting in every timed call, which inflated every speedup.
        trials = msg.get("trials", [])
        if not isinstance(trials, list) or not all(type(t) is int for t in trials):
            raise WorkerError("protocol", "time_prepare: 'trials' must be a list of trial numbers")
        for t in trials:
            for i in range(len(self._fingerprint(t)["ref"])):
                self._fp_checker(t, i)
        for i, v in enumerate(views):
            self._at_fp(v.reshape(-1), i)
        return {}

    def time_load(self, msg: dict) -> dict:
        """One timing set made on the device from its trial's seed (its round trip is the baseline
        of a candidate's load, which makes the same set the same way)."""
        if getattr(self, "timer", None) is None:
            raise WorkerError("protocol", "time_load before time_prepare")
        return self.timer.add(self._make(int(msg["trial"])))

    def time_call(self, msg: dict) -> dict:
        if getattr(self, "timer", None) is None:
            raise WorkerError("protocol", "time_call before time_prepare")
        return self.timer.call(int(msg["set"]))

    def time_region(self, msg: dict) -> dict:
        """A fresh output region for the next candidate's timed batch (docs/trust-boundary.md,
        Times). Its descriptor goes to the orchestrator over fd 5 before this reply; the one before
        is released here, so a candidate that kept its mapping writes into memory nobody reads."""
        self._need_problem()
        self._release("shared")
        reg, places, views = self._new_region(int(msg["trial"]))
        self.shared = (reg, views)
        region.send_fd(reg.fd)
        return {"region": {"bytes": reg.nbytes, "outputs": places}}

    def check_timed(self, msg: dict) -> dict:
        """Checks the output region after a timed call on `trial`'s inputs: every fingerprint
        position of every output (elementwise part of the tolerance), or with `full` the whole
        output against the full reference and the cheat rules. `own`: the reference's region (the
        same work, so both sides' clocked checks cost the same). Then poisons the region again, so
        the next call must write all of it (unless `keep`: the whole-output check comes next)."""
        self._need_problem()
        pair = getattr(self, "own" if msg.get("own") else "shared", None)
        if pair is None:
            raise WorkerError("protocol", "check_timed before time_prepare/time_region")
        reg, views = pair
        trial = int(msg["trial"])
        fp = self._fingerprint(trial)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        try:
            if msg.get("full"):
                outs = {str(i): v for i, v in enumerate(views)}
                return self._judge_outputs(trial, self._full(trial), outs, None, str(msg.get("candidate", "")))
            for i, v in enumerate(views):
                flat = v.reshape(-1)
                ok, detail = compare.values_pass(self._fp_checker(trial, i), self._at_fp(flat, i),
                                                 self._fp_positions(i, flat.numel()))
                if not ok:
                    return {"match": False, "message": f"output {i}: {detail}"}
            return {"match": True, "message": f"{sum(int(x.numel()) for x in fp['ref'])} fingerprint values match"}
        finally:
            if not msg.get("keep"):  # kept for the whole-output check that follows
                reg.data.fill_(255)
                if self.device.startswith("cuda"):
                    torch.cuda.synchronize()

    def l2_flush(self, msg: dict) -> dict:
        """Evicts the L2 before a timed call of any process on this GPU (the L2 is shared)."""
        if getattr(self, "flusher", None) is None:
            self.flusher = timing.L2Flusher(getattr(self, "device", "cpu"))
        return self.flusher.flush()

    def ping(self, msg: dict) -> dict:
        """A no-op: the orchestrator's measure of one request's fixed cost."""
        return {}

