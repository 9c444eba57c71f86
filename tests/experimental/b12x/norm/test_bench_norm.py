"""bench_norm.py on the CPU: it imports, --help works, its byte formulas and target checks hold."""

import dataclasses
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.experimental.b12x import bench_norm
from benchmarks.experimental.b12x.common import Case, Table, Timing
from flashinfer.experimental.b12x.norm import mhc

pytestmark = pytest.mark.contract
ROOT = Path(__file__).resolve().parents[4]


def test_help_runs_without_cuda():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.experimental.b12x.bench_norm", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    for flag in ("--quick", "--json", "--timer", "--sweep", "--variants", "--hidden", "--ops", "--per-pass"):
        assert flag in out.stdout
    assert "--norm-weight" in out.stdout


def test_case_bytes():
    h, t = 7168, 1024
    assert bench_norm.case_bytes("pre", t, h) == t * (4 * h + h) * 2 + t * 80 + 24 * 4 * h * 4
    assert bench_norm.case_bytes("post", t, h) == t * (h + 8 * h) * 2 + t * 80
    assert bench_norm.case_bytes("post_pre", t, h) == t * 10 * h * 2 + t * 160 + 24 * 4 * h * 4
    with pytest.raises(ValueError, match="op must be one of"):
        bench_norm.case_bytes("nope", 1, h)


def test_pass_bytes():
    h, t, s = 7168, 1024, 32
    part = s * t * 32 * 4
    assert bench_norm.pass_bytes("pre", "pass1", t, h, s) == t * 4 * h * 2 + 96 * h * 4 + part
    assert bench_norm.pass_bytes("pre", "pass2", t, h, s) == part + t * 9 * h * 2 + t * 80
    assert bench_norm.pass_bytes("post_pre", "pass1", t, h, s) == t * 9 * h * 2 + t * 80 + 96 * h * 4 + part
    assert bench_norm.pass_bytes("post_pre", "pass2", t, h, s) == bench_norm.pass_bytes("pre", "pass2", t, h, s)
    # post's kernel then pre's pass 1 on the stored residual: that residual read once more
    split = bench_norm.pass_bytes("post_pre", "pass1", t, h, s, split=True)
    assert split == bench_norm.pass_bytes("post_pre", "pass1", t, h, s) + t * 4 * h * 2
    assert bench_norm.pass_bytes("pre", "pass2", t, h, s, reads=1) == part + t * 5 * h * 2 + t * 80  # row pass 2
    assert bench_norm.pass_bytes("pre", "split", t, h, s) == 24 * 4 * h * 4 + 48 * 4 * h * 2  # fn in, hi + lo out
    with pytest.raises(ValueError, match="pass_bytes"):
        bench_norm.pass_bytes("post", "pass1", t, h, s)


def test_per_pass_rows_carry_no_target():
    table = Table("t")
    timing = Timing(1.0, 1.0, 1.0, 1, "test")
    table.add(Case("pre.pass1", {"T": 1024, "H": 7168, "splits": 32}, bytes=10**9, ceiling="copy"), "b12x", timing)
    assert bench_norm.target_checks(table) == []


@pytest.mark.parametrize("hidden", [2048, 4096, 5120, 7168])
def test_sweep_configs_are_valid_plans(hidden):
    caps = mhc.Caps(device="cpu", max_tokens=8192, hidden_size=hidden)
    for cfg in bench_norm.sweep_configs().values():
        assert mhc.plan(caps, override=cfg).override is cfg


