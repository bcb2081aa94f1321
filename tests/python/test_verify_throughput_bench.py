"""bench/verify_throughput.py with --kernelbench: the same candidates through our verifier and
through KernelBench's eval (here a stand-in checkout with its eval's signature: the real one needs
a GPU), both rates and their ratio in one record (issue #43); with --driver both, ours also through one
`kernelllm eval` run (strict, --multishape), recorded beside the verify calls."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STAND_IN_EVAL = '''
import types


def eval_kernel_against_ref(original_model_src, custom_model_src, seed_num=42, num_correct_trials=1,
                            num_perf_trials=10, measure_performance=False, verbose=False, device=None,
                            build_dir=None):
    assert "class Model" in original_model_src and num_correct_trials == 5
    correct = "(a, a, out" not in custom_model_src  # the stand-in judges by the source
    return types.SimpleNamespace(compiled=True, correctness=correct, metadata={},
                                 runtime=0.25 if measure_performance and num_perf_trials == 7 else -1.0)
'''


def test_the_same_candidates_go_through_kernelbenchs_eval_and_both_rates_are_recorded(kernelllm_script, tmp_path):
    kb = tmp_path / "kb"
    (kb / "src").mkdir(parents=True)
    (kb / "src" / "eval.py").write_text(STAND_IN_EVAL)
    cands = tmp_path / "candidates" / "add"
    cands.mkdir(parents=True)
    for name in ("correct_basic.py", "wrong_first_input_twice.py"):
        shutil.copy(ROOT / "tests" / "cases" / "add" / name, cands / name)
    out = tmp_path / "throughput.json"
    env = dict(os.environ, KERNELLLM_CLI=kernelllm_script)
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "verify_throughput.py"), "--cli", kernelllm_script,
                        "--device", "cpu", "--out", str(out), "--problems-dir", str(ROOT / "tests" / "cases" / "problems"),
                        "--candidates-dir", str(tmp_path / "candidates"), "--kernelbench", str(kb),
                        "--kb-perf-trials", "7", "--driver", "both"], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert rec["complete"] and rec["candidates"] == 2 and rec["verdicts"] == {"correct": 1, "wrong_output": 1}, rec
    assert rec["warmup_s"] > 0  # the interpreter warmed before ours, as it is for KernelBench's after it
    theirs = rec["kernelbench"]
    assert theirs["candidates"] == 2 and theirs["verdicts"] == {"correct": 1, "wrong_output": 1}, theirs
    assert {row["runtime_ms"] for row in theirs["rows"] if row["verdict"] == "correct"} == {0.25}
    assert rec["kernelbench_candidates_per_min"] == theirs["candidates_per_min"] > 0
    assert rec["ratio_to_kernelbench"] == round(rec["candidates_per_min"] / theirs["candidates_per_min"], 2)
    # Where each call's wall time went, and the correct candidate's check on other sizes.
    (call,) = rec["calls"]
    assert set(call["timeline_ms"]) >= {"setup", "candidates", "total"}, call
    assert call["timeline_ms"]["setup"] <= call["timeline_ms"]["candidates"] <= call["timeline_ms"]["total"], call
    assert call["phases_ms"]["multishape_ms"] > 0, call
    # Its use of the device's lock: on the CPU only timing takes it (exclusive).
    assert call["gpu_use"]["timing"]["mode"] == "exclusive" and call["gpu_use"]["timing"]["n"] == 1, call
    assert rec["gpu_use_summed"]["timing"]["n"] == 1, rec["gpu_use_summed"]
    # The same candidates through one eval run: the same verdicts, the correct one's multi-shape
    # check passed, its phases from the run store, its own ratio to KernelBench's rate.
    ev = rec["eval"]
    assert ev["candidates"] == 2 and ev["verdicts"] == rec["verdicts"] and ev["multishape"] == {"pass": 1}, ev
    assert "--multishape" in ev["command"] and ev["phases_ms_summed"]["multishape_ms"] > 0, ev
    assert ev["ratio_to_kernelbench"] == round(ev["candidates_per_min"] / theirs["candidates_per_min"], 2)
    # Its verify call's use of the lock and its judge's requests, from the run's verify-calls.jsonl.
    assert ev["gpu_use_summed"]["timing"]["n"] == 1 and ev["judge_ms_summed"]["compare"]["n"] >= 5, ev
