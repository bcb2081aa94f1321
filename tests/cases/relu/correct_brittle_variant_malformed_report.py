# expect: correct
# multishape: fail
# why: red team on the multi-shape check: right at the problem's 16x256, brittle elsewhere (a hard-coded grid and output), and at any other size its process rewrites its run reply so that the fields the rules read have other types (`output_types: [1]`, `patched: 5`). The judge stopped on them with an internal error, the variant was counted as no result and the check reported nothing (or `pass` from the other variant); a reply the rules cannot read now fails the trial (`malformed_report`), and a variant the candidate's process took part in cannot end without a result.
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

_protocol = sys.modules.get("kernelllm.worker.protocol")
if _protocol is not None:
    _write = _protocol.write_frame

    def _garble_other_sizes(fd, msg, *a, **k):
        if isinstance(msg, dict) and "output_types" in msg and _SEEN.get("other_size"):
            msg = dict(msg, output_types=[1], patched=5)
        return _write(fd, msg, *a, **k)

    _protocol.write_frame = _garble_other_sizes
_SEEN = {}


@triton.jit
def relu_4096_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs), 0.0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _SEEN["other_size"] = tuple(x.shape) != (16, 256)
        out = torch.zeros(16, 256, dtype=x.dtype, device=x.device)
        relu_4096_kernel[(4,)](x, out, BLOCK=1024)
        return out
