# expect: wrong_output
# why: one-element masking bug: the load mask bounds the flat offset by numel - 1 (off by one), so only the very last input element is dropped: the last row's last output is 0 and that row's other entries are slightly too large. Its normalized error vs fp64 is ~1e-2, under or over depending on the inputs: it must be wrong_output on every run (localized, not rounding), never precision_downgrade.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, cols, numel, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    offs = row * cols + c
    load_mask = (c < cols) & (offs < numel - 1)  # bug: should be offs < numel
    x = tl.load(x_ptr + offs, mask=load_mask, other=-float('inf'))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + offs, e / tl.sum(e, axis=0), mask=c < cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty_like(x)
        softmax_kernel[(rows,)](x, out, cols, x.numel(), BLOCK=triton.next_power_of_2(cols))
        return out
