"""Protocol-level tests of the verifier workers: framing errors, version and op checks against
a live judge process, and in-process checks of values, tensor-file limits, the init rule,
KernelBench's trial seeds, the comparison profiles, the rules and exception classes."""
from __future__ import annotations

import math
import os
import struct
from pathlib import Path

import pytest
import torch

import worker_harness as wh

protocol = wh.import_worker("protocol")
judge = wh.import_worker("judge")
compare = wh.import_worker("compare")
rules = wh.import_worker("rules")

CASES = Path(__file__).resolve().parents[1] / "cases"


def test_live_worker_refuses_bad_version_unknown_op_and_oversize_frame():
    w = wh.Worker("judge")
    try:
        assert w.hello["ok"] and w.hello["op"] == "hello" and w.hello["cuda_initialized"] is False
        missing = w.request("load_problem")
        assert missing["error"]["kind"] == "protocol" and "missing field" in missing["error"]["message"]
        w.send({"v": 2, "op": "make_inputs"})
        bad_version = w.receive()
        assert bad_version["error"]["kind"] == "protocol"
        assert "expected 1, found 2" in bad_version["error"]["message"]
        unknown = w.request("frobnicate")
        assert unknown["error"]["kind"] == "protocol" and "unknown op 'frobnicate'" in unknown["error"]["message"]
        assert "make_inputs" in unknown["error"]["message"]
        early = w.request("make_inputs", trial=0)
        assert early["error"]["message"] == "load_problem must come first"
        w.send_raw(struct.pack("<I", (1 << 20) + 1))
        oversize = w.receive()
        assert oversize["error"]["kind"] == "protocol"
        assert f"exceeds the limit of {1 << 20} bytes" in oversize["error"]["message"]
        assert w.proc.wait(timeout=30) == 3  # framing lost: the worker ends itself
    finally:
        w.close()


def test_one_judge_process_serves_each_size_variant_in_its_own_slot(tmp_path):
    # The size variants' judge (DeviceState::judge_host): each slot loads the problem at its own
    # sizes into its own module, and a request goes to its slot's problem only.
    w = wh.Worker("judge")
    try:
        problem = str(CASES / "problems" / "add.py")
        loads = {}
        for slot, scale, odd in (("half", 0.5, False), ("half_odd", 0.5, True)):
            (tmp_path / slot).mkdir()
            loads[slot] = w.request("load_problem", slot=slot, problem_path=problem, device="cpu", profile="strict",
                                    secret_seed=7, work_dir=str(tmp_path / slot), size_scale=scale, size_odd=odd)
            assert loads[slot]["ok"], loads[slot]
        assert loads["half"]["size_globals"] != loads["half_odd"]["size_globals"]
        shapes = {slot: w.request("make_inputs", slot=slot, trial=0) for slot in loads}
        assert all(r["ok"] for r in shapes.values()), shapes
        assert shapes["half"]["output_sizes"] != shapes["half_odd"]["output_sizes"], shapes
        unloaded = w.request("make_inputs", slot="full", trial=0)
        assert unloaded["error"]["kind"] == "protocol" and "load_problem must come first" in unloaded["error"]["message"]
        bad = w.request("ping", slot="../x")
        assert bad["error"]["kind"] == "protocol" and "slot" in bad["error"]["message"]
        assert w.request("ping")["ok"]  # the default slot: a problem's own judge
        again = w.request("load_problem", slot="half", problem_path=problem, device="cpu", profile="strict",
                          secret_seed=7, work_dir=str(tmp_path / "half"))
        assert again["error"]["kind"] == "protocol" and "one problem until `release`" in again["error"]["message"]
    finally:
        w.close()


