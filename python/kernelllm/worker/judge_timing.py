"""The judge's side of timed calls (docs/trust-boundary.md, Times): the reference timed by the
same loop as a candidate, the output region a candidate's timed calls write into, and the checks
of that region. A mixin of worker/judge.py's Judge, whose fingerprints and comparisons it uses;
the orchestrator clocks each request (src/harness/timed_calls.cpp)."""
from __future__ import annotations

import math
import time

import torch

from . import accounting, compare, inputs, protocol, region, timing
from .protocol import WorkerError
from .timing import RELEASE_ABOVE_BYTES, release_cached  # noqa: F401 (judge.py's, and the tests')

# Calls per round trip at most (docs/verification.md, Timing): the output region holds one slot each.
MAX_SLOTS = 64
# Timing sets kept made across a problem's timing batches, the reference's own and every paired one
# (time_load with `reuse`, time_give), at most this many bytes of them: every set of a problem's
# (its inputs are under kTimingSetBytes, verifier.h), so that none is made again from its seed
# inside an exclusive hold (at 1 GiB, 47_Sum_reduction's sets beyond it took 1.8 s of one on an
# H200). A paired batch copies one round trip's sets at a time into its slots (time_give).
REUSE_BYTES = 2 << 30


# References of timing sets made in one time_prepare that wait for their one read-back, at most
# this many bytes (then read back, and the next sets wait for the next).
PENDING_BYTES = 512 << 20

# time_snapshot's copies: one of at most SNAPSHOT_BYTES, all of a judge's pending ones within
# SNAPSHOTS_BYTES (one per candidate thread whose whole check waits); beyond, "unsupported" and the
# orchestrator compares in the exclusive hold, as before the copies.
SNAPSHOT_BYTES = 256 << 20
SNAPSHOTS_BYTES = 1 << 30
# A whole-output check's calls compared at once (_whole_rows_pass), at most this many elements.
WHOLE_ROWS_ELEMENTS = 1 << 24


# Tensors the judge keeps for its lifetime (the timing sets' fingerprints and inputs as made) are
# copied one after another into shared allocations (Blocks): the first of KEPT_BLOCK_FIRST bytes,
# each next one twice the last, up to KEPT_BLOCK_MOST.
KEPT_BLOCK_FIRST = 8 << 20
KEPT_BLOCK_MOST = 256 << 20
_BLOCK_ALIGN = 512


def _aligned(n: int) -> int:
    """`n` bytes rounded up to a block's alignment."""
    return -(-n // _BLOCK_ALIGN) * _BLOCK_ALIGN


class Blocks:
    """Copies of tensors placed one after another in shared allocations, each copy a view of one
    (aligned as the allocator aligns). Each tensor its own allocation, a problem's timing sets were
    thousands of them (relu's 1 MiB outputs fall in the allocator's pool of 2 MiB segments), and
    on an H200 that 8 problems' processes shared, the cudaMallocs they cost were 30% of the
    reference's preparation (py-spy). An allocation lives while any copy in it does: for what
    the judge keeps for good, or copies that all go together."""

    def __init__(self, first: int, most: int) -> None:
        self.next, self.most = first, most
        self.buf: "torch.Tensor | None" = None
        self.used = 0

    def copy(self, t: torch.Tensor) -> torch.Tensor:
        """A copy of `t`: its clone where it is not a plain contiguous tensor (a subclass stays
        one), is empty, or is over half the largest allocation (an allocation of its own, so that
        no block is left mostly unused)."""
        n = t.numel() * t.element_size()
        if type(t) is not torch.Tensor or n == 0 or n > self.most // 2 or t.layout != torch.strided \
                or not t.is_contiguous() or t.requires_grad:
            return t.clone()
        size = _aligned(n)
        if self.buf is None or self.buf.device != t.device or self.used + size > self.buf.numel():
            self.buf, self.used = torch.empty(max(size, self.next), dtype=torch.uint8, device=t.device), 0
            self.next = min(self.next * 2, self.most)
        out = self.buf[self.used:self.used + n].view(t.dtype).view(t.shape)
        self.used += size
        return out.copy_(t)

    def copied(self, x):
        """_copied's copy of an input argument, a tensor placed in a block."""
        return self.copy(x) if isinstance(x, torch.Tensor) else _copied(x)


def _copied(x):
    """A copy of an input argument whose tensors are cloned, inside lists, tuples and dicts too, so
    that a reference writing into any of them in place leaves the kept set as made."""
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_copied(a) for a in x)
    if isinstance(x, dict):
        return {k: _copied(v) for k, v in x.items()}
    return x


