"""`kernelllm verify` end to end on CPU (Triton interpreter): a tiny problem with a correct,
a wrong, a broken, a torch-only and a hanging candidate; the JSON report, the sandbox line,
exit codes, the result cache, and the same through `kernelllm.verify()`.
Uses $KERNELLLM_CLI when set (a build tree's binary), else the installed console script."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_path import find_cli

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
    # At least 0.25 from zero: no non-zero output lies within the tolerance of zero in every trial
    # (with plain randn one of ~1000 sometimes did, and the zeros rule then fired as designed).
    x = torch.randn(N)
    return [x + 0.25 * torch.sign(x)]

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

# GOOD whose import takes 2 s and whose second to fourth forward take a second each.
SLOW_TRIALS = GOOD.replace("    def forward(self, x):\n        y = torch.empty_like(x)",
                           "    def forward(self, x):\n        import time\n        global CALLS\n        CALLS += 1\n"
                           "        if 2 <= CALLS <= 4:\n            time.sleep(1.0)\n        y = torch.empty_like(x)"
                           ).replace("class ModelNew(", "CALLS = 0\n\nclass ModelNew("
                           ).replace("import triton\n", "import triton\nimport time\ntime.sleep(2.0)\n", 1)
assert "time.sleep(1.0)" in SLOW_TRIALS and "CALLS = 0" in SLOW_TRIALS and "time.sleep(2.0)" in SLOW_TRIALS
# GOOD on its first forward only; its later ones take a second and are off by 1.
FIRST_ONLY = GOOD.replace("    def forward(self, x):\n        y = torch.empty_like(x)",
                          "    def forward(self, x):\n        import time\n        global CALLS\n        CALLS += 1\n"
                          "        if CALLS >= 2:\n            time.sleep(1.0)\n        y = torch.empty_like(x)"
                          ).replace("        return y\n", "        return y + 1 if CALLS >= 2 else y\n"
                          ).replace("class ModelNew(", "CALLS = 0\n\nclass ModelNew(")
assert "y + 1 if" in FIRST_ONLY and "CALLS = 0" in FIRST_ONLY
# GOOD launched in blocks of 128: another correct source.
GOOD_128 = GOOD.replace("BLOCK=256", "BLOCK=128").replace("triton.cdiv(n, 256)", "triton.cdiv(n, 128)")
# GOOD whose timed calls (from worker/timing.py's CallTimer.call) leave the last element off by 1:
# off a fingerprint of its first 8 values, only the whole-output check of the batch's last round
# trip sees it; untimed it is right.
OFF_SAMPLE = GOOD.replace("        return y\n", """        import sys
        f = sys._getframe(1)
        while f is not None:
            if f.f_code.co_filename.endswith("timing.py") and f.f_code.co_name == "call":
                y[-1] += 1.0
                break
            f = f.f_back
        return y
""")
assert "BLOCK=128" in GOOD_128 and "y[-1] += 1.0" in OFF_SAMPLE
WRONG = GOOD.replace("tl.maximum(x, 0.0) * scale", "tl.maximum(x, 0.0) * scale + 0.5")
# Off by a relative 1e-3: within KernelBench v0's atol = rtol = 1e-2, outside its current 1e-4.
NEAR = GOOD.replace("tl.maximum(x, 0.0) * scale", "tl.maximum(x, 0.0) * scale * 1.001")
SYNTAX = "class ModelNew(:\n"
# Candidates' processes make their CUDA contexts with one hardware queue (verify.cpp): fails to load without it.
ONE_QUEUE = ("import os\nassert os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS') == '1', "
             "'CUDA_DEVICE_MAX_CONNECTIONS is not 1'\n" + GOOD)
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
# Its sleeps last a time of this test process's own (the tests look for them host-wide, and another
# run of these tests on the host has its own).
SLEEP_S = str(5000 + os.getpid() % 4000)
HANG = """
import subprocess, time, torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
    def forward(self, x):
        subprocess.Popen(["sh", "-c", "setsid sleep 4242 & sleep 4242"])
        time.sleep(4242)
