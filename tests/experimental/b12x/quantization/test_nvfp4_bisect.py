"""The NVFP4 "bisect" encode (`nvfp4/_bisect.py`, issue #4): the codes of "pairs" by bisection over its
seven bf16 thresholds, placed into nibbles by bitwise selects.

Reference tier: the kernel's word operations mirrored in torch (`set.gt.u32.bf16x2`, `set.lt.u32.bf16x2`,
`lop3` selects, `prmt`) on the thresholds of test_nvfp4_pairs's mirror (itself checked exhaustively
there), equal to the oracle's codes for every bf16 pattern in both halves of a word under every E4M3
scale and 30+ global scales; the packing on random blocks. Compile tier: every candidate compiles for
sm_90a and sm_120a with the instructions the design counts on (3 `set.gt.u32` + 1 `set.lt.u32` a pair
word, no bf16 FMA), no spills, and (sm_90a) a k-loop at least 10% shorter than the same "pairs" tile.
The interpret tier runs the kernel's own mirror (`_interpret_run.py`, "bisect" rows); the H200 runs
the PTX (test_gpu_candidates.py -k bisect, test_gpu_nvfp4_bisect.py).
"""

import importlib.util
import re
from pathlib import Path

import pytest
import torch

from flashinfer.experimental.b12x.quantization.nvfp4 import _bisect as bis
from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv

_spec = importlib.util.spec_from_file_location("_b12x_pairs_mirror_b", Path(__file__).with_name("test_nvfp4_pairs.py"))
pm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pm)

BISECT = [nv.NvFp4Config(*c) for c in nv._UNVALIDATED_BISECT]
M32 = (1 << 32) - 1


# ---- torch mirror of the kernel's word operations (int64 holding 32-bit patterns) --------------------
def _gt(a, t):
    """set.gt.u32.bf16x2 on non-negative pairs: 0xFFFF per half where a > t, NaN (> 0x7F80) false."""
    out = torch.zeros(torch.broadcast_shapes(a.shape, t.shape), dtype=torch.int64)
    for sh in (0, 16):
        ah, th = (a >> sh) & 0x7FFF, (t >> sh) & 0x7FFF
        out |= torch.where((ah > th) & (ah <= 0x7F80) & (th <= 0x7F80), 0xFFFF << sh, 0)
    return out


def _lt_signed(w, nt):
    """set.lt.u32.bf16x2 of signed pairs (as bf16 values, NaN false), independent of the kernel's mirror."""
    out = torch.zeros(torch.broadcast_shapes(w.shape, nt.shape), dtype=torch.int64)
    for sh in (0, 16):
        x = ((w >> sh) & 0xFFFF).to(torch.int32).to(torch.int16).view(torch.bfloat16).float()
        y = ((nt >> sh) & 0xFFFF).to(torch.int32).to(torch.int16).view(torch.bfloat16).float()
        out |= torch.where(x < y, 0xFFFF << sh, 0)
    return out


def _sel(m, p, q):
    return ((p & m) | (q & ~m)) & M32


def _dup(t32):
    v = (t32.to(torch.int64) >> 16) & 0xFFFF
    return v | (v << 16)


def _place(w, th, c_b0, c_b2, c_s):
    t0, t1, t2, t3, t4, t5, t6 = th
    a = w & 0x7FFF7FFF
    m2 = _gt(a, t3)
    m1 = _gt(a, _sel(m2, t5, t1))
    m0 = _gt(a, _sel(m1, _sel(m2, t6, t2), _sel(m2, t4, t0)))
    r = _sel(c_b2 & M32, m2, _sel(c_b0 & M32, m0, m1))
    return _sel(c_s & M32, _lt_signed(w, t0 | 0x80008000), r)


LAYOUTS = {  # (constants, bit of the low half's field, bit of the high half's field)
    "A": ((bis.C_B0_A.value, bis.C_B2_A.value, bis.C_S_A.value), 0, 20),
    "B": ((bis.C_B0_B.value, bis.C_B2_B.value, bis.C_S_B.value), 8, 28),
}


