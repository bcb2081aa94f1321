"""The zygote (trusted): imports torch, Triton, NumPy and the worker's own modules once, before any
CUDA initialisation, then forks every judge and candidate worker of one orchestrator from that
state, so that a worker starts for the cost of a fork (~10 ms) instead of an import (~2.5 s of CPU
on an H100 host). It never runs problem or candidate code, and no process that did is forked
again: each worker is a fresh child of this one. docs/verifier-protocol.md, "Zygote", has the
protocol; docs/trust-boundary.md, "Warm workers", the sandbox a forked candidate enters.

A fork (request `fork`, after the worker's five descriptors arrived over fd 5: its fd 3 read end,
fd 4 write end, fd 5 socket end, stdout and stderr write ends):
  zygote ─ fork ─► B ─ fork ─► C ; B exits at once, so C, an orphan, is adopted by the nearest
  subreaper above it: the orchestrator. The reply names C once B is reaped.
  judge:     C is the worker (own session, the given environment, dies with the orchestrator).
  candidate: C joins the given cgroups, then every namespace of a bubblewrap "holder" sandbox the
             orchestrator made for this candidate alone (user when it has one, ipc, uts, net, pid,
             mount), and forks G there, the worker; C waits and exits as G did. G drops to the
             sandbox's uid without capabilities (as setpriv does), sets no_new_privs and the
             orchestrator's seccomp filter, dies with C, and only then runs the candidate worker.
             Any step that fails ends G before the worker runs (status 126).
"""
from __future__ import annotations

import base64
import ctypes
import fcntl
import os
import resource
import runpy
import signal
import socket
import struct
import sys
import time
import traceback
from typing import Any, Dict, List, Optional

from . import protocol

CHANNEL_FD = 5
N_FDS = 5  # fd 3 read end, fd 4 write end, fd 5 socket end, stdout, stderr (the worker's)
NS_ORDER = ("user", "ipc", "uts", "net", "pid", "mnt")  # user first: it gives the rights to join the rest
NOBODY = 65534
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
FAILED_SETUP = 126  # G's status when a sandbox step failed: the worker never ran

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _prctl(option: int, arg2: int = 0) -> None:
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(int(arg2)), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)), f"prctl({option})")


def _preload() -> Dict[str, Any]:
    """What every worker imports, without running anything: torch (and the torch._dynamo that its
    device context manager would import lazily), NumPy, Triton and the worker's modules other than
    the two entry points (judge.py and candidate.py run as __main__ in the child, as launch.py would)."""
    t0 = time.perf_counter()
    import numpy  # noqa: F401
    import torch
    import torch._dynamo  # noqa: F401
    triton_error = None
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
        from triton.runtime.interpreter import InterpretedFunction  # noqa: F401
        from triton.runtime.jit import JITFunction  # noqa: F401
    except Exception as e:  # reported by the candidate's own hello, as without a zygote
        triton_error = f"{type(e).__name__}: {e}"
    from . import accounting, compare, guard, inputs, judge_compare, judge_history, judge_kernels, judge_reuse, judge_timing, region, rules, timing  # noqa: F401
    from . import triton_warm
    import_s = time.perf_counter() - t0
    if torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised while importing: a forked worker could not use the GPU")
    # Triton's helper module, its launchers of the commonest layouts and its compiler's first use,
    # made once here instead of in each candidate (~1 s of CPU each): triton_warm.py.
    warm = triton_warm.prepare() if triton_error is None else {"built": 0, "skipped": "Triton did not import"}
    return {"import_s": round(import_s, 3), "triton_error": triton_error, "triton_warm": warm}


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _receive_fds(sock: socket.socket) -> List[int]:
    fds: List[int] = []
    try:
        while len(fds) < N_FDS:
            sock.settimeout(10.0)
            _, got, _, _ = socket.recv_fds(sock, 1, N_FDS)
            if len(got) != 1:
                fds.extend(got)
                raise protocol.WorkerError("protocol", f"expected one descriptor per message, found {len(got)}")
            fds.append(got[0])
    except BaseException:
        for f in fds:
            os.close(f)
        raise
    return fds