""".replace("4242", SLEEP_S)


# PROBLEM whose get_inputs takes 0.2 s: a timing set made from its seed in a round trip shows.
SLOW_INPUTS = PROBLEM.replace("def get_inputs():\n", "def get_inputs():\n    import time\n    time.sleep(0.2)\n")
# PROBLEM whose reference raises when the judge times it (a call from its timed loop: worker/timing.py's
# Timer.call) and works everywhere else: its correctness trials and timing sets are made.
UNTIMEABLE = PROBLEM.replace("    def forward(self, x):\n", """    def forward(self, x):
        import sys
        f = sys._getframe(1)
        while f is not None:
            if f.f_code.co_filename.endswith("timing.py") and f.f_code.co_name == "call":
                raise RuntimeError("this reference refuses to be timed")
            f = f.f_back
""")
assert "refuses to be timed" in UNTIMEABLE
assert "time.sleep(0.2)" in SLOW_INPUTS


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("verify")
    out = {}
    for name, text in [("problem", PROBLEM), ("good", GOOD), ("wrong", WRONG), ("near", NEAR), ("syntax", SYNTAX),
                       ("torch_only", TORCH_ONLY), ("hang", HANG), ("one_queue", ONE_QUEUE), ("slow_trials", SLOW_TRIALS),
                       ("first_only", FIRST_ONLY), ("slow_inputs", SLOW_INPUTS), ("untimeable", UNTIMEABLE),
                       ("good_128", GOOD_128), ("off_sample", OFF_SAMPLE)]:
        p = d / f"{name}.py"
        p.write_text(text)
        out[name] = p
    out["dir"] = d
    return out


def run_verify(files, names, *extra, cache: Path | None = None, problem: str = "problem", env: dict | None = None):
    report = files["dir"] / f"report-{'-'.join(names)}-{len(extra)}-{time.monotonic_ns()}.json"
    cmd = [find_cli(), "verify", str(files[problem]), *[str(files[n]) for n in names], "--verify-device", "cpu",
           "--json", str(report), "--run-timeout", "8", "--run-timeout-factor", "2", "--load-timeout", "60",
           *extra]
    cmd += ["--cache", str(cache)] if cache else ["--no-cache"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, **(env or {})))
    return r, (json.loads(report.read_text()) if report.is_file() else None)


def sleeper_pids() -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmdline = (p / "cmdline").read_bytes()  # a sleep itself, or the shell that started them
                if f"sleep\0{SLEEP_S}\0".encode() in cmdline or f"sleep {SLEEP_S}".encode() in cmdline:
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


@pytest.fixture(scope="module")
def full_run(files):
    return run_verify(files, ["good", "wrong", "syntax", "torch_only", "hang", "one_queue"])


def test_every_candidate_gets_its_verdict(full_run):
    r, report = full_run
    assert r.returncode == 0, r.stderr[-3000:]
    got = {Path(c["path"]).stem: (c["verdict"], c["rule"]) for c in report["candidates"]}
    assert got["good"] == ("correct", "")
    assert got["wrong"][0] == "wrong_output"
    assert got["syntax"][0] == "compile_error"
    assert got["torch_only"] == ("cheat", "no_triton_kernel")
    assert got["hang"][0] == "timeout"
    assert got["one_queue"] == ("correct", "")


def test_hanging_candidate_tree_is_killed(full_run):
    assert sleeper_pids() == []


def test_report_carries_evidence_and_the_sandbox_line(full_run):
    r, report = full_run
    by = {Path(c["path"]).stem: c for c in report["candidates"]}
    assert by["wrong"]["stats"], "wrong_output needs error statistics"
    assert "SyntaxError" in by["syntax"]["message"]
    assert by["good"]["timing"]["meaningful"] is False  # CPU: interpreter timings mean nothing
    assert by["good"]["speedup"] is None
    # Where its load went: the judge's audit, the hold's wait, the request, the worker's own steps
    # (no CUDA on the CPU).
    steps = by["good"]["evidence"]["load_steps_ms"]
    assert {"audit", "audit.judge", "hold_wait", "request", "worker.problem", "worker.import", "worker.construct"} <= set(steps)
    assert "worker.cuda" not in steps, steps
    assert report["selected_path"] == str(by["good"]["path"])
    assert report["sandbox"].startswith("sandbox: ")
    assert report["sandbox"] in r.stdout
    # The size variants' judge (one process for both) started once a candidate (good) matched its
    # first trial.
    assert report["timeline_ms"]["setup"] < report["timeline_ms"]["variants_started"], report["timeline_ms"]
    assert report["judges_started"] == 2
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


def test_the_references_timing_is_prepared_from_the_first_candidate_on_beside_its_load_and_trials(files):
    # Once a candidate is taken (not answered from the cache), the reference's probe and timing
    # sets are made on a thread of their own beside its load (an import of 2 s here) and trials
    # (three of a second each), instead of after its first or last trial: the preparation begins
    # right after set-up, and the first timed batch (the candidate's, paired with the reference's
    # round trips) begins at least 5 s later and finds it done.
    r, rep = run_verify(files, ["slow_trials"], "--no-multishape")
    assert r.returncode == 0, r.stderr[-3000:]
    assert rep["candidates"][0]["verdict"] == "correct", rep["candidates"][0]
    tl = rep["timeline_ms"]
    assert tl["setup"] <= tl["reference_prepare_started"] <= tl["reference_prepared"] <= tl["first_timed_batch"], tl
    assert tl["reference_prepare_started"] - tl["setup"] < 1000, tl
    assert tl["first_timed_batch"] - tl["reference_prepare_started"] >= 5000, tl
    # On a CPU the calls per round trip do not depend on the reference's time: no probe. The
    # reference has no batch of its own (no taking of the lock for it): it was timed in the
    # candidate's paired batch, the call's one exclusive taking, and its published timing is that
    # batch's reference side.
    assert "reference_probe_skipped" in tl, tl
    assert "reference timing" not in rep["gpu_use"] and rep["gpu_use"]["timing"]["n"] == 1, rep["gpu_use"]
    ref, cand = rep["reference_timing"], rep["candidates"][0]["timing"]
    assert ref["paired_with"] == rep["candidates"][0]["path"], ref
    assert ref["times_ms"] == cand["paired_reference_ms"] and ref["calls_per_trip"] == cand["calls_per_trip"], (ref, cand)
    # Where the batch's round trips went, step by step; a check's own time in the judge is part of it.
    steps = cand["trip_steps_ms"]
    assert {"call", "check", "reference_call", "reference_check", "check.judge", "check.sync"} <= set(steps), steps
    assert 0 < steps["check.judge"] <= steps["check"] and steps["check.sync"] == 0, steps  # (no device to wait for)


def test_a_probe_made_for_a_candidate_that_then_fails_is_not_the_references_timing(files):
    # The reference's probe was made in the background from set-up on; no candidate got to be
    # timed, so the report has no reference timing (the probe's few single-call round trips are
    # not one).
    r, rep = run_verify(files, ["first_only"], "--no-multishape")
    assert r.returncode == 3, r.stderr[-3000:]
    assert rep["candidates"][0]["verdict"] == "wrong_output", rep["candidates"][0]
    assert "reference_prepared" in rep["timeline_ms"] and "first_timed_batch" not in rep["timeline_ms"], rep["timeline_ms"]
    assert rep["reference_timing"] is None, rep["reference_timing"]


def test_the_paired_batch_copies_the_timing_sets_made_beforehand(files):
    # The judge made and kept every timing set while the reference's timing was prepared (shared
    # holds of the GPU); the candidate's paired batch copies them inside the exclusive hold, for the
    # reference's round trips and the candidate's inputs, instead of making them again from their
    # seeds (a get_inputs of 0.2 s here: each round trip's two sets made anew would take 0.4 s).
    r, rep = run_verify(files, ["good"], "--no-multishape", problem="slow_inputs")
    assert r.returncode == 0, r.stderr[-3000:]
    ref, cand = rep["reference_timing"], rep["candidates"][0]["timing"]
    assert ref["calls_per_trip"] == 2 and len(ref["load_ms"]) == 3, ref
    assert max(ref["load_ms"]) < 200, ref["load_ms"]
    assert cand["inputs"] == "given" and max(cand["paired_load_ms"]) < 200, cand
    # The judge's time_prepare says where its time went: here the inputs' making (0.2 s a set).
    ops = rep["judge_ms"]
    steps = {k.split(".", 1)[1]: v["ms"] for k, v in ops.items() if k.startswith("time_prepare.")}
    assert set(steps) == {"make", "references", "read_back", "limits", "other"}, ops
    assert steps["make"] > 0.5 * ops["time_prepare"]["ms"] and sum(steps.values()) <= ops["time_prepare"]["ms"], ops
    # And its load_problem (under a shared hold that timers wait out): here its inputs, made twice
    # to see that they repeat under a seed (0.2 s each).
    load = {k.split(".", 1)[1]: v["ms"] for k, v in ops.items() if k.startswith("load_problem.")}
    assert set(load) == {"module", "to_device", "fp64", "inputs", "degenerate", "other"}, ops
    assert load["inputs"] > 0.5 * ops["load_problem"]["ms"] and sum(load.values()) <= ops["load_problem"]["ms"], ops
    # And its comparisons: a trial's references are made when first compared (slow_inputs: 0.2 s a
    # set, made again for each of the 5 trials).
    cmp = {k.split(".", 1)[1]: v["ms"] for k, v in ops.items() if k.startswith("compare.")}
    assert {"rules", "reference", "load", "to_device", "keep", "stats", "passes", "fallback", "release", "other"} <= set(cmp), ops
    assert cmp["reference"] > 0.5 * ops["compare"]["ms"] and sum(cmp.values()) <= ops["compare"]["ms"], ops


def test_a_reference_that_cannot_be_timed_leaves_the_candidate_correct_and_untimed(files):
    # The reference has no batch of its own: it is timed in the candidate's paired batch. When its
    # round trip there fails, that is not the candidate's doing: its verdict stays the trials'
    # (correct), no time is published, and the report says why (as when the reference's own batch
    # failed, before): never not_verified, which an eval would retry on every run.
    r, rep = run_verify(files, ["good"], "--no-multishape", problem="untimeable")
    assert r.returncode == 0, r.stderr[-3000:]
    c = rep["candidates"][0]
    assert c["verdict"] == "correct" and c.get("timing") is None and c.get("speedup") in (None, 0, 0.0), c
    assert "the reference's paired round trip failed" in c["evidence"]["timing_not_taken"], c["evidence"]
    assert "refuses to be timed" in c["evidence"]["timing_not_taken"], c["evidence"]["timing_not_taken"]
    assert rep["reference_timing"] is None, rep["reference_timing"]
    assert any("reference timing on cpu failed beside" in w for w in rep["warnings"]), rep["warnings"]


def test_the_whole_output_check_comes_after_the_hold_on_a_copy(files, tmp_path):
    # A paired batch leaves the whole-output check of its last round trip's outputs for after its
    # exclusive hold, on the copy the judge took with the candidate stopped (time_snapshot); the
    # first batch to pass it publishes the reference's timing. Fingerprints of the first 8 values (a
    # patched copy of the package), so that the last value is caught there and nowhere else: still
    # a timed_output_mismatch.
    pkg = tmp_path / "pkg"
    source = Path(__file__).resolve().parents[2] / "python" / "kernelllm"  # the workers' code, as installed from here
    shutil.copytree(source, pkg / "kernelllm", ignore=shutil.ignore_patterns("__pycache__", "*.so", "bin"))
    judge_py = pkg / "kernelllm" / "worker" / "judge.py"
    text = judge_py.read_text()
    sample = "torch.randint(0, numel, (FINGERPRINT_MAX,), generator=g).unique(sorted=True)"
    assert "FINGERPRINT_MAX = 1 << 22" in text and sample in text, "judge.py changed: update this test"
    judge_py.write_text(text.replace("FINGERPRINT_MAX = 1 << 22", "FINGERPRINT_MAX = 8").replace(sample, "torch.arange(8)"))
    r, rep = run_verify(files, ["good", "good_128", "off_sample"], "--no-multishape", "-j", "1",
                        env={"KERNELLLM_PACKAGE_DIR": str(pkg)})
    assert r.returncode == 0, r.stderr[-3000:]
    by = {Path(c["path"]).stem: c for c in rep["candidates"]}
    for name in ("good", "good_128"):
        steps = by[name]["timing"]["trip_steps_ms"]
        assert by[name]["verdict"] == "correct" and "snapshot" in steps and "full_check" not in steps, steps
    assert rep["reference_timing"]["paired_with"].endswith("good.py"), rep["reference_timing"]
    off = by["off_sample"]
    assert (off["verdict"], off["rule"]) == ("cheat", "timed_output_mismatch"), (off["verdict"], off["rule"], off["message"])
    assert "left wrong values in the output region" in off["message"], off["message"]
    assert off["evidence"]["timed_mismatch_check"] == "whole outputs, after the exclusive hold", off["evidence"]
    # Caught there in the device's first batch: its reference side is not the published timing.
    r, rep = run_verify(files, ["off_sample", "good"], "--no-multishape", "-j", "1", env={"KERNELLLM_PACKAGE_DIR": str(pkg)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert [c["rule"] for c in rep["candidates"]] == ["timed_output_mismatch", ""], rep["candidates"]
    assert rep["reference_timing"]["paired_with"].endswith("good.py"), rep["reference_timing"]


def test_size_variant_judges_started_by_exec_live_through_the_multishape_check(files):
    # Without the zygote every worker starts by exec and dies with the thread that forked it: the
    # variant judges start on the thread that outlives them, so the correct candidate's multi-shape
    # check has them (it came back "not run" when a short-lived loading thread started them).
    r, rep = run_verify(files, ["good"], "--no-timing", env={"KERNELLLM_ZYGOTE": "0"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert rep["worker_start"].startswith("exec"), rep["worker_start"]
    c = rep["candidates"][0]
    assert c["verdict"] == "correct" and (c.get("multishape") or {}).get("verdict") == "pass", (c.get("multishape"), c.get("multishape_note"))
    assert rep["judges_started"] == 2  # the problem's, and one process for both size variants


def test_second_run_is_served_from_the_cache(files, tmp_path):
    cache = tmp_path / "verify.sqlite"
    r1, rep1 = run_verify(files, ["good", "syntax"], cache=cache)
    assert r1.returncode == 0, r1.stderr[-2000:]
    assert [c["cached"] for c in rep1["candidates"]] == [False, False]
    r2, rep2 = run_verify(files, ["good", "syntax"], cache=cache)
    assert [c["cached"] for c in rep2["candidates"]] == [True, True]
    # Nothing to time: the reference's timing is not prepared.
    assert "reference_prepare_started" not in rep2["timeline_ms"], rep2["timeline_ms"]
    assert [c["verdict"] for c in rep2["candidates"]] == ["correct", "compile_error"]
    assert "(cached)" in r2.stdout
    # A different profile is a different key.
    r3, rep3 = run_verify(files, ["syntax"], "--profile", "kernelbench", cache=cache)
    assert rep3["candidates"][0]["cached"] is False


def test_the_interpreter_probe_is_kept_across_calls_until_a_file_it_rests_on_changes(files, tmp_path):
    # The probe (torch, Triton, NumPy versions, GPUs: a torch import, ~2 s here) once per
    # interpreter, kept next to the verify cache; remade when a stamped file changed; never kept for
    # an interpreter behind a shim (it may pick another interpreter by directory or setting).
    import os
    import sys
    real = os.path.realpath(sys.executable)

    def verify(python):
        env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"), KERNELLLM_PYTHON=python)
        report = tmp_path / f"r-{time.monotonic_ns()}.json"
        r = subprocess.run([find_cli(), "verify", str(files["problem"]), str(files["syntax"]), "--verify-device", "cpu",
                            "--no-cache", "--json", str(report)], capture_output=True, text=True, timeout=600, env=env)
        assert r.returncode == 3, r.stderr[-2000:]  # compile_error: nothing correct
        return json.loads(report.read_text())["environment"]

    first = verify(real)
    [kept] = list((tmp_path / "xdg" / "kernelllm").glob("python-probe-*.json"))
    probe = json.loads(kept.read_text())
    assert probe["env"]["torch"] == first["torch"] and real in probe["stamps"]
    # Read back, not probed again: a marked answer comes back.
    probe["env"]["torch"] = "0.0+kept"
    kept.write_text(json.dumps(probe))
    assert verify(real)["torch"] == "0.0+kept"
    # A stamp that no longer matches its file: probed again, and the file rewritten.
    probe["stamps"][real] = "1 1"
    kept.write_text(json.dumps(probe))
    assert verify(real)["torch"] == first["torch"]
    assert json.loads(kept.read_text())["env"]["torch"] == first["torch"]
    # A shim: probed, never kept.
    shim = tmp_path / "python3"
    shim.write_text(f"#!/bin/sh\nexec {real} \"$@\"\n")
    shim.chmod(0o755)
    kept.unlink()
    assert verify(str(shim))["torch"] == first["torch"]
    assert not list((tmp_path / "xdg" / "kernelllm").glob("python-probe-*.json"))


def test_workers_are_forked_whichever_way_the_interpreter_is_named(files, tmp_path):
    # The zygote starts by the interpreter's path before the probe when that path is a binary: a path
    # relative to the working directory must be made absolute first (the zygote runs in a directory
    # of its own: started as given, it failed to exec and every worker was started by exec). A shim
    # is probed first and the zygote started with the interpreter the probe reports.
    import os
    import sys
    real = os.path.realpath(sys.executable)
    shim = tmp_path / "python-shim"
    shim.write_text(f"#!/bin/sh\nexec {real} \"$@\"\n")
    shim.chmod(0o755)
    # (Relative from /: without "..", which the sandbox cannot follow through directories it hides.)
    for python, cwd in ((os.path.relpath(real, "/"), "/"), (real, tmp_path), (str(shim), tmp_path)):
        report = tmp_path / f"r-{time.monotonic_ns()}.json"
        r = subprocess.run([find_cli(), "verify", str(files["problem"]), str(files["syntax"]), "--verify-device", "cpu",
                            "--no-cache", "--json", str(report)], capture_output=True, text=True, timeout=600,
                           cwd=cwd, env=dict(os.environ, KERNELLLM_PYTHON=python))
        assert r.returncode == 3, r.stderr[-2000:]
        [cand] = json.loads(report.read_text())["candidates"]
        assert cand["verdict"] == "compile_error"
        assert cand["evidence"]["worker_start"] == "zygote", (python, cand["evidence"]["worker_start"])


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


def test_missing_files_are_usage_errors_found_before_any_work(files):
    missing = files["dir"] / "no_such_candidate.py"
    r = subprocess.run([find_cli(), "verify", str(files["problem"]), str(files["good"]), str(missing),
                        "--verify-device", "cpu", "--no-cache"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert f"candidate {missing}: no such file" in r.stderr
    assert "judge" not in r.stderr  # nothing was started
    r = subprocess.run([find_cli(), "verify", str(files["dir"] / "no_problem.py"), str(files["good"])],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "problem " + str(files["dir"] / "no_problem.py") + ": no such file" in r.stderr


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="a GPU is visible here")
def test_cuda_without_a_visible_gpu_is_a_clear_usage_error(files):
    r = subprocess.run([find_cli(), "verify", str(files["problem"]), str(files["good"]), "--verify-device", "cuda"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "--verify-device cuda: no GPU is visible" in r.stderr


def test_nothing_correct_exits_3_and_json_dash_goes_to_stdout(files):
    raises = files["dir"] / "raises.py"
    raises.write_text(GOOD.replace("def forward(self, x):", "def forward(self, x):\n        undefined_name(x)", 1))
    r = subprocess.run([find_cli(), "verify", str(files["problem"]), str(files["wrong"]), str(raises),
                        "--verify-device", "cpu", "--no-cache", "--json", "-", "--progress", "--run-timeout", "8"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 3, r.stderr[-3000:]
    report = json.loads(r.stdout)  # stdout holds only the JSON; the table went to stderr
    assert [c["verdict"] for c in report["candidates"]] == ["wrong_output", "runtime_error"], r.stdout[-3000:]
    # The traceback names the user's file, never the sandbox's copy of it.
    assert f'File \\"{raises}\\", line' in r.stdout  # as JSON escapes it
    assert "kernelllm-verify-" not in r.stdout
    assert "no candidate is correct" in r.stderr
    assert "2/2 candidate(s) verified, elapsed" in r.stderr
    assert "candidate" in r.stderr and "verdict" in r.stderr  # the table
    # No candidate matched a trial: the size variants' judges never started, only the problem's.
    assert "variants_started" not in report["timeline_ms"] and "setup" in report["timeline_ms"], report["timeline_ms"]
    assert report["judges_started"] == 1


def test_sigint_stops_workers_and_removes_the_run_directory(files):
    proc = subprocess.Popen([find_cli(), "verify", str(files["problem"]), str(files["hang"]), "--verify-device", "cpu",
                             "--no-cache", "--run-timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    run_dirs = lambda: list(Path("/dev/shm").glob(f"kernelllm-verify-{proc.pid}-*"))
    deadline = time.monotonic() + 120
    # Wait until the hanging candidate runs (its sleepers exist), so that there is work to stop.
    while not sleeper_pids() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert run_dirs(), "the run directory was never created"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted (SIGINT)" in err and "removed 1 temporary run directory" in err, err[-3000:]
    assert not run_dirs()
    deadline = time.monotonic() + 10
    while sleeper_pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not sleeper_pids()


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
