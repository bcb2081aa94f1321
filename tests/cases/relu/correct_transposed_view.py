# expect: correct
# near_miss: output_not_plain_tensor, output_rewritten
# why: near-miss of output_not_plain_tensor: returns a plain, dense but non-contiguous tensor (a transpose of the buffer the kernel wrote).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_transpose_kernel(x_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    mask = c < cols
    x = tl.load(x_ptr + r * cols + c, mask=mask)
    tl.store(out_ptr + c * rows + r, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows, cols = x.shape
        buf = torch.empty((cols, rows), dtype=x.dtype, device=x.device)
        relu_transpose_kernel[(rows,)](x, buf, rows, cols, BLOCK=triton.next_power_of_2(cols))
        return buf.t()
