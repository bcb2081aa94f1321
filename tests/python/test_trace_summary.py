"""bench/cuda_ops/trace_summary.py: what each kernel adds to a graph step, from a timeline CSV."""
import importlib.util
import json
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "cuda_ops" / "trace_summary.py"
HEADER = "start_ns,end_ns,correlation,graph,graph_node,grid_x,grid_y,grid_z,block_x,registers,name\n"


def load():
    spec = importlib.util.spec_from_file_location("trace_summary", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(start, end, corr, name, grid=1, graph=7, node=0):
    return {"start_ns": str(start), "end_ns": str(end), "correlation": str(corr), "graph": str(graph),
            "graph_node": str(node), "grid_x": str(grid), "grid_y": "1", "grid_z": "1", "name": name}


def test_shares_add_up_to_the_span_under_early_launch_and_gaps():
    ts = load()
    # b starts 2 us before a ends (PDL) and adds 3; c starts 1 us after b ends (a gap) and adds 5.
    rows = [row(0, 10_000, 1, "void ns::a<int>(int)"), row(8_000, 13_000, 1, "void ns::b(float)", grid=4),
            row(14_000, 18_000, 1, "void ns::(anonymous namespace)::c<float; 2>(float const*)")]
    shares, span, idle = ts.step_shares(rows)
    assert [s[0] for s in shares] == ["a [1x1x1]", "b [4x1x1]", "c [1x1x1]"]
    assert [s[1] for s in shares] == [10_000, 3_000, 5_000]
    assert [s[2] for s in shares] == [10_000, 5_000, 4_000]
    assert sum(s[1] for s in shares) == span == 18_000
    assert idle == 1_000


def test_a_kernel_ending_before_the_one_ahead_adds_nothing():
    ts = load()
    # b runs inside a (another stream, or a kernel that does not wait): it moves no end.
    rows = [row(0, 10_000, 1, "a"), row(1_000, 4_000, 1, "b"), row(9_000, 12_000, 1, "c")]
    shares, span, idle = ts.step_shares(rows)
    assert [s[1] for s in shares] == [10_000, 0, 2_000]
    assert sum(s[1] for s in shares) == span == 12_000
    assert idle == 0


def test_cli_groups_graph_steps_and_skips_eager_launches(tmp_path):
    lines = [HEADER]
    for step in range(5):
        t0 = step * 100_000
        lines.append(f"{t0},{t0 + 10_000},{50 + step},3,1,2,1,1,128,64,void k1<int>(int)\n")
        lines.append(f"{t0 + 9_000},{t0 + 20_000},{50 + step},3,2,8,1,1,128,64,void k2(float)\n")
    lines.append("900000,990000,999,0,0,1,1,1,32,16,void eager(int)\n")  # not in a graph
    trace = tmp_path / "trace.csv"
    trace.write_text("".join(lines))
    out = subprocess.run([sys.executable, str(SCRIPT), str(trace), "--windows", "0.5", "--width", "3",
                          "--sequence", "2", "--json", str(tmp_path / "s.json")],
                         capture_output=True, text=True, check=True).stdout
    assert "(2 kernels each): span 20.0 us median, idle 0.0 us" in out
    assert "k1 [2x1x1]" in out and "k2 [8x1x1]" in out and "eager" not in out
    summary = json.loads((tmp_path / "s.json").read_text())
    kernels = {k["kernel"]: k for k in summary["windows"][0]["kernels"]}
    assert kernels["k2 [8x1x1]"]["share_us"] == 10.0 and kernels["k2 [8x1x1]"]["busy_us"] == 11.0


def test_cli_says_when_nothing_was_graph_launched(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text(HEADER + "0,1000,1,0,0,1,1,1,32,16,void eager(int)\n")
    done = subprocess.run([sys.executable, str(SCRIPT), str(trace)], capture_output=True, text=True)
    assert done.returncode != 0
    assert "no graph-launched kernels" in done.stderr
