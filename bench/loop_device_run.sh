#!/usr/bin/env bash
# The device session's command for the loop (issue #5) and the engine bench (issue #4): builds the
# CLI with the CUDA backend from .vdev/head.tar (git archive HEAD, made before the call), then:
#   optimize  `kernelllm optimize` on a KernelBench level-1 problem with random 8B weights made on
#             the GPU (toy tokenizer with Llama-3's id space), k = 10: generation and verification
#             wall clock per phase → optimize-h100.json
#   eval      `kernelllm eval` over the KernelBench level-1 problems that bench/eval_candidates has
#             candidates for, both profiles → eval-h100/ (report.json, report.html, run.sqlite)
#   resume    the same eval killed (SIGKILL) after RESUME_KILL_S seconds and restarted → eval-resume/
#   bench     `kernelllm bench` 8B random weights, 1,500-token prompt, 512 new tokens, n = 1,10,20,
#             HF transformers beside it (--peer hf) → bench-h100.json
# Usage on the GPU machine, from the repo root: bash bench/loop_device_run.sh OUT_DIR MODE...
# KB: the KernelBench tree (default .kb0, June 2025 problem sizes as in KernelLLM's evaluation).
set -uo pipefail
out=${1:?OUT_DIR}; shift
mkdir -p "$out"
rm -rf /tmp/kllm-l && mkdir -p /tmp/kllm-l && tar -xf .vdev/head.tar -C /tmp/kllm-l
for d in .deps .kb .kb0; do [[ -d $d ]] && cp -r "$d" /tmp/kllm-l/; done
cd /tmp/kllm-l || exit 1
source tools/device_env.sh
kb=${KB:-.kb0}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' >> "$out/gpu.txt"
cat "$out/gpu.txt"
cmake -S . -B build/ldev -G Ninja -DKERNELLLM_CUDA=ON -DKERNELLLM_BUILD_TESTS=OFF -DKERNELLLM_WERROR=OFF \
  -DCMAKE_BUILD_TYPE=Release > "$out/build.log" 2>&1 && ninja -C build/ldev kernelllm >> "$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
cli=$PWD/build/ldev/kernelllm
echo "build ok"
problems=/tmp/kb-eval
rm -rf "$problems" && mkdir -p "$problems/level1"
for d in bench/eval_candidates/level1/*/; do cp "$kb/KernelBench/level1/$(basename "$d").py" "$problems/level1/"; done
eval_cmd=("$cli" eval --problems "$problems" --levels 1 --candidates bench/eval_candidates/level1 --device cuda:0)
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
      rm -rf /tmp/run
      start=$SECONDS
      "${eval_cmd[@]}" --out /tmp/run > "$out/eval.stdout" 2> "$out/eval.stderr"
      echo "eval exit $? after $((SECONDS - start)) s"; tail -30 "$out/eval.stdout"
      mkdir -p "$out/eval-h100" && cp /tmp/run/report.json /tmp/run/report.html "$out/eval-h100/" ;;
    resume)
      rm -rf /tmp/run2
      "${eval_cmd[@]}" --out /tmp/run2 > "$out/resume1.stdout" 2> "$out/resume1.stderr" &
      pid=$!
      sleep "${RESUME_KILL_S:-60}"
      kill -9 "$pid"; wait "$pid" 2>/dev/null
      pkill -9 -f kernelllm.worker 2>/dev/null
      echo "killed after ${RESUME_KILL_S:-60} s"
      "${eval_cmd[@]}" --out /tmp/run2 > "$out/resume2.stdout" 2> "$out/resume2.stderr"
      echo "resumed run exit $?"; tail -5 "$out/resume2.stdout"
      mkdir -p "$out/eval-resume" && cp /tmp/run2/report.json "$out/eval-resume/"
      python3 - /tmp/run2/run.sqlite > "$out/eval-resume/verifications.txt" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
print("tables", tables)
for t in tables:
    print(t, db.execute(f"select count(*) from {t}").fetchone()[0])
PY
      cat "$out/eval-resume/verifications.txt" ;;
    bench)
      "$cli" bench --config llama-3.1-8b --random-weights --seed 0 --device cuda:0 --dtype bf16 --prompt-tokens 1500 \
        --new-tokens 512 -n 1,10,20 --warmup 2 --peer hf --json "$out/bench-h100.json" > "$out/bench.stdout" 2> "$out/bench.stderr"
      echo "bench exit $?"; tail -20 "$out/bench.stdout"; tail -5 "$out/bench.stderr" ;;
    *) echo "unknown mode $mode"; exit 2 ;;
  esac
done
