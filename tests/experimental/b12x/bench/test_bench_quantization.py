"""bench_quantization's CPU-checkable parts: the byte formulas, the same-size copy reference (it moves
the case's byte count: half read, half written) and the "% copy" column it feeds."""

import argparse
import importlib
import json
import sys
import types
from pathlib import Path

import pytest
import torch

from flashinfer.experimental.b12x.quantization.mxfp8._kernel_cute import CuteMxTile
from flashinfer.experimental.b12x.quantization.nvfp4._kernel_cute import CuteTile

REPO = Path(__file__).resolve().parents[4]
if str(REPO) not in sys.path:  # benchmarks/ is not installed
    sys.path.insert(0, str(REPO))
BQ = importlib.import_module("benchmarks.experimental.b12x.bench_quantization")
C = importlib.import_module("benchmarks.experimental.b12x.common")


@pytest.mark.parametrize(
    "m, k, want",
    [
        # 2*M*K read + 4 (global scale) + M*K/2 packed + ceil128(M) * ceil4(K/16) scale bytes
        (4096, 4096, 2 * 4096 * 4096 + 4 + 4096 * 2048 + 4096 * 256),
        (4096, 7168, 2 * 4096 * 7168 + 4 + 4096 * 3584 + 4096 * 448),
        (1, 4096, 2 * 4096 + 4 + 2048 + 128 * 256),
        (130, 160, 2 * 130 * 160 + 4 + 130 * 80 + 256 * 12),  # K/16 = 10 -> 12 padded scale columns
    ],
)
def test_nvfp4_bytes(m, k, want):
    assert BQ.nvfp4_bytes(m, k) == want
    case = BQ.nvfp4_case(m, k, torch.bfloat16)
    assert case.bytes == want and case.ceiling == "copy" and case.shape == {"M": m, "K": k, "dtype": "bfloat16"}


def test_mxfp8_bytes():
    m, k = 4096, 7168
    assert BQ.mxfp8_bytes(m, k) == 3 * m * k + 2 * m * k // 32
    assert BQ.mxfp8_case(m, k, torch.bfloat16).bytes == BQ.mxfp8_bytes(m, k)


@pytest.mark.parametrize("m, k", [(4096, 4096), (16384, 7168), (1, 4096)])
def test_same_size_copy_moves_the_case_bytes(m, k):
    nbytes = BQ.nvfp4_bytes(m, k)
    each = C.copy_bytes_each_way(nbytes)
    assert 2 * each in (nbytes, nbytes - 1)  # read + write == the case's bytes (odd: one byte less)
    # 4096 x 4096 moves ~43 MB (a copy that small is not the 2 GiB ceiling's copy)
    if (m, k) == (4096, 4096):
        assert 42e6 < nbytes < 44e6


def test_copy_bytes_each_way_rejects_tiny():
    with pytest.raises(ValueError, match="nbytes"):
        C.copy_bytes_each_way(1)


def test_same_size_copy_copies_each_rotated_source():
    gen = torch.Generator().manual_seed(3)
    fn = C.same_size_copy(1000, 3, torch.device("cpu"), gen)
    outs = [fn().clone() for _ in range(4)]
    # 500 bytes each way, rounded down to 16: 496 bytes = 124 int32 words
    assert all(o.numel() == 124 and o.dtype == torch.int32 for o in outs)
    assert not torch.equal(outs[0], outs[1]) and not torch.equal(outs[1], outs[2])
    assert torch.equal(outs[0], outs[3])  # three sources, cycled


def test_kernel_copy_writes_every_word_of_its_source():
    gen = torch.Generator().manual_seed(4)
    fn = C.kernel_copy_fn(64, torch.device("cpu"), gen, sources=2)
    a, b = fn().clone(), fn().clone()
    assert a.numel() == 16 and not torch.equal(a, b)
    assert torch.equal(torch.bitwise_not(a), torch.bitwise_not(fn()))  # cycled back to the first source
    with pytest.raises(ValueError, match="nbytes"):
        C.kernel_copy_fn(8, torch.device("cpu"))


