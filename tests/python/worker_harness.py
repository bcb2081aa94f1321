"""A pure-Python stand-in for the C++ orchestrator, for testing the verifier workers alone:
spawns judge/candidate processes with fd 3/4 pipes, speaks protocol v1 and runs the protocol
order (load_problem -> candidate load -> per trial make_inputs, run, compare -> verdict)."""
from __future__ import annotations

import base64
import fcntl
import os
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ROOT / "python" / "kernelllm" / "worker" / "launch.py"
MAX_MESSAGE_BYTES = 1 << 20


class Worker:
    """One worker process; `request` sends a message and returns the reply."""

    def __init__(self, kind: str, env: Optional[Dict[str, str]] = None, timeout_s: float = 120.0) -> None:
        req_r, self._req_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        # Move the child's ends above 3/4 so that the dup2 below cannot clobber one with the other.
        req_hi, rep_hi = fcntl.fcntl(req_r, fcntl.F_DUPFD_CLOEXEC, 100), fcntl.fcntl(rep_w, fcntl.F_DUPFD_CLOEXEC, 100)
        os.close(req_r)
        os.close(rep_w)
        # fd 5: the descriptor channel (the judge's output region travels over it).
        self.channel, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        chan_hi = fcntl.fcntl(child_end.fileno(), fcntl.F_DUPFD_CLOEXEC, 100)
        child_end.close()
        self.stderr = tempfile.TemporaryFile()
        full_env = dict(os.environ, TRITON_INTERPRET="1", **(env or {}))

        def child_fds() -> None:
            os.dup2(req_hi, 3)
            os.dup2(rep_hi, 4)
            os.dup2(chan_hi, 5)

        self.proc = subprocess.Popen([sys.executable, str(LAUNCH), kind], stdin=subprocess.DEVNULL,
                                     stdout=self.stderr, stderr=self.stderr, env=full_env,
                                     preexec_fn=child_fds, pass_fds=(3, 4, 5))
        os.close(req_hi)
        os.close(rep_hi)
        os.close(chan_hi)
        self.timeout_s = timeout_s
        self.hello = self.receive()

    def send_raw(self, data: bytes) -> None:
        os.write(self._req_w, data)

    def send(self, msg: Dict[str, Any]) -> None:
        import json
        body = json.dumps(msg).encode()
        self.send_raw(struct.pack("<I", len(body)) + body)

    def receive(self) -> Dict[str, Any]:
        import json
        import select
        ready, _, _ = select.select([self._rep_r], [], [], self.timeout_s)
        if not ready:
            raise TimeoutError(f"worker gave no reply in {self.timeout_s} s; stderr: {self.stderr_tail()}")
        head = self._read(4)
        (n,) = struct.unpack("<I", head)
        assert n <= MAX_MESSAGE_BYTES, f"reply frame of {n} bytes"
        return json.loads(self._read(n))

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            b = os.read(self._rep_r, n - len(buf))
            if not b:
                raise EOFError(f"worker closed its reply pipe; stderr: {self.stderr_tail()}")
            buf += b
        return buf

    def send_fd(self, fd: int) -> None:
        socket.send_fds(self.channel, [b"F"], [fd])

    def receive_fd(self) -> int:
        self.channel.settimeout(self.timeout_s)
        _, fds, _, _ = socket.recv_fds(self.channel, 1, 4)
        assert len(fds) == 1, fds
        return fds[0]

    def request(self, op: str, **fields: Any) -> Dict[str, Any]:
        self.send(dict(fields, v=1, op=op))
        return self.receive()

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()[-4000:].decode(errors="replace")

    def close(self) -> Optional[int]:
        if self.proc.poll() is None:
            try:
                self.request("exit")
            except (OSError, EOFError, TimeoutError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._req_w, self._rep_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.channel.close()
        return self.proc.returncode


class Session:
    """One judge for one problem; `verify(candidate_path)` runs one candidate to a verdict."""

    def __init__(self, problem: Path, work_dir: Path, profile: str = "strict", secret_seed: int = 1234,
                 device: str = "cpu", **load_fields: Any) -> None:
        self.work_dir = work_dir
        self.device = device
        self.judge = Worker("judge")
        self.problem = self.judge.request("load_problem", problem_path=str(problem), device=device, profile=profile,
                                          secret_seed=secret_seed, work_dir=str(work_dir), **load_fields)
        self.source_b64 = base64.b64encode(Path(problem).read_bytes()).decode()
        self.inputs: Dict[int, Dict[str, Any]] = {}

    def trial_inputs(self, trial: int, distribution: str) -> Dict[str, Any]:
        if trial not in self.inputs:
            r = self.judge.request("make_inputs", trial=trial, distribution=distribution)
            assert r["ok"], r
            self.inputs[trial] = dict(r, spec={"seed": r["seed"], "distribution": r["distribution"], "probe": r["probe"]})
        return self.inputs[trial]

    def problem_field(self) -> Dict[str, Any]:
        """The `problem` member of a candidate's load request, as the orchestrator sends it."""
        return {"source_b64": self.source_b64, "recipe": self.problem.get("inputs_recipe", {})}

    def verify(self, candidate: Path, time_iters: int = 0) -> Dict[str, Any]:
        """The verdict dict: {"verdict", "rule", "trial", "evidence", "replies"}."""
        assert self.problem["ok"], self.problem
        cand = Worker("candidate")
        try:
            load = cand.request("load", module_path=str(candidate), init=self.problem["init"],
                                construct_seed=self.problem["construct_seed"], device=self.device,
                                work_dir=str(self.work_dir), problem=self.problem_field())
            if not load["ok"]:
                e = load["error"]
                return {"verdict": e["kind"], "rule": e.get("rule"), "trial": None, "evidence": e, "replies": [load]}
            replies = [load]
            for trial, dist in enumerate(self.problem["trial_distributions"]):
                inp = self.trial_inputs(trial, dist)
                out = self.work_dir / f"out_{candidate.stem}_{trial}.safetensors"
                run = cand.request("run", inputs=inp["spec"], outputs_file=str(out), poison=True,
                                   poison_sizes=inp["output_sizes"])
                replies.append(run)
                if not run["ok"]:
                    e = run["error"]
                    return {"verdict": e["kind"], "rule": e.get("rule"), "trial": trial, "evidence": e, "replies": replies}
                report = {k: v for k, v in run.items() if k not in ("v", "ok", "op")}
                cmp = self.judge.request("compare", trial=trial, outputs_file=str(out), run_report=report)
                replies.append(cmp)
                assert cmp["ok"], cmp
                if not cmp["match"] or cmp["verdict_hint"] != "correct":
                    return {"verdict": cmp["verdict_hint"], "rule": cmp.get("rule"), "trial": trial,
                            "evidence": cmp, "replies": replies}
            result = {"verdict": "correct", "rule": None, "trial": None, "evidence": None, "replies": replies}
            if time_iters:
                inp = self.trial_inputs(0, "normal")
                result["timing"] = self.time(cand, inp, time_iters)
            return result
        finally:
            cand.close()

    def time(self, cand: Worker, inp: Dict[str, Any], iters: int) -> Dict[str, Any]:
        """The orchestrator's timing loop in miniature: the judge's output region handed to the
        candidate, then per call the judge's flush, time_call (clocked here) and the judge's check
        of the region (the last call's whole output)."""
        import time as _time
        reg = self.judge.request("time_region", trial=0)
        if not reg["ok"]:
            return reg
        fd = self.judge.receive_fd()
        cand.send_fd(fd)
        os.close(fd)
        prep = cand.request("time_prepare", region=reg["region"])
        if not prep["ok"]:
            return prep
        loaded = cand.request("time_load", inputs=[inp["spec"]])
        if not loaded["ok"]:
            return loaded
        times, checks, calls = [], [], []
        for k in range(iters):
            self.judge.request("l2_flush")
            t0 = _time.perf_counter()
            call = cand.request("time_call", sets=loaded["sets"])
            times.append((_time.perf_counter() - t0) * 1e3)
            if not call["ok"]:
                return call
            calls.append(call)
            checks.append(self.judge.request("check_timed", trials=[0], full=k == iters - 1, candidate="harness"))
        return {"ok": True, "times_ms": times, "checks": checks, "calls": calls}

    def close(self) -> None:
        self.judge.close()


def import_worker(name: str):
    """`kernelllm.worker.<name>` from this source tree, in-process, without requiring the
    compiled extension (the installed `kernelllm`, if already imported, gets the source
    package dir appended to its path)."""
    import importlib
    import types
    src = str(ROOT / "python" / "kernelllm")
    pkg = sys.modules.get("kernelllm")
    if pkg is None:
        # The installed package when there is one: a stand-in left in sys.modules at collection
        # would hide the real one from every later test of the session (kernelllm.verify missing).
        try:
            pkg = importlib.import_module("kernelllm")
        except ImportError:
            pkg = None
    if pkg is None:
        pkg = types.ModuleType("kernelllm")
        pkg.__path__ = [src]
        sys.modules["kernelllm"] = pkg
    elif src not in list(pkg.__path__):
        pkg.__path__.append(src)
    return importlib.import_module(f"kernelllm.worker.{name}")
