"""`kernelllm serve` with the official `openai` client as the real client: models, completions
with n choices and usage, chat (Llama-3 format), streaming equal to the whole answer, seeds,
stop strings, concurrent clients (each answer equal to its solo answer), the API key, bad input
answered with OpenAI-style 4xx bodies while the server keeps serving, a client that leaves
mid-stream, and the optimize endpoint's verdict stream. One server per module (tiny model, CPU).
Uses $KERNELLLM_CLI when set (a build tree's binary), else the installed console script."""
from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import openai
import pytest
import requests
from tokenizers import Tokenizer

from cli_path import find_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = "tiny-served"
# The Llama-3 chat template's shape (header, trimmed content, eot); the server recognizes it.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


class Server:
    def __init__(self, model_dir: Path, log: Path, *extra: str):
        self.log = log
        self.proc = subprocess.Popen(
            [find_cli(), "serve", "--model", str(model_dir), "--served-model-name", MODEL, "--host", "127.0.0.1",
             "--port", "0", "--threads", "2", "--max-n", "8", "--max-tokens", "8192", "--no-cache", *extra],
            stdout=subprocess.DEVNULL, stderr=log.open("w"))
        deadline = time.time() + 60
        while time.time() < deadline:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text())
            if m:
                self.url = f"http://127.0.0.1:{m.group(1)}"
                return
            assert self.proc.poll() is None, f"the server exited: {log.read_text()[-3000:]}"
            time.sleep(0.1)
        raise AssertionError(f"the server did not start: {log.read_text()[-3000:]}")

    def client(self, key: str = "none") -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=120)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def model_dir(make_model_dir) -> Path:
    d = make_model_dir("served")
    config_file = d / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["chat_template"] = LLAMA3_TEMPLATE
    config_file.unlink()  # a symlink into the shared test data: replace, never write through
    config_file.write_text(json.dumps(config))
    return d


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    s = Server(model_dir, tmp_path_factory.mktemp("serve") / "server.log", "--work-dir",
               str(tmp_path_factory.mktemp("serve-work")))
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log.read_text()[-3000:]


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return server.client()


@pytest.fixture(scope="module")
def tokenizer(model_dir) -> Tokenizer:
    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))


def answers_after(server) -> None:
    """The server still serves a plain request."""
    r = server.client().completions.create(model=MODEL, prompt="x = 1", max_tokens=2, temperature=0)
    assert len(r.choices) == 1


def test_models_lists_the_served_model(client):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4")


def test_completions_give_n_choices_and_count_usage(client, tokenizer):
    prompt = "def relu(x):"
    r = client.completions.create(model=MODEL, prompt=prompt, n=3, max_tokens=8, temperature=1.0, seed=3)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert all(c.finish_reason in ("stop", "length") for c in r.choices)
    assert r.usage.prompt_tokens == len(tokenizer.encode(prompt).ids)  # BOS included, as the engine encodes
    lengths = sum(8 for c in r.choices if c.finish_reason == "length")
    assert lengths <= r.usage.completion_tokens <= 24
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_renders_the_llama3_format(client, tokenizer):
    messages = [{"role": "system", "content": "You write Triton. "}, {"role": "user", "content": "relu please"}]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, temperature=0)
    assert r.choices[0].message.role == "assistant"
    assert isinstance(r.choices[0].message.content, str)
    rendered = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou write Triton.<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nrelu please<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert r.usage.prompt_tokens == len(tokenizer.encode(rendered, add_special_tokens=False).ids)


def test_streamed_text_equals_the_whole_greedy_answer(client):
    whole = client.completions.create(model=MODEL, prompt="import torch", max_tokens=24, temperature=0)
    chunks = list(client.completions.create(model=MODEL, prompt="import torch", max_tokens=24, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices and c.choices[0].text]) > 1, "expected the text in several chunks"
    assert text == whole.choices[0].text
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens

    # n = 2, sampled: each choice's chunks, joined, equal that choice of the whole answer.
    args = dict(model=MODEL, prompt="import torch", max_tokens=12, temperature=1.0, n=2, seed=9)
    whole2 = client.completions.create(**args)
    joined = {0: "", 1: ""}
    for c in client.completions.create(**args, stream=True):
        for ch in c.choices:
            joined[ch.index] += ch.text
    assert joined == {c.index: c.text for c in whole2.choices}

    msgs = [{"role": "user", "content": "hi"}]
    chat_whole = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=16, temperature=0)
    chat_chunks = list(client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=16, temperature=0, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chat_chunks) == chat_whole.choices[0].message.content
    assert chat_chunks[-1].choices[0].finish_reason == chat_whole.choices[0].finish_reason


def test_a_seed_reproduces_the_samples(client):
    def texts(seed):
        r = client.completions.create(model=MODEL, prompt="def f(", n=3, max_tokens=16, temperature=1.0, seed=seed)
        return [c.text for c in sorted(r.choices, key=lambda c: c.index)]

    assert texts(11) == texts(11)
    assert texts(11) != texts(12)


