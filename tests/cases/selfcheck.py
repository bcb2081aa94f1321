"""Case authors' sanity check, NOT the verifier: runs candidates that return outputs in a
child process each (CPU tensors; set TRITON_INTERPRET=1 for CPU) and prints, per trial,
shape match and error against an fp64 reference, next to the fp32 reference's own error.
Usage: python3 tests/cases/selfcheck.py [--expect correct,wrong_output] [--multishape] [CASE ...]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

CASES = Path(__file__).resolve().parent
SAFE = {"correct", "wrong_output", "wrong_shape"}
SAFE_RULES = {"precision_downgrade", "zeros_pass", "closed_form", "no_triton_kernel"}


def header(path: Path) -> dict[str, str]:
    fields = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        key, _, value = line[1:].partition(":")
        fields[key.strip()] = value.strip()
    return fields


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def init_args(raw):
    if len(raw) == 2 and isinstance(raw[0], (list, tuple)) and isinstance(raw[1], dict):
        return list(raw[0]), raw[1]
    return list(raw), {}


def check_one(problem_path: Path, case_path: Path, scale: float) -> dict:
    import torch

    problem = load(problem_path, "problem")
    if scale != 1.0:
        for key, value in vars(problem).items():
            if isinstance(value, int) and not key.startswith("_") and value > 8 and key != "num_classes":
                setattr(problem, key, max(1, int(value * scale)) | 1)
    candidate = load(case_path, "candidate")
    args, kwargs = init_args(problem.get_init_inputs())
    torch.manual_seed(7)
    ref_model = problem.Model(*args, **kwargs)
    torch.manual_seed(7)
    new_model = candidate.ModelNew(*args, **kwargs)
    trials = []
    for trial, dist in enumerate(["normal", "normal", "heavy_tailed"]):
        torch.manual_seed(100 + trial)
        inputs = problem.get_inputs()
        if dist == "heavy_tailed":
            inputs = [x * torch.distributions.StudentT(2.0).sample(x.shape).abs() if x.is_floating_point() else x
                      for x in inputs]
        ref32 = ref_model(*[x.clone() for x in inputs])
        ref64 = ref_model.double()(*[x.double() if x.is_floating_point() else x for x in inputs])
        ref_model.float()
        out = new_model(*[x.clone() for x in inputs])
        row = {"trial": trial, "dist": dist, "shape_ok": tuple(out.shape) == tuple(ref32.shape)}
        if row["shape_ok"]:
            scale64 = ref64.abs().max().item() or 1.0
            row["err_vs_fp64"] = (out.double() - ref64).abs().max().item() / scale64
            row["ref_err_vs_fp64"] = (ref32.double() - ref64).abs().max().item() / scale64
            row["kernelbench_allclose"] = bool(torch.allclose(out, ref32, atol=1e-2, rtol=1e-2))
        trials.append(row)
    return {"trials": trials}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--expect", default="correct,wrong_output,wrong_shape")
    parser.add_argument("--multishape", action="store_true", help="also run with the size globals x0.5 (odd)")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.one:
        print(json.dumps(check_one(Path(ns.one[0]), Path(ns.one[1]), float(ns.one[2]))))
        return 0
    wanted = set(ns.expect.split(","))
    paths = [Path(c).resolve() for c in ns.cases] or sorted(CASES.glob("*/*.py"))
    failures = 0
    for path in paths:
        if path.parent.name in ("problems", "kernelbench_agreement") or path.name == "selfcheck.py":
            continue
        head = header(path)
        expect = head.get("expect", "")
        if expect not in wanted or (expect not in SAFE and head.get("rule") not in SAFE_RULES):
            continue
        problem = CASES / "problems" / f"{path.parent.name}.py"
        for scale in ([1.0, 0.5] if ns.multishape else [1.0]):
            r = subprocess.run([sys.executable, __file__, "--one", str(problem), str(path), str(scale)],
                               capture_output=True, text=True, timeout=300)
            label = f"{path.parent.name}/{path.name} [{expect}{' x' + str(scale) if scale != 1.0 else ''}]"
            if r.returncode != 0:
                failures += expect == "correct"
                print(f"{label}: ERROR {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
                continue
            print(f"{label}: {r.stdout.strip()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
