"""The candidate process's record of sandbox attempts: a `sys.addaudithook` hook (installed
before the candidate module is imported; hooks cannot be removed) plus a recording wrapper of
os.environ / os.environb. Attribution (`_candidate_frame`): walking the stack outward, genuine
stdlib frames (and ours) are looked through; the first other frame decides. It is the
candidate's when its code is candidate-made (the candidate's file, a file it could write, a
filename it compiled or built a code object for, or code that claims a library file but does not
match that file's compiled code); a genuine third-party frame (torch, Triton) means the library
acts on its own. A stack with no deciding frame is the candidate's when the thread runs work the
candidate handed over (a thread it started, a thread-pool item it submitted). Attempts are
recorded (as run-report facts the judge decides on, see rules.evaluate_run) and refused with
PermissionError / KeyError. The guard only names attempts: everything here lives in the
candidate's process and can be undone by native code; the OS sandbox contains them and the
orchestrator's cgroup counters decide process floods."""
from __future__ import annotations

import _thread
import io
import os
import sys
import sysconfig
import tempfile
import threading
import types
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


class _Tally:
    """The counters, held by a closure: GUARD.events/spawns/refused are read-only views, so
    `GUARD.spawns = 0` or `GUARD.events.clear()` change nothing. A candidate that digs deeper
    (GUARD._tally(), gc, ctypes) can still reset them: process floods are decided from the
    candidate cgroup's pids counters by the orchestrator; this count only names the attempt."""
    __slots__ = ("events", "refused", "spawns")

    def __init__(self) -> None:
        self.events: List[Dict[str, Any]] = []
        self.refused = 0
        self.spawns = 0


# Frozen modules whose frames say "<frozen NAME>" under another frozen-object name.
_FROZEN_ALIASES = {"importlib._bootstrap": "_frozen_importlib",
                   "importlib._bootstrap_external": "_frozen_importlib_external"}


def _code_tree(code: types.CodeType, out: Dict[Tuple[str, int, bytes], List[Any]]) -> None:
    out.setdefault((code.co_name, code.co_firstlineno, code.co_code), []).append(
        (code.co_names, tuple(c for c in code.co_consts if not isinstance(c, types.CodeType))))
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_tree(c, out)


