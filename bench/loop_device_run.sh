#!/usr/bin/env bash
# The device session's command for the loop (issue #5) and the engine bench (issue #4): builds the
# CLI with the CUDA backend from .vdev/head.tar (git archive HEAD, made before the call), then:
#   optimize  `kernelllm optimize` on a KernelBench level-1 problem with random 8B weights made on
#             the GPU (toy tokenizer with Llama-3's id space), k = 10: generation and verification
#             wall clock per phase → optimize-h100.json
#   eval      `kernelllm eval` over the KernelBench level-1 problems that bench/eval_candidates has
#             candidates for, both profiles, EVAL_SHARDS (4) shards at once, merged → eval-h100/ (report.json, report.html, stores)
#   resume    the same eval killed (SIGKILL) after RESUME_KILL_S seconds and restarted → eval-resume/ and
#             eval-resume-h100.json (verifications per sample, verdicts vs EVAL_REF = an uninterrupted report.json)
#   bench     `kernelllm bench` 8B random weights, 1,500-token prompt, 512 new tokens, n = 1,10,20,
#             HF transformers beside it (--peer hf) → bench-h100.json
#   bench-sampled  the same with sampled draws (--temperature 0.6 --top-p 0.95, kernelllm.py's
#             settings; the HF peer samples alike) → bench-h100-sampled.json
#   portable  issue #45: `kernelllm bench` (no peer) under the portable (Ampere/Ada) kernel plan, then the
#             same under a 24 GiB memory cap → bench-portable.json, bench-portable-24g.json
#   serve     issue #44: `kernelllm bench` n = 20 (sampled, no peer) → bench-n20-beside-serve.json, then
#             `kernelllm serve` (random 8B weights) under 20 clients × one 512-token sample for
#             SERVE_DURATION (60) s, the bench record embedded (--beside) → serve-load.json
# Usage on the GPU machine, from the repo root: bash bench/loop_device_run.sh OUT_DIR MODE...
# KB: the KernelBench tree (default .kb0, June 2025 problem sizes as in KernelLLM's evaluation).
set -uo pipefail
out=${1:?OUT_DIR}; shift
mkdir -p "$out"
# The build is kept on a warm machine: the tree is unpacked and rebuilt only when head.tar changed.
sum=$(sha256sum .vdev/head.tar | cut -d' ' -f1)
# The archive's commit, for the results' machine.git_commit (the unpacked tree is not a checkout).
KERNELLLM_GIT_COMMIT=$(git get-tar-commit-id < .vdev/head.tar 2>/dev/null || true)
export KERNELLLM_GIT_COMMIT
if [[ ! -x /tmp/kllm-l/build/ldev/kernelllm || "$(cat /tmp/kllm-l/.head-sha 2>/dev/null)" != "$sum" ]]; then
  rm -rf /tmp/kllm-l && mkdir -p /tmp/kllm-l && tar -xf .vdev/head.tar -C /tmp/kllm-l
  fresh=1
fi
for d in .deps .kb .kb0; do [[ -d $d && ! -d /tmp/kllm-l/$d ]] && cp -r "$d" /tmp/kllm-l/; done
cd /tmp/kllm-l || exit 1
source tools/device_env.sh
kb=${KB:-.kb0}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' >> "$out/gpu.txt"
cat "$out/gpu.txt"
if [[ -n "${fresh:-}" ]]; then
  t0=$SECONDS
  # Hopper machine code only: the code an H100 runs from the full build (which adds sm_80/86/89).
  cmake -S . -B build/ldev -G Ninja -DKERNELLLM_CUDA=ON -DKERNELLLM_BUILD_TESTS=OFF -DKERNELLLM_WERROR=OFF \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > "$out/build.log" 2>&1 && ninja -C build/ldev kernelllm >> "$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; exit 1; }
  echo "$sum" > .head-sha
  echo "built in $((SECONDS - t0)) s"
