"""The judge's side of timed calls (worker/judge_timing.py): the timing sets made, kept and copied,
the output and input regions of a round trip, and the checks of what a round trip's calls left
there (fingerprint values, the normalized-error bound, whole outputs at once or call by call)."""
from __future__ import annotations

import math
import os
import random
import zlib

import pytest
import torch

import worker_harness as wh
from judge_problems import (PROBLEM, TENSORS_ONLY, TWO_OUTPUTS, WorkerError, inputs, judge, judge_timing, make_judge as _judge,
                            module_of as _module, protocol, region)


def _round_trip_region(tmp_path, monkeypatch, source: str, calls: int, **fields) -> tuple:
    """A judge of `source` (load_problem `fields`) prepared for one round trip of `calls` calls on
    timing sets, its output region mapped as a candidate maps it, and _whole_rows_pass spied on:
    (judge, the sets' trials, the mapping, its views, each _whole_rows_pass answer, the spy)."""
    j = _judge(tmp_path, source=source, **fields)
    n = j.n_trials
    sets = list(range(n, n + calls))
    for t in range(n + calls):
        j.make_inputs({"trial": t, "lazy": t >= n})
    j.time_prepare({"trial": n, "compile": False, "slots": calls, "trials": sets, "trips": [sets]})
    sent = []
    monkeypatch.setattr(region, "send_fd", sent.append)
    reply = j.time_region({"trial": n, "slots": calls})
    mine = region.Region.attach(os.dup(sent[0]), reply["region"]["bytes"], "cpu")
    at_once = []
    real = judge_timing.TimedCalls._whole_rows_pass

    def spy(self, *a):
        at_once.append(real(self, *a))
        return at_once[-1]

    monkeypatch.setattr(judge_timing.TimedCalls, "_whole_rows_pass", spy)
    return j, sets, mine, mine.views(reply["region"]["outputs"]), at_once, spy


def test_the_whole_check_of_a_round_trips_calls_at_once_decides_as_one_call_at_a_time(tmp_path, monkeypatch):
    # A timed batch's whole-output check compares every call of the last round trip at once
    # (_whole_rows_pass, one read-back); only an all-pass is decided there, anything else is judged
    # call by call as before. Both ways give the same answer and name the same call.
    j, sets, mine, views, at_once, spy = _round_trip_region(tmp_path, monkeypatch, PROBLEM, 3)
    real = judge_timing.TimedCalls._whole_rows_pass
    refs = [j._full(t, timing=True)["ref"][0] for t in sets]
    r64 = [j._full(t, timing=True)["ref64"][0] for t in sets]
    checker = j._whole(j._full(sets[1], timing=True), 0)[0]
    room = (checker.atol + checker.rtol * r64[1].abs()).float()  # the elementwise tolerance per element

    def both(call1):
        answers = []
        for rows in (True, False):
            for v, r in zip(views, refs):
                v.copy_(r)
            views[1].copy_(call1)
            if not rows:
                monkeypatch.setattr(judge_timing.TimedCalls, "_whole_rows_pass", lambda *a: False)
            got = j.check_timed({"trials": sets, "full": True, "candidate": "cand-0"})
            answers.append((got["match"], got.get("slot"), got.get("verdict_hint")))
        monkeypatch.setattr(judge_timing.TimedCalls, "_whole_rows_pass", spy)
        assert answers[0] == answers[1], answers
        return answers[0]

    assert both(refs[1]) == (True, None, "correct") and at_once[-1] is True
    assert both(refs[1] + 0.3 * room * torch.sign(r64[1]).float())[0]  # a near miss stays correct
    one_off = refs[1].clone()
    one_off.reshape(-1)[5] += 1.0
    assert both(one_off) == (False, 1, "wrong_output") and at_once[-1] is False
    spread = refs[1] + 0.95 * room  # within every element's tolerance, all of them near it:
    assert both(spread)[:2] == (False, 1) and at_once[-1] is False  # over the normalized-error bound
    nan = refs[1].clone()
    nan.reshape(-1)[0] = float("nan")
    assert both(nan)[:2] == (False, 1)
    assert both(torch.zeros_like(refs[1]))[:2] == (False, 1)
    # Not a timing set's (a correctness trial's output may still be undiscriminating), or not the
    # strict profile: call by call only.
    assert not real(j, [0, 1, 2], [j._full(t) for t in range(3)], views, 1, "cand-0")
    for v, r in zip(views, refs):
        v.copy_(r)
    fulls = [j._full(t, timing=True) for t in sets]
    assert real(j, sets, fulls, views, 1, "cand-0")
    monkeypatch.setattr(j, "profile", "kernelbench")
    assert not real(j, sets, fulls, views, 1, "cand-0")
    del views
    assert mine.close() == []


