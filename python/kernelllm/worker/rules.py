"""The cheat rules of SPEC-verify as pure functions over the facts a candidate `run` reports,
each violation with its evidence, plus the classification of exceptions into verdict kinds
(including the Triton-interpreter/NumPy environment failure). Used by the candidate worker
(to report) and by the judge (to decide, from the same facts, in a trusted process)."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

# Order = precedence when several rules fire: the first is the verdict's rule.
RULES = (
    # Sandbox attempts (verdict sandbox_violation), recorded by the candidate's audit hook (guard.py).
    "kill_parent",              # a signal sent to any process other than itself
    "process_flood",            # more than MAX_SPAWNS processes spawned
    "network",                  # socket connect/sendto/sendmsg
    "file_escape",              # open outside the allowed roots, or any write outside the work dir
    "env_escape",               # read of an environment variable not on the worker's allow-list
    "patched_timer",            # timing/sync/launch-hook functions replaced in the candidate process
    "globals_rebinding",        # torch's random-input functions replaced in the candidate process
    "output_not_plain_tensor",  # subclass, non-strided layout, non-tensor output
    "output_aliases_input",     # an output shares storage with an input
    "input_mutation",           # input bytes changed during forward
    "background_thread",        # Python threads alive after forward that were not there before
    "side_stream",              # Triton work launched on a stream the caller's stream never waited on
    "no_triton_kernel",         # forward launched no Triton kernel (launch counter, static audit, GPU profile)
    "torch_fallback",           # torch did the work: its compute ops (CPU) or non-Triton kernels (GPU profile)
)

SANDBOX_RULES = frozenset(("kill_parent", "process_flood", "network", "file_escape", "env_escape"))
MAX_SPAWNS = 16  # more spawned processes than this is a flood; a candidate may fork a few helpers
RULE_OF_EVENT = {"open_read": "file_escape", "open_write": "file_escape", "write": "file_escape",
                 "network": "network", "kill": "kill_parent", "env": "env_escape", "spawn": "process_flood"}


def verdict_of_rule(rule: str) -> str:
    return "sandbox_violation" if rule in SANDBOX_RULES else "cheat"


def sandbox_violations(report: Dict[str, Any]) -> List[Dict[str, str]]:
    """The sandbox rules broken by the recorded attempts (`sandbox_events`, `process_spawns`)."""
    by_rule: Dict[str, List[str]] = {}
    for e in report.get("sandbox_events") or []:
        rule = RULE_OF_EVENT.get(str(e.get("kind")))
        if rule is not None:
            by_rule.setdefault(rule, []).append(f"{e.get('detail')} at {e.get('where')}")
    spawns = int(report.get("process_spawns") or 0)
    if spawns > MAX_SPAWNS and "process_flood" not in by_rule:
        by_rule["process_flood"] = [f"{spawns} processes spawned"]
    found = []
    for rule, items in by_rule.items():
        more = f" (+{len(items) - 3} more)" if len(items) > 3 else ""
        found.append(violation(rule, f"{len(items)} attempt(s) refused and recorded: {'; '.join(items[:3])}{more}"))
    return found


# Input makers a candidate might rebind to shape the inputs it expects (guarded by identity), and
# the seeders the inputs recipe calls (inputs.Recipe.raw).
RANDOM_FUNCTIONS = tuple(f"torch.{n}" for n in ("rand", "randn", "randint", "rand_like", "randn_like",
                                                "randint_like", "randperm", "manual_seed", "empty", "zeros",
                                                "cuda.manual_seed_all", "random.default_generator"))


def violation(rule: str, evidence: str) -> Dict[str, str]:
    assert rule in RULES, rule
    return {"rule": rule, "evidence": evidence}


# On CPU, torch's own compute ops in forward may read at most this share of the input bytes.
CPU_TORCH_READ_SHARE = 0.5


# The run reply's fields the rules and the judge read, by the type the candidate worker writes
# (candidate.py, guard.py). A field may be absent; present, it must have its type.
_REPORT_FIELDS = {
    "patched": "str_list", "new_threads": "str_list", "unjoined_streams": "str_list",
    "output_types": "dict_list", "sandbox_events": "dict_list",
    "triton_launches": "int", "process_spawns": "int", "threads_before": "int", "threads_after": "int",
    "n_outputs": "int",
    "inputs_checksum": "str", "input_hash_before": "str", "input_hash_after": "str",
    "input_hashes_before": "list", "input_hashes_after": "list", "output_checksums": "list", "violations": "list",
    "aten_compute": "dict", "kernel_profile": "dict", "triton_launched_kernels": "dict",
}


def _has_type(value: Any, kind: str) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "dict":
        return isinstance(value, dict)
    if not isinstance(value, list):
        return False
    if kind == "str_list":
        return all(isinstance(x, str) for x in value)
    if kind == "dict_list":
        return all(isinstance(x, dict) for x in value)
    return True


def malformed_report(report: Any) -> Optional[str]:
    """Why a candidate's run reply cannot be read by the rules, or None. The reply is written in
    the candidate's process, which its code can rewrite: a field of another type must fail the
    trial as the candidate's doing, not stop the judge (an error there once left a size variant
    without a result, which the multi-shape check counted as no evidence)."""
    if not isinstance(report, dict):
        return f"the run reply is {type(report).__name__}, not an object"
    for name, kind in _REPORT_FIELDS.items():
        value = report.get(name)
        if value is not None and not _has_type(value, kind):
            return f"the run reply's {name} is not a {kind.replace('_', ' of ')}: {str(value)[:80]}"
    return None


def evaluate_run(report: Dict[str, Any], require_triton: bool = True, torch_fallback: bool = False) -> List[Dict[str, str]]:
    """Violations shown by a candidate `run` reply (see the protocol's run reply fields).
    `torch_fallback` (the strict profile) applies the CPU counterpart of the GPU kernel profile:
    torch compute ops that read as many bytes as the inputs did the work."""
    found = sandbox_violations(report)
    patched = report.get("patched") or []
    timers = [p for p in patched if p not in RANDOM_FUNCTIONS]
    if timers:
        found.append(violation("patched_timer", f"replaced in the candidate process: {', '.join(timers)}"))
    rebound = [p for p in patched if p in RANDOM_FUNCTIONS]
    if rebound:
        found.append(violation("globals_rebinding", f"replaced in the candidate process: {', '.join(rebound)}"))
    for i, t in enumerate(report.get("output_types") or []):
        if t.get("type") != "torch.Tensor" or t.get("layout") != "torch.strided":
            found.append(violation("output_not_plain_tensor",
                                   f"output {i}: expected exactly torch.Tensor with strided layout, "
                                   f"found {t.get('type')} ({t.get('layout')})"))
            break
    for i, t in enumerate(report.get("output_types") or []):
        if t.get("aliases_input") is not None:
            found.append(violation("output_aliases_input",
                                   f"output {i} shares storage with input {t['aliases_input']}"))
            break
    before, after = report.get("input_hash_before"), report.get("input_hash_after")
    if before is not None and before != after:
        changed = [i for i, (a, b) in enumerate(zip(report.get("input_hashes_before") or [],
                                                    report.get("input_hashes_after") or [])) if a != b]
        found.append(violation("input_mutation", f"input hash changed during forward ({before[:16]} -> "
                                                 f"{str(after)[:16]}); changed inputs: {changed}"))
    new_threads = report.get("new_threads") or []
    if new_threads:
        found.append(violation("background_thread",
                               f"{len(new_threads)} thread(s) started by the candidate still alive: "
                               f"{', '.join(new_threads[:5])} (threads {report.get('threads_before')} -> "
                               f"{report.get('threads_after')})"))
    unjoined = report.get("unjoined_streams") or []
    if unjoined:
        found.append(violation("side_stream", f"Triton kernels launched on {len(unjoined)} non-default stream(s) "
                                              f"({', '.join(unjoined[:3])}) that the current stream never waited on "
                                              "(no wait_stream, wait_event or synchronize) before forward returned"))
    if require_triton and report.get("triton_launches", 0) == 0:
        found.append(violation("no_triton_kernel", "forward launched 0 Triton kernels (launch hook count)"))
    aten = report.get("aten_compute")
    if torch_fallback and isinstance(aten, dict):
        read, inputs = aten.get("read_bytes") or 0, aten.get("input_bytes") or 0
        if isinstance(read, (int, float)) and isinstance(inputs, (int, float)) and inputs > 0 and \
                read >= CPU_TORCH_READ_SHARE * inputs:
            ops = aten.get("ops") if isinstance(aten.get("ops"), dict) else {}
            ops = {str(n)[:60]: b for n, b in ops.items() if isinstance(b, (int, float)) and not isinstance(b, bool)}
            top = ", ".join(f"{n} {b:.0f} B" for n, b in sorted(ops.items(), key=lambda kv: -kv[1])[:3])
            found.append(violation("torch_fallback", f"torch compute ops read {read:.0f} bytes during the run, "
                                                     f"{read / inputs:.0%} of the inputs' {inputs:.0f} (top: {top}): "
                                                     "torch, not Triton, did the work"))
    found.sort(key=lambda v: RULES.index(v["rule"]))
    return found


# The Triton interpreter with a NumPy it was not built for fails on loops over runtime bounds
# (SPEC-verify, CPU mode caveat). Not the candidate's fault: an environment limitation.
_ENV_PATTERNS = (
    re.compile(r"only 0-dimensional arrays can be converted to Python scalars"),
    re.compile(r"only length-1 arrays can be converted to Python scalars"),
)


def allocator_refusal(exc: BaseException) -> Optional[str]:
    """For torch's out-of-memory errors: a one-line description without the errno text
    ("Cannot allocate memory"), which would read as a sandbox wall; else None."""
    text = str(exc)
    if type(exc).__name__ != "OutOfMemoryError" and "can't allocate memory" not in text:
        return None
    m = re.search(r"tried to allocate (\d+) bytes", text)
    if m:
        return f"the allocator refused {int(m.group(1))} bytes"
    return text.split("Error code")[0].strip()[:300]


# CUDA errors that leave the context unusable ("sticky" errors): the process is as good as dead,
# so they are crashes (SPEC-verify: "crash ... CUDA illegal address"), not runtime errors, and the
# orchestrator health-checks the GPU afterwards.
_CUDA_FAULT = re.compile(r"illegal memory access|illegal address|unspecified launch failure|misaligned address|"
                         r"illegal instruction|device-side assert|CUDA_ERROR_ILLEGAL|an illegal|hardware stack error|"
                         r"uncorrectable ECC")


def classify_exception(exc: BaseException, tb: str, phase: str) -> str:
    """Verdict kind for an exception raised by candidate code in `phase` ("load" or "run")."""
    text = f"{type(exc).__name__}: {exc}"
    if "triton/runtime/interpreter.py" in tb and any(p.search(text) for p in _ENV_PATTERNS):
        return "environment_error"
    if _CUDA_FAULT.search(text):
        return "cuda_fault"
    mod = type(exc).__module__ or ""
    # In the interpreter, errors raised while executing the kernel body (InterpreterError) are
    # what the compiler rejects on a GPU (CompilationError): both are compile errors.
    if mod.startswith("triton.compiler") or type(exc).__name__ in ("CompilationError", "CompileTimeAssertionFailure",
                                                                   "InterpreterError"):
        return "compile_error"
    if phase == "load":
        return "compile_error"
    return "runtime_error"
