"""The `kernelllm` console script: runs the C++ CLI packaged at kernelllm/bin/kernelllm
with the same arguments (exec on POSIX, so signals and the exit code are the binary's)."""
import os
import subprocess
import sys
from pathlib import Path


def binary_path() -> Path:
    """Where the packaged CLI lives: beside the native module, in bin/."""
    from . import _native

    return Path(_native.__file__).resolve().parent / "bin" / "kernelllm"


def main() -> int:
    exe = binary_path()
    if not exe.is_file():
        print(f"kernelllm: the CLI binary is missing (expected {exe}); reinstall the package", file=sys.stderr)
        return 1
    argv = [str(exe), *sys.argv[1:]]
    # The CLI downloads models with huggingface_hub through this interpreter, which has the
    # package's dependencies (python3 on PATH may not: pipx, a venv not activated).
    os.environ.setdefault("KERNELLLM_HUB_PYTHON", sys.executable)
    if os.name == "posix":
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(str(exe), argv)
    return subprocess.call(argv)


if __name__ == "__main__":
    sys.exit(main())
