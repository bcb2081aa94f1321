"""KernelLLM with kernelllm's own C++ engine: a drop-in for the `KernelLLM` class of the
`kernelllm.py` script that ships with facebook/KernelLLM (same methods and defaults), with
model lookup in the local Hugging Face cache (never a download) and k-sample generation.

    from kernelllm import KernelLLM
    model = KernelLLM()                       # or KernelLLM("/path/to/model/dir")
    print(model.generate_triton(pytorch_code, max_new_tokens=512))
    model.stream_raw("a text prompt", max_new_tokens=128)
"""
from __future__ import annotations

import random
import sys
from typing import List, Optional, Union

from . import _native
from .verify import verify

__version__ = _native.__version__
__all__ = ["KernelLLM", "HF_MODEL", "DEFAULT_MODEL_CODE", "has_cuda", "__version__"]

HF_MODEL = "facebook/KernelLLM"

REPL_INSTRUCTIONS = """
Paste or type a PyTorch module (a `Model(nn.Module)` class with `get_inputs()` and
`get_init_inputs()` functions), then press Ctrl+D. KernelLLM will try to rewrite it with
Triton kernels. An empty input uses a built-in example; type `exit` to quit.

>>>"""

# The REPL's example when the user gives no code: a small fused elementwise module.
DEFAULT_MODEL_CODE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"Scales x, adds a bias and applies a leaky ReLU.\"\"\"

    def __init__(self, scale: float = 2.0, slope: float = 0.1):
        super().__init__()
        self.scale = scale
        self.slope = slope

    def forward(self, x, bias):
        return torch.nn.functional.leaky_relu(x * self.scale + bias, self.slope)


def get_inputs():
    return [torch.randn(64, 4096), torch.randn(4096)]


def get_init_inputs():
    return []
"""


def has_cuda() -> bool:
    """Whether this build of kernelllm has the CUDA backend."""
    return bool(_native.has_cuda())


def _pick_device(device: Optional[str]) -> str:
    if device is None or device == "auto":
        return "cuda" if has_cuda() else "cpu"
    if device.startswith("cuda") and not has_cuda():
        raise RuntimeError(
            f"device {device!r}: this kernelllm was built without the CUDA backend; "
            "use device='cpu' (or None to pick automatically)"
        )
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device: expected None, 'auto', 'cpu' or 'cuda', found {device!r}")
    return device


def _random_seed() -> int:
    return random.SystemRandom().getrandbits(63)


class KernelLLM:
    """KernelLLM on kernelllm's engine.

    `model_name` is a local model directory or an HF id already in the local HF cache
    ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub). `prompt_template` is an
    optional file whose text replaces the Triton prompt template (one `{}` field); by default
    the template comes from the model directory's kernelllm.py, else a built-in one.
    """

    def __init__(
        self,
        model_name: str = HF_MODEL,
        device: Optional[str] = None,
        *,
        threads: int = 0,
        prompt_template: Optional[str] = None,
    ):
        self.model_name = model_name
        self.device = _pick_device(device)
        self._engine = _native.Engine(model_name, self.device, threads)
        self.model_dir = self._engine.model_dir
        self.prompt_template, self.prompt_template_source = _native.load_prompt_template(
            self.model_dir, prompt_template or ""
        )

    def generate(
        self,
        prompt: Union[str, List[int]],
        n: int = 1,
        temperature: float = 0.6,
        top_p: float = 0.95,
        top_k: int = 0,
        seed: Optional[int] = None,
        max_new_tokens: int = 2048,
    ) -> List[str]:
        """`n` completions of `prompt` (text gets BOS added, as HF's tokenizer does; or token
        ids), special tokens skipped, prompt not included. temperature 0 is greedy. The same
        seed gives the same completions, whatever `n`."""
        completions, _ = self._engine.generate(
            prompt, n, max_new_tokens, temperature, top_p, top_k,
            _random_seed() if seed is None else seed,
        )
        return [c.text for c in completions]

    def generate_raw(self, prompt: str, temperature: float = 0.6, max_new_tokens: int = 2048) -> str:
        """The completion of `prompt` used verbatim, stripped of surrounding whitespace."""
        return self.generate(prompt, 1, temperature, 0.95, 0, None, max_new_tokens)[0].strip()

    def stream_raw(self, prompt: str, max_new_tokens: int = 2048) -> str:
        """Prints the completion of `prompt` as it is generated; returns its text."""

        def on_text(_sample: int, text: str) -> bool:
            sys.stdout.write(text)
            sys.stdout.flush()
            return True

        completions, _ = self._engine.generate(
            prompt, 1, max_new_tokens, 0.6, 0.95, 0, _random_seed(), on_text
        )
        sys.stdout.write("\n")
        sys.stdout.flush()
        return completions[0].text

    def format_prompt(self, code: str) -> str:
        """The Triton prompt for a PyTorch module (`template.format(code)`)."""
        return _native.format_triton_prompt(self.prompt_template, code)

    def generate_triton(self, code: str, temperature: float = 0.6, max_new_tokens: int = 2048) -> str:
        """A Triton rewrite (`ModelNew`) of the PyTorch module in `code`, as the model writes it."""
        return self.generate_raw(self.format_prompt(code), temperature, max_new_tokens)

    def run_repl(self, max_new_tokens: int = 2048) -> None:
        """Reads a module from stdin until EOF (Ctrl+D), streams the model's Triton version
        of it, and repeats while stdin is a terminal. Empty input uses DEFAULT_MODEL_CODE."""
        while True:
            print(REPL_INSTRUCTIONS)
            try:
                code = sys.stdin.read().strip()
            except KeyboardInterrupt:
                return
            if code.lower() == "exit":
                return
            if not code:
                print(f"No code given; using the built-in example:\n{DEFAULT_MODEL_CODE}\n")
                code = DEFAULT_MODEL_CODE
            try:
                self.stream_raw(self.format_prompt(code), max_new_tokens)
            except KeyboardInterrupt:
                print("Aborting...")
            if not sys.stdin.isatty():
                return
