"""Greedy generation through the Python API equals HF transformers' greedy generate on the
tiny fp32 model: the same token ids and the same decoded text."""
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    "import torch\n",
    "def forward(self, x):\n    return",
    "\n<|begin_of_text|>You write Triton kernels.\n```\nclass Model(nn.Module):\n```\n",
]


@pytest.fixture(scope="module")
def hf(tiny_model):
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return tok, model


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_matches_transformers(tiny_engine, hf, prompt):
    tok, model = hf
    ids = tok(prompt, return_tensors="pt")
    assert tiny_engine._engine.encode(prompt) == ids["input_ids"][0].tolist()
    with torch.no_grad():
        out = model.generate(**ids, do_sample=False, max_new_tokens=40)
    hf_new = out[0, ids["input_ids"].shape[1]:].tolist()
    hf_text = tok.decode(hf_new, skip_special_tokens=True)

    completions, _ = tiny_engine._engine.generate(prompt, 1, 40, 0.0, 1.0, 0, 0)
    assert completions[0].tokens == hf_new
    assert completions[0].text == hf_text
    assert tiny_engine.generate(prompt, temperature=0.0, max_new_tokens=40) == [hf_text]
