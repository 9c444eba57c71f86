"""The decode kernel's fp8 register plumbing, emulated lane by lane with the PTX fragment layouts.

The kernel moves e4m3 K/V through 16-bit ldmatrix as if they were fp16 pairs, then rebuilds real
fp16 mma fragments (`k_expand_moves`, `v_expand_moves`, prmt selectors) and stores Q permuted
(`q_dim_slot`); the O accumulator columns come out permuted (`o_col_dim`). Here the same moves run
on emulated registers (PTX ISA: m16n8k16 A/B/C layouts, prmt.b32, cvt.rn.f16x2.e4m3x2) and the
resulting matrices must equal Q K^T and P V. No GPU and no CuTe DSL needed.
"""

import numpy as np
import pytest
import torch

from flashinfer.experimental.b12x.attention.paged._config import (
    k_expand_moves,
    o_col_dim,
    q_dim_slot,
    q_slot_dim,
    v_expand_moves,
)

pytestmark = pytest.mark.reference


def _e4m3_table():
    codes = torch.arange(256, dtype=torch.uint8)
    return codes.view(torch.float8_e4m3fn).float().numpy()


E4M3 = _e4m3_table()


def _random_e4m3(shape, seed):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 256, size=shape, dtype=np.uint8)
    return np.where((codes & 0x7F) == 0x7F, 0x00, codes).astype(np.uint8)  # no NaN codes


def _fake16(mat8):
    """[rows, cols] bytes -> [rows, cols / 2] 16-bit words (little endian, as the fp16 view)."""
    return mat8[:, 0::2].astype(np.uint32) | (mat8[:, 1::2].astype(np.uint32) << 8)


