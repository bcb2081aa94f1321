# expect: crash
# why: forward writes a frame of its own to the worker's reply pipe (fd 4) with a string where a number belongs: a protocol break the verifier reports, not an exception that aborts it.
import json
import os
import struct

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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        body = json.dumps({"v": 1, "ok": True, "op": "run", "run_ms": "fast", "triton_launches": 1}).encode()
        os.write(4, struct.pack("<I", len(body)) + body)
        return out
