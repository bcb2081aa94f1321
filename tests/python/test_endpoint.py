"""Generation through an OpenAI-compatible endpoint (`--endpoint URL`): the real CLI against a
stand-in server on 127.0.0.1 (openai_standin.py). Two verified round trips on CPU (optimize with
KernelLLM's prompt, eval with the chat form: the stand-in answers a correct Triton ReLU, the
report names the model), then fast paths without verification (`repl --no-verify`, or optimize
failing before it verifies): n split over requests, a cap on n learned from a 400, fewer choices
than n, 429 with Retry-After, 500 then success, the last retry, a timeout, a refused or missing
key, an unreachable server, https with a trusted and an untrusted certificate, bad arguments.

To run the round trips against the real `kernelllm serve` instead, make `roundtrip` yield its base
URL and model (and expect nonsense, not `correct`, from the tiny model); the fault tests need the
stand-in. Uses $KERNELLLM_CLI when set (a build tree's binary), else the installed console script."""
from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from openai_standin import Fault, StandIn  # noqa: E402

from cli_path import find_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RELU = ROOT / "tests" / "cases" / "problems" / "relu.py"
KEY = "sk-test-4f1d2c"  # never to be printed by the CLI
EXIT_NOTHING_CORRECT = 3


@pytest.fixture(scope="module")
def cli() -> str:
    return find_cli()


@pytest.fixture
def standin():
    s = StandIn().start()
    yield s
    s.stop()


@pytest.fixture
def roundtrip():
    """(base URL, model name, the stand-in or None): where the verified round trips generate.
    For the real `kernelllm serve`: start it on a free loopback port with the tiny model and
    its API key set to KEY (if it checks keys), wait for GET /v1/models, yield (url, model, None)."""
    s = StandIn(api_key=KEY).start()
    yield s.base_url, s.model, s
    s.stop()


def env(**extra: str) -> dict:
    e = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    e["TRITON_INTERPRET"] = "1"
    e.update(extra)
    return e


def run(args: list, timeout: float = 600, stdin: str | None = None, **env_extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, input=stdin, env=env(**env_extra))


def generate_only(cli: str, url: str, work: Path, *extra: str, **env_extra: str) -> subprocess.CompletedProcess:
    """repl without verification: the endpoint's samples extracted into work/module-1/sample<i>.py."""
    args = [cli, "repl", "--endpoint", url, "--no-verify", "--seed", "11", "--max-new-tokens", "64", "--work-dir",
            str(work), *extra]
    return run(args, stdin=RELU.read_text(), **env_extra)


def samples_written(work: Path) -> list[str]:
    return [p.read_text() for p in sorted((work / "module-1").glob("sample*.py"))]


def optimize_args(cli: str, url: str, d: Path, *extra: str) -> list:
    return [cli, "optimize", str(RELU), "--endpoint", url, "--seed", "11", "--max-new-tokens", "64", "--verify-device",
            "cpu", "--cache", str(d / "cache.sqlite"), "--work-dir", str(d / "work"), "--out", str(d / "out.py"), *extra]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- verified round trips ------------------------------------------------------------------------

def test_optimize_through_the_endpoint_writes_a_verified_kernel(cli, roundtrip, tmp_path):
    url, model, standin = roundtrip
    r = run(optimize_args(cli, url, tmp_path, "--endpoint-model", model, "-k", "2", "--jobs", "2"), OPENAI_API_KEY=KEY)
    assert r.returncode == (0 if standin else EXIT_NOTHING_CORRECT), r.stderr[-3000:] + r.stdout[-2000:]
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    assert report["source"] == f"endpoint {url} model {model} (kernelllm prompt)"
    assert report["options"]["endpoint"] == {"url": url, "model": model, "prompt": "kernelllm"}
    assert KEY not in r.stdout + r.stderr + json.dumps(report)
    assert len(report["candidates"]) == 2
    if standin:
        assert [c["verdict"] for c in report["candidates"]] == ["correct", "correct"]
        assert "class ModelNew" in (tmp_path / "out.py").read_text()
        (req,) = standin.requests("/v1/completions")
        assert req["authorization"] == f"Bearer {KEY}"
        body = req["body"]
        assert (body["model"], body["n"], body["max_tokens"], body["seed"]) == (model, 2, 64, 11)
        assert body["temperature"] == pytest.approx(0.6) and body["top_p"] == pytest.approx(0.95)
        assert "<|begin_of_text|>" in body["prompt"] and RELU.read_text().strip() in body["prompt"]
        assert report["generation"]["generated_tokens"] > 0


