"""bench/eval_scaling.py: the same eval over pre-generated candidates on two device sets, one
fresh run each, verdicts compared and rates recorded (issue #43's eval-scaling record). On this
machine the sets are the CPU once and twice (two judges); on a GPU host, cuda:0 then cuda:0,cuda:1."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def add_problem(tmp_path: Path, *cases: str) -> tuple[Path, Path]:
    """tmp_path/problems with add.py and tmp_path/candidates/add/<i>.py (eval's sample files) from `cases`."""
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copy(ROOT / "tests" / "cases" / "problems" / "add.py", problems / "add.py")
    cands = tmp_path / "candidates" / "add"
    cands.mkdir(parents=True)
    for i, name in enumerate(cases):
        shutil.copy(ROOT / "tests" / "cases" / "add" / name, cands / f"{i}.py")
    return problems, cands


def test_two_device_sets_give_the_same_verdicts_and_both_rates(kernelllm_script, tmp_path):
    problems, _ = add_problem(tmp_path, "correct_basic.py", "wrong_first_input_twice.py")
    out = tmp_path / "scaling.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "eval_scaling.py"), "--cli", kernelllm_script,
                        "--problems", str(problems), "--candidates", str(tmp_path / "candidates"), "--sets", "cpu", "cpu,cpu",
                        "--problem-jobs-per-device", "1", "--work", str(tmp_path / "runs"), "--out", str(out),
                        "--eval-args", "--no-timing"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert rec["complete"] and rec["verdicts_identical"], rec
    one, two = rec["sets"]
    assert (one["devices"], two["devices"]) == ("cpu", "cpu,cpu")
    assert (one["problem_jobs"], two["problem_jobs"]) == (1, 2)
    assert one["verifications"] == two["verifications"] == 2, rec
    assert one["speedup"] == 1.0 and two["speedup"] > 0 and two["differing"] == []
    assert one["per_min"] > 0 and one["projected_level1_k20_hours"] > 0
    # Each run is kept with its report: the verdicts the record compared.
    report = json.loads((tmp_path / "runs" / "run-1" / "report.json").read_text())
    verdicts = sorted(s["verdict"] for p in report["problems"] for s in p["samples"]["strict"])
    assert verdicts == ["correct", "wrong_output"]


def test_a_set_whose_eval_fails_is_recorded_and_the_run_says_so(kernelllm_script, tmp_path):
    # No candidates for the problem: eval refuses before anything runs.
    problems, cands = add_problem(tmp_path)
    cands.rmdir()
    out = tmp_path / "scaling.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "eval_scaling.py"), "--cli", kernelllm_script,
                        "--problems", str(problems), "--candidates", str(tmp_path / "candidates"), "--sets", "cpu",
                        "--work", str(tmp_path / "runs"), "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    rec = json.loads(out.read_text())
    (only,) = rec["sets"]
    assert only["exit"] != 0 and "add" in only["error"], only
    assert not rec["verdicts_identical"]


def test_replicas_are_each_verified_after_a_warm_up(kernelllm_script, tmp_path):
    # --replicate 3: the one candidate as samples 0-2 (a comment line apart: no cache hit), after
    # an untimed warm-up eval of the problem.
    problems, cands = add_problem(tmp_path, "correct_basic.py")
    out = tmp_path / "scaling.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "eval_scaling.py"), "--cli", kernelllm_script,
                        "--problems", str(problems), "--candidates", str(tmp_path / "candidates"), "--sets", "cpu",
                        "--replicate", "3", "--work", str(tmp_path / "runs"), "--out", str(out),
                        "--eval-args", "--no-timing"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert rec["replicate"] == 3 and rec["warmup_s"] > 0, rec
    (only,) = rec["sets"]
    assert only["verifications"] == 3, only
    assert (tmp_path / "runs" / "warmup-run" / "report.json").is_file()
    replicas = sorted((tmp_path / "runs" / "candidates-x3" / "add").glob("*.py"))
    assert [f.name for f in replicas] == ["0.py", "1.py", "2.py"]
    texts = [f.read_text() for f in replicas]
    assert len(set(texts)) == 3 and all(t.endswith((cands / "0.py").read_text()) for t in texts)
    report = json.loads((tmp_path / "runs" / "run-0" / "report.json").read_text())
    assert [s["verdict"] for p in report["problems"] for s in p["samples"]["strict"]] == ["correct"] * 3
