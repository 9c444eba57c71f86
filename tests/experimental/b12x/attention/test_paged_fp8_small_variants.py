"""bench_attention's "fp8-small" decode preset (issue #8's fp8 near misses: B = 1 L = 1k / 8k / 32k, B = 8 /
32 L = 1k) on the CPU: every entry parses, fits the predicate and plans as an override at the bench's
shapes; the 4-warp cluster rows hold two CTAs an SM (their premise: a 16-CTA cluster on 8 SMs of a GPC);
"@fp8" limits an entry to fp8 cases; each config compiles for sm_90a without spills, within the
registers its residency assumes. The timings are the GPU's (bench_attention --decode-configs fp8-small).
"""

import pytest

from benchmarks.experimental.b12x import bench_attention as BA
from flashinfer.experimental.b12x.attention.paged import api
from flashinfer.experimental.b12x.attention.paged._config import (
    parse_decode_entry,
    resident_ctas,
    smem_bytes,
    split_schedule,
    why_not,
)

FP8 = "float8_e4m3fn"
DIMS = ("bfloat16", FP8, BA.HQ, BA.HKV, BA.D, BA.D, BA.PAGE)
SHAPES = ((1, 1024), (1, 8192), (1, 32768), (8, 1024), (32, 1024))
ENTRIES = BA.FP8_SMALL_CONFIGS


def _decode(entry):
    body, only = BA.split_entry(entry)
    assert only == FP8
    decode, *_ = parse_decode_entry(body)
    return decode


@pytest.mark.reference
def test_preset_expands_and_limits_entries_to_fp8():
    args = BA.parse_args(["--kv", "all", "--decode-configs", "fp8-small", "hfs", "--shapes", "1x1024", "8x1024"])
    assert args.decode_configs == ["heuristic", *ENTRIES, "hfs"] and args.shapes == [(1, 1024), (8, 1024)]
    assert all(BA.split_entry(e)[1] == FP8 for e in ENTRIES)
    assert BA.split_entry("hfs") == ("hfs", None) and BA.split_entry("4x32x2fs@bf16") == ("4x32x2fs", "bfloat16")
    with pytest.raises(ValueError, match="@bf16 or @fp8"):
        BA.split_entry("4x32x2fs@fp16")
    with pytest.raises(ValueError, match="BxL"):
        BA.parse_shapes(["8-1024"])
    with pytest.raises(SystemExit):  # a bf16-only entry is still checked against bf16's predicate
        BA.parse_args(["--kv", "all", "--decode-configs", "4x16x7fs@bf16"])


@pytest.mark.reference
@pytest.mark.parametrize("entry", ENTRIES)
def test_entry_fits_and_plans_at_every_shape(entry):
    decode = _decode(entry)
    assert why_not(*DIMS, decode, "sm_90a") is None
    assert decode.lean_ticket and decode.fast_prologue and decode.fused_merge and decode.fused_schedule
    for batch, length in SHAPES:
        selection = BA.decode_selection(entry, FP8, "sm_90a", 132)
        assert selection.decode == decode
        work = max(api.default_max_work_items(batch, BA.HKV), batch + selection.schedule.target_items)
        caps = api.Caps(
            device="cpu", mode="decode", dtype="bfloat16", kv_dtype=FP8, num_q_heads=BA.HQ, num_kv_heads=BA.HKV,
            head_dim_qk=BA.D, head_dim_vo=BA.D, page_size=BA.PAGE, max_total_q=batch, max_batch=batch,
            max_page_table_width=length // BA.PAGE, max_work_items=work,
            max_partial_rows=api.default_max_partial_rows(work, BA.HQ), num_cache_pages=batch * length // BA.PAGE,
        )  # fmt: skip
        api.plan(caps, override=selection)  # validates the override


@pytest.mark.reference
def test_four_warp_clusters_fit_two_ctas_an_sm():
    """The new rows' premise: the 4-warp cluster CTAs (84 KB of shared memory, ~190 registers) fit two an
    SM, so a 16-CTA cluster needs 8 SMs of a GPC; the 8-warp rows one an SM."""
    for entry in ENTRIES:
        decode = _decode(entry)
        want = 2 if decode.warps == 4 else 1
        assert resident_ctas(FP8, BA.D, decode, "sm_90a") == want, entry
        assert 2 * smem_bytes(FP8, BA.D, BA.D, decode) <= 227 * 1024 or want == 1


@pytest.mark.compile
@pytest.mark.parametrize("entry", ENTRIES)
def test_entry_compiles_without_spills(entry, tmp_path):
    from .test_paged_compile import _check_binary, _modules, _ptxas_usage

    kd, _ = _modules()
    decode = _decode(entry)
    fn = kd.compile_decode(
        *DIMS, decode, arch="sm_90a", schedule=split_schedule(decode, FP8, BA.D, BA.HKV, 132, "sm_90a")
    )
    regs, spills = _ptxas_usage(_check_binary(fn, "sm_90a"), "sm_90a", tmp_path)
    ctas = resident_ctas(FP8, BA.D, decode, "sm_90a")
    assert spills == 0 and regs * 32 * decode.warps * ctas <= 65536, (regs, spills, ctas)