def test_the_whole_check_at_once_takes_exact_outputs_too(tmp_path, monkeypatch):
    # An integer output (compared exactly) beside a float one: a wrong count in one call is found
    # at once and then named call by call, as before.
    j, sets, mine, views, at_once, _ = _round_trip_region(tmp_path, monkeypatch, TWO_OUTPUTS, 2)

    def fill():
        for k, t in enumerate(sets):
            for i, r in enumerate(j._full(t, timing=True)["ref"]):
                views[2 * k + i].copy_(r)

    fill()
    assert j.check_timed({"trials": sets, "full": True, "candidate": "c"})["match"] and at_once == [True]
    fill()
    views[3].reshape(-1)[0] += 1  # call 1's count
    got = j.check_timed({"trials": sets, "full": True, "candidate": "c"})
    assert not got["match"] and got["slot"] == 1 and at_once == [True, False], got
    del views
    assert mine.close() == []


ONE_INPUT = """import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return BODY
def get_inputs():
    return [INPUT]
def get_init_inputs():
    return []
"""


WHOLE_FUZZ = {
    "plain": ("x * 2.5 + 1", "torch.randn(4, 16)"),
    "nan_inf": ("torch.log(x)", "torch.cat([torch.randn(4, 15), torch.zeros(4, 1)], 1)"),
    "all_zero": ("x * 0", "torch.randn(4, 16)"),
    "sum": ("x.sum(dim=1)", "torch.randn(4, 1024)"),
    "int": ("(x > 0).sum(dim=1)", "torch.randn(4, 16)"),
    "huge": ("x * 1e30", "torch.randn(4, 16)"),
}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("case", list(WHOLE_FUZZ))
def test_the_whole_check_at_once_agrees_with_one_call_at_a_time_on_random_outputs(tmp_path, monkeypatch, case, precision):
    # Differential: random round trips of right outputs, near misses on either side of the
    # tolerance, spread errors, NaN and infinities put in or taken out, zeros; the at-once check
    # passes exactly those that every call's own comparison passes.
    body, made = WHOLE_FUZZ[case]
    source = ONE_INPUT.replace("BODY", body).replace("INPUT", made)
    j, sets, mine, views, _, _ = _round_trip_region(tmp_path, monkeypatch, source, 3, precision=precision)
    rng = random.Random(zlib.crc32(f"{case}/{precision}".encode()))
    fulls = [j._full(t, timing=True) for t in sets]
    seen = set()
    for _ in range(60):
        for k, f in enumerate(fulls):
            ref = f["ref"][0]
            out = ref.clone()
            if rng.random() < 0.5 and not ref.is_floating_point():
                out.reshape(-1)[rng.randrange(out.numel())] += 1
            elif rng.random() < 0.5:
                c = j._whole(f, 0)[0]
                r64 = c.ref64.reshape(ref.shape)
                room = c.atol + c.rtol * r64.abs()
                kind = rng.randrange(6)
                if kind == 0:
                    r64 = r64 + rng.uniform(-1.2, 1.2) * room * torch.sign(torch.randn_like(r64))
                elif kind == 1:
                    r64 = r64 + rng.uniform(0.9, 1.0001) * room
                elif kind == 2:
                    r64 = r64.clone()
                    r64.reshape(-1)[rng.randrange(r64.numel())] = rng.choice([math.nan, math.inf, -math.inf])
                elif kind == 3:
                    r64 = torch.where(torch.isfinite(r64), r64 * (1 + rng.uniform(-3, 3) * c.norm_bound), -r64)
                elif kind == 4:
                    r64 = torch.zeros_like(r64)
                else:
                    r64 = r64 + torch.randn_like(r64) * room * rng.uniform(0, 2)
                out = r64.to(ref.dtype)
            views[k].copy_(out)
        at_once = judge_timing.TimedCalls._whole_rows_pass(j, sets, fulls, views, 1, "c")
        one_by_one = all(j._judge_outputs(t, f, {"0": v}, None, "c")["match"] for t, f, v in zip(sets, fulls, views))
        assert at_once == one_by_one, (case, precision, [v.tolist() for v in views])
        seen.add(at_once)
    assert seen == {True, False}  # both answers came up
    del views
    assert mine.close() == []


@pytest.mark.parametrize("listed", [True, False])
def test_the_references_timing_checks_build_nothing_when_the_sets_are_prepared(tmp_path, monkeypatch, listed):
    # One timing set per timed call, its references made lazily: unless time_prepare lists the
    # sets, the reference's clocked checks build them (its forward, fp64 copy, accounting) and the
    # candidates' find them made, an unfair clock (relu on an H200: reference 5.9 ms a call,
    # candidates 1.1-1.5 ms).
    monkeypatch.setattr(judge, "FINGERPRINT_MAX", 8)
    j = _judge(tmp_path)
    sets = [3, 4, 5]
    for t in range(6):
        j.make_inputs({"trial": t, "lazy": t in sets})
    j.time_prepare({"trial": sets[0], "compile": False, **({"trials": sets} if listed else {})})
    built = []
    full = j._full
    monkeypatch.setattr(j, "_full", lambda t, *a, **k: built.append(t) or full(t, *a, **k))
    for k, t in enumerate(sets):
        j.time_load({"trials": [t]})
        assert j.time_call({"sets": [k]})["output_bound"]
        assert j.check_timed({"trials": [t], "own": True})["match"]
    assert built == ([] if listed else sets[1:])
    with pytest.raises(protocol.WorkerError):
        j.time_prepare({"trial": sets[0], "compile": False, "trials": ["3"]})


