"""Contract tests of the benchmark harness (benchmarks/experimental/b12x/common.py) on synthetic numbers."""

from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[4]
if str(REPO) not in sys.path:  # plain `pytest` does not put the root on sys.path; benchmarks/ is not installed
    sys.path.insert(0, str(REPO))
common = importlib.import_module("benchmarks.experimental.b12x.common")

pytestmark = pytest.mark.contract

FAKE = common.Ceilings(
    device_name="Fake H200",
    cc=(9, 0),
    copy_tbps=4.0,
    bf16_tflops=700.0,
    fp8_tflops=1400.0,
    copy_bytes=2**31,
    mm_shape=(8192, 8192, 8192),
    fp8_note="synthetic",
)


def timing(us: float, method: str = "cuda_events") -> common.Timing:
    return common.Timing(us, us * 0.9, us * 1.1, 10, method)


def test_timing_quantiles_interpolate():
    t = common.Timing.from_samples([5.0, 1.0, 4.0, 2.0, 3.0], "cpu")
    assert (t.median_us, t.n, t.method) == (3.0, 5, "cpu")
    assert t.p10_us == pytest.approx(1.4) and t.p90_us == pytest.approx(4.6)
    assert common.Timing.from_samples([1.0, 2.0], "cpu").median_us == 1.5
    assert common.Timing.from_samples([7.0], "cpu") == common.Timing(7.0, 7.0, 7.0, 1, "cpu")


@pytest.mark.parametrize("samples, msg", [([], "at least one"), ([1.0, float("nan")], "finite"), ([-1.0], ">= 0")])
def test_timing_rejects_bad_samples(samples, msg):
    with pytest.raises(ValueError, match=msg):
        common.Timing.from_samples(samples, "cpu")