def test_eval_through_a_chat_endpoint_records_the_model_per_run_and_sample(cli, roundtrip, tmp_path):
    url, model, standin = roundtrip
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copyfile(RELU, problems / "relu.py")
    out = tmp_path / "run"
    r = run([cli, "eval", "--problems", str(problems), "--endpoint", url, "--endpoint-model", model,
             "--endpoint-prompt", "chat", "--api-key-env", "MY_KEY", "-k", "2", "--max-new-tokens", "64",
             "--profiles", "strict", "--pass-at", "1,2", "--verify-device", "cpu", "--jobs", "2", "--out", str(out)],
            MY_KEY=KEY)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["model"] == model
    assert report["run"]["endpoint"] == {"url": url, "model": model, "prompt": "chat"}
    assert model in (out / "report.html").read_text()
    assert len(report["problems"][0]["samples"]["strict"]) == 2
    db = sqlite3.connect(str(out / "run.sqlite"))
    origins = [row[0] for row in db.execute("SELECT origin FROM samples ORDER BY sample")]
    db.close()
    assert origins == [f"generated by endpoint {url} model {model} (chat prompt)"] * 2
    assert KEY not in r.stdout + r.stderr + (out / "report.json").read_text()
    if standin:
        assert [s["verdict"] for s in report["problems"][0]["samples"]["strict"]] == ["correct", "correct"]
        assert report["profiles"]["strict"]["pass_at_k"]["1"] == 1.0
        (req,) = standin.requests("/v1/chat/completions")
        (message,) = req["body"]["messages"]
        assert message["role"] == "user" and "ModelNew" in message["content"]
        assert RELU.read_text().strip() in message["content"] and "<|begin_of_text|>" not in message["content"]


# ---- fast paths (no verification) ----------------------------------------------------------------

def test_n_is_split_over_requests_and_the_model_comes_from_the_model_list(cli, standin, tmp_path):
    r = generate_only(cli, standin.base_url, tmp_path, "-k", "5", "--endpoint-max-n", "2")
    assert r.returncode == 0 and "error" not in r.stdout, r.stdout + r.stderr
    reqs = standin.requests("/v1/completions")
    assert sorted(q["body"]["n"] for q in reqs) == [1, 2, 2]
    assert sorted(q["body"]["seed"] for q in reqs) == [11, 13, 15]  # seed + index of the request's first sample
    assert {q["body"]["model"] for q in reqs} == {standin.model}
    assert standin.requests("/v1/models")
    samples = samples_written(tmp_path)
    assert len(samples) == 5 and all("class ModelNew" in s for s in samples)
    assert f"endpoint {standin.base_url} model {standin.model}" in r.stdout


def test_a_cap_on_n_is_learned_from_the_servers_400(cli, tmp_path):
    s = StandIn(max_n=2).start()
    try:
        r = generate_only(cli, s.base_url, tmp_path, "-k", "5", "--endpoint-parallel", "1")
        reqs = s.requests("/v1/completions")
    finally:
        s.stop()
    assert r.returncode == 0 and "error" not in r.stdout, r.stdout + r.stderr
    assert [(q["body"]["n"], q["status"]) for q in reqs] == [(5, 400), (2, 200), (2, 200), (1, 200)]
    assert len(samples_written(tmp_path)) == 5


def test_fewer_choices_than_asked_are_asked_for_again(cli, tmp_path):
    s = StandIn(choices_cap=1).start()  # a server that ignores n
    try:
        r = generate_only(cli, s.base_url, tmp_path, "-k", "3")
        reqs = s.requests("/v1/completions")
    finally:
        s.stop()
    assert r.returncode == 0 and "error" not in r.stdout, r.stdout + r.stderr
    assert [(q["body"]["n"], q["body"]["seed"]) for q in reqs] == [(3, 11), (2, 12), (1, 13)]
    assert len(samples_written(tmp_path)) == 3


def test_429_waits_for_retry_after_then_succeeds(cli, standin, tmp_path):
    standin.faults.append(Fault(429, {"Retry-After": "1"}, "Rate limit reached"))
    r = generate_only(cli, standin.base_url, tmp_path, "-k", "2")
    assert r.returncode == 0 and "error" not in r.stdout, r.stdout + r.stderr
    first, second = standin.requests("/v1/completions")
    assert (first["status"], second["status"]) == (429, 200)
    assert second["t"] - first["t"] >= 0.95
    assert len(samples_written(tmp_path)) == 2


def test_a_500_is_retried_and_the_samples_arrive(cli, standin, tmp_path):
    standin.faults.append(Fault(500, message="upstream hiccup"))
    r = generate_only(cli, standin.base_url, tmp_path, "-k", "2")
    assert r.returncode == 0 and "error" not in r.stdout, r.stdout + r.stderr
    assert [q["status"] for q in standin.requests("/v1/completions")] == [500, 200]
    assert len(samples_written(tmp_path)) == 2