@pytest.mark.parametrize("pending_bytes", [None, 1])
def test_timing_sets_read_back_at_once_are_made_as_one_by_one(tmp_path, monkeypatch, pending_bytes):
    # time_prepare leaves each set's checksums and tolerance statistics on the device and reads
    # them back together (one synchronize, where one a set waited for the GPU's time slice each):
    # every set's checksum, tolerance, fingerprint and kept references are those of a set made
    # alone, and what is read back does not grow with the sets. pending_bytes=1: read back after
    # every set (the bound on references waiting).
    if pending_bytes is not None:
        monkeypatch.setattr(judge_timing, "PENDING_BYTES", pending_bytes)
    sets = list(range(5, 13))
    made = {}
    for deferred in (False, True):
        j = _judge(tmp_path, TWO_OUTPUTS)
        for t in sets:
            j.make_inputs({"trial": t, "lazy": True})
        reads = []
        real_tolist, real_cpu = torch.Tensor.tolist, torch.Tensor.cpu
        monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append("tolist") or real_tolist(self))
        monkeypatch.setattr(torch.Tensor, "cpu", lambda self, *a, **k: reads.append("cpu") or real_cpu(self, *a, **k))
        if deferred:
            j.time_prepare({"trial": sets[0], "trials": sets, "keep_whole": sets})
        else:
            j.keep_whole = set(sets)
            for t in sets:
                j._full(t, timing=True)
        monkeypatch.undo()
        if pending_bytes is not None:
            monkeypatch.setattr(judge_timing, "PENDING_BYTES", pending_bytes)
        made[deferred] = (j, reads)
    (one, reads_one), (many, reads_many) = made[False], made[True]
    for t in sets:
        a, b = one.trials[t], many.trials[t]
        assert a["checksum"] == b["checksum"] and a["fp"]["limits"] == b["fp"]["limits"], t
        assert a["fp"]["limits"][0] is not None and a["fp"]["limits"][1] is None  # fp output, exact output
        assert all(torch.equal(x, y) for x, y in zip(a["fp"]["ref"], b["fp"]["ref"]))
        assert one.kept[t]["meta"] == many.kept[t]["meta"]
        assert [c.describe for c in many.kept[t]["checkers"].values()] == [c.describe for c in one.kept[t]["checkers"].values()]
        # The checksum the candidate's process computes on the same set agrees.
        cand = inputs.recipe_from(_module(TWO_OUTPUTS), many.recipe.describe(), "cpu")
        assert inputs.combine(inputs.checksums(cand.make(b["seed"]))) == b["checksum"]
    assert list(one.kept) == list(many.kept) and one.kept_bytes == many.kept_bytes
    # One at a time: a read-back per tensor input and per floating output, each set.
    assert len(reads_one) == 3 * len(sets)
    if pending_bytes is None:
        # The first set is made alone before the others (the output region's layout): its two
        # checksums and one statistic; then one copy for the seven others, read as ints and floats.
        assert reads_many == ["tolist"] * 3 + ["cpu", "tolist", "tolist"], reads_many
    else:
        assert reads_many.count("cpu") == len(sets) - 1  # the first set made alone
    # A set whose inputs come out otherwise than before is still refused when read back at once.
    j = _judge(tmp_path, TWO_OUTPUTS)
    j.make_inputs({"trial": 5, "lazy": True})
    j.trials[5]["checksum"] = "not-this"
    with pytest.raises(WorkerError) as e:
        j.time_prepare({"trial": 5, "trials": [5]})
    assert e.value.kind == "problem_error" and "same seed" in e.value.message


def test_timing_sets_are_made_without_the_accounting_baseline_until_a_plain_run_of_one_is_compared(tmp_path):
    # No candidate runs a timing set in an accounted span, so time_prepare makes their references
    # without the accounting (most of a set's cost); a timing set run once more untimed (after a
    # timed mismatch) is compared against a report that needs it: it is made then.
    j = _judge(tmp_path)
    j.make_inputs({"trial": 0})
    assert j.trials[0]["baseline"]["ops"]
    sets = [5, 6]
    for t in sets:
        j.make_inputs({"trial": t, "lazy": True})
    j.time_prepare({"trial": sets[0], "trials": sets, "keep_whole": sets})
    assert all("fp" in j.trials[t] and "baseline" not in j.trials[t] for t in sets)
    assert set(sets) <= set(j.kept)
    kept = j.kept[5]
    assert j._full(5, timing=True) is kept
    again = j._full(5)  # what compare asks for
    assert j.trials[5]["baseline"]["ops"] and again is not kept
    assert [torch.equal(a, b) for a, b in zip(again["ref"], kept["ref"])] == [True]
    assert j.kept_bytes == sum(k["bytes"] for k in j.kept.values())


