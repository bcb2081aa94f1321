"""HF transformers peer for `kernelllm bench --peer hf`: times the same shape and prompt the
way Meta's kernelllm.py runs (LlamaForCausalLM, eager attention, model.generate), with random
weights made directly on the device in the bench dtype. Writes one JSON file (--out) that
kernelllm merges into its own report under "peer". Not a test; numbers are timings.

Decode per n: one generate() of a batch of n copies of the prompt with exactly --new-tokens
new tokens (greedy, or sampled as --temperature / --top-p / --top-k say; eos ignored); decode
ms/step = (generate time - prefill time of that batch) / (new tokens - 1), where the prefill of
the same batch is timed separately.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn) -> tuple[float, object]:
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return (time.perf_counter() - t0) * 1e3, out


def build_model(config_path: str, dtype: torch.dtype, device: torch.device, seed: int) -> LlamaForCausalLM:
    with open(config_path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg.pop("architectures", None)
    cfg.pop("torch_dtype", None)
    config = LlamaConfig(**cfg)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # build in the bench dtype: no fp32 copy of 8B on the device
    try:
        with torch.device(device):
            model = LlamaForCausalLM._from_config(config, attn_implementation="eager")
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    model.generation_config.eos_token_id = None
    return model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="config.json of the shape")
    ap.add_argument("--prompt-ids", required=True, help="JSON list of prompt token ids")
    ap.add_argument("--new-tokens", type=int, required=True)
    ap.add_argument("--n", required=True, help="comma-separated batch sizes")
    ap.add_argument("--dtype", choices=("bf16", "f16"), default="bf16")
    ap.add_argument("--device", default="cuda:0", help="cuda:N or cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy; else sampled")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0, help="0 keeps all")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    device = torch.device(args.device)
    with open(args.prompt_ids, encoding="utf-8") as f:
        prompt = torch.tensor(json.load(f), dtype=torch.long, device=device).unsqueeze(0)
    ns = [int(x) for x in args.n.split(",") if x]
    if args.new_tokens < 2 or not ns or min(ns) < 1:
        print("peer_hf: expected --new-tokens >= 2 and --n of positive ints", file=sys.stderr)
        return 2

    model = build_model(args.config, dtype, device, args.seed)
    new = args.new_tokens

    # HF's sampler: temperature, top-k and top-p logits processors, softmax, torch.multinomial.
    sampling = (
        {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k or None}
        if args.temperature > 0
        else {}
    )

    def generate(batch: torch.Tensor, tokens: int):
        return model.generate(
            batch,
            attention_mask=torch.ones_like(batch),
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=args.temperature > 0,
            **sampling,
            num_beams=1,
            pad_token_id=0,
        )

    decode = []
    prefills = []
    with torch.inference_mode():
        for n in ns:
            batch = prompt.expand(n, -1).contiguous()
            for _ in range(args.warmup):
                model(batch)
                generate(batch, min(new, 4))
            prefill_ms, _ = timed(device, lambda: model(batch, logits_to_keep=1))
            total_ms, out = timed(device, lambda: generate(batch, new))
            generated = out.shape[1] - batch.shape[1]
            step_ms = max(total_ms - prefill_ms, 0.0) / (generated - 1)
            prefills.append(prefill_ms)
            decode.append({
                "n": n,
                "new_tokens": generated,
                "prefill_ms": prefill_ms,
                "generate_ms": total_ms,
                "ms_per_step": step_ms,
                "tok_s_per_seq": 1e3 / step_ms if step_ms > 0 else None,
                "tok_s_aggregate": n * 1e3 / step_ms if step_ms > 0 else None,
                "end_to_end_tok_s_aggregate": n * generated * 1e3 / total_ms,
            })

    draws = (
        f"sampled (temperature {args.temperature}, top_p {args.top_p}, top_k {args.top_k})"
        if args.temperature > 0
        else "greedy"
    )
    result = {
        "peer": "hf-transformers",
        "method": f"model.generate on a batch of n copies of the prompt, {draws}, eos ignored; "
        "ms_per_step = (generate - prefill of that batch) / (new_tokens - 1)",
        "attn_implementation": "eager",
        "dtype": args.dtype,
        "device": args.device,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "torch_cuda": torch.version.cuda,
        },
        "prompt_tokens": int(prompt.shape[1]),
        "prefill_ms": statistics.median(prefills),
        "decode": decode,
        "command": sys.argv,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
