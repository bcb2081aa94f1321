"""KernelLLM with kernelllm's own C++ engine: a drop-in for the `KernelLLM` class of the
`kernelllm.py` script that ships with facebook/KernelLLM (same methods and defaults), with
the model taken from the Hugging Face cache (downloaded there first when missing, like
transformers does) and k-sample generation.

    from kernelllm import KernelLLM
    model = KernelLLM()                       # facebook/KernelLLM; or KernelLLM("/path/to/model/dir")
    print(model.generate_triton(pytorch_code, max_new_tokens=512))
    model.stream_raw("a text prompt", max_new_tokens=128)
    result = model.optimize(pytorch_code, k=10)   # generate, verify, pick the fastest correct
    print(result.best_code, result.speedup)
"""
from __future__ import annotations

import json
import os
import random
import re
import sys
import tempfile
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _native
from .verify import _default_device, verify

__version__ = _native.__version__
__all__ = ["KernelLLM", "OptimizeResult", "HF_MODEL", "DEFAULT_MODEL_CODE", "DEFAULT_TEMPERATURE", "DEFAULT_TOP_P",
           "has_cuda", "verify", "verify_completions", "__version__"]

HF_MODEL = "facebook/KernelLLM"

# KernelLLM's sampling defaults (kernelllm.py's 0.6 and 0.95): one copy, in the C++ sampler.h.
DEFAULT_TEMPERATURE = round(float(_native.DEFAULT_TEMPERATURE), 6)
DEFAULT_TOP_P = round(float(_native.DEFAULT_TOP_P), 6)

# The REPL's example when the user gives no code (one copy, in the C++ REPL).
DEFAULT_MODEL_CODE = _native.default_module_code()


@dataclass
class OptimizeResult:
    """What `KernelLLM.optimize` and `verify_completions` return.

    best_code: the fastest correct candidate's module (`ModelNew`), or None when none is correct.
    speedup: its speedup over the reference (meaningful only when timing_meaningful: on a GPU).
    best_index: its index in `candidates`, or None.
    candidates: one dict per candidate: round, sample, verdict, rule, message, speedup,
        timing_meaningful, code, extraction, completion (raw model text), path (the file verified).
    failure_reasons: when nothing is correct, why, one line per candidate.
    report: the full report (generation stats, every verdict with its evidence, environment).
    work_dir: where the problem, completions and candidate files were written.
    """

    best_code: Optional[str]
    speedup: Optional[float]
    best_index: Optional[int]
    candidates: List[Dict[str, Any]]
    failure_reasons: List[str]
    report: Dict[str, Any]
    work_dir: str
    timing_meaningful: bool = False

    @classmethod
    def _from_json(cls, text: str, work_dir: str) -> "OptimizeResult":
        doc = json.loads(text)
        best = doc["best"]
        chosen = doc["candidates"][best] if best is not None else None
        return cls(
            best_code=chosen["code"] if chosen else None,
            speedup=chosen["speedup"] if chosen else None,
            best_index=best,
            candidates=doc["candidates"],
            failure_reasons=doc["failure_reasons"],
            report=doc["report"],
            work_dir=work_dir,
            timing_meaningful=bool(chosen and chosen["timing_meaningful"]),
        )


def _verify_options(device: Optional[str], profile: str, jobs: int, sandbox: bool) -> Dict[str, Any]:
    if profile not in ("strict", "kernelbench"):
        raise ValueError(f"profile: expected 'strict' or 'kernelbench', found {profile!r}")
    if not isinstance(jobs, int) or jobs < 0:
        raise ValueError(f"jobs: expected a whole number >= 0 (0: one per core), found {jobs!r}")
    if sandbox is False:
        warnings.warn("sandbox=False: candidate code runs unconfined", RuntimeWarning, stacklevel=3)
    return {
        "profile": profile, "device": device or _default_device(), "jobs": jobs, "sandbox": sandbox,
        # The verifier's workers live next to this file: kernelllm/worker/.
        "package_dir": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    }


def _work_dir(work_dir: Optional[Union[str, "os.PathLike[str]"]], what: str) -> str:
    if work_dir is None:
        return tempfile.mkdtemp(prefix=f"kernelllm-{what}-")
    return os.path.abspath(os.fspath(work_dir))


def _check_code(code: Any) -> str:
    if not isinstance(code, str):
        raise TypeError(f"code: expected the module's source text (str), found {type(code).__name__}")
    _native.check_module_code(code)
    return code


def verify_completions(code: str, completions: Sequence[str], device: Optional[str] = None,
                       profile: str = "strict", work_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
                       jobs: int = 0, sandbox: bool = True) -> OptimizeResult:
    """Scores completions written elsewhere (another model, an API, a person) for the PyTorch
    module in `code` exactly as `KernelLLM.optimize` scores its own samples: `ModelNew` is
    extracted from each text (first fenced block defining it, else the whole text), all are
    verified, and the fastest correct one is picked."""
    code = _check_code(code)
    if isinstance(completions, str):
        raise TypeError("completions: expected a list of completion texts, found one str")
    texts = list(completions)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("completions: expected a non-empty list of str")
    wd = _work_dir(work_dir, "verify")
    options = {"work_dir": wd, "verify": _verify_options(device, profile, jobs, sandbox)}
    return OptimizeResult._from_json(_native.verify_completions_json(code, texts, json.dumps(options)), wd)


