"""`python -m kernelllm`: the interactive REPL (paste a PyTorch module, get Triton back)."""
import argparse
import sys

from . import HF_MODEL, KernelLLM


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m kernelllm", description=__doc__)
    ap.add_argument("--model", default=HF_MODEL, help="model directory or HF id in the local HF cache")
    ap.add_argument("--device", default=None, help="cpu, cuda, or auto (default)")
    ap.add_argument("--max-new-tokens", type=int, default=2048, help="most tokens generated per module")
    args = ap.parse_args()
    try:
        model = KernelLLM(args.model, device=args.device)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"kernelllm: {e}", file=sys.stderr)
        return 1
    model.run_repl(args.max_new_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
