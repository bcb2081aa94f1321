"""End-to-end tests of the verifier workers on CPU (TRITON_INTERPRET=1) through the pure-Python
harness: one judge per problem, one candidate process per candidate, verdicts and evidence."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")
import worker_harness as wh  # noqa: E402

PROBLEM_ADD = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return (x + y) * self.scale

n = 300

def get_inputs():
    return [torch.randn(n), torch.randn(n)]

def get_init_inputs():
    return [2.0]
"""

KERNEL = """
import threading
import time
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, o_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(o_ptr + offs, (x + y) * scale, mask=m)

def launch(x, y, out, scale):
    add_kernel[(triton.cdiv(x.numel(), 128),)](x, y, out, x.numel(), scale, BLOCK=128)
    return out
"""


def candidate(body: str) -> str:
    return KERNEL + textwrap.dedent("""
    class ModelNew(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale

        def forward(self, x, y):
    """) + textwrap.indent(textwrap.dedent(body).strip(), " " * 8) + "\n"


ADD_CANDIDATES = {
    "honest": candidate("return launch(x, y, torch.empty_like(x), self.scale)"),
    "wrong_values": candidate("return launch(x, -y, torch.empty_like(x), self.scale)"),
    "wrong_shape": candidate("return launch(x, y, torch.empty_like(x), self.scale)[:-1]"),
    "syntax_error": candidate("return launch(x, y, torch.empty_like(x), self.scale"),
    "raises": candidate("raise IndexError('index 7 is out of bounds')"),
    "torch_only": candidate("return (x + y) * self.scale"),
    "mutates_input": candidate("""
        out = launch(x, y, torch.empty_like(x), self.scale)
        x.zero_()
        return out
    """),
    "background_thread": candidate("""
        threading.Thread(target=time.sleep, args=(30,), daemon=True, name="sneaky").start()
        return launch(x, y, torch.empty_like(x), self.scale)
    """),
    "aliases_input": candidate("return launch(x, y, y, self.scale)"),
    "patches_timer": candidate("return launch(x, y, torch.empty_like(x), self.scale)")
    + "\ntime.perf_counter = lambda: 0.0\n",
}


@pytest.fixture(scope="module")
def add_session(tmp_path_factory):
    d = tmp_path_factory.mktemp("add")
    (d / "problem.py").write_text(PROBLEM_ADD)
    for name, src in ADD_CANDIDATES.items():
        (d / f"{name}.py").write_text(src)
    s = wh.Session(d / "problem.py", d)
    yield s, d
    s.close()


