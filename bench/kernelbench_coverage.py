"""Coverage of KernelBench levels 1-3 by `kernelllm verify`: can every problem be evaluated on one
GPU host? Each problem P is verified against a stand-in candidate made of P's own source, a Triton
kernel that is never launched, and `class ModelNew(Model): pass` (so the candidate computes with
the problem's own PyTorch ops; in the strict profile it should be judged `cheat`). Any verdict
counts as evaluable except the ones that mean the call could not judge it: no report, a timeout,
`not_verified`, `environment_error`, or an out-of-memory failure. Stdlib only; one device call:

  python3 bench/kernelbench_coverage.py --cli build/vdev/kernelllm --kernelbench .kb --device cuda:0 \
      --budget-s 240 --out bench/results/kernelbench-coverage-h100.json

The record is rewritten after every problem and resumed from when it exists, so repeated calls
of at most 10 minutes (--budget-s + --timeout-s below that) finish the 250 problems. While a
call runs, its process tree is sampled every 0.25 s: host RSS summed over the tree, the bytes of
its /dev/shm/kernelllm-verify-* run directory, GPU memory of the tree's pids (nvidia-smi; a
sandboxed pid namespace can hide them) and the device-wide memory.used. GB = 1e9 bytes.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHM_GLOB = "/dev/shm/kernelllm-verify-*"
NOT_JUDGED = {"not_verified", "environment_error"}
OOM = re.compile(r"out_of_memory|out of memory|memory limit", re.I)
GB = 1e9
CANDIDATE_TAIL = '''

# --- appended by bench/kernelbench_coverage.py: a Triton kernel that is never launched ---
import triton
import triton.language as tl


@triton.jit
def _coverage_copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


class ModelNew(Model):
    pass
'''


def sh(*cmd: str) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def process_tree(root: int) -> list[int]:
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        for children in glob.glob(f"/proc/{pid}/task/*/children"):
            try:
                todo += [int(c) for c in Path(children).read_text().split()]
            except OSError:
                pass
    return seen


def rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def dir_bytes(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total


def shm_dir_of(pids: list[int]) -> str | None:
    """The run directory that a process of the tree has as its cwd or holds a file of."""
    for pid in pids:
        links = [f"/proc/{pid}/cwd"] + glob.glob(f"/proc/{pid}/fd/*")
        for link in links:
            try:
                target = os.readlink(link)
            except OSError:
                continue
            m = re.match(r"(/dev/shm/kernelllm-verify-[^/]+)", target)
            if m:
                return m.group(1)
    return None


class Call:
    def __init__(self, pid: int, shm_before: set[str], gpu_index: str | None):
        self.pid, self.shm_before, self.run_dir, self.pids = pid, shm_before, None, [pid]
        self.gpu_index = gpu_index
        self.peak = {"host_rss": 0, "shm": 0, "gpu_tree": None, "gpu_device": None}

    def bump(self, key: str, value: int | None) -> None:
        if value is not None and (self.peak[key] is None or value > self.peak[key]):
            self.peak[key] = value


class Monitor(threading.Thread):
    """One sampler for all running calls, so nvidia-smi is asked once per tick."""

    def __init__(self, concurrency: int):
        super().__init__(daemon=True)
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        self.smi = shutil.which("nvidia-smi")
        self.concurrency = concurrency

    def gpu(self) -> tuple[dict[int, int], dict[str, int]]:
        """Memory of each compute process (all GPUs) and memory.used of each GPU by index."""
        if not self.smi:
            return {}, {}
        apps: dict[int, int] = {}
        for line in (sh(self.smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits") or "").splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                apps[int(parts[0])] = apps.get(int(parts[0]), 0) + int(parts[1]) * 2**20
        used: dict[str, int] = {}
        for line in (sh(self.smi, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits") or "").splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                used[parts[0]] = int(parts[1]) * 2**20
        return apps, used

    def run(self) -> None:
        while True:
            with self.lock:
                calls = list(self.calls)
            if calls:
                apps, device_used = self.gpu()
                for call in calls:
                    try:
                        self.sample(call, apps, device_used)
                    except Exception as e:  # a vanished process or file: keep sampling the others
                        print(f"monitor: {type(e).__name__}: {e}", file=sys.stderr)
            time.sleep(0.25)

    def sample(self, call: Call, apps: dict[int, int], device_used: dict[str, int]) -> None:
        call.pids = process_tree(call.pid)
        call.bump("host_rss", sum(rss_bytes(p) for p in call.pids))
        if self.smi:
            call.bump("gpu_tree", sum(apps.get(p, 0) for p in call.pids))
            call.bump("gpu_device", device_used.get(call.gpu_index or ""))
        if call.run_dir is None:
            call.run_dir = shm_dir_of(call.pids)
        if call.run_dir is None and self.concurrency == 1:  # else: the newest run directory of this call
            new = [d for d in glob.glob(SHM_GLOB) if d not in call.shm_before and os.path.isdir(d)]
            call.run_dir = max(new, key=os.path.getmtime, default=None)
        if call.run_dir:
            call.bump("shm", dir_bytes(call.run_dir))


def level_dir(root: Path, level: int) -> Path:
    for base in (root / "KernelBench", root):
        if (base / f"level{level}").is_dir():
            return base / f"level{level}"
    raise SystemExit(f"no level{level} under {root}/KernelBench or {root}")


def select(args) -> list[tuple[str, Path]]:
    wanted = {w.strip().removesuffix(".py") for w in args.problems.split(",")} if args.problems else None
    chosen = []
    for level in (int(x) for x in args.levels.split(",")):
        files = sorted(level_dir(args.kernelbench, level).glob("*.py"),
                       key=lambda p: (int(m.group()) if (m := re.match(r"\d+", p.name)) else 10**9, p.name))
        for path in files:
            name = f"level{level}/{path.stem}"
            if wanted is None or name in wanted or path.stem in wanted:
                chosen.append((name, path))
    unknown = (wanted or set()) - {n for n, _ in chosen} - {Path(n).name for n, _ in chosen}
    if unknown:
        raise SystemExit(f"--problems: not found in levels {args.levels}: {', '.join(sorted(unknown))}")
    return chosen


SIZE_PROBE = r"""
import importlib.util, json, sys, torch
out = {}
for path in sys.argv[1:]:
    try:
        spec = importlib.util.spec_from_file_location("kb_size_probe", path)
        m = importlib.util.module_from_spec(spec)
        with torch.device("meta"):
            spec.loader.exec_module(m)
            args = list(m.get_inputs())
            r = m.Model(*m.get_init_inputs())(*args)
        outs = list(r) if isinstance(r, (tuple, list)) else [r]
        out[path] = sum(t.numel() * t.element_size() for t in args + outs if isinstance(t, torch.Tensor))
    except Exception:
        out[path] = None
