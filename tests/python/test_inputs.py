"""The data path of verifier v2 (worker/inputs.py, the judge's fingerprints): input sets made from
a seed in each process, identical in the judge and a candidate's process, a checksum that tells
them apart, a problem whose inputs do not repeat refused, and a judge that keeps only bounded
references yet decides the history rules and the checks of timed calls (read from the judge's
output region) the same way."""
from __future__ import annotations

import os
import types

import pytest
import torch

import worker_harness as wh
from judge_problems import (PROBLEM, WorkerError, inputs, judge, judge_timing, make_judge as _judge, module_of as _module,
                            protocol, region)


def test_a_recipe_makes_the_same_set_from_a_seed_in_any_state():
    r = inputs.Recipe(_module(), torch.float32, "cpu", on_device=True)
    a = r.make(11)
    # Another process's state: a reseeded generator and another default dtype change nothing.
    torch.manual_seed(0)
    torch.rand(3)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        b = r.make(11)
    finally:
        torch.set_default_dtype(before)
    assert a[0].dtype == torch.float32 and a[1].dtype == torch.bool and a[2] == 2.5
    assert all(torch.equal(x, y) for x, y in zip(a[:2], b[:2]))
    assert inputs.combine(inputs.checksums(a)) == inputs.combine(inputs.checksums(b))
    c = r.make(12)
    assert inputs.combine(inputs.checksums(a)) != inputs.combine(inputs.checksums(c))
    # Distributions keep shapes, dtypes and signs; they are seeded too.
    for dist in ("heavy_tailed", "near_unit"):
        h1, h2 = r.make(11, dist), r.make(11, dist)
        assert torch.equal(h1[0], h2[0]) and h1[0].shape == a[0].shape
        assert torch.equal(torch.sign(h1[0]), torch.sign(a[0])) and torch.equal(h1[1], a[1])
    near = r.make(11, "near_unit")[0].abs()
    assert float(near.min()) >= 0.98 and float(near.max()) <= 1.02
    assert not torch.equal(r.probe(11)[0], a[0]) and r.probe(11)[0].shape == a[0].shape


def test_the_checksum_sees_a_moved_or_changed_element():
    x = torch.arange(1000, dtype=torch.float32)
    base = inputs.checksum(x)
    swapped = x.clone()
    swapped[[3, 7]] = swapped[[7, 3]]
    changed = x.clone()
    changed[999] = torch.nextafter(changed[999], torch.tensor(1e9))
    assert inputs.checksum(x.clone()) == base
    assert inputs.checksum(swapped) != base and inputs.checksum(changed) != base
    assert inputs.checksum(x.reshape(10, 100)) != base  # the shape is part of it
    assert inputs.checksum(torch.zeros(3, dtype=torch.uint8)) != inputs.checksum(torch.zeros(3, dtype=torch.int8))


def test_a_problem_whose_inputs_do_not_repeat_under_a_seed_is_refused(tmp_path):
    source = PROBLEM.replace("return [torch.randn(4, N)", "import os\n    return [torch.frombuffer(bytearray(os.urandom(128)), dtype=torch.float32).reshape(4, N)")
    with pytest.raises(WorkerError) as e:
        _judge(tmp_path, source)
    assert e.value.kind == "problem_error" and "same seed" in e.value.message


def test_trial_seeds_are_independent_and_the_recipe_reaches_the_candidate(tmp_path):
    j = _judge(tmp_path)
    seeds = [j.make_inputs({"trial": t, "lazy": True})["seed"] for t in range(8)]
    assert len(set(seeds)) == 8
    recipe = j.recipe.describe()
    assert recipe == {"precision": "fp32", "on_device": True}
    # The candidate's process: the problem's text and the judge's recipe make the judge's inputs.
    cand = inputs.recipe_from(_module(), recipe, "cpu")
    full = j.make_inputs({"trial": 0})
    assert inputs.combine(inputs.checksums(cand.make(seeds[0]))) == full["input_checksum"] == j.trials[0]["checksum"]


def test_a_size_variants_seeds_are_not_the_main_trials(tmp_path):
    # Same run secret: a size variant's trial t and construction get seeds of their own, not the
    # main judge's, whose inputs the candidate was shown.
    (tmp_path / "main").mkdir()
    (tmp_path / "half").mkdir()
    main, half = _judge(tmp_path / "main"), _judge(tmp_path / "half", size_scale=0.5)
    seeds = [[j.make_inputs({"trial": t, "lazy": True})["seed"] for t in range(3)] for j in (main, half)]
    assert not set(seeds[0]) & set(seeds[1]), seeds
    assert main.construct_seed != half.construct_seed


