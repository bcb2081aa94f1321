"""Fixtures for the Python tests of the installed kernelllm package: test data made by
tools/make_test_data.py (or taken from $KERNELLLM_TESTDATA), a tiny model directory, a fake
HF cache, and the installed `kernelllm` console script. The Hub is out of reach (below)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# No test reaches the real Hugging Face Hub: downloads are off and the endpoint is a local port
# nothing listens on, set before anything imports huggingface_hub (which reads them then).
# test_hub.py points them at its stand-in Hub on 127.0.0.1 for its own subprocesses.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"
TINY = "tiny-f32-gqa"  # fp32, GQA, llama3 RoPE: the model the HF comparisons use


@pytest.fixture(scope="session")
def testdata(tmp_path_factory) -> Path:
    env = os.environ.get("KERNELLLM_TESTDATA")
    out = Path(env) if env else tmp_path_factory.mktemp("testdata")
    # The script is a no-op when `out` is already complete for its version.
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_test_data.py"), "--out", str(out)], check=True)
    assert (out / "models" / TINY / "config.json").is_file(), f"no {TINY} model under {out}/models"
    return out


def _link_model(src: Path, dst: Path, max_positions: int = 4096) -> Path:
    """A model dir of symlinks to `src`'s files (no golden files), with a larger
    max_position_embeddings so that the full Triton prompt fits; the weights do not depend
    on it."""
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name.startswith("golden") or f.name == "config.json":
            continue
        (dst / f.name).symlink_to(f.resolve())
    config = json.loads((src / "config.json").read_text())
    config["max_position_embeddings"] = max_positions
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    return dst


@pytest.fixture(scope="session")
def tiny_model(testdata, tmp_path_factory) -> Path:
    return _link_model(testdata / "models" / TINY, tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def make_model_dir(tiny_model, tmp_path_factory):
    """Makes another model dir like tiny_model (e.g. to add a kernelllm.py to it)."""

    def make(name: str) -> Path:
        return _link_model(tiny_model, tmp_path_factory.mktemp("more") / name)

    return make


@pytest.fixture
def hf_home(tiny_model, tmp_path, monkeypatch) -> Path:
    """$HF_HOME with facebook/KernelLLM in hub/ (snapshot of symlinks, as huggingface_hub
    lays it out); refs/main names the snapshot."""
    home = tmp_path / "hf"
    repo = home / "hub" / "models--facebook--KernelLLM"
    blobs = repo / "blobs"
    blobs.mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for f in tiny_model.iterdir():
        blob = blobs / f.name
        shutil.copyfile(f, blob)
        (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return home


@pytest.fixture(scope="session")
def kernelllm_script() -> str:
    """The installed console script (next to this Python, else on PATH)."""
    here = Path(sys.executable).parent / "kernelllm"
    found = str(here) if here.is_file() else shutil.which("kernelllm")
    assert found, "the kernelllm console script is not installed; run `pip install .` first"
    return found


@pytest.fixture(scope="session")
def tiny_engine(tiny_model):
    import kernelllm

    return kernelllm.KernelLLM(model_name=str(tiny_model))
