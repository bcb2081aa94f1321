#!/usr/bin/env bash
# The device session's one command for the CUDA backend: build (from HEAD plus the CUDA files of
# the working tree when KERNELLLM_DEVICE_OVERLAY is set, so other half-written work cannot break
# it), run the cuda tests with their printed errors, the 8B-shape HF parity and the speed probe.
# Usage on the GPU machine, from the repo root: bash bench/cuda_ops/device_run.sh [OUT_DIR]
set -uo pipefail
out=${1:-${OUT:-/tmp/out}}
mkdir -p "$out"
src=$PWD
if [[ -n "${KERNELLLM_DEVICE_OVERLAY:-}" ]]; then
  src=/tmp/kllm
  rm -rf "$src" && mkdir -p "$src"
  tar -xf .cudadev/head.tar -C "$src"  # git archive HEAD, made before the call
  cp -r src/engine/cuda "$src/src/engine/" && cp src/engine/cuda_backend_unavailable.cpp "$src/src/engine/"
  cp include/kernelllm/engine/cuda_backend.h "$src/include/kernelllm/engine/"
  cp -r tests/cuda "$src/tests/" && mkdir -p "$src/bench" && cp -r bench/cuda_ops "$src/bench/"
  cp .cudadev/CMakeLists.txt "$src/CMakeLists.txt" && cp .cudadev/tests.cmake "$src/tests/CMakeLists.txt"
  cp -r .deps "$src/"
fi
cd "$src" || exit 1
source tools/device_env.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$out/gpu.txt"
cmake -S . -B build/dev -G Ninja -DKERNELLLM_CUDA=ON -DKERNELLLM_WERROR=OFF > "$out/build.log" 2>&1 &&
  ninja -C build/dev cuda_ops_test cuda_backend_test hf_8b_shape_test kernelllm_cuda_bench kernelllm_cuda_ops_bench \
    >> "$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }
echo "build ok"
if [[ -n "${KERNELLLM_DEVICE_BENCH_ONLY:-}" ]]; then
  build/dev/kernelllm_cuda_ops_bench 2>&1 | tee "$out/ops_bench.txt"
  build/dev/kernelllm_cuda_bench 32 1500 64 20 bf16 0 2>&1 | tee "$out/bench_nographs.json"
  build/dev/kernelllm_cuda_bench 32 1500 128 20 bf16 2>&1 | tee "$out/bench.json"
  exit 0
fi
export KERNELLLM_TESTDATA=$src/build/dev/testdata
python3 tools/make_test_data.py --out "$KERNELLLM_TESTDATA" > "$out/testdata.log" 2>&1 || { tail -20 "$out/testdata.log"; }
t=build/dev/tests
for b in cuda_ops_test cuda_backend_test; do
  "$t/$b" 2>&1 | tee "$out/$b.log" | grep -E "^\[|FAILED|PASSED|Failure|error" | head -80
done
PYTHONUNBUFFERED=1 python3 tests/cuda/make_hf_8b_shape.py /tmp/hf8b 2>&1 | tail -3
KERNELLLM_HF8B_DIR=/tmp/hf8b "$t/hf_8b_shape_test" 2>&1 | tee "$out/hf_8b_shape_test.log" | grep -E "^\[|FAILED|PASSED|Failure"
build/dev/kernelllm_cuda_bench 32 1500 128 20 bf16 2>&1 | tee "$out/bench.json"
build/dev/kernelllm_cuda_ops_bench 2>&1 | tee "$out/ops_bench.txt" | grep attention