def test_kernel_copy_rotates_its_destinations():
    # dests > 1: each call writes the next destination, cycled, so no output stays in L2 between calls;
    # kernel_copy_fn's default writes one destination every call, same_size_copy's as many as its sources
    gen = torch.Generator().manual_seed(6)
    fn = C.same_size_copy(256, 2, torch.device("cpu"), gen, dests=3)
    outs = [fn() for _ in range(4)]
    ptrs = [o.data_ptr() for o in outs]
    assert len(set(ptrs[:3])) == 3 and ptrs[3] == ptrs[0]
    # sources cycle by two, destinations by three: calls 1 and 3 read the second source into two destinations
    assert torch.equal(outs[3], outs[1]) and not torch.equal(outs[2], outs[1])
    one = C.kernel_copy_fn(64, torch.device("cpu"), gen, sources=2)
    assert one().data_ptr() == one().data_ptr()
    streamed = C.same_size_copy(256, 4, torch.device("cpu"), gen)
    assert len({streamed().data_ptr() for _ in range(4)}) == 4
    for bad in ({"sources": 0}, {"dests": 0}):
        with pytest.raises(ValueError, match="sources and dests must be >= 1"):
            C.kernel_copy_fn(64, torch.device("cpu"), **bad)


def test_output_sets_follow_rotate_outputs():
    made = []
    alloc = lambda: made.append(object()) or made[-1]  # noqa: E731
    first = object()
    assert BQ._output_sets(first, 4, argparse.Namespace(rotate_outputs=False), alloc) == [first] and not made
    sets = BQ._output_sets(first, 4, argparse.Namespace(rotate_outputs=True), alloc)
    assert sets[0] is first and sets[1:] == made and len(made) == 3


@pytest.mark.parametrize("rotate_outputs", [False, True])
def test_copy_reference_rotates_its_destinations(monkeypatch, rotate_outputs):
    # a fixed destination let the copy's writes stay in L2 (session 45: 102.5% of the ceiling), so the reference
    # row rotates as many destinations as sources whatever the rows do
    seen = {}

    def fake_copy(nbytes, n_sets, dev, gen, dests=None):
        seen.update(nbytes=nbytes, n_sets=n_sets, dests=n_sets if dests is None else dests)
        return lambda: None

    rows = []
    monkeypatch.setattr(BQ, "same_size_copy", fake_copy)
    monkeypatch.setattr(BQ, "_time", lambda fn, args, n: "timing")
    monkeypatch.setattr(BQ.torch.cuda, "empty_cache", lambda: None)
    table = types.SimpleNamespace(add=lambda case, impl, timing, note="": rows.append((case, impl, timing)))
    case = BQ.nvfp4_case(4096, 4096, torch.bfloat16)
    BQ.add_copy_row(table, case, argparse.Namespace(rotate_outputs=rotate_outputs), torch.device("cpu"), 5)
    assert seen == {"nbytes": case.bytes, "n_sets": 5, "dests": 5}
    assert rows == [(case, BQ.COPY_IMPL, "timing")]


def test_rotate_outputs_needs_the_graph_timer(capsys):
    with pytest.raises(SystemExit):
        BQ.main(["--rotate-outputs", "--timer", "events"])
    assert "--rotate-outputs needs --timer graph" in capsys.readouterr().err


def test_read_fn_reads_its_buffer():
    fn = C.read_fn(4096, torch.device("cpu"), torch.Generator().manual_seed(5))
    assert fn().dim() == 0 and torch.isfinite(fn())


def _t(us):
    return C.Timing(us, us, us, 1, "graph_replay")


def _table():
    ceil = C.Ceilings("H200", (9, 0), 4.25, 787.0, None, 2**31, (8192, 8192, 8192))
    table = BQ.QuantTable("t", ceil)
    case = BQ.nvfp4_case(4096, 4096, torch.bfloat16)
    other = BQ.nvfp4_case(16384, 4096, torch.bfloat16)
    table.add(case, BQ.COPY_IMPL, _t(12.0), note="reference")
    table.add(case, "b12x", _t(16.0))
    table.add(case, "torch.compile", _t(64.0), peer=True)
    table.add(other, "b12x", _t(56.0))  # no copy row for this case
    return table, case