def test_the_judge_gives_cached_gpu_memory_back_only_beyond_its_bound(monkeypatch):
    timing = wh.import_worker("judge_timing")
    released, state = [], {"reserved": 0, "allocated": 0}
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: state["reserved"])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: state["allocated"])
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: released.append(dict(state)))
    state.update(reserved=timing.RELEASE_ABOVE_BYTES + (64 << 20), allocated=64 << 20)
    timing.release_cached()  # exactly the bound unused: kept
    assert released == []
    state.update(reserved=5 << 30, allocated=1 << 30)
    timing.release_cached()
    assert released == [{"reserved": 5 << 30, "allocated": 1 << 30}]


@pytest.mark.parametrize("profile", ["strict", "kernelbench"])
def test_several_calls_per_round_trip_are_checked_slot_by_slot(tmp_path, monkeypatch, profile):
    # A round trip of 3 timed calls: call j writes slot j of the region from set j's inputs; the
    # judge checks every slot at its fingerprint positions at once and names the slot that is wrong.
    monkeypatch.setattr(judge, "FINGERPRINT_MAX", 8)
    j = _judge(tmp_path, profile=profile)
    sets = [3, 4, 5]
    for t in range(6):
        j.make_inputs({"trial": t, "lazy": t in sets})
    j.time_prepare({"trial": sets[0], "compile": False, "slots": 3, "trials": sets, "trips": [sets]})
    assert j.time_load({"trials": sets}) == {"sets": [0, 1, 2]}  # a round trip's sets in one request
    reply = j.time_call({"sets": [0, 1, 2]})
    assert reply["output_bound"], reply
    assert j.check_timed({"trials": sets, "own": True})["match"]
    assert not j.check_timed({"trials": sets, "own": True})["match"]  # poisoned again
    # The candidate's side: a region of 3 slots, its outputs written by hand.
    sent = []
    monkeypatch.setattr(region, "send_fd", sent.append)
    reg = j.time_region({"trial": sets[0], "slots": 3})["region"]
    assert reg["slots"] == 3 and len(reg["outputs"]) == 3
    mine = region.Region.attach(os.dup(sent[0]), reg["bytes"], "cpu")
    views = mine.views(reg["outputs"])
    right = [j._full(t)["ref"][0].clone() for t in sets]
    positions = j._fp_positions(0, right[0].numel())

    def fill(wrong_slot=None, at=None):
        for k, v in enumerate(views):
            v.copy_(right[k])
        if wrong_slot is not None:
            views[wrong_slot].reshape(-1)[at] += 1.0

    fill()
    assert j.check_timed({"trials": sets})["match"]
    fill(1, int(positions[0]))
    bad = j.check_timed({"trials": sets})
    assert not bad["match"] and bad["slot"] == 1 and f"flat index {int(positions[0])}" in bad["message"], bad
    fill(2, int(positions[-1]))
    assert j.check_timed({"trials": sets})["slot"] == 2
    # Slot 0 holding slot 1's answer (a replay across the calls of one round trip).
    fill()
    views[0].copy_(right[1])
    assert j.check_timed({"trials": sets})["slot"] == 0
    # The whole-output check of every slot, off the fingerprint too.
    off = next(i for i in range(right[0].numel()) if i not in set(positions.tolist()))
    fill(2, off)
    assert j.check_timed({"trials": sets, "keep": True})["match"]
    full = j.check_timed({"trials": sets, "full": True, "candidate": "cand-0"})
    assert not full["match"] and full["slot"] == 2, full
    with pytest.raises(protocol.WorkerError):
        j.check_timed({"trials": sets + [0]})  # more calls than slots
    del views
    assert mine.close() == []


@pytest.mark.parametrize("calls", [1, 3])
def test_every_round_trip_is_held_to_the_normalized_error_bound(tmp_path, monkeypatch, calls):
    # Red team: a candidate that predicted which round trip gets the whole-output check put an error
    # just under the elementwise bound into every other one, over the strict profile's
    # normalized-error bound, and was judged correct. Every round trip's check now holds the bound
    # too (over the fingerprint: here the whole output; the kernelbench profile has no such bound).
    sent = []
    monkeypatch.setattr(region, "send_fd", sent.append)
    for profile in ("strict", "kernelbench"):
        d = tmp_path / profile
        d.mkdir()
        j = _judge(d, profile=profile)
        sets = [3, 4, 5][:calls]
        for t in range(6):
            j.make_inputs({"trial": t, "lazy": t >= 3})
        j.time_prepare({"trial": sets[0], "compile": False, "slots": calls, "trials": sets,
                        **({"trips": [sets]} if calls > 1 else {})})
        sent.clear()
        reg = j.time_region({"trial": sets[0], "slots": calls})["region"]
        mine = region.Region.attach(os.dup(sent[0]), reg["bytes"], "cpu")
        views = mine.views(reg["outputs"])

        def fill(off_by):
            for k, t in enumerate(sets):
                c = j._fp_checker(t, 0)
                ref = j._full(t)["ref"][0]
                if c.profile == "kernelbench":
                    near = torch.full_like(ref, 0.9 * c.tol) * (1 + ref.abs())
                else:
                    near = (0.9 * (c.atol + c.rtol * c.ref64.reshape(ref.shape).abs())).float()
                views[k].copy_(ref + off_by * near)

        fill(0.0)
        assert j.check_timed({"trials": sets})["match"], profile
        fill(1.0)
        got = j.check_timed({"trials": sets})
        if profile == "strict":
            assert not got["match"] and got["slot"] == 0 and "normalized error" in got["message"], got
        else:
            assert got["match"], got
        del views
        assert mine.close() == []