def _ns_id(pid: Any, name: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{name}")


def _mirror_exit(status: int) -> None:
    """Ends this process as the one whose wait status is `status` ended."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _adopted(b_pid: int, orchestrator: int) -> None:
    """In C: waits until B's exit made C the orchestrator's child, then dies with it."""
    deadline = time.monotonic() + 10
    while True:
        # The clock read before the parent: C stopped or starved between the two (a loaded host)
        # must not find the deadline passed after B exited meanwhile (B had exited within the
        # fork request's 10 s, as the zygote's reply showed, yet C gave up: twice in one H200
        # throughput run).
        late = time.monotonic() > deadline
        if os.getppid() != b_pid:
            break
        if late:
            raise RuntimeError("zygote: the intermediate process did not exit")
        time.sleep(0.0002)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != orchestrator:  # not a subreaper: C went to init, or the orchestrator is gone
        raise RuntimeError(f"zygote: adopted by {os.getppid()}, not by the orchestrator {orchestrator}")


def _install_fds(fds: List[int], cwd: str) -> None:
    """Puts the worker's descriptors on 0..5 and closes everything else (the zygote's fds 3-5 among them)."""
    moved = [fcntl.fcntl(f, fcntl.F_DUPFD, 10) for f in fds]  # above every target, so no dup2 clobbers a source
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(moved[3], 1)
    os.dup2(moved[4], 2)
    os.dup2(moved[0], 3)
    os.dup2(moved[1], 4)
    os.dup2(moved[2], 5)
    os.closerange(6, 1 << 16)
    for fd in range(6):
        os.set_inheritable(fd, True)
    if cwd:
        os.chdir(cwd)


def _set_env(env: List[str]) -> None:
    """The worker's environment, as exec would have given it: os.environ (and the C environment
    under it) holds exactly `env`; what was read from the zygote's at import is read again."""
    os.environ.clear()
    for kv in env:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    import tempfile
    tempfile.tempdir = None  # TMPDIR
    import torch
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))  # libgomp read OMP_NUM_THREADS when the zygote loaded it


