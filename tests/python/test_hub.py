"""Downloads from the Hugging Face Hub (issue #44): the CLI's --model org/name and the Python
KernelLLM("org/name") fetch into the HF cache through huggingface_hub, from a stand-in Hub on
127.0.0.1 (HF_ENDPOINT) serving the sharded tiny model in the Hub's URL layout. Misbehaviour
(404, gated, connection refused, a transfer cut off halfway) gives a clear error and never a
snapshot that a later run trusts."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stand_in_hub import Repo, StandInHub, closed_port

MAIN = "1" * 40
V1 = "2" * 40
REPO = "org/tiny"
NEEDED = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
          "special_tokens_map.json", "kernelllm.py", "model.safetensors.index.json",
          "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}
GENERATE = ["generate", "--prompt", "def forward(self, x):", "-n", "2", "--seed", "3", "--max-new-tokens", "6"]
TEMPLATE = 'PROMPT_TEMPLATE = """stand-in template\n{}\n"""\n'


@pytest.fixture(scope="session")
def repo_files(testdata) -> dict:
    """The sharded tiny model as a Hub repository, plus files kernelllm must not fetch."""
    src = testdata / "models" / "tiny-bf16-sharded"
    files = {f.name: f.read_bytes() for f in src.iterdir() if not f.name.startswith("golden")}
    files["kernelllm.py"] = TEMPLATE.encode()
    files["README.md"] = b"# tiny\n"
    files["pytorch_model.bin"] = b"\0" * 4096
    files["original/consolidated.00.pth"] = b"\0" * 4096
    assert NEEDED <= set(files), sorted(files)
    return files


@pytest.fixture
def hub(repo_files, tmp_path, monkeypatch):
    """A running stand-in Hub with org/tiny (main and v1), HF_ENDPOINT pointing at it and an
    empty HF cache under tmp_path (no token, online)."""
    server = StandInHub({REPO: Repo(repo_files, {"main": MAIN, "v1": V1})}).start()
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(home))
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN", "HF_TOKEN_PATH",
                "HUGGING_FACE_HUB_TOKEN", "KERNELLLM_HUB_PYTHON"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    server.home = home
    yield server
    server.stop()


def run(script, *args, env=None, timeout=120):
    return subprocess.run([script, *args], capture_output=True, text=True, timeout=timeout, env=env)


def cache_repo(home: Path) -> Path:
    return home / "hub" / "models--org--tiny"


def snapshot_files(snapshot: Path) -> set:
    return {str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if not p.is_dir()}


def env_with(**changes):
    env = dict(os.environ)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def test_cli_downloads_once_then_runs_offline(kernelllm_script, hub, testdata):
    first = run(kernelllm_script, *GENERATE, "--model", REPO, "--json", str(hub.home / "out.json"))
    assert first.returncode == 0, first.stderr
    assert f"downloading {REPO} (revision main) from {hub.url}" in first.stderr
    assert "Fetching" in first.stderr or "%|" in first.stderr  # huggingface_hub's progress bar, on stderr
    assert "=== sample 1 (" in first.stdout and "Fetching" not in first.stdout
    snapshot = cache_repo(hub.home) / "snapshots" / MAIN
    assert (cache_repo(hub.home) / "refs" / "main").read_text() == MAIN
    # Only what the engine reads: no README, no .bin, no original/.
    assert snapshot_files(snapshot) == NEEDED
    assert set(hub.fetched()) == NEEDED and len(hub.fetched()) == len(NEEDED)
    assert json.loads((hub.home / "out.json").read_text())["model"] == str(snapshot)

    # The same completions as from the checkpoint directory itself.
    local = run(kernelllm_script, *GENERATE, "--model", str(testdata / "models" / "tiny-bf16-sharded"))
    assert local.returncode == 0, local.stderr
    assert first.stdout == local.stdout

    hub.stop()  # from here on, nothing answers at HF_ENDPOINT
    seen = len(hub.requests)
    offline = run(kernelllm_script, *GENERATE, "--model", REPO, "--offline")
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout == first.stdout and "downloading" not in offline.stderr
    env_offline = run(kernelllm_script, *GENERATE, "--model", REPO, env=env_with(HF_HUB_OFFLINE="1"))
    assert env_offline.returncode == 0, env_offline.stderr
    assert env_offline.stdout == first.stdout
    # Cached and complete: even without --offline nothing is asked of the Hub.
    again = run(kernelllm_script, *GENERATE, "--model", REPO)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout and len(hub.requests) == seen


def test_cli_revision_and_the_template_it_brings(kernelllm_script, hub, tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    r = run(kernelllm_script, "generate", "--model", REPO, "--revision", "v1", "--module", str(module),
            "--max-new-tokens", "2", "--seed", "1", "--json", str(tmp_path / "o.json"))
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "o.json").read_text())
    assert report["model"] == str(cache_repo(hub.home) / "snapshots" / V1)
    assert report["prompt_template"].endswith("kernelllm.py")  # the downloaded kernelllm.py's PROMPT_TEMPLATE
    assert (cache_repo(hub.home) / "refs" / "v1").read_text() == V1
    assert not (cache_repo(hub.home) / "snapshots" / MAIN).exists()

    missing = run(kernelllm_script, *GENERATE, "--model", REPO, "--revision", "nosuch")
    assert missing.returncode == 1
    assert f'has no revision "nosuch" at {hub.url}' in missing.stderr, missing.stderr

    hub.stop()
    by_commit = run(kernelllm_script, *GENERATE, "--model", REPO, "--revision", V1, "--offline")
    assert by_commit.returncode == 0, by_commit.stderr
    # main was never downloaded: offline it is not there.
    main = run(kernelllm_script, *GENERATE, "--model", REPO, "--offline")
    assert main.returncode == 1 and "not found" in main.stderr


def test_offline_with_nothing_cached_refuses(kernelllm_script, hub):
    for extra, env in ((["--offline"], None), ([], env_with(HF_HUB_OFFLINE="1"))):
        r = run(kernelllm_script, *GENERATE, "--model", REPO, *extra, env=env)
        assert r.returncode == 1
        assert f'model "{REPO}" not found' in r.stderr and "nothing was downloaded" in r.stderr, r.stderr
        assert "`hf download org/tiny`" in r.stderr
    assert hub.requests == []


def test_repository_not_found(kernelllm_script, hub):
    hub.mode = "not_found"
    r = run(kernelllm_script, *GENERATE, "--model", REPO)
    assert r.returncode == 1
    assert f"repository {REPO} not found at {hub.url}" in r.stderr, r.stderr
    assert "HF_TOKEN" in r.stderr  # a private repository looks the same
    offline = run(kernelllm_script, *GENERATE, "--model", REPO, "--offline")
    assert offline.returncode == 1 and "not found" in offline.stderr


def test_gated_repository_needs_a_token(kernelllm_script, hub):
    hub.mode = "gated"
    r = run(kernelllm_script, *GENERATE, "--model", REPO)
    assert r.returncode == 1
    assert f"{REPO} is a gated repository: accept its conditions at {hub.url}/{REPO}" in r.stderr, r.stderr
    assert "set HF_TOKEN" in r.stderr
    assert run(kernelllm_script, *GENERATE, "--model", REPO, "--offline").returncode == 1
    wrong = run(kernelllm_script, *GENERATE, "--model", REPO, env=env_with(HF_TOKEN="hf_someone_else"))
    assert wrong.returncode == 1 and "the token in use" in wrong.stderr and "has no access" in wrong.stderr, wrong.stderr
    # HF_TOKEN reaches the Hub: with access the same command downloads and runs.
    ok = run(kernelllm_script, *GENERATE, "--model", REPO, env=env_with(HF_TOKEN=hub.token))
    assert ok.returncode == 0, ok.stderr


def test_connection_refused_names_the_endpoint(kernelllm_script, hub, monkeypatch):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    r = run(kernelllm_script, *GENERATE, "--model", REPO)
    assert r.returncode == 1
    assert f"cannot reach the Hugging Face Hub at {endpoint} to download {REPO}" in r.stderr, r.stderr
    assert not (cache_repo(hub.home) / "snapshots").exists()


def test_download_cut_off_halfway_is_never_trusted(kernelllm_script, hub):
    cut = "model-00002-of-00003.safetensors"
    hub.mode, hub.cut_file = "cut", cut  # every GET of the shard stops halfway (huggingface_hub retries 5 times)
    r = run(kernelllm_script, *GENERATE, "--model", REPO)
    assert r.returncode == 1
    assert f"the download of {REPO} from {hub.url} was cut off before it finished" in r.stderr, r.stderr
    snapshot = cache_repo(hub.home) / "snapshots" / MAIN
    assert (snapshot / "model.safetensors.index.json").is_file() and not (snapshot / cut).exists()

    # A later run does not trust the half snapshot: it names what is missing.
    offline = run(kernelllm_script, *GENERATE, "--model", REPO, "--offline")
    assert offline.returncode == 1
    assert f"the cached snapshot {snapshot} is incomplete" in offline.stderr, offline.stderr
    assert cut in offline.stderr and "model-00001-of-00003" not in offline.stderr
    from_python = subprocess.run(
        [sys.executable, "-c", f"import kernelllm; kernelllm.KernelLLM({REPO!r}, offline=True)"],
        capture_output=True, text=True, timeout=120)
    assert from_python.returncode == 1 and "FileNotFoundError" in from_python.stderr and cut in from_python.stderr

    # Online again, only what is missing is fetched and the model runs.
    hub.mode = "ok"
    hub.requests.clear()
    resumed = run(kernelllm_script, *GENERATE, "--model", REPO)
    assert resumed.returncode == 0, resumed.stderr
    assert hub.fetched() == [cut]
    assert snapshot_files(snapshot) == NEEDED


PY_API = """
import json, sys, kernelllm
from kernelllm import KernelLLM
try:
    m = KernelLLM(sys.argv[1], revision=sys.argv[2] or None, offline=sys.argv[3] == "1")
    print(json.dumps({"dir": m.model_dir, "text": m.generate("def f(x):", n=1, seed=2, max_new_tokens=4)[0],
                      "template": m.prompt_template_source}))
