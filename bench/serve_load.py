"""Bounded load test of `kernelllm serve` on loopback: N client threads (the official `openai`
client) each send completion requests back to back for T seconds; requests still in flight at
T are waited for. Records the aggregate generated tok/s (completion tokens of all answers over
the wall time from the first request to the last answer), request latency p50/p99
(nearest rank), requests sent/answered/failed (nothing may be lost: sent == answered + failed),
and the machine and versions, as JSON.

  # start a server itself (tiny model on CPU: shows the script works; not a benchmark record)
  python3 bench/serve_load.py --cli build/release/kernelllm --model DIR --clients 4 --duration 10 \
      --max-tokens 32 --out /tmp/serve-load-cpu.json -- --threads 2
  # or against a running server (on a GPU: 20 clients, each one sample of 512 tokens), beside a
  # `kernelllm bench --json` record whose decode rate at n = clients x n is embedded for comparison
  python3 bench/serve_load.py --url http://127.0.0.1:8000 --clients 20 --duration 60 --max-tokens 512 \
      --temperature 0.6 --beside bench-n20.json --out serve-load.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from gpu_facts import gpu_line  # noqa: E402
PROMPT = "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (no interpolation): the smallest value with at least p% at or below it."""
    if not values:
        return None
    s = sorted(values)
    rank = max(1, -(-len(s) * p // 100))
    return s[int(rank) - 1]


def start_server(cli: str, model: str, extra: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([cli, "serve", "--model", model, "--port", "0", *extra], stdout=subprocess.DEVNULL,
                            stderr=log.open("w"))
    deadline = time.time() + 600
    while time.time() < deadline:
        m = re.search(r"listening on (http://[\d.]+:\d+)", log.read_text())
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start within 600 s")


def run_load(client: openai.OpenAI, model: str, args) -> dict:
    lock = threading.Lock()
    latencies_ms: list[float] = []
    tokens = [0]
    sent, answered, failed = [0], [0], [0]
    errors: list[str] = []
    last_answer = [0.0]
    t0 = time.perf_counter()
    deadline = t0 + args.duration

    def worker(i: int) -> None:
        k = 0
        while time.perf_counter() < deadline:
            with lock:
                sent[0] += 1
            start = time.perf_counter()
            try:
                r = client.completions.create(model=model, prompt=PROMPT, max_tokens=args.max_tokens, n=args.n,
                                              temperature=args.temperature, top_p=args.top_p, seed=1000 * i + k)
                end = time.perf_counter()
                with lock:
                    answered[0] += 1
                    tokens[0] += r.usage.completion_tokens
                    latencies_ms.append(1000 * (end - start))
                    last_answer[0] = max(last_answer[0], end)
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    failed[0] += 1
                    errors.append(repr(e)[:300])
            k += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall_s = (last_answer[0] or time.perf_counter()) - t0
    return {
        "requests_sent": sent[0], "requests_answered": answered[0], "requests_failed": failed[0],
        "nothing_lost": sent[0] == answered[0] + failed[0] and failed[0] == 0,
        "completion_tokens": tokens[0], "wall_s": round(wall_s, 3),
        "tokens_per_s": round(tokens[0] / wall_s, 2) if wall_s > 0 else None,
        "latency_ms": {"p50": percentile(latencies_ms, 50), "p99": percentile(latencies_ms, 99),
                       "min": min(latencies_ms, default=None), "max": max(latencies_ms, default=None)},
        "errors": errors[:10],
    }


def beside(path: Path, samples: int) -> dict:
    """The `kernelllm bench --json` record's decode at n = samples (the same count of live sequences)."""
    rec = json.loads(path.read_text())
    rows = [d for d in rec.get("decode", []) if d.get("n") == samples]
    if not rows:
        raise ValueError(f"{path}: expected a decode entry with n = {samples}, found n = "
                         f"{[d.get('n') for d in rec.get('decode', [])]}")
    d = rows[0]
    return {"file": path.name, "command": rec.get("command"), "n": samples,
            "prompt_tokens": rec.get("options", {}).get("prompt_tokens"),
            "new_tokens": rec.get("options", {}).get("new_tokens"),
            "decode_tok_s_aggregate": d["tok_s_aggregate"], "decode_ms_per_step_median": d["ms_per_step_median"],
            "prefill_ms": d.get("prefill_ms")}


def machine(cli: str | None) -> dict:
    info = {"host": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "openai": openai.__version__}
    # Outside a checkout (a build from `git archive`) the commit comes from the environment.
    info["git_commit"] = os.environ.get("KERNELLLM_GIT_COMMIT") or None
    if not info["git_commit"]:
        try:
            info["git_commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                                                text=True, timeout=30).stdout.strip() or None
        except OSError:
            pass
    if cli:
        info["kernelllm"] = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    info["gpu"] = gpu_line()
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (else --cli and --model start one)")
    ap.add_argument("--cli", help="the kernelllm executable that serves")
    ap.add_argument("--model", help="model directory for the started server")
    ap.add_argument("--model-name", help="the served model id (default: ask /v1/models)")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds during which requests are sent")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--n", type=int, default=1, help="choices per request")
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--label", default="", help="what this run is, recorded (e.g. 'CPU smoke run, not a benchmark')")
    ap.add_argument("--beside", type=Path, help="a `kernelllm bench --json` record: its decode at n = clients x n "
                                                "is embedded, with served / bench")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("serve_args", nargs="*", help="after --: more `kernelllm serve` arguments")
    args = ap.parse_args()
    if args.clients < 1 or args.duration <= 0:
        raise SystemExit("expected --clients >= 1 and --duration > 0")

    proc = None
    if args.url:
        url = args.url
    else:
        if not (args.cli and args.model):
            raise SystemExit("expected --url, or --cli and --model to start a server")
        log = Path(tempfile.mkdtemp(prefix="serve-load-")) / "server.log"
        proc, url = start_server(args.cli, args.model, args.serve_args, log)
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key=os.environ.get("KERNELLLM_API_KEY", "none"),
                               max_retries=0, timeout=3600)
        model = args.model_name or client.models.list().data[0].id
        load = run_load(client, model, args)
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=60)
    record = {
        "what": "kernelllm serve load test on loopback (bench/serve_load.py)",
        "label": args.label, "command": " ".join(sys.argv), "url": url, "model": model,
        "clients": args.clients, "duration_s": args.duration, "max_tokens": args.max_tokens, "n": args.n,
        "temperature": args.temperature, "top_p": args.top_p, "prompt": PROMPT,
        "concurrent_samples": args.clients * args.n,
        **load, "machine": machine(args.cli),
    }
    if args.beside:
        # A missing or broken bench record must not lose the measured load: it is noted instead.
        try:
            b = beside(args.beside, args.clients * args.n)
            ratio = record["tokens_per_s"] / b["decode_tok_s_aggregate"] if record["tokens_per_s"] else None
            b["served_over_bench"] = round(ratio, 3) if ratio is not None else None
        except (OSError, ValueError, KeyError) as e:
            b = {"file": str(args.beside), "error": str(e)[:300]}
        record["beside_bench"] = b
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    lat = record["latency_ms"]
    print(f"{record['requests_answered']}/{record['requests_sent']} answered, {record['requests_failed']} failed; "
          f"{record['tokens_per_s']} tok/s; latency p50 {lat['p50']:.0f} ms, p99 {lat['p99']:.0f} ms"
          if lat["p50"] is not None else f"no request answered: {record['errors'][:3]}")
    if "decode_tok_s_aggregate" in record.get("beside_bench", {}):
        b = record["beside_bench"]
        print(f"beside kernelllm bench n = {b['n']}: {b['decode_tok_s_aggregate']:.0f} tok/s decode "
              f"(served / bench = {b['served_over_bench']})")
    return 0 if record["nothing_lost"] else 1


if __name__ == "__main__":
    sys.exit(main())