EXPECTED = {
    "honest": ("correct", None, None),
    "wrong_values": ("wrong_output", None, 0),
    "wrong_shape": ("wrong_shape", None, 0),
    "syntax_error": ("compile_error", None, None),
    "raises": ("runtime_error", None, 0),
    "torch_only": ("cheat", "no_triton_kernel", 0),
    "mutates_input": ("cheat", "input_mutation", 0),
    "background_thread": ("cheat", "background_thread", 0),
    "aliases_input": ("cheat", "output_aliases_input", 0),
    "patches_timer": ("cheat", "patched_timer", None),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_add_problem_verdicts(add_session, name):
    s, d = add_session
    r = s.verify(d / f"{name}.py")
    verdict, rule, trial = EXPECTED[name]
    assert (r["verdict"], r["rule"], r["trial"]) == (verdict, rule, trial), r["evidence"]
    ev = r["evidence"]
    if name == "honest":
        stats = r["replies"][-1]["stats"][0]
        assert stats["against"] == "fp64" and stats["max_rel"] < 1e-6
        assert r["replies"][-1]["distribution"] == "heavy_tailed"  # strict: last trial heavy-tailed
    elif name == "wrong_values":
        assert ev["stats"][0]["max_abs"] > 0.1 and ev["first_mismatch"]["n_mismatch"] > 100
    elif name == "wrong_shape":
        assert "expected shape [300], found [299]" in ev["message"]
    elif name == "syntax_error":
        assert "SyntaxError" in ev["message"]
    elif name == "raises":
        assert "IndexError: index 7 is out of bounds" in ev["message"] and "forward" in ev["traceback"]
    elif name == "torch_only":
        assert "0 Triton kernels" in ev["evidence"]
    elif name == "background_thread":
        assert "sneaky" in ev["evidence"]
    elif name == "aliases_input":
        assert "input 1" in ev["evidence"]
    elif name == "patches_timer":
        assert "time.perf_counter" in ev["evidence"]


def test_a_timed_candidate_runs_on_the_inputs_the_judge_hands_over(add_session):
    # The paired flow of timed_calls.cpp in miniature, live processes: the judge's output and
    # input regions reach the candidate's fd 5 (outputs first); before each round trip the judge
    # loads its own sets and copies them into the input slots; the candidate's calls run on its
    # views of them, and the judge's check holds each slot to its own set's reference.
    s, d = add_session
    trials = [20, 21, 22, 23]
    for t in trials:
        s.trial_inputs(t, "normal")
    j = s.judge
    cand = wh.Worker("candidate")
    try:
        load = cand.request("load", module_path=str(d / "honest.py"), init=s.problem["init"],
                            construct_seed=s.problem["construct_seed"], device="cpu", work_dir=str(d),
                            problem=s.problem_field())
        assert load["ok"], load
        assert j.request("time_prepare", trial=20, compile=False, slots=2, trials=trials,
                         trips=[trials[:2], trials[2:]])["ok"]
        reg = j.request("time_region", trial=20, slots=2)
        assert reg["ok"], reg
        bad = cand.request("time_prepare", region=dict(reg["region"], inputs={"bytes": 256, "slots": [[]]}))
        assert not bad["ok"] and bad["error"]["kind"] == "protocol", bad  # one input slot for two calls
        for op in ("time_region", "time_inputs_region"):
            if op == "time_inputs_region":
                given = j.request(op, trial=20, slots=2)
                assert given["ok"], given
            fd = j.receive_fd()
            cand.send_fd(fd)
            os.close(fd)
        prep = cand.request("time_prepare", region=dict(reg["region"], inputs=given["inputs"]))
        assert prep["ok"] and prep["given"] == [0, 1], prep
        for trip in (trials[:2], trials[2:]):
            assert j.request("time_give", trials=trip)["ok"]
            call = cand.request("time_call", sets=prep["given"])
            assert call["ok"] and call["output_bound"], call
            chk = j.request("check_timed", trials=trip)
            assert chk["ok"] and chk["match"], chk
        # Without a refill the slots still hold the last round trip's sets: the values answer
        # those, not the first round trip's.
        assert cand.request("time_call", sets=prep["given"])["ok"]
        assert not j.request("check_timed", trials=trials[:2])["match"]
    finally:
        cand.close()


def test_honest_candidate_is_timed(add_session):
    s, d = add_session
    r = s.verify(d / "honest.py", time_iters=3)
    t = r["timing"]
    assert t["ok"] and len(t["times_ms"]) == 3 and all(x > 0 for x in t["times_ms"])
    assert all(c["ok"] and c["match"] for c in t["checks"]), t["checks"]
    assert all(c["output_bound"] for c in t["calls"]), t["calls"]
    assert t["checks"][-1]["verdict_hint"] == "correct"  # the last call: the whole output


PROBLEM_PROD = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.prod(x, dim=1)

def get_inputs():
    return [0.05 * torch.randn(4, 64)]

def get_init_inputs():
    return []
"""

ZEROS_CANDIDATE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def zero_kernel(o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(o_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], device=x.device)
        zero_kernel[(1,)](out, out.numel(), BLOCK=16)
        return out
"""


def test_zeros_would_pass_is_reported_as_undiscriminating(tmp_path):
    (tmp_path / "problem.py").write_text(PROBLEM_PROD)
    (tmp_path / "zeros.py").write_text(ZEROS_CANDIDATE)
    s = wh.Session(tmp_path / "problem.py", tmp_path)
    try:
        r = s.verify(tmp_path / "zeros.py")
    finally:
        s.close()
    assert r["verdict"] == "undiscriminating", r["evidence"]
    assert r["evidence"]["match"] is True and r["evidence"]["tolerance_trusted"] is False
    assert "zeros" in r["evidence"]["baselines_passing"]["0"]


PROBLEM_CLAMP = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, bound, offset=0.0):
        super().__init__()
        self.bound = bound
        self.offset = offset

    def forward(self, x):
        return torch.clamp(x, -self.bound, self.bound) + self.offset

def get_inputs():
    return [torch.randn(512)]