def test_a_round_trips_inputs_are_handed_over_in_the_judges_input_region(tmp_path, monkeypatch):
    # A paired candidate makes no inputs while timed: the judge copies its sets into an input
    # region the candidate maps, set j into slot j, before every round trip (timed_calls.cpp), and
    # the same sets into the reference's own slots (`reference_sets`, its timer's indices).
    j = _judge(tmp_path, source=TENSORS_ONLY)
    sets = [3, 4, 5, 6]
    for t in range(7):
        j.make_inputs({"trial": t, "lazy": t >= 3})
    with pytest.raises(WorkerError):
        j.time_inputs_region({"trial": 3, "slots": 2})  # no timer yet: the reference's slots go in it
    j.time_prepare({"trial": 3, "compile": False, "slots": 2, "trials": sets, "trips": [sets[:2], sets[2:]]})
    sent = []
    monkeypatch.setattr(region, "send_fd", sent.append)
    got = j.time_inputs_region({"trial": 3, "slots": 2})
    given, ref_sets = got["inputs"], got["reference_sets"]
    assert len(sent) == 1 and len(given["slots"]) == 2 and len(ref_sets) == 2
    assert [p["shape"] for p in given["slots"][1]] == [[4, 8], [4, 8]]
    assert [p["dtype"] for p in given["slots"][1]] == ["float32", "bool"]
    mine = region.Region.attach(os.dup(sent[0]), given["bytes"], "cpu")
    views = [mine.views(places) for places in given["slots"]]
    kept = {t: [a.clone() for a in j._make(t)] for t in sets}
    for trip in (sets[:2], sets[2:]):
        j.time_give({"trials": trip})
        for slot, t in enumerate(trip):
            for v, own, want in zip(views[slot], j.timer.sets[ref_sets[slot]], kept[t]):
                assert torch.equal(v, want) and torch.equal(own, want), (trip, slot)
        # Either side spoiling its slots leaves the kept set as made: the next copy is right again.
        for v in views[0] + j.timer.sets[ref_sets[0]]:
            v.zero_()
        j.time_give({"trials": trip})
        assert all(torch.equal(v, want) for v, want in zip(views[0], kept[trip[0]]))
        assert all(torch.equal(v, want) for v, want in zip(j.timer.sets[ref_sets[0]], kept[trip[0]]))
    # A set not kept as made (over REUSE_BYTES) is made from its seed right there, the same.
    monkeypatch.setattr(j, "made_sets", {})
    monkeypatch.setattr(j, "made_bytes", 1 << 40)
    j.time_give({"trials": [6, 5]})
    assert all(torch.equal(v, want) for v, want in zip(views[1], kept[5])) and j.made_sets == {}
    with pytest.raises(WorkerError):
        j.time_give({"trials": [3, 4, 5]})  # more sets than slots
    with pytest.raises(WorkerError):
        j.time_give({"trials": [99]})  # no such trial
    with pytest.raises(WorkerError):
        j.time_give({"sets": [0]})  # the old form: indices of the judge's loads
    with pytest.raises(WorkerError, match="twice"):  # the timer holds the reference's slots until its batch ends
        j.time_inputs_region({"trial": 3, "slots": 2})
    assert len(sent) == 1
    del views
    assert mine.close() == []
    # A new batch's reference (time_prepare) drops the slots of the one before.
    j.time_prepare({"trial": 3, "compile": False, "slots": 2, "trials": sets, "trips": [sets[:2], sets[2:]]})
    with pytest.raises(WorkerError):
        j.time_give({"trials": sets[:2]})
    # A set with a non-tensor argument cannot travel that way: `unsupported`, no descriptor sent,
    # and the candidate makes its own sets.
    other = tmp_path / "other"
    other.mkdir()
    j2 = _judge(other)
    j2.make_inputs({"trial": 0})
    sent.clear()
    with pytest.raises(WorkerError) as e:
        j2.time_inputs_region({"trial": 0, "slots": 2})
    assert e.value.kind == "unsupported" and "argument 2" in e.value.message and sent == []


