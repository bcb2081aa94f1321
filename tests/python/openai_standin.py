"""A stand-in OpenAI-compatible server for tests: threaded http.server on 127.0.0.1 (a free port)
speaking the wire format of GET /v1/models, POST /v1/completions and /v1/chat/completions
(choices with index/text or message, finish_reason, usage), and misbehaving on demand: queued
faults (a status with headers, e.g. 429 + Retry-After; a delay), a cap on n (400 naming n for
more) or silently fewer choices than n (as servers without n support do), and a required API
key (401 otherwise); https with a given certificate. Every request is
logged for the tests to check."""
from __future__ import annotations

import collections
import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Optional

# A correct Triton ReLU in KernelLLM's output format (one fenced python block), as the model
# would continue its prompt: the labelled case tests/cases/relu/correct_basic.py, less its header.
_CASE = Path(__file__).resolve().parents[1] / "cases" / "relu" / "correct_basic.py"
RELU_MODEL_NEW = "".join(line for line in _CASE.read_text().splitlines(True) if not line.startswith("# "))
KERNELLLM_REPLY = "```python\n" + RELU_MODEL_NEW + "```\n"
CHAT_REPLY = "Here is the module with a Triton kernel:\n\n```python\n" + RELU_MODEL_NEW + "```\n\nIt fuses nothing else."


class Fault:
    """What one request gets instead of an answer: a status (with headers and an error message),
    or a delay before the normal answer."""

    def __init__(self, status: int = 200, headers: Optional[dict] = None, message: str = "", delay_s: float = 0.0):
        self.status, self.headers, self.message, self.delay_s = status, headers or {}, message, delay_s


class StandIn:
    def __init__(self, model: str = "standin-model", api_key: Optional[str] = None, max_n: Optional[int] = None,
                 reply: Optional[Callable[[dict, int], str]] = None, tls: Optional[tuple[str, str]] = None,
                 choices_cap: Optional[int] = None):
        self.model, self.api_key, self.max_n, self.choices_cap = model, api_key, max_n, choices_cap
        self.reply = reply or (lambda body, i: CHAT_REPLY if "messages" in body else KERNELLLM_REPLY)
        self.faults: collections.deque[Fault] = collections.deque()
        self.log: list[dict] = []  # {"path", "body", "authorization", "t", "status"}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._scheme = "http"
        if tls:  # (certificate file, key file)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"{self._scheme}://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> "StandIn":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def requests(self, path_suffix: str = "completions") -> list[dict]:
        with self._lock:
            return [r for r in self.log if r["path"].endswith(path_suffix)]

    # -- the protocol ---------------------------------------------------------------------------
    def _answer(self, path: str, body: dict, authorization: Optional[str]) -> tuple[int, dict, dict]:
        if self.api_key is not None and authorization != f"Bearer {self.api_key}":
            return 401, {}, error_body("Incorrect API key provided", "invalid_request_error", "invalid_api_key")
        if path == "/v1/models":
            return 200, {}, {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "test"}]}
        chat = path == "/v1/chat/completions"
        if not chat and path != "/v1/completions":
            return 404, {}, error_body(f"no route {path}", "not_found_error")
        with self._lock:
            fault = self.faults.popleft() if self.faults else None
        if fault and fault.delay_s:
            time.sleep(fault.delay_s)
        if fault and fault.status != 200:
            return fault.status, fault.headers, error_body(fault.message or f"stand-in fault {fault.status}", "server_error")
        if body.get("model") != self.model:
            return 404, {}, error_body(f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        needed = "messages" if chat else "prompt"
        if needed not in body:
            return 400, {}, error_body(f"expected {needed}", "BadRequestError")
        n = int(body.get("n", 1))
        if self.max_n is not None and n > self.max_n:
            return 400, {}, error_body(f"n must be at most {self.max_n}, found {n}", "BadRequestError")
        texts = [self.reply(body, i) for i in range(min(n, self.choices_cap or n))]
        choices = []
        for i, text in enumerate(texts):
            c = {"index": i, "finish_reason": "stop", "logprobs": None}
            if chat:
                c["message"] = {"role": "assistant", "content": text}
            else:
                c["text"] = text
            choices.append(c)
        prompt_tokens = len(json.dumps(body.get("messages", body.get("prompt")))) // 4
        completion_tokens = sum(len(t) // 4 for t in texts)
        return 200, {}, {"id": f"cmpl-{len(self.log)}", "object": "chat.completion" if chat else "text_completion",
                         "created": int(time.time()), "model": self.model, "choices": choices[::-1],  # any order
                         "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                   "total_tokens": prompt_tokens + completion_tokens}}

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _serve(self, body: dict) -> None:
                entry = {"path": self.path, "body": body, "authorization": self.headers.get("Authorization"),
                         "t": time.monotonic()}
                with standin._lock:
                    standin.log.append(entry)
                status, headers, payload = standin._answer(self.path, body, entry["authorization"])
                entry["status"] = status
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

            def do_GET(self):
                self._serve({})

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"_unparsed": raw.decode(errors="replace")}
                self._serve(body)

        return Handler


def error_body(message: str, kind: str, code=None) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
