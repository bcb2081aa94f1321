#!/usr/bin/env python3
"""Makes all test data in one directory: the toy Llama-3-style tokenizer, tiny random
Llama-3 checkpoints, and HF golden outputs (ids, logits) the C++ parity tests compare with.

Nothing is downloaded: the tokenizer is trained with `tokenizers`, the models are random
`transformers` LlamaForCausalLM instances. Re-running with the same --out is a no-op when
the data is already complete for this script version (a stamp file records it).
"""
import argparse
import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_tiny_llama  # noqa: E402
import make_toy_tokenizer  # noqa: E402


def _stamp() -> str:
    h = hashlib.sha256()
    for name in ("make_test_data.py", "make_toy_tokenizer.py", "make_tiny_llama.py"):
        h.update((HERE / name).read_bytes())
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, type=Path, help="output directory")
    args = ap.parse_args()
    out: Path = args.out
    stamp_file = out / "STAMP"
    stamp = _stamp()
    if stamp_file.exists() and stamp_file.read_text() == stamp:
        print(f"test data in {out} is up to date")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    make_toy_tokenizer.write_all(out / "tokenizer")
    make_tiny_llama.write_all(out / "models", tokenizer_dir=out / "tokenizer")
    stamp_file.write_text(stamp)
    print(f"wrote test data to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
