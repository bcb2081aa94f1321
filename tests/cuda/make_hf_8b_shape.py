"""Writes a random Llama model with the full Llama-3.1-8B layer shapes but 2 layers (bf16,
llama3 RoPE, untied lm_head) and HF transformers' logits for a 300-token prompt, for
hf_8b_shape_test.cpp. Needs a CUDA GPU. Usage: make_hf_8b_shape.py OUT_DIR

OUT_DIR/model: config.json + model.safetensors (bf16). OUT_DIR/hf_logits.safetensors:
input_ids I32 [300]; logits_bf16 / logits_f32 F32 [64, 128256]: the last 64 positions from HF
in bf16 (sdpa) and from the same weights upcast to fp32.
"""
import json
import os
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
        # .to() rounded the RoPE inverse frequencies (a buffer) to bf16; from_pretrained keeps
        # them fp32, so rebuild the rotary module as a loaded checkpoint has it.
        model.model.rotary_emb = LlamaRotaryEmbedding(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.02)
    # Written to a directory of this process's own, then moved into place file by file: two test
    # passes that make the fixture at once (ctest in parallel) never read each other's half-done
    # files (a second pass once found the config already rewritten).
    tmp = out / f".tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp / "model", safe_serialization=True)
    # Spell RoPE as Llama-3.1 checkpoints do (rope_theta + rope_scaling), which ModelConfig reads.
    cfg_path = tmp / "model" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = rope
    cfg.setdefault("torch_dtype", cfg.get("dtype"))
    cfg_path.write_text(json.dumps(cfg, indent=2))
    ids = torch.randint(0, 128000, (1, 300), device="cuda")
    with torch.no_grad():
        bf16 = model(ids).logits[0, -64:].float()
        f32 = model.float()(ids).logits[0, -64:].float()
    save_file({"input_ids": ids[0].to(torch.int32).cpu().contiguous(), "logits_bf16": bf16.cpu().contiguous(),
               "logits_f32": f32.cpu().contiguous()}, str(tmp / "hf_logits.safetensors"))
    (out / "model").mkdir(exist_ok=True)
    for f in (tmp / "model").iterdir():
        os.replace(f, out / "model" / f.name)
    os.replace(tmp / "hf_logits.safetensors", out / "hf_logits.safetensors")
    shutil.rmtree(tmp, ignore_errors=True)
    print("bf16 vs f32 HF rel err", ((bf16 - f32).norm() / f32.norm()).item())


if __name__ == "__main__":
    main()
