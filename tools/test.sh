#!/usr/bin/env bash
# Runs every test that can run without a GPU: installs what they need, builds the C++ tests,
# runs ctest (labels unit and parity; parity makes its own tiny checkpoints and tokenizer with
# transformers/tokenizers first) and pytest (the installed package, CLI and Python API).
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
# torch pinned to the CPU build this project's machines carry; transformers/tokenizers make the
# reference outputs the parity tests compare against.
python3 -m pip install --quiet -r tests/requirements.txt

jobs=$(nproc)
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"

# pytest reuses the test data ctest's fixture made (tools/make_test_data.py skips up-to-date data).
KERNELLLM_TESTDATA="$PWD/build/release/testdata" \
  python3 -m pytest tests/python -q -p no:cacheprovider --basetemp "$PWD/build/pytest"
