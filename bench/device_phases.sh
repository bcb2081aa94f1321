#!/usr/bin/env bash
# One device call of the verifier's records, phase after phase (issue #42), through
# bench/verify_device_run.sh built from .vdev/head.tar (`git archive --format=tar HEAD >
# .vdev/head.tar` before the call; the build is kept while the machine stays warm). Each phase
# runs in its own process group with a time limit that stops the whole group (a plain `timeout`
# stops only its child: the KernelBench eval processes of a stopped agreement run kept the GPU busy
# through the next calls and spoiled their records).
# Usage on the GPU machine, from the repo root (carry .vdev .deps .kb .kb0 .whl):
#   bash bench/device_phases.sh OUT_DIR PHASE...
# Phases (limits in seconds, each overridable):
#   cases   the labelled suite, four problem groups at once (CASES_GROUPS; gpu_faults apart), 570
#   faults  gpu_faults alone (its cases fill the GPU and spin its SMs on purpose), 330
#   agree   the KernelBench agreement run, current tolerance, alone on the GPU, 400
#   repeat  bench/timing_repeat.py (REPEAT_RUNS, REPEAT_PARALLEL, REPEAT_BUDGET_S; KB=.kb0 default), 560
#   reftime relu's reference beside three candidates, kernelbench profile, 200
#   throughput  bench/verify_throughput.py over .kb0 level 1 and bench/eval_candidates/level1, then
#           KernelBench's eval on the same candidates (THROUGHPUT_CONCURRENCY, default 6), 540;
#           with THROUGHPUT_CLI, that CLI instead and ours only (THROUGHPUT_KB empty)
#   scaling the same eval on SCALING_SETS (default cuda:0, then cuda:0,cuda:1: bench/eval_scaling.py), 540
# Every phase tars what OUT_DIR holds so far into OUT_DIR/../all.tgz (a call cut off keeps it).
# A device call returns at most 8 files: two of these side by side (one per GPU) lost a record
# that way; bench/device_records.sh runs them and packs everything into one archive.
set -uo pipefail
out=$(realpath -m "${1:?OUT_DIR}"); shift
mkdir -p "$out"
export KERNELLLM_FROM_ARCHIVE=1
export KERNELLLM_GIT_COMMIT=${KERNELLLM_GIT_COMMIT:-$(git get-tar-commit-id < .vdev/head.tar 2>/dev/null || echo unknown)}
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
run() { bounded "$1" bash bench/verify_device_run.sh "$out/$2" "$3"; }
for phase in "$@"; do
  t0=$(date +%s)
  case $phase in
    cases)
      CASES_GROUPS=${CASES_GROUPS:-"relu;matmul,linear,add;softmax,softmax_odd_width,sum_dim,prod_dim;cross_entropy,cumprod,kl_div,mse_loss,scale_shift_kwargs"} \
        CASES_TIMEOUT_S=${CASES_TIMEOUT_S:-540} run "${CASES_LIMIT_S:-570}" cases cases ;;
    faults) CASES_GROUPS=gpu_faults CASES_TIMEOUT_S=${FAULTS_TIMEOUT_S:-300} run "${FAULTS_LIMIT_S:-330}" faults cases ;;
    agree) AGREEMENT_TOLERANCE=current run "${AGREE_LIMIT_S:-400}" agree agreement ;;
    repeat)
      KB=${KB:-.kb0} REPEAT_RUNS=${REPEAT_RUNS:-5} REPEAT_PARALLEL=${REPEAT_PARALLEL:-1} REPEAT_BUDGET_S=${REPEAT_BUDGET_S:-420} \
        run "${REPEAT_LIMIT_S:-560}" repeat repeat ;;
    reftime) run "${REFTIME_LIMIT_S:-200}" reftime reftime ;;
    scaling) KB=${KB:-.kb0} run "${SCALING_LIMIT_S:-540}" scaling scaling ;;
    throughput)
      KB=${KB:-.kb0} THROUGHPUT_KB=${THROUGHPUT_KB-1} THROUGHPUT_CONCURRENCY=${THROUGHPUT_CONCURRENCY:-6} \
        KERNELLLM_CLI=${THROUGHPUT_CLI:-} run "${THROUGHPUT_LIMIT_S:-540}" throughput throughput ;;
    *) echo "unknown phase $phase (cases faults agree repeat reftime throughput scaling)"; exit 2 ;;
  esac
  echo "phase $phase: $(( $(date +%s) - t0 )) s"
  (cd "$out" && tar -czf "$out/../all.tgz" . 2>/dev/null) || true
done