def get_init_inputs():
    return [[6.0], {"offset": 0.5}]
"""

CLAMP_TEMPLATE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, o_ptr, n, bound, offset, CLAMP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if CLAMP:
        x = tl.minimum(tl.maximum(x, -bound), bound)
    tl.store(o_ptr + offs, x + offset, mask=m)

class ModelNew(nn.Module):
    def __init__(self, bound, offset=0.0):
        super().__init__()
        self.bound = bound
        self.offset = offset

    def forward(self, x):
        out = torch.empty_like(x)
        k[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), self.bound, self.offset, CLAMP=CLAMP, BLOCK=128)
        return out
"""


def test_args_kwargs_init_and_heavy_tailed_trial(tmp_path):
    """[args, kwargs] init reaches ModelNew; a kernel that drops the clamp (exact for normal
    inputs, |x| < 6) passes the normal trials and fails the heavy-tailed one: a wrong output."""
    (tmp_path / "problem.py").write_text(PROBLEM_CLAMP)
    (tmp_path / "honest.py").write_text(CLAMP_TEMPLATE.replace("CLAMP=CLAMP", "CLAMP=True"))
    (tmp_path / "closed_form.py").write_text(CLAMP_TEMPLATE.replace("CLAMP=CLAMP", "CLAMP=False"))
    s = wh.Session(tmp_path / "problem.py", tmp_path)
    try:
        assert s.problem["init_convention"] == "args_kwargs"
        assert s.problem["init"]["kwargs"]["v"]["offset"] == {"t": "float", "v": 0.5}
        honest = s.verify(tmp_path / "honest.py")
        cheat = s.verify(tmp_path / "closed_form.py")
    finally:
        s.close()
    assert honest["verdict"] == "correct", honest["evidence"]
    assert (cheat["verdict"], cheat["trial"]) == ("wrong_output", 4), cheat["evidence"]
    assert cheat["evidence"]["distribution"] == "heavy_tailed"
    normal_compares = [r for r in cheat["replies"] if r.get("op") == "compare"][:-1]
    assert len(normal_compares) == 4 and all(r["match"] for r in normal_compares)


def test_kernelbench_profile_judges_a_blind_tolerance_by_the_outputs_distance(tmp_path):
    # Products of 64 small factors: KernelBench's allclose passes zeros, so the tolerance is
    # reported untrusted. An honest product still passes; zeros are wrong_output on every trial
    # (their distance from the reference in norm is 1), never a verdict that hangs on whether a
    # trial's random inputs hold an element above the tolerance.
    cases = Path(__file__).resolve().parents[1] / "cases"
    s = wh.Session(cases / "problems" / "prod_dim.py", tmp_path, profile="kernelbench")
    try:
        assert not s.problem["fp64_reference"]
        honest = s.verify(cases / "prod_dim" / "correct_prod.py")
        zeros = s.verify(cases / "prod_dim" / "cheat_zeros.py")
    finally:
        s.close()
    assert honest["verdict"] == "correct", honest["evidence"]
    last = honest["replies"][-1]
    assert last["tolerance_trusted"] is False and "allclose" in last["stats"][0]["tolerance"]
    assert (zeros["verdict"], zeros["rule"], zeros["trial"]) == ("wrong_output", "blind_tolerance", 0), zeros["evidence"]
    assert "cannot tell the reference from zeros" in zeros["evidence"]["message"]
    assert zeros["evidence"]["stats"][0]["normalized_error"] == pytest.approx(1.0)


PROBLEM_ROWSUM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=1)

def get_inputs():
    return [torch.randn(3, 200)]

def get_init_inputs():
    return []
"""

ROWSUM_LOOP = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def rowsum(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for s in range(0, n, BLOCK):
        offs = s + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
    tl.store(o_ptr + row, tl.sum(acc, axis=0))

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], device=x.device)
        rowsum[(x.shape[0],)](x, out, x.shape[1], BLOCK=64)
        return out
"""


def test_kernel_looping_over_runtime_bound_runs_in_interpreter(tmp_path):
    """The CPU-mode environment (pinned Triton/NumPy) runs loops over runtime bounds."""
    (tmp_path / "problem.py").write_text(PROBLEM_ROWSUM)
    (tmp_path / "loop.py").write_text(ROWSUM_LOOP)
    s = wh.Session(tmp_path / "problem.py", tmp_path)
    try:
        r = s.verify(tmp_path / "loop.py")
    finally:
        s.close()
    assert r["verdict"] == "correct", r["evidence"]
    assert r["replies"][1]["triton_launches"] == 1


