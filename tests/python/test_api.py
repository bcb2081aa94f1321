"""The Python API: KernelLLM as kernelllm.py uses it (README examples, unchanged), k-sample
generation, the REPL, model lookup and errors."""
import subprocess
import sys

import pytest

import kernelllm
from kernelllm import KernelLLM

PYTORCH_CODE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return x * 2

def get_inputs():
    return [torch.randn(1, 128).cuda()]

def get_init_inputs():
    return []
'''


def test_readme_examples_run_unchanged(tiny_model, capsys):
    model = KernelLLM(model_name=str(tiny_model))
    optimized_code = model.generate_triton(PYTORCH_CODE, max_new_tokens=16)
    assert isinstance(optimized_code, str) and optimized_code
    print(optimized_code)
    streamed = model.stream_raw("import torch\n", max_new_tokens=16)
    out = capsys.readouterr().out
    assert streamed and streamed in out
    raw = model.generate_raw("def add(a, b):", temperature=0.6, max_new_tokens=8)
    assert isinstance(raw, str) and raw == raw.strip()


def test_device_selection(tiny_model):
    # By what is visible, not by how it was built: a CUDA build on a machine without a GPU picks the CPU.
    visible = kernelllm.has_cuda() and kernelllm._gpu_visible()
    assert KernelLLM(str(tiny_model)).device == ("cuda" if visible else "cpu")
    assert KernelLLM(str(tiny_model), device="cpu").device == "cpu"
    if not visible:
        for device in ("cuda", "cuda:1"):
            with pytest.raises((RuntimeError, ValueError), match="(?i)cuda"):
                KernelLLM(str(tiny_model), device=device)
    for bad in ("tpu", "cuda:x", "cuda:"):
        with pytest.raises(ValueError, match="device"):
            KernelLLM(str(tiny_model), device=bad)


def test_generate_is_reproducible_and_independent_of_n(tiny_engine):
    four = tiny_engine.generate("x = torch.randn(", n=4, seed=1, max_new_tokens=12)
    assert len(four) == 4
    assert tiny_engine.generate("x = torch.randn(", n=4, seed=1, max_new_tokens=12) == four
    assert tiny_engine.generate("x = torch.randn(", n=2, seed=1, max_new_tokens=12) == four[:2]
    assert len(set(four)) > 1, "four samples at temperature 0.6 from a random model should differ"
    assert tiny_engine.generate("x = torch.randn(", n=4, seed=2, max_new_tokens=12) != four


def test_triton_prompt_holds_users_code_after_example(tiny_engine):
    prompt = tiny_engine.format_prompt(PYTORCH_CODE)
    assert tiny_engine.prompt_template_source == "built-in"
    assert prompt.startswith("\n<|begin_of_text|>")
    assert prompt.index("add_kernel") < prompt.index(PYTORCH_CODE)


def test_template_comes_from_model_kernelllm_py(make_model_dir, tmp_path):
    d = make_model_dir("with_script")
    (d / "kernelllm.py").write_text('import torch\nPROMPT_TEMPLATE = """\n<|begin_of_text|>ours:\n{}\nend"""\n')
    model = KernelLLM(str(d))
    assert model.prompt_template_source.endswith("kernelllm.py")
    assert model.format_prompt("CODE {x}") == "\n<|begin_of_text|>ours:\nCODE {x}\nend"
    override = tmp_path / "t.txt"
    override.write_text("override [{}]")
    assert KernelLLM(str(d), prompt_template=str(override)).format_prompt("C") == "override [C]"
    (d / "kernelllm.py").write_text("HF_MODEL = 'x'\n")
    with pytest.raises(FileNotFoundError, match="PROMPT_TEMPLATE"):
        KernelLLM(str(d))


def test_python_m_kernelllm_streams_for_stdin_module(tiny_model):
    # The REPL itself (commands, verification, the example) is tested in test_repl.py.
    run = subprocess.run([sys.executable, "-m", "kernelllm", "--model", str(tiny_model), "--max-new-tokens", "16",
                          "-k", "1", "--no-verify"],
                         input=PYTORCH_CODE,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "Ctrl+D" in run.stdout and "No code given" not in run.stdout
    assert len(run.stdout.split(">>>", 1)[1].strip()) > 0


def test_bad_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        KernelLLM(str(tmp_path / "no_such_model"))
    assert "no_such_model" in str(e.value)


def test_hf_id_resolves_in_fake_hf_cache(hf_home, tiny_model):
    model = KernelLLM()  # facebook/KernelLLM, as kernelllm.py defaults
    assert "models--facebook--KernelLLM" in model.model_dir and "0123abcd" in model.model_dir
    direct = KernelLLM(str(tiny_model))
    assert model.generate("abc", n=2, seed=5, max_new_tokens=6) == direct.generate("abc", n=2, seed=5, max_new_tokens=6)


def test_unknown_hf_id_says_how_to_get_it(hf_home):
    # conftest turns downloads off (HF_HUB_OFFLINE=1); test_hub.py covers the download itself.
    with pytest.raises(FileNotFoundError) as e:
        KernelLLM("nobody/NoSuchModel")
    assert "nobody/NoSuchModel" in str(e.value)
    assert "`hf download nobody/NoSuchModel`" in str(e.value) and "nothing was downloaded" in str(e.value)


def test_stream_callback_sees_the_returned_text(tiny_engine):
    seen = {}
    completions, stats = tiny_engine._engine.generate(
        "hello", 3, 10, 0.6, 0.95, 0, 7, lambda i, text: seen.setdefault(i, []).append(text))
    assert [c.text for c in completions] == ["".join(seen.get(i, [])) for i in range(3)]
    assert stats.generated_tokens == sum(len(c.tokens) for c in completions)


def test_stream_callback_exception_propagates(tiny_engine):
    def boom(i, text):
        raise KeyError("stop here")

    with pytest.raises(KeyError, match="stop here"):
        tiny_engine._engine.generate("hello", 1, 10, 0.6, 0.95, 0, 7, boom)


def test_drop_in_attributes_of_meta_class(tiny_model):
    model = KernelLLM(str(tiny_model))
    assert "{}" in KernelLLM.PROMPT_TEMPLATE
    assert KernelLLM.PROMPT_TEMPLATE == kernelllm._native.builtin_prompt_template()
    ids = model.tokenizer.encode("def relu(x):")
    assert ids and all(isinstance(i, int) for i in ids)
    assert model.tokenizer("def relu(x):")["input_ids"] == ids
    assert model.tokenizer.decode(ids, skip_special_tokens=True) == "def relu(x):"
    assert model.model.model_dir == model.model_dir
    completions, _ = model.model.generate(ids, 1, 4)
    assert len(completions) == 1
