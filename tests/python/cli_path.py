"""Where the tests find the kernelllm CLI: $KERNELLLM_CLI when set (a build tree's binary), else
the installed console script next to this Python, else on PATH."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def find_cli() -> str:
    if os.environ.get("KERNELLLM_CLI"):
        return os.environ["KERNELLLM_CLI"]
    here = Path(sys.executable).parent / "kernelllm"
    found = str(here) if here.is_file() else shutil.which("kernelllm")
    assert found, "the kernelllm console script is not installed and $KERNELLLM_CLI is unset"
    return found
