"""attention.paged oracle (reference.py) against independent dense math, and the split schedule."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashinfer.experimental.b12x.attention.paged._config import (
    DecodeConfig,
    ScheduleConfig,
    chunk_size,
    resident_ctas,
    schedule_reference,
    split_schedule,
)
from flashinfer.experimental.b12x.attention.paged.reference import paged_attention_reference, visible_mask

from .paged_cases import dense_attention, make_case

pytestmark = pytest.mark.reference


def _ref(case, **kw):
    return paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q,
        k_descale=case.k_descale, v_descale=case.v_descale, **kw,
    )  # fmt: skip


def _check(case, **kw):
    out, lse = _ref(case, **kw)
    want_out, want_lse = dense_attention(case, **{k: v for k, v in kw.items() if k != "k_descale"})
    assert out.dtype == torch.float32 and lse.dtype == torch.float32
    torch.testing.assert_close(out, want_out, rtol=2e-5, atol=2e-5)
    finite = torch.isfinite(want_lse)
    assert torch.equal(finite, torch.isfinite(lse))
    torch.testing.assert_close(lse[finite], want_lse[finite], rtol=1e-5, atol=1e-5)
    return out, lse


@pytest.mark.parametrize("num_q_heads,num_kv_heads", [(4, 4), (8, 2), (16, 2)])
@pytest.mark.parametrize("page_size", [16, 64])
def test_decode_matches_dense(num_q_heads, num_kv_heads, page_size):
    case = make_case([1, 17, 130, 64], num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, page_size=page_size)
    _check(case)


def test_extend_rows_are_causal_right_aligned():
    # q_len 3 against kv_len 10: query i sees keys <= i + 7.
    case = make_case([10, 5, 33], q_lens=[3, 1, 4], seed=1)
    _check(case)
    assert visible_mask(3, 10).sum(1).tolist() == [8, 9, 10]


@pytest.mark.parametrize("window_left", [0, 5, 40])
def test_window(window_left):
    case = make_case([1, 17, 130], q_lens=[1, 2, 1], seed=2)
    _check(case, window_left=window_left)
    # decode row with kv_len 130 and window 5 sees keys 124..129
    assert visible_mask(1, 130, 5)[0].nonzero().flatten().tolist() == list(range(130 - 1 - 5, 130))[-6:]


def test_sinks_join_only_the_denominator():
    case = make_case([3, 50], seed=3)
    sinks = torch.tensor([0.5, -1.0, 3.0, 0.0, 2.0, -5.0, 1.0, 10.0])
    out, lse = _check(case, sinks=sinks)
    plain_out, plain_lse = _ref(case)
    # out = plain_out * 2^plain_lse / (2^plain_lse + e^sink); lse = log2 of the full denominator
    full = torch.logaddexp2(plain_lse, sinks[None, :] / math.log(2))
    torch.testing.assert_close(lse, full, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out, plain_out * torch.exp2(plain_lse - full)[..., None], rtol=1e-5, atol=1e-6)


def test_lse_is_base_2():
    case = make_case([20], num_q_heads=2, num_kv_heads=2, seed=4)
    _, lse = _ref(case, sm_scale=0.3)
    q, k = case.q.double()[0], case.k_dense[0].double()  # [H, D], [N, H, D]
    natural = torch.logsumexp(torch.einsum("hd,nhd->hn", q, k) * 0.3, dim=1)
    torch.testing.assert_close(lse[0].double(), natural / math.log(2), rtol=1e-6, atol=1e-6)


def test_fp8_descale_and_combined_kv_views():
    case = make_case([5, 70, 16], kv_dtype=torch.float8_e4m3fn, combined=True, seed=5)
    assert case.k_cache.stride(0) == 2 * case.k_cache[0].numel()  # strided views of one tensor
    _check(case)
    # descales broadcast: a scalar tensor is the same as a full [batch, Hkv] one
    full = paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q,
        k_descale=torch.full((3, 2), 0.25), v_descale=torch.full((3, 2), 2.0),
    )  # fmt: skip
    scalar = paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q,
        k_descale=torch.tensor(0.25), v_descale=torch.tensor(2.0),
    )  # fmt: skip
    torch.testing.assert_close(full, scalar, rtol=0, atol=0)


def test_empty_request_and_no_visible_key():
    case = make_case([0, 4], seed=6)
    out, lse = _check(case)
    assert torch.all(out[0] == 0) and torch.all(lse[0] == -math.inf)
    sinks = torch.linspace(-1, 1, 8)
    out, lse = _ref(case, sinks=sinks)
    assert torch.all(out[0] == 0)
    torch.testing.assert_close(lse[0], sinks / math.log(2))


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16", "fp8"])
def test_heads_a_few_at_a_time(monkeypatch, kv_dtype):
    """The reference takes the heads in chunks of at most _SCORE_ELEMENTS scores (so a long prefill fits beside the
    GPU tier's shards, session 39): one head a chunk gives what one chunk of all heads gives, with sinks, a window,
    extend rows and an empty request, to float32 rounding of the largest output (fp8's dequantized values reach 50)."""
    from flashinfer.experimental.b12x.attention.paged import reference

    case = make_case([0, 40, 300], q_lens=[2, 7, 5], num_q_heads=8, num_kv_heads=2, kv_dtype=kv_dtype, seed=11)
    kw = dict(sinks=torch.linspace(-2, 2, 8), window_left=50)
    whole_out, whole_lse = _ref(case, **kw)
    monkeypatch.setattr(reference, "_SCORE_ELEMENTS", 1)
    out, lse = _ref(case, **kw)
    torch.testing.assert_close(out, whole_out, rtol=0, atol=1e-5 * whole_out.abs().max().item())
    torch.testing.assert_close(lse, whole_lse, rtol=2e-6, atol=1e-5)


def test_descale_shape_error():
    case = make_case([5], kv_dtype=torch.float8_e4m3fn, seed=7)
    with pytest.raises(ValueError, match=r"k_descale must broadcast to \[batch, Hkv\] = \[1, 2\], got \[3\]"):
        paged_attention_reference(
            case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q,
            k_descale=torch.ones(3),
        )  # fmt: skip


# ---- the split-KV schedule (Python mirror of the schedule kernel) ------------------------------
CONFIG = ScheduleConfig(tile_keys=64, target_items=66, min_chunk=256)


def _check_schedule(lens, window_left, cap, config):
    work, reqs, count = schedule_reference(lens, window_left, cap, config)
    assert count == len(work) <= cap
    assert len(reqs) == len(lens)
    for b, (n, (first, items)) in enumerate(zip(lens, reqs)):
        rows = work[first : first + items]
        assert items >= 1 and all(r[0] == b for r in rows)
        assert all(r[3] == int(items > 1) for r in rows)
        lo = n if n == 0 else (max(0, n - 1 - window_left) if window_left >= 0 else 0)
        starts = [r[1] for r in rows]
        ends = [r[2] for r in rows]
        # contiguous cover of [lo, n), non-empty items (one empty item for an empty request)
        assert starts[0] == lo and ends[-1] == n and starts[1:] == ends[:-1]
        assert all(e > s for s, e in zip(starts, ends)) or (n == lo and items == 1)
        assert all((e - s) % config.tile_keys == 0 for s, e in zip(starts[:-1], ends[:-1]))
    return work, reqs


@settings(max_examples=200, deadline=None)
@given(
    lens=st.lists(st.integers(0, 40000), min_size=1, max_size=300),
    window_left=st.sampled_from([-1, 0, 1, 100, 4095]),
    extra=st.integers(0, 300),
)
def test_schedule_invariants(lens, window_left, extra):
    _check_schedule(lens, window_left, len(lens) + extra, CONFIG)


def test_schedule_splits_long_requests_at_small_batch():
    work, reqs = _check_schedule([32768], -1, 1 + 66, CONFIG)
    assert reqs[0][1] == 64  # 32768 / ceil(32768 / 66 -> 512) items of 512 keys
    assert {r[2] - r[1] for r in work} == {512}
    # a large batch fills the CTAs without splitting
    work, reqs = _check_schedule([8192] * 128, -1, 128 + 66, CONFIG)
    assert all(items == 1 for _, items in reqs)
    # a capacity of exactly max_batch never splits
    assert chunk_size(10**6, 4, 4, CONFIG) == 1 << 30


def test_split_schedule_fills_one_wave_at_small_batch():
    """split_schedule on the H200 (132 SMs, 8 KV heads, bf16 D 128, 4 x 16 x 3: two resident CTAs an
    SM): a small batch splits into about one wave of CTAs, each item at least two pipeline fills long;
    a large batch is not split."""
    decode = DecodeConfig(4, 16, 3)
    assert resident_ctas("bfloat16", 128, decode, "sm_90a") == 2
    sched = split_schedule(decode, "bfloat16", 128, 8, 132, "sm_90a")
    assert sched == ScheduleConfig(tile_keys=64, target_items=33, min_chunk=256)
    slots = 2 * 132

    def items(lens):
        work, reqs = _check_schedule(lens, -1, len(lens) + 66, sched)
        return work, [n for _, n in reqs]

    work, n = items([32768])  # B * Hkv = 8 of 264 slots: 32 items of 1024 keys, 256 CTAs
    assert n == [32] and {e - s for _, s, e, _ in work} == {1024} and 8 * len(work) <= slots
    work, n = items([8192])
    assert n == [32] and {e - s for _, s, e, _ in work} == {256}  # min_chunk: two fills of 128 keys
    work, n = items([1024])
    assert n == [4] and 8 * len(work) <= slots  # short: min_chunk bounds the split, not the wave
    work, n = items([32768] * 8)  # 32 items of 8192 keys: one wave (the old 66 + B made 72, 2.2 waves)
    assert n == [4] * 8 and {e - s for _, s, e, _ in work} == {8192}
    for lens in ([8192] * 8, [32768] * 8, [1024] * 32, [5000, 17, 0, 30000], [40000] * 32, [9000] * 33):
        work, n = items(lens)  # at most one wave of CTAs, or one item per request
        assert len(work) <= max(sched.target_items, len(lens))
        # re-balanced to equal sizes, a request's items are > chunk / 2 keys (its last may be shorter)
        assert all(e - s > sched.min_chunk // 2 for b, s, e, split in work if split and e != lens[b])
    _, n = items([8192] * 128)
    assert set(n) == {1}  # B * Hkv = 1024 CTAs > 264 slots: nothing to gain from splitting
    # more KV heads: fewer items per request. fp8 tiles would fit three CTAs an SM, its ~200
    # registers a thread two (as bf16); D 64 (~150) three, D 256 (255 and 115 KB) one
    assert split_schedule(decode, "bfloat16", 128, 32, 132, "sm_90a").target_items == 9
    assert resident_ctas("float8_e4m3fn", 128, decode, "sm_90a") == 2
    assert split_schedule(decode, "float8_e4m3fn", 128, 8, 132, "sm_90a").target_items == 33
    assert resident_ctas("bfloat16", 64, decode, "sm_90a") == 3
    assert resident_ctas("bfloat16", 256, decode, "sm_90a") == 1
    # two stages: half the keys in flight, so half the shortest item
    assert split_schedule(DecodeConfig(4, 16, 2), "bfloat16", 128, 8, 132, "sm_90a").min_chunk == 128
    assert split_schedule(DecodeConfig(4, 16, 2), "bfloat16", 128, 8, 188, "sm_120a").target_items == 24


def test_gpu_tiers_output_check_passes_the_reference_and_fails_a_wrong_row():
    """check_against_reference (shared by the decode and extend gpu tiers) on CPU tensors: the
    reference itself passes; one wrong row, a NaN row or a shifted LSE fails."""
    from flashinfer.experimental.b12x.attention.paged.reference import paged_attention_reference

    from .paged_cases import check_against_reference, make_case

    case = make_case([5, 40, 17], [1, 3, 2], device="cpu")
    out, lse = paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q
    )
    check_against_reference(case, out, lse, out)
    bad = out.clone()
    bad[2] += 0.5
    with pytest.raises(AssertionError, match="max"):
        check_against_reference(case, bad, lse, out)
    nan = out.clone()
    nan[0] = float("nan")
    with pytest.raises(AssertionError, match="NaN poison"):
        check_against_reference(case, nan, lse, out)
    with pytest.raises(AssertionError):
        check_against_reference(case, out, lse + 0.01, out)