def test_a_preparation_keeps_every_sets_fingerprint_and_the_last_round_trips_whole_references(tmp_path, monkeypatch):
    # The reference's preparation (sets_only, a few round trips a request): no timer and no output
    # region; every set's fingerprint is kept (in shared allocations), the whole references only of
    # the batch's last round trip (keep_whole), whose outputs are compared whole. Another set's
    # whole comparison makes its references again, the same.
    jt = wh.import_worker("judge_timing")
    monkeypatch.setattr(jt, "KEPT_BLOCK_FIRST", 1 << 10)  # (a 4x8 fp32 output is 128 bytes)
    j = _judge(tmp_path, source=TWO_OUTPUTS)
    j.kept_blocks = jt.Blocks(jt.KEPT_BLOCK_FIRST, jt.KEPT_BLOCK_MOST)
    sets, last = list(range(5, 13)), [11, 12]
    for t in range(13):
        j.make_inputs({"trial": t, "lazy": t >= 5})
    released = []
    monkeypatch.setattr(jt, "release_cached", lambda: released.append(1))
    for first, release in ((0, False), (4, True)):
        j.time_prepare({"trial": sets[0], "sets_only": True, "trials": sets[first:first + 4], "keep_whole": last,
                        "trips": [sets[first:first + 2], sets[first + 2:first + 4]], "slots": 2, "release": release})
    assert released == [1]  # by the last request only
    # The reference's kernel time for B: none on a CPU (the orchestrator probes instead).
    est = j.time_prepare({"trial": sets[0], "sets_only": True, "trials": sets[:1], "estimate": 3, "release": False})
    assert est["call_kernel_ms"] is None and "CPU" in est["estimate_note"] and "estimate" in est["steps_ms"]
    with pytest.raises(WorkerError):
        j.time_prepare({"trial": sets[0], "sets_only": True, "trials": sets[:1], "estimate": 99})
    assert getattr(j, "timer", None) is None and getattr(j, "own", None) is None
    assert [t for t in j.kept if t >= 5] == last
    assert all((tuple(g), 0) in j.trip_limits for g in ([5, 6], [7, 8], [9, 10], [11, 12]))
    storages = {j.trials[t]["fp"]["ref"][0].untyped_storage().data_ptr() for t in sets}
    assert len(storages) < len(sets)  # fingerprints share allocations
    for t in sets:
        full = j._full(t, timing=True)  # made again (not kept) for all but the last round trip's
        assert all(torch.equal(f, r.reshape(-1)) for f, r in zip(j.trials[t]["fp"]["ref"], full["ref"]))
    assert [t for t in j.kept if t >= 5] == last
    # The batch's own prepare finds every set made and makes the timer.
    built = []
    full = j._full
    monkeypatch.setattr(j, "_full", lambda t, *a, **k: built.append(t) or full(t, *a, **k))
    j.time_prepare({"trial": sets[0], "trials": sets, "keep_whole": last, "slots": 2})
    assert built == [] and j.timer is not None
    # A whole compare of another round trip (a batch that ended before its planned last one)
    # makes its references again, and keeps them for the next candidate's.
    j.time_load({"trials": [5, 6]})
    j.time_call({"sets": [0, 1]})
    assert j.check_timed({"trials": [5, 6], "own": True, "full": True})["match"]
    assert built == [5, 6] and {5, 6} <= set(j.kept)


def test_blocks_copy_tensors_into_shared_allocations_and_clone_the_rest():
    Blocks = wh.import_worker("judge_timing").Blocks
    b = Blocks(4 << 10, 16 << 10)
    made = [torch.randn(4, 8), torch.arange(6, dtype=torch.int64).reshape(2, 3), torch.rand(3) > 0.5,
            torch.randn(2, 2, dtype=torch.float64)]
    copies = [b.copy(t) for t in made]
    for t, c in zip(made, copies):
        assert c.dtype == t.dtype and c.shape == t.shape and torch.equal(c, t)
        base = copies[0].untyped_storage().data_ptr()
        assert c.untyped_storage().data_ptr() == base and (c.data_ptr() - base) % 512 == 0
    copies[0].add_(1)
    assert torch.equal(copies[1], made[1]) and not torch.equal(copies[0], made[0])  # copies, apart
    # Not plain and contiguous: cloned, its layout kept; past a block, the next one is larger.
    t = torch.randn(4, 6).t()
    c = b.copy(t)
    assert torch.equal(c, t) and c.stride() == t.stride() and c.untyped_storage().data_ptr() != copies[0].untyped_storage().data_ptr()
    big = b.copy(torch.randn(1000))
    assert big.untyped_storage().nbytes() == 8 << 10
    assert b.copy(torch.empty(0, 3)).shape == (0, 3)
    # Over half the largest block: an allocation of its own, the current block kept.
    huge = b.copy(torch.randn(3000))
    assert huge.untyped_storage().nbytes() == 12000 and b.buf.untyped_storage().data_ptr() == big.untyped_storage().data_ptr()
    # A tensor subclass stays one (cloned).

    class Tagged(torch.Tensor):
        pass

    tagged = torch.randn(4).as_subclass(Tagged)
    assert type(b.copy(tagged)) is Tagged


