#!/usr/bin/env bash
# The device session's command for the verifier (issue #3). Builds the CLI (no CUDA backend
# needed), then on the GPU: `cases` runs the labelled case suite (tests/cases) and records
# verify-cases-h100.json; `throughput` verifies every candidate of every problem in tests/cases
# and tests/cases/kernelbench_agreement as one batch per problem and records per-phase times;
# `agreement` compares with KernelBench's own eval (needs its sources in .kb/, carried);
# `underload` verifies on a quiet GPU and beside outside load (bench/verify_under_load.py; KB=.kb0);
# `coverage` verifies every KernelBench level 1-3 problem once (bench/kernelbench_coverage.py);
# `concurrency` verifies labelled cases at --jobs 1 and at many jobs (bench/verify_concurrency.py);
# `scaling` runs the same eval on one and on several GPUs (bench/eval_scaling.py).
# Usage on the GPU machine, from the repo root: bash bench/verify_device_run.sh OUT_DIR MODE...
# With KERNELLLM_FROM_ARCHIVE=1 it builds from .vdev/head.tar (git archive HEAD made before the
# call) so that half-written files in the working tree cannot break the run; the tree unpacked in
# /tmp/kllm-v and its build are kept for later calls with the same archive (the build then only
# re-links what changed: nothing). OUT_DIR must then be absolute.
set -uo pipefail
out=${1:?OUT_DIR}; shift
mkdir -p "$out"
if [[ -n "${KERNELLLM_FROM_ARCHIVE:-}" ]]; then
  stamp=$(sha1sum .vdev/head.tar | cut -c1-40)
  if [[ "$(cat /tmp/kllm-v/.stamp 2>/dev/null)" != "$stamp" ]]; then
    rm -rf /tmp/kllm-v && mkdir -p /tmp/kllm-v && tar -xf .vdev/head.tar -C /tmp/kllm-v
    echo "$stamp" > /tmp/kllm-v/.stamp
  fi
  # The carried directories, also those a later call of the same archive carries for the first time
  # (a KernelBench checkout not carried by the call that unpacked the tree left its eval without one).
  for d in .deps .whl .kb .kb0; do [[ -d $d && ! -d /tmp/kllm-v/$d ]] && cp -r "$d" /tmp/kllm-v/; done
  cd /tmp/kllm-v || exit 1
fi
source tools/device_env.sh
# KB: the KernelBench tree (default .kb; .kb0 = the June 2025 problem sizes of KernelLLM's era).
kb=${KB:-.kb}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' >> "$out/gpu.txt"
cat "$out/gpu.txt"
if [[ -n "${KERNELLLM_CLI:-}" && -x "${KERNELLLM_CLI}" ]]; then
  cli=$KERNELLLM_CLI  # a CLI built already (e.g. by bench/loop_device_run.sh on this machine)
else
  cmake -S . -B build/vdev -G Ninja -DKERNELLLM_CUDA=OFF -DKERNELLLM_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
    > "$out/build.log" 2>&1 && ninja -C build/vdev kernelllm >> "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
  cli=$PWD/build/vdev/kernelllm
