# expect: correct
# multishape: fail
# why: red team on the multi-shape check in the candidate's own process: right at the problem's 16x256, brittle elsewhere (a hard-coded grid and output), and at any other size its process answers the run with an `environment_error` of its own choosing (it wraps the worker's input checksums). Counted as no result, the check reported nothing and selection treated it as passing; an error the candidate's process reports after its code ran fails the variant.
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

_inputs = sys.modules.get("kernelllm.worker.inputs")
_protocol = sys.modules.get("kernelllm.worker.protocol")
if _inputs is not None and _protocol is not None:
    _checksums = _inputs.checksums

    def _refuse_other_sizes(args, *a, **k):
        for t in args:
            if isinstance(t, torch.Tensor) and tuple(t.shape) != (16, 256):
                raise _protocol.WorkerError("environment_error", "the GPU driver failed (not really)")
        return _checksums(args, *a, **k)

    _inputs.checksums = _refuse_other_sizes


@triton.jit
def relu_4096_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs), 0.0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.zeros(16, 256, dtype=x.dtype, device=x.device)
        relu_4096_kernel[(4,)](x, out, BLOCK=1024)
        return out
