"""A worker's start on its GPU before its greeting: its CUDA context, the profiler's start-up and
the first use of the kernels every problem's sets, checksums and comparisons launch (a judge's),
or of Triton's compiler (a candidate's), on a tiny stand-in problem, before any problem or
candidate code runs in the process.

Why: a fresh process pays for each first use. On an idle H200, a judge's first load_problem took
~220 ms where a second one in the same process took ~10 ms (27 level-1 problems): CUDA loads
kernels lazily, at their first launch. A candidate's first Triton kernel took 1.4-2.0 s (Triton's
driver helper built with the C compiler, the compiler's start-up, the launcher of its argument
types) and 52-62 ms after a compile of another kernel of the same argument types. Paid there, it
was paid under the GPU's lock, which every timer waits out or stops (docs/verification.md, Worker
start). The orchestrator awaits a greeting without holding the lock, as it does the context's
making: what runs here is the same few-microsecond kernels and a one-off module load, not work
whose time anyone reads."""
from __future__ import annotations

from typing import Any, List

import torch

from . import accounting, compare, inputs


def start_device(device: str) -> None:
    """The CUDA context on `device`, and the profiler's start-up (the profiled run, later, holds
    the GPU to itself)."""
    torch.cuda.set_device(device)
    torch.empty(1, device=device)
    accounting.warm_profiler(device)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


class _StandIn:
    """A problem of the usual kinds of inputs: floating tensors, an index tensor, a scalar."""

    @staticmethod
    def get_inputs() -> List[Any]:
        return [torch.randn(8, 16), torch.rand(16), torch.randint(0, 4, (8,)), 3]


def warm_inputs(device: str) -> None:
    """Sets made as a problem's are (inputs.Recipe, every distribution), checksummed, copied to the
    host, and the NaN fill of a candidate's run."""
    recipe = inputs.Recipe(_StandIn, inputs.PRECISIONS["fp32"], device, on_device=True)
    for seed, dist in enumerate(inputs.DISTRIBUTIONS):
        args = recipe.make(seed, dist)
        inputs.combine(inputs.checksums(args))
        for a in args:
            if isinstance(a, torch.Tensor):
                a.to("cpu", copy=True)
    torch.full((1024,), float("nan"), device=device)
    _sync(device)


def warm_compare(device: str) -> None:
    """A judge's comparison of an fp32 output with its fp64 reference, as compare does it: the
    statistics, the tolerance, the trivial outputs it would pass, the per-element zero check."""
    with torch.no_grad():
        a = torch.randn(32, 32, device=device)
        ref = torch.relu(a) @ a
        ref64 = ref.double()
        checker = compare.Checker("strict", ref, ref64, "v0")
        compare.stats(ref, ref, ref64, checker.ref_norm_error)
        checker.passes(ref)
        compare.zero_passes_elementwise(checker)
        compare.baselines_passing(checker)
    _sync(device)


def warm_triton(device: str) -> None:
    """Triton's driver helper (built into this process's own cache) and one compile and launch of
    a kernel of the commonest argument types in level-1 candidates (two fp32 pointers, an int):
    the compiler's start-up, and that launcher."""
    from . import warm_kernel

    x = torch.zeros(256, device=device)
    y = torch.empty_like(x)
    warm_kernel.add_one[(1,)](x, y, x.numel(), BLOCK=256)
    _sync(device)


def before_greeting(device: str, kind: str) -> str:
    """The worker's start on `device` (a "cuda:N"; anything else: nothing). Never raises: a
    failure shows again, and is reported, where the worker needs the GPU; the note returned says
    what failed here (empty when nothing did)."""
    if not device.startswith("cuda"):
        return ""
    steps = [start_device, warm_inputs] + ([warm_compare] if kind == "judge" else [warm_triton])
    for step in steps:
        try:
            step(device)
        except Exception as e:
            return f"{step.__name__} on {device} before the greeting: {type(e).__name__}: {e}"[:400]
    return ""
