"""The GPU line the bench records carry: `nvidia-smi`'s name and driver of each visible GPU, or
None where there is none (a CPU machine, no driver)."""
from __future__ import annotations

import subprocess


def gpu_line() -> str | None:
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return smi.stdout.strip() or None
