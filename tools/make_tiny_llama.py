"""Tiny random Llama-3 checkpoints (transformers LlamaForCausalLM, seeded) and HF golden
outputs for the C++ parity tests. Nothing is downloaded.

write_all(out_dir, tokenizer_dir) writes one directory per model under out_dir:
  config.json, generation_config.json, model.safetensors (or shards + index), tokenizer files,
  golden.safetensors  float32 logits: prompt{i}_logits [len_i, vocab] for every prompt position,
                      decode{i}_logits [64, vocab], row t = the logits that chose greedy token t
                      (row 0 is the last prompt position; later rows come from the KV-cached step)
  golden.json         {"prompts": [[ids]...], "greedy": [[64 ids]...], "dtype": ..., "sdpa_max_abs_diff": x}
For bf16 models the same outputs are also written for HF running in fp32 on the bf16 weights
(the math our CPU engine does): f32ref_prompt{i}_logits, f32ref_decode{i}_logits and
"greedy_f32ref" — a tight comparison beside the loose one against HF's own bf16 run.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
VOCAB = 128256
PROMPT_LENGTHS = (1, 7, 33, 100)
DECODE_TOKENS = 64
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

# name: (dtype, num_kv_heads, num_layers, rope_scaling, tied, max_shard_size)
MODELS = {
    "tiny-f32-gqa": (torch.float32, 2, 3, LLAMA3_ROPE, False, None),
    "tiny-bf16-sharded": (torch.bfloat16, 2, 2, LLAMA3_ROPE, False, "6MB"),
    "tiny-f32-tied": (torch.float32, 4, 2, None, True, None),
}


def _config(num_kv_heads: int, num_layers: int, rope_scaling: dict | None, tied: bool) -> LlamaConfig:
    rope = {"rope_type": "default", "rope_theta": 500000.0}
    if rope_scaling is not None:
        rope = dict(rope_scaling, rope_theta=500000.0)
    return LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        rope_parameters=rope,
        tie_word_embeddings=tied,
        bos_token_id=128000,
        eos_token_id=[128001, 128008, 128009],
        attn_implementation="eager",
    )


def _randomize(model: LlamaForCausalLM, seed: int) -> None:
    # HF's default init (std 0.02, norms = 1) gives nearly flat logits; larger weights and
    # non-unit norm weights make every op visible in the logits.
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(0.15 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def _legacy_rope_config(config_path: Path, rope_scaling: dict | None) -> None:
    # KernelLLM's config.json (Llama-3.1) spells RoPE as rope_theta + rope_scaling; write that
    # form so the tests read what real checkpoints hold. transformers reads it back the same.
    cfg = json.loads(config_path.read_text())
    cfg.pop("rope_parameters", None)
    cfg["rope_theta"] = 500000.0
    cfg["rope_scaling"] = rope_scaling
    cfg.setdefault("torch_dtype", cfg.get("dtype"))
    config_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def _golden(model: LlamaForCausalLM, prompts: list[list[int]], prefix: str = "") -> tuple[dict, list[list[int]], float]:
    tensors: dict[str, torch.Tensor] = {}
    greedy: list[list[int]] = []
    sdpa_diff = 0.0
    with torch.no_grad():
        for i, ids in enumerate(prompts):
            x = torch.tensor([ids])
            model.set_attn_implementation("eager")
            eager = model(x).logits[0]
            model.set_attn_implementation("sdpa")
            sdpa = model(x).logits[0]
            model.set_attn_implementation("eager")
            sdpa_diff = max(sdpa_diff, (eager.float() - sdpa.float()).abs().max().item())
            tensors[f"{prefix}prompt{i}_logits"] = eager.float().contiguous()

            out = model(x, use_cache=True)
            past = out.past_key_values
            step_logits = out.logits[0, -1]
            rows, toks = [], []
            for _ in range(DECODE_TOKENS):
                rows.append(step_logits.float())
                tok = int(torch.argmax(step_logits).item())
                toks.append(tok)
                out = model(torch.tensor([[tok]]), past_key_values=past, use_cache=True)
                past = out.past_key_values
                step_logits = out.logits[0, -1]
            tensors[f"{prefix}decode{i}_logits"] = torch.stack(rows).contiguous()
            greedy.append(toks)
    return tensors, greedy, sdpa_diff


def write_model(out_dir: Path, name: str, tokenizer_dir: Path | None, seed: int) -> None:
    dtype, kv_heads, layers, rope_scaling, tied, shard = MODELS[name]
    torch.manual_seed(seed)
    model = LlamaForCausalLM(_config(kv_heads, layers, rope_scaling, tied))
    _randomize(model, seed)
    model = model.to(dtype).eval()
    d = out_dir / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    kwargs = {"safe_serialization": True}
    if shard is not None:
        kwargs["max_shard_size"] = shard
    model.save_pretrained(d, **kwargs)
    _legacy_rope_config(d / "config.json", rope_scaling)
    (d / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]}, indent=2) + "\n")
    if tokenizer_dir is not None and tokenizer_dir.is_dir():
        for f in tokenizer_dir.iterdir():
            if f.is_file() and f.name in TOKENIZER_FILES:
                shutil.copy(f, d / f.name)

    gen = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(0, 128000, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]
    # The references run on the checkpoint as transformers loads it (what Meta's script does),
    # not on the in-memory model: `.to(bf16)` would also round the RoPE inv_freq buffer, which
    # from_pretrained keeps in fp32.
    del model
    reloaded = LlamaForCausalLM.from_pretrained(d, dtype=dtype).eval()
    tensors, greedy, sdpa_diff = _golden(reloaded, prompts)
    extra = {}
    if dtype != torch.float32:
        upcast = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        upcast, greedy_f32ref, _ = _golden(upcast, prompts, prefix="f32ref_")
        tensors.update(upcast)
        extra["greedy_f32ref"] = greedy_f32ref
    save_file(tensors, str(d / "golden.safetensors"))
    meta = {
        **extra,
        "dtype": str(dtype).removeprefix("torch."),
        "prompts": prompts,
        "greedy": greedy,
        "sdpa_max_abs_diff": sdpa_diff,
        "logit_std": float(tensors["prompt3_logits"].std().item()),
    }
    (d / "golden.json").write_text(json.dumps(meta) + "\n")


def write_all(out_dir: Path, tokenizer_dir: Path | None = None) -> None:
    # transformers warns that original_max_position_embeddings (8192) exceeds the tiny
    # max_position_embeddings; that is intended (llama3 scaling applies at every position).
    hf_logging.set_verbosity_error()
    out_dir.mkdir(parents=True, exist_ok=True)
    for seed, name in enumerate(MODELS):
        write_model(out_dir, name, tokenizer_dir, 1234 + 17 * seed)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--tokenizer-dir", type=Path, default=None)
    a = ap.parse_args()
    write_all(a.out, a.tokenizer_dir)
