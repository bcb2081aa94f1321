"""The kernel a candidate's process compiles and launches before its greeting (warm.warm_triton),
in a module of its own: imported, and so decorated, only there, where the worker's Triton mode
(compiled, or the interpreter on the CPU) is already set."""
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
