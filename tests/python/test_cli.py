"""The installed `kernelllm` console script (which execs the packaged C++ CLI)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

import kernelllm


def run(script, *args, timeout=600):
    return subprocess.run([script, *args], capture_output=True, text=True, timeout=timeout)


def test_version(kernelllm_script):
    r = run(kernelllm_script, "--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"kernelllm {kernelllm.__version__}"


def test_generate_n4_seeded_is_reproducible(kernelllm_script, tiny_model, tmp_path):
    args = ["generate", "--model", str(tiny_model), "--prompt", "def forward(self, x):", "-n", "4", "--seed", "1",
            "--max-new-tokens", "12"]
    first = run(kernelllm_script, *args, "--json", str(tmp_path / "out.json"))
    assert first.returncode == 0, first.stderr
    second = run(kernelllm_script, *args)
    assert second.returncode == 0, second.stderr
    assert first.stdout == second.stdout
    for i in range(4):
        assert f"=== sample {i} (" in first.stdout
    assert "prompt tokens:" in first.stderr and "tok/s" in first.stderr
    report = json.loads((tmp_path / "out.json").read_text())
    assert len(report["samples"]) == 4 and report["sampling"]["seed"] == 1
    # The same texts as the Python API with the same seed.
    api = kernelllm.KernelLLM(str(tiny_model)).generate("def forward(self, x):", n=4, seed=1, max_new_tokens=12)
    assert [s["text"] for s in report["samples"]] == api


def test_generate_module_uses_triton_template(kernelllm_script, tiny_model, tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    r = run(kernelllm_script, "generate", "--model", str(tiny_model), "--module", str(module), "--seed", "3",
            "--max-new-tokens", "4", "--json", str(tmp_path / "o.json"), "--stream")
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "o.json").read_text())
    assert report["prompt_template"] == "built-in"
    engine = kernelllm.KernelLLM(str(tiny_model))
    prompt_ids = engine._engine.encode(engine.format_prompt(module.read_text()))
    assert report["stats"]["prompt_tokens"] == len(prompt_ids)
    assert report["samples"][0]["text"] in r.stdout


def test_usage_errors_exit_2(kernelllm_script, tiny_model):
    assert run(kernelllm_script, "generate", "--model", str(tiny_model)).returncode == 2
    r = run(kernelllm_script, "generate", "--model", str(tiny_model), "--prompt", "a", "--prompt-file", "/etc/hostname")
    assert r.returncode == 2
    r = run(kernelllm_script, "generate", "--model", str(tiny_model), "--prompt", "a", "--top-p", "1.5")
    assert r.returncode == 2 and "top_p" in r.stderr
    assert run(kernelllm_script).returncode == 2


def test_bad_model_is_a_failure_with_message(kernelllm_script, tmp_path):
    r = run(kernelllm_script, "generate", "--model", str(tmp_path / "missing"), "--prompt", "a")
    assert r.returncode == 1
    assert "error: not_found" in r.stderr and "missing" in r.stderr


def test_generate_resolves_hf_id_in_hf_home(kernelllm_script, hf_home, tiny_model):
    args = ["generate", "--prompt", "abc", "-n", "2", "--seed", "4", "--max-new-tokens", "5"]
    by_id = run(kernelllm_script, *args, "--model", "facebook/KernelLLM")
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout == run(kernelllm_script, *args, "--model", str(tiny_model)).stdout


def test_gpu_memory_fraction_is_one_option_of_every_engine_command(kernelllm_script, tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import torch\n")
    for cmd in ("optimize", "repl", "eval"):
        help_text = run(kernelllm_script, cmd, "--help").stdout
        assert "--gpu-memory-fraction" in help_text and "default 0.5 when the verifier uses" in help_text, cmd
        args = [str(module)] if cmd != "repl" else []
        r = run(kernelllm_script, cmd, *args, "--gpu-memory-fraction", "1.5")
        assert r.returncode == 2 and "--gpu-memory-fraction" in r.stderr, (cmd, r.returncode, r.stderr)


@pytest.fixture(scope="module")
def cli(kernelllm_script) -> str:
    """$KERNELLLM_CLI (a build tree's binary) when set, else the installed console script."""
    return os.environ.get("KERNELLLM_CLI") or kernelllm_script


def test_negative_temperature_is_refused_with_a_plain_number(cli, tiny_model):
    for command in (["generate", "--prompt", "a"], ["optimize", "/etc/hostname"]):
        r = run(cli, *command, "--model", str(tiny_model), "--temperature", "-1e30", timeout=60)
        assert r.returncode == 2, r.stderr
        assert "expected a finite temperature >= 0, found -1e+30" in r.stderr
        assert len(r.stderr) < 300, r.stderr


def test_help_shows_the_defaults(cli):
    for command, shown in [("eval", ["INT:INT in [1 - 10000]=20", "--temperature FLOAT=0.6", "--top-p FLOAT=0.95"]),
                           ("verify", ["--trials INT:INT in [1 - 100]=5", "--profile TEXT:{strict,kernelbench}=strict",
                                       "Exit codes: 0 at least one candidate is correct; 3 none"]),
                           ("optimize", ["INT:INT in [1 - 4096]=10", "--max-new-tokens INT:INT in [1 - 1048576]=2048"])]:
        r = run(cli, command, "--help", timeout=60)
        assert r.returncode == 0
        for text in shown:
            assert text in r.stdout, (command, text)


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="a GPU is visible here")
def test_device_defaults_to_cpu_without_a_gpu_and_cuda_is_a_clear_error(cli, tiny_model):
    args = ["generate", "--model", str(tiny_model), "--prompt", "def f(x):", "--seed", "1", "--max-new-tokens", "4"]
    r = run(cli, *args, "--json", "-", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "generate: generating on cpu (no GPU is visible; --device chooses)" in r.stderr
    report = json.loads(r.stdout)  # `--json -`: stdout is the JSON alone, the samples went to stderr
    assert report["samples"][0]["text"] and "=== sample 0 (" in r.stderr
    for command in (args, ["optimize", "/etc/hostname", "--model", str(tiny_model)],
                    ["repl", "--model", str(tiny_model)]):
        r = run(cli, *command[:1], *command[1:], "--device", "cuda", timeout=60)
        assert r.returncode == 2, (command, r.stderr)
        assert "--device cuda: no GPU is visible to this process" in r.stderr
