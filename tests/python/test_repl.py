"""The REPL end to end on CPU with the tiny random model: `kernelllm repl` and `python -m kernelllm`
driven through pipes (commands, the built-in example notice, the user's own code in the work dir,
sample 0 streamed, the verification table with the tiny model's non-correct verdicts and their
reasons, Ctrl+C during generation) and through a terminal (a pty: one input after another; with
libedit, line editing, history and Ctrl+C discarding the line being typed).
Uses $KERNELLLM_CLI when set (a build tree's binary), else the installed console script."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

import kernelllm

MODULE = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 3.0

N = 512

def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return []
"""

VERDICTS = {"correct", "wrong_output", "wrong_shape", "compile_error", "runtime_error", "crash", "timeout", "cheat",
            "sandbox_violation", "undiscriminating", "environment_error", "not_verified"}
ROW = re.compile(r"^(\d+)( \*)?\s+([a-z_]+)\s+(\S+)\s+(.*)$")


@pytest.fixture(scope="module")
def cli(kernelllm_script) -> str:
    return os.environ.get("KERNELLLM_CLI") or kernelllm_script


def repl_cmd(cli: str, model: Path, work: Path, *extra: str) -> list:
    return [cli, "repl", "--model", str(model), "--max-new-tokens", "24", "--seed", "3", "--work-dir", str(work),
            *extra]


def table_rows(out: str) -> list:
    """(sample, verdict, speedup, reason) for each row of the verification table."""
    lines = out.split("rule / message", 1)[1].splitlines()
    return [m.groups()[0:1] + m.groups()[2:] for m in map(ROW.match, lines) if m]


def test_cli_repl_verifies_the_users_code_with_commands(cli, tiny_model, tmp_path):
    stdin = ":k 2\n:temp 0\n:bogus 1\n:k zero\n:temp -1\n:help\n" + MODULE
    run = subprocess.run(repl_cmd(cli, tiny_model, tmp_path, "--verify-device", "cpu"), input=stdin,
                         capture_output=True, text=True, timeout=600)
    out = run.stdout
    assert run.returncode == 0, run.stderr + out
    assert "Ctrl+D" in out and ":save FILE" in out
    assert "k = 2" in out and "temperature = 0" in out
    assert "unknown command ':bogus'" in out
    assert ":k expects one whole number of samples from 1 to 4096, found 'zero'" in out
    assert ":temp expects one temperature >= 0 (0 = greedy), found '-1'" in out
    assert "No code given" not in out
    # The user's module is what was optimized, with the settings the commands gave.
    assert (tmp_path / "module-1" / "problem.py").read_text().strip() == MODULE.strip()
    assert "generating 2 samples (temperature 0, seed 3)" in out
    assert re.search(r"--- 2 samples: \d+ tokens in [\d.]+ s \([\d.]+ tokens/s over all samples", out)
    rows = table_rows(out)
    assert [r[0] for r in rows] == ["0", "1"]
    for _, verdict, speedup, reason in rows:
        assert verdict in VERDICTS and verdict != "correct"
        assert speedup == "-" and reason.strip(), f"no reason for {verdict}"
    assert "no correct candidate" in out
    assert "best:" not in out
    report = json.loads((tmp_path / "module-1" / "report.json").read_text())
    assert [c["verdict"] for c in report["candidates"]] == [r[1] for r in rows]