def _pack8(words, th):
    """[..., 4] pair words -> [...] packed words, as `bisect_codes` builds them."""
    ra = [_place(words[..., j], th, *LAYOUTS["A"][0]) for j in (0, 2)]
    rb = [_place(words[..., j], th, *LAYOUTS["B"][0]) for j in (1, 3)]
    x, y = _sel(bis.C_X.value & M32, ra[0], rb[0]), _sel(bis.C_X.value & M32, ra[1], rb[1])
    p = (x & 0xFFFF) | ((y & 0xFFFF) << 16)
    q = ((x >> 16) & 0xFFFF) | (y & 0xFFFF0000)
    return _sel(bis.C_EVEN.value & M32, p, q)


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xFFFF


# ---- reference tier ------------------------------------------------------------------------------
BF16_BITS = torch.arange(0, 1 << 16, dtype=torch.int64)
BF16_VALUES = BF16_BITS.to(torch.int32).to(torch.int16).view(torch.bfloat16).float()


@pytest.mark.reference
@pytest.mark.parametrize("layout", ["A", "B"])
@pytest.mark.parametrize("gs", pm.GLOBAL_SCALES, ids=lambda g: f"{g:.4g}")
def test_every_bf16_pair_every_scale(gs, layout):
    consts, lo_bit, hi_bit = LAYOUTS[layout]
    partner = (BF16_BITS * 40503 + 12345) & 0xFFFF  # a permutation: every pattern in the high half too
    words = (BF16_BITS | (partner << 16))[:, None]
    sf = pm.SCALES[None, :]
    th = [_dup(t) for t, _u in pm.thresholds(sf, gs)]
    r = _place(words, th, *consts)
    got_lo, got_hi = (r >> lo_bit) & 0xF, (r >> hi_bit) & 0xF
    want_lo = pm.codes_oracle(BF16_VALUES[:, None], sf, gs).to(torch.int64)
    want_hi = pm.codes_oracle(BF16_VALUES[partner][:, None], sf, gs).to(torch.int64)
    for got, want, xs in ((got_lo, want_lo, BF16_VALUES), (got_hi, want_hi, BF16_VALUES[partner])):
        bad = (got != want).nonzero()
        assert bad.numel() == 0, f"{bad.shape[0]} codes differ, first x={xs[bad[0, 0]]} sf={pm.SCALES[bad[0, 1]]}"


