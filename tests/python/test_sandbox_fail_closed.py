"""The verifier's sandbox fails closed and runs interpreters from anywhere: a venv under /tmp
(bwrap mounts a fresh tmpfs there) still runs candidates sandboxed; a missing bubblewrap stops
`kernelllm verify` with a message that names bubblewrap and --no-sandbox and writes no verdicts;
with --no-sandbox it runs and says the sandbox is DISABLED. CPU only (Triton interpreter).
Uses $KERNELLLM_CLI when set (a build tree's binary), else the installed console script."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from test_verify_cli import find_cli

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "cases" / "problems" / "relu.py"
CANDIDATE = ROOT / "tests" / "cases" / "relu" / "correct_basic.py"


def verify(out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [find_cli(), "verify", str(PROBLEM), str(CANDIDATE), "--device", "cpu", "--no-cache", "--json", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def tmp_venv():
    """A venv under /tmp that sees torch/triton through the system site-packages."""
    d = Path(tempfile.mkdtemp(prefix="kllm-venv-", dir="/tmp"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(d / "venv")], check=True,
                       capture_output=True, timeout=300)
        yield d / "venv"
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_venv_under_tmp_runs_sandboxed(tmp_venv, tmp_path):
    out = tmp_path / "report.json"
    r = verify(out, env={"KERNELLLM_PYTHON": str(tmp_venv / "bin" / "python")})
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    assert "net=off" in report["sandbox"] and "fs=read-only" in report["sandbox"], report["sandbox"]
    assert report["environment"]["python"].startswith(str(tmp_venv)), report["environment"]
    [c] = report["candidates"]
    assert c["verdict"] == "correct", c


def test_missing_bubblewrap_fails_closed(tmp_path):
    out = tmp_path / "report.json"
    r = verify(out, env={"KERNELLLM_BWRAP": "/nonexistent/bwrap"})
    assert r.returncode != 0
    assert "bubblewrap" in r.stderr and "--no-sandbox" in r.stderr, r.stderr
    assert not out.exists(), "no verdicts without a sandbox"
    assert "correct" not in r.stdout


def test_no_sandbox_runs_and_says_disabled(tmp_path):
    out = tmp_path / "report.json"
    r = verify(out, "--no-sandbox", env={"KERNELLLM_BWRAP": "/nonexistent/bwrap"})
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    assert "DISABLED" in report["sandbox"], report["sandbox"]
    assert "DISABLED" in r.stdout
    assert any("DISABLED" in w for w in report.get("warnings", [])), report.get("warnings")
    [c] = report["candidates"]
    assert c["verdict"] == "correct", c
