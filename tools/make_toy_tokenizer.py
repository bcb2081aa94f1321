#!/usr/bin/env python3
"""Makes a toy Llama-3-style tokenizer and HF golden outputs for the C++ tokenizer tests.

A byte-level BPE (~1.5k tokens) is trained with `tokenizers` on a small built-in corpus,
using Llama-3's exact pre-tokenizer (Split with its regex, Isolated, then ByteLevel without
regex), `ignore_merges: true`, a ByteLevel decoder, the 256 Llama-3.1 added tokens at ids
128000..128255 and the BOS TemplateProcessing post-processor. `tokenizers` numbers added
tokens from the model's vocab size, so ids between the trained vocab and 128000 are filled
with unreachable filler tokens (each starts with U+E000, a char no byte-level pre-token can
contain). golden.json holds `tokenizers` ids and decodes for a varied corpus.
"""
import argparse
import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
FIRST_ADDED_ID = 128000
NUM_ADDED = 256
FILLER_PREFIX = "\ue000filler_"
TRAIN_VOCAB_SIZE = 1500


def llama31_added_tokens() -> list[str]:
    """The 256 Llama-3.1 special tokens in id order (128000..128255)."""
    named = {
        0: "<|begin_of_text|>",
        1: "<|end_of_text|>",
        2: "<|reserved_special_token_0|>",
        3: "<|reserved_special_token_1|>",
        4: "<|finetune_right_pad_id|>",
        5: "<|reserved_special_token_2|>",
        6: "<|start_header_id|>",
        7: "<|end_header_id|>",
        8: "<|eom_id|>",
        9: "<|eot_id|>",
        10: "<|python_tag|>",
    }
    out = []
    reserved = 3
    for i in range(NUM_ADDED):
        if i in named:
            out.append(named[i])
        else:
            out.append(f"<|reserved_special_token_{reserved}|>")
            reserved += 1
    assert out[-1] == "<|reserved_special_token_247|>"
    return out


EXAMPLE_MODULE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


def get_inputs():
    return [torch.randn(1, 128).cuda(), torch.randn(1, 128).cuda()]


def get_init_inputs():
    return []
'''

EXAMPLE_TRITON = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def triton_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    assert x.is_cuda and y.is_cuda
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n_elements = out.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
    add_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=1024)
    return out


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return triton_add(a, b)
'''

USER_MODULE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix multiply, then GELU and a row-wise softmax."""

    def __init__(self, in_features: int, out_features: int):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = torch.nn.functional.gelu(x)
        return torch.softmax(x, dim=1)


batch_size = 128
in_features = 100
out_features = 10


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''


def kernelllm_style_prompt(user_module: str) -> str:
    """A prompt of the same shape as KernelLLM's raw-completion template (our own wording)."""
    return (
        "\n<|begin_of_text|>You replace the PyTorch operators of a given architecture with "
        "custom Triton kernels to make it faster.\n\n"
        "You may replace any subset of the operators, fuse several into one kernel "
        "(for example matmul+relu) or change the algorithm (for example an online softmax).\n\n"
        "Here is an example of the syntax. The given architecture is:\n```\n"
        + EXAMPLE_MODULE
        + "```\nThe same architecture with a custom Triton kernel:\n```\n"
        + EXAMPLE_TRITON
        + "```\nYou are given the following architecture:\n```\n"
        + user_module
        + "```\n\nOptimize the architecture named Model with custom Triton operators. "
        "Name the optimized architecture ModelNew and output it in code blocks. "
        "Write real, complete code, and no testing code!\n"
    )


TRAIN_TEXTS = [
    EXAMPLE_MODULE,
    EXAMPLE_TRITON,
    USER_MODULE,
    kernelllm_style_prompt(USER_MODULE),
    "The quick brown fox jumps over the lazy dog. It's a sunny day; we'll go outside, "
    "and they're happy. I'm sure you've seen it, haven't you? She'd say: DON'T PANIC!\n",
    "Kernels fuse elementwise operations, reductions and matrix multiplications so that "
    "memory traffic is reduced. The bandwidth of HBM bounds the decode step of a language "
    "model: every weight is read once per generated token.\n",
    "def softmax(x):\n\tm = x.max(dim=-1, keepdim=True).values\n\te = torch.exp(x - m)\n"
    "\treturn e / e.sum(dim=-1, keepdim=True)\n",
    "for i in range(10):\n    if i % 2 == 0:\n        print(f\"{i} is even\")\n"
    "    else:\n        print(f'{i} is odd')\r\n",
    "Numbers: 0 1 12 123 1234 12345 3.14159 2.71828 1e-5 0x7fff 65536 4096 128000 -42\n",
    "Unicode: café naïve résumé Straße façade Ångström ĳ œuvre. Ελληνικά κείμενα. "
    "Русский текст. 日本語のテキスト、中文文本。한국어 텍스트. emoji 🙂🚀🔥 ✓ ≤ ≥ → ∑ ∫ √\n",
    "Tensor shapes: [batch, seq, heads, head_dim] -> (B, T, H, D); x.view(B, T, H, D)"
    ".transpose(1, 2).contiguous()\n",
    "@triton.autotune(configs=[triton.Config({'BLOCK_M': 128, 'BLOCK_N': 64}, num_warps=4)],"
    " key=['M', 'N'])\n@triton.jit\ndef matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K):\n"
    "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
    "    acc += tl.dot(a, b)\n",
]