def test_target_checks():
    table = Table("t")
    timing = lambda us: Timing(us, us, us, 1, "test")  # noqa: E731
    big = Case("post_pre", {"T": 1024, "H": 7168}, bytes=10**9, ceiling="copy")
    tiny = Case("post_pre", {"T": 1, "H": 7168}, bytes=10**6, ceiling="copy")
    table.add(big, "b12x", timing(100.0))
    table.add(big, "torch.compile(reference)", timing(300.0), peer=True)
    table.add(tiny, "b12x", timing(9.0))
    checks = {name: ok for name, ok, _ in bench_norm.target_checks(table)}
    assert checks["post_pre T=1024 H=7168: >= 2x torch.compile"] is True
    assert checks["post_pre T=1 H=7168: under 8 us"] is False
    assert "post_pre T=1024 H=7168: >= 75% of copy" not in checks  # no ceilings measured on a CPU
    named = {name for name, _, _ in bench_norm.target_checks(table, calls_per_graph=8)}
    assert "post_pre T=1 H=7168: under 8 us (8 calls a graph)" in named


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--calls-per-graph", "0"], "--calls-per-graph must be >= 1, got 0"),
        (
            ["--calls-per-graph", "8", "--timer", "events"],
            "--calls-per-graph 8 needs --timer graph, got --timer events",
        ),
        # --variants alone implies --sweep: an unknown name is refused before any CUDA work
        (["--variants", "ctas1", "nope"], "--variants: unknown ['nope']"),
        (["--per-pass", "--norm-weight", "act"], "--per-pass times the passes without a norm weight"),
        (["--norm-weight", "bf16"], "invalid choice: 'bf16'"),
    ],
)
def test_calls_per_graph_is_checked(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        bench_norm.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_sweep_compares_the_fused_default_with_the_two_pass_path():
    """`--sweep --variants fused_default two_pass` times session 6's default (one launch from
    fused_min_tokens) and the old two-pass tiles against the default (two passes, fn split once,
    diagonal-block squares, streamed pass 2) in one run: each must differ from it."""
    from flashinfer.experimental.b12x.norm.mhc import _config

    sweep, default = bench_norm.sweep_configs(), _config.default_config("sm_90a")
    two, fused = sweep["two_pass"], sweep["fused_default"]
    assert two.fused_pre is None and two.fused_post_pre is None and two != default
    assert fused == _config.fused_config("sm_90a") != default
    assert fused.fused("pre", 8192) is not None and fused.fused("pre", 1) is None
    assert default.fused("pre", 8192) is None
    stream = sweep["two_pass_fn_pre_diag_stream"]  # the measured variant the default adopted above 64 tokens
    plain = [dataclasses.replace(t, pdl=False) for t in (default.pre_large, default.bcast, default.row_large)]
    assert [stream.pre_large, stream.bcast, stream.row_large] == plain  # pdl: LARGE_PDL_90's (session 60)
    assert sweep["fused_all"].fused("post_pre", 1) is not None and sweep["fused_all"].fused("pre", 1) is not None


def test_t1_split_variants():
    """ctas1 / pdl_ctas1 (issue #5's T = 1 candidates): pass 1 at T = 1, H = 7168 in 112 splits of 2
    steps (the default: 224 of 1) on the same tiles, so they compile nothing new; pdl_ctas1 launches
    every two-pass kernel as a programmatic dependent."""
    from flashinfer.experimental.b12x.norm.mhc import _config

    sweep, default, sms = bench_norm.sweep_configs(), _config.default_config("sm_90a"), 132
    tile = default.stream("post_pre", 1)
    chunks = 7168 // tile.block_h
    assert _config.split_for(1, tile.block_t, chunks, default.ctas_per_sm * sms) == (224, 1)
    for name in ("ctas1", "pdl_ctas1"):
        cfg = sweep[name]
        assert cfg.stream("post_pre", 1).block_h == tile.block_h and cfg.wide.block_y == default.wide.block_y
        assert _config.split_for(1, tile.block_t, chunks, cfg.ctas_per_sm * sms) == (112, 2)
    assert sweep["ctas1"] == dataclasses.replace(default, ctas_per_sm=1)
    pdl = sweep["pdl_ctas1"]
    assert pdl.post_pre_small.pdl and pdl.pre_small.pdl and pdl.wide.pdl and pdl.wide.fast and pdl.row_small.pdl


def test_calls_pass_the_norm_weight():
    """--norm-weight: pre and post_pre, ours and the peer, get the weight; post never does."""
    seen = []
    record = lambda name: lambda *a, **kw: seen.append((name, kw.get("norm_weight", "absent")))  # noqa: E731
    mhc_stub = SimpleNamespace(run_pre=record("pre"), run_post=record("post"), run_post_pre=record("post_pre"))
    ref_stub = SimpleNamespace(mhc_pre=record("ref_pre"), mhc_post=record("ref_post"), mhc_post_pre=record("ref_pp"))
    ins = {k: k for k in ("residual", "x", "post", "comb", "fn", "hc_scale", "hc_base")}
    outs = {k: k for k in ("residual", "y", "post", "comb")}
    w = object()
    for ours, peer, args in bench_norm._calls(mhc_stub, ref_stub, None, ins, outs, w).values():
        ours()
        peer(*args)
    got = dict(seen)
    assert got["pre"] is w and got["post_pre"] is w and got["ref_pre"] is w and got["ref_pp"] is w
    assert got["post"] == "absent" and bench_norm.NORM_WEIGHTS["none"] is None