def test_a_reused_timing_set_is_a_copy_of_the_one_made_for_an_earlier_batch(tmp_path, monkeypatch):
    # Handed-over inputs: every candidate's paired reference runs on the same timing sets, so the
    # judge copies the sets it made for the first batch instead of making them again (`reuse`).
    # Sets that cannot be handed over (a float argument) are not kept by time_prepare.
    other = _judge(tmp_path)
    for t in range(5):
        other.make_inputs({"trial": t, "lazy": t >= 3})
    other.time_prepare({"trial": 3, "compile": False, "trials": [3, 4]})
    assert not getattr(other, "made_sets", None)
    j = _judge(tmp_path, source=TENSORS_ONLY)
    sets = [3, 4]
    for t in range(5):
        j.make_inputs({"trial": t, "lazy": t >= 3})
    made = []
    make = j._make
    monkeypatch.setattr(j, "_make", lambda t: made.append(t) or make(t))
    for batch in range(3):
        j.time_prepare({"trial": 3, "compile": False, "trials": sets})
        before = list(made)
        got = j.time_load({"trials": sets, "reuse": True})["sets"]
        # The sets were kept as made when their references were (time_prepare): even the first
        # batch copies them instead of making them under its exclusive hold.
        assert made == before
        for k, t in zip(got, sets):
            for a, want in zip(j.timer.sets[k], make(t)):
                assert torch.equal(a, want) if isinstance(a, torch.Tensor) else a == want, (batch, t)
            # A reference that writes into its inputs spoils this batch's copy, not the kept set.
            for a in j.timer.sets[k]:
                if isinstance(a, torch.Tensor) and a.is_floating_point():
                    a.mul_(-3.0)
        if batch == 0:
            first = list(made)
            assert first[-2:] == sets
    assert made == first  # the later batches made nothing
    # Without `reuse` (a candidate's load is clocked against this one) every set is made anew.
    j.time_load({"trials": sets})
    assert made == first + sets
    # Past the bound on kept bytes, a set is made for each batch and not kept.
    monkeypatch.setattr(wh.import_worker("judge_timing"), "REUSE_BYTES", 0)
    j.made_sets, j.made_bytes = None, 0
    for _ in range(2):
        j.time_prepare({"trial": 3, "compile": False, "trials": sets})
        j.time_load({"trials": sets, "reuse": True})
    assert made == first + sets * 3 and j.made_sets == {}


def test_a_kept_timing_sets_copy_clones_tensors_nested_in_lists_tuples_and_dicts():
    # The reference's own batches copy kept sets too, not only handed-over ones (plain tensors): a
    # reference that writes in place into a tensor inside a list must leave the kept set as made.
    copied = wh.import_worker("judge_timing")._copied
    t = torch.ones(3)
    made = [t, [t, (t, 2.0)], {"w": t}, 7]
    got = [copied(a) for a in made]
    got[0].mul_(2)
    got[1][0].mul_(3)
    got[1][1][0].mul_(4)
    got[2]["w"].mul_(5)
    assert torch.equal(t, torch.ones(3))
    assert isinstance(got[1][1], tuple) and got[1][1][1] == 2.0 and got[3] == 7


def test_a_requests_timing_sets_are_waited_for_once(monkeypatch):
    # A round trip's sets (64 of a fast kernel's) are loaded in one request, inside the GPU's
    # exclusive hold for a paired reference: one device-wide wait for all of them, not one a set.
    timing = wh.import_worker("timing")
    waits = []
    monkeypatch.setattr(timing, "_synchronize", lambda: waits.append(1))
    t = timing.CallTimer(lambda x: x, "cuda:0", [torch.zeros(2)], 1)
    assert t.add_all([[torch.full((2,), float(i))] for i in range(64)]) == list(range(64))
    assert len(waits) == 1
    assert t.add_all([[torch.ones(2)]]) == [64] and len(waits) == 2
    assert torch.equal(t.sets[5][0], torch.full((2,), 5.0))


def test_a_round_trips_strict_check_in_one_pass_answers_as_its_two_checks():
    # compare.rows_strict (check_timed's strict round trip) against rows_pass and rows_norm_failing
    # on the same rows: honest calls, one value over the elementwise bound, a call over the
    # normalized-error bound only, NaN and inf where the reference has them or not.
    compare = wh.import_worker("compare")
    g = torch.Generator().manual_seed(3)
    calls, n = 6, 257
    r64 = [torch.randn(n, generator=g, dtype=torch.float64) for _ in range(calls)]
    checkers = [compare.Checker("strict", r.float(), r, "v0") for r in r64]
    limits = compare.rows_limits(checkers, "cpu")
    honest = torch.stack([r.float() for r in r64])

    def spoiled(fn):
        got = honest.clone()
        fn(got)
        return got

    c2 = checkers[2]
    cases = {
        "honest": honest,
        "one value off": spoiled(lambda x: x[3, 7].add_(1.0)),
        # every value of call 2 just within its elementwise bound: over the normalized-error bound
        "norm only": spoiled(lambda x: x[2].copy_(r64[2] + 0.9 * (c2.atol + c2.rtol * r64[2].abs()))),
        "nan": spoiled(lambda x: x[1, 0].fill_(float("nan"))),
        "inf": spoiled(lambda x: x[4, 5].fill_(float("inf"))),
    }
    seen = set()
    for name, got in cases.items():
        for sampled in (False, True):
            want = (compare.rows_pass(checkers, got, limits), compare.rows_norm_failing(checkers, got, sampled))
            assert compare.rows_strict(checkers, got, limits, sampled) == want, (name, sampled)
            assert compare.rows_strict(checkers, got, None, sampled) == want, (name, sampled)
            seen.add((want[0] >= 0, want[1][0] >= 0))
    assert seen == {(False, False), (True, False), (False, True), (True, True)}  # every outcome covered
    # A reference with inf and NaN of its own, matched exactly: both checks pass.
    r64[0][:2] = torch.tensor([float("inf"), float("nan")], dtype=torch.float64)
    checkers[0] = compare.Checker("strict", r64[0].float(), r64[0], "v0")
    got = honest.clone()
    got[0] = r64[0].float()
    want = (compare.rows_pass(checkers, got, limits), compare.rows_norm_failing(checkers, got, False))
    assert compare.rows_strict(checkers, got, limits, False) == want


