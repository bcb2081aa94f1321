#!/usr/bin/env bash
# One device call of the verifier's records, phase after phase (issue #42). Builds the CLI once per
# archive (.vdev/head.tar: `git archive --format=tar HEAD > .vdev/head.tar` before the call; the
# build is kept in /tmp/kllm-v while the machine stays warm), then runs the phases through
# bench/verify_device_run.sh, each in its own process group with a time limit that stops the
# whole group (a plain `timeout` stops only its child: the KernelBench eval processes of a stopped
# agreement run kept the GPU busy through the next calls and spoiled their records).
# Usage on the GPU machine, from the repo root (carry .vdev .deps .kb .kb0 .whl):
#   bash bench/device_phases.sh OUT_DIR PHASE...
# Phases (limits in seconds, each overridable):
#   cases   the labelled suite, four problem groups at once (CASES_GROUPS; gpu_faults apart), 570
#   faults  gpu_faults alone (its cases fill the GPU and spin its SMs on purpose), 330
#   agree   the KernelBench agreement run, current tolerance, alone on the GPU (AGREE_LIMIT_S), 400
#   repeat  bench/timing_repeat.py (REPEAT_RUNS, REPEAT_PARALLEL, REPEAT_BUDGET_S; KB=.kb0 default), 560
#   reftime relu under the kernelbench profile: the reference's and three candidates' times, 200
# Every phase tars what OUT_DIR holds so far into OUT_DIR/../all.tgz (a call cut off keeps it).
set -uo pipefail
out=${1:?OUT_DIR}; shift
mkdir -p "$out"
src=$PWD
w=/tmp/kllm-v
stamp=$(sha1sum .vdev/head.tar | cut -c1-40)
if [[ ! -x $w/build/vdev/kernelllm || "$(cat $w/.stamp 2>/dev/null)" != "$stamp" ]]; then
  rm -rf $w && mkdir -p $w && tar -xf .vdev/head.tar -C $w
  for d in .deps .whl .kb .kb0; do [[ -d $d ]] && cp -r "$d" $w/; done
  cd $w || exit 1
  source tools/device_env.sh
  t0=$(date +%s)
  cmake -S . -B build/vdev -G Ninja -DKERNELLLM_CUDA=OFF -DKERNELLLM_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
    > "$out/build.log" 2>&1 && ninja -C build/vdev kernelllm >> "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
  echo "build $(( $(date +%s) - t0 )) s"
  echo "$stamp" > $w/.stamp
fi
cd $w || exit 1
source tools/device_env.sh
export KERNELLLM_CLI=$w/build/vdev/kernelllm
export KERNELLLM_GIT_COMMIT=${KERNELLLM_GIT_COMMIT:-$(git get-tar-commit-id < "$src/.vdev/head.tar" 2>/dev/null || echo unknown)}
bounded() {  # bounded SECS CMD...: CMD in its own process group, the whole group stopped at SECS
  local secs=$1; shift
  setsid "$@" &
  local pid=$! t=0
  while kill -0 $pid 2>/dev/null && (( t < secs )); do sleep 1; t=$((t + 1)); done
  if kill -0 $pid 2>/dev/null; then
    echo "stopped at ${secs} s"
    kill -TERM -- -$pid 2>/dev/null; sleep 5; kill -KILL -- -$pid 2>/dev/null
  fi
  wait $pid 2>/dev/null
}
for phase in "$@"; do
  t0=$(date +%s)
  case $phase in
    cases)
      CASES_GROUPS=${CASES_GROUPS:-"relu;matmul,linear,add;softmax,softmax_odd_width,sum_dim,prod_dim;cross_entropy,cumprod,kl_div,mse_loss,scale_shift_kwargs"} \
        CASES_TIMEOUT_S=${CASES_TIMEOUT_S:-540} bounded "${CASES_LIMIT_S:-570}" bash bench/verify_device_run.sh "$out/cases" cases ;;
    faults)
      CASES_GROUPS=gpu_faults CASES_TIMEOUT_S=${FAULTS_TIMEOUT_S:-300} bounded "${FAULTS_LIMIT_S:-330}" \
        bash bench/verify_device_run.sh "$out/faults" cases ;;
    agree)
      AGREEMENT_TOLERANCE=current bounded "${AGREE_LIMIT_S:-400}" bash bench/verify_device_run.sh "$out/agree" agreement ;;
    repeat)
      KB=${KB:-.kb0} REPEAT_RUNS=${REPEAT_RUNS:-5} REPEAT_PARALLEL=${REPEAT_PARALLEL:-1} REPEAT_BUDGET_S=${REPEAT_BUDGET_S:-420} \
        bounded "${REPEAT_LIMIT_S:-560}" bash bench/verify_device_run.sh "$out/repeat" repeat ;;
    reftime)
      r=tests/cases/relu
      bounded "${REFTIME_LIMIT_S:-200}" "$KERNELLLM_CLI" verify tests/cases/problems/relu.py --verify-device cuda:0 \
        --profile kernelbench --no-cache --json "$out/reftime.json" $r/correct_basic.py $r/correct_transposed_view.py \
        $r/cheat_torch_relu_decoy_kernel.py > "$out/reftime.log" 2>&1
      tail -8 "$out/reftime.log" ;;
    *) echo "unknown phase $phase (cases faults agree repeat reftime)"; exit 2 ;;
  esac
  echo "phase $phase: $(( $(date +%s) - t0 )) s"
  (cd "$out" && tar -czf "$out/../all.tgz" . 2>/dev/null) || true
done
