"""`kernelllm bench` through the installed console script on a tiny random CPU model: the
table prints, the JSON holds every field with positive numbers (no timing assertions), and
bad requests fail with a message."""
import json
import subprocess


def run(script, *args, timeout=600):
    return subprocess.run([script, *args], capture_output=True, text=True, timeout=timeout)


def test_bench_tiny_cpu_writes_json(kernelllm_script, tmp_path):
    out = tmp_path / "bench.json"
    r = run(kernelllm_script, "bench", "--config", "tiny", "--random-weights", "--device", "cpu", "-n", "1,2",
            "--new-tokens", "4", "--prompt-tokens", "16", "--seed", "3", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "prefill:" in r.stdout and "tok/s/seq" in r.stdout
    report = json.loads(out.read_text())
    assert "bench" in report["command"] and "--random-weights" in report["command"]
    assert report["options"]["n"] == [1, 2] and report["options"]["seed"] == 3
    assert report["model"]["source"] == "random:tiny" and report["model"]["parameters"] > 0
    assert report["prefill"]["tokens"] == 16 and report["prefill"]["ms_median"] > 0
    assert report["copy_bandwidth"]["available"] is False
    assert report["machine"]["kernelllm_version"]
    assert [e["n"] for e in report["decode"]] == [1, 2]
    for e in report["decode"]:
        assert e["steps"] == 3
        for key in ("ms_per_step_median", "tok_s_per_seq", "tok_s_aggregate", "achieved_gbps", "kv_bytes_per_step"):
            assert e[key] > 0, key


def test_bench_errors_are_clear(kernelllm_script):
    r = run(kernelllm_script, "bench", "--config", "tiny")
    assert r.returncode == 2 and "--random-weights" in r.stderr
    r = run(kernelllm_script, "bench", "--config", "no-such-shape", "--random-weights")
    assert r.returncode == 1 and "unknown config" in r.stderr and "llama-3.1-8b" in r.stderr
    r = run(kernelllm_script, "bench", "--config", "llama-3.1-8b", "--random-weights", "--device", "cpu", "-n", "4096")
    assert r.returncode == 1 and "does not fit" in r.stderr
    # The kernel plan and the memory cap are CUDA options: a clear usage error elsewhere.
    r = run(kernelllm_script, "bench", "--config", "tiny", "--random-weights", "--device", "cpu", "--cuda-plan", "portable")
    assert r.returncode == 2 and "--cuda-plan and --memory-cap need a cuda device" in r.stderr
    r = run(kernelllm_script, "bench", "--config", "tiny", "--random-weights", "--device", "cpu", "--memory-cap", "24")
    assert r.returncode == 2 and "need a cuda device, found cpu" in r.stderr
