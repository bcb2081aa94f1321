"""The candidate process's record of sandbox attempts: a `sys.addaudithook` hook (installed
before the candidate module is imported; hooks cannot be removed) plus a recording wrapper of
os.environ. An event counts against the candidate only when the nearest non-stdlib frame on the
stack lies in the candidate's own file, so torch/Triton internals never trip it. Attempts are
recorded (as run-report facts the judge decides on, see rules.evaluate_run) and refused with
PermissionError / KeyError; the OS sandbox contains them anyway."""
from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
from typing import Any, Dict, List, Optional, Tuple

from .rules import MAX_SPAWNS

MAX_EVENTS = 64  # recorded per process; further attempts are still refused, and counted

# Environment names a candidate may read: what the worker's own environment is built from.
ENV_ALLOWED_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "HOME", "TMPDIR", "TEMP", "TMP", "PWD", "USER", "SHELL",
                               "TERM", "XDG_CACHE_HOME", "LD_LIBRARY_PATH", "KERNELLLM_WORKER"})
ENV_ALLOWED_PREFIXES = ("TRITON_", "TORCH", "PYTORCH_", "CUDA_", "NVIDIA_", "OMP_", "MKL_", "PYTHON", "LC_",
                        "CUBLAS", "CUDNN_", "NCCL_", "KMP_", "OPENBLAS_")