def test_inputs_made_otherwise_by_the_candidate_are_named(tmp_path):
    j = _judge(tmp_path)
    j.make_inputs({"trial": 0})
    ref = j._full(0)["ref"]
    protocol.save_tensors(str(tmp_path / "out.safetensors"), {"0": ref[0].clone()})
    report = {"run_ms": 1.0, "triton_launches": 1, "inputs_checksum": "0" * 32}
    c = j.compare({"trial": 0, "outputs_file": str(tmp_path / "out.safetensors"), "run_report": report})
    assert not c["match"] and c["verdict_hint"] == "wrong_output" and c["rule"] == "inputs_differ", c


@pytest.mark.parametrize("garbled", [[], {"output_types": [1]}, {"patched": 5}, {"new_threads": "t"},
                                     {"process_spawns": "9"}, {"sandbox_events": ["x"]}, {"triton_launches": True}])
def test_a_run_reply_the_rules_cannot_read_fails_the_trial_as_the_candidates_doing(tmp_path, garbled):
    # The reply is written in the candidate's process, which its code can rewrite: once an
    # internal error of the judge, which left a size variant without a result (red team).
    j = _judge(tmp_path)
    j.make_inputs({"trial": 0})
    protocol.save_tensors(str(tmp_path / "out.safetensors"), {"0": j._full(0)["ref"][0].clone()})
    report = garbled if isinstance(garbled, list) else dict({"run_ms": 1.0, "triton_launches": 1}, **garbled)
    c = j.compare({"trial": 0, "outputs_file": str(tmp_path / "out.safetensors"), "run_report": report})
    assert not c["match"] and c["verdict_hint"] == "cheat" and c["rule"] == "malformed_report", c


@pytest.mark.parametrize("profile", ["strict", "kernelbench"])
def test_a_problem_with_complex_outputs_is_refused_with_why(tmp_path, profile):
    # Neither profile can compare complex values yet: the problem is refused at its load with what
    # to do, instead of an internal error in the tolerance's statistics.
    source = PROBLEM.replace("return torch.where(mask, x * s, -x)", "return torch.view_as_complex(torch.stack([x, -x], -1))")
    assert "view_as_complex" in source
    j = _judge(tmp_path, source, profile=profile)
    with pytest.raises(WorkerError) as e:
        j.make_inputs({"trial": 0})  # (set-up: trial 0's references)
    assert e.value.kind == "problem_error" and "complex64" in e.value.message and "view_as_real" in e.value.message, e.value


