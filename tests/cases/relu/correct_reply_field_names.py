# expect: correct
# near_miss: malformed_report
# why: near-miss of malformed_report: its module and its model carry names of the run reply's fields with values of other types (output_types = [1], patched = 5, new_threads = "none"), and it looks the worker's protocol module up without changing it; the reply is the worker's own, so the rules read it as usual.
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

output_types = [1]
patched = 5
new_threads = "none"
_WRITES_FRAMES = callable(getattr(sys.modules.get("kernelllm.worker.protocol"), "write_frame", None))


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    output_types = [1]
    patched = 5

    def __init__(self):
        super().__init__()
        self.triton_launches = "many"

    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