def test_a_released_judge_serves_another_problem_and_one_that_changed_torch_is_retired(tmp_path):
    # The orchestrator's judge pool (JudgePool): `release` drops every slot; the process then loads
    # another problem as a fresh one would, unless a problem left torch otherwise than it greeted.
    # (Only a judge started to be kept snapshots itself at its greeting: KERNELLLM_JUDGE_KEEPABLE.)
    plain = wh.Worker("judge")
    try:
        assert plain.request("release")["reusable"] is False
    finally:
        plain.close()
    w = wh.Worker("judge", env={"KERNELLLM_JUDGE_KEEPABLE": "1"})
    try:
        def load(problem, slot=""):
            d = tmp_path / f"{Path(problem).stem}-{slot or 'main'}"
            d.mkdir(exist_ok=True)
            r = w.request("load_problem", slot=slot, problem_path=str(problem), device="cpu", profile="strict",
                          secret_seed=7, work_dir=str(d))
            assert r["ok"], r
            return r

        first = load(CASES / "problems" / "add.py")
        load(CASES / "problems" / "add.py", slot="half")
        assert w.request("make_inputs", trial=0)["ok"]
        out = w.request("release")
        assert out["ok"] and out["reusable"] is True and out["why"] == "", out
        gone = w.request("make_inputs", slot="half", trial=0)  # every slot went with the release
        assert gone["error"]["kind"] == "protocol" and "load_problem must come first" in gone["error"]["message"]
        second = load(CASES / "problems" / "relu.py")  # another problem in the default slot
        assert second["input_specs"] != first["input_specs"]
        again = load(CASES / "problems" / "add.py", slot="half")  # and a slot freed by the release
        assert again["ok"]
        assert w.request("release")["reusable"] is True
        # What can be put back exactly is put back: the random generators (a problem drawing from
        # NumPy's at set-up gets what a fresh judge gets), warnings filters, NumPy's error handling,
        # the working directory (red team: each changed the next problem's verdict or stopped it).
        drawn = tmp_path / "drawn.py"
        drawn.write_text("import os, random, warnings\nimport numpy, torch\n"
                         "class Model(torch.nn.Module):\n    def __init__(self, a, b):\n        super().__init__()\n"
                         "        self.s = a + b\n    def forward(self, x):\n        return torch.relu(x) * self.s\n"
                         "def get_inputs():\n    return [torch.randn(4, 8)]\n"
                         "def get_init_inputs():\n    return [float(numpy.random.rand()), random.random()]\n"
                         "warnings.simplefilter('error')\nnumpy.seterr(all='raise')\nos.chdir('/')\n")
        # (A judge forked from the zygote starts from the zygote's generators, as its candidates do;
        # these test judges start by exec, each from its own: compared within one process here.)
        want = load(drawn)["init"]
        assert w.request("make_inputs", trial=0)["ok"]  # (seeds NumPy and random from the trial's seed)
        assert w.request("release")["reusable"] is True
        assert load(drawn)["init"] == want
        assert w.request("release")["reusable"] is True
        implicit = tmp_path / "implicit_dim.py"  # a UserWarning at every forward: an error under the filter above
        implicit.write_text((CASES / "problems" / "softmax.py").read_text().replace("torch.softmax(x, dim=1)",
                                                                                   "torch.nn.functional.softmax(x)"))
        assert "functional.softmax(x)" in implicit.read_text()
        load(implicit)
        assert w.request("make_inputs", trial=0)["ok"]
        assert w.request("release")["reusable"] is True
        # (Under that filter a fresh judge stops there: the reference's own error is the problem's.)
        strict = tmp_path / "strict_warnings.py"
        strict.write_text(implicit.read_text() + "\nimport warnings\nwarnings.simplefilter('error')\n")
        load(strict)
        raised = w.request("make_inputs", trial=0)
        assert raised["error"]["kind"] == "problem_error" and "UserWarning" in raised["error"]["message"], raised
        assert w.request("release")["reusable"] is True
        # A problem that sets torch up otherwise at import: the next problem's reference would be
        # made under its settings, so the process is not to be reused (the reasons are named).
        for n, (change, named) in enumerate((("torch.backends.cuda.matmul.allow_tf32 = True", "matmul_tf32"),
                                             ("torch.set_default_dtype(torch.float64)", "default_dtype"),
                                             ("torch.nn.ReLU.forward = lambda self, x: x", "ReLU.forward was replaced"),
                                             ("torch.relu = torch.abs", "torch.relu was replaced"),
                                             ("torch.Tensor.__matmul__ = lambda a, b: a", "Tensor gained ['__matmul__']"),
                                             ("torch.nn.modules.conv._ConvNd.reset_parameters = lambda self: None",
                                              "conv._ConvNd.reset_parameters was replaced"),
                                             ("torch.backends.mkldnn.enabled = False", "mkldnn_enabled"),
                                             ("torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o)",
                                              "module_global_hooks"),
                                             ("import os; os.environ['KLLM_TEST_SLOPPY'] = '1'", "KLLM_TEST_SLOPPY"),
                                             ("from torch.utils._python_dispatch import TorchDispatchMode\n"
                                              "class Passing(TorchDispatchMode):\n"
                                              "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
                                              "        return func(*args, **(kwargs or {}))\n"
                                              "Passing().__enter__()", "dispatch_modes: 0 -> 1"))):
            sloppy = tmp_path / f"sloppy{n}.py"
            sloppy.write_text((CASES / "problems" / "relu.py").read_text() + f"\n{change}\n")
            load(sloppy)
            retired = w.request("release")
            assert retired["ok"] and retired["reusable"] is False and named in retired["why"], retired
    finally:
        w.close()


