"""The installed `kernelllm` console script (which execs the packaged C++ CLI)."""
import json
import subprocess

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
