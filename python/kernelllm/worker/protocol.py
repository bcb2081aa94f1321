"""Worker side of the verifier protocol v1 (docs/verifier-protocol.md): length-prefixed JSON
frames on fd 3 (requests) and fd 4 (replies), JSON "values" for non-tensor data, and
safetensors files, size-checked before loading, for tensors. Also the request loop shared by
the judge and candidate workers."""
from __future__ import annotations

import base64
import errno
import json
import math
import os
import stat
import struct
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

VERSION = 1
MAX_MESSAGE_BYTES = 1 << 20  # kMaxMessageBytes on the C++ side
REQUEST_FD = 3
REPLY_FD = 4


class ProtocolError(Exception):
    """The peer broke the framing or the message schema."""


# Tensors named with this prefix in a trial's inputs file are the judge's probe set (the same
# problem inputs under another seed); the candidate's outputs for them come back under it too.
PROBE_PREFIX = "probe:"


class WorkerError(Exception):
    """An error with a protocol `kind` (compile_error, runtime_error, problem_error, ...)."""

    def __init__(self, kind: str, message: str, tb: str = "", **extra: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.tb = tb
        self.extra = extra


def _read_exact(fd: int, n: int) -> Optional[bytes]:
    chunks = []
    while n > 0:
        b = os.read(fd, n)
        if not b:
            return None
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def read_frame(fd: int) -> Optional[dict]:
    """One message, or None at a clean EOF before a frame starts."""
    head = _read_exact(fd, 4)
    if head is None:
        return None
    (n,) = struct.unpack("<I", head)
    if n > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"frame of {n} bytes exceeds the limit of {MAX_MESSAGE_BYTES} bytes")
    body = _read_exact(fd, n)
    if body is None:
        raise ProtocolError(f"EOF inside a frame: expected {n} bytes")
    try:
        msg = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"frame is not UTF-8 JSON: {e}") from None
    if not isinstance(msg, dict):
        raise ProtocolError(f"expected a JSON object, found {type(msg).__name__}")
    return msg


def encode_frame(msg: dict) -> bytes:
    body = json.dumps(msg, allow_nan=False, separators=(",", ":")).encode("utf-8")
    if len(body) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"reply of {len(body)} bytes exceeds the limit of {MAX_MESSAGE_BYTES} bytes")
    return struct.pack("<I", len(body)) + body


def write_frame(fd: int, msg: dict) -> None:
    data = encode_frame(msg)
    while data:
        n = os.write(fd, data)
        data = data[n:]


# ---- values -------------------------------------------------------------------------------


def _encode_float(x: float) -> Any:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def encode_value(x: Any, tensors: List[Any], file_name: str) -> dict:
    """JSON value for `x`; tensors are appended to `tensors` and referenced by index."""
    import torch

    if x is None:
        return {"t": "none"}
    if isinstance(x, bool):
        return {"t": "bool", "v": x}
    if isinstance(x, int):
        return {"t": "int", "v": x}
    if isinstance(x, float):
        return {"t": "float", "v": _encode_float(x)}
    if isinstance(x, str):
        return {"t": "str", "v": x}
    if isinstance(x, torch.Tensor):
        tensors.append(x)
        return {"t": "tensor", "file": file_name, "name": str(len(tensors) - 1)}
    if isinstance(x, (list, tuple)):
        return {"t": "list" if isinstance(x, list) else "tuple",
                "v": [encode_value(e, tensors, file_name) for e in x]}
    if isinstance(x, dict):
        out = {}
        for k, e in x.items():
            if not isinstance(k, str):
                raise WorkerError("problem_error", f"dict keys must be str, found {type(k).__name__}")
            out[k] = encode_value(e, tensors, file_name)
        return {"t": "dict", "v": out}
    raise WorkerError("problem_error",
                      f"cannot send a value of type {type(x).__module__}.{type(x).__qualname__}: "
                      "expected None, bool, int, float, str, tensor, list, tuple or dict")