def _b_value(bmat, lane, v, n_blk, k_blk):
    """Value v (b0..b3) of lane's m16n8k16 B fragment for block (n_blk, k_blk) of bmat[k][n]."""
    g, j = lane // 4, lane % 4
    return bmat[16 * k_blk + 2 * j + v % 2 + 8 * (v // 2), 8 * n_blk + g]


def _b_coords(lane, v, n_blk, k_blk):
    g, j = lane // 4, lane % 4
    return 16 * k_blk + 2 * j + v % 2 + 8 * (v // 2), 8 * n_blk + g


def _regs(words):
    """Four 16-bit fragment values -> two 32-bit registers (value 2r in the low half)."""
    return [int(words[0]) | int(words[1]) << 16, int(words[2]) | int(words[3]) << 16]


def _prmt(a, b, selector):
    pool = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    return sum(pool[(selector >> (4 * i)) & 7] << (8 * i) for i in range(4))


def _cvt_e4m3x4(x):
    """cvt.rn.f16x2.e4m3x2 on both halves: (values of bytes 0, 1), (values of bytes 2, 3)."""
    b = [(x >> (8 * i)) & 0xFF for i in range(4)]
    return (E4M3[b[0]], E4M3[b[1]]), (E4M3[b[2]], E4M3[b[3]])


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_q_permutation_is_a_bijection(head_dim):
    assert sorted(q_slot_dim(s) for s in range(16)) == list(range(16))
    assert all(q_slot_dim(q_dim_slot(d)) == d for d in range(16))
    assert sorted(o_col_dim(n) for n in range(head_dim)) == list(range(head_dim))


@pytest.mark.parametrize("keys,head_dim", [(16, 64), (16, 128), (32, 128), (16, 256)])
def test_fp8_k_fragments_give_q_kT(keys, head_dim):
    k8 = _random_e4m3((keys, head_dim), seed=head_dim + keys)
    kf = E4M3[k8]
    bfake = _fake16(k8).T  # B operand of S = Q K^T: bmat[k = fake dim][n = key]
    breal = np.full((head_dim, keys), np.nan)
    for lane in range(32):
        for n_blk in range(keys // 8):
            raw = {}
            for kb in range(head_dim // 32):
                raw[kb] = _regs([_b_value(bfake, lane, v, n_blk, kb) for v in range(4)])
            for kb, h, dst in k_expand_moves(head_dim // 32):
                lo, hi = _cvt_e4m3x4(raw[kb][h])
                for v, value in enumerate((*lo, *hi)):
                    k, n = _b_coords(lane, v, n_blk, dst)
                    breal[k, n] = value
    # Slot k of the real fragment must multiply head dim q_slot_dim(k).
    want = np.stack([kf[:, 16 * (k // 16) + q_slot_dim(k % 16)] for k in range(head_dim)])
    np.testing.assert_array_equal(breal, want)
    # With Q stored through q_dim_slot, the mma computes exactly Q K^T.
    q = np.random.default_rng(1).standard_normal((16, head_dim))
    q_perm = np.empty_like(q)
    for d in range(head_dim):
        q_perm[:, d - d % 16 + q_dim_slot(d % 16)] = q[:, d]
    np.testing.assert_allclose(q_perm @ breal, q @ kf.T, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("keys,head_dim", [(16, 64), (16, 128), (32, 128), (16, 256)])
def test_fp8_v_fragments_give_p_v(keys, head_dim):
    v8 = _random_e4m3((keys, head_dim), seed=7 * head_dim + keys)
    vf = E4M3[v8]
    bfake = _fake16(v8)  # B operand of O = P V (fake view): bmat[k = key][n = fake dim]
    breal = np.full((keys, head_dim), np.nan)
    for lane in range(32):
        for kb in range(keys // 16):
            raw = {nb: _regs([_b_value(bfake, lane, v, nb, kb) for v in range(4)]) for nb in range(head_dim // 16)}
            for nb, selector, dst in v_expand_moves(head_dim // 16):
                lo, hi = _cvt_e4m3x4(_prmt(raw[nb][0], raw[nb][1], selector))
                for v, value in enumerate((*lo, *hi)):
                    k, n = _b_coords(lane, v, dst, kb)
                    breal[k, n] = value
    # Accumulator column n of O = P @ breal holds head dim o_col_dim(n).
    np.testing.assert_array_equal(breal, vf[:, [o_col_dim(n) for n in range(head_dim)]])
    p = np.random.default_rng(2).random((16, keys))
    out = p @ breal
    restored = np.empty_like(out)
    restored[:, [o_col_dim(n) for n in range(head_dim)]] = out
    np.testing.assert_allclose(restored, p @ vf, rtol=1e-12, atol=1e-9)


def _stage_q_elementwise(q, amax_rows):
    """`stage_q_fp16`: amax over the first amax_rows rows, scale 2^(13 - e), per-element permute."""
    amax = np.float32(np.abs(q[:amax_rows]).max()) if amax_rows else np.float32(0)
    e = ((amax.view(np.int32) >> 23) & 0xFF) - 127
    shift = min(max(13 - int(e), -126), 126)
    out = np.zeros(q.shape, np.float16)
    for r in range(q.shape[0]):
        for c in range(q.shape[1]):
            out[r, c - c % 16 + q_dim_slot(c % 16)] = np.float16(q[r, c] * np.float32(2.0**shift))
    return out, 2.0**-shift


def _stage_q_vectors(q, amax_rows, threads):
    """`stage_q_fp16_vec` thread by thread: thread t holds blocks t, t + threads, ... of 16 elements
    (block b = row b // (d / 16), columns 16 (b % (d / 16)) ..), each read once."""
    rows, d = q.shape
    per_row = d // 16
    per_thread = -(-rows * per_row // threads)
    held, amax = {}, np.float32(0)
    for t in range(threads):
        for i in range(per_thread):
            blk = t + i * threads
            if blk < rows * per_row:
                r, c0 = blk // per_row, 16 * (blk % per_row)
                held[blk] = q[r, c0 : c0 + 16].copy()
                if r < amax_rows:
                    amax = max(amax, np.float32(np.abs(held[blk]).max()))
    e = ((amax.view(np.int32) >> 23) & 0xFF) - 127
    shift = min(max(13 - int(e), -126), 126)
    out = np.full(q.shape, np.nan, np.float16)
    for blk, vals in held.items():
        r, c0 = blk // per_row, 16 * (blk % per_row)
        for j in range(16):
            out[r, c0 + q_dim_slot(j)] = np.float16(vals[j] * np.float32(2.0**shift))
    return out, 2.0**-shift, sorted(held)


@pytest.mark.parametrize("head_dim,threads,amax_rows", [(128, 128, 4), (64, 64, 1), (256, 64, 16), (128, 256, 8)])
def test_vector_q_staging_equals_the_element_loop(head_dim, threads, amax_rows):
    """fast_prologue's Q staging covers every 16-element block once and writes what the element loop
    writes (rows >= amax_rows are the zero padding; the scale comes from the first amax_rows)."""
    rng = np.random.default_rng(head_dim + threads)
    q = np.zeros((16, head_dim), np.float32)
    q[:amax_rows] = rng.standard_normal((amax_rows, head_dim)) * 2.0 ** rng.integers(-6, 7, (amax_rows, head_dim))
    q = torch.from_numpy(q).bfloat16().float().numpy()  # bf16 values, as sQraw holds
    want, unscale = _stage_q_elementwise(q, amax_rows)
    got, got_unscale, blocks = _stage_q_vectors(q, amax_rows, threads)
    assert blocks == list(range(16 * head_dim // 16))
    assert got_unscale == unscale and np.array_equal(got.view(np.uint16), want.view(np.uint16))