CASES = Path(__file__).resolve().parents[1] / "cases"
SANDBOX_CASES = {"sandbox_env_secret": "env_escape", "sandbox_fork_flood": "process_flood",
                 "sandbox_kill_parent": "kill_parent", "sandbox_network": "network",
                 "sandbox_read_problem": "file_escape", "sandbox_read_shadow": "file_escape",
                 "sandbox_write_repo": "file_escape"}
NEAR_MISSES = ("correct_env_allowed", "correct_hostname", "correct_own_tempdir", "correct_reads_own_source",
               "correct_signal_self", "correct_two_forks")
LOAD_TIME_ESCAPE = """
try:
    open("/etc/shadow").close()
except OSError:
    pass
"""


def test_sandbox_attempts_are_recorded_and_near_misses_pass(tmp_path, monkeypatch):
    """Each relu sandbox case, copied alone into its own dir (as the orchestrator's work dir),
    is a sandbox_violation with its rule; the honest near-misses stay correct; an attempt made
    at import time shows in trial 0's report; nothing is written outside the work dir."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setenv("KERNELLLM_TEST_SECRET", "not-for-candidates")
    (tmp_path / "tmp").mkdir()
    s = wh.Session(CASES / "problems" / "relu.py", tmp_path)
    got, why = {}, {}
    try:
        for name in [*SANDBOX_CASES, *NEAR_MISSES, "load_time_escape"]:
            work = tmp_path / name / "work"
            work.mkdir(parents=True)
            if name == "load_time_escape":  # an honest kernel that tries /etc/shadow while being imported
                src = (CASES / "relu" / "correct_basic.py").read_text() + LOAD_TIME_ESCAPE
            else:
                src = (CASES / "relu" / f"{name}.py").read_text()
            (work / "candidate.py").write_text(src)
            r = s.verify(work / "candidate.py")
            got[name] = (r["verdict"], r["rule"], r["trial"])
            why[name] = str((r["evidence"] or {}).get("message", ""))[:500]
            assert "not-for-candidates" not in str(r["replies"])
    finally:
        s.close()
    for name, rule in SANDBOX_CASES.items():
        assert got[name][:2] == ("sandbox_violation", rule), (name, got[name], why[name])
        assert not (tmp_path / name / ".escape_marker").exists()
    for name in NEAR_MISSES:
        assert got[name][0] == "correct", (name, got[name], why[name])
    assert got["load_time_escape"] == ("sandbox_violation", "file_escape", 0)


def test_size_scale_reloads_the_problem_with_scaled_size_globals(tmp_path):
    """load_problem size_scale/size_odd: sizes >= 8 scaled (odd on request), small ints kept;
    a shape-generic kernel stays correct, one with hard-coded sizes does not."""
    generic, brittle = CASES / "sum_dim" / "correct_triton_sum.py", CASES / "sum_dim" / "correct_hardcoded_dims.py"
    s = wh.Session(CASES / "problems" / "sum_dim.py", tmp_path, size_scale=0.5, size_odd=True)
    try:
        assert s.problem["size_globals"] == {"batch_size": [16, 9], "dim1": [64, 33], "dim2": [16, 9]}
        assert s.problem["input_specs"][0]["shape"] == [9, 33, 9]
        assert s.verify(generic)["verdict"] == "correct"
        try:
            brittle_verdict = s.verify(brittle)["verdict"]
        except EOFError:  # out-of-bounds access killed the candidate process: a crash
            brittle_verdict = "crash"
        assert brittle_verdict != "correct"
    finally:
        s.close()


# ---- "Triton did the work": the judge's source audit and kernel-profile ops, the run facts ------

def _audit(s, src: str, **fields):
    import base64
    r = s.judge.request("audit_source", source_b64=base64.b64encode(src.encode()).decode(), **fields)
    assert r["ok"], r
    return r


def test_judge_audit_source_op(add_session):
    s, d = add_session
    honest = _audit(s, ADD_CANDIDATES["honest"], path="honest.py")
    assert honest["load_verdict"] is None and honest["kernel_names"] == ["add_kernel"]
    # torch inside a jit body: compile_error before any candidate code runs
    bad = _audit(s, ADD_CANDIDATES["honest"].replace("tl.store(o_ptr + offs, (x + y) * scale, mask=m)",
                                                     "torch.add(x, y)"))
    assert bad["load_verdict"]["verdict"] == "compile_error"
    assert "calls torch.add inside @triton.jit kernel add_kernel" in bad["load_verdict"]["message"]
    # no jit kernel at all: cheat no_triton_kernel once it passes (a fact of the source it cannot forge)
    none = _audit(s, "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x, y):\n        return x + y\n")
    assert none["load_verdict"] is None and none["after_correct"]["rule"] == "no_triton_kernel"
    # default-precision tl.dot: the CPU strict fp32 judge says precision_downgrade after correctness
    dot = _audit(s, "import triton\nimport triton.language as tl\n@triton.jit\ndef k(a, b):\n    c = tl.dot(a, b)\n")
    assert dot["load_verdict"] is None and dot["after_correct"]["rule"] == "precision_downgrade"
    junk = s.judge.request("audit_source", source_b64="not base64!")
    assert not junk["ok"] and junk["error"]["kind"] == "protocol"


def test_judge_kernel_check_op(add_session):
    s, _ = add_session
    gemm = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_cublas"
    r = s.judge.request("kernel_check", kernel_names=["add_kernel"], triton_launches=1,
                        kernel_profile={"available": True, "kernels": [{"name": gemm, "us": 50.0, "count": 1},
                                                                       {"name": "add_kernel", "us": 1.0, "count": 1}]})
    assert r["ok"] and r["violation"]["rule"] == "torch_fallback", r
    assert r["summary"]["top_non_triton"][0]["name"] == gemm
    # the names are the audit's: a candidate calling cuBLAS "add_kernel" in its report is not believed
    # unless the source's jit kernel has that name (then the profile shows the Triton kernel ran)
    r = s.judge.request("kernel_check", kernel_names=["other_kernel"], triton_launches=1,
                        kernel_profile={"available": True, "kernels": [{"name": "add_kernel", "us": 1.0, "count": 1}]})
    assert r["violation"]["rule"] == "no_triton_kernel"
    r = s.judge.request("kernel_check", kernel_names=["add_kernel"], kernel_profile={"available": False,
                                                                                     "reason": "CUPTI unavailable"})
    assert r["violation"] is None and r["summary"]["reason"] == "CUPTI unavailable"


def test_profile_kernels_on_cpu_is_unavailable_and_names_launches(add_session):
    s, d = add_session
    cand = wh.Worker("candidate")
    try:
        load = cand.request("load", module_path=str(d / "honest.py"), init=s.problem["init"],
                            construct_seed=s.problem["construct_seed"], device="cpu", work_dir=str(d),
                            problem=s.problem_field())
        assert load["ok"], load
        inp = s.trial_inputs(0, "normal")
        run = cand.request("run", inputs=inp["spec"], outputs_file=str(d / "out_profile.safetensors"), poison=True,
                           profile_kernels=True)
        assert run["ok"], run
        assert run["kernel_profile"] == {"available": False, "reason": "CPU mode: no GPU kernels to profile"}
        assert run["triton_launches"] == 1 and run["triton_launched_kernels"] == {"add_kernel": 1}
        assert run["violations"] == []
        plain = cand.request("run", inputs=inp["spec"], outputs_file=str(d / "out_plain.safetensors"), poison=True)
        assert "kernel_profile" not in plain
    finally:
        cand.close()


# --- Verifier v2, classes 7 and 8: verdicts that blame the right cause, inputs that discriminate ---

def _header(path: Path) -> dict:
    import sys
    sys.path.insert(0, str(CASES))
    from case_header import parse_header
    return parse_header(path)


SEED_CASES = {  # problem -> candidates judged under 5 secret seeds each: the verdict must not flip
    "softmax_odd_width": ["correct_masked", "wrong_mask_last_element", "cheat_fp16_arithmetic"],
    "mse_loss": ["correct_two_pass", "wrong_half_batch"],
    "cumprod": ["correct_triton_cumprod", "wrong_zeros_tail"],
}
SEEDS = (11, 22, 33, 44, 55)


@pytest.mark.parametrize("problem", list(SEED_CASES))
def test_same_verdict_on_every_seed(tmp_path, problem):
    """Class 7: a localized error (one element, a loss over half the batch) is wrong_output with
    the first mismatch and the count, never precision_downgrade, whatever the secret seed; error
    spread like fp16 rounding is precision_downgrade on every seed. Class 8: the cumprod that
    writes zeros past column 128 fails the added near_unit trial on every seed."""
    got = {}
    for seed in SEEDS:
        work = tmp_path / str(seed)
        work.mkdir()
        s = wh.Session(CASES / "problems" / f"{problem}.py", work, secret_seed=seed)
        try:
            dists = s.problem["trial_distributions"]
            for name in SEED_CASES[problem]:
                path = CASES / problem / f"{name}.py"
                r = s.verify(path)
                head = _header(path)
                got.setdefault(name, set()).add((r["verdict"], r["rule"]))
                assert r["verdict"] == head["expect"], (seed, name, r["evidence"])
                if head["expect"] == "cheat":
                    assert r["rule"] == head["rule"], (seed, name, r["evidence"])
                ev = r["evidence"] or {}
                if name == "wrong_mask_last_element":  # only the last row is off
                    fm = ev["first_mismatch"]
                    assert fm["index"][0] == 39 and 1 <= fm["n_mismatch"] <= 100 and fm["n_elements"] == 4000
                    assert f"{fm['n_mismatch']} of 4000 elements differ, first at [39, " in ev["message"]
                elif name == "wrong_half_batch":  # a 0-d loss: one element, never "spread"
                    assert ev["first_mismatch"]["index"] == [] and ev["first_mismatch"]["n_mismatch"] == 1
                    assert "1 of 1 elements differ" in ev["message"]
                elif name == "cheat_fp16_arithmetic":
                    assert "spread like half-precision rounding" in ev["evidence"]
                elif name == "wrong_zeros_tail":
                    assert dists[r["trial"]] == "near_unit", (seed, dists, r["trial"])
                    assert ev["first_mismatch"]["index"] == [0, 128]
            if problem == "cumprod":
                assert dists[-2:] == ["near_unit", "heavy_tailed"] and s.problem["n_trials"] == 6
                assert s.problem["degenerate_elements"]["share"] > 0.5
            else:
                assert "near_unit" not in dists
        finally:
            s.close()
    assert all(len(v) == 1 for v in got.values()), got


def test_precision_spread_needs_many_elements_and_no_outlier():
    compare = wh.import_worker("compare")
    import torch
    g = torch.Generator().manual_seed(0)
    ref64 = torch.randn(40, 100, generator=g, dtype=torch.float64).softmax(dim=1)
    ref = ref64.float()
    fp16 = ref.half().float()  # rounding on every element
    assert compare.value_cheat(fp16, ref, "normal", ref64)["rule"] == "precision_downgrade"
    one = ref.clone()
    one[39, 99] = 0.0  # one element wrong: localized, however small the normalized error
    assert compare.norm_err(one.double(), ref64) < 1e-2
    assert compare.value_cheat(one, ref, "normal", ref64) is None
    row = ref.clone()
    row[7] *= 1.01  # one row scaled by 1%: 2.5% of the output, not spread
    assert compare.value_cheat(row, ref, "normal", ref64) is None
    both = fp16.clone()
    both[0, 0] += 0.05  # rounding everywhere plus one element far outside it
    assert compare.value_cheat(both, ref, "normal", ref64) is None
    loss64 = torch.tensor(2.0, dtype=torch.float64)  # a scalar can never show spread
    assert compare.value_cheat(torch.tensor(2.001), loss64.float(), "normal", loss64) is None
    small64 = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
    assert compare.value_cheat((small64 + 1e-3).float(), small64.float(), "normal", small64) is None


PROBLEM_SMALL_HALF = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.cat([x, 1e-12 * x], dim=1)

def get_inputs():
    return [torch.randn(16, 64)]

def get_init_inputs():
    return []
"""