def test_pct_of_same_size_copy_column():
    table, case = _table()
    copy_row, ours, peer, lone = table.rows
    assert table.pct_of_copy(ours) == pytest.approx(75.0)
    assert table.pct_of_copy(peer) == pytest.approx(18.75)
    assert table.pct_of_copy(copy_row) == pytest.approx(100.0)
    assert table.pct_of_copy(lone) is None
    # the copy row is a reference, not one of ours: no peer ratio on it; ours keeps its own
    assert table.ratios(copy_row) == {}
    assert table.ratios(ours) == {"torch.compile": pytest.approx(4.0)}
    d = table.row_dict(ours)
    assert d["pct_of_same_size_copy"] == pytest.approx(75.0)
    assert d["pct_of_ceiling"] == pytest.approx(100.0 * case.bytes / 16.0 / 1e6 / 4.25)  # kept as before
    head, body = table._cells()
    at = head.index("% copy")
    assert head[at - 1] == "% ceil"
    assert [row[at] for row in body] == ["100.0%", "75.0%", "18.8%", "-"]
    text = table.render()
    assert "% copy" in text and "75.0%" in text


def test_report_round_trip_keeps_the_copy_column():
    table, _ = _table()
    report = json.loads(json.dumps(table.to_dict()))
    C.check_report(report)
    assert [r["pct_of_same_size_copy"] for r in report["rows"]][:2] == [pytest.approx(100.0), pytest.approx(75.0)]
    again = BQ.QuantTable.from_dict(report)
    assert again.pct_of_copy(again.rows[1]) == pytest.approx(75.0)


def _args(*argv):
    import argparse

    a = argparse.Namespace(all_configs=False, encode=None, match=None, dispatch_tiles=False, cute=None, cute_mx=None)
    for k, v in argv:
        setattr(a, k, v)
    return a


def test_nvfp4_bench_configs_selects_rows():
    from flashinfer.experimental.b12x.quantization.nvfp4 import _dispatch as nvfp4_dispatch
    from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv

    assert BQ.nvfp4_bench_configs(7168, _args()) == [None]
    everything = list(nv.candidate_configs(7168, unvalidated=True))
    assert BQ.nvfp4_bench_configs(7168, _args(("all_configs", True))) == [None] + everything
    pairs = BQ.nvfp4_bench_configs(7168, _args(("encode", ["pairs"])))
    assert pairs[0] is None and pairs[1:] and all(c.encode == "pairs" for c in pairs[1:])
    # --match: the candidates whose repr holds one of the strings, nothing else: here exactly the
    # session-7, -27 and -31 variants (every one unrolled or persistent; no other candidate is)
    s7 = BQ.nvfp4_bench_configs(7168, _args(("match", ["unroll=True", "persistent=16"])))
    matching = {c for c in everything if "unroll=True" in repr(c) or "persistent=16" in repr(c)}
    assert s7[0] is None and len(s7[1:]) == len(set(s7[1:])) == len(matching)
    later = nv._UNVALIDATED_PAIRS_S7 + nv._UNVALIDATED_PRELOAD + nv._UNVALIDATED_ORDER
    assert set(s7[1:]) == matching == {nv.NvFp4Config(*c) for c in later}
    both = BQ.nvfp4_bench_configs(7168, _args(("encode", ["steps"]), ("match", ["unroll=True"])))
    assert both == [None]
    tiles = BQ.nvfp4_bench_configs(7168, _args(("dispatch_tiles", True)))
    # every tile of the full-capacity dispatch (small, preload, large), then the Triton large tile unless it is the
    # dispatch's own (the CuTe switch off, the default since session 46: it is)
    full = nvfp4_dispatch.default_selection(1 << 30, 7168)
    assert tiles == [None, *dict.fromkeys((full.small, full.mid, full.large, nvfp4_dispatch._triton_large(7168)))]
    assert full.small == nv.default_config(7168) and full.large == nvfp4_dispatch.large_config(7168)
    # --cute: the CuTe tiles after everything else, in the order given
    cute = [BQ._cute_shape("8x4"), BQ._cute_shape("8x2x4")]
    assert cute == [CuteTile(8, 4), CuteTile(8, 2, repeat=4)]
    assert BQ.nvfp4_bench_configs(7168, _args(("cute", cute))) == [None, *cute]