_READ_ONLY_SYSTEM = ("/usr", "/lib", "/lib64", "/bin", "/sys", "/dev/null", "/dev/zero", "/dev/urandom",
                     "/dev/random", "/dev/shm", "/dev/nvidia", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat")
_SPAWN_EVENTS = ("os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "subprocess.Popen", "os.system")
_WRITE_EVENTS = ("os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.chmod", "os.chown", "os.link", "os.symlink",
                 "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile")
_NET_EVENTS = ("socket.connect", "socket.sendto", "socket.sendmsg")
_KILL_EVENTS = ("os.kill", "os.killpg")
_WATCHED = frozenset(("open",) + _SPAWN_EVENTS + _WRITE_EVENTS + _NET_EVENTS + _KILL_EVENTS)

def env_name_allowed(name: Any) -> bool:
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    if not isinstance(name, str):
        return True
    return name in ENV_ALLOWED_NAMES or name.startswith(ENV_ALLOWED_PREFIXES)


def _under(path: str, roots: Tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


class Guard:
    def __init__(self) -> None:
        self.installed = False
        self.candidate_file = ""
        self._candidate_names: frozenset = frozenset()
        self.events: List[Dict[str, Any]] = []
        self.refused = 0
        self.spawns = 0
        self._busy = False
        paths = sysconfig.get_paths()
        self._stdlib = tuple(sorted({os.path.realpath(paths["stdlib"]), os.path.realpath(paths["platstdlib"])}))
        here = os.path.dirname(os.path.realpath(__file__))
        self._own = here + "/"

    # ---- attribution ------------------------------------------------------------------

    def _is_library(self, filename: str) -> bool:
        """Frames to look through: the stdlib (not site-packages under it), frozen and generated code, us."""
        if filename.startswith("<"):
            return True
        if filename.startswith(self._own):
            return True
        if _under(filename, self._stdlib):
            return "site-packages" not in filename and "dist-packages" not in filename
        return False

    def _candidate_frame(self) -> Optional[str]:
        """'file:line' of the candidate frame responsible for the current event, else None."""
        f = sys._getframe(1)
        while f is not None:
            name = f.f_code.co_filename
            if not self._is_library(name):
                return f"{os.path.basename(name)}:{f.f_lineno}" if name in self._candidate_names else None
            f = f.f_back
        return None

    # ---- recording --------------------------------------------------------------------

    def _record(self, kind: str, detail: str, where: str) -> None:
        if len(self.events) < MAX_EVENTS:
            self.events.append({"kind": kind, "detail": detail, "where": where})

    def facts(self) -> Dict[str, Any]:
        return {"sandbox_events": list(self.events), "process_spawns": self.spawns, "sandbox_refused": self.refused}

    # ---- the policy -------------------------------------------------------------------

    def install(self, candidate_file: str, work_dir: str) -> None:
        if self.installed:
            return
        self.candidate_file = candidate_file
        self._candidate_names = frozenset({candidate_file, os.path.realpath(candidate_file),
                                           os.path.abspath(candidate_file)})
        rw = {os.path.realpath(work_dir)}
        for var in ("TMPDIR", "HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME"):
            if os.environ.get(var):
                rw.add(os.path.realpath(os.environ[var]))
        rw.add(os.path.realpath(tempfile.gettempdir()))  # probed now, by the worker; cached for the candidate
        self._rw = tuple(sorted(rw))
        ro = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix) if p}
        ro.update(os.path.realpath(p) for p in sys.path if p and os.path.isabs(p))
        ro.update(_READ_ONLY_SYSTEM)
        ro.add(os.path.realpath(candidate_file))
        ro.add(f"/proc/{os.getpid()}")
        ro.add("/proc/self")
        self._ro = tuple(sorted(ro))
        self._denied = (f"/proc/{os.getpid()}/environ", "/proc/self/environ")
        self._install_env_wrapper()
        sys.addaudithook(self._hook)
        self.installed = True

    def _path_allowed(self, path: str, write: bool) -> bool:
        if _under(path, self._denied):
            return False
        if _under(path, self._rw):
            return True
        return not write and _under(path, self._ro)

    def _resolve(self, p: Any, dir_fd: Any = None) -> Optional[str]:
        if isinstance(p, int) or p is None:
            return None
        try:
            p = os.fsdecode(os.fspath(p))
        except TypeError:
            return None
        if isinstance(dir_fd, int) and dir_fd >= 0 and not os.path.isabs(p):
            try:
                p = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), p)
            except OSError:
                return None
        return os.path.realpath(p)

    def _hook(self, event: str, args: Tuple[Any, ...]) -> None:
        if event not in _WATCHED or self._busy:
            return
        self._busy = True
        try:
            kind, detail = self._judge_event(event, args)
            if kind is None:
                return
            where = self._candidate_frame()
            if where is None:
                return
            if kind == "spawn":
                self.spawns += 1
                if self.spawns <= MAX_SPAWNS:
                    return
                detail = f"{detail} (spawn {self.spawns} > {MAX_SPAWNS})"
            self._record(kind, detail, where)
            self.refused += 1
        finally:
            self._busy = False
        raise PermissionError(f"refused by the verifier's sandbox: {event}")

    def _judge_event(self, event: str, args: Tuple[Any, ...]) -> Tuple[Optional[str], str]:
        if event == "open":
            path = self._resolve(args[0] if args else None)
            if path is None:
                return None, ""
            mode, flags = (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else 0)
            write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC)))
            if self._path_allowed(path, write):
                return None, ""
            return ("open_write" if write else "open_read"), f"open({path!r}, {'write' if write else 'read'})"
        if event in _WRITE_EVENTS:
            # dir_fd arguments: os.remove/rmdir (path, dir_fd), os.mkdir (path, mode, dir_fd),
            # os.rename (src, dst, src_dir_fd, dst_dir_fd), shutil.rmtree (path, dir_fd).
            fds = {"os.remove": (1,), "os.rmdir": (1,), "os.mkdir": (2,), "os.rename": (2, 3), "shutil.rmtree": (1,)}
            where_fd = fds.get(event, ())
            paths = []
            for k, a in enumerate(args[:2]):
                if isinstance(a, (str, bytes, os.PathLike)):
                    fd = args[where_fd[min(k, len(where_fd) - 1)]] if where_fd and len(args) > max(where_fd) else None
                    paths.append(self._resolve(a, fd))
            bad = [p for p in paths if p is not None and not self._path_allowed(p, True)]
            return ("write", f"{event}({', '.join(map(repr, bad))})") if bad else (None, "")
        if event in _NET_EVENTS:
            addr = args[1] if len(args) > 1 else None
            return "network", f"{event} to {addr!r}"
        if event in _KILL_EVENTS:
            pid = args[0] if args else None
            sig = args[1] if len(args) > 1 else None
            if event == "os.kill" and pid == os.getpid():
                return None, ""
            return "kill", f"{event}(pid={pid}, sig={sig}); own pid {os.getpid()}, parent {os.getppid()}"
        if any(event == e or event.startswith(e) for e in _SPAWN_EVENTS):
            return "spawn", event
        return None, ""

    # ---- environment ------------------------------------------------------------------

    def _install_env_wrapper(self) -> None:
        cls = type(os.environ)
        original_getitem = cls.__getitem__
        original_iter = cls.__iter__
        guard = self

        def __getitem__(self_env, key):
            if self_env is os.environ and not env_name_allowed(key):
                where = guard._candidate_frame()
                if where is not None:
                    guard._record("env", f"read of environment variable {key!r} (not on the allow-list)", where)
                    guard.refused += 1
                    raise KeyError(key)
            return original_getitem(self_env, key)

        def __iter__(self_env):
            names = list(original_iter(self_env))
            if self_env is os.environ and guard._candidate_frame() is not None:
                names = [n for n in names if env_name_allowed(n)]
            return iter(names)

        cls.__getitem__ = __getitem__
        cls.__iter__ = __iter__
        self.env_getitem = __getitem__


GUARD = Guard()