@pytest.mark.reference
@pytest.mark.parametrize("gs", [1.0, 1 / 3, 2.0**-70, 3e38, 1e-45])
def test_packing_matches_the_oracle(gs):
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(4096, 16, generator=g) * 10 ** (torch.rand(4096, 1, generator=g) * 8 - 4)).bfloat16().float()
    x[::97, 3] = float("nan")
    x[::89, 5] = -float("inf")
    x[::83] = 0.0
    sf = pm.SCALES[torch.randint(0, 127, (4096, 1), generator=g)]
    th = [_dup(t) for t, _u in pm.thresholds(sf[:, 0], gs)]
    b = _bits(x)
    words = b[:, 0::2] | (b[:, 1::2] << 16)  # [rows, 8]: element 2i low, 2i + 1 high
    got = torch.stack([_pack8(words[:, :4], th), _pack8(words[:, 4:], th)], 1)
    codes = pm.codes_oracle(x, sf, gs).to(torch.int64)  # [rows, 16]
    want = torch.zeros(4096, 2, dtype=torch.int64)
    for i in range(16):
        want[:, i // 8] |= codes[:, i] << (4 * (i % 8))
    assert torch.equal(got, want)


@pytest.mark.reference
def test_bisection_needs_sorted_thresholds():
    # The rule relies on T_0 <= ... <= T_6 (the mirror's thresholds are sorted at every scale); shuffled
    # thresholds give other codes, so the check above can fail.
    th = [_dup(t) for t, _u in pm.thresholds(pm.SCALES[None, 1:], 1.0)]
    assert all(bool((a <= b).all()) for a, b in zip(th, th[1:]))
    words = (BF16_BITS | (BF16_BITS << 16))[:, None]
    swapped = [th[0], th[1], th[2], th[5], th[4], th[3], th[6]]
    assert not torch.equal(_place(words, swapped, *LAYOUTS["A"][0]), _place(words, th, *LAYOUTS["A"][0]))


@pytest.mark.contract
def test_config_rules_and_offer(monkeypatch):
    ok = lambda **kw: nv.can_implement(7168, nv.NvFp4Config(8, 256, 4, "bisect", layout="halves", **kw))
    assert all(nv.can_implement(7168, c) for c in BISECT)
    assert ok() and ok(k_iters=4, prefetch=True) and ok(k_iters=4, unroll=True, lut=True) and ok(persistent=16)
    assert not nv.can_implement(7168, nv.NvFp4Config(8, 256, 4, "bisect"))  # rows layout: pairs only
    monkeypatch.delenv(nv.UNVALIDATED_ENV, raising=False)
    if not nv.BISECT_GPU_VALIDATED:
        assert not set(BISECT) & set(nv.candidate_configs(7168))
    assert set(BISECT) <= set(nv.candidate_configs(7168, unvalidated=True))


# ---- compile tier --------------------------------------------------------------------------------
def loop_body(sass: str) -> int:
    """Instructions of the longest backward branch's range (the k_iters loop of a non-unrolled tile)."""
    ins = [(int(a, 16), t) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    best = 0
    for addr, txt in ins:
        m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", txt)
        if m and int(m.group(1), 16) < addr:
            best = max(best, sum(1 for a, _ in ins if int(m.group(1), 16) <= a <= addr))
    return best


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize("idx", range(len(nv._UNVALIDATED_BISECT)))
def test_bisect_compiles_with_its_instructions(arch, idx, cuda_binary):
    cfg = BISECT[idx]
    compiled = nv.compile_for_target("bfloat16", 7168, cfg, arch)
    ptx = compiled.asm["ptx"]
    words = cfg.block_m * cfg.block_k // (32 * cfg.num_warps) * (cfg.k_iters if cfg.unroll else 1) // 2
    assert ptx.count("set.gt.u32.bf16x2") == 3 * words, cfg
    assert ptx.count("set.lt.u32.bf16x2") == words, cfg
    assert "fma.rn.bf16x2" not in ptx and "set.gt.bf16x2.bf16x2" not in ptx, cfg
    sass = cuda_binary.run("cuobjdump", compiled.asm["cubin"], "-sass")
    assert not re.search(r"\b(STL|LDL)\b", sass), f"{cfg} spills on {arch}"
    if cfg.max_regs:
        regs = cuda_binary.resources(compiled.asm["cubin"])["REG"]
        assert regs <= cfg.max_regs, (cfg, regs)


@pytest.mark.compile
@pytest.mark.parametrize("prefetch", [True, False])
def test_bisect_loop_is_shorter_than_pairs(prefetch, cuda_binary):
    # sm_90a k-loop of the 8x256x4 k_iters 4 tile (16 values a thread): measured 262 vs 307 SASS with
    # prefetch, 247 vs 293 without (Triton 3.9, 2026-12-01); the design needs >= 10% fewer.
    cfgs = [
        nv.NvFp4Config(8, 256, 4, enc, layout="halves", k_iters=4, prefetch=prefetch) for enc in ("pairs", "bisect")
    ]
    n_pairs, n_bisect = (
        loop_body(
            cuda_binary.run("cuobjdump", nv.compile_for_target("bfloat16", 7168, c, "sm_90a").asm["cubin"], "-sass")
        )
        for c in cfgs
    )
    assert n_pairs > 200 and n_bisect <= 0.9 * n_pairs, (n_pairs, n_bisect)
