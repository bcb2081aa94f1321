"""Triton's first use, paid once in the zygote instead of in every candidate's process.

A fresh process's first Triton kernel on an H200 host took 1.2-1.9 s, of which building Triton's
C helper module (`cuda_utils`, gcc) took 0.3-0.5 s, the compiler's own first use (its imports,
MLIR's set-up, ptxas's version) ~0.5 s and the kernel's launcher (gcc, one per argument layout in
Triton 3.6) 0.2-0.3 s; the same kernel in a process forked after these were made in its parent
took 55-80 ms (a probe on an H200 host, 8 processes at once as in a throughput run).

The zygote (trusted, never runs problem or candidate code, never initialises CUDA) calls
`prepare` once before its greeting: it compiles two kernels of the commonest layouts (unary and
binary elementwise) for a GPU target given by hand, builds `cuda_utils` and their launchers in
its own Triton cache, and keeps those built modules' bytes. A forked candidate worker calls
`place` before any candidate code: the bytes are written into its own, empty Triton cache, where
Triton finds them by the hash of their C source as if it had built them itself. Nothing is
shared between candidates: each gets its own copy, made by the zygote; what a candidate builds
stays in its own cache. Where Triton differs (another version, no CUDA driver to link against,
the interpreter), `prepare` notes why and workers start cold, as before."""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Tuple

# (path relative to a Triton cache directory, contents): the modules the zygote built.
BUILT: List[Tuple[str, bytes]] = []
# Only the compiler's warm-up is built for it: the kernels are never run, so any target the bundled
# ptxas knows will do, and the helper modules and launchers do not depend on it.
WARM_TARGET = ("cuda", 90, 32)
MAX_BYTES = 64 << 20  # what `prepare` keeps for `place`: far above the few hundred KiB measured


def _kernels() -> List[Tuple[Any, Dict[str, str], Dict[str, int]]]:
    import triton
    import triton.language as tl

    @triton.jit
    def _unary(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = o < n
        tl.store(y_ptr + o, tl.maximum(tl.load(x_ptr + o, mask=m), 0.0), mask=m)

    @triton.jit
    def _binary(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = o < n
        tl.store(z_ptr + o, tl.load(x_ptr + o, mask=m) + tl.load(y_ptr + o, mask=m), mask=m)

    return [(_unary, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
            (_binary, {"x_ptr": "*fp32", "y_ptr": "*fp32", "z_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
             {"BLOCK": 1024})]


def prepare() -> Dict[str, Any]:
    """In the zygote, before any fork: builds what a candidate's first kernels would, in this
    process's Triton cache (TRITON_CACHE_DIR, the zygote's own), and keeps the built modules.
    Never initialises CUDA (no `triton.runtime.driver.active`: its check of the device would). Any
    failure leaves BUILT empty and says why; the workers then start as without it."""
    t0 = time.perf_counter()
    info: Dict[str, Any] = {"built": 0}
    if os.environ.get("TRITON_INTERPRET") == "1":
        return dict(info, skipped="Triton's interpreter compiles nothing")
    cache_dir = os.environ.get("TRITON_CACHE_DIR", "")
    if not cache_dir or not os.path.isdir(cache_dir):
        return dict(info, skipped="no Triton cache directory of the zygote's own")
    try:
        import torch
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.backends.nvidia import driver as nv
        from triton.compiler import ASTSource

        nv.CudaUtils()  # builds and loads cuda_utils (no device call)
        compiled = [triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const), target=GPUTarget(*WARM_TARGET))
                    for fn, sig, const in _kernels()]
        if hasattr(nv, "make_launcher"):
            # One C launcher per argument layout (Triton 3.6); each build is a gcc process, so at once
            # (the pool's threads end before any fork). Later versions launch through cuda_utils and
            # have no make_launcher: nothing to build.
            with ThreadPoolExecutor(len(compiled)) as pool:
                list(pool.map(lambda ck: nv.CudaLauncher(ck.src, ck.metadata), compiled))
        if torch.cuda.is_initialized():
            raise RuntimeError("CUDA was initialised by the warm-up")
        built = []
        total = 0
        for root, _, files in os.walk(cache_dir):
            for f in sorted(files):
                if f.endswith(".so"):
                    path = os.path.join(root, f)
                    with open(path, "rb") as fh:
                        data = fh.read()
                    total += len(data)
                    built.append((os.path.relpath(path, cache_dir), data))
        if total > MAX_BYTES:
            raise RuntimeError(f"the built modules take {total} bytes")
        BUILT[:] = built
        info.update(built=len(built), bytes=total)
    except Exception as e:  # noqa: BLE001 (a warm-up: the workers start cold instead)
        BUILT.clear()
        info["error"] = f"{type(e).__name__}: {e}"[:400]
    info["s"] = round(time.perf_counter() - t0, 3)
    return info


def place(cache_dir: str) -> int:
    """In a forked candidate worker, before its code runs: the zygote's built modules into this
    process's own Triton cache. Returns how many were written; an existing file is left as it is.
    A write that fails (a full disk) stops here: Triton then builds the rest itself, as without."""
    n = 0
    if not BUILT or not cache_dir:
        return 0
    for rel, data in BUILT:
        path = os.path.join(cache_dir, rel)
        if os.path.exists(path):
            continue
        tmp = f"{path}.tmp.{os.getpid()}"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            break
        n += 1
    return n
