# expect: timeout
# device: cuda
# why: the kernel spins on a flag nobody sets, so the GPU never finishes the launch; the deadline
#      must kill the process tree (which ends the kernel with its context) and carry on.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def spin_kernel(x_ptr, out_ptr, flag_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    flag = tl.load(flag_ptr)
    while flag == 0:
        flag = tl.load(flag_ptr, volatile=True)
    tl.store(out_ptr + offs, x * 3.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        n = x.numel()
        spin_kernel[(triton.cdiv(n, 1024),)](x, out, flag, n, BLOCK=1024)
        torch.cuda.synchronize()
        return out
