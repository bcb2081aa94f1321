# expect: crash
# why: red team: its process ends (exit 0) right after writing its first run's reply, so the verifier's next request is written to a pipe nobody reads. SIGPIPE's default action ended the whole verify call (exit 141, no report, every other candidate's result lost) in some runs; the write must fail instead and this candidate alone be a crash.
import os
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

_protocol = sys.modules.get("kernelllm.worker.protocol")
if _protocol is not None:
    _write_frame = _protocol.write_frame

    def _write_then_exit(fd, msg, *a, **k):
        _write_frame(fd, msg, *a, **k)
        if isinstance(msg, dict) and msg.get("op") == "run" and msg.get("ok"):
            os._exit(0)

    _protocol.write_frame = _write_then_exit


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
