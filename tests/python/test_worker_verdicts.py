"""End-to-end tests of the verifier workers on CPU (TRITON_INTERPRET=1) through the pure-Python
harness: one judge per problem, one candidate process per candidate, verdicts and evidence."""
from __future__ import annotations

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


def test_honest_candidate_is_timed(add_session):
    s, d = add_session
    r = s.verify(d / "honest.py", time_iters=3)
    t = r["timing"]
    assert t["ok"] and len(t["times_ms"]) == 3 and all(x > 0 for x in t["times_ms"])
    assert t["meaningful"] is False and t["wall_total_ms"] >= 0.99 * t["event_total_ms"]


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


def test_kernelbench_profile_reports_untrusted_tolerance_but_passes(tmp_path):
    (tmp_path / "problem.py").write_text(PROBLEM_PROD)
    (tmp_path / "zeros.py").write_text(ZEROS_CANDIDATE)
    s = wh.Session(tmp_path / "problem.py", tmp_path, profile="kernelbench")
    try:
        assert s.problem["trial_distributions"] == ["normal"] * 5 and not s.problem["fp64_reference"]
        r = s.verify(tmp_path / "zeros.py")
    finally:
        s.close()
    assert r["verdict"] == "correct"
    last = r["replies"][-1]
    assert last["tolerance_trusted"] is False and "allclose" in last["stats"][0]["tolerance"]


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