class Guard:
    def __init__(self) -> None:
        self.installed = False
        self.candidate_file = ""
        self._candidate_names: frozenset = frozenset()
        self._rw: Tuple[str, ...] = ()
        self._written: Tuple[str, ...] = ()
        self._tls = threading.local()         # .origin (see _hand_over), .busy (inside the hook)
        tally = _Tally()
        # Closures, not attributes: the counters are not reachable as GUARD.<name>.
        self._tally = lambda: tally
        self._index: Dict[str, Any] = {}      # filename -> compiled code index (None: unreadable)
        self._genuine: Dict[int, Any] = {}    # id(code) -> (code, genuine?)
        self._forged: set = set()             # filenames of code the candidate compiled or built
        self._trusted_globals: List[dict] = []  # namespaces on the stack at install time
        paths = sysconfig.get_paths()
        self._stdlib = tuple(sorted({os.path.realpath(paths["stdlib"]), os.path.realpath(paths["platstdlib"])}))
        here = os.path.dirname(os.path.realpath(__file__))
        self._own = here + "/"

    @property
    def _busy(self) -> bool:
        """Per thread: the hook is running on this thread (its own file reads are not events)."""
        return getattr(self._tls, "busy", False)

    @_busy.setter
    def _busy(self, value: bool) -> None:
        self._tls.busy = value

    @property
    def events(self) -> Tuple[Dict[str, Any], ...]:
        return tuple(self._tally().events)

    @property
    def spawns(self) -> int:
        return self._tally().spawns

    @property
    def refused(self) -> int:
        return self._tally().refused

    # ---- attribution ------------------------------------------------------------------

    def _is_stdlib(self, filename: str) -> bool:
        """Frames to look through: the stdlib (not site-packages under it), frozen code, us."""
        if filename.startswith("<frozen "):
            return True
        if filename.startswith(self._own):
            return True
        if _under(filename, self._stdlib):
            return "site-packages" not in filename and "dist-packages" not in filename
        return False

    def _code_index(self, filename: str) -> Any:
        """The code objects compiled from `filename` as it is on disk (read-only inside the
        sandbox), or from the frozen module a "<frozen NAME>" filename names; None if neither."""
        if filename in self._index:
            return self._index[filename]
        index: Any = None
        try:
            if filename.startswith("<frozen ") and filename.endswith(">"):
                import _imp
                name = filename[len("<frozen "):-1]
                root = _imp.get_frozen_object(_FROZEN_ALIASES.get(name, name))
            else:
                with io.open_code(filename) as fh:
                    root = compile(fh.read(), filename, "exec", dont_inherit=True, optimize=sys.flags.optimize)
            index = {}
            _code_tree(root, index)
        except Exception:
            index = None
        self._index[filename] = index
        return index

    def _is_genuine(self, frame: types.FrameType) -> bool:
        """The frame runs code compiled from the library file it names (same bytecode, names and
        constants as compiling that file now), in that module's own namespace. Code the candidate
        compiled under a library's filename (compile(src, "/usr/lib/python3.11/x.py", "exec"))
        fails the first test; a library's real code exec'd in a namespace of the candidate's
        making fails the second."""
        code = frame.f_code
        hit = self._genuine.get(id(code))
        if hit is None or hit[0] is not code:
            index = self._code_index(code.co_filename)
            ok = False
            if index is not None:
                key = (code.co_names, tuple(c for c in code.co_consts if not isinstance(c, types.CodeType)))
                try:
                    ok = key in index.get((code.co_name, code.co_firstlineno, code.co_code), ())
                except Exception:
                    ok = False
            hit = (code, ok)
            self._genuine[id(code)] = hit  # holds `code`: its id is never reused while cached
        if not hit[1]:
            return False
        if code.co_filename.startswith("<frozen "):
            return True
        g = frame.f_globals
        mod = sys.modules.get(g.get("__name__")) if isinstance(g.get("__name__"), str) else None
        if mod is not None and getattr(mod, "__dict__", None) is g:
            return True
        if any(g is t for t in self._trusted_globals):
            return True  # a namespace of the worker's own call chain (launch.py's __main__ under runpy)
        return any(getattr(m, "__dict__", None) is g for m in list(sys.modules.values()))

    def _classify(self, frame: types.FrameType) -> str:
        """'candidate', 'through' (genuine stdlib / ours / generated) or 'library' (genuine third party)."""
        name = frame.f_code.co_filename
        if name in self._candidate_names or name in self._forged or (self._written and _under(name, self._written)):
            return "candidate"
        if name.startswith("<") and not name.startswith("<frozen "):
            return "through"  # generated code (dataclasses, namedtuple, torch.fx) unless the candidate made it
        if not self._is_genuine(frame):
            return "candidate"  # claims a library file (or frozen module) but is not its code
        return "through" if self._is_stdlib(name) else "library"

    def _candidate_frame(self, start: Optional[types.FrameType] = None) -> Optional[str]:
        """'file:line' of the candidate frame responsible for the current event, else None."""
        busy, self._busy = self._busy, True  # our own open()/compile() below are not events
        try:
            f = start if start is not None else sys._getframe(1)
            while f is not None:
                kind = self._classify(f)
                if kind == "candidate":
                    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"
                if kind == "library":
                    return None
                f = f.f_back
            origin = getattr(self._tls, "origin", None)
            return f"{origin} (work handed to a thread)" if origin else None
        finally:
            self._busy = busy

    def _hand_over(self, fn: Any, where: str) -> Any:
        """`fn`, running with this thread's work attributed to the candidate frame `where`."""
        guard = self

        def run(*args: Any, **kwargs: Any) -> Any:
            prev = getattr(guard._tls, "origin", None)
            guard._tls.origin = where
            try:
                return fn(*args, **kwargs)
            finally:
                guard._tls.origin = prev
        return run

    def _install_thread_wrappers(self) -> None:
        """Work the candidate hands to other threads stays the candidate's: threads it starts
        (threading.Thread, _thread.start_new_thread) and items it submits to a thread pool."""
        guard = self
        original_start = _thread.start_new_thread

        def start_new_thread(function: Any, args: Any, kwargs: Any = None) -> Any:
            where = guard._candidate_frame(sys._getframe(1))
            if where is not None:
                function = guard._hand_over(function, where)
            return original_start(function, args, *(() if kwargs is None else (kwargs,)))

        _thread.start_new_thread = start_new_thread
        threading._start_new_thread = start_new_thread  # what threading.Thread.start calls
        import concurrent.futures.thread as cft
        original_submit = cft.ThreadPoolExecutor.submit

        def submit(self_pool: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            where = guard._candidate_frame(sys._getframe(1))
            if where is not None:
                fn = guard._hand_over(fn, where)
            return original_submit(self_pool, fn, *args, **kwargs)

        cft.ThreadPoolExecutor.submit = submit

    # ---- recording --------------------------------------------------------------------

    def _record(self, kind: str, detail: str, where: str) -> None:
        t = self._tally()
        if len(t.events) < MAX_EVENTS:
            t.events.append({"kind": kind, "detail": detail, "where": where})

    def facts(self) -> Dict[str, Any]:
        t = self._tally()
        return {"sandbox_events": list(t.events), "process_spawns": t.spawns, "sandbox_refused": t.refused}

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
        # Code in files under these dirs is the candidate's (a module it wrote and imported);
        # a dir that holds the interpreter or its libraries (HOME outside the sandbox) is not.
        libs = [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix) + tuple(sys.path)
                if p and os.path.isabs(p)] + list(self._stdlib) + [self._own.rstrip("/")]
        self._written = tuple(d for d in self._rw if not any(_under(x, (d,)) for x in libs))
        ro = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix) if p}
        ro.update(os.path.realpath(p) for p in sys.path if p and os.path.isabs(p))
        ro.update(_READ_ONLY_SYSTEM)
        ro.add(os.path.realpath(candidate_file))
        ro.add(f"/proc/{os.getpid()}")
        ro.add("/proc/self")
        self._ro = tuple(sorted(ro))
        self._denied = (f"/proc/{os.getpid()}/environ", "/proc/self/environ")
        f = sys._getframe(1)
        while f is not None:  # the worker's own call chain, before any candidate code ran
            self._trusted_globals.append(f.f_globals)
            f = f.f_back
        self._install_env_wrapper()
        self._install_thread_wrappers()
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

    def _note_new_code(self, event: str, args: Tuple[Any, ...]) -> None:
        """compile() / CodeType() / code.replace() by the candidate: the filename it chose marks
        that code as the candidate's wherever it runs later. A compile of a file's own content
        under its own name (an import) marks nothing."""
        filename = args[1] if len(args) > 1 else None
        if not isinstance(filename, str) or filename in self._forged or filename in self._candidate_names:
            return
        if self._candidate_frame(sys._getframe(2)) is None:
            return
        if event == "compile" and isinstance(args[0], (bytes, str)) and not filename.startswith("<"):
            try:
                with io.open_code(filename) as fh:
                    disk = fh.read()
                src = args[0].encode("utf-8") if isinstance(args[0], str) else args[0]
                if src == disk:
                    return
            except OSError:
                pass
        self._forged.add(filename)

    def _hook(self, event: str, args: Tuple[Any, ...]) -> None:
        if self._busy:
            return
        if event == "compile" or event == "code.__new__":
            self._busy = True
            try:
                self._note_new_code(event, args)
            finally:
                self._busy = False
            return
        if event not in _WATCHED:
            return
        self._busy = True
        tally = self._tally()
        try:
            kind, detail = self._judge_event(event, args)
            if kind is None:
                return
            where = self._candidate_frame(sys._getframe(1))
            if where is None:
                return
            if kind == "spawn":
                tally.spawns += 1
                if tally.spawns <= MAX_SPAWNS:
                    return
                detail = f"{detail} (spawn {tally.spawns} > {MAX_SPAWNS})"
            self._record(kind, detail, where)
            tally.refused += 1
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

        # os.environb is the same class over bytes names: wrapped alike.
        watched = (os.environ, getattr(os, "environb", None))

        def __getitem__(self_env, key):
            if any(self_env is w for w in watched if w is not None) and not env_name_allowed(key):
                where = guard._candidate_frame(sys._getframe(1))
                if where is not None:
                    guard._record("env", f"read of environment variable {key!r} (not on the allow-list)", where)
                    guard._tally().refused += 1
                    raise KeyError(key)
            return original_getitem(self_env, key)

        def __iter__(self_env):
            names = list(original_iter(self_env))
            if any(self_env is w for w in watched if w is not None) and guard._candidate_frame(sys._getframe(1)) is not None:
                names = [n for n in names if env_name_allowed(n)]
            return iter(names)

        cls.__getitem__ = __getitem__
        cls.__iter__ = __iter__
        self.env_getitem = __getitem__


GUARD = Guard()