def test_the_last_retry_fails_with_url_status_and_the_servers_message(cli, standin, tmp_path):
    standin.faults.extend(Fault(503, message="overloaded, try later") for _ in range(3))
    r = run(optimize_args(cli, standin.base_url, tmp_path, "--endpoint-retries", "2"))
    assert r.returncode == 1
    assert f"endpoint {standin.base_url}/completions" in r.stderr
    assert "HTTP 503: overloaded, try later; gave up after 3 attempt(s)" in r.stderr
    assert len(standin.requests("/v1/completions")) == 3


def test_a_slow_answer_times_out_with_a_clear_error(cli, standin, tmp_path):
    standin.faults.append(Fault(delay_s=4))
    start = time.monotonic()
    r = run(optimize_args(cli, standin.base_url, tmp_path, "--endpoint-timeout", "1", "--endpoint-retries", "0"))
    assert r.returncode == 1
    assert "no answer within 1 s (--endpoint-timeout)" in r.stderr
    assert time.monotonic() - start < 4


def test_a_refused_key_is_a_clear_error_that_never_shows_the_key(cli, tmp_path):
    s = StandIn(api_key="the-right-key").start()
    try:
        r = run(optimize_args(cli, s.base_url, tmp_path, "--endpoint-model", s.model), OPENAI_API_KEY=KEY)
        tries = len(s.requests("/v1/completions"))
        listing = run(optimize_args(cli, s.base_url, tmp_path), OPENAI_API_KEY=KEY)
        keyless = run(optimize_args(cli, s.base_url, tmp_path, "--endpoint-model", s.model))
    finally:
        s.stop()
    assert r.returncode == 1
    assert "HTTP 401: Incorrect API key provided (the API key from $OPENAI_API_KEY was refused)" in r.stderr
    assert KEY not in r.stdout + r.stderr
    assert tries == 1  # 401 is not retried
    assert listing.returncode == 1 and f"{s.base_url}/models: HTTP 401" in listing.stderr
    assert "was refused" in listing.stderr and KEY not in listing.stderr
    assert keyless.returncode == 1 and "(no API key was sent: $OPENAI_API_KEY is not set)" in keyless.stderr


def test_a_named_key_variable_that_is_unset_is_a_clear_error(cli, standin, tmp_path):
    r = run(optimize_args(cli, standin.base_url, tmp_path, "--api-key-env", "NO_SUCH_KEY_VAR"))
    assert r.returncode == 1
    assert "--api-key-env NO_SUCH_KEY_VAR: expected the API key in $NO_SUCH_KEY_VAR, found it unset" in r.stderr


def test_an_unreachable_endpoint_is_a_clear_error(cli, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    r = run(optimize_args(cli, url, tmp_path, "--endpoint-model", "m", "--endpoint-retries", "1"))
    assert r.returncode == 1
    assert f"endpoint {url}/completions (model m): cannot connect" in r.stderr
    assert "gave up after 2 attempt(s)" in r.stderr
    r = run(optimize_args(cli, url, tmp_path))  # no model given: the model list cannot be read either
    assert r.returncode == 1 and f"endpoint {url}/models: cannot list models" in r.stderr


def test_https_verifies_the_server_certificate_against_the_trusted_cas(cli, tmp_path):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    s = StandIn(tls=(str(cert), str(key))).start()
    try:
        # OpenSSL's default verify paths honour SSL_CERT_FILE: our certificate as the one trusted CA.
        trusted = generate_only(cli, s.base_url, tmp_path / "w", "-k", "1", SSL_CERT_FILE=str(cert))
        untrusted = run(optimize_args(cli, s.base_url, tmp_path, "--endpoint-model", s.model))
    finally:
        s.stop()
    assert s.base_url.startswith("https://")
    assert trusted.returncode == 0 and "error" not in trusted.stdout, trusted.stdout + trusted.stderr
    assert len(samples_written(tmp_path / "w")) == 1
    assert untrusted.returncode == 1
    assert "TLS certificate did not verify" in untrusted.stderr


def test_bad_endpoint_arguments_are_rejected(cli, standin, tmp_path):
    r = run(optimize_args(cli, "ftp://127.0.0.1/v1", tmp_path, "--endpoint-model", "m"))
    assert r.returncode == 1 and "expected an OpenAI-compatible base URL" in r.stderr
    r = run(optimize_args(cli, standin.base_url + "/completions", tmp_path, "--endpoint-model", "m"))
    assert r.returncode == 1 and "that names an endpoint" in r.stderr
    r = run(optimize_args(cli, standin.base_url, tmp_path, "--model", "some/model"))
    assert r.returncode == 2 and "exactly one of --model and --endpoint" in r.stderr
    r = run(optimize_args(cli, standin.base_url, tmp_path, "--endpoint-model", "not-served"))
    assert r.returncode == 1 and "HTTP 404: The model `not-served` does not exist." in r.stderr
