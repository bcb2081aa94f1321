"""bench/throughput_breakdown.py on a made-up record: the lock's split, the holds and judge ops by
purpose, and each problem's timeline from its set-up."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "throughput_breakdown.py"


def test_a_runs_time_is_taken_apart(tmp_path):
    record = {"commit": "abc1234", "eval": {
        "candidates": 3, "problems": 2, "total_wall_s": 20.0, "candidates_per_min": 9.0,
        "gpu_lock": {"gpu-0": {"span_ms": 18000, "exclusive_ms": 6000, "draining_ms": 5000, "drains": 7,
                               "shared_ms": 6500, "free_ms": 500}},
        "gpu_use_summed": {"run": {"n": 9, "hold_ms": 4000, "wait_ms": 3000, "timer_waited_ms": 1500},
                           "timing": {"n": 2, "hold_ms": 800, "wait_ms": 0}},
        "judge_ms_summed": {"time_prepare": {"n": 4, "ms": 3000}, "time_prepare.make": {"n": 4, "ms": 2500},
                            "ping": {"n": 9, "ms": 1}}}}
    (tmp_path / "rec.json").write_text(json.dumps(record))
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "verify-calls.jsonl").write_text("\n".join(json.dumps(c) for c in [
        {"problem": "level1/19_ReLU.py", "samples": 2, "timeline_ms": {
            "setup": 1000, "reference_prepare_started": 1000, "reference_prepared": 9000, "variants_started": 4000,
            "reference_batch_started": 9500, "total": 14000}},
        {"problem": "level1/1_Square.py", "samples": 1, "timeline_ms": {"setup": 500, "total": 3000}}]) + "\n")
    (reports / "eval-candidates.jsonl").write_text("\n".join(json.dumps(c) for c in [
        {"problem": "level1/19_ReLU.py", "sample": 0, "phases": {"multishape_ms": 2000},
         "trip_steps_ms": {"call": 1500, "flush": 500, "check.sync": 200}},
        {"problem": "level1/19_ReLU.py", "sample": 1, "phases": {"multishape_ms": 3000},
         "trip_steps_ms": {"call": 1000, "stop": 3000}, "check_excess_share": 0.93,
         "profiled_steps_ms": {"run": 250, "check": 120, "run.forward": 40, "check.reference": 90},
         "load_steps_ms": {"audit": 30, "hold_wait": 700, "request": 1200, "worker.cuda": 900}},
        {"problem": "level1/1_Square.py", "sample": 0, "phases": {}}]) + "\n")
    r = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "rec.json")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("abc1234: 3 candidates over 2 problems in 20.0 s")
    assert "exclusive    6.0 + draining    5.0 (7 drains) + shared    6.5 + free    0.5" in lines[1], lines[1]
    run = next(x for x in lines if x.strip().startswith("run "))
    assert run.split()[1:] == ["9", "4.0", "3.0", "1.5"], run
    assert any(x.split()[:2] == ["time_prepare.make", "4"] for x in lines) and not any("ping" in x for x in lines)
    relu = next(x for x in lines if x.strip().startswith("19_ReLU"))
    # set-up at 1.0 s; prep 8.0 s; matched, batch and end from the set-up; the longer multi-shape check
    assert relu.split()[1:] == ["2", "1.0", "8.0", "3.0", "8.5", "13.0", "3.0"], relu
    # The paired batches' round trips by step, summed over candidates, the longest first (an old
    # record's reports have none: no line).
    steps = next(x for x in lines if x.startswith("round trips of candidates' paired batches (2)"))
    assert steps.endswith("by step (summed s): stop 3.0, call 2.5, flush 0.5, check.sync 0.2; total 6.0"), steps
    # The profiled runs and their checks by step, summed, the longest first.
    prof = next(x for x in lines if x.startswith("profiled runs and their checks (1)"))
    assert prof.endswith("by step (summed s): run 0.2, check 0.1, check.reference 0.1, run.forward 0.0"), prof
    # The candidates' loads by step, summed, the longest first.
    loads = next(x for x in lines if x.startswith("candidates' loads (1)"))
    assert loads.endswith("by step (summed s): request 1.2, worker.cuda 0.9, hold_wait 0.7, audit 0.0"), loads
    # A candidate whose published time is mostly its clocked check beyond the reference's is named.
    heavy = next(x for x in lines if x.startswith("published times over a quarter check"))
    assert heavy.endswith("(1): 19_ReLU #1 0.93"), heavy
    assert lines[-1] == "summed problem walls   17.0 s; their longest multi-shape checks    3.0 s", lines[-1]