def test_the_release_reads_every_setting_it_compares():
    # A setting this torch cannot read would read the same "unreadable" before and after, and so
    # never catch a change (the dispatch-mode stack was read through a name torch does not have).
    reuse = wh.import_worker("judge_reuse")
    flags = reuse._flags()
    unreadable = sorted(k for k, v in flags.items() if isinstance(v, str) and v.startswith("unreadable"))
    assert unreadable == [], flags
    assert flags["dispatch_modes"] == 0 and flags["function_modes"] == 0


def test_values_round_trip_and_refuse_objects(tmp_path):
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    value = {"args": [3, 0.5, float("nan"), float("-inf"), True, None, "s", (1, 2), x], "kwargs": {"k": [x]}}
    tensors = []
    enc = protocol.encode_value(value, tensors, "init.safetensors")
    protocol.save_tensors(str(tmp_path / "init.safetensors"), {str(i): t for i, t in enumerate(tensors)})
    import json
    wire = json.loads(json.dumps(enc, allow_nan=False))
    dec = protocol.decode_value(wire, lambda f: protocol.load_tensors(str(tmp_path / f), 1 << 20))
    assert dec["args"][:2] == [3, 0.5] and dec["args"][2] != dec["args"][2] and dec["args"][3] == float("-inf")
    assert dec["args"][4:8] == [True, None, "s", (1, 2)]
    assert torch.equal(dec["args"][8], x) and torch.equal(dec["kwargs"]["k"][0], x)
    with pytest.raises(protocol.WorkerError, match="cannot send a value of type builtins.object"):
        protocol.encode_value([object()], [], "f")
    with pytest.raises(protocol.ProtocolError, match="unknown value type 'blob'"):
        protocol.decode_value({"t": "blob"}, lambda f: {})


def test_tensor_files_are_size_checked_before_loading(tmp_path):
    p = str(tmp_path / "t.safetensors")
    size = protocol.save_tensors(p, {"0": torch.zeros(1000)})
    assert protocol.load_tensors(p, size)["0"].shape == (1000,)
    with pytest.raises(protocol.WorkerError, match=f"has {size} bytes, over the limit of {size - 1}"):
        protocol.load_tensors(p, size - 1)
    (tmp_path / "junk").write_bytes(b"\xff" * 64)
    with pytest.raises(protocol.WorkerError, match="no valid safetensors header"):
        protocol.load_tensors(str(tmp_path / "junk"), 1 << 20)


