"""Adversarial verifier suite: every labelled candidate under tests/cases/<problem>/ goes through
the installed `kernelllm verify` (one call per problem, all its candidates at once) and must get
the verdict (and, for cheat/sandbox_violation, the rule) its header names. See tests/cases/README.md.
Env: KERNELLLM_CASES_DEVICE (default cpu; e.g. cuda:0), KERNELLLM_CASES_RECORD (write all reports
to this JSON file, e.g. bench/results/verify-cases-h100.json), KERNELLLM_CLI (the CLI to run),
KERNELLLM_CASES_PROBLEMS (comma-separated problem names: run only their cases, e.g. to split the
suite over concurrent processes; the header and rule-coverage checks always see every case)."""
from __future__ import annotations

import functools
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases"
PROBLEMS = CASES / "problems"
sys.path.insert(0, str(CASES))
from case_header import parse_header  # noqa: E402

DEVICE = os.environ.get("KERNELLLM_CASES_DEVICE", "cpu")
SECRET_VAR = "KERNELLLM_TEST_SECRET"
SECRET = "kllm-test-secret-" + secrets.token_hex(8)
VERDICTS = {"correct", "wrong_output", "wrong_shape", "compile_error", "runtime_error", "crash", "timeout", "cheat",
            "sandbox_violation"}
# Files the escape cases try to create; none may exist after a run.
ESCAPE_MARKERS = [CASES / ".escape_marker", CASES / "relu" / ".escape_marker"]
VERIFY_TIMEOUT_S = 3600


def runs_here(head: dict[str, str]) -> bool:
    """A `# device: cuda` case (GPU faults: illegal address, a spinning kernel, CUDA OOM) runs only
    when the suite runs on a GPU; every other case runs everywhere."""
    return head.get("device", "any") != "cuda" or DEVICE.startswith("cuda")


def discover(only: set[str] | None = None) -> list[tuple[str, Path, dict[str, str]]]:
    problems = sorted(PROBLEMS.glob("*.py"))
    if only is not None:
        unknown = only - {p.stem for p in problems}
        if unknown:
            raise SystemExit(f"KERNELLLM_CASES_PROBLEMS names unknown problems: {sorted(unknown)}")
        problems = [p for p in problems if p.stem in only]
    found = []
    for problem in problems:
        for case in sorted((CASES / problem.stem).glob("*.py")):
            head = parse_header(case)
            if runs_here(head):
                found.append((problem.stem, case, head))
    return found


_ONLY = os.environ.get("KERNELLLM_CASES_PROBLEMS")
EVERY_CASE = discover()
ALL_CASES = discover({p.strip() for p in _ONLY.split(",") if p.strip()}) if _ONLY else EVERY_CASE


def find_cli() -> str | None:
    """$KERNELLLM_CLI if set (e.g. a build tree's binary), else the installed console script."""
    if os.environ.get("KERNELLLM_CLI"):
        return os.environ["KERNELLLM_CLI"]
    here = Path(sys.executable).parent / "kernelllm"
    return str(here) if here.is_file() else shutil.which("kernelllm")