def test_bounded_references_and_fingerprints_decide_as_full_ones(tmp_path, monkeypatch):
    # Outputs larger than the fingerprint (32 elements > 8) and no room to keep references: every
    # comparison re-makes its trial's references from the seed; history and samples use the sample.
    monkeypatch.setattr(judge, "FINGERPRINT_MAX", 8)
    monkeypatch.setattr(judge, "KEEP_BYTES", 0)
    j = _judge(tmp_path)
    for t in range(3):
        j.make_inputs({"trial": t})
    assert len(j.kept) == 1
    positions = j._fp_positions(0, 32)
    assert positions is not None and positions.numel() <= 8 and bool((positions[1:] > positions[:-1]).all())
    out = tmp_path / "out.safetensors"

    def run(trial, tensor):
        protocol.save_tensors(str(out), {"0": tensor})
        return j.compare({"trial": trial, "outputs_file": str(out), "candidate": "cand-0"})

    right0 = j._full(0)["ref"][0].clone()
    assert run(0, right0)["match"]
    right1 = j._full(1)["ref"][0].clone()
    assert run(1, right1)["match"]
    assert 0 not in j.kept  # evicted, made again on demand
    # Trial 0's answer replayed for trial 2: a cached result, found on the fingerprints.
    replay = run(2, right0)
    assert replay["rule"] == "cached_result", replay
    # A timed call's check: the judge reads its own output region, which the candidate maps.
    sent = []
    monkeypatch.setattr(region, "send_fd", sent.append)
    reply = j.time_region({"trial": 1})
    assert len(sent) == 1 and reply["region"]["outputs"][0]["shape"] == list(right1.shape)
    mine = region.Region.attach(os.dup(sent[0]), reply["region"]["bytes"], "cpu")
    view = mine.views(reply["region"]["outputs"])[0]
    assert not j.check_timed({"trials": [1]})["match"]  # poisoned: nothing written yet
    view.copy_(right1)
    assert j.check_timed({"trials": [1]})["match"]
    assert not j.check_timed({"trials": [1]})["match"]  # each check poisons it again
    view.copy_(right1)
    view.reshape(-1)[int(positions[2])] += 1.0
    bad = j.check_timed({"trials": [1]})
    assert not bad["match"] and f"flat index {int(positions[2])}" in bad["message"], bad
    # Off the fingerprint only the whole-output check (the last timed call) sees it.
    off = next(i for i in range(32) if i not in set(positions.tolist()))
    view.copy_(right1)
    view.reshape(-1)[off] += 1.0
    assert j.check_timed({"trials": [1]})["match"]
    view.copy_(right1)
    view.reshape(-1)[off] += 1.0
    full = j.check_timed({"trials": [1], "full": True, "candidate": "cand-0"})
    assert not full["match"] and full["verdict_hint"] == "wrong_output", full
    # The whole check after the GPU's exclusive hold reads a copy taken with the candidate stopped:
    # what it writes into the region once continued does not reach it, either way.
    view.copy_(right1)
    view.reshape(-1)[off] += 1.0
    j.time_snapshot({"trials": [1], "candidate": "cand-0"})
    view.copy_(right1)  # mended after the copy: too late
    late = j.check_timed({"trials": [1], "full": True, "snapshot": True, "candidate": "cand-0"})
    assert not late["match"] and late["slot"] == 0 and late["verdict_hint"] == "wrong_output", late
    j.time_snapshot({"trials": [1], "candidate": "cand-0"})
    view.fill_(float("nan"))  # spoiled after the copy: too late as well
    assert j.check_timed({"trials": [1], "full": True, "snapshot": True, "candidate": "cand-0"})["match"]
    with pytest.raises(WorkerError, match="no copy"):  # one check per copy, and only the candidate's own
        j.check_timed({"trials": [1], "full": True, "snapshot": True, "candidate": "cand-0"})
    j.time_snapshot({"trials": [1], "candidate": "cand-0"})
    with pytest.raises(WorkerError, match="no copy"):
        j.check_timed({"trials": [1], "full": True, "snapshot": True, "candidate": "cand-1"})
    j.forget({"candidate": "cand-0"})  # a candidate that ended before its check leaves nothing behind
    assert j.snapshots == {}
    # A copy too large (or beyond what the pending ones may hold): "unsupported", so the
    # orchestrator compares in the hold instead.
    monkeypatch.setattr(judge_timing, "SNAPSHOT_BYTES", 4 * 32 - 1)
    with pytest.raises(WorkerError) as e:
        j.time_snapshot({"trials": [1], "candidate": "cand-0"})
    assert e.value.kind == "unsupported" and j.snapshots == {}, e.value.message
    monkeypatch.setattr(judge_timing, "SNAPSHOT_BYTES", 4 * 32)
    monkeypatch.setattr(judge_timing, "SNAPSHOTS_BYTES", 4 * 32 * 2)
    j.time_snapshot({"trials": [1], "candidate": "cand-0"})
    j.time_snapshot({"trials": [1], "candidate": "cand-1"})
    with pytest.raises(WorkerError) as e:
        j.time_snapshot({"trials": [1], "candidate": "cand-2"})
    assert e.value.kind == "unsupported" and sorted(j.snapshots) == ["cand-0", "cand-1"]
    j.time_snapshot({"trials": [1], "candidate": "cand-1"})  # taken again: replaces its own
    j.forget({"candidate": "cand-0"})
    j.forget({"candidate": "cand-1"})
    with pytest.raises(OSError):  # sealed: the candidate cannot shrink it under the judge
        os.ftruncate(mine.fd, 0)
    # A new region for the next candidate; the old mapping is written to in vain.
    j.time_region({"trial": 1})
    view.copy_(right1)
    assert not j.check_timed({"trials": [1]})["match"]
    del view
    assert mine.close() == []  # released cleanly


def test_what_a_trials_reference_decides_is_made_once_for_every_candidate_compared(tmp_path, monkeypatch):
    # The whole-output checker, the trivial outputs that pass it and the reference's own error
    # depend on the reference alone: the second candidate's comparison finds them made.
    compare = wh.import_worker("compare")
    j = _judge(tmp_path)
    j.make_inputs({"trial": 0})
    full = j._full(0)
    made = []
    real = compare.baselines_passing
    monkeypatch.setattr(compare, "baselines_passing", lambda c: made.append(c) or real(c))
    right = [r.clone() for r in full["ref"]]
    first = j._judge_outputs(0, full, {"0": right[0]}, None, "a")
    second = j._judge_outputs(0, full, {"0": right[0].clone()}, None, "b")
    wrong = j._judge_outputs(0, full, {"0": right[0] + 1}, None, "c")
    assert first["match"] and second["match"] and not wrong["match"]
    assert first["stats"] == second["stats"] and len(made) == 1
    assert first["stats"][0]["ref_normalized_error"] == compare.norm_err(full["ref"][0], full["ref64"][0])