def test_cli_repl_empty_input_uses_the_example_and_says_so(cli, tiny_model, tmp_path):
    run = subprocess.run(repl_cmd(cli, tiny_model, tmp_path, "-k", "1", "--no-verify"), input="\n  \n",
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr + run.stdout
    assert "No code given; using the built-in example:" in run.stdout
    assert kernelllm.DEFAULT_MODEL_CODE.strip() in run.stdout
    assert "generating 1 sample " in run.stdout
    assert "verification is off" in run.stdout


def test_cli_repl_save_without_a_best_and_quit(cli, tiny_model, tmp_path):
    # `:quit` ends the session at once: the module after it is never read.
    stdin = f":save {tmp_path / 'best.py'}\n:save\n:quit\n" + MODULE
    run = subprocess.run(repl_cmd(cli, tiny_model, tmp_path / "w"), input=stdin, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "nothing to save: no verified correct candidate yet" in run.stdout
    assert ":save expects a file name" in run.stdout
    assert "generating" not in run.stdout
    assert not (tmp_path / "best.py").exists() and not (tmp_path / "w" / "module-1").exists()


def test_cli_repl_rejects_a_module_without_model(cli, tiny_model, tmp_path):
    # --gen-device is --device's other name (the name eval uses for generation).
    run = subprocess.run(repl_cmd(cli, tiny_model, tmp_path, "--gen-device", "cpu"), input="def f(x):\n    return x\n",
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "missing: `class Model`, `def get_inputs()`, `def get_init_inputs()`" in run.stdout
    assert "generating" not in run.stdout


def test_cli_repl_ctrl_c_cancels_generation(cli, tiny_model, tmp_path):
    (tmp_path / "module.py").write_text(MODULE)
    with open(tmp_path / "module.py", "rb") as stdin:
        proc = subprocess.Popen([cli, "repl", "--model", str(tiny_model), "--max-new-tokens", "3000", "-k", "1",
                                 "--temperature", "0", "--work-dir", str(tmp_path / "w")],
                                stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = b""
    deadline = time.time() + 120
    while b"as it is written:\n" not in out and time.time() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            out += os.read(proc.stdout.fileno(), 65536)
    assert b"as it is written" in out, out.decode(errors="replace")
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=120)
    out = (out + rest).decode(errors="replace")
    assert proc.returncode == 0, err.decode(errors="replace")
    assert "generation cancelled; back to the prompt" in out
    assert "rule / message" not in out


def test_cli_repl_ctrl_c_stops_verification(cli, tiny_model, tmp_path):
    (tmp_path / "module.py").write_text(MODULE)
    with open(tmp_path / "module.py", "rb") as stdin:
        proc = subprocess.Popen([cli, "repl", "--model", str(tiny_model), "--max-new-tokens", "8", "-k", "2",
                                 "--work-dir", str(tmp_path / "w")],
                                stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = b""
    deadline = time.time() + 120
    # Generation is over when its summary line is out; the verifier is starting its judge then.
    while b"tokens/s over all samples" not in out and time.time() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            out += os.read(proc.stdout.fileno(), 65536)
    assert b"tokens/s over all samples" in out, out.decode(errors="replace")
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=120)
    out = (out + rest).decode(errors="replace")
    assert proc.returncode == 0, err.decode(errors="replace")
    assert "verification cancelled; back to the prompt" in out
    assert "rule / message" not in out  # no table of verdicts from stopped workers


def test_python_m_kernelllm_runs_the_same_repl(tiny_model, tmp_path):
    stdin = ":k 2\n:nope\n" + MODULE
    run = subprocess.run([sys.executable, "-m", "kernelllm", "--model", str(tiny_model), "--device", "cpu",
                          "--max-new-tokens", "16", "--seed", "5", "--verify-device", "cpu", "--work-dir",
                          str(tmp_path)], input=stdin, capture_output=True, text=True, timeout=600)
    out = run.stdout
    assert run.returncode == 0, run.stderr + out
    assert "kernelllm REPL: cpu:" in out and "Ctrl+D" in out
    assert "k = 2" in out and "unknown command ':nope'" in out
    assert (tmp_path / "module-1" / "problem.py").read_text().strip() == MODULE.strip()
    rows = table_rows(out)
    assert len(rows) == 2 and all(v in VERDICTS and v != "correct" and reason for _, v, _, reason in rows)


class _Output:
    """What a process writes to a pipe, read as it comes; `until` waits for a marker after the
    previous one."""

    def __init__(self, fd: int):
        self.fd, self.buf, self.pos = fd, bytearray(), 0

    def until(self, marker: bytes, timeout_s: float) -> None:
        deadline = time.time() + timeout_s
        while self.buf.find(marker, self.pos) < 0:
            assert time.time() < deadline, f"no {marker!r} in: {self.buf.decode(errors='replace')[-2000:]}"
            ready, _, _ = select.select([self.fd], [], [], 1.0)
            if ready:
                chunk = os.read(self.fd, 65536)
                assert chunk, f"output ended before {marker!r}: {self.buf.decode(errors='replace')[-2000:]}"
                self.buf += chunk
        self.pos = self.buf.find(marker, self.pos) + len(marker)


def _on_terminal(args: list, steps: list, last: bytes) -> tuple:
    """Runs `args` with a terminal as stdin (no echo of what we type, so stdout holds only the
    REPL's output): waits for the prompt, then for each (text, markers) writes `text` and waits for
    each (marker, timeout) in turn; writes `last` and waits for the end. (returncode, output)."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[3] &= ~termios.ECHO
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    proc = subprocess.Popen(args, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(slave)
    try:
        out = _Output(proc.stdout.fileno())
        out.until(b">>> ", 60)
        for text, markers in steps:
            os.write(master, text)
            for marker, timeout in markers:
                out.until(marker, timeout)
        os.write(master, last)
        rest, _ = proc.communicate(timeout=120)
        return proc.returncode, (out.buf + rest).decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


def test_cli_repl_on_a_terminal_takes_one_input_after_another(cli, tiny_model, tmp_path):
    code, text = _on_terminal(repl_cmd(cli, tiny_model, tmp_path, "-k", "1", "--no-verify"), [
        # Ctrl+D at the start of a line: end of this input.
        (MODULE.encode() + b"\x04", [(b"verification is off", 120), (b">>> ", 60)]),
        # A second input after the first EOF: a command, then another module.
        (b":k 3\n" + MODULE.replace("3.0", "4.0").encode() + b"\x04", [(b"generating 3 samples", 120), (b">>> ", 120)]),
    ], b":save x.py\n:quit\n")
    assert code == 0, text
    assert (tmp_path / "module-1" / "problem.py").read_text().strip() == MODULE.strip()
    assert "* 4.0" in (tmp_path / "module-2" / "problem.py").read_text()
    assert "nothing to save: no verified correct candidate yet (the last module had none)" in text


def test_cli_repl_keeps_one_modules_judges_for_the_next(cli, tiny_model, tmp_path):
    # Two modules in one session, each verified: the second's verification takes the judge the
    # first released (harness::JudgePool) instead of starting one; the session's end ends it.
    code, text = _on_terminal(repl_cmd(cli, tiny_model, tmp_path, "-k", "1", "--verify-device", "cpu"), [
        (MODULE.encode() + b"\x04", [(b"rule / message", 300), (b">>> ", 120)]),
        (MODULE.replace("3.0", "4.0").encode() + b"\x04", [(b"rule / message", 300), (b">>> ", 120)]),
    ], b":quit\n")
    assert code == 0, text
    first = json.loads((tmp_path / "module-1" / "report.json").read_text())
    second = json.loads((tmp_path / "module-2" / "report.json").read_text())
    assert first["verify_judges_started"] >= 1 and first["verify_judges_reused"] == 0, first
    assert second["verify_judges_started"] == 0 and second["verify_judges_reused"] >= 1, second


def test_cli_repl_on_a_terminal_edits_lines_and_keeps_history(cli, tiny_model, tmp_path):
    if b"libedit" not in subprocess.run(["ldd", cli], capture_output=True).stdout:
        pytest.skip("this kernelllm was built without libedit")
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_STATE_HOME", "KERNELLLM_NO_LINE_EDIT")}
    env["HOME"] = str(tmp_path)
    proc = subprocess.Popen(repl_cmd(cli, tiny_model, tmp_path / "w", "--no-verify"), stdin=slave, stdout=slave,
                            stderr=subprocess.PIPE, env=env)
    os.close(slave)
    try:
        out = _Output(master)
        out.until(b">>> ", 60)
        # Ctrl+A goes to the start of the line: "help" becomes the command ":help".
        os.write(master, b"help\x01:\r")
        out.until(b"leave (also `exit`)", 30)
        out.until(b">>> ", 30)
        # Up-arrow recalls ":help" from the history.
        os.write(master, b"\x1b[A\r")
        out.until(b"leave (also `exit`)", 30)
        out.until(b">>> ", 30)
        # Ctrl+C at the prompt discards the line being typed; the REPL goes on.
        os.write(master, b"half a line")
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out.until(b"(input discarded", 30)
        out.until(b">>> ", 30)
        os.write(master, b":quit\r")
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert proc.returncode == 0
    assert ":help" in (tmp_path / ".kernelllm_history").read_text()
