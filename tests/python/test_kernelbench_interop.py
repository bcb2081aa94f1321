"""KernelBench interop of `kernelllm eval` on CPU: a fake KernelBench tree (level1/1_ReLU.py,
level1/2_Add.py) scored from a KernelBench run directory (level_1_problem_M_sample_K_kernel.py),
then `eval export-kernelbench` checked against the eval_results.json layout that KernelBench's
scripts/benchmark_eval_analysis.py reads; plus the run facts each invocation records.
Uses $KERNELLLM_CLI when set (a build tree's binary), else the installed console script."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cli_path import find_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases"

# (problem file in the fake KernelBench tree, source problem, {sample number: candidate case})
PROBLEMS = [
    ("1_ReLU.py", "relu", {0: "correct_basic", 1: "compile_syntax_error"}),
    ("2_Add.py", "add", {0: "correct_basic"}),
]


@pytest.fixture(scope="module")
def cli() -> str:
    return find_cli()


def run(args: list, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TRITON_INTERPRET": "1"})


@pytest.fixture(scope="module")
def kb(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("kb")
    level1, samples = d / "KernelBench" / "level1", d / "runs" / "my_run"
    level1.mkdir(parents=True)
    samples.mkdir(parents=True)
    for file, source, cands in PROBLEMS:
        shutil.copyfile(CASES / "problems" / f"{source}.py", level1 / file)
        number = file.split("_")[0]
        for k, case in cands.items():
            shutil.copyfile(CASES / source / f"{case}.py", samples / f"level_1_problem_{number}_sample_{k}_kernel.py")
            # KernelBench's generator keeps the prompt beside each kernel: not a candidate.
            (samples / f"level_1_problem_{number}_sample_{k}_prompt.txt").write_text("prompt\n")
    return {"dir": d, "root": d / "KernelBench", "samples": samples}


@pytest.fixture(scope="module")
def scored(cli, kb) -> Path:
    out = kb["dir"] / "run"
    r = run([cli, "eval", "--problems", kb["root"], "--levels", "1", "--candidates", kb["samples"], "--out", out,
             "--verify-device", "cpu", "--profiles", "kernelbench", "--jobs", "2", "--pass-at", "1", "--quiet"])
    assert r.returncode == 0, r.stderr
    return out


def test_kernelbench_run_dir_is_read_as_candidates(scored):
    report = json.loads((scored / "report.json").read_text())
    verdicts = {p["id"]: [s["verdict"] for s in p["samples"]["kernelbench"]] for p in report["problems"]}
    assert verdicts == {"level1/1_ReLU": ["correct", "compile_error"], "level1/2_Add": ["correct"]}
    for p in report["problems"]:
        for s in p["samples"]["kernelbench"]:
            # CPU: no meaningful timing, so no absolute times either.
            assert s["candidate_ms"] is None and s["reference_ms"] is None


def test_export_writes_kernelbench_eval_results(cli, scored, tmp_path):
    path = tmp_path / "eval_results.json"
    r = run([cli, "eval", "export-kernelbench", scored, "--out", path])
    assert r.returncode == 0, r.stderr
    results = json.loads(path.read_text())
    # What benchmark_eval_analysis.py relies on: keys are str(problem id) in numeric order, each a
    # list of sample entries; exactly one entry with sample_id 0; compiled/correctness booleans,
    # runtime a number (-1.0 when not timed), runtime_stats and metadata objects.
    assert list(results) == ["1", "2"]
    for key, entries in results.items():
        assert isinstance(entries, list)
        assert len([e for e in entries if e["sample_id"] == 0]) == 1
        for e in entries:
            assert set(e) >= {"sample_id", "compiled", "correctness", "metadata", "runtime", "runtime_stats"}
            assert isinstance(e["compiled"], bool) and isinstance(e["correctness"], bool)
            assert isinstance(e["runtime"], float) and e["runtime"] == -1.0
            assert e["runtime_stats"] == {} and isinstance(e["metadata"], dict)
    relu = {e["sample_id"]: e for e in results["1"]}
    assert relu[0]["compiled"] and relu[0]["correctness"]
    assert not relu[1]["compiled"] and not relu[1]["correctness"]
    assert relu[1]["metadata"]["kernelllm_verdict"] == "compile_error"
    assert relu[1]["metadata"]["compilation_error"]
    assert results["2"][0]["correctness"] is True


def test_export_rejects_a_profile_the_run_lacks(cli, scored, tmp_path):
    r = run([cli, "eval", "export-kernelbench", scored, "--out", tmp_path / "x.json", "--profile", "strict"])
    assert r.returncode == 1
    assert "--profile strict" in r.stderr and "kernelbench" in r.stderr


def test_each_invocation_records_its_run_facts(scored):
    lines = (scored / "invocations.jsonl").read_text().splitlines()
    assert len(lines) == 1
    facts = json.loads(lines[0])["run"]
    assert facts["argv"][1:3] == ["eval", "--problems"]
    assert facts["date_utc"].endswith("Z") and facts["host"]
    assert facts["torch"] and facts["triton"] and facts["python_version"]
    assert facts["devices"] == [{"name": "cpu", "hardware": "cpu"}]
    assert json.loads(lines[0])["gpu_lock"] == {}  # verified on the CPU: no GPU lock taken


def test_each_verify_call_records_where_its_time_went(scored):
    calls = [json.loads(line) for line in (scored / "verify-calls.jsonl").read_text().splitlines()]
    assert sorted((c["problem"], c["profile"], c["samples"]) for c in calls) == \
        [("level1/1_ReLU", "kernelbench", 2), ("level1/2_Add", "kernelbench", 1)]
    for c in calls:
        assert c["at"].endswith("Z") and c["timing_shared"] is False and c["worker_start"]
        assert 0 < c["timeline_ms"]["setup"] <= c["timeline_ms"]["total"]
        assert c["judge_ms"]["load_problem"]["n"] == 1 and isinstance(c["gpu_use"], dict)
    relu = next(c for c in calls if c["problem"] == "level1/1_ReLU")
    assert relu["judge_ms"]["compare"]["n"] >= 5  # the correct sample's trials; the other does not compile


def test_missing_kernelbench_sample_is_named_before_anything_runs(cli, kb, tmp_path):
    samples = tmp_path / "partial"
    samples.mkdir()
    shutil.copyfile(kb["samples"] / "level_1_problem_1_sample_0_kernel.py",
                    samples / "level_1_problem_1_sample_0_kernel.py")
    r = run([cli, "eval", "--problems", kb["root"], "--candidates", samples, "--out", tmp_path / "run",
             "--verify-device", "cpu"])
    assert r.returncode == 1
    assert "level_1_problem_2_sample_<K>_kernel.py" in r.stderr and "level1/2_Add" in r.stderr
    assert not (tmp_path / "run" / "run.sqlite").exists()