def test_init_rule_positional_vs_args_kwargs():
    assert judge.split_init([4, 8]) == ([4, 8], {}, "positional")
    assert judge.split_init([]) == ([], {}, "positional")
    assert judge.split_init([[4], {"bias": False}]) == ([4], {"bias": False}, "args_kwargs")
    assert judge.split_init(([4, 8], {})) == ([4, 8], {}, "args_kwargs")
    assert judge.split_init([[4], {"a": 1}, 3]) == ([[4], {"a": 1}, 3], {}, "positional")
    with pytest.raises(protocol.WorkerError, match="must return a list or tuple, found int"):
        judge.split_init(3)


def test_trial_seeds_follow_kernelbench_scheme():
    torch.manual_seed(42)
    expected = [torch.randint(0, 2 ** 32 - 1, (1,)).item() for _ in range(5)]
    assert judge.kernelbench_trial_seeds(42, 5) == expected
    assert judge.kernelbench_trial_seeds(42, 7)[:5] == expected  # prefix-stable for extra (timing) trials
    assert judge.derive_seed(1, "construct") != judge.derive_seed(1, "trials")


def test_kernelbench_profile_is_allclose_with_kernelbench_argument_order():
    ref = torch.tensor([1.0, 100.0])
    c = compare.Checker("kernelbench", ref, None, "v0")
    assert c.passes(ref + torch.tensor([0.0, 1.0]))  # |d| = 1 <= 0.01 + 0.01 * 101
    assert not c.passes(ref + torch.tensor([0.05, 0.0]))
    cur = compare.Checker("kernelbench", ref, None, "current")
    assert cur.tol == 1e-4 and not cur.passes(ref + 1e-3)


def test_strict_profile_scales_with_fp32_reference_error():
    torch.manual_seed(0)
    a, b = torch.randn(64, 512, dtype=torch.float64), torch.randn(512, 32, dtype=torch.float64)
    ref64 = a @ b
    ref32 = (a.float() @ b.float())
    c = compare.Checker("strict", ref32, ref64, "v0")
    split_k = a.float()[:, :256] @ b.float()[:256] + a.float()[:, 256:] @ b.float()[256:]
    assert c.passes(split_k)
    assert not c.passes(ref32 + 0.05)
    assert compare.baselines_passing(c) == []
    tiny64 = torch.full((8,), 1e-60, dtype=torch.float64)
    underflow = compare.Checker("strict", tiny64.float(), tiny64, "v0")
    assert underflow.passes(torch.zeros(8)) and compare.baselines_passing(underflow) == ["zeros", "mean"]


