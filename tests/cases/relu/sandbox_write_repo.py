# expect: sandbox_violation
# rule: file_escape
# why: tries to write .escape_marker into the repository (tests/cases/, found from its own path) and into its own source directory; the runner checks neither file appears.
import os
from pathlib import Path
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def launch_relu(x, out):
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out


def marker_paths():
    here = Path(os.path.abspath(__file__)).parent
    yield here.parent / '.escape_marker'
    yield here / '.escape_marker'


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.written = []

    def forward(self, x):
        for path in marker_paths():
            try:
                Path(path).write_text('written by sandbox_write_repo.py\n')
                self.written.append(str(path))
            except OSError:
                pass
        return launch_relu(x, torch.empty_like(x))
