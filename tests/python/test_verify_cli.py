"""`kernelllm verify` end to end on CPU (Triton interpreter): a tiny problem with a correct,
a wrong, a broken, a torch-only and a hanging candidate; the JSON report, the sandbox line,
exit codes, the result cache, and the same through `kernelllm.verify()`.
Uses $KERNELLLM_CLI when set (a build tree's binary), else the installed console script."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROBLEM = """
import torch
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

GOOD = """
import torch
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
# Off by a relative 1e-3: within KernelBench v0's atol = rtol = 1e-2, outside its current 1e-4.
NEAR = GOOD.replace("tl.maximum(x, 0.0) * scale", "tl.maximum(x, 0.0) * scale * 1.001")
SYNTAX = "class ModelNew(:\n"
TORCH_ONLY = """
import torch, torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
    def forward(self, x):
        return torch.relu(x) * self.scale
"""
# Leaves a setsid grandchild behind and hangs: the tree must be killed and the verdict a timeout.
HANG = """
import subprocess, time, torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
    def forward(self, x):
        subprocess.Popen(["sh", "-c", "setsid sleep 4242 & sleep 4242"])
        time.sleep(4242)
"""


def find_cli() -> str:
    if os.environ.get("KERNELLLM_CLI"):
        return os.environ["KERNELLLM_CLI"]
    here = Path(sys.executable).parent / "kernelllm"
    found = str(here) if here.is_file() else shutil.which("kernelllm")
    assert found, "the kernelllm console script is not installed and $KERNELLLM_CLI is unset"
    return found


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("verify")
    out = {}
    for name, text in [("problem", PROBLEM), ("good", GOOD), ("wrong", WRONG), ("near", NEAR), ("syntax", SYNTAX),
                       ("torch_only", TORCH_ONLY), ("hang", HANG)]:
        p = d / f"{name}.py"
        p.write_text(text)
        out[name] = p
    out["dir"] = d
    return out


def run_verify(files, names, *extra, cache: Path | None = None):
    report = files["dir"] / f"report-{'-'.join(names)}-{len(extra)}-{time.monotonic_ns()}.json"
    cmd = [find_cli(), "verify", str(files["problem"]), *[str(files[n]) for n in names], "--device", "cpu",
           "--json", str(report), "--run-timeout", "8", "--load-timeout", "60", *extra]
    cmd += ["--cache", str(cache)] if cache else ["--no-cache"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return r, (json.loads(report.read_text()) if report.is_file() else None)


def sleeper_pids() -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if b"4242" in (p / "cmdline").read_bytes():
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


@pytest.fixture(scope="module")
def full_run(files):
    return run_verify(files, ["good", "wrong", "syntax", "torch_only", "hang"])


def test_every_candidate_gets_its_verdict(full_run):
    r, report = full_run
    assert r.returncode == 0, r.stderr[-3000:]
    got = {Path(c["path"]).stem: (c["verdict"], c["rule"]) for c in report["candidates"]}
    assert got["good"] == ("correct", "")
    assert got["wrong"][0] == "wrong_output"
    assert got["syntax"][0] == "compile_error"
    assert got["torch_only"] == ("cheat", "no_triton_kernel")
    assert got["hang"][0] == "timeout"


def test_hanging_candidate_tree_is_killed(full_run):
    assert sleeper_pids() == []


def test_report_carries_evidence_and_the_sandbox_line(full_run):
    r, report = full_run
    by = {Path(c["path"]).stem: c for c in report["candidates"]}
    assert by["wrong"]["stats"], "wrong_output needs error statistics"
    assert "SyntaxError" in by["syntax"]["message"]
    assert by["good"]["timing"]["meaningful"] is False  # CPU: interpreter timings mean nothing
    assert by["good"]["speedup"] is None
    assert report["selected_path"] == str(by["good"]["path"])
    assert report["sandbox"].startswith("sandbox: ")
    assert report["sandbox"] in r.stdout
    # What a benchmark needs to be repeated: versions, the command, when and where.
    run = report["run"]
    assert run["argv"][1] == "verify" and run["kernelllm_version"] and run["host"]
    assert run["date_utc"].endswith("Z") and run["torch"] and run["triton"]
    assert run["devices"] == [{"name": "cpu", "hardware": "cpu"}]
    if shutil.which("bwrap"):
        assert "net=off" in report["sandbox"] and "fs=read-only" in report["sandbox"], report["sandbox"]
    # The table lists every candidate with its verdict.
    for stem, verdict in [("good", "correct"), ("wrong", "wrong_output"), ("hang", "timeout")]:
        assert any(stem in line and verdict in line for line in r.stdout.splitlines()), r.stdout


def test_second_run_is_served_from_the_cache(files, tmp_path):
    cache = tmp_path / "verify.sqlite"
    r1, rep1 = run_verify(files, ["good", "syntax"], cache=cache)
    assert r1.returncode == 0, r1.stderr[-2000:]
    assert [c["cached"] for c in rep1["candidates"]] == [False, False]
    r2, rep2 = run_verify(files, ["good", "syntax"], cache=cache)
    assert [c["cached"] for c in rep2["candidates"]] == [True, True]
    assert [c["verdict"] for c in rep2["candidates"]] == ["correct", "compile_error"]
    assert "(cached)" in r2.stdout
    # A different profile is a different key.
    r3, rep3 = run_verify(files, ["syntax"], "--profile", "kernelbench", cache=cache)
    assert rep3["candidates"][0]["cached"] is False


def test_kernelbench_tolerance_versions(files, tmp_path):
    cache = tmp_path / "verify.sqlite"
    r, rep = run_verify(files, ["near"], "--profile", "kernelbench", cache=cache)
    assert r.returncode == 0, r.stderr[-2000:]
    assert rep["candidates"][0]["verdict"] == "correct"
    r, rep = run_verify(files, ["near"], "--profile", "kernelbench", "--kernelbench-tolerance", "current", cache=cache)
    # Not answered from the cache entry of the v0 run: the tolerance version is part of the key.
    assert rep["candidates"][0]["cached"] is False
    assert rep["candidates"][0]["verdict"] == "wrong_output", rep["candidates"][0].get("message")
    assert "atol=0.0001" in rep["candidates"][0]["message"], rep["candidates"][0]["message"]
    r, rep = run_verify(files, ["near"], "--profile", "kernelbench", "--kernelbench-tolerance", "v1")
    assert r.returncode == 2


def test_usage_errors_exit_2(files):
    r = subprocess.run([find_cli(), "verify", str(files["problem"])], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    r = subprocess.run([find_cli(), "verify", str(files["problem"]), str(files["good"]), "--device", "tpu"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "expected cpu, cuda or cuda:N" in r.stderr


def test_broken_problem_is_an_infrastructure_failure(files):
    bad = files["dir"] / "bad_problem.py"
    bad.write_text("raise RuntimeError('no problem here')\n")
    r = subprocess.run([find_cli(), "verify", str(bad), str(files["good"]), "--device", "cpu", "--no-cache"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    assert "no problem here" in r.stderr


def test_python_api_returns_the_same_verdicts(files):
    kernelllm = pytest.importorskip("kernelllm")
    if not hasattr(kernelllm, "verify"):
        pytest.fail("kernelllm.verify is missing from the installed package")
    report = kernelllm.verify(files["problem"], [files["good"], files["wrong"]], device="cpu", cache=False)
    assert [c["verdict"] for c in report["candidates"]] == ["correct", "wrong_output"]
    assert report["selected"] == 0