def test_strict_tolerance_statistics_leave_out_non_finite_elements_across_chunks(monkeypatch):
    # The statistics are summed on the tensors' device and read back once (no masked copies, one
    # synchronize per checker): the same numbers as over the finite elements alone, chunk by chunk.
    monkeypatch.setattr(compare, "CHUNK", 100)
    torch.manual_seed(1)
    ref64 = torch.randn(7, 53, dtype=torch.float64) * 3
    ref64[0, 0], ref64[2, 5], ref64[6, 52] = math.nan, math.inf, -math.inf
    ref32 = ref64.float()
    ref32[3, 3] = math.nan  # finite in fp64, not in fp32: out of the error, in the magnitude
    c = compare.Checker("strict", ref32, ref64, "v0")
    fin64 = torch.isfinite(ref64)
    both = fin64 & torch.isfinite(ref32)
    err = (ref32.double() - ref64)[both].abs().max().item()
    scale = ref64[fin64].abs().mean().item()
    assert c.scale == pytest.approx(scale, rel=1e-12)
    assert c.atol == pytest.approx(compare.REF_ERROR_MULTIPLE * err + 1e-4 * scale, rel=1e-12)
    d, r = (ref32.double() - ref64)[both], ref64[both]
    assert compare.norm_err(ref32, ref64) == pytest.approx(float(d.norm() / r.norm()), rel=1e-12)
    assert c.norm_bound == max(compare.REF_ERROR_MULTIPLE * compare.norm_err(ref32, ref64), 1e-4)
    out = ref32.double() * (1 + 1e-6)
    out[1, 1], out[4, 4] = math.nan, 7.0
    st = compare.stats(out.float(), ref32, ref64)
    o = out.float().double()
    diff = (o - ref64).abs()
    fin = torch.isfinite(diff)
    assert st["n_nonfinite_mismatch"] == int((~fin & ~(o.isnan() & ref64.isnan()) & ~(o == ref64)).sum())
    assert st["max_abs"] == pytest.approx(diff[fin].max().item(), rel=1e-12)
    assert st["mean_abs"] == pytest.approx(diff[fin].mean().item(), rel=1e-12)
    assert st["max_rel"] == pytest.approx((diff[fin] / ref64.abs()[fin].clamp_min(1e-12)).max().item(), rel=1e-12)
    assert st["ref_normalized_error"] == compare.norm_err(ref32, ref64)
    assert compare.stats(out.float(), ref32, ref64, 0.5)["ref_normalized_error"] == 0.5
    # Nothing finite in both, and nothing at all: no error.
    assert compare.norm_err(torch.full((3,), math.nan), torch.ones(3, dtype=torch.float64)) == 0.0
    assert compare.norm_err(torch.ones(0), torch.ones(0, dtype=torch.float64)) == 0.0
    empty = compare.Checker("strict", torch.ones(0), torch.ones(0, dtype=torch.float64), "v0")
    assert (empty.scale, empty.atol, empty.norm_bound) == (0.0, 0.0, 1e-4)


def test_rules_each_fire_with_evidence_in_precedence_order():
    clean = {"triton_launches": 2, "input_hash_before": "a", "input_hash_after": "a", "new_threads": [],
             "output_types": [{"type": "torch.Tensor", "layout": "torch.strided", "aliases_input": None}],
             "patched": []}
    assert rules.evaluate_run(clean) == []
    dirty = dict(clean, triton_launches=0, input_hash_after="b", new_threads=["t1 (Thread)"], patched=["time.perf_counter", "torch.randn"],
                 output_types=[{"type": "mylib.Lazy", "layout": "torch.strided", "aliases_input": 0}],
                 sandbox_events=[{"kind": k, "detail": k, "where": "candidate.py:1"}
                                 for k in ("env", "open_read", "network", "kill")],
                 process_spawns=rules.MAX_SPAWNS + 1, unjoined_streams=["torch.cpu.Stream"],
                 aten_compute={"read_bytes": 4096, "input_bytes": 4096, "ops": {"relu": 4096}})
    found = [v["rule"] for v in rules.evaluate_run(dirty, torch_fallback=True)]
    assert found == list(rules.RULES)
    # torch ops that read a small share of the inputs (glue) are not a fallback
    glue = dict(clean, aten_compute={"read_bytes": 1000, "input_bytes": 4096, "ops": {"sum": 1000}})
    assert rules.evaluate_run(glue, torch_fallback=True) == []
    assert rules.evaluate_run(dict(clean, triton_launches=0), require_triton=False) == []
    assert rules.evaluate_run(dict(clean, process_spawns=rules.MAX_SPAWNS)) == []
    assert {rules.verdict_of_rule(r) for r in found} == {"cheat", "sandbox_violation"}


