"""`DecodeConfig.heads_n8`'s register plumbing, emulated lane by lane with the PTX fragment layouts.

The n8 tile (`_decode_n8`) puts K and V^T on the A operand of m16n8k16: fp8 K through 16-bit ldmatrix
as fake fp16 pairs, rebuilt by `n8_k_expand_moves` into the k-slot order Q is staged in (`q_slot_dim`);
fp8 V^T through ldmatrix.trans, rebuilt by prmt pairs (`n8_v_expand_moves`) so that accumulator row m
holds head dim `n8_o_row_dim(m)`; P^T reaches the B operand by movmatrix.trans of S^T's two 8 x 8 blocks.
Here those moves run on emulated registers and the resulting matrices must equal K Q^T, V^T P^T and P^T.
No GPU and no CuTe DSL needed (the GPU tier is test_paged_n8_gpu.py).
"""

import numpy as np
import pytest

from flashinfer.experimental.b12x.attention.paged._config import (
    n8_k_expand_moves,
    n8_o_row_dim,
    n8_v_expand_moves,
    q_dim_slot,
    q_slot_dim,
)

from .test_paged_fragments import E4M3, _b_coords, _cvt_e4m3x4, _fake16, _prmt, _random_e4m3

pytestmark = pytest.mark.reference


def _a_coords(lane, reg, half, m_blk, k_blk):
    """(row, k) of value `half` of register `reg` (a0..a7 = reg 0..3) of lane's m16n8k16 A fragment."""
    g, j = lane // 4, lane % 4
    return 16 * m_blk + g + 8 * (reg % 2), 16 * k_blk + 2 * j + half + 8 * (reg // 2)


def _a_regs(amat, lane, m_blk, k_blk):
    """Lane's four A registers of block (m_blk, k_blk) of the 16-bit word matrix amat[m][k]."""
    regs = []
    for reg in range(4):
        lo, hi = (amat[_a_coords(lane, reg, h, m_blk, k_blk)] for h in range(2))
        regs.append(int(lo) | int(hi) << 16)
    return regs


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_o_row_permutation_is_a_bijection(head_dim):
    assert sorted(n8_o_row_dim(m) for m in range(head_dim)) == list(range(head_dim))


@pytest.mark.parametrize("keys,head_dim", [(16, 64), (32, 128), (16, 256)])
def test_fp8_k_as_a_operand_gives_k_qT(keys, head_dim):
    k8 = _random_e4m3((keys, head_dim), seed=3 * head_dim + keys)
    kf = E4M3[k8]
    afake = _fake16(k8)  # A operand of S^T = K Q^T: amat[m = key][k = fake dim]
    areal = np.full((keys, head_dim), np.nan)
    for lane in range(32):
        for m_blk in range(keys // 16):
            raw = {kb: _a_regs(afake, lane, m_blk, kb) for kb in range(head_dim // 32)}
            for kb, i, dst, reg in n8_k_expand_moves(head_dim // 32):
                lo, hi = _cvt_e4m3x4(raw[kb][i])
                for r, pair in ((reg, lo), (reg + 2, hi)):
                    for h, value in enumerate(pair):
                        areal[_a_coords(lane, r, h, m_blk, dst)] = value
    # Slot k of the real fragment multiplies head dim q_slot_dim(k): the m16 tile's Q staging.
    want = np.stack([kf[:, 16 * (k // 16) + q_slot_dim(k % 16)] for k in range(head_dim)], axis=1)
    np.testing.assert_array_equal(areal, want)
    q = np.random.default_rng(1).standard_normal((8, head_dim))
    q_perm = np.empty_like(q)
    for d in range(head_dim):
        q_perm[:, d - d % 16 + q_dim_slot(d % 16)] = q[:, d]
    np.testing.assert_allclose(areal @ q_perm.T, kf @ q.T, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("keys,head_dim", [(16, 64), (32, 128), (16, 256)])
def test_fp8_v_transposed_as_a_operand_gives_o_rows(keys, head_dim):
    v8 = _random_e4m3((keys, head_dim), seed=11 * head_dim + keys)
    vf = E4M3[v8]
    afake = _fake16(v8).T  # V^T through ldmatrix.trans: amat[m = fake dim][k = key]
    areal = np.full((head_dim, keys), np.nan)
    for lane in range(32):
        for kb in range(keys // 16):
            raw = {mt: _a_regs(afake, lane, mt, kb) for mt in range(head_dim // 32)}
            for mt, a, b, selector, dst in n8_v_expand_moves(head_dim // 32):
                lo, hi = _cvt_e4m3x4(_prmt(raw[mt][a], raw[mt][b], selector))
                for r, pair in ((a, lo), (a + 2, hi)):
                    for h, value in enumerate(pair):
                        areal[_a_coords(lane, r, h, dst, kb)] = value
    np.testing.assert_array_equal(areal, vf[:, [n8_o_row_dim(m) for m in range(head_dim)]].T)
    p_t = np.random.default_rng(2).random((keys, 8))  # P^T: keys x heads
    out_t = areal @ p_t
    restored = np.empty_like(out_t)
    restored[[n8_o_row_dim(m) for m in range(head_dim)]] = out_t
    np.testing.assert_allclose(restored, vf.T @ p_t, rtol=1e-12, atol=1e-9)


def _movmatrix_t(block, lane):
    """movmatrix.sync.aligned.m8n8.trans.b16: lane's two values of the transposed 8 x 8 block."""
    g, j = lane // 4, lane % 4
    return block[2 * j, g], block[2 * j + 1, g]


def test_s_transposed_accumulator_to_p_transposed_b_operand():
    """S^T's C fragment (lane: keys g, g + 8 x heads 2j, 2j + 1) cast to 16 bits and moved by one
    movmatrix.trans per 8-key block is P^T's B fragment (lane: keys 2j, 2j + 1, + 8 x head g)."""
    s_t = np.arange(16 * 8, dtype=np.float64).reshape(16, 8)  # keys x heads
    for lane in range(32):
        b_vals = [*_movmatrix_t(s_t[:8], lane), *_movmatrix_t(s_t[8:], lane)]  # registers b0b1, b2b3
        for v, value in enumerate(b_vals):
            k, n = _b_coords(lane, v, 0, 0)
            assert value == s_t[k, n]
