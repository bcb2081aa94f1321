"""`python -m kernelllm`: the REPL (paste a PyTorch module, press Ctrl+D, get verified Triton
candidates); the same C++ REPL as `kernelllm repl`, through KernelLLM.run_repl."""
import argparse
import sys

from . import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, HF_MODEL, KernelLLM


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m kernelllm", description=__doc__)
    ap.add_argument("--model", default=HF_MODEL,
                    help="model directory, or an HF id (org/name) from the HF cache, downloaded there first when missing")
    ap.add_argument("--revision", default=None, help="branch, tag or commit of an HF id --model (default main)")
    ap.add_argument("--offline", action="store_true", help="never download (as HF_HUB_OFFLINE=1)")
    ap.add_argument("--device", default=None, help="generation device: cpu, cuda, or auto (default)")
    ap.add_argument("-k", type=int, default=10, help="samples per module (:k N changes it)")
    ap.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE, help="sampling temperature (:temp T changes it)")
    ap.add_argument("--top-p", type=float, default=DEFAULT_TOP_P, help="nucleus sampling mass in (0, 1]")
    ap.add_argument("--seed", type=int, default=None, help="sampling seed for every module (default: random)")
    ap.add_argument("--max-new-tokens", type=int, default=2048, help="most tokens generated per sample")
    ap.add_argument("--verify-device", default=None, help="verification device: cpu, cuda, cuda:N (default: auto)")
    ap.add_argument("--profile", default="strict", choices=["strict", "kernelbench"], help="verifier profile")
    ap.add_argument("--no-verify", action="store_true", help="only generate and extract")
    ap.add_argument("--work-dir", default=None, help="where each module's files go (default: a new temp dir)")
    args = ap.parse_args()
    try:
        model = KernelLLM(args.model, device=args.device, revision=args.revision, offline=args.offline)
        model.run_repl(args.max_new_tokens, k=args.k, temperature=args.temperature, top_p=args.top_p,
                       seed=args.seed, verify=not args.no_verify, device=args.verify_device,
                       profile=args.profile, work_dir=args.work_dir)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"kernelllm: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