def test_interpreter_numpy_failure_is_an_environment_error():
    tb = 'File ".../site-packages/triton/runtime/interpreter.py", line 900, in _implicit_cvt\n'
    e = TypeError("only 0-dimensional arrays can be converted to Python scalars")
    assert rules.classify_exception(e, tb, "run") == "environment_error"
    assert rules.classify_exception(e, "File \"cand.py\", line 3", "run") == "runtime_error"
    assert rules.classify_exception(SyntaxError("x"), "", "load") == "compile_error"
    from triton.runtime.errors import InterpreterError
    assert rules.classify_exception(InterpreterError("arange's range must be a power of 2"), tb, "run") == "compile_error"


def test_value_cheats_are_named_and_a_single_value_has_no_mean_baseline():
    ref = torch.tensor([1.0, -2.0, 3.0])
    assert compare.value_cheat(torch.zeros(3), ref, "normal")["rule"] == "zeros_pass"
    assert compare.value_cheat(torch.tensor([1.0, float("nan"), 3.0]), ref, "normal")["rule"] == "stale_memory"
    assert compare.value_cheat(ref + 1, ref, "heavy_tailed") is None  # wrong on heavy tails: wrong_output
    assert compare.value_cheat(ref + 1, ref, "normal") is None
    # Three elements cannot show error spread like rounding: a wrong output, not a downgrade.
    assert compare.value_cheat(ref + 1e-3, ref, "normal", ref.double()) is None
    assert compare.value_cheat(torch.tensor([1.0, float("inf"), 3.0]), ref, "heavy_tailed") is None
    loss = torch.tensor(2.75)
    assert compare.baselines_passing(compare.Checker("strict", loss, loss.double(), "v0")) == []


def _history_judge(refs: dict, outputs: dict, probe_ref=None) -> "judge.Judge":
    """A judge holding trials (references, and the candidate's outputs where it ran them)
    for exercising _history_cheat without processes."""
    j = judge.Judge()
    j.device, j.profile, j.kb_tolerance, j.candidate, j.fp_index = "cpu", "strict", "v0", "cand-0", {}
    flat = lambda xs: [x.reshape(-1) for x in xs]  # noqa: E731 (fingerprints are flat)
    for u, r in refs.items():
        j.trials[u] = {"fp": {"ref": flat([r]), "ref64": flat([r.double()]), "shapes": [tuple(r.shape)],
                              "limits": [compare.Checker("strict", r, r.double(), "v0").limits()],
                              "probe_ref": flat(probe_ref) if probe_ref is not None and u == 0 else None},
                       "distribution": "normal", "outputs": {"cand-0": flat(outputs[u])} if u in outputs else {}}
    return j


def test_history_compares_a_candidate_only_with_its_own_outputs():
    # Another candidate's output for trial 6 equals this candidate's failing output for trial 0:
    # that is no evidence against this one (it never ran trial 6 with that answer).
    refs = {0: torch.tensor([1.0, 2.0]), 6: torch.tensor([3.0, 4.0])}
    j = _history_judge(refs, {})
    j.trials[6]["outputs"]["cand-other"] = [refs[6].clone().reshape(-1)]
    checker = compare.Checker("strict", refs[0], refs[0].double(), "v0")
    assert j._history_cheat(0, 0, refs[6].clone(), checker, None) is None
    j.forget({"candidate": "cand-other"})
    assert j.trials[6]["outputs"] == {}


