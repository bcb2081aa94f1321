"""Problems and a judge for the tests that drive worker/judge.py directly, in this process
(test_inputs.py, test_judge_timing.py)."""
from __future__ import annotations

import types

import worker_harness as wh

# The worker modules these tests drive in this process.
inputs = wh.import_worker("inputs")
judge = wh.import_worker("judge")
judge_timing = wh.import_worker("judge_timing")
protocol = wh.import_worker("protocol")
region = wh.import_worker("region")
WorkerError = protocol.WorkerError


PROBLEM = """import torch
import torch.nn as nn
N = 8
class Model(nn.Module):
    def forward(self, x, mask, s):
        return torch.where(mask, x * s, -x)
def get_inputs():
    return [torch.randn(4, N), torch.randint(0, 2, (4, N)).bool(), 2.5]
def get_init_inputs():
    return []
"""


# The same problem with tensor arguments only (its sets can be handed over in an input region).
TENSORS_ONLY = PROBLEM.replace("def forward(self, x, mask, s):\n        return torch.where(mask, x * s, -x)",
                               "def forward(self, x, mask):\n        return torch.where(mask, x * 2.5, -x)"
                               ).replace(", 2.5]", "]")
assert "2.5]" not in TENSORS_ONLY and "x * 2.5" in TENSORS_ONLY


def make_judge(tmp_path, source: str = PROBLEM, **fields) -> "judge.Judge":
    """A judge in this process with `source` loaded on the CPU (strict profile unless `fields` say)."""
    path = tmp_path / "problem.py"
    path.write_text(source)
    j = judge.Judge()
    j.load_problem(dict({"problem_path": str(path), "device": "cpu", "profile": "strict", "secret_seed": 5,
                         "work_dir": str(tmp_path)}, **fields))
    return j


# Two outputs (one exact), a tensor input of each kind and a scalar: every kind of value a timing
# set's deferred read-back carries (int64 checksums, fp64 statistics, none for the exact output).
TWO_OUTPUTS = PROBLEM.replace("return torch.where(mask, x * s, -x)",
                              "return torch.where(mask, x * s, -x), mask.sum(dim=1)")
assert "mask.sum" in TWO_OUTPUTS


def module_of(source: str = PROBLEM) -> types.ModuleType:
    """`source` run as a module (the problem file a candidate's process reads)."""
    m = types.ModuleType("kllm_test_problem")
    exec(compile(source, "<problem>", "exec"), m.__dict__)
    return m