print(json.dumps(out))
"""


def problem_bytes(paths: list[Path]) -> dict[str, int | None]:
    """Inputs + outputs of each problem, from a pass on torch's meta device (no memory used);
    None where that fails. Runs this interpreter, which must have torch."""
    try:
        res = subprocess.run([sys.executable, "-c", SIZE_PROBE, *map(str, paths)],
                             capture_output=True, text=True, timeout=600)
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError, OSError):
        return {}


class Gate:
    """Small problems run side by side; a large one runs alone (its GPU memory, with the fp64
    reference, can be most of the device's)."""

    def __init__(self) -> None:
        self.cond, self.running, self.alone = threading.Condition(), 0, False

    def enter(self, alone: bool) -> None:
        with self.cond:
            self.cond.wait_for(lambda: not self.alone and (not alone or self.running == 0))
            self.running += 1
            self.alone = alone

    def leave(self) -> None:
        with self.cond:
            self.running -= 1
            self.alone = False
            self.cond.notify_all()


def classify(row: dict) -> str | None:
    """None when the call judged the candidate, else why not."""
    if row["timed_out"]:
        return f"timeout: no result within {row['timeout_s']} s"
    if row["verdict"] is None:
        return "no report: " + (row.get("error") or f"exit {row['returncode']}")
    if row["verdict"] in NOT_JUDGED:
        return f"{row['verdict']}: {row['rule']}: {row['message']}"
    if OOM.search(f"{row['rule'] or ''} {row['message'] or ''}"):
        return f"out of memory ({row['verdict']}): {row['message']}"
    return None


def verify_one(args, device: str, monitor: Monitor, active: dict, name: str, problem: Path, work: Path) -> dict:
    stem = name.replace("/", "__")
    candidate, report, log = work / f"{stem}_candidate.py", work / f"{stem}.json", work / f"{stem}.stderr"
    candidate.write_text(problem.read_text() + CANDIDATE_TAIL)
    cmd = [args.cli, "verify", str(problem), str(candidate), "--verify-device", device, "--json", str(report),
           "--no-cache", "--no-multishape", *(["--trials", str(args.trials)] if args.trials else []),
           *shlex.split(args.pass_args)]
    shm_before = set(glob.glob(SHM_GLOB))
    start = time.monotonic()
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    index = re.fullmatch(r"cuda:(\d+)", device)
    call = Call(proc.pid, shm_before, index.group(1) if index else None)
    with monitor.lock:
        monitor.calls.append(call)
        active[proc.pid] = call
    timed_out = False
    try:
        proc.wait(timeout=args.timeout_s)
    except subprocess.TimeoutExpired:  # like timeout(1): TERM to the group, then KILL what is left
        timed_out = True
        kill_call(proc)
    wall = time.monotonic() - start
    with monitor.lock:
        monitor.calls.remove(call)
        active.pop(proc.pid, None)
    if timed_out and call.run_dir and os.path.isdir(call.run_dir):
        shutil.rmtree(call.run_dir, ignore_errors=True)  # verify had no chance to remove it
    stderr_tail = log.read_text(errors="replace")[-2000:]
    row = {"problem": name, "file": str(problem), "verdict": None, "rule": None, "message": None, "warnings": [],
           "device": device, "returncode": proc.returncode, "timed_out": timed_out, "timeout_s": args.timeout_s,
           "wall_s": round(wall, 2)}
    try:
        data = json.loads(report.read_text())
        entry = data["candidates"][0]
        row.update(verdict=entry.get("verdict"), rule=entry.get("rule"), message=(entry.get("message") or "")[:300],
                   warnings=data.get("warnings", []), environment=data.get("environment") or {})
    except (OSError, ValueError, KeyError, IndexError) as e:
        errors = [line for line in stderr_tail.splitlines() if "error" in line.lower()]
        row["error"] = (errors[-1] if errors else f"no readable report ({type(e).__name__})")[:300]
        row["stderr_tail"] = stderr_tail
    for key, field in (("host_rss", "peak_host_rss_gb"), ("shm", "peak_shm_gb"),
                       ("gpu_tree", "peak_gpu_tree_gb"), ("gpu_device", "peak_gpu_device_used_gb")):
        row[field] = None if call.peak[key] is None else round(call.peak[key] / GB, 3)
    row["run_dir"] = call.run_dir
    row["reason"] = classify(row)
    row["evaluable"] = row["reason"] is None
    return row


def kill_call(proc: subprocess.Popen) -> None:
    pids = process_tree(proc.pid)  # taken before signalling: orphans would leave the tree
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in [-proc.pid] + pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def machine(args) -> dict:
    meminfo = Path("/proc/meminfo").read_text() if os.path.exists("/proc/meminfo") else ""
    m = re.search(r"MemTotal:\s+(\d+) kB", meminfo)
    smi = shutil.which("nvidia-smi") and sh("nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                             "--format=csv,noheader")
    return {"hostname": socket.gethostname(), "cpu_count": os.cpu_count(),
            "mem_total_gb": round(int(m.group(1)) * 1024 / GB, 3) if m else None,
            "gpus": smi.splitlines() if smi else [], "device": args.device}


def write(path: Path, record: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cli", required=True, help="the kernelllm binary")
    p.add_argument("--kernelbench", type=Path, default=Path(".kb"), help="directory holding KernelBench/level1..3")
    p.add_argument("--levels", default="1,2,3")
    p.add_argument("--problems", default="", help="comma-separated stems or levelN/stem (default: all)")
    p.add_argument("--device", default="cuda:0", help="one device, or several comma-separated (cuda:0,cuda:1): "
                   "problems go to whichever has a free slot, --concurrency calls on each")
    p.add_argument("--out", type=Path, required=True, help="JSON record (resumed from when it exists)")
    p.add_argument("--concurrency", type=int, default=1, help="verify calls at once on each device")
    p.add_argument("--timeout-s", type=float, default=300)
    p.add_argument("--budget-s", type=float, default=None, help="start no problem after this many seconds")
    p.add_argument("--order", choices=["file", "size"], default="file", help="size: smallest inputs + outputs first (meta-device estimate)")
    p.add_argument("--trials", type=int, default=None, help="verify --trials (default: verify's own)")
    p.add_argument("--pass-args", default="", help="extra verify flags, e.g. --pass-args=--no-timing")
    p.add_argument("--alone-over-gb", type=float, default=4.0,
                   help="problems whose inputs + outputs exceed this (GB, meta-device estimate) run with no other call")
    p.add_argument("--retry-not-evaluable", action="store_true", help="run again the recorded problems that were not evaluable")
    args = p.parse_args()
    began = time.monotonic()
    chosen = select(args)
    names = {n for n, _ in chosen}
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    rows = {r["problem"]: r for r in old.get("problems", [])}
    todo = [(n, f) for n, f in chosen if n not in rows or (args.retry_not_evaluable and not rows[n]["evaluable"])]
    devices = [d.strip() for d in args.device.split(",") if d.strip()]
    slots = max(args.concurrency, 1) * len(devices)
    sizes = problem_bytes([f for _, f in todo]) if slots > 1 or args.order == "size" else {}
    if args.order == "size":  # unknown sizes last
        todo.sort(key=lambda item: (sizes.get(str(item[1])) is None, sizes.get(str(item[1])) or 0))

    def large(f: Path) -> bool:
        b = sizes.get(str(f), 0)
        return b is None or b > args.alone_over_gb * 1e9
    alone = {n for n, f in todo if args.concurrency > 1 and large(f)}  # alone on its device
    gates = {d: Gate() for d in devices}
    queue = list(todo)  # taken from the front by whichever device slot is free
    monitor = Monitor(slots)
    monitor.start()
    here = machine(args)
    # A device machine's copy of the tree may carry stale git metadata: the caller's word first.
    commit = os.environ.get("KERNELLLM_GIT_COMMIT") or sh("git", "-C", str(ROOT), "rev-parse", "HEAD")
    record = {"command": " ".join(shlex.quote(a) for a in sys.argv), "commit": commit,
              "machine": {**old.get("machine", {}), **here},
              "options": {"device": args.device, "trials": args.trials, "timeout_s": args.timeout_s,
                          "pass_args": args.pass_args, "profile": "strict"},
              "runs": old.get("runs", []) + [{"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": commit,
                                               "hostname": here["hostname"], "problems_run": 0}]}
    lock, halt, active, walls = threading.Lock(), threading.Event(), {}, []
    print(f"{len(chosen)} problems selected, {len(chosen) - len(todo)} already in {args.out}, {len(todo)} to run",
          flush=True)

    def save() -> None:  # counts cover the selected problems; rows of others already in the file are kept
        mine = [rows[n] for n, _ in chosen if n in rows]
        counts: dict[str, int] = {}
        for r in mine:
            counts[r["verdict"] or "no_report"] = counts.get(r["verdict"] or "no_report", 0) + 1
        record.update(complete=len(mine) == len(chosen), problems_total=len(chosen), problems_recorded=len(mine),
                      problems_evaluable=sum(r["evaluable"] for r in mine),
                      not_evaluable=[{"problem": r["problem"], "reason": r["reason"]} for r in mine if not r["evaluable"]],
                      verdict_counts=dict(sorted(counts.items())),
                      problems=mine + [r for n, r in rows.items() if n not in names])
        write(args.out, record)

    def over() -> bool:
        return halt.is_set() or (args.budget_s is not None and time.monotonic() - began > args.budget_s)

    def slot(device: str, work: Path) -> None:
        while not over():
            with lock:
                if not queue:
                    return
                name, path = queue.pop(0)
            job(device, name, path, work)

    def job(device: str, name: str, path: Path, work: Path) -> None:
        gates[device].enter(name in alone)
        try:
            if over():
                return
            row = verify_one(args, device, monitor, active, name, path, work)
        finally:
            gates[device].leave()
        row["ran_alone"] = name in alone or args.concurrency == 1
        if halt.is_set():  # killed by our own shutdown: not a result
            return
        env = row.pop("environment", None) or {}
        with lock:
            record["machine"].update({k: env[k] for k in ("python", "python_version", "torch", "triton") if k in env})
            rows[name] = row
            record["runs"][-1]["problems_run"] += 1
            walls.append(row["wall_s"])
            save()
            eta = sum(walls) / len(walls) * len(names - rows.keys()) / slots
            print(f"[{len(names & rows.keys())}/{len(chosen)}] {name}: {row['verdict'] or 'no report'} "
                  f"({row['rule'] or '-'}) {row['wall_s']:.1f} s, rss {row['peak_host_rss_gb']} GB, "
                  f"shm {row['peak_shm_gb']} GB, gpu tree/device {row['peak_gpu_tree_gb']}/"
                  f"{row['peak_gpu_device_used_gb']} GB{'' if row['evaluable'] else '  NOT EVALUABLE: ' + row['reason'][:160]}"
                  f"  | eta {int(eta) // 60}m{int(eta) % 60:02d}s", flush=True)

    def stop(signum, frame):  # the device call is being ended: take the running verify trees down too
        halt.set()
        for call in list(active.values()):
            for pid in [-call.pid] + call.pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if call.run_dir:
                shutil.rmtree(call.run_dir, ignore_errors=True)
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, stop)
    with tempfile.TemporaryDirectory(prefix="kb-coverage-") as tmp:
        with lock:
            save()
        try:
            with ThreadPoolExecutor(max_workers=slots) as pool:
                for future in [pool.submit(slot, d, Path(tmp)) for d in devices for _ in range(max(args.concurrency, 1))]:
                    future.result()
        except KeyboardInterrupt:
            stop(signal.SIGINT, None)
    left = len(names - rows.keys())
    print(f"{record['problems_evaluable']}/{record['problems_recorded']} recorded problems evaluable; "
          f"{'complete' if not left else f'{left} not run (budget)'}; wrote {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