except Exception as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)}))
"""


def python_api(repo_id=REPO, revision="", offline=False, env=None) -> dict:
    """KernelLLM(...) in a fresh interpreter: huggingface_hub reads HF_* when it is imported."""
    r = subprocess.run([sys.executable, "-c", PY_API, repo_id, revision, "1" if offline else "0"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["stderr"] = r.stderr
    return out


def test_python_api_downloads_then_works_offline(hub):
    first = python_api()
    assert "dir" in first, first
    assert first["dir"] == str(cache_repo(hub.home) / "snapshots" / MAIN)
    assert first["template"].endswith("kernelllm.py")
    assert f"downloading {REPO}" in first["stderr"]
    assert snapshot_files(Path(first["dir"])) == NEEDED
    hub.stop()
    again = python_api(offline=True)
    assert again["dir"] == first["dir"] and again["text"] == first["text"]


def test_python_api_errors(hub):
    assert python_api(offline=True)["error"] == "FileNotFoundError"
    hub.mode = "not_found"
    e = python_api()
    assert e["error"] == "FileNotFoundError" and f"repository {REPO} not found at {hub.url}" in e["message"], e
    hub.mode = "gated"
    e = python_api()
    assert e["error"] == "PermissionError" and "HF_TOKEN" in e["message"], e
    e = python_api(env=env_with(HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}"))
    assert e["error"] == "ConnectionError" and "cannot reach the Hugging Face Hub" in e["message"], e


def test_hub_module_command_and_hf_hub_cache(kernelllm_script, hub, tmp_path, monkeypatch):
    cache = tmp_path / "elsewhere"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))  # wins over HF_HOME, for huggingface_hub and the CLI alike
    r = subprocess.run([sys.executable, "-m", "kernelllm.hub", "download", REPO, "--revision", "v1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(cache / "models--org--tiny" / "snapshots" / V1)
    assert "RuntimeWarning" not in r.stderr  # the package does not import kernelllm.hub before runpy runs it
    assert not (hub.home / "hub").exists()
    hub.mode = "not_found"
    r = subprocess.run([sys.executable, "-m", "kernelllm.hub", "download", "org/other"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stdout == ""
    assert "kernelllm: error: repository org/other not found" in r.stderr
    hub.stop()
    offline = run(kernelllm_script, *GENERATE, "--model", REPO, "--revision", "v1", "--offline")
    assert offline.returncode == 0, offline.stderr


def test_every_model_command_takes_revision_and_offline(kernelllm_script, hub, tmp_path):
    module = Path(__file__).resolve().parents[2] / "examples" / "relu.py"
    problems = tmp_path / "problems"
    problems.mkdir()
    commands = {
        "generate": ["generate", "--prompt", "x"],
        "optimize": ["optimize", str(module), "--device", "cpu"],
        "repl": ["repl"],
        "eval": ["eval", "--problems", str(problems), "--out", str(tmp_path / "run")],
        "bench": ["bench"],
    }
    for name, args in commands.items():
        help_text = run(kernelllm_script, args[0], "--help").stdout
        assert "--revision" in help_text and "--offline" in help_text, name
        r = run(kernelllm_script, *args, "--model", REPO, "--offline")
        assert r.returncode == 1, (name, r.returncode, r.stderr)
        assert f'model "{REPO}" not found' in r.stderr and "nothing was downloaded" in r.stderr, (name, r.stderr)
    assert hub.requests == []


def test_download_python_without_huggingface_hub(kernelllm_script, hub, tmp_path):
    """The CLI downloads through KERNELLLM_HUB_PYTHON (the console script's interpreter by
    default); one that lacks huggingface_hub, or is not there, is named with the way out."""
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')  # -S: no site-packages
    bare.chmod(0o755)
    r = run(kernelllm_script, *GENERATE, "--model", REPO, env=env_with(KERNELLLM_HUB_PYTHON=str(bare)))
    assert r.returncode == 1
    assert "needs the huggingface_hub package" in r.stderr and "pip install huggingface_hub" in r.stderr, r.stderr
    r = run(kernelllm_script, *GENERATE, "--model", REPO, env=env_with(KERNELLLM_HUB_PYTHON=str(tmp_path / "nowhere")))
    assert r.returncode == 1
    assert f"cannot run {tmp_path / 'nowhere'}" in r.stderr and "KERNELLLM_HUB_PYTHON" in r.stderr, r.stderr
    assert "`hf download org/tiny`" in r.stderr
    assert hub.fetched() == []
