#!/usr/bin/env bash
# The device session's one command for the CUDA backend: build from .vdev/head.tar (`git
# archive HEAD`, made before the call, so other half-written work in the tree cannot break it;
# Hopper machine code only, the code an H100 runs from the full build), run the cuda tests with
# their printed errors, the backend's tests again under the portable (Ampere/Ada) plan, the speed
# probes (decode with the cascade attention on and off, per-op timings) and, unless
# KERNELLLM_DEVICE_SKIP_HF8B is set, the 8B-shape HF parity. Every result goes to OUT as it is
# made, so a time-out keeps what ran.
# Usage on the GPU machine, from the repo root: bash bench/cuda_ops/device_run.sh [OUT_DIR]
set -uo pipefail
out=${1:-${OUT:-/tmp/out}}
mkdir -p "$out"
src=$PWD
if [[ -f .vdev/head.tar ]]; then
  src=/tmp/kllm
  rm -rf "$src" && mkdir -p "$src"
  tar -xf .vdev/head.tar -C "$src"
  cp -r .deps "$src/"
fi
cd "$src" || exit 1
source tools/device_env.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$out/gpu.txt"
t0=$SECONDS
cmake -S . -B build/dev -G Ninja -DKERNELLLM_CUDA=ON -DKERNELLLM_WERROR=OFF -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90a-real > "$out/build.log" 2>&1 &&
  ninja -C build/dev -j16 gemv_test shared_prefix_attention_test cuda_ops_test cuda_backend_test hf_8b_shape_test sample_test \
    kernelllm_cuda_bench kernelllm_cuda_ops_bench >> "$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }
echo "build ok in $((SECONDS - t0)) s"
t=build/dev/tests
"$t/gemv_test" 2>&1 | tee "$out/gemv_test.log" | grep -E "FAILED|PASSED|Failure|error" | head -40
"$t/shared_prefix_attention_test" 2>&1 | tee "$out/shared_prefix_attention_test.log" | grep -E "^\[|FAILED|PASSED|Failure|error" | head -60
export KERNELLLM_TESTDATA=$src/build/dev/testdata
python3 tools/make_test_data.py --out "$KERNELLLM_TESTDATA" > "$out/testdata.log" 2>&1 || { tail -20 "$out/testdata.log"; }
"$t/cuda_backend_test" 2>&1 | tee "$out/cuda_backend_test.log" | grep -E "^\[|FAILED|PASSED|Failure|error" | head -60
for b in cuda_backend_test sample_test; do
  KERNELLLM_CUDA_PLAN=portable "$t/$b" 2>&1 | tee "$out/${b}_portable.log" | grep -E "FAILED|PASSED|Failure" | head -20
done
build/dev/kernelllm_cuda_ops_bench 2>&1 | tee "$out/ops_bench.txt" | grep -Ei "attention|gemv"
build/dev/kernelllm_cuda_bench 32 1500 128 20 bf16 2>&1 | tee "$out/bench.json"
build/dev/kernelllm_cuda_bench 32 1500 128 20 bf16 1 cascade=0 2>&1 | tee "$out/bench_no_shared_prefix.json"
"$t/cuda_ops_test" 2>&1 | tee "$out/cuda_ops_test.log" | grep -E "FAILED|PASSED|Failure|error" | head -40
if [[ -z "${KERNELLLM_DEVICE_SKIP_HF8B:-}" ]]; then
  PYTHONUNBUFFERED=1 python3 tests/cuda/make_hf_8b_shape.py /tmp/hf8b 2>&1 | tail -3
  KERNELLLM_HF8B_DIR=/tmp/hf8b "$t/hf_8b_shape_test" 2>&1 | tee "$out/hf_8b_shape_test.log" | grep -E "^\[|FAILED|PASSED|Failure"
  KERNELLLM_CUDA_PLAN=portable KERNELLLM_HF8B_DIR=/tmp/hf8b "$t/hf_8b_shape_test" 2>&1 |
    tee "$out/hf_8b_shape_test_portable.log" | grep -E "^\[|FAILED|PASSED|Failure"
fi
echo "total $((SECONDS - t0)) s"