def test_a_note_added_to_one_comparisons_baselines_stays_out_of_the_next(tmp_path):
    # The trivial outputs that pass are made once per trial (_whole); the last trial's note on
    # elements no trial discriminates is added to a comparison's own list, not to the kept one
    # (red team: every comparison of that trial added one more "zeros_per_element").
    source = ("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
              "        return (x + 1e8) - 1e8\ndef get_inputs():\n    return [torch.randn(64, 64)]\n"
              "def get_init_inputs():\n    return []\n")
    j = _judge(tmp_path, source=source, n_trials=2)  # (a near_unit trial is added: degenerate)
    last = j.n_trials - 1
    for t in range(j.n_trials):
        j.make_inputs({"trial": t})
    full = j._full(last)
    got = [j._judge_outputs(last, full, {"0": full["ref"][0].clone()}, None, c)["baselines_passing"]["0"] for c in "abc"]
    assert got[0] == got[1] == got[2] and got[0].count("zeros_per_element") == 1, got


def test_a_seeder_replaced_by_an_object_without_it_reads_as_rebound_not_as_a_crash(monkeypatch):
    # The inputs recipe seeds torch.random.default_generator and torch.cuda.manual_seed_all: both
    # are guarded by identity; a module replaced by one without them is a change, not an error.
    candidate = wh.import_worker("candidate")
    before = candidate._guarded()
    monkeypatch.setattr(torch, "random", types.SimpleNamespace())
    now = candidate._guarded()
    assert now["torch.random.default_generator"] is not before["torch.random.default_generator"]
    assert "torch.random.default_generator" in wh.import_worker("rules").RANDOM_FUNCTIONS


def test_a_fingerprint_checker_takes_the_whole_outputs_tolerance_without_reducing_its_part():
    # The checker of a fingerprint (part of an output) is made with the whole output's limits: the
    # same decisions as one that computed the part's own statistics and then took the limits, and a
    # message that names the tolerance applied.
    from kernelllm.worker import compare
    g = torch.Generator().manual_seed(3)
    ref64 = torch.randn(4096, generator=g, dtype=torch.float64)
    ref = ref64.float()
    whole = compare.Checker("strict", ref, ref64, "v0")
    part, part64 = ref[::7], ref64[::7]
    given = compare.Checker("strict", part, part64, "v0", limits=whole.limits())
    old = compare.Checker("strict", part, part64, "v0")
    old.set_limits(whole.limits())
    assert given.limits() == old.limits() == whole.limits()
    assert f"{whole.atol:.3g}" in given.describe and "whole output" in given.describe
    for out in (part64.float(), part64.float() + 1e-3, part64.float() * (1 + 3e-5)):
        assert given.passes(out) == old.passes(out)
    assert not given.passes(part64.float() + 1e-3)


def test_seeds_are_keyed_by_the_whole_secret_and_positions_by_the_judges_own_key(tmp_path, monkeypatch):
    # Red team: a 31-bit key behind the trial seeds was found from one seed by brute force, and the
    # sampled positions followed torch's global generator, which each public input seed reseeds.
    monkeypatch.setattr(judge, "FINGERPRINT_MAX", 8)
    a, b = _judge(tmp_path, secret_seed=5), _judge(tmp_path, secret_seed=5 + (1 << 40))
    seeds_a = [a.make_inputs({"trial": t, "lazy": True})["seed"] for t in range(4)]
    seeds_b = [b.make_inputs({"trial": t, "lazy": True})["seed"] for t in range(4)]
    assert seeds_a != seeds_b  # bits above 2^31 of the secret change every seed
    assert seeds_a == [_judge(tmp_path, secret_seed=5).make_inputs({"trial": t, "lazy": True})["seed"] for t in range(4)]
    for j in (a, b):
        j.make_inputs({"trial": 0})
    # Same secret, same public seeds, torch's generator in the same state: other positions.
    picks = []
    for j in (a, _judge(tmp_path, secret_seed=5)):
        j.make_inputs({"trial": 0})
        torch.manual_seed(seeds_a[0])
        picks.append(j._fp_positions(0, 32).tolist())
    assert picks[0] != picks[1]


def test_inputs_reduced_on_the_cpu_repeat_whatever_the_callers_thread_count():
    source = PROBLEM.replace("return [torch.randn(4, N), ", "x = torch.randn(1 << 18)\n    return [x - x.mean(), ")
    r = inputs.Recipe(_module(source), torch.float32, "cpu", on_device=True)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = r.make(3)
        torch.set_num_threads(max(2, inputs.MAKE_THREADS + 1))
        many = r.make(3)
        assert torch.get_num_threads() == max(2, inputs.MAKE_THREADS + 1)  # the caller's count is restored
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], many[0])