def train_corpus() -> list[str]:
    # Repeat so that pair frequencies are high enough for ~1.5k merges on a small text.
    return TRAIN_TEXTS * 4


GOLDEN_TEXTS = [
    "",
    " ",
    "a",
    "Hello, world!",
    "hello world",
    "   leading spaces and trailing   ",
    "tabs\tbetween\t\twords\t",
    "windows\r\nline\r\nendings\r\n\r\n",
    "blank\n\n\nlines\n \n  \n",
    "mixed \t\n \r\n\t  whitespace   \n",
    "    indented\n        more\n",
    "It's they're we've I'm you'll he'd don't",
    "IT'S THEY'RE WE'VE I'M YOU'LL HE'D DON'T 'S 'LL 'Re 'vE",
    "'s's'S''ll'LL'",
    "x'ſ and 'ſ",
    "0 1 12 123 1234 12345 123456 1234567 12345678901234567890",
    "3.14159 -2.5e-10 1_000_000 0xDEADBEEF 0b1010 v1.2.3",
    "١٢٣ ٤٥٦٧ 一二三 ½ ² ⅷ",
    "café naïve résumé Straße ﬁ ĳ",
    "e\u0301 a\u0308 n\u0303 combining marks: a\u0301\u0302\u0303",
    "日本語のテキストと中文文本，한국어。",
    "emoji 🙂🚀🔥👩‍💻🇫🇷 and 1️⃣ keycap",
    "Ελληνικά Русский עברית العربية हिन्दी",
    "math ∑∫√≤≥→ ∀x∈ℝ",
    "nbsp\u00a0here, nel\u0085there, ideographic\u3000space, mvs\u180eend, zwsp\u200bend",
    "line\u2028separator para\u2029graph vt\x0bff\x0c",
    "<|begin_of_text|>",
    "text<|eot_id|>more text",
    "a<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant",
    "<|begin_of_text|><|begin_of_text|>",
    "partial <|begin_of_text| and <|eot_id> and <|reserved_special_token_250|>",
    "nested <<|eom_id|>|> and <|python_tag|>print(1)<|eom_id|>",
    "<|reserved_special_token_0|><|reserved_special_token_247|><|finetune_right_pad_id|>",
    "end<|end_of_text|>",
    "!!!??? ... --- *** ### $$$ %%% ^^^ &&& ((( ))) {{{ }}}",
    "punct then newline:\n!!\n\n??\r\n",
    "a  b   c    d     e",
    "trailing newline\n",
    "    ",
    "\n",
    "\r\n",
    "\t",
    "x = tl.load(x_ptr + offsets, mask=mask, other=0.0)",
    "self.linear = nn.Linear(in_features, out_features)",
    "longlonglonglonglonglonglonglonglonglonglonglonglongword",
    "a" * 300,
    " " * 200 + "x",
    "\n" * 50,
    "🙂" * 40,
    EXAMPLE_MODULE,
    EXAMPLE_TRITON,
    USER_MODULE,
    kernelllm_style_prompt(USER_MODULE),
    "def f(x):\n\treturn x ** 2  # square\n\n\nprint(f(3))\n",
    "Mixed: café123abc_DEF ghi-jkl/mno\\pqr",
    "quotes \"double\" 'single' `back` «guillemets» „low“",
]