def decode_value(v: Any, load_file: Callable[[str], Dict[str, Any]]) -> Any:
    """Inverse of encode_value; `load_file(name)` returns the tensors of a file by name."""
    if not isinstance(v, dict) or "t" not in v:
        raise ProtocolError(f"expected a value object with key 't', found {v!r:.80}")
    t = v["t"]
    if t == "none":
        return None
    if t in ("bool", "int", "str"):
        want = {"bool": bool, "int": int, "str": str}[t]
        if type(v.get("v")) is not want:
            raise ProtocolError(f"value of type {t} holds {type(v.get('v')).__name__}")
        return v["v"]
    if t == "float":
        x = v.get("v")
        if isinstance(x, str) and x in ("nan", "inf", "-inf"):
            return float(x)
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return float(x)
        raise ProtocolError(f"float value holds {x!r:.40}")
    if t in ("list", "tuple"):
        items = [decode_value(e, load_file) for e in v.get("v", [])]
        return items if t == "list" else tuple(items)
    if t == "dict":
        return {k: decode_value(e, load_file) for k, e in v.get("v", {}).items()}
    if t == "tensor":
        tensors = load_file(v["file"])
        if v["name"] not in tensors:
            raise ProtocolError(f"tensor {v['name']!r} not in {v['file']!r}")
        return tensors[v["name"]]
    raise ProtocolError(f"unknown value type {t!r}")


def decode_source(msg: Dict[str, Any], key: str = "source_b64") -> bytes:
    """A source text sent as base64 in `msg[key]` (it may not be UTF-8); else `msg["source"]`."""
    if key in msg:
        try:
            return base64.b64decode(str(msg[key]).encode(), validate=True)
        except Exception as e:
            raise ValueError(f"{key} is not base64: {e}") from None
    return str(msg.get("source", "")).encode()


# ---- tensor files -------------------------------------------------------------------------


def save_tensors(path: str, tensors: Dict[str, Any]) -> int:
    """Writes CPU copies (contiguous, unshared) of `tensors`; returns the file size."""
    from safetensors.torch import save_file

    # A device tensor's host copy is already its own; a host tensor is cloned (safetensors refuses
    # tensors that share storage, and the caller may reuse its buffers).
    plain = {k: t.detach().to("cpu").contiguous() if t.device.type != "cpu" else t.detach().contiguous().clone()
             for k, t in tensors.items()}
    tmp = path + ".tmp"
    save_file(plain, tmp)
    os.replace(tmp, path)
    return os.path.getsize(path)


class UntrustedFile(WorkerError):
    """A tensor file that is not the plain regular file a worker writes: a symlink, FIFO, device
    or hard link (the trusted side never follows what a candidate put at a path)."""

    def __init__(self, message: str) -> None:
        super().__init__("untrusted_file", message)


