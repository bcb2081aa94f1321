"""KernelLLM.optimize and kernelllm.verify_completions on CPU (Triton interpreter): the tiny random
model's candidates get real non-correct verdicts with reasons and no best; completions written
elsewhere (a correct Triton module, a wrong one, plain prose) are ranked with the correct one
best; bad arguments are clear exceptions before anything runs."""
from __future__ import annotations

from pathlib import Path

import pytest

import kernelllm
from kernelllm import KernelLLM, OptimizeResult

PROBLEM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale

N = 1000

def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return [2.0]
"""

GOOD = """import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _relu_scale(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * scale, mask=m)

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        _relu_scale[(triton.cdiv(n, 256),)](x, y, n, self.scale, BLOCK=256)
        return y
"""
WRONG = GOOD.replace("tl.maximum(x, 0.0) * scale", "tl.maximum(x, 0.0) * scale + 0.5")

VERDICTS = {"correct", "wrong_output", "wrong_shape", "compile_error", "runtime_error", "crash", "timeout", "cheat",
            "sandbox_violation", "undiscriminating", "environment_error", "not_verified"}


def test_optimize_with_the_tiny_model_reports_why_each_candidate_fails(tiny_engine, tmp_path):
    r = tiny_engine.optimize(PROBLEM, k=2, max_new_tokens=24, seed=11, device="cpu", work_dir=tmp_path)
    assert isinstance(r, OptimizeResult)
    assert r.best_code is None and r.best_index is None and r.speedup is None
    assert [c["sample"] for c in r.candidates] == [0, 1]
    for c in r.candidates:
        assert c["verdict"] in VERDICTS and c["verdict"] != "correct"
        assert c["rule"] or c["message"], f"no reason for {c['verdict']}"
        assert Path(c["path"]).read_text() == c["code"]
        assert c["completion"], "the raw completion is kept"
    assert len(r.failure_reasons) == 2 and all(r.failure_reasons)
    # The report is complete: the problem as verified, every candidate, generation stats.
    rep = r.report
    assert Path(rep["problem_file"]).read_text() == PROBLEM
    assert Path(rep["problem_file"]).parent == tmp_path
    assert [c["verdict"] for c in rep["candidates"]] == [c["verdict"] for c in r.candidates]
    assert rep["best"] is None and rep["source"].startswith("cpu:")
    assert rep["generation"]["generated_tokens"] > 0 and rep["tokens"] == rep["generation"]["generated_tokens"]
    assert rep["sandbox"]
    # The same seed gives the same candidates.
    again = tiny_engine.optimize(PROBLEM, k=2, max_new_tokens=24, seed=11, device="cpu", work_dir=tmp_path / "b")
    assert [c["completion"] for c in again.candidates] == [c["completion"] for c in r.candidates]


def test_verify_completions_ranks_completions_written_elsewhere(tmp_path):
    completions = [
        "Here is a faster version:\n```python\n" + WRONG + "```\n",
        "```python\n" + GOOD + "```\nThis fuses the ReLU and the scale.",
        "I cannot help with that.",
    ]
    r = kernelllm.verify_completions(PROBLEM, completions, device="cpu", work_dir=tmp_path)
    verdicts = [c["verdict"] for c in r.candidates]
    assert verdicts[0] == "wrong_output" and verdicts[1] == "correct"
    assert verdicts[2] != "correct" and r.candidates[2]["message"]
    assert r.best_index == 1 and r.best_code == GOOD
    assert r.candidates[1]["extraction"] == "fenced block 1"
    assert r.report["source"] == "fixed" and r.failure_reasons == []
    assert KernelLLM.verify_completions is kernelllm.verify_completions


@pytest.mark.parametrize("kwargs, error, match", [
    ({"k": 0}, ValueError, "k: expected a whole number >= 1, found 0"),
    ({"max_new_tokens": -1}, ValueError, "max_new_tokens"),
    ({"rounds": 0}, ValueError, "rounds"),
    ({"profile": "loose"}, ValueError, "profile: expected 'strict' or 'kernelbench'"),
    ({"temperature": -1.0}, ValueError, "temperature"),
    ({"device": "tpu"}, (ValueError, RuntimeError), "tpu"),
])
def test_optimize_bad_arguments_are_clear_errors(tiny_engine, tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        tiny_engine.optimize(PROBLEM, max_new_tokens=kwargs.pop("max_new_tokens", 8), work_dir=tmp_path, **kwargs)


def test_optimize_rejects_code_without_model(tiny_engine, tmp_path):
    with pytest.raises(ValueError, match="missing: `class Model`"):
        tiny_engine.optimize("def f(x):\n    return x\n", k=1, max_new_tokens=8, work_dir=tmp_path)
    with pytest.raises(TypeError, match="code: expected the module's source text"):
        tiny_engine.optimize(b"class Model: pass", k=1, work_dir=tmp_path)
    with pytest.raises(ValueError, match="completions"):
        kernelllm.verify_completions(PROBLEM, [], work_dir=tmp_path)
    assert not any(tmp_path.iterdir()), "nothing runs before the arguments are checked"


def test_default_module_code_is_a_valid_module():
    code = kernelllm.DEFAULT_MODEL_CODE
    assert "class Model(nn.Module)" in code and "def get_inputs" in code
    kernelllm._native.check_module_code(code)
