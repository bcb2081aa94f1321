"""Starts a worker from a source tree or an installed package without running
kernelllm/__init__.py (which loads the compiled extension a worker never needs):
`python3 .../kernelllm/worker/launch.py judge|candidate|zygote`."""
import os
import runpy
import sys
import types

_WORKERS = {"judge", "candidate", "zygote"}


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in _WORKERS:
        sys.stderr.write(f"usage: launch.py judge|candidate|zygote (found {sys.argv[1:]})\n")
        sys.exit(2)
    worker_dir = os.path.dirname(os.path.abspath(__file__))
    # The script's own dir would shadow stdlib-like names; the package is reached by path.
    if sys.path and os.path.abspath(sys.path[0]) == worker_dir:
        sys.path.pop(0)
    if "kernelllm" not in sys.modules:
        pkg = types.ModuleType("kernelllm")
        pkg.__path__ = [os.path.dirname(worker_dir)]
        sys.modules["kernelllm"] = pkg
    runpy.run_module(f"kernelllm.worker.{sys.argv[1]}", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