def load_tensors(path: str, max_bytes: int, untrusted_writer: bool = False) -> Dict[str, Any]:
    """Tensors of a safetensors file on CPU. The path is opened without following a symlink and
    without blocking (a FIFO cannot hang us); it must be a regular file with one link, of at most
    `max_bytes`; the tensors are read through that descriptor, so a file swapped in afterwards is
    never read. With `untrusted_writer` (a candidate's outputs) it must also have exactly one link:
    a hard link would hand us a file the candidate did not write."""
    from safetensors.torch import load_file

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UntrustedFile(f"tensor file {path} is a symbolic link") from None
        raise WorkerError("protocol", f"cannot open tensor file {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFile(f"tensor file {path} is not a regular file (mode {stat.filemode(st.st_mode)})")
        if untrusted_writer and st.st_nlink != 1:
            raise UntrustedFile(f"tensor file {path} has {st.st_nlink} hard links")
        size = st.st_size
        if size > max_bytes:
            raise WorkerError("protocol", f"tensor file {path} has {size} bytes, over the limit of {max_bytes}")
        head = os.pread(fd, 8, 0)
        if len(head) < 8 or struct.unpack("<Q", head)[0] > min(size, 100 << 20):
            raise WorkerError("protocol", f"tensor file {path} has no valid safetensors header")
        try:
            # The open descriptor's own inode, whatever the path holds by now.
            return load_file(f"/proc/self/fd/{fd}", device="cpu")
        except Exception as e:  # safetensors raises its own error types
            raise WorkerError("protocol", f"tensor file {path} is not valid safetensors: {e}") from None
    finally:
        os.close(fd)


def tensor_list(tensors: Dict[str, Any], n: int, what: str) -> List[Any]:
    """Positional tensors "0".."n-1" of a file, checking that exactly those are present."""
    names = sorted(tensors, key=lambda s: (len(s), s))
    if names != [str(i) for i in range(n)]:
        raise WorkerError("protocol", f"{what}: expected tensors named 0..{n - 1}, found {names[:8]}")
    return [tensors[str(i)] for i in range(n)]


# ---- request loop -------------------------------------------------------------------------


class Steps:
    """Where a request's time goes, for its reply's `steps_ms` (the report's judge_ms shows a
    judge's as "<op>.<step>"): `mark(name)` adds the time since the last mark to `name`; `ms()` is
    the breakdown, the time since the last mark as `other`."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self._ms: Dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self._ms[name] = self._ms.get(name, 0.0) + (now - self._last) * 1e3
        self._last = now

    def ms(self) -> Dict[str, float]:
        return dict(self._ms, other=(time.perf_counter() - self._last) * 1e3)


def error_reply(kind: str, message: str, tb: str = "", **extra: Any) -> dict:
    err = {"kind": kind, "message": message, "traceback": tb[-8000:]}
    err.update(extra)
    return {"v": VERSION, "ok": False, "error": err}


def serve(handlers: Dict[str, Callable[[dict], dict]], hello: dict,
          request_fd: int = REQUEST_FD, reply_fd: int = REPLY_FD) -> int:
    """Sends the greeting, then answers requests until `exit` or EOF. A framing error is
    answered once (kind "protocol") and ends the worker with status 3, since the stream can
    no longer be trusted; a bad version or unknown op is answered and the loop goes on."""
    write_frame(reply_fd, dict(hello, v=VERSION, ok=True, op="hello"))
    while True:
        try:
            msg = read_frame(request_fd)
        except ProtocolError as e:
            write_frame(reply_fd, error_reply("protocol", str(e)))
            return 3
        if msg is None:
            return 0
        # Every reply carries the request's `id` (unpredictable, from the orchestrator), so a frame
        # written before its request arrived cannot pass for that request's reply.
        rid = msg.get("id")

        def answer(reply: dict) -> None:
            write_frame(reply_fd, dict(reply, id=rid) if rid is not None else reply)

        if msg.get("v") != VERSION:
            answer(error_reply("protocol", f"protocol version: expected {VERSION}, found {msg.get('v')!r}"))
            continue
        op = msg.get("op")
        if op == "exit":
            answer({"v": VERSION, "ok": True, "op": "exit"})
            return 0
        handler = handlers.get(op) if isinstance(op, str) else None
        if handler is None:
            answer(error_reply("protocol", f"unknown op {op!r}: expected one of {sorted(handlers) + ['exit']}"))
            continue
        try:
            reply = dict(handler(msg), v=VERSION, ok=True, op=op)
        except WorkerError as e:
            reply = error_reply(e.kind, e.message, e.tb, **e.extra)
        except ProtocolError as e:
            reply = error_reply("protocol", str(e))
        except KeyError as e:
            reply = error_reply("protocol", f"request {op!r}: missing field {e}", traceback.format_exc())
        except Exception as e:  # a bug in the worker itself: report, keep serving
            reply = error_reply("internal", f"{type(e).__name__}: {e}", traceback.format_exc())
        try:
            answer(reply)
        except (ProtocolError, ValueError) as e:
            answer(error_reply("internal", f"reply not encodable: {e}"))


def stderr_note(text: str) -> None:
    sys.stderr.write(text.rstrip() + "\n")
    sys.stderr.flush()