def verify_available() -> tuple[bool, str]:
    cli = find_cli()
    if cli is None:
        return False, "the kernelllm console script is not installed"
    try:
        r = subprocess.run([cli, "verify", "--help"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"`kernelllm verify --help` could not run: {e}"
    if r.returncode != 0:
        return False, f"`kernelllm verify --help` exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}"
    # A CLI without the subcommand may still print its top-level help and exit 0.
    usage = [line for line in r.stdout.splitlines() if line.lower().startswith("usage")]
    if not any(" verify" in line for line in usage):
        return False, f"`kernelllm verify --help` printed no verify usage: {usage[:1]}"
    return True, ""


_OK, _WHY = verify_available()


def needs_verify(test):
    """The verifier is part of the package: a missing `kernelllm verify` fails these tests."""
    @functools.wraps(test)
    def wrapped(*args, **kwargs):
        assert _OK, f"kernelllm verify is not available ({_WHY})"
        return test(*args, **kwargs)
    return wrapped


# --- reading the report ------------------------------------------------------------------------
# Expected shape: {"results": [{"candidate": PATH, "verdict": STR, "rule": STR|null,
#                               "multishape": {"verdict": "pass"|"fail", ...}|null, ...}, ...]}
# in the order the candidates were given. The readers below also accept a top-level list,
# "candidates" instead of "results", "path"/"file" instead of "candidate", and a verdict object
# {"verdict"|"kind": STR, "rule": STR}.

def report_entries(report: dict) -> list[dict]:
    """The verifier's per-candidate results: report["candidates"] (VerifyReport::to_json)."""
    assert isinstance(report, dict) and isinstance(report.get("candidates"), list), (
        f"expected a report object with a 'candidates' list, found top-level keys "
        f"{sorted(report) if isinstance(report, dict) else type(report).__name__}")
    return report["candidates"]


def entry_path(entry: dict) -> str:
    assert isinstance(entry.get("path"), str), f"expected a candidate 'path' string, found {entry.get('path')!r}"
    return entry["path"]


def entry_verdict(entry: dict) -> tuple[str, str]:
    assert isinstance(entry.get("verdict"), str), f"expected a 'verdict' string, found {entry.get('verdict')!r}"
    return entry["verdict"], entry.get("rule") or ""


def entry_multishape(entry: dict) -> str | None:
    """'pass', 'fail', or None when the report has no multi-shape result (multishape is null)."""
    value = entry.get("multishape")
    if value is None:
        return None
    assert isinstance(value, dict) and value.get("verdict") in ("pass", "fail"), (
        f"expected multishape null or {{'verdict': 'pass'|'fail', ...}}, found {value!r}")
    return value["verdict"]


def match_entries(cases: list[Path], entries: list[dict]) -> dict[Path, dict]:
    by_path = {str(Path(entry_path(e)).resolve()): e for e in entries}
    return {case: by_path[str(case.resolve())] for case in cases if str(case.resolve()) in by_path}


# --- running the verifier ----------------------------------------------------------------------

_REPORTS: dict[str, dict] = {}


def run_problem(problem: str, tmp_dir: Path) -> dict:
    """One `kernelllm verify` call for every case of `problem`; returns
    {"report", "entries": {case: entry}, "stdout", "stderr", "returncode"}."""
    if problem in _REPORTS:
        return _REPORTS[problem]
    cases = [case for p, case, _ in ALL_CASES if p == problem]
    out = tmp_dir / f"{problem}.json"
    for marker in ESCAPE_MARKERS:
        marker.unlink(missing_ok=True)
    env = dict(os.environ)
    env[SECRET_VAR] = SECRET
    if DEVICE == "cpu":
        env["TRITON_INTERPRET"] = "1"
    # --run-timeout-factor 10: the timeout cases wait for the limit, max(30 s, factor x the judge's
    # first make_inputs call); that call's cold start is seconds on a CPU, so the default 50 made
    # relu/timeout_infinite_loop wait ~6 minutes. Honest cases keep at least 30 s a run.
    cmd = [find_cli(), "verify", str(PROBLEMS / f"{problem}.py"), *map(str, cases), "--device", DEVICE, "--json",
           str(out), "--no-cache", "--run-timeout-factor", "10"]
    if DEVICE == "cpu":
        # On a GPU timing is pinned to one CPU anyway (auto); on the CPU only when asked: pinned
        # here too, so that CI runs that path (PinnedToCpu, the per-round-trip affinity check).
        cmd += ["--timing-cpu", str(max(os.sched_getaffinity(0)))]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=VERIFY_TIMEOUT_S, env=env, cwd=tmp_dir)
    assert out.is_file(), (f"`{' '.join(cmd)}` wrote no JSON (exit {r.returncode}).\n"
                           f"stderr tail:\n{r.stderr[-3000:]}")
    text = out.read_text()
    report = json.loads(text)
    result = {"report": report, "text": text, "entries": match_entries(cases, report_entries(report)),
              "stdout": r.stdout, "stderr": r.stderr, "returncode": r.returncode,
              "escaped": [str(m) for m in ESCAPE_MARKERS if m.exists()]}
    for marker in ESCAPE_MARKERS:
        marker.unlink(missing_ok=True)
    _REPORTS[problem] = result
    record = os.environ.get("KERNELLLM_CASES_RECORD")
    if record:
        write_record(Path(record))
    return result


def write_record(path: Path) -> None:
    """All reports so far plus the header verdicts, for bench/results/verify-cases-*.json."""
    expected = {f"{p}/{case.name}": h for p, case, h in ALL_CASES}
    data = {"device": DEVICE, "host": platform.node(), "python": platform.python_version(),
            "expected": expected, "reports": {p: r["report"] for p, r in _REPORTS.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


@pytest.fixture(scope="module")
def verify_problem(tmp_path_factory):
    base = tmp_path_factory.mktemp("verify-cases")
    return lambda problem: run_problem(problem, base)


# --- tests -------------------------------------------------------------------------------------

def test_every_case_has_a_valid_header():
    assert EVERY_CASE, f"no cases under {CASES}"
    bad = []
    for problem, case, head in EVERY_CASE:
        expect = head.get("expect")
        if expect not in VERDICTS:
            bad.append(f"{problem}/{case.name}: expect={expect!r}")
        elif expect in ("cheat", "sandbox_violation") and not head.get("rule"):
            bad.append(f"{problem}/{case.name}: {expect} without a rule")
        elif not head.get("why"):
            bad.append(f"{problem}/{case.name}: no why")
    assert not bad, "bad case headers:\n" + "\n".join(bad)


RULES = {"no_triton_kernel", "stale_memory", "zeros_pass", "cached_result", "side_stream", "patched_timer",
         "input_mutation", "globals_rebinding", "reads_reference", "output_not_plain_tensor", "output_aliases_input",
         "precision_downgrade", "background_thread", "closed_form", "timing_implausible", "timed_output_mismatch", "network", "file_escape",
         "env_escape", "process_flood", "kill_parent", "torch_fallback", "output_file_tampered", "inputs_differ",
         "output_rewritten", "cpu_affinity_changed", "malformed_report"}
# Rules only a GPU run can catch: their `# device: cuda` cases are not discovered on CPU, so only
# their near-misses are required there (torch_fallback has a CPU counterpart: candidate.py's
# accounting.AtenCompute).
GPU_ONLY_RULES: set = set()


def test_every_rule_has_a_case_and_a_near_miss():
    caught, near = set(), set()
    for _, _, head in EVERY_CASE:
        for key, bucket in (("rule", caught), ("attempts", caught), ("near_miss", near)):
            bucket.update(r.strip() for r in head.get(key, "").split(",") if r.strip())
    assert caught <= RULES and near <= RULES, f"unknown rule names: {(caught | near) - RULES}"
    required = RULES if DEVICE.startswith("cuda") else RULES - GPU_ONLY_RULES
    assert not required - caught, f"rules with no case that must be caught: {sorted(required - caught)}"
    assert not RULES - near, f"rules with no honest near-miss: {sorted(RULES - near)}"


@needs_verify
@pytest.mark.parametrize("problem,case,head", ALL_CASES, ids=[f"{p}/{c.stem}" for p, c, _ in ALL_CASES])
def test_case_verdict(verify_problem, problem, case, head):
    run = verify_problem(problem)
    entry = run["entries"].get(case)
    assert entry is not None, f"no result for {case} in the report of {problem}"
    verdict, rule = entry_verdict(entry)
    detail = json.dumps(entry, indent=1)[:4000]
    assert verdict == head["expect"], f"{problem}/{case.name}: expected {head['expect']}, got {verdict}\n{detail}"
    if head["expect"] in ("cheat", "sandbox_violation") or head.get("rule"):
        assert rule == head["rule"], f"{problem}/{case.name}: expected rule {head['rule']}, got {rule}\n{detail}"


UNDISTURBED_CASES = [(p, c, h) for p, c, h in ALL_CASES if h.get("paired_reference") == "undisturbed"]


@needs_verify
@pytest.mark.parametrize("problem,case,head", UNDISTURBED_CASES, ids=[f"{p}/{c.stem}" for p, c, _ in UNDISTURBED_CASES])
def test_paired_reference_undisturbed(verify_problem, problem, case, head):
    """A candidate that tries to slow the reference's round trips paired with its own (work left
    queued past its reply) must not: the paired reference keeps the time it has beside honest
    candidates (the median over the problem's candidates labelled correct with no attempt of their
    paired reference medians), within half again plus 5 us a call, and the candidate is slower."""
    run = verify_problem(problem)
    entry = run["entries"].get(case)
    assert entry is not None, f"no result for {case}"
    timing = entry.get("timing") or {}
    if not timing.get("meaningful") or "paired_reference_median_ms" not in timing:
        pytest.skip("no paired GPU timing in this run (CPU)")
    # Honest: labelled correct with no attempt at anything (the red-team cases that stay correct are not).
    labels = {c: h for p, c, h in ALL_CASES if p == problem}
    honest = sorted(e["timing"]["paired_reference_median_ms"] for c, e in run["entries"].items()
                    if c != case and labels.get(c, {}).get("expect") == "correct" and "attempts" not in labels.get(c, {})
                    and e.get("verdict") == "correct"
                    and "paired_reference_median_ms" in (e.get("timing") or {}))
    assert honest, f"{problem}: no honest candidate was timed beside the reference"
    alone, paired = honest[len(honest) // 2], timing["paired_reference_median_ms"]
    assert paired <= 1.5 * alone + 0.005, (
        f"{problem}/{case.name}: the reference's paired round trips took {paired:.5f} ms a call against "
        f"{alone:.5f} ms alone\n{json.dumps(timing)[:3000]}")
    assert entry["speedup"] is not None and entry["speedup"] < 1, (
        f"{problem}/{case.name}: the work it left queued was not charged (speedup {entry['speedup']})")


MULTISHAPE_CASES = [(p, c, h) for p, c, h in ALL_CASES if "multishape" in h]


@needs_verify
@pytest.mark.parametrize("problem,case,head", MULTISHAPE_CASES, ids=[f"{p}/{c.stem}" for p, c, _ in MULTISHAPE_CASES])
def test_multishape_exposes_hardcoded_shapes(verify_problem, problem, case, head):
    entry = verify_problem(problem)["entries"].get(case)
    assert entry is not None, f"no result for {case}"
    got = entry_multishape(entry)
    assert got is not None, f"{problem}/{case.name}: the report has no multi-shape result\n{json.dumps(entry)[:2000]}"
    assert got == head["multishape"], f"{problem}/{case.name}: multishape expected {head['multishape']}, got {got}"


@needs_verify
def test_correct_cases_pass_multishape_when_reported(verify_problem):
    failures = []
    for problem, case, head in ALL_CASES:
        if head.get("expect") != "correct" or "multishape" in head:
            continue
        entry = verify_problem(problem)["entries"].get(case)
        if entry is not None and entry_multishape(entry) == "fail":
            failures.append(f"{problem}/{case.name}")
    assert not failures, f"shape-generic correct candidates failed the multi-shape check: {failures}"


@needs_verify
def test_no_file_escaped_and_secret_not_leaked(verify_problem):
    for problem in sorted({p for p, _, _ in ALL_CASES}):
        run = verify_problem(problem)
        assert not run["escaped"], f"candidates of {problem} wrote outside their sandbox: {run['escaped']}"
        assert SECRET not in run["text"], f"{SECRET_VAR}'s value appears in the report of {problem}"
        assert SECRET not in run["stdout"] + run["stderr"], f"{SECRET_VAR}'s value appears in the output for {problem}"


@needs_verify
def test_forked_candidates_start_with_tritons_first_use_made(verify_problem):
    """A candidate forked by the zygote finds Triton's helper module and common launchers built in
    its own cache (worker/triton_warm.py) on a GPU; in the interpreter nothing is built."""
    placed = {}
    for problem in sorted({p for p, _, _ in ALL_CASES}):
        for case, entry in verify_problem(problem)["entries"].items():
            evidence = entry.get("evidence") or {}
            if evidence.get("worker_start") == "zygote":
                placed[f"{problem}/{case.name}"] = evidence.get("triton_warm_placed")
    assert placed, "no candidate was started by the zygote"
    if DEVICE.startswith("cuda"):
        cold = {k: v for k, v in placed.items() if not (isinstance(v, int) and v >= 1)}
        assert not cold, f"forked candidates without Triton's modules placed: {cold}"
    else:
        assert set(placed.values()) == {0}, placed