def test_a_stop_string_cuts_the_text(client):
    full = client.completions.create(model=MODEL, prompt="class Model", max_tokens=32, temperature=0).choices[0].text
    assert len(full) > 8, full
    stop = full[len(full) // 2:len(full) // 2 + 3]
    r = client.completions.create(model=MODEL, prompt="class Model", max_tokens=32, temperature=0, stop=[stop])
    assert r.choices[0].text == full[:full.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_concurrent_clients_are_all_answered_as_if_alone(client):
    prompts = [f"def kernel_{i}(x):" for i in range(6)]
    solo = {p: client.completions.create(model=MODEL, prompt=p, max_tokens=12, temperature=0.8, seed=5).choices[0].text
            for p in prompts}
    got, errors = {}, []

    def ask(p):
        try:
            got[p] = client.completions.create(model=MODEL, prompt=p, max_tokens=12, temperature=0.8, seed=5).choices[0].text
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert got == solo  # batching with the others changes no token


def test_the_api_key_is_enforced_and_chat_needs_a_llama3_template(tiny_model, tmp_path):
    # tiny_model's tokenizer_config.json has no chat_template: chat is refused, the rest served.
    s = Server(tiny_model, tmp_path / "server.log", "--api-key", "sekret")
    try:
        with pytest.raises(openai.AuthenticationError):
            s.client("wrong").models.list()
        r = requests.get(s.url + "/v1/models", timeout=30)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert [m.id for m in s.client("sekret").models.list().data] == [MODEL]
        with pytest.raises(openai.BadRequestError) as e:
            s.client("sekret").chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        assert e.value.body["code"] == "chat_template_unsupported" and "chat_template" in e.value.body["message"]
    finally:
        s.stop()


def _long_prompt_ids(n):
    return [100 + (i % 50) for i in range(n)]


@pytest.mark.parametrize("path,body,status,param", [
    ("/v1/completions", b'{"model": "tiny-served", "prompt": ', 400, None),
    ("/v1/completions", {"model": "gpt-4", "prompt": "x"}, 404, "model"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "n": 1000}, 400, "n"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 100000}, 400, "max_tokens"),
    ("/v1/completions", {"model": MODEL, "prompt": _long_prompt_ids(4097)}, 400, "prompt"),
    ("/v1/completions", {"model": MODEL, "prompt": _long_prompt_ids(4090), "max_tokens": 100}, 400, "max_tokens"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "temperature": "hot"}, 400, "temperature"),
    ("/v1/chat/completions", {"model": MODEL, "messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages"),
    ("/v1/nowhere", {}, 404, None),
])
def test_bad_input_gets_an_openai_error_and_the_server_keeps_serving(server, path, body, status, param):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = requests.post(server.url + path, data=data, headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["param"] == param
    if "context" in err["message"]:
        assert err["code"] == "context_length_exceeded"
    answers_after(server)


def test_a_body_over_the_limit_is_refused_with_413(server):
    r = requests.post(server.url + "/v1/completions", data=b"x" * (9 << 20), timeout=60)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
    answers_after(server)


def test_a_client_leaving_mid_stream_cancels_its_request(server):
    before = requests.get(server.url + "/health", timeout=30).json()
    body = {"model": MODEL, "prompt": "def f(x):", "max_tokens": 4000, "temperature": 1.0, "seed": 1, "stream": True}
    with requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200
        next(r.iter_lines())
    # Closed: the server notices at its next write, cancels, and goes idle well before 4000 tokens.
    deadline = time.time() + 30
    while time.time() < deadline:
        h = requests.get(server.url + "/health", timeout=30).json()
        if h["running"] == 0 and h["requests_finished"] > before["requests_finished"]:
            break
        time.sleep(0.1)
    assert h["running"] == 0 and h["queued"] == 0
    assert h["generated_tokens"] - before["generated_tokens"] < 4000
    answers_after(server)


def test_optimize_streams_one_verdict_per_candidate_then_the_report(server):
    module = (ROOT / "examples" / "relu.py").read_text()
    body = {"module": module, "k": 2, "max_tokens": 16, "seed": 4, "stream": True}
    events = []
    with requests.post(server.url + "/v1/kernelllm/optimize", json=body, stream=True, timeout=600) as r:
        assert r.status_code == 200, r.text
        for line in r.iter_lines():
            if line.startswith(b"data: "):
                events.append(line[6:].decode())
    assert events[-1] == "[DONE]"
    parsed = [json.loads(e) for e in events[:-1]]
    verdicts = [e for e in parsed if e["type"] == "verdict"]
    assert sorted(e["index"] for e in verdicts) == [0, 1]
    assert all(e["result"]["verdict"] != "correct" for e in verdicts)  # a random model writes no Triton
    assert parsed[-1]["type"] == "result", parsed[-1]
    report = parsed[-1]["report"]
    assert len(report["candidates"]) == 2 and report["best"] is None
    assert [c["verdict"] for c in report["candidates"]] == [
        next(e["result"]["verdict"] for e in verdicts if e["index"] == i) for i in range(2)]
    assert len(report["failure_reasons"]) == 2


def test_optimize_refuses_a_module_without_model(server):
    r = requests.post(server.url + "/v1/kernelllm/optimize", json={"module": "x = 1", "k": 2}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "module"


@pytest.mark.parametrize("form", ["kernelllm", "chat"])
def test_our_endpoint_client_round_trips_through_our_server(server, tmp_path, form):
    # Part 3's client (`--endpoint`) against part 2's server, both real, on loopback: the samples
    # come back split over requests (--endpoint-max-n 2 for k = 3) and are extracted per sample.
    work = tmp_path / "work"
    args = [find_cli(), "repl", "--endpoint", server.url + "/v1", "--endpoint-prompt", form, "--endpoint-max-n", "2",
            "-k", "3", "--no-verify", "--seed", "5", "--max-new-tokens", "12", "--work-dir", str(work)]
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    before = requests.get(server.url + "/health", timeout=30).json()
    r = subprocess.run(args, input=(ROOT / "examples" / "relu.py").read_text(), capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(sorted((work / "module-1").glob("sample*.py"))) == 3, r.stderr[-3000:]
    after = requests.get(server.url + "/health", timeout=30).json()
    assert after["requests_finished"] - before["requests_finished"] >= 2  # 3 samples at most 2 per request
    assert MODEL in r.stderr + r.stdout  # the model named as the one that wrote the samples