def _stub_profiler(monkeypatch):
    """torch.profiler's stand-in for the judge's kernel profiles on the CPU: each profile made
    (its device in `made`) sees one kernel of the inputs' making."""
    accounting = wh.import_worker("accounting")

    class Profiler:
        made = []

        def __init__(self, device):
            Profiler.made.append(device)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def result(self, allow_empty=False):
            return {"available": True, "kernels": [{"name": "void at::native::normal_kernel", "us": 2.0, "count": 1}]}

    monkeypatch.setattr(accounting, "KernelProfiler", Profiler)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    return Profiler


def test_the_profiled_trials_kernels_are_profiled_by_its_first_kernel_check_not_with_its_references(tmp_path, monkeypatch):
    """The last trial's references may be made early, under a shared hold of the GPU (make_inputs
    from the reference's preparation): its kernel profile (the judge's baseline and the reference
    forward's kernels) is made by the first kernel_check, which the orchestrator sends under its
    exclusive hold, once. On the CPU nothing is profiled."""
    Profiler = _stub_profiler(monkeypatch)
    (tmp_path / "cpu").mkdir()
    (tmp_path / "gpu").mkdir()
    on_cpu = _judge(tmp_path / "cpu")
    last = on_cpu.n_trials - 1
    on_cpu.make_inputs({"trial": last, "distribution": "normal"})
    assert "kernels_pending" not in on_cpu.trials[last] and Profiler.made == []

    j = _judge(tmp_path / "gpu")
    # As on a GPU for the profiling's bookkeeping; its tensors stay on the CPU.
    monkeypatch.setattr(j, "_profiled_trial", lambda trial: trial == j.n_trials - 1)
    j.make_inputs({"trial": last - 1, "distribution": "normal"})
    j.make_inputs({"trial": last, "distribution": "normal"})
    rec = j.trials[last]
    assert "kernels_pending" not in j.trials[last - 1]
    assert rec["kernels_pending"] and set(rec["baseline"]) == {"ops"} and Profiler.made == []
    profile = {"available": True, "kernels": [{"name": "relu_kernel", "us": 5.0, "count": 1},
                                              {"name": "void at::native::normal_kernel", "us": 2.0, "count": 1}]}
    check = {"trial": last, "kernel_names": ["relu_kernel"], "kernel_profile": profile, "triton_launches": 1}
    first = j.kernel_check(check)
    assert Profiler.made == ["cpu"] * 3 and "kernels_pending" not in rec
    assert rec["baseline"]["kernels"] and rec["baseline"]["reference"]["available"]
    assert first["violation"] is None and first["summary"]["baseline_taken_off"] is True
    j.kernel_check(check)
    assert len(Profiler.made) == 3  # once per trial


def test_a_failed_profile_of_the_judges_baseline_is_made_again_by_the_next_kernel_check(tmp_path, monkeypatch):
    """A candidate that fills the GPU's memory before its kernel check makes the judge's profile of
    the trial fail: its own check fails, and the next candidate's check profiles again instead of
    classifying its kernels with nothing taken off (which read honest Triton kernels as torch_fallback)."""
    _stub_profiler(monkeypatch)
    j = _judge(tmp_path)
    monkeypatch.setattr(j, "_profiled_trial", lambda trial: trial == j.n_trials - 1)
    last = j.n_trials - 1
    j.make_inputs({"trial": last, "distribution": "normal"})
    make = j._make

    def out_of_memory(trial):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (the candidate holds the rest)")

    monkeypatch.setattr(j, "_make", out_of_memory)
    check = {"trial": last, "kernel_names": ["relu_kernel"], "triton_launches": 1,
             "kernel_profile": {"available": True, "kernels": [{"name": "relu_kernel", "us": 5.0, "count": 1}]}}
    with pytest.raises(torch.cuda.OutOfMemoryError):
        j.kernel_check(check)
    rec = j.trials[last]
    assert rec["kernels_pending"] and "kernels" not in rec["baseline"]
    monkeypatch.setattr(j, "_make", make)
    again = j.kernel_check(check)
    assert "kernels_pending" not in rec and rec["baseline"]["kernels"]
    assert again["summary"]["baseline_taken_off"] is True
