#!/usr/bin/env bash
# The verifier's records at one commit on two GPUs of one host (nvidia-h200-x2), in two device
# calls of at most 10 minutes, each returning ONE archive (a call returns at most 8 files).
# Before the first call, here: `git archive --format=tar HEAD > .vdev/head.tar`; carry .vdev .deps
# .kb .kb0 .whl. Each call builds the CLI once (bench/verify_device_run.sh, kept while the machine
# stays warm), then runs bench/device_phases.sh on each GPU at once:
#   call1  GPU 0: the relu case group alone (~310-440 s); GPU 1: the other problems' groups
#   call1f call1, then gpu_faults on GPU 1 once its groups are done (~160 s + ~175 s)
#   call2  GPU 0: the KernelBench agreement run (~420 s); GPU 1: gpu_faults (198 s alone; over 215 s beside
#          the agreement run at 7558fc8, so up to 295 s), then timing repeats
#   call3  timing repeats on both GPUs (REPEAT_RUNS each, default 2): with call2's, runs from
#          several processes, machines and GPUs for the same candidates
#   throughput  GPU 0 alone, the host otherwise idle: verify throughput over KernelBench level 1
#          (.kb0) and KernelBench's eval on the same candidates (issue #43)
#   throughput_relu  the throughput run on GPU 0 and the relu case group on GPU 1 at once
#   throughput_conc  the throughput run on GPU 0 (with KernelBench's eval) and, at once, on GPU 1 at
#          another concurrency (THROUGHPUT_CONCURRENCY_2, default 8; ours only)
#   scaling  the same eval on one GPU, then on two (bench/eval_scaling.py; SCALING_SETS)
#   tbase  the same throughput run (ours only) with the CLI of an earlier commit: .vdev/base.tar
#          (`git archive --format=tar BASE > .vdev/base.tar`), built in /tmp/kllm-base
# Usage on the GPU machine, from the repo root: bash bench/device_records.sh call1|call1f|call2|call3|throughput|throughput_relu|throughput_conc|scaling|tbase OUT_DIR
# Result: OUT_DIR/records-call1.tgz (or -call2), holding every phase's output directory and log.
set -uo pipefail
call=${1:?call1|call1f|call2|call3|throughput|throughput_relu|throughput_conc|scaling|tbase}; out=$(realpath -m "${2:?OUT_DIR}"); mkdir -p "$out/w"
export KERNELLLM_FROM_ARCHIVE=1
export KERNELLLM_GIT_COMMIT=$(git get-tar-commit-id < .vdev/head.tar)
end=${RECORDS_END_S:-560}  # every phase ends by then (seconds from the start of this script)
pack() { tar -czf "$out/records-$call.tgz" -C "$out" w 2>/dev/null; }
trap pack EXIT
timeout 240 bash bench/verify_device_run.sh "$out/w/prep" > "$out/w/prep.log" 2>&1
echo "$call: CLI built at $SECONDS s" | tee -a "$out/w/steps.log"
left() { echo $((end - SECONDS)); }
case $call in
  call1|call1f)
    # call1f: gpu_faults on GPU 1 once its groups are done (~160 s, then ~175 s alone): the
    # labelled suite in one call where two would not fit a session's device time.
    l=$(left)
    g1=$l
    [[ $call == call1f ]] && g1=$((l - 240))
    (CUDA_VISIBLE_DEVICES=0 CASES_GROUPS=relu CASES_LIMIT_S=$l CASES_TIMEOUT_S=$((l - 15)) \
      bash bench/device_phases.sh "$out/w/g0/r" cases > "$out/w/g0.log" 2>&1
     echo "GPU 0 done at $SECONDS s" >> "$out/w/steps.log") &
    (CUDA_VISIBLE_DEVICES=1 CASES_GROUPS="matmul,linear,add;softmax,softmax_odd_width,sum_dim,prod_dim;cross_entropy,cumprod,kl_div,mse_loss,scale_shift_kwargs" \
      CASES_LIMIT_S=$g1 CASES_TIMEOUT_S=$((g1 - 15)) bash bench/device_phases.sh "$out/w/g1/r" cases > "$out/w/g1.log" 2>&1
     if [[ $call == call1f ]]; then
       echo "GPU 1 cases done at $SECONDS s" >> "$out/w/steps.log"
       l=$(left)
       CUDA_VISIBLE_DEVICES=1 FAULTS_LIMIT_S=$l FAULTS_TIMEOUT_S=$((l - 15)) bash bench/device_phases.sh "$out/w/g1f/r" faults \
         > "$out/w/g1f.log" 2>&1
     fi
     echo "GPU 1 done at $SECONDS s" >> "$out/w/steps.log") &
    wait ;;
  call2)
    l=$(left)
    (CUDA_VISIBLE_DEVICES=0 KB=.kb0 AGREEMENT_EVAL=.kb AGREE_LIMIT_S=$l bash bench/device_phases.sh "$out/w/g0/r" agree \
      > "$out/w/g0.log" 2>&1; echo "GPU 0 done at $SECONDS s" >> "$out/w/steps.log") &
    (CUDA_VISIBLE_DEVICES=1 FAULTS_LIMIT_S=310 FAULTS_TIMEOUT_S=295 bash bench/device_phases.sh "$out/w/g1f/r" faults \
      > "$out/w/g1f.log" 2>&1
     l=$(left)
     CUDA_VISIBLE_DEVICES=1 REPEAT_RUNS=${REPEAT_RUNS:-2} REPEAT_PARALLEL=3 REPEAT_BUDGET_S=$((l - 130)) REPEAT_LIMIT_S=$l \
       bash bench/device_phases.sh "$out/w/g1/r" repeat > "$out/w/g1.log" 2>&1
     echo "GPU 1 done at $SECONDS s" >> "$out/w/steps.log") &
    wait ;;
  call3)
    l=$(left)
    for g in 0 1; do
      (CUDA_VISIBLE_DEVICES=$g REPEAT_RUNS=${REPEAT_RUNS:-2} REPEAT_PARALLEL=3 REPEAT_BUDGET_S=$((l - 130)) REPEAT_LIMIT_S=$l          bash bench/device_phases.sh "$out/w/g$g/r" repeat > "$out/w/g$g.log" 2>&1
       echo "GPU $g done at $SECONDS s" >> "$out/w/steps.log") &
    done
    wait ;;
  throughput)
    CUDA_VISIBLE_DEVICES=0 THROUGHPUT_LIMIT_S=$(left) bash bench/device_phases.sh "$out/w/g0/r" throughput \
      > "$out/w/g0.log" 2>&1 ;;
  throughput_relu)
    # The throughput run on GPU 0 and, at the same time, the relu case group on GPU 1 (one call
    # where two would not fit the session's device time: the host's CPUs are then shared).
    l=$(left)
    (CUDA_VISIBLE_DEVICES=0 THROUGHPUT_LIMIT_S=$l bash bench/device_phases.sh "$out/w/g0/r" throughput > "$out/w/g0.log" 2>&1
     echo "GPU 0 done at $SECONDS s" >> "$out/w/steps.log") &
    (CUDA_VISIBLE_DEVICES=1 CASES_GROUPS=relu CASES_LIMIT_S=$l CASES_TIMEOUT_S=$((l - 15)) \
      bash bench/device_phases.sh "$out/w/g1/r" cases > "$out/w/g1.log" 2>&1
     echo "GPU 1 done at $SECONDS s" >> "$out/w/steps.log") &
    wait ;;
  throughput_conc)
    # Two concurrencies at once, one per GPU (the host's CPUs shared): GPU 0 at
    # THROUGHPUT_CONCURRENCY with KernelBench's eval after it, GPU 1 at THROUGHPUT_CONCURRENCY_2, ours only.
    l=$(left)
    (CUDA_VISIBLE_DEVICES=0 THROUGHPUT_LIMIT_S=$l bash bench/device_phases.sh "$out/w/g0/r" throughput > "$out/w/g0.log" 2>&1
     echo "GPU 0 done at $SECONDS s" >> "$out/w/steps.log") &
    (CUDA_VISIBLE_DEVICES=1 THROUGHPUT_LIMIT_S=$l THROUGHPUT_KB= THROUGHPUT_CONCURRENCY=${THROUGHPUT_CONCURRENCY_2:-8} \
      bash bench/device_phases.sh "$out/w/g1/r" throughput > "$out/w/g1.log" 2>&1
     echo "GPU 1 done at $SECONDS s" >> "$out/w/steps.log") &
    wait ;;
  scaling)
    # The same eval on GPU 0, then on GPUs 0 and 1 (on nvidia-h200-x4, SCALING_SETS adds the four).
    SCALING_LIMIT_S=$(left) bash bench/device_phases.sh "$out/w/g01/r" scaling > "$out/w/g01.log" 2>&1 ;;
  tbase)
    base=/tmp/kllm-base
    if [[ ! -x $base/build/vdev/kernelllm ]]; then
      rm -rf $base && mkdir -p $base && tar -xf .vdev/base.tar -C $base &&
        (source tools/device_env.sh && cd $base && cmake -S . -B build/vdev -G Ninja -DKERNELLLM_CUDA=OFF \
          -DKERNELLLM_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release && ninja -C build/vdev kernelllm) > "$out/w/base-build.log" 2>&1
    fi
    echo "base $(git get-tar-commit-id < .vdev/base.tar) built at $SECONDS s" | tee -a "$out/w/steps.log"
    CUDA_VISIBLE_DEVICES=0 THROUGHPUT_LIMIT_S=$(left) THROUGHPUT_KB= THROUGHPUT_CLI=$base/build/vdev/kernelllm \
      bash bench/device_phases.sh "$out/w/g0b/r" throughput > "$out/w/g0b.log" 2>&1 ;;
  *) echo "unknown call $call (call1 call2 call3 throughput throughput_relu scaling tbase)"; exit 2 ;;
esac
cat "$out/w/steps.log"