def build_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=TRAIN_VOCAB_SIZE,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator(train_corpus(), trainer)

    spec = json.loads(tok.to_str())
    model = spec["model"]
    model["ignore_merges"] = True
    model["byte_fallback"] = False
    vocab: dict[str, int] = model["vocab"]
    trained = len(vocab)
    assert sorted(vocab.values()) == list(range(trained)), "trained vocab ids are not dense"
    # `tokenizers` gives added tokens ids from the model's vocab size on, so fill the gap.
    for i in range(trained, FIRST_ADDED_ID):
        vocab[f"{FILLER_PREFIX}{i}"] = i
    names = llama31_added_tokens()
    spec["added_tokens"] = [
        {
            "id": FIRST_ADDED_ID + i,
            "content": name,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, name in enumerate(names)
    ]
    bos = names[0]
    spec["post_processor"] = {
        "type": "Sequence",
        "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {
                "type": "TemplateProcessing",
                "single": [
                    {"SpecialToken": {"id": bos, "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}},
                ],
                "pair": [
                    {"SpecialToken": {"id": bos, "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}},
                    {"SpecialToken": {"id": bos, "type_id": 1}},
                    {"Sequence": {"id": "B", "type_id": 1}},
                ],
                "special_tokens": {bos: {"id": bos, "ids": [FIRST_ADDED_ID], "tokens": [bos]}},
            },
        ],
    }
    out = Tokenizer.from_str(json.dumps(spec))
    for i, name in enumerate(names):
        got = out.token_to_id(name)
        assert got == FIRST_ADDED_ID + i, f"{name}: expected id {FIRST_ADDED_ID + i}, found {got}"
    assert out.get_vocab_size() == FIRST_ADDED_ID + NUM_ADDED
    return out


def golden(tok: Tokenizer) -> dict:
    cases = []
    for text in GOLDEN_TEXTS:
        entry = {"text": text}
        for key, add in (("ids", True), ("ids_no_special", False)):
            ids = tok.encode(text, add_special_tokens=add).ids
            entry[key] = ids
        entry["decoded"] = tok.decode(entry["ids"], skip_special_tokens=False)
        entry["decoded_skip_special"] = tok.decode(entry["ids"], skip_special_tokens=True)
        cases.append(entry)
    # Decode-only cases: byte tokens that form invalid or truncated UTF-8, a filler token
    # (decoded from its raw UTF-8 because U+E000 is no byte-level char), special tokens.
    vocab = tok.get_vocab()
    byte_ids = {ch: vocab[ch] for ch in pre_tokenizers.ByteLevel.alphabet()}
    b2u = _bytes_to_unicode()
    def byte_id(b: int) -> int:
        return byte_ids[b2u[b]]
    id_lists = [
        [byte_id(0xE2), byte_id(0x82), byte_id(0xAC)],
        [byte_id(0xE2), byte_id(0x82)],
        [byte_id(0xE2), FIRST_ADDED_ID + 9, byte_id(0x82), byte_id(0xAC)],
        [byte_id(0xFF), byte_id(0x41), byte_id(0xC0), byte_id(0x80)],
        [byte_id(0xF0), byte_id(0x9F), byte_id(0x99), byte_id(0x41)],
        [byte_id(0xED), byte_id(0xA0), byte_id(0x80)],
        [byte_id(0xF4), byte_id(0x90), byte_id(0x80), byte_id(0x80)],
        [byte_id(0xE0), byte_id(0x80), byte_id(0xBF)],
        [FIRST_ADDED_ID - 1, byte_id(0x41), FIRST_ADDED_ID - 2],
        [FIRST_ADDED_ID, FIRST_ADDED_ID + 1, FIRST_ADDED_ID + 255],
        [],
    ]
    decode_cases = [
        {
            "ids": ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        }
        for ids in id_lists
    ]
    return {"encode_cases": cases, "decode_cases": decode_cases}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable char map, as `tokenizers`' ByteLevel uses."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def check_transformers_agrees(out_dir: Path, tok: Tokenizer) -> None:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(out_dir))
    prompt = kernelllm_style_prompt(USER_MODULE)
    expected = tok.encode(prompt).ids
    found = hf(prompt)["input_ids"]
    if found != expected:
        raise RuntimeError(f"transformers and tokenizers disagree on the prompt: {found[:20]} vs {expected[:20]}")


def write_all(out_dir: Path) -> None:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    assert set(_bytes_to_unicode().values()) == set(pre_tokenizers.ByteLevel.alphabet())
    tok.save(str(out_dir / "tokenizer.json"))
    names = llama31_added_tokens()
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": names[0],
        "eos_token": names[1],
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
        "model_input_names": ["input_ids", "attention_mask"],
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special = {"bos_token": names[0], "eos_token": names[1]}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    check_transformers_agrees(out_dir, tok)
    gold = golden(tok)
    (out_dir / "golden.json").write_text(json.dumps(gold, ensure_ascii=False, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, type=Path, help="output directory")
    args = ap.parse_args()
    write_all(args.out)
    print(f"wrote toy tokenizer to {args.out}")


if __name__ == "__main__":
    main()