def test_time_cpu_counts_calls_and_reports_us():
    calls = []
    t = common.time_cpu(lambda: calls.append(1), warmup=2, iters=5)
    assert len(calls) == 7 and t.n == 5 and t.method == "cpu"
    assert 0 <= t.p10_us <= t.median_us <= t.p90_us < 1e6
    with pytest.raises(ValueError, match="iters"):
        common.time_cpu(lambda: None, iters=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on CPU-only machines")
@pytest.mark.parametrize(
    "call",
    [
        lambda: common.time_cuda_events(lambda: None),
        lambda: common.time_graph_replay(lambda: None),
        lambda: common.ceilings(),
        lambda: common.measure_ceilings(),
    ],
    ids=["events", "graph", "ceilings", "measure_ceilings"],
)
def test_cuda_clocks_refuse_without_cuda(call):
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        call()


def test_rotate_cycles_and_l2_sets():
    nxt = common.rotate(["a", "b", "c"])
    assert [nxt() for _ in range(7)] == ["a", "b", "c", "a", "b", "c", "a"]
    with pytest.raises(ValueError, match="empty"):
        common.rotate([])
    assert common.sets_to_exceed_l2(common.L2_BYTES) == 3
    assert common.sets_to_exceed_l2(10 * common.L2_BYTES) == 2
    assert common.sets_to_exceed_l2(2**20) == 180  # 3 x 60 MiB / 1 MiB


def test_rates_and_percent_of_ceiling():
    assert common.tbps(8e9, 4000.0) == pytest.approx(2.0)
    assert common.tflops(1.4e12, 4000.0) == pytest.approx(350.0)
    assert common.tbps(None, 1.0) is None and common.tflops(10, 0.0) is None
    mem = common.Case("gemv", {"N": 1}, bytes=int(8e9))
    comp = common.Case("gemm", {"M": 1}, flops=int(1.4e12))
    assert common.pct_of_ceiling(mem, 4000.0, FAKE) == pytest.approx(50.0)
    assert common.pct_of_ceiling(comp, 4000.0, FAKE) == pytest.approx(50.0)
    fp8 = common.Case("gemm8", flops=int(1.4e12), ceiling="fp8")
    assert common.pct_of_ceiling(fp8, 4000.0, FAKE) == pytest.approx(25.0)
    assert common.pct_of_ceiling(mem, 4000.0, None) is None
    assert common.pct_of_ceiling(common.Case("t"), 4000.0, FAKE) is None
    no_fp8 = common.Ceilings(**{**FAKE.to_dict(), "fp8_tflops": None})
    assert common.pct_of_ceiling(fp8, 4000.0, no_fp8) is None


def test_auto_ceiling_picks_the_larger_floor():
    # floors: 8e9 B / 4 TB/s = 2 ms vs 7e11 / 700 TFLOP/s = 1 ms -> memory-bound
    assert common.relevant_ceiling(common.Case("x", bytes=int(8e9), flops=int(7e11)), FAKE) == "copy"
    # 4e9 B -> 1 ms vs 1.4e12 -> 2 ms -> compute-bound
    assert common.relevant_ceiling(common.Case("x", bytes=int(4e9), flops=int(1.4e12)), FAKE) == "bf16"
    assert common.relevant_ceiling(common.Case("x", flops=1), None) == "bf16"
    assert common.relevant_ceiling(common.Case("x", bytes=1, flops=1), None) == "copy"
    assert common.relevant_ceiling(common.Case("x"), FAKE) is None


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"bytes": -1}, "bytes must be >= 0"),
        ({"flops": -2}, "flops must be >= 0"),
        ({"ceiling": "hbm"}, "ceiling"),
    ],
)
def test_case_rejects_bad_fields(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        common.Case("bad", **kwargs)


def make_table() -> tuple[common.Table, common.Case, common.Case]:
    a = common.Case("decode", {"B": 32, "L": 4096}, bytes=int(4e8), flops=int(1e9))
    b = common.Case("decode", {"B": 64, "L": 4096}, bytes=int(8e8))
    t = common.Table("synthetic", FAKE)
    t.add(a, "b12x", timing(100.0))
    t.add(a, "cudnn", timing(150.0), peer=True)
    t.add(a, "fa2", timing(50.0), peer=True)
    t.add(b, "b12x", timing(200.0), note="tail")
    t.add(b, "cudnn", timing(1000.0), peer=True)
    return t, a, b


def test_peer_ratios_are_peer_time_over_ours_on_the_same_case():
    t, _, _ = make_table()
    ours_a, cudnn_a, _, ours_b, _ = t.rows
    assert t.ratios(ours_a) == pytest.approx({"cudnn": 1.5, "fa2": 0.5})
    assert t.ratios(ours_b) == pytest.approx({"cudnn": 5.0})  # a's peers do not leak into b
    assert t.ratios(cudnn_a) == {}
    assert t.peers() == ["cudnn", "fa2"]
    d = t.row_dict(ours_a)
    assert d["tbps"] == pytest.approx(4.0) and d["tflops"] == pytest.approx(10.0)
    assert d["ceiling"] == "copy" and d["pct_of_ceiling"] == pytest.approx(100.0)
    with pytest.raises(TypeError, match="Timing"):
        t.add(common.Case("x"), "b12x", 1.0)


def test_plain_render_is_aligned_and_shows_ratios():
    t, _, _ = make_table()
    text = t.render()
    lines = text.splitlines()
    assert lines[0] == "synthetic"
    assert "vs cudnn" in lines[1] and "vs fa2" in lines[1]
    assert len({len(line) for line in lines[1:7]}) == 1  # header, rule and rows share one width
    assert "1.50x" in lines[3] and "0.50x" in lines[3] and "5.00x" in lines[6]
    assert "100.0% copy" in lines[3]
    assert "ceilings on Fake H200" in lines[-1]
    buf = io.StringIO()  # not a TTY: plain text even where rich is installed
    t.print(buf)
    assert buf.getvalue() == text + "\n"


def test_json_round_trip(tmp_path):
    t, _, _ = make_table()
    path = tmp_path / "sub" / "report.json"
    written = t.write_json(path, argv=["python", "-m", "bench", "--quick"], extra={"seed": 0})
    report = common.load_report(path)
    assert report == json.loads(json.dumps(written))
    assert report["schema"] == common.SCHEMA and report["extra"] == {"seed": 0}
    env = report["env"]
    assert env["command"] == "python -m bench --quick"
    assert env["torch"] == torch.__version__ and env["date"].endswith("+00:00")
    assert env["git_commit"] is None or len(env["git_commit"]) == 40
    assert report["ceilings"]["copy_tbps"] == 4.0 and report["ceilings"]["cc"] == [9, 0]
    assert report["rows"][0]["ratios"] == pytest.approx({"cudnn": 1.5, "fa2": 0.5})
    back = common.Table.from_dict(report)
    assert back.ceilings == FAKE and back.rows == t.rows
    assert [back.row_dict(r) for r in back.rows] == report["rows"]


def test_check_report_names_the_missing_key(tmp_path):
    t, _, _ = make_table()
    report = t.to_dict()
    del report["rows"][1]["time_us"]
    with pytest.raises(ValueError, match="row 1 lacks key 'time_us'"):
        common.check_report(report)
    with pytest.raises(ValueError, match="schema"):
        common.check_report({"schema": "other/9"})


def test_standard_parser_flags_and_quick_caps():
    p = common.standard_parser("demo")
    args = p.parse_args([])
    assert (args.json, args.iters, args.warmup, args.quick, args.device, args.timer) == (
        None,
        50,
        10,
        False,
        "cuda",
        "events",
    )
    assert common.timing_kwargs(args) == {"warmup": 10, "iters": 50}
    args = p.parse_args(
        [
            "--json",
            "o.json",
            "--iters",
            "200",
            "--warmup",
            "7",
            "--quick",
            "--device",
            "cuda:1",
            "--timer",
            "graph",
            "--no-peers",
        ]
    )
    assert (args.json, args.device, args.timer, args.no_peers) == ("o.json", "cuda:1", "graph", True)
    assert common.timing_kwargs(args) == {"warmup": 3, "iters": 10}
    with pytest.raises(ValueError, match="--iters"):
        common.timing_kwargs(p.parse_args(["--iters", "0"]))
    with pytest.raises(SystemExit):
        p.parse_args(["--timer", "wallclock"])


def test_bench_ceilings_help_runs_from_repo_root():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.experimental.b12x.bench_ceilings", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert out.returncode == 0, out.stderr
    for flag in ("--json", "--iters", "--warmup", "--quick", "--device", "--copy-gib"):
        assert flag in out.stdout


@pytest.mark.gpu  # the b12x conftest skips it where CUDA is absent
def test_tiny_real_timing_on_gpu():
    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    ev = common.time_cuda_events(lambda: torch.mul(x, 2.0, out=y), warmup=2, iters=10)
    gr = common.time_graph_replay(lambda: torch.mul(x, 2.0, out=y), iters=5, replays_per_sample=4)
    for t in (ev, gr):
        assert 0 < t.p10_us <= t.median_us <= t.p90_us < 1e5
    assert torch.equal(y, x * 2.0)
    calls = []
    reset = lambda: (calls.append(1), y.zero_())  # noqa: E731
    common.time_cuda_events(lambda: y.add_(x), warmup=2, iters=5, before=reset)
    assert len(calls) == 7 and torch.equal(y, x)  # the reset before every call, the last call's y one add
    ceil = common.measure_ceilings(copy_bytes=64 * 2**20, mm_n=1024, warmup=1, iters=3)
    assert ceil.copy_tbps > 0 and ceil.bf16_tflops > 0
    table = common.Table("gpu", ceil)
    table.add(common.Case("mul", {"n": x.numel()}, bytes=8 * x.numel()), "torch", ev)
    assert table.row_dict(table.rows[0])["pct_of_ceiling"] > 0


def test_bench_ceilings_clock_checks_on_synthetic_rows():
    bench = importlib.import_module("benchmarks.experimental.b12x.bench_ceilings")
    t = common.Table("clocks", FAKE)
    big = common.Case("copy", {"MiB": 2048}, bytes=2**32, ceiling="copy")
    small = common.Case("copy", {"MiB": 16}, bytes=2**25, ceiling="copy")
    tiny = common.Case("add_tiny", {"n": 1024}, bytes=12288, ceiling="copy")
    for case, ours, graph in ((big, 1000.0, 1020.0), (small, 20.0, 12.0), (tiny, 9.0, 3.0)):
        t.add(case, "events", timing(ours))
        t.add(case, "graph", timing(graph), peer=True)
    t.add(small, "events, hot L2", timing(12.0), peer=True)
    checks = {name: ok for name, ok, _ in bench.clock_checks(t)}
    assert checks == {
        "copy MiB=2048: graph/events within 10%": True,
        "copy MiB=16: hot L2 faster than flushed": True,
        "add_tiny n=1024: graph faster than events": True,
    }


def test_rich_print_renders_every_row():
    pytest.importorskip("rich")
    t, _, _ = make_table()
    buf = io.StringIO()
    t.print(buf, use_rich=True)
    text = buf.getvalue()
    assert "synthetic" in text and "1.50x" in text and "5.00x" in text and "ceilings on Fake H200" in text


def test_report_path_prefers_json_then_out(monkeypatch, tmp_path):
    import argparse

    monkeypatch.delenv("OUT", raising=False)
    assert common.report_path(argparse.Namespace(json=None), "x.json") is None
    assert common.report_path(argparse.Namespace(json="a.json"), "x.json") == "a.json"
    monkeypatch.setenv("OUT", str(tmp_path))
    assert common.report_path(argparse.Namespace(json=None), "x.json") == str(tmp_path / "x.json")
    assert common.report_path(argparse.Namespace(json="a.json"), "x.json") == "a.json"


def test_write_report_writes_the_reproducing_command_only_where_report_path_says(monkeypatch, tmp_path, capsys):
    import argparse

    t, _, _ = make_table()
    monkeypatch.delenv("OUT", raising=False)
    common.write_report(t, argparse.Namespace(json=None), "x.json", "benchmarks.m", ["--quick"], "cpu", {"k": 1})
    assert not list(tmp_path.iterdir()) and "wrote" not in capsys.readouterr().out
    path = tmp_path / "sub" / "r.json"
    common.write_report(t, argparse.Namespace(json=str(path)), "x.json", "benchmarks.m", ["--quick"], "cpu", {"k": 1})
    report = json.loads(path.read_text())
    assert f"wrote {path}" in capsys.readouterr().out
    assert report["env"]["command"] == "python -m benchmarks.m --quick" and report["extra"] == {"k": 1}


def test_gpu_lock_serialises_timed_regions(tmp_path, monkeypatch):
    """With B12X_BENCH_GPU_LOCK set, two timers started together never overlap; without it they do."""
    import threading
    import time as _time

    def run_pair() -> bool:
        spans = []

        @common._one_at_a_time
        def timer():
            start = _time.monotonic()
            _time.sleep(0.2)
            spans.append((start, _time.monotonic()))

        threads = [threading.Thread(target=timer) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        (a0, a1), (b0, b1) = sorted(spans)
        return b0 < a1  # overlapped

    monkeypatch.delenv(common.GPU_LOCK_ENV, raising=False)
    assert run_pair()
    monkeypatch.setenv(common.GPU_LOCK_ENV, str(tmp_path / "gpu.lock"))
    assert not run_pair()


def test_measure_takes_calls_per_graph_from_the_arguments(monkeypatch):
    """--calls-per-graph (add_calls_per_graph) reaches the graph timer through `measure`; an explicit
    calls_per_graph (a bench rotating input sets) wins; benches without the option get 1."""
    import argparse

    seen = []
    monkeypatch.setattr(common, "time_graph_replay", lambda fn, **kw: seen.append(kw["calls_per_graph"]))
    parser = common.standard_parser("t")
    common.add_calls_per_graph(parser)
    args = parser.parse_args(["--timer", "graph", "--calls-per-graph", "8"])
    common.check_calls_per_graph(parser, args)
    common.measure(lambda: None, args)
    common.measure(lambda: None, args, calls_per_graph=3)
    common.measure(lambda: None, argparse.Namespace(**{**vars(args), "calls_per_graph": 1}))
    plain = common.standard_parser("t").parse_args(["--timer", "graph"])
    common.measure(lambda: None, plain)
    assert seen == [8, 3, 1, 1]