SMALL_HALF_CANDIDATE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def cat_scaled(x_ptr, o_ptr, cols, SCALE_ZERO: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    m = c < cols
    x = tl.load(x_ptr + row * cols + c, mask=m)
    tl.store(o_ptr + row * 2 * cols + c, x, mask=m)
    tail = x * 1e-12
    if SCALE_ZERO:
        tail = tail * 0.0
    tl.store(o_ptr + row * 2 * cols + cols + c, tail, mask=m)

class ModelNew(nn.Module):
    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty(rows, 2 * cols, device=x.device, dtype=x.dtype)
        cat_scaled[(rows,)](x, out, cols, SCALE_ZERO=SCALE_ZERO, BLOCK=triton.next_power_of_2(cols))
        return out
"""


def test_elements_no_trial_discriminates_make_the_problem_undiscriminating(tmp_path):
    """Half the output is 1e-12 x the input: zeros pass there under every input distribution
    (near_unit included), while the other half keeps the whole-output zeros/mean baselines from
    passing. Honest and zeroing kernels alike get `undiscriminating`, with the count."""
    (tmp_path / "problem.py").write_text(PROBLEM_SMALL_HALF)
    (tmp_path / "honest.py").write_text(SMALL_HALF_CANDIDATE.replace("SCALE_ZERO=SCALE_ZERO", "SCALE_ZERO=False"))
    (tmp_path / "zeros.py").write_text(SMALL_HALF_CANDIDATE.replace("SCALE_ZERO=SCALE_ZERO", "SCALE_ZERO=True"))
    s = wh.Session(tmp_path / "problem.py", tmp_path)
    try:
        assert s.problem["trial_distributions"] == ["normal"] * 4 + ["near_unit", "heavy_tailed"]
        for name in ("honest", "zeros"):
            r = s.verify(tmp_path / f"{name}.py")
            assert (r["verdict"], r["trial"]) == ("undiscriminating", 5), (name, r["evidence"])
            ev = r["evidence"]
            assert ev["match"] and ev["tolerance_trusted"] is False
            assert ev["baselines_passing"] == {"0": ["zeros_per_element"]}
            u = ev["undiscriminated_elements"]["0"]
            assert (u["count"], u["of"], u["first_index"]) == (1024, 2048, [0, 64])
            assert "1024 of 2048 non-zero reference elements" in ev["message"]
            assert all(c["verdict_hint"] == "correct" for c in r["replies"] if c.get("op") == "compare"
                       and c is not r["replies"][-1])
    finally:
        s.close()


HONEST_PROBLEMS = {
    "mean_dim": ("x.mean(dim=1)", "[torch.randn(16, 256, 16)]"),
    "max_dim": ("x.max(dim=1)[0]", "[torch.randn(16, 256, 16)]"),
    "layernorm": ("torch.nn.functional.layer_norm(x, (64, 32))", "[torch.randn(16, 64, 32)]"),
}


@pytest.mark.parametrize("problem", ["relu", "softmax", "matmul", "sum_dim", "cross_entropy", "softmax_odd_width",
                                     "mse_loss", *HONEST_PROBLEMS])
def test_honest_problems_get_no_extra_trial_and_stay_discriminating(tmp_path, problem):
    """In process: the judge sees no degenerate elements in these problems (no near_unit trial)
    and the reference itself, as a candidate's output, is `correct` at the last trial."""
    judge, protocol = wh.import_worker("judge"), wh.import_worker("protocol")
    if problem in HONEST_PROBLEMS:
        fwd, inputs = HONEST_PROBLEMS[problem]
        path = tmp_path / f"{problem}.py"
        path.write_text(f"import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
                        f"        return {fwd}\ndef get_inputs():\n    return {inputs}\n"
                        "def get_init_inputs():\n    return []\n")
    else:
        path = CASES / "problems" / f"{problem}.py"
    for seed in (1, 2):
        j = judge.Judge()
        p = j.load_problem({"problem_path": str(path), "device": "cpu", "profile": "strict", "secret_seed": seed,
                            "work_dir": str(tmp_path)})
        assert p["trial_distributions"] == ["normal"] * 4 + ["heavy_tailed"], p["degenerate_elements"]
        for t, dist in enumerate(p["trial_distributions"]):
            j.make_inputs({"trial": t, "distribution": dist})
            protocol.save_tensors(str(tmp_path / "out.safetensors"), {str(i): r.clone() for i, r in enumerate(j._full(t)["ref"])})
            c = j.compare({"trial": t, "outputs_file": str(tmp_path / "out.safetensors")})
            assert c["match"] and c["verdict_hint"] == "correct", (problem, seed, t, c["message"])
        assert c["undiscriminated_elements"] == {}