def has_cuda() -> bool:
    """Whether this build of kernelllm has the CUDA backend."""
    return bool(_native.has_cuda())


def _gpu_visible() -> bool:
    """Whether this process sees a GPU: torch's answer when torch is installed, else the driver's
    device node (CUDA_VISIBLE_DEVICES="" hides every GPU)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return os.path.exists("/dev/nvidiactl")


def _pick_device(device: Optional[str]) -> str:
    """None / "auto": a visible GPU (cuda) when this build has the CUDA backend, else the CPU.
    "cuda" and "cuda:N" name a GPU; "cpu" the CPU backend."""
    if device is None or device == "auto":
        return "cuda" if has_cuda() and _gpu_visible() else "cpu"
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise ValueError(f"device: expected None, 'auto', 'cpu', 'cuda' or 'cuda:N', found {device!r}")
    if device.startswith("cuda") and not has_cuda():
        raise RuntimeError(
            f"device {device!r}: this kernelllm was built without the CUDA backend; "
            "use device='cpu' (or None to pick automatically)"
        )
    return device


_HUB_ERRORS = {"not_found": FileNotFoundError, "offline": FileNotFoundError, "missing_library": ModuleNotFoundError,
               "gated": PermissionError, "unreachable": ConnectionError, "invalid": ValueError}


def _locate_model(model_name: str, revision: Optional[str], offline: bool) -> str:
    """The model directory: a local one, the complete snapshot of an HF id in the HF cache, or,
    for an org/name id that is not (completely) there, the snapshot hub.download fetches. Raises
    FileNotFoundError (not found, or offline and not cached), PermissionError (a gated repo),
    ConnectionError (Hub unreachable), OSError (a download cut off, others)."""
    from . import hub  # not at import time: `python3 -m kernelllm.hub` runs it as __main__

    if not isinstance(model_name, str):
        model_name = os.fspath(model_name)
    try:
        return _native.resolve_model_path(model_name, revision or "")
    except FileNotFoundError as not_cached:
        if not hub.is_repo_id(model_name) or os.path.exists(model_name):
            raise
        if hub.offline_requested(offline):
            raise FileNotFoundError(f"{not_cached}\nOffline (offline=True or HF_HUB_OFFLINE), so nothing was "
                                    "downloaded.") from None
    try:
        return hub.download(model_name, revision)
    except hub.HubError as e:
        cls = _HUB_ERRORS.get(e.kind, OSError)
        raise cls(f"model {model_name!r}: {e}") from None


def _random_seed() -> int:
    return random.SystemRandom().getrandbits(63)


class _Tokenizer:
    """`KernelLLM.tokenizer`: the engine's own tokenizer (the model's tokenizer.json), with the
    calls kernelllm.py makes of a Hugging Face tokenizer: encode, decode and `tok(text)`. Lists
    of ids, never tensors."""

    def __init__(self, engine: Any):
        self._engine = engine

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        return list(self._engine.encode(text, add_special_tokens))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self._engine.decode([int(i) for i in ids], skip_special_tokens)

    def __call__(self, text: str, add_special_tokens: bool = True) -> Dict[str, List[int]]:
        ids = self.encode(text, add_special_tokens)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}


class KernelLLM:
    """KernelLLM on kernelllm's engine.

    `model_name` is a local model directory or an HF id: taken from the HF cache
    ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub) when complete there, else
    downloaded into it with huggingface_hub (progress bar on stderr; HF_ENDPOINT, HF_TOKEN and
    HF_HUB_OFFLINE apply), only the files the engine reads. `revision` (branch, tag or commit)
    picks the HF id's version (default main); `offline=True` (or HF_HUB_OFFLINE=1) never
    downloads. `prompt_template` is an optional file whose text replaces the Triton prompt
    template (one `{}` field); by default the template comes from the model directory's
    kernelllm.py, else a built-in one.

    As in Meta's kernelllm.py: `PROMPT_TEMPLATE` (the built-in template; the one in use is
    `self.prompt_template`), `self.tokenizer` (encode/decode over the engine's tokenizer, see
    _Tokenizer) and `self.model` (the native engine, not a torch module: README, Drop-in).
    """

    PROMPT_TEMPLATE = _native.builtin_prompt_template()

    def __init__(
        self,
        model_name: str = HF_MODEL,
        device: Optional[str] = None,
        *,
        threads: int = 0,
        prompt_template: Optional[str] = None,
        revision: Optional[str] = None,
        offline: bool = False,
    ):
        self.model_name = model_name
        self.device = _pick_device(device)
        self._engine = _native.Engine(_locate_model(model_name, revision, offline), self.device, threads)
        self.model_dir = self._engine.model_dir
        self.model = self._engine
        self.tokenizer = _Tokenizer(self._engine)
        self.prompt_template, self.prompt_template_source = _native.load_prompt_template(
            self.model_dir, prompt_template or ""
        )

    def generate(
        self,
        prompt: Union[str, List[int]],
        n: int = 1,
        temperature: float = DEFAULT_TEMPERATURE,
        top_p: float = DEFAULT_TOP_P,
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

    def generate_raw(self, prompt: str, temperature: float = DEFAULT_TEMPERATURE, max_new_tokens: int = 2048) -> str:
        """The completion of `prompt` used verbatim, stripped of surrounding whitespace."""
        return self.generate(prompt, 1, temperature, DEFAULT_TOP_P, 0, None, max_new_tokens)[0].strip()

    def stream_raw(self, prompt: str, max_new_tokens: int = 2048) -> str:
        """Prints the completion of `prompt` as it is generated; returns its text."""

        def on_text(_sample: int, text: str) -> bool:
            sys.stdout.write(text)
            sys.stdout.flush()
            return True

        completions, _ = self._engine.generate(
            prompt, 1, max_new_tokens, DEFAULT_TEMPERATURE, DEFAULT_TOP_P, 0, _random_seed(), on_text
        )
        sys.stdout.write("\n")
        sys.stdout.flush()
        return completions[0].text

    def format_prompt(self, code: str) -> str:
        """The Triton prompt for a PyTorch module (`template.format(code)`)."""
        return _native.format_triton_prompt(self.prompt_template, code)

    def generate_triton(self, code: str, temperature: float = DEFAULT_TEMPERATURE, max_new_tokens: int = 2048) -> str:
        """A Triton rewrite (`ModelNew`) of the PyTorch module in `code`, as the model writes it."""
        return self.generate_raw(self.format_prompt(code), temperature, max_new_tokens)

    def optimize(self, code: str, k: int = 10, temperature: float = DEFAULT_TEMPERATURE, top_p: float = DEFAULT_TOP_P,
                 seed: Optional[int] = None, max_new_tokens: int = 2048, rounds: int = 1,
                 device: Optional[str] = None, profile: str = "strict",
                 work_dir: Optional[Union[str, "os.PathLike[str]"]] = None, jobs: int = 0,
                 sandbox: bool = True) -> OptimizeResult:
        """k Triton candidates for the PyTorch module in `code` (one batch), each `ModelNew`
        extracted and verified against `Model` in a sandbox; returns the fastest correct one
        with every candidate's verdict and reason.

        device: the verification device ("cpu", "cuda", "cuda:N"; None: cuda when torch sees
            a GPU). profile: "strict" or "kernelbench". rounds > 1 feeds each failing
            candidate's error back to the model. work_dir (None: a new temp dir) keeps the
            problem, prompts, completions and candidate files. Verdicts never raise; a bad
            argument raises ValueError, an infrastructure failure RuntimeError."""
        code = _check_code(code)
        for name, value in (("k", k), ("max_new_tokens", max_new_tokens), ("rounds", rounds)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected a whole number >= 1, found {value!r}")
        wd = _work_dir(work_dir, "optimize")
        options = {
            "k": k, "max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p,
            "seed": _random_seed() if seed is None else seed, "rounds": rounds,
            "prompt_template": self.prompt_template, "work_dir": wd,
            "verify": _verify_options(device, profile, jobs, sandbox),
        }
        return OptimizeResult._from_json(self._engine.optimize_json(code, json.dumps(options)), wd)

    verify_completions = staticmethod(verify_completions)

    def run_repl(self, max_new_tokens: int = 2048, *, k: int = 10, temperature: float = DEFAULT_TEMPERATURE,
                 top_p: float = DEFAULT_TOP_P, seed: Optional[int] = None, verify: bool = True,
                 device: Optional[str] = None, profile: str = "strict",
                 work_dir: Optional[Union[str, "os.PathLike[str]"]] = None) -> None:
        """The REPL (the same one as `kernelllm repl`) on this process's stdin and stdout: paste a
        module and press Ctrl+D; sample 0 streams, then all k candidates are verified and a
        table and the best one are shown. `:k N`, `:temp T`, `:save FILE`, `:help`, `:quit`.
        An empty input uses DEFAULT_MODEL_CODE. Goes on while stdin is a terminal."""
        options: Dict[str, Any] = {
            "k": k, "max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p,
            "seed": seed, "prompt_template": self.prompt_template, "verify_enabled": bool(verify),
            "work_dir": os.fspath(work_dir) if work_dir is not None else "",
        }
        if verify:
            options["verify"] = _verify_options(device, profile, 0, True)
        sys.stdout.flush()
        sys.stderr.flush()
        self._engine.run_repl(json.dumps(options))
