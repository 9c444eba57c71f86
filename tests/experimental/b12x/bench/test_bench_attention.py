"""bench_attention's CPU-checkable parts: the --copy-rows reference (the case's KV bytes, half read and
half written) and the fp8 / bf16 feasibility summary it feeds (issue #8's FP8 >= 1.7x BF16)."""

import importlib
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[4]
if str(REPO) not in sys.path:  # benchmarks/ is not installed
    sys.path.insert(0, str(REPO))
BA = importlib.import_module("benchmarks.experimental.b12x.bench_attention")
C = importlib.import_module("benchmarks.experimental.b12x.common")


def _t(us):
    return C.Timing(us, us, us, 1, "graph_replay")


def _case(kind, b, length):
    return C.Case(f"decode_{kind}", {"B": b, "L": length}, bytes=b * length * 8 * 256 * (1 if kind == "fp8" else 2))


def _table():
    table = C.Table("t", C.Ceilings("H200", (9, 0), 4.25, 787.0, None, 2**31, (8192, 8192, 8192)))
    for b, length, bf16, fp8, copy in ((1, 1024, 6.33, 5.74, 4.87), (32, 1024, 38.03, 22.73, 9.5)):
        table.add(_case("bf16", b, length), "b12x.paged", _t(bf16))
        table.add(_case("bf16", b, length), "sdpa flash", _t(2 * bf16), peer=True)
        table.add(_case("fp8", b, length), "b12x.paged", _t(fp8))
        table.add(_case("fp8", b, length), BA.COPY_IMPL, _t(copy), peer=True)
        table.add(_case("fp8", b, length), "b12x.paged 4x32x2", _t(fp8 / 2))  # another config: not "b12x.paged"
    table.add(_case("bf16", 8, 8192), "b12x.paged", _t(70.6))  # no fp8 row: left out
    return table


def test_fp8_over_bf16_says_where_the_copy_rules_the_target_out():
    got = {(d["B"], d["L"]): d for d in BA.fp8_over_bf16(_table().rows)}
    assert sorted(got) == [(1, 1024), (32, 1024)]
    small, wide = got[(1, 1024)], got[(32, 1024)]
    assert small["ratio"] == pytest.approx(6.33 / 5.74) and small["fp8_needed_us"] == pytest.approx(6.33 / 1.7)
    assert small["fp8_copy_us"] == 4.87 and small["copy_allows"] is False  # 4.87 > 3.72: out of reach
    assert wide["fp8_us"] == 22.73 and wide["copy_allows"] is True  # 9.5 <= 22.37
    assert BA.fp8_over_bf16(_table().rows, target=1.0)[0]["fp8_needed_us"] == pytest.approx(6.33)


def test_fp8_over_bf16_without_copy_rows():
    rows = [r for r in _table().rows if r.impl != BA.COPY_IMPL]
    assert all(d["fp8_copy_us"] is None and d["copy_allows"] is None for d in BA.fp8_over_bf16(rows))


def test_print_fp8_over_bf16(capsys):
    BA.print_fp8_over_bf16(BA.fp8_over_bf16(_table().rows))
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("fp8 / bf16 KV B=1 L=1024: 1.10x (>= 1.7x needs fp8 <= 3.72 us; the same-size copy")
    assert "beyond it" in out[0] and "within reach" in out[1]


def test_no_sdpa_flag_keeps_the_flashinfer_peer():
    args = BA.parse_args(["--no-sdpa"])
    assert args.no_sdpa and not args.no_peers and not BA.parse_args([]).no_sdpa
    assert "--no-sdpa" in BA.build_parser().format_help()


def test_copy_rows_flag_and_the_copy_moves_the_kv_bytes():
    assert BA.parse_args(["--copy-rows"]).copy_rows and not BA.parse_args([]).copy_rows
    kv_bytes = 1 * 1024 * 8 * 256  # fp8, B = 1, L = 1k
    fn = C.same_size_copy(kv_bytes, 1, torch.device("cpu"), torch.Generator().manual_seed(1))
    out = fn()
    assert out.numel() * out.element_size() == kv_bytes // 2  # read half, write half


def test_capacity_flag_plans_for_more_requests_than_the_live_batch():
    assert BA.parse_args(["--capacity", "16"]).capacity == 16 and BA.parse_args([]).capacity is None
    with pytest.raises(SystemExit):
        BA.parse_args(["--capacity", "0"])
    paged = BA.paged
    drawn = BA.fipeer.make_case(3, 64, False, "cpu")  # 3 live requests in a plan for 16
    caps = BA.decode_caps("cpu", "bfloat16", 16, 64, drawn["k_cache"].shape[0])
    assert caps.max_batch == 16 and caps.max_total_q == 16 and caps.max_work_items >= 16
    plan = paged.plan(caps)
    with BA.b12x.PreparationSession("cpu") as session:
        session.prepare([plan])
    binding = paged.bind(plan, q=drawn["q"], k_cache=drawn["k_cache"], v_cache=drawn["v_cache"],
                         page_table=drawn["page_table"], cache_seqlens=drawn["lens"])  # fmt: skip
    out, _ = paged.run(binding=binding)
    assert out.shape == drawn["q"].shape


def test_live_small_flag_is_range_checked():
    assert BA.parse_args(["--live-small", "16"]).live_small == 16 and BA.parse_args([]).live_small is None
    assert BA.parse_args(["--live-small", "0"]).live_small == 0
    with pytest.raises(SystemExit):
        BA.parse_args(["--live-small", "17"])
