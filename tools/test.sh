#!/usr/bin/env bash
# Runs every test that can run without a GPU: installs what they need, builds the C++ tests,
# runs ctest (labels unit and parity; parity makes its own tiny checkpoints and tokenizer with
# transformers/tokenizers first) and pytest (the installed package, CLI and Python API).
set -euo pipefail
cd "$(dirname "$0")/.."

# One compile serves both: `pip install .` (in tools/setup.sh) builds in the preset's directory,
# tests included, so the preset build below only re-links instead of compiling everything again.
# Without a GPU neither build has the CUDA backend (its tests run on the device: ctest -L cuda).
pip_flags="--config-settings=build-dir=build/release --config-settings=cmake.define.KERNELLLM_BUILD_TESTS=ON"
preset_flags=(-DKERNELLLM_BUILD_PYTHON=OFF)  # the binding's pybind11 lived in pip's build environment
if ! command -v nvidia-smi >/dev/null 2>&1; then
  pip_flags+=" --config-settings=cmake.define.KERNELLLM_CUDA=OFF"
  preset_flags+=(-DKERNELLLM_CUDA=OFF)
fi
export KERNELLLM_PIP_FLAGS="${KERNELLLM_PIP_FLAGS:-} $pip_flags"
bash tools/setup.sh
# torch pinned to the CPU build this project's machines carry; transformers/tokenizers make the
# reference outputs the parity tests compare against.
python3 -m pip install --quiet -r tests/requirements.txt

jobs=$(nproc)
cmake --preset release "${preset_flags[@]}" >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"

# pytest reuses the test data ctest's fixture made (tools/make_test_data.py skips up-to-date data).
KERNELLLM_TESTDATA="$PWD/build/release/testdata" \
  python3 -m pytest tests/python -q -p no:cacheprovider --basetemp "$PWD/build/pytest"

# Slurm end to end (tools/slurm_test.sh: a one-node Slurm, examples/slurm/eval_array.sbatch, the merged
# report against a one-process run). About 3-5 minutes on 2 cores, more than CI's time budget has
# left, so only on request: KERNELLLM_SLURM_TEST=1 bash tools/test.sh (root, Debian 12).
if [[ ${KERNELLLM_SLURM_TEST:-0} == 1 ]]; then
  bash tools/slurm_test.sh
fi