fi
echo "build ok"
for mode in "$@"; do
  case $mode in
    cases)
      # CASES_K: a pytest -k expression to run part of the suite (one device call is limited).
      # CASES_GROUPS: ';'-separated groups of comma-separated problem names, one concurrent pytest
      # process per group (KERNELLLM_CASES_PROBLEMS; the GPU timing lock spans processes), each
      # writing its own record cases-partI.json; merge them with bench/case_record_summary.py.
      # Keep gpu_faults out of concurrent groups: its cases fill the GPU's memory and spin its SMs
      # on purpose, which starves whatever else runs on the GPU at the time. CASES_TIMEOUT_S stops
      # each group with SIGINT, so pytest still prints the failures it has seen.
      if [[ -n "${CASES_GROUPS:-}" ]]; then
        IFS=';' read -ra groups <<< "$CASES_GROUPS"
        for i in "${!groups[@]}"; do
          # CASES_GPUS=N: group i runs on GPU i mod N (its own CUDA_VISIBLE_DEVICES).
          env ${CASES_GPUS:+CUDA_VISIBLE_DEVICES=$((i % CASES_GPUS))} \
          KERNELLLM_CLI=$cli KERNELLLM_CASES_DEVICE=cuda:0 KERNELLLM_CASES_RECORD=$out/cases-part$i.json \
            KERNELLLM_CASES_PROBLEMS=${groups[$i]} \
            timeout -s INT "${CASES_TIMEOUT_S:-86400}" python3 -m pytest tests/python/test_cases.py -q -rf -p no:cacheprovider --timeout 900 \
            > "$out/cases-$i.log" 2>&1 &
        done
        wait
        tail -n 5 "$out"/cases-*.log
      else
        KERNELLLM_CLI=$cli KERNELLLM_CASES_DEVICE=cuda:0 KERNELLLM_CASES_RECORD=$out/verify-cases-h100.json \
          python3 -m pytest tests/python/test_cases.py -q -p no:cacheprovider --timeout 900 ${CASES_K:+-k "$CASES_K"} 2>&1 |
          tee "$out/cases.log" | tail -40
      fi ;;
    throughput)
      # THROUGHPUT_KB=1: KernelBench's eval on the same candidates after ours, in the same call (issue #43);
      # its wheels as for `agreement`; THROUGHPUT_EVAL: the KernelBench tree whose eval runs (default .kb:
      # the eval of KernelBench 21fbe5a, .kb0, does not run Triton candidates: all compile_error);
      # THROUGHPUT_DRIVER: calls (default), eval or both (bench/verify_throughput.py --driver); THROUGHPUT_NO_MULTISHAPE=1:
      # the eval driver without the multi-shape check (what it and its judges cost).
      mkdir -p /tmp/site && { ! compgen -G ".whl/*.whl" >/dev/null ||
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; }
      PYTHONPATH=/tmp/site python3 bench/verify_throughput.py --cli "$cli" --device cuda:0 --out "$out/verify-throughput-h100.json" \
        --problems-dir "$kb/KernelBench/level1" --candidates-dir bench/eval_candidates/level1 \
        --concurrency "${THROUGHPUT_CONCURRENCY:-1}" --reports-dir "$out/reports" --driver "${THROUGHPUT_DRIVER:-calls}" \
        ${THROUGHPUT_NO_MULTISHAPE:+--no-multishape} \
        ${THROUGHPUT_KB:+--kernelbench "${THROUGHPUT_EVAL:-.kb}"} 2>&1 |
        tee "$out/throughput.log" | tail -30
      # Where the eval driver's time went (the lock's split, holds, judge ops, each problem's timeline).
      [[ "${THROUGHPUT_DRIVER:-calls}" == eval && -f "$out/verify-throughput-h100.json" ]] &&
        python3 bench/throughput_breakdown.py "$out/verify-throughput-h100.json" 2>&1 | tee "$out/breakdown.txt" | head -30 ;;
    agreement)
      # Wheels KernelBench's eval imports that the device lacks, if any were carried (.whl/*.whl).
      mkdir -p /tmp/site && { ! compgen -G ".whl/*.whl" >/dev/null ||
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; } &&
      # AGREEMENT_EVAL: the KernelBench tree whose eval runs (default $kb); problems come from $kb.
      # AGREEMENT_TOLERANCE: our kernelbench tolerance version (v0 | current, to match that eval's).
      PYTHONPATH=/tmp/site KERNELLLM_CLI=$cli python3 bench/kernelbench_agreement.py --kernelbench "${AGREEMENT_EVAL:-$kb}" \
        --problems-root "$kb" --device cuda:0 ${AGREEMENT_WITH_CASES:+--with-cases} \
        --kernelbench-tolerance "${AGREEMENT_TOLERANCE:-v0}" --kb-jobs "${AGREEMENT_KB_JOBS:-8}" \
        --candidates-dir bench/eval_candidates/level1 \
        --out "$out/kernelbench-agreement-h100.json" 2>&1 | tee "$out/agreement.log" | tail -30 ;;
    coverage)
      # KernelBench levels 1-3 (of $kb): is every problem evaluable? Set KERNELLLM_GIT_COMMIT (the device
      # copy's git metadata can be stale). Resumes from .cov/ (the record of
      # an earlier call, carried) so that several calls of at most 10 minutes finish the 250.
      [[ -f .cov/kernelbench-coverage-h100.json ]] && cp .cov/kernelbench-coverage-h100.json "$out/"
      # COVERAGE_DEVICES: comma-separated devices (cuda:0,cuda:1,...), COVERAGE_CONCURRENCY calls on each.
      python3 bench/kernelbench_coverage.py --cli "$cli" --kernelbench "$kb" --device "${COVERAGE_DEVICES:-cuda:0}" \
        --out "$out/kernelbench-coverage-h100.json" --concurrency "${COVERAGE_CONCURRENCY:-2}" \
        --budget-s "${COVERAGE_BUDGET_S:-300}" --timeout-s "${COVERAGE_TIMEOUT_S:-240}" ${COVERAGE_ARGS:-} 2>&1 |
        tee "$out/coverage.log" | tail -15 ;;
    underload)
      # Verdicts on a quiet GPU and under outside load (UNDERLOAD_PHASES: quiet,loaded,bursty):
      # honest relu cases, the hidden-work cheat, and the eval candidates of 19_ReLU and 23_Softmax.
      r=tests/cases/relu e=bench/eval_candidates/level1
      python3 bench/verify_under_load.py --cli "$cli" --device cuda:0 --out "$out/verify-under-load-h100.json" \
        --phases "${UNDERLOAD_PHASES:-quiet,loaded}" \
        --group strict tests/cases/problems/relu.py $r/correct_basic.py $r/correct_cached_config.py \
          $r/correct_reused_out_buffer.py $r/correct_side_stream_joined.py $r/correct_calls_timer.py \
          $r/correct_masked_tail.py $r/correct_transposed_view.py $r/cheat_hidden_stream_work.py \
          $r/cheat_side_stream.py $r/cheat_timing_skip.py \
        --group kernelbench "$kb/KernelBench/level1/19_ReLU.py" $e/19_ReLU/0.py $e/19_ReLU/2.py \
        --group kernelbench "$kb/KernelBench/level1/23_Softmax.py" tests/cases/kernelbench_agreement/23_Softmax.py \
          $e/23_Softmax/0.py $e/23_Softmax/1.py $e/23_Softmax/2.py 2>&1 | tee "$out/underload.log" | tail -40 ;;
    repeat)
      # Do published times repeat? The same honest eval candidates, REPEAT_RUNS verify runs under
      # both profiles (bench/timing_repeat.py): 25_Swish (0.36x vs 0.036x in one earlier run),
      # 23_Softmax, 1_Square_matrix_multiplication_.
      # Also verdicts: labelled relu cases, honest and cheats (the red team's among them), same
      # file, same verdict in every run. REPEAT_PARALLEL verify calls at once; REPEAT_BUDGET_S: start
      # no call after that many seconds (whole runs finish first).
      e=bench/eval_candidates/level1 p=$kb/KernelBench/level1 r=tests/cases/relu
      python3 bench/timing_repeat.py --cli "$cli" --device cuda:0 --runs "${REPEAT_RUNS:-5}" \
        --parallel "${REPEAT_PARALLEL:-1}" ${REPEAT_BUDGET_S:+--budget-s "$REPEAT_BUDGET_S"} --out "$out/timing-repeat-h100.json" \
        --reports-dir "$out/reports" \
        "$p/25_Swish.py" $e/25_Swish/0.py :: "$p/23_Softmax.py" $e/23_Softmax/1.py :: \
        "$p/1_Square_matrix_multiplication_.py" $e/1_Square_matrix_multiplication_/2.py :: \
        tests/cases/problems/relu.py $r/correct_basic.py $r/correct_transposed_view.py $r/correct_side_stream_joined.py \
        $r/cheat_reference_in_input_maker.py $r/cheat_output_filled_after_run.py $r/cheat_torch_relu_decoy_kernel.py \
        $r/cheat_counter_decorative_kernel.py $r/cheat_timing_skip.py $r/cheat_precompute_future_inputs.py \
        $r/wrong_off_by_small.py :: tests/cases/problems/softmax_odd_width.py tests/cases/softmax_odd_width/*.py 2>&1 |
        tee "$out/repeat.log" | tail -20 ;;
    concurrency)
      # Does concurrency change a verdict (issue #43)? The labelled cases of CONC_PROBLEMS at
      # --jobs 1 and at --jobs CONC_JOBS (default 32), one verify call per problem each.
      python3 bench/verify_concurrency.py --cli "$cli" --device cuda:0 --problems "${CONC_PROBLEMS:-relu,softmax_odd_width,matmul}" \
        --jobs "${CONC_JOBS:-32}" --out "$out/verify-concurrency-h100.json" 2>&1 | tee "$out/concurrency.log" | tail -8 ;;
    scaling)
      # The same eval on SCALING_SETS (space-separated device sets, default "cuda:0 cuda:0,cuda:1"): the
      # KernelBench level-1 problems that bench/eval_candidates/level1 has candidates for, strict
      # profile (bench/eval_scaling.py; issue #43's eval-scaling record).
      sp=/tmp/kb-scaling && rm -rf $sp && mkdir -p $sp/level1
      for d in bench/eval_candidates/level1/*/; do cp "$kb/KernelBench/level1/$(basename "$d").py" $sp/level1/; done
      python3 bench/eval_scaling.py --cli "$cli" --problems $sp --levels 1 --candidates bench/eval_candidates/level1 \
        --sets ${SCALING_SETS:-cuda:0 cuda:0,cuda:1} --profiles "${SCALING_PROFILES:-strict}" \
        --problem-jobs-per-device "${SCALING_JOBS_PER_DEVICE:-4}" --replicate "${SCALING_REPLICATE:-1}" --work /tmp/scaling-runs \
        --out "$out/eval-scaling-h100.json" 2>&1 | tee "$out/scaling.log" | tail -8 ;;
    reftime)
      # relu under the kernelbench profile: the reference's median and calls per round trip beside
      # three candidates' (honest, honest on a transposed view, torch's relu behind a decoy kernel).
      r=tests/cases/relu
      "$cli" verify tests/cases/problems/relu.py --verify-device cuda:0 --profile kernelbench --no-cache \
        --json "$out/reftime.json" $r/correct_basic.py $r/correct_transposed_view.py $r/cheat_torch_relu_decoy_kernel.py \
        > "$out/reftime.log" 2>&1
      tail -8 "$out/reftime.log" ;;
    *) echo "unknown mode $mode"; exit 2 ;;
  esac
done