def test_history_names_a_cache_only_for_trials_the_candidate_has_run():
    # A constant loss that fails trial 0 and happens to lie within tolerance of trial 6's
    # reference, a trial the candidate has not run yet: not a cache (it cannot have seen those
    # inputs), a closed form (identical output for the probe inputs, whose reference differs).
    const = torch.tensor(2.7289)
    refs = {0: torch.tensor(2.6500), 6: torch.tensor(2.72891)}
    j = _history_judge(refs, {}, probe_ref=[torch.tensor(2.8000)])
    checker = compare.Checker("strict", refs[0], refs[0].double(), "v0")
    assert not checker.passes(const)
    found = j._history_cheat(0, 0, const, checker, const.clone())
    assert found is not None and found["rule"] == "closed_form", found
    # After the candidate ran trial 6 and passed it, the same constant (3.7e-6 relative from
    # trial 6's reference: within the strict tolerance, not as close as a computation on trial
    # 6's inputs) is still the closed form: a chance match names no cache.
    j = _history_judge(refs, {6: [const.clone()]}, probe_ref=[torch.tensor(2.8000)])
    found = j._history_cheat(0, 0, const, checker, const.clone())
    assert found is not None and found["rule"] == "closed_form", found
    # Trial 6's answer replayed (its reference to the last bit) is a cached result.
    j = _history_judge(refs, {6: [refs[6].clone()]}, probe_ref=[torch.tensor(2.8000)])
    found = j._history_cheat(0, 0, refs[6].clone(), checker, refs[6].clone())
    assert found is not None and found["rule"] == "cached_result", found