fi
cli=$PWD/build/ldev/kernelllm
echo "build ok"
problems=/tmp/kb-eval
rm -rf "$problems" && mkdir -p "$problems/level1"
for d in bench/eval_candidates/level1/*/; do cp "$kb/KernelBench/level1/$(basename "$d").py" "$problems/level1/"; done
eval_cmd=("$cli" eval --problems "$problems" --levels 1 --candidates bench/eval_candidates/level1 --verify-device cuda:0)
for mode in "$@"; do
  case $mode in
    optimize)
      python3 tools/make_toy_tokenizer.py --out /tmp/tok > "$out/tokenizer.log" 2>&1 || { tail "$out/tokenizer.log"; exit 1; }
      start=$SECONDS
      "$cli" optimize "$kb/KernelBench/level1/19_ReLU.py" --model /tmp/tok --random-weights llama-3.1-8b \
        --device cuda --verify-device cuda:0 -k 10 --max-new-tokens 512 --seed 1 --work-dir /tmp/opt \
        --json "$out/optimize-h100.json" --out /tmp/opt/best.py > "$out/optimize.stdout" 2> "$out/optimize.stderr"
      echo "optimize exit $? after $((SECONDS - start)) s"; tail -25 "$out/optimize.stdout"; tail -5 "$out/optimize.stderr" ;;
    eval)
      # EVAL_SHARDS shards at once on the one GPU (the timing lock spans processes), then merged.
      rm -rf /tmp/run /tmp/run-s* && start=$SECONDS
      shards=()
      for ((i = 0; i < ${EVAL_SHARDS:-4}; i++)); do
        XDG_CACHE_HOME=/tmp/cache-eval "${eval_cmd[@]}" --shard "$i/${EVAL_SHARDS:-4}" --out "/tmp/run-s$i" \
          > "$out/eval-s$i.stdout" 2> "$out/eval-s$i.stderr" &
        shards+=("/tmp/run-s$i")
      done
      wait
      "$cli" eval merge "${shards[@]}" --out /tmp/run > "$out/eval.stdout" 2> "$out/eval.stderr"
      echo "eval ($((${EVAL_SHARDS:-4})) shards) + merge exit $? after $((SECONDS - start)) s"; tail -30 "$out/eval.stdout"
      mkdir -p "$out/eval-h100" && cp /tmp/run/report.json /tmp/run/report.html "$out/eval-h100/"
      for s in "${shards[@]}"; do cp "$s/run.sqlite" "$out/eval-h100/$(basename "$s").sqlite"; done ;;
    resume)
      # The same sharded eval, every shard SIGKILLed after RESUME_KILL_S seconds, then restarted;
      # its own result cache, so the restart cannot be answered from the first run's results.
      rm -rf /tmp/run2 /tmp/run2-s* /tmp/cache-resume && start=$SECONDS
      shards=() pids=()
      for ((i = 0; i < ${EVAL_SHARDS:-4}; i++)); do
        XDG_CACHE_HOME=/tmp/cache-resume "${eval_cmd[@]}" --shard "$i/${EVAL_SHARDS:-4}" --out "/tmp/run2-s$i" \
          > "$out/resume1-s$i.stdout" 2> "$out/resume1-s$i.stderr" &
        pids+=($!) shards+=("/tmp/run2-s$i")
      done
      sleep "${RESUME_KILL_S:-60}"
      kill -9 "${pids[@]}" 2>/dev/null; wait 2>/dev/null
      pkill -9 -f kernelllm.worker 2>/dev/null; sleep 2
      echo "killed after ${RESUME_KILL_S:-60} s"
      mkdir -p "$out/eval-resume"
      python3 bench/eval_resume_check.py snapshot "${shards[@]}" > "$out/eval-resume/at-kill.json"
      for ((i = 0; i < ${EVAL_SHARDS:-4}; i++)); do
        XDG_CACHE_HOME=/tmp/cache-resume "${eval_cmd[@]}" --shard "$i/${EVAL_SHARDS:-4}" --out "/tmp/run2-s$i" \
          > "$out/resume2-s$i.stdout" 2> "$out/resume2-s$i.stderr" &
      done
      wait
      "$cli" eval merge "${shards[@]}" --out /tmp/run2 > "$out/resume-merge.stdout" 2>&1
      echo "resumed + merged exit $? after $((SECONDS - start)) s"
      cp /tmp/run2/report.json "$out/eval-resume/"
      python3 bench/eval_resume_check.py check --at-kill "$out/eval-resume/at-kill.json" --resumed /tmp/run2/report.json \
        ${EVAL_REF:+--reference "$EVAL_REF"} --out "$out/eval-resume-h100.json" "${shards[@]}" ;;
    bench)
      "$cli" bench --config llama-3.1-8b --random-weights --seed 0 --device cuda:0 --dtype bf16 --prompt-tokens 1500 \
        --new-tokens 512 -n 1,10,20 --warmup 2 --peer hf --json "$out/bench-h100.json" > "$out/bench.stdout" 2> "$out/bench.stderr"
      echo "bench exit $?"; tail -20 "$out/bench.stdout"; tail -5 "$out/bench.stderr" ;;
    portable)
      # The Ampere/Ada kernel plan on this GPU (issue #45), then the same as on a 24 GiB card.
      for cap in 0 24; do
        name=bench-portable$([[ $cap != 0 ]] && echo "-${cap}g")
        "$cli" bench --config llama-3.1-8b --random-weights --seed 0 --device cuda:0 --dtype bf16 --prompt-tokens 1500 \
          --new-tokens 512 -n 1,10,20 --warmup 2 --cuda-plan portable $([[ $cap != 0 ]] && echo "--memory-cap $cap") \
          --json "$out/$name.json" > "$out/$name.stdout" 2> "$out/$name.stderr"
        echo "$name exit $?"; tail -6 "$out/$name.stdout"; tail -3 "$out/$name.stderr"
      done ;;
    bench-sampled)
      "$cli" bench --config llama-3.1-8b --random-weights --seed 0 --device cuda:0 --dtype bf16 --prompt-tokens 1500 \
        --new-tokens 512 -n 1,10,20 --warmup 2 --temperature 0.6 --top-p 0.95 --peer hf \
        --json "$out/bench-h100-sampled.json" > "$out/bench-sampled.stdout" 2> "$out/bench-sampled.stderr"
      echo "bench-sampled exit $?"; tail -20 "$out/bench-sampled.stdout"; tail -5 "$out/bench-sampled.stderr" ;;
    serve)
      # bench first: the served record then embeds its n = 20 decode rate (serve_load.py --beside).
      # One process on the GPU at a time: the server starts after bench has exited.
      python3 tools/make_toy_tokenizer.py --out /tmp/tok > "$out/tokenizer.log" 2>&1 || { tail "$out/tokenizer.log"; exit 1; }
      start=$SECONDS
      timeout 200 "$cli" bench --config llama-3.1-8b --random-weights --seed 0 --device cuda:0 --dtype bf16 \
        --prompt-tokens 1500 --new-tokens 512 -n 20 --warmup 1 --temperature 0.6 --top-p 0.95 \
        --json "$out/bench-n20-beside-serve.json" > "$out/bench.stdout" 2> "$out/bench.stderr"
      echo "bench exit $? after $((SECONDS - start)) s"; tail -12 "$out/bench.stdout"; tail -3 "$out/bench.stderr"
      start=$SECONDS
      "$cli" serve --model /tmp/tok --random-weights llama-3.1-8b --device cuda:0 --port 8000 --max-tokens 512 \
        > /dev/null 2> "$out/serve.stderr" &
      server=$!
      until grep -q "listening on" "$out/serve.stderr"; do
        if ! kill -0 "$server" 2>/dev/null || ((SECONDS - start > 240)); then
          echo "the server did not start"; tail "$out/serve.stderr"; kill "$server" 2>/dev/null; exit 1
        fi
        sleep 1
      done
      echo "server listening after $((SECONDS - start)) s"
      duration=${SERVE_DURATION:-60}
      timeout $((duration + 180)) python3 bench/serve_load.py --url http://127.0.0.1:8000 --cli "$cli" --clients 20 \
        --duration "$duration" --max-tokens 512 --temperature 0.6 --beside "$out/bench-n20-beside-serve.json" \
        --label "issue #44: served aggregate at 20 concurrent samples, random llama-3.1-8b weights, toy tokenizer" \
        --out "$out/serve-load.json"
      echo "serve_load exit $?"
      kill -TERM "$server"; wait "$server"; echo "server exit $?"; tail -3 "$out/serve.stderr" ;;
    *) echo "unknown mode $mode"; exit 2 ;;
  esac
done