def _drop_privileges(userns: bool) -> None:
    """As setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all:
    no capability left in any set. In a user namespace the uid is already the sandbox's."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    if not userns:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable × 2 words: all zero
    _check(_libc.capset(header, data), "capset")


def _seccomp(filter_bytes: bytes) -> None:
    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(filter_bytes, len(filter_bytes))
    prog = SockFprog(len(filter_bytes) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(_libc.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(prog),
                       ctypes.c_ulong(0), ctypes.c_ulong(0)), "seccomp filter")


def _rlimits(req: Dict[str, Any]) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if req.get("rlimit_as"):
        resource.setrlimit(resource.RLIMIT_AS, (req["rlimit_as"], req["rlimit_as"]))
    if req.get("rlimit_nproc"):
        resource.setrlimit(resource.RLIMIT_NPROC, (req["rlimit_nproc"], req["rlimit_nproc"]))


def _run_worker(kind: str, package_dir: str) -> None:
    sys.argv = [os.path.join(package_dir, "kernelllm", "worker", "launch.py"), kind]
    try:
        runpy.run_module(f"kernelllm.worker.{kind}", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _join_namespaces(holder: int) -> bool:
    """Joins every namespace of `holder` that differs from ours; True when that took a user namespace."""
    fds = {}
    try:
        for name in NS_ORDER:
            if _ns_id(holder, name) != _ns_id("self", name):
                fds[name] = os.open(f"/proc/{holder}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
        for name in ("pid", "mnt", "net"):
            if name not in fds:
                raise OSError(f"the holder shares our {name} namespace: it is no sandbox")
        for name in NS_ORDER:
            if name in fds:
                _check(_libc.setns(fds[name], 0), f"setns {name}")
    finally:
        for f in fds.values():
            os.close(f)
    return "user" in fds


def _candidate_leader(req: Dict[str, Any], fds: List[int]) -> None:
    """C for a sandboxed candidate: joins the cgroups and namespaces and forks G, which returns
    here ready to run the worker; C waits for G and ends as it did."""
    for f in req.get("cgroup_procs", []):
        with open(f, "w") as out:
            out.write("0")
    userns = _join_namespaces(int(req["holder_pid"]))
    g = os.fork()
    if g == 0:
        try:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != 0:  # C lies outside G's pid namespace: 0 while C lives
                raise RuntimeError(f"zygote: the sandboxed worker's parent is {os.getppid()}, not its leader")
            _rlimits(req)
            _install_fds(fds, req.get("cwd", ""))
            _drop_privileges(userns)
            _prctl(PR_SET_NO_NEW_PRIVS, 1)
            if req.get("seccomp_b64"):
                _seccomp(base64.b64decode(req["seccomp_b64"]))
            _set_env(req["env"])
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(FAILED_SETUP)
        return
    for f in fds:
        os.close(f)
    os.closerange(3, 1 << 16)
    while True:
        try:
            _, status = os.waitpid(g, 0)
            break
        except InterruptedError:
            continue
    _mirror_exit(status)


def _probe_reply() -> None:
    """G for a sandbox probe: what the sandbox looks like from inside, as JSON on stdout."""
    import json
    status = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"):
            status[k] = v.split()
    ns = {n: _ns_id("self", n) for n in NS_ORDER}
    try:
        os.sched_setaffinity(0, os.sched_getaffinity(0))
        cpus_locked = False
    except OSError:
        cpus_locked = True
    try:
        open("/kernelllm-zygote-probe", "w")
        ro = False
    except OSError:
        ro = True
    sys.stdout.write(json.dumps({"status": status, "ns": ns, "cpus_locked": cpus_locked, "ro": ro,
                                 "cwd": os.getcwd(), "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    os._exit(0)


def _leader(req: Dict[str, Any], fds: List[int], b_pid: int, orchestrator: int) -> None:
    """C: never returns."""
    try:
        os.dup2(fds[4], 2)  # from here on, what goes wrong shows in the worker's stderr
        _adopted(b_pid, orchestrator)
        os.setsid()
        if req.get("holder_pid") is None:  # a judge, or a candidate under --no-sandbox (as exec would start it)
            _rlimits(req)
            _install_fds(fds, req.get("cwd", ""))
            _set_env(req["env"])
        else:
            _candidate_leader(req, fds)  # returns in G only
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(FAILED_SETUP)
    if req["kind"] == "sandbox_probe":
        _probe_reply()
    _run_worker(req["kind"], req["package_dir"])


def _fork(req: Dict[str, Any], fds: List[int], orchestrator: int, zsock: socket.socket) -> int:
    r, w = os.pipe()
    b = os.fork()
    if b == 0:  # B
        try:
            os.close(r)
            # B's pid, read here: C may first run after B has exited, when its os.getppid() already
            # names the orchestrator, and C then waited the whole 10 s for B to exit ("the
            # intermediate process did not exit": seen in CI and twice in one H200 throughput run).
            b_pid = os.getpid()
            c = os.fork()
            if c == 0:  # C
                os.close(w)
                zsock.detach()  # fd 5 is about to be the worker's: the zygote's socket object must not close it
                _leader(req, fds, b_pid, orchestrator)
            os.write(w, struct.pack("<i", c))
        finally:
            os._exit(0)
    os.close(w)
    try:
        data = b""
        while len(data) < 4:
            chunk = os.read(r, 4 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(r)
    os.waitpid(b, 0)  # C is the orchestrator's child from here on
    if len(data) != 4:
        raise protocol.WorkerError("internal", "the intermediate process did not report the worker's pid")
    return struct.unpack("<i", data)[0]


def main() -> int:
    orchestrator = os.getppid()
    package_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    info = _preload()
    zsock = socket.socket(fileno=CHANNEL_FD)

    def fork(msg: Dict[str, Any]) -> Dict[str, Any]:
        kind = msg.get("kind")
        if kind not in ("judge", "candidate", "sandbox_probe"):
            raise protocol.WorkerError("protocol", f"fork: unknown kind {kind!r}")
        if kind == "judge" and msg.get("holder_pid") is not None:
            raise protocol.WorkerError("protocol", "fork: a judge runs outside any sandbox")
        if kind == "sandbox_probe" and not isinstance(msg.get("holder_pid"), int):
            raise protocol.WorkerError("protocol", "fork: a sandbox probe needs holder_pid")
        msg["package_dir"] = package_dir
        fds = _receive_fds(zsock)
        try:
            pid = _fork(msg, fds, orchestrator, zsock)
        finally:
            for f in fds:
                os.close(f)
        return {"pid": pid, "threads": _threads()}

    hello = dict(info, pid=os.getpid(), python=sys.version.split()[0], threads=_threads())
    return protocol.serve({"fork": fork}, hello)


if __name__ == "__main__":
    sys.exit(main())
