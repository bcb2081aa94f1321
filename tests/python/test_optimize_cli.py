"""`kernelllm optimize` end to end on CPU with the tiny random model (it writes nonsense, so every
candidate must fail with a reason and the exit code must say "nothing correct"), the report JSON,
the work directory, and bad inputs (missing file, module without Model, missing model, k < 1).
Uses $KERNELLLM_CLI when set (a build tree's binary), else the installed console script."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from cli_path import find_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "cases" / "problems" / "add.py"
EXIT_NOTHING_CORRECT = 3


def optimize(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([find_cli(), "optimize", *args], capture_output=True, text=True, timeout=900, cwd=cwd)


@pytest.fixture(scope="module")
def nonsense_run(tiny_model, tmp_path_factory):
    d = tmp_path_factory.mktemp("optimize")
    module = d / "add.py"
    shutil.copyfile(PROBLEM, module)
    out, report, work = d / "add_triton.py", d / "report.json", d / "work"
    r = optimize(str(module), "--model", str(tiny_model), "-k", "2", "--max-new-tokens", "24", "--seed", "5",
                 "--threads", "2", "--no-cache", "--work-dir", str(work), "--out", str(out), "--json", str(report),
                 cwd=d)
    return r, (json.loads(report.read_text()) if report.is_file() else None), d


def test_nonsense_candidates_all_fail_with_reasons(nonsense_run):
    r, report, d = nonsense_run
    assert r.returncode == EXIT_NOTHING_CORRECT, r.stderr[-3000:]
    assert report is not None, r.stderr[-3000:]
    assert len(report["candidates"]) == 2
    for c in report["candidates"]:
        assert c["verdict"] != "correct"
        assert c["verdict"] == c["result"]["verdict"]
        assert c["result"]["message"] or c["result"]["rule"], c
        assert Path(c["file"]).is_file() and Path(c["completion_file"]).is_file()
        assert c["extraction"] in ("whole text",) or c["extraction"].startswith("fenced block ")
    assert len(report["failure_reasons"]) == 2
    assert report["failure_reasons"][0].startswith("sample 0: " + report["candidates"][0]["verdict"])
    assert report["best"] is None and report["out"] is None
    assert report["exit_code"] == EXIT_NOTHING_CORRECT
    assert not (d / "add_triton.py").exists(), "--out must not be written when nothing is correct"
    assert "no correct candidate" in r.stdout and "sample 1: " in r.stdout


def test_report_has_phases_options_and_the_run_environment(nonsense_run):
    r, report, d = nonsense_run
    assert report["tokens"] > 0 and report["tokens_per_s"] > 0
    assert report["generate_ms"] > 0 and report["verify_ms"] > 0
    assert report["generation"]["prompt_tokens"] > 100  # the full Triton prompt
    assert report["rounds_run"] == 1
    assert report["source"].startswith("cpu:")
    assert report["sandbox"]
    assert report["environment"]["torch"]
    assert report["run"]["argv"][1] == "optimize" and report["run"]["date_utc"].endswith("Z")
    assert report["run"]["torch"] == report["environment"]["torch"]
    opts = report["options"]
    assert (opts["k"], opts["seed"], opts["max_new_tokens"], opts["rounds"]) == (2, 5, 24, 1)
    assert opts["verify_devices"] == ["cpu"]
    # Each sample handed to the verifier as soon as the engine stops it (here both at the last step).
    assert opts["verify_while_generating"] is True
    assert report["verify_while_generating_ms"] >= 0
    work = d / "work"
    assert Path(report["problem_file"]) == work.resolve() / "problem.py"
    assert (work / "problem.py").read_text() == PROBLEM.read_text()
    assert "def get_init_inputs" in (work / "prompt.txt").read_text()


def test_progress_goes_to_stderr_and_the_table_to_stdout(nonsense_run):
    r, _, _ = nonsense_run
    assert "generated " in r.stderr and "tok/s" in r.stderr
    assert "verified 1/2" in r.stderr and "verified 2/2" in r.stderr
    assert "verdict" in r.stdout and "speedup" in r.stdout
    assert "verified" not in r.stdout


def test_help_documents_exit_codes_and_defaults(tmp_path):
    r = optimize("--help", cwd=tmp_path)
    assert r.returncode == 0
    assert "3 the run finished but no candidate was correct" in " ".join(r.stdout.split())
    assert "_triton.py" in r.stdout and "--rounds" in r.stdout


def test_missing_module_file_is_a_clear_failure(tiny_model, tmp_path):
    r = optimize(str(tmp_path / "nope.py"), "--model", str(tiny_model), cwd=tmp_path)
    assert r.returncode == 1
    assert "nope.py" in r.stderr and "expected a readable file" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_module_without_model_or_inputs_is_rejected_before_loading(tiny_model, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\ndef forward(x):\n    return x\n")
    r = optimize(str(bad), "--model", str(tiny_model), cwd=tmp_path)
    assert r.returncode == 1
    assert "class Model" in r.stderr
    assert not (tmp_path / "bad_optimize").exists()

    no_inputs = tmp_path / "no_inputs.py"
    no_inputs.write_text("import torch.nn as nn\n\nclass Model(nn.Module):\n    pass\n")
    r = optimize(str(no_inputs), "--model", str(tiny_model), cwd=tmp_path)
    assert r.returncode == 1
    assert "get_inputs" in r.stderr


def test_missing_model_is_a_clear_failure(tmp_path):
    r = optimize(str(PROBLEM), "--model", str(tmp_path / "no-model"), cwd=tmp_path)
    assert r.returncode == 1
    assert "no-model" in r.stderr
    assert not (tmp_path / "add_optimize").exists()


def test_k_below_one_is_a_usage_error(tiny_model, tmp_path):
    r = optimize(str(PROBLEM), "--model", str(tiny_model), "-k", "0", cwd=tmp_path)
    assert r.returncode == 2
    assert "-k" in r.stderr or "samples" in r.stderr