class TimedCalls:
    """Judge ops: time_prepare, time_load, time_call (the reference), time_region,
    time_inputs_region, time_give, check_timed, l2_flush, ping."""

    def _slotted(self, places: list, slot_bytes: int, slots: int, what: str) -> tuple:
        """A fresh region of `slots` slots of one layout (`places`, `slot_bytes` each), poisoned
        (every byte 0xFF: NaN in floats) so that what was not written shows: (region, each slot's
        places)."""
        if type(slots) is not int or not 1 <= slots <= MAX_SLOTS:
            raise WorkerError("protocol", f"{what} region: 'slots' must be an integer in 1..{MAX_SLOTS}, found {slots!r}")
        per_slot = [[dict(p, offset=p["offset"] + j * slot_bytes) for p in places] for j in range(slots)]
        reg = region.Region.create(slot_bytes * slots, self.device)
        reg.data.fill_(255)
        return reg, per_slot

    def _new_region(self, trial: int, slots: int = 1) -> tuple:
        """A fresh output region laid out for `slots` calls' outputs on `trial`'s shapes (a timing
        set; every set has them), slot after slot: (region, its layout, its output tensors (flat,
        slot after slot), one slot's bytes)."""
        fp = self._fingerprint(trial, timing=True)
        places, slot_bytes = region.layout(fp["shapes"], fp["dtypes"])
        reg, per_slot = self._slotted(places, slot_bytes, slots, "output")
        flat = [p for ps in per_slot for p in ps]
        return reg, flat, reg.views(flat), slot_bytes

    def _release(self, name: str) -> None:
        """Drops the (region, views, slot bytes) held as `name` ("own", "shared", "given" or "own_given")
        and releases the region."""
        pair = getattr(self, name, None)
        setattr(self, name, None)
        if pair is not None:
            reg = pair[0]
            del pair  # its views go first: nothing keeps a mapping open for a view read after it
            for f in reg.close():
                protocol.stderr_note(f"timing region not released cleanly: {f}")

    def time_prepare(self, msg: dict) -> dict:
        """The reference (torch.compile'd with `compile`) for a timed batch of `slots` calls per
        round trip, its outputs copied into a region of the judge's own, as a candidate's are into
        the shared one (both pay the copy)."""
        t_request = time.perf_counter()
        self._need_problem()
        trials, trips, whole = msg.get("trials", []), msg.get("trips", []), msg.get("keep_whole", [])
        for name, value in (("trials", trials), ("keep_whole", whole)):
            if not isinstance(value, list) or not all(type(t) is int for t in value):
                raise WorkerError("protocol", f"time_prepare: '{name}' must be a list of trial numbers")
        if not isinstance(trips, list) or not all(isinstance(g, list) and all(type(t) is int for t in g) for g in trips):
            raise WorkerError("protocol", "time_prepare: 'trips' must be a list of lists of trial numbers")
        # The timing sets whose whole references stay kept (judge.py, _full): those of a batch's
        # last round trip, whose every output is compared whole after it. Of every other timing
        # set only its fingerprint is kept; a whole comparison of one makes its references again.
        self.keep_whole.update(whole)
        # `sets_only`: the sets' references and checkers alone, for a batch that comes later (the
        # reference's preparation, a few round trips a request): no timer and no output region
        # (each made and released per request, a GPU mapping each).
        sets_only = bool(msg.get("sets_only"))
        slots = msg.get("slots", 1)
        if not sets_only:
            fn = torch.compile(self.model) if msg.get("compile") else self.model
            self.timer = None
            self._release("own")
            self._release("own_given")  # (the reference's input slots of the timer before)
            reg, _, views, slot_bytes = self._new_region(int(msg["trial"]), slots)
            self.own = (reg, views, slot_bytes)
            self.timer = timing.CallTimer(fn, self.device, views, slots)
        # Every timing set's references, fingerprint checkers and device positions now, before the
        # clock. Made lazily, they were built in the reference's clocked check of each set (one set
        # per timed call) and found made by every candidate's: the reference paid its own forward,
        # its fp64 copy and the accounting in every timed call, which inflated every speedup.
        # Where the request's time goes (the reply's steps_ms; the report's judge_ms as
        # time_prepare.<step>): the sets' inputs made from their seeds (and kept), their references
        # (forwards, fingerprints, tolerance statistics), the read-backs, the round trips' limits,
        # and the rest (the region, the checkers).
        self.prep_steps = steps = {"make": 0.0, "references": 0.0, "read_back": 0.0, "limits": 0.0}
        try:
            # The sets' read-backs (input checksums, tolerance statistics) all at once, or once
            # PENDING_BYTES of references wait for them: a synchronize a set cost ~10 ms each on
            # an H200 that 8 problems' processes shared (time-sliced), against ~0.5 ms a set alone.
            pending: list = []
            waiting = 0
            for t in trials:
                if t not in self.trials:
                    raise WorkerError("protocol", f"no inputs were made for trial {t}")
                if "fp" not in self.trials[t]:
                    made, t0 = len(pending), time.perf_counter()
                    self._full(t, timing=True, pending=pending)
                    steps["references"] += time.perf_counter() - t0  # (less the making, below)
                    waiting += sum(p[2] for p in pending[made:])
                    if waiting > PENDING_BYTES:
                        t0 = time.perf_counter()
                        self.finish_pending(pending)
                        steps["read_back"] += time.perf_counter() - t0
                        waiting = 0
            t0 = time.perf_counter()
            self.finish_pending(pending)
            steps["read_back"] += time.perf_counter() - t0
            steps["references"] -= steps["make"]  # (_full timed both; it adds its making to "make")
            shapes = self._fingerprint(int(msg["trial"]), timing=True)["shapes"]
            n_out = len(shapes)  # (the region's outputs per slot are laid out from these)
            for t in trials:
                for i in range(n_out):
                    self._fp_checker(t, i)
        finally:
            self.prep_steps = None
            # A preparation's requests keep what the allocator cached for the next one's sets (given
            # back and taken again, every set's forwards and copies were cudaMallocs anew, each
            # waiting on a GPU other processes share); its last request gives it back.
            if not sets_only or msg.get("release", True):
                release_cached()
        t_limits = time.perf_counter()
        on = torch.device(self.device)
        if on.type == "cuda" and on.index is None:
            on = torch.device("cuda", torch.cuda.current_device())
        for i, shape in enumerate(shapes):
            self._fp_index_on(i, math.prod(shape), on)
        # The strict profile's per-call tolerances of each round trip's calls, for the check of
        # all its slots at once (compare.rows_pass); kept, since every candidate's paired reference
        # prepares the same round trips again.
        self.trip_limits = getattr(self, "trip_limits", None) or {}
        wanted = {}
        for group in trips:
            if len(group) < 2:
                continue
            for i in range(n_out):
                if (tuple(group), i) in self.trip_limits:
                    continue
                checkers = [self._fp_checker(t, i) for t in group]
                if not checkers[0].exact and checkers[0].profile != "kernelbench":
                    wanted[(tuple(group), i)] = checkers
        # Every round trip's columns copied to the device at once (a copy from the host waits for
        # the device's queue: one a round trip was ~2 synchronizes each).
        for key, limits in zip(wanted, compare.rows_limits_many(list(wanted.values()), on)):
            self.trip_limits[key] = limits
        steps["limits"] = time.perf_counter() - t_limits
        reply: dict = {}
        if msg.get("estimate"):
            t0 = time.perf_counter()
            reply["call_kernel_ms"], reply["estimate_note"] = self._kernel_ms(int(msg["trial"]), int(msg["estimate"]))
            steps["estimate"] = time.perf_counter() - t0
        steps["other"] = max(0.0, time.perf_counter() - t_request - sum(steps.values()))
        return dict(reply, steps_ms={k: round(v * 1e3, 3) for k, v in steps.items()})

    def _kernel_ms(self, trial: int, calls: int) -> tuple:
        """The reference's time per call on timing set `trial` (ms), with why when there is none:
        its GPU kernels' own durations (the profiler's, the median of `calls` calls) or the host's
        time to launch them (the least of `calls` unprofiled calls), whichever is longer, each call
        on a fresh copy of the set. Neither counts the GPU's idle gaps, where a busy host or other
        processes' work shows: such work can only lengthen the kernels, and the least launch time
        is the one least slowed."""
        if not 1 <= calls <= 16:
            raise WorkerError("protocol", f"time_prepare: 'estimate' must be 1..16 calls, found {calls}")
        made = self._kept_set(trial) or self._make(trial)
        sync = torch.cuda.synchronize if self.device.startswith("cuda") else (lambda: None)
        kernels, launches = [], []
        for _ in range(calls):
            args = [_copied(a) for a in made]
            with torch.no_grad(), accounting.KernelProfiler(self.device) as prof:
                self.model(*args)
                sync()
            res = prof.result()
            if not res.get("available"):
                return None, res.get("reason", "no kernel profile")
            kernels.append(sum(k["us"] for k in res["kernels"]) / 1e3)
        # The host's time to issue a call's work, unprofiled (the profiler slows launches): a
        # reference of many small kernels is bound by it, and a round trip of its calls by it too.
        for _ in range(calls):
            args = [_copied(a) for a in made]
            sync()
            t0 = time.perf_counter()
            with torch.no_grad():
                self.model(*args)
            launches.append((time.perf_counter() - t0) * 1e3)
        sync()
        kernels.sort()
        return max(kernels[len(kernels) // 2], min(launches)), ""

    def time_load(self, msg: dict) -> dict:
        """A round trip's timing sets made on the device from their trials' seeds (`trials`): the
        round trip is the baseline of a candidate's load, which makes the same sets the same way.
        With `reuse` (the reference's own batch: no candidate load is clocked against this one) a
        kept set is copied instead of made again: making them from their seeds cost 0.25-0.6 ms a
        set on the H200 (64 sets a round trip of relu). They are kept as made when their references
        are (time_prepare), else by the first batch. A copy, so that a reference that writes into
        its inputs leaves the kept set as made. (A paired batch whose inputs are handed over loads
        nothing: time_give copies each round trip's sets into both sides' slots.)"""
        if getattr(self, "timer", None) is None:
            raise WorkerError("protocol", "time_load before time_prepare")
        trials = msg["trials"]
        if not isinstance(trials, list) or not trials or not all(type(t) is int for t in trials):
            raise WorkerError("protocol", "time_load: 'trials' must be a non-empty list of trial numbers")
        if not msg.get("reuse"):
            return {"sets": self.timer.add_all([self._make(t) for t in trials])}
        out = []
        # The round trip's copies in one allocation (the allocator's again for the next round trip).
        kept = [self._kept_set(t) for t in trials]
        span = sum(_aligned(inputs.nbytes(m)) + _BLOCK_ALIGN * len(m) for m in kept if m)
        block = Blocks(max(span, 1), max(span, 1))
        for t, made in zip(trials, kept):
            if made is None:
                made = self._make(t)
                if not self._keep_set(t, made):  # not kept: this batch's own
                    out.append(made)
                    continue
            out.append([block.copied(a) for a in made])
        return {"sets": self.timer.add_all(out)}

    def _handed_over(self, made: list) -> bool:
        """Whether the timing sets can be handed over in an input region (region.inputs_layout);
        every set has the same shapes, so one set's layout serves every candidate of the problem."""
        if getattr(self, "given_layout", None) is None:
            self.given_layout = region.inputs_layout(made, self.device)
        return self.given_layout[0] is not None

    def _kept_set(self, trial: int):
        """A timing set kept made (time_load with `reuse`), or None."""
        return (getattr(self, "made_sets", None) or {}).get(trial)

    def _keep_set(self, trial: int, made: list, copy: bool = False) -> bool:
        """Keeps timing set `trial` as made (a copy of `made` with `copy`) for the batches that reuse
        it, within REUSE_BYTES in all: whether it is kept."""
        if getattr(self, "made_sets", None) is None:
            self.made_sets, self.made_bytes = {}, 0
        if trial in self.made_sets:
            return True
        size = inputs.nbytes(made)
        if self.made_bytes + size > REUSE_BYTES:
            return False
        self.made_sets[trial] = [self.kept_blocks.copied(a) for a in made] if copy else made
        self.made_bytes += size
        return True

    def time_call(self, msg: dict) -> dict:
        if getattr(self, "timer", None) is None:
            raise WorkerError("protocol", "time_call before time_prepare")
        return self.timer.call(msg["sets"])

    def time_region(self, msg: dict) -> dict:
        """A fresh output region for the next candidate's timed batch (docs/trust-boundary.md,
        Times), `slots` calls' outputs per round trip. Its descriptor goes to the orchestrator over
        fd 5 before this reply; the one before is released here, so a candidate that kept its
        mapping writes into memory nobody reads."""
        self._need_problem()
        self._release("shared")
        slots = msg.get("slots", 1)
        reg, places, views, slot_bytes = self._new_region(int(msg["trial"]), slots)
        self.shared = (reg, views, slot_bytes)
        region.send_fd(reg.fd)
        return {"region": {"bytes": reg.nbytes, "outputs": places, "slots": slots}}

    def time_inputs_region(self, msg: dict) -> dict:
        """A fresh input region for the next candidate's timed batch: `slots` input sets laid out as
        `trial`'s, one per call of a round trip. Its descriptor goes to the orchestrator over fd 5
        before this reply (none when the sets cannot travel this way: an `unsupported` error says
        why, and the candidate makes its own sets). The paired reference gets input slots of its
        own, laid out the same in a region of the judge's alone, added to its timer: their indices
        are `reference_sets`, the same every round trip. `time_give` fills both before each."""
        self._need_problem()
        if getattr(self, "own_given", None) is not None:
            # (Released now, the reference's slots would leave views in the timer that read
            # unmapped memory: the next batch's time_prepare releases them with its timer.)
            raise WorkerError("protocol", "time_inputs_region twice for one time_prepare")
        self._release("given")
        if getattr(self, "given_layout", None) is None:
            self._handed_over(self._make(int(msg["trial"])))
        places, slot_bytes = self.given_layout
        if places is None:
            raise WorkerError("unsupported", f"the input sets cannot be handed over in a region: {slot_bytes}")
        if getattr(self, "timer", None) is None:
            raise WorkerError("protocol", "time_inputs_region before time_prepare")
        slots = msg.get("slots", 1)
        reg, per_slot = self._slotted(places, slot_bytes, slots, "input")
        own, own_slots = self._slotted(places, slot_bytes, slots, "input")
        self.own_given = (own, [own.views(ps) for ps in own_slots], slot_bytes)
        self.given = (reg, [reg.views(ps) for ps in per_slot], slot_bytes)
        region.send_fd(reg.fd)
        return {"inputs": {"bytes": reg.nbytes, "slots": per_slot}, "reference_sets": self.timer.add_all(self.own_given[1])}

    def time_give(self, msg: dict) -> dict:
        """Copies timing set `trials`[j] into slot j of the candidate's input region and of the
        reference's own input slots, and waits for the copies: the next round trip of each side
        runs on them. A set kept as made is copied (a reference may write into its inputs, and the
        candidate into its region), else made from its seed here (and kept, within REUSE_BYTES)."""
        held, own = getattr(self, "given", None), getattr(self, "own_given", None)
        if held is None or own is None or getattr(self, "timer", None) is None:
            raise WorkerError("protocol", "time_give before time_prepare and time_inputs_region")
        views, own_views = held[1], own[1]
        trials = msg.get("trials")
        if not isinstance(trials, list) or not 1 <= len(trials) <= len(views):
            raise WorkerError("protocol", f"time_give: 'trials' must list 1..{len(views)} timing sets, found {trials!r}")
        for j, t in enumerate(trials):
            if type(t) is not int or t not in self.trials:
                raise WorkerError("protocol", f"time_give: no inputs were made for trial {t!r}")
            src = self._kept_set(t)
            if src is None:
                src = self._make(t)
                self._keep_set(t, src)
            if len(src) != len(views[j]):
                raise WorkerError("protocol", f"time_give: trial {t} has {len(src)} arguments, the region {len(views[j])}")
            for dst, mine, a in zip(views[j], own_views[j], src):
                dst.copy_(a)
                mine.copy_(a)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        return {}

    def _slots_at_fp(self, reg: "region.Region", views: list, slot_bytes: int, i: int, calls: int) -> torch.Tensor:
        """Output i of the first `calls` slots at its fingerprint positions, as (calls x values): one
        strided view over the region (slots lie slot_bytes apart) and one gather."""
        v0 = views[i]
        size = v0.element_size()
        typed = reg.data[:slot_bytes * calls].view(v0.dtype)
        at = (v0.data_ptr() - reg.data.data_ptr()) // size
        rows = torch.as_strided(typed, (calls, v0.numel()), (slot_bytes // size, 1), typed.storage_offset() + at)
        on = self._fp_index_on(i, v0.numel(), rows.device)
        return rows if on is None else rows[:, on]

    def time_snapshot(self, msg: dict) -> dict:
        """Copies the shared output region's first len(`trials`) slots (a round trip's outputs, call
        j's on trial trials[j]), for their whole check after the GPU's exclusive hold (check_timed
        with `snapshot` and the same `candidate`). Taken with the candidate stopped: once continued
        it may write into the region again, never into this copy. Waits for the copy before the
        reply, so that nothing the candidate queues afterwards can overtake it. Kept per candidate
        (another candidate's batch may come between) until its check or `forget`."""
        self._need_problem()
        held = getattr(self, "shared", None)
        if held is None:
            raise WorkerError("protocol", "time_snapshot before time_region")
        _, views, _ = held
        trials = self._trials_of(msg, "time_snapshot")
        n_out = self._outputs_per_call(trials, views, "time_snapshot")
        if not hasattr(self, "snapshots"):
            self.snapshots: dict = {}
        candidate = str(msg.get("candidate", ""))
        self.snapshots.pop(candidate, None)
        taking = views[:len(trials) * n_out]
        size = sum(v.numel() * v.element_size() for v in taking)
        pending = sum(v.numel() * v.element_size() for _, vs in self.snapshots.values() for v in vs)
        if size > SNAPSHOT_BYTES or pending + size > SNAPSHOTS_BYTES:
            raise WorkerError("unsupported", f"time_snapshot: {size} bytes to copy beside {pending} pending "
                                             f"(at most {SNAPSHOT_BYTES}, {SNAPSHOTS_BYTES} in all)")
        self.snapshots[candidate] = (list(trials), [v.clone() for v in taking])
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        return {}

    def check_timed(self, msg: dict) -> dict:
        """_check_timed, with where its time went for the orchestrator's accounting (trip_steps_ms):
        `judge_ms` in this process, `sync_ms` of it waiting for the device."""
        t0, self.sync_s = time.perf_counter(), 0.0
        res = self._check_timed(msg)
        return dict(res, judge_ms=(time.perf_counter() - t0) * 1e3, sync_ms=self.sync_s * 1e3)

    def _sync(self) -> None:
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        self.sync_s += time.perf_counter() - t0

    def _check_timed(self, msg: dict) -> dict:
        """Checks the output region after a round trip of timed calls, call j on the inputs of
        `trials[j]` in slot j: every fingerprint position of every output
        (elementwise part of the tolerance), all slots at once; or with `full` each slot's whole
        output against the full reference and the cheat rules. `own`: the reference's region (the
        same work, so both sides' clocked checks cost the same). Then poisons the region again, so
        the next round trip must write all of it (unless `keep`: the whole-output check, or the
        copy for it, comes next). With `full` and `snapshot`: the whole check of the copy
        time_snapshot took for `candidate`, not of the region. A mismatch names its `slot`."""
        self._need_problem()
        trials = self._trials_of(msg, "check_timed")
        if msg.get("snapshot"):
            return self._check_snapshot(trials, str(msg.get("candidate", "")))
        held = getattr(self, "own" if msg.get("own") else "shared", None)
        if held is None:
            raise WorkerError("protocol", "check_timed before time_prepare/time_region")
        reg, views, slot_bytes = held
        fps = [self._fingerprint(t) for t in trials]
        n_out = self._outputs_per_call(trials, views, "check_timed")
        if self.device.startswith("cuda"):
            self._sync()
        try:
            if msg.get("full"):
                return self._check_whole(trials, views, n_out, str(msg.get("candidate", "")))
            if len(trials) == 1:
                for i, v in enumerate(views[:n_out]):
                    flat = v.reshape(-1)
                    checker, at = self._fp_checker(trials[0], i), self._at_fp(flat, i)
                    ok, detail = compare.values_pass(checker, at, self._fp_positions(i, flat.numel()))
                    if not ok:
                        return {"match": False, "slot": 0, "message": f"output {i}: {detail}"}
                    sampled = self._fp_positions(i, flat.numel()) is not None
                    bad = self._norm_failing([checker], at.reshape(1, -1), sampled, i, 1)
                    if bad:
                        return bad
            else:
                limits = getattr(self, "trip_limits", {})
                for i in range(n_out):
                    got = self._slots_at_fp(reg, views, slot_bytes, i, len(trials))
                    checkers = [self._fp_checker(t, i) for t in trials]
                    sampled = self._fp_positions(i, views[i].numel()) is not None
                    row, norm = compare.rows_strict(checkers, got, limits.get((tuple(trials), i)), sampled)
                    if row >= 0:
                        _, detail = compare.values_pass(checkers[row], got[row], self._fp_positions(i, views[i].numel()))
                        return {"match": False, "slot": row,
                                "message": f"call {row} of {len(trials)} in the round trip: output {i}: {detail}"}
                    bad = self._norm_reply(norm, sampled, i, len(trials), got.shape[-1])
                    if bad:
                        return bad
            n = sum(int(x.numel()) for fp in fps for x in fp["ref"])
            return {"match": True, "message": f"{n} fingerprint values match"}
        finally:
            if not msg.get("keep"):  # kept for the whole-output check that follows
                reg.data.fill_(255)
                if self.device.startswith("cuda"):
                    self._sync()
            if msg.get("full"):  # references made again there (not kept) go back before the next run
                release_cached()

    @staticmethod
    def _trials_of(msg: dict, op: str) -> list:
        """A round trip's `trials` (the trial of each call, in slot order): a non-empty list of ints."""
        trials = msg.get("trials")
        if not isinstance(trials, list) or not trials or not all(type(t) is int for t in trials):
            raise WorkerError("protocol", f"{op}: 'trials' must be a non-empty list of trial numbers, found {trials!r}")
        return trials

    def _outputs_per_call(self, trials: list, views: list, op: str) -> int:
        """How many outputs each call has (the views hold them call after call), when the region has
        a slot for every call of `trials`."""
        n_out = max(1, len(self._fingerprint(trials[0])["shapes"]))
        if len(trials) > len(views) // n_out:
            raise WorkerError("protocol", f"{op}: {len(trials)} calls for {len(views) // n_out} output slot(s)")
        return n_out

    def _check_whole(self, trials: list, views: list, n_out: int, candidate: str) -> dict:
        """Each call's whole outputs (views, call after call, n_out each) against the full references
        of its trial and the cheat rules; a mismatch names its `slot`."""
        # Kept from now on, when not already (a batch ended before its planned last round trip,
        # within its budget): the next candidate's batch likely ends there too.
        self.keep_whole.update(trials)
        fulls = [self._full(t, timing=True) for t in trials]
        if self._whole_rows_pass(trials, fulls, views, n_out, candidate):
            return {"match": True, "verdict_hint": "correct", "message": f"the whole outputs of {len(trials)} call(s) match"}
        res: dict = {"match": True, "message": "no outputs"}
        for j, t in enumerate(trials):
            outs = {str(i): v for i, v in enumerate(views[j * n_out:(j + 1) * n_out])}
            res = self._judge_outputs(t, fulls[j], outs, None, candidate)
            if not res.get("match"):
                return dict(res, slot=j)
        return res

    def _whole_rows_pass(self, trials: list, fulls: list, views: list, n_out: int, candidate: str) -> bool:
        """Whether every call's whole outputs pass the strict profile's tolerance (elementwise and
        normalized error against the fp64 reference, or the reference in fp64 where there is
        none), all calls of an output checked at once (compare.rows_strict: two read-backs)
        instead of one comparison each with its statistics (several read-backs a call, each a wait
        for the GPU that other processes share: 5-8 s of a throughput run's shared holds on an
        H200). False decides nothing: the calls are then judged one by one as before
        (_judge_outputs: the first failing call's verdict, rule and evidence). Only where that
        could not fail a passing output: the strict profile (the kernelbench one's blind tolerance
        fails some), no run report (torch_fallback) and timing sets (never the last trial, whose
        matching output may still be undiscriminating). A pass's reply says only that (no
        statistics; the orchestrator reads `match` and `slot`). The normalized error is summed in
        another order than _judge_outputs' (the last bit may differ: only an output exactly at
        the bound could be decided otherwise)."""
        if self.profile != "strict" or any(t < self.n_trials for t in trials):
            return False
        rows = len(trials)
        for i in range(n_out):
            checkers = [self._whole(f, i)[0] for f in fulls]
            if any(c.profile != "strict" for c in checkers):
                return False
            outs = [views[j * n_out + i] for j in range(rows)]
            ref = fulls[0]["ref"][i]
            if any(tuple(o.shape) != tuple(ref.shape) or o.dtype != ref.dtype for o in outs):
                return False
            # Calls a pass, within WHOLE_ROWS_ELEMENTS (the fp64 temporaries are a few times that).
            step = WHOLE_ROWS_ELEMENTS // max(1, ref.numel())
            if step < 1:
                return False
            for a in range(0, rows, step):
                got = torch.stack([self._on_compare_device(o).reshape(-1) for o in outs[a:a + step]])
                first, (bad_norm, _, _) = compare.rows_strict(checkers[a:a + step], got, None, False)
                if first >= 0 or bad_norm >= 0:
                    return False
        # What the history rules keep of each call (as _judge_outputs does).
        self.candidate = candidate
        for j, (t, f) in enumerate(zip(trials, fulls)):
            self._keep_outputs(self.trials[t], views[j * n_out:(j + 1) * n_out], f["ref"])
        return True

    def _check_snapshot(self, trials: list, candidate: str) -> dict:
        """check_timed's whole check of the copy time_snapshot took of the candidate's outputs of
        the same calls (dropped by it, whatever the answer)."""
        taken = getattr(self, "snapshots", {}).pop(candidate, None)
        if taken is None or taken[0] != trials:
            raise WorkerError("protocol", f"check_timed: no copy of {candidate!r}'s outputs of trials {trials} was taken "
                                          "(time_snapshot)")
        views = taken[1]
        del taken
        try:
            return self._check_whole(trials, views, len(views) // len(trials), candidate)
        finally:
            views.clear()  # the copies go before the cached memory is given back
            release_cached()

    def _norm_failing(self, checkers: list, got: torch.Tensor, sampled: bool, i: int, calls: int) -> dict:
        """A failed check_timed reply when a call's output i breaks the strict profile's normalized-error
        bound over its checked values (compare.rows_norm_failing), else {}."""
        return self._norm_reply(compare.rows_norm_failing(checkers, got, sampled), sampled, i, calls, got.shape[-1])

    @staticmethod
    def _norm_reply(norm: tuple, sampled: bool, i: int, calls: int, n: int) -> dict:
        """_norm_failing's reply from rows_norm_failing's (row, error, bound)."""
        row, err, bound = norm
        if row < 0:
            return {}
        over = "a sample of" if sampled else "all"
        return {"match": False, "slot": row,
                "message": f"call {row} of {calls} in the round trip: output {i}: normalized error {err:.3g} over {over} "
                           f"its {n} checked values > {bound:.3g}"}

    def l2_flush(self, msg: dict) -> dict:
        """Evicts the L2 before a timed call of any process on this GPU (the L2 is shared)."""
        if getattr(self, "flusher", None) is None:
            self.flusher = timing.L2Flusher(getattr(self, "device", "cpu"))
        return self.flusher.flush()

    def ping(self, msg: dict) -> dict:
        """A no-op: the orchestrator's measure of one request's fixed cost."""
        return {}