def test_close_agreement_is_far_tighter_than_the_tolerance():
    ref = torch.tensor([1.0, -2.0, 3.0])
    assert compare.agrees_closely(ref.clone(), ref, ref.double())
    assert compare.agrees_closely(ref * (1 + 5e-7), ref, ref.double())
    assert not compare.agrees_closely(ref * (1 + 5e-6), ref, ref.double())
    assert compare.Checker("strict", ref, ref.double(), "v0").passes(ref * (1 + 5e-6))
    assert not compare.agrees_closely(ref.half(), ref, ref.double())  # other dtype
    ints = torch.tensor([1, 2, 3])
    assert compare.agrees_closely(ints.clone(), ints, None) and not compare.agrees_closely(ints + 1, ints, None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where CUDA cannot start")
def test_cuda_that_cannot_start_is_an_environment_error_not_the_candidates(tmp_path):
    cand = tmp_path / "cand.py"
    marker = tmp_path / "imported"
    cand.write_text(f"open({str(marker)!r}, 'w').write('x')\nclass ModelNew:\n    pass\n")
    for first in ("init_device", "load"):  # the context alone (before the GPU's lock), or within the load
        w = wh.Worker("candidate")
        try:
            reply = w.request(first, module_path=str(cand), device="cuda:0")
            assert reply["error"]["kind"] == "environment_error", reply
            assert "could not start CUDA on cuda:0 before the candidate ran" in reply["error"]["message"]
            assert not marker.exists()  # decided before any candidate code ran
        finally:
            w.close()


def test_init_device_comes_once_and_before_the_load(tmp_path):
    s = wh.Session(CASES / "problems" / "add.py", tmp_path)
    load = dict(module_path=str(CASES / "add" / "correct_basic.py"), init=s.problem["init"],
                construct_seed=s.problem["construct_seed"], device="cpu", work_dir=str(tmp_path), problem=s.problem_field())
    w = wh.Worker("candidate")
    try:
        ready = w.request("init_device", device="cpu")
        assert ready.get("ok") and "steps_ms" in ready, ready
        again = w.request("init_device", device="cpu")
        assert again["error"]["kind"] == "protocol" and "once, before load" in again["error"]["message"], again
        assert w.request("load", **load).get("ok")
    finally:
        w.close()
    w = wh.Worker("candidate")
    try:
        assert w.request("load", **load).get("ok")
        late = w.request("init_device", device="cpu")  # candidate code has run: no more set-up requests
        assert late["error"]["kind"] == "protocol", late
    finally:
        w.close()
    w = wh.Worker("candidate")
    try:
        assert w.request("init_device", device="cpu").get("ok")
        other = w.request("load", **dict(load, device="cuda:0"))  # not the device it was started on
        assert other["error"]["kind"] == "protocol" and "init_device started cpu" in other["error"]["message"], other
    finally:
        w.close()
        s.close()


def test_a_candidates_load_says_where_its_time_went(tmp_path):
    """The load's reply takes its time apart (steps_ms: the problem, the candidate's import, its
    construction; CUDA and the profiler on a GPU), for the report's load_steps_ms."""
    s = wh.Session(CASES / "problems" / "add.py", tmp_path)
    w = wh.Worker("candidate")
    try:
        loaded = w.request("load", module_path=str(CASES / "add" / "correct_basic.py"), init=s.problem["init"],
                           construct_seed=s.problem["construct_seed"], device="cpu", work_dir=str(tmp_path),
                           problem=s.problem_field())
        assert loaded.get("ok"), loaded
        assert set(loaded["steps_ms"]) == {"problem", "import", "construct", "other"}, loaded["steps_ms"]
        assert all(ms >= 0 for ms in loaded["steps_ms"].values())
    finally:
        w.close()
        s.close()


def test_triton_warm_places_the_zygotes_modules_in_a_fresh_cache_only(tmp_path, monkeypatch):
    """What the zygote built of Triton's goes into a forked candidate's own, empty cache, where
    Triton finds it by its key; a file already there (the candidate's own) is left as it is."""
    warm = wh.import_worker("triton_warm")
    assert warm.place(str(tmp_path / "none")) == 0  # nothing built: nothing written
    monkeypatch.setattr(warm, "BUILT", [("k1/cuda_utils.so", b"\x7fELF utils"), ("k2/__triton_launcher.so", b"launcher")])
    cache = tmp_path / "triton"
    cache.mkdir()
    (cache / "k2").mkdir()
    (cache / "k2" / "__triton_launcher.so").write_bytes(b"its own")
    assert warm.place(str(cache)) == 1
    assert (cache / "k1" / "cuda_utils.so").read_bytes() == b"\x7fELF utils"
    assert (cache / "k2" / "__triton_launcher.so").read_bytes() == b"its own"
    assert sorted(p.name for p in cache.rglob("*")) == ["__triton_launcher.so", "cuda_utils.so", "k1", "k2"]
    assert warm.place("") == 0


@pytest.mark.parametrize("interpret", [True, False])
def test_triton_warm_up_never_initialises_cuda_and_says_why_it_built_nothing(tmp_path, interpret):
    """prepare() runs in the zygote before any fork: it must not initialise CUDA, and where it
    cannot build (the interpreter, no CUDA driver to link against) it says why and keeps nothing,
    so that workers start cold instead of failing."""
    import json
    import subprocess
    import sys
    code = ("import json, os, sys, types\n"
            f"pkg = types.ModuleType('kernelllm'); pkg.__path__ = [{str(wh.ROOT / 'python' / 'kernelllm')!r}]\n"
            "sys.modules['kernelllm'] = pkg\n"
            "import torch\n"
            "from kernelllm.worker import triton_warm as w\n"
            "info = w.prepare()\n"
            "print(json.dumps({'info': info, 'cuda': torch.cuda.is_initialized(), 'built': [r for r, _ in w.BUILT]}))\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["cuda"] is False
    info = got["info"]
    if interpret:
        assert info == {"built": 0, "skipped": "Triton's interpreter compiles nothing"} and got["built"] == []
    elif info.get("error"):
        assert info["built"] == 0 and got["built"] == []  # e.g. no libcuda on a CPU-only host
    else:  # a GPU host: the helper module at least, every file from this process's own cache
        names = [r.rsplit("/", 1)[-1] for r in got["built"]]
        assert info["built"] == len(names) >= 1 and any(n.startswith("cuda_utils") for n in names), info
        assert all((tmp_path / r).is_file() for r in got["built"])


def test_triton_warm_placement_that_cannot_write_stops_without_failing(tmp_path, monkeypatch):
    """A cache the worker cannot write to (a full disk) must not stop the worker from starting."""
    warm = wh.import_worker("triton_warm")
    monkeypatch.setattr(warm, "BUILT", [("k1/cuda_utils.so", b"utils")])
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert warm.place(str(blocked)) == 0
    assert blocked.read_text() == "not a directory"