def test_match_option_parses():
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()) as out, pytest.raises(SystemExit):
        BQ.main(["--help"])
    assert "--match" in out.getvalue()
    # --encode takes the quantizer's encodes only: a removed one (session 10's "bisect") is an error,
    # not a run that times the default row alone
    assert "{div,mul,search,steps,pairs}" in out.getvalue()
    with contextlib.redirect_stderr(io.StringIO()) as err, pytest.raises(SystemExit) as exit_:
        BQ.main(["--encode", "bisect"])
    assert exit_.value.code == 2 and "invalid choice: 'bisect'" in err.getvalue()


def test_mxfp8_bench_configs_selects_rows():
    from flashinfer.experimental.b12x.quantization.mxfp8 import _kernel as mx

    assert BQ.mxfp8_bench_configs(7168, _args()) == [None]
    everything = BQ.mxfp8_bench_configs(7168, _args(("all_configs", True)))
    assert everything[0] is None and set(everything[1:]) == set(mx.candidate_configs(7168, unvalidated=True)[1:])
    flat = BQ.mxfp8_bench_configs(7168, _args(("match", ["layout='flat'"])))
    assert flat[0] is None and flat[1:] and all(c.layout == "flat" for c in flat[1:])
    assert set(flat[1:]) == {c for c in everything[1:] if c.layout == "flat"}
    # On sm_90a the plan's own row is the hw_nan default, so the arch-blind default (the same tile with
    # the NaN select: the session-32 A/B's "previous default") is a candidate row there, and no hw_nan
    # tile is one on sm_120a.
    on90 = BQ.mxfp8_bench_configs(7168, _args(("all_configs", True)), "sm_90a")
    assert mx.default_config(7168) in on90 and mx.default_config(7168, "sm_90a") not in on90
    on120 = BQ.mxfp8_bench_configs(7168, _args(("all_configs", True)), "sm_120a")
    assert mx.default_config(7168) not in on120 and not [c for c in on120[1:] if c.hw_nan]
    cute = [BQ._cute_mx_shape("8x2"), BQ._cute_mx_shape("4x4")]
    assert cute == [CuteMxTile(8, 2), CuteMxTile(4, 4)]
    assert BQ.mxfp8_bench_configs(7168, _args(("cute_mx", cute))) == [None, *cute]


@pytest.mark.parametrize(
    "parse, text",
    [("nvfp4", t) for t in ("8", "8x", "3x4", "8x4x9", "axb")] + [("mxfp8", t) for t in ("8x8", "8x2x2", "3x1")],
)
def test_cute_options_reject_bad_tiles(parse, text):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        (BQ._cute_shape if parse == "nvfp4" else BQ._cute_mx_shape)(text)


def test_bits_ok_stops_on_the_plans_own_selection_and_skips_a_candidate(monkeypatch):
    monkeypatch.setattr(BQ, "MISMATCHES", [])
    plan = types.SimpleNamespace(selection="SEL")
    assert BQ._bits_ok(True, "nvfp4", 1, 16, None, plan) and BQ.MISMATCHES == []
    assert BQ._bits_ok(False, "mxfp8", 5, 32, "CFG", plan) is False
    assert BQ.MISMATCHES == ["mxfp8 M=5 K=32 CFG"]
    with pytest.raises(SystemExit, match="nvfp4 M=1 K=16 SEL: ours and the oracle disagree; not timing"):
        BQ._bits_ok(False, "nvfp4", 1, 16, None, plan)


def test_pdl_rows_and_sets_option():
    # --pdl adds every row once more as a programmatic dependent (the plan's selection named "b12x pdl")
    assert BQ._with_pdl_rows([None, "cfg"], _args(("pdl", False))) == [(None, False), ("cfg", False)]
    plain_then_pdl = [(None, False), ("cfg", False), (None, True), ("cfg", True)]
    assert BQ._with_pdl_rows([None, "cfg"], _args(("pdl", True))) == plain_then_pdl
    assert BQ._impl(None, True) == "b12x pdl" and BQ._impl(None, False) == "b12x"
    import contextlib
    import io

    for argv in (["--sets", "4"], ["--sets", "0", "--timer", "graph"]):  # the events timer has no sets
        with contextlib.redirect_stderr(io.StringIO()) as err, pytest.raises(SystemExit) as exit_:
            BQ.main(argv)
        assert exit_.value.code == 2 and "--sets needs --timer graph and N >= 1" in err.getvalue()
