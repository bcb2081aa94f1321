# expect: compile_error
# why: the @triton.jit body calls torch.relu on a tensor stashed in a module global: the CPU interpreter would run it as Python (one Triton launch, right values), Triton's compiler rejects it on a GPU; the static audit makes CPU mode give the GPU's verdict.
import torch
import torch.nn as nn
import triton
import triton.language as tl

_STASH = {}


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    _STASH["out"] = torch.relu(_STASH["x"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _STASH["x"] = x
        out = torch.empty_like(x)
        relu_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
        return _STASH.pop("out", out)
