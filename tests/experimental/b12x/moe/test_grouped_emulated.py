"""moe.fused_moe grouped (large-T) expert GEMMs (_kernel_grouped.py): the kernel's per-thread logic on
the CPU PTX emulator against the same torch oracle and tolerance rule as the decode expert kernels
(test_experts_emulated.py's `make_problem` / `check`: C poisoned with NaN, rows past start[E] of A
hold NaN, so a row read or written outside its expert shows).

`run_grouped` mirrors the `@cute.kernel` body: CTA row y owns the window [y bm, y bm + bm) of the
sorted rows, loops over the experts from sorted_expert[w0] to sorted_expert[w1 - 1], and runs gemm's
tiled K loop (two shared buffers, one barrier per K-tile) on rows [max(start[e], w0), min(start[e+1],
w1)) of each; the launcher's exact arguments with `sorted_expert` in place of `active`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from flashinfer.experimental.b12x.gemm.blockscaled._kernel_tiled import TiledConfig

from .test_experts_emulated import EMU, MoeEmuOps, check, make_problem

pytestmark = pytest.mark.interpret

LANE = np.arange(32, dtype=np.int32)
SMALL_TILE = TiledConfig(64, 64, 2, 2)  # 4 warps, 32 x 32 warp tiles: small enough to emulate


def grouped_problem(fc, a_fmt, b_fmt, activation, counts, *, h=256, i=128, r_cap=None, seed=0, device="cpu"):
    """make_problem's launcher arguments with the last one `sorted_expert` (expert of each sorted
    row; rows past start[E] hold E, never read)."""
    p = make_problem(fc, a_fmt, b_fmt, activation, counts, h=h, i=i, r_cap=r_cap, seed=seed, device=device)
    r_cap = p.out.shape[0]
    owner = [e for e, c in enumerate(counts) for _ in range(c)]
    owner += [len(counts)] * (r_cap - len(owner))
    p.args = p.args[:-1] + (torch.tensor(owner, dtype=torch.int32, device=device),)
    return p


def _G():
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_grouped as G

    return G


def small(per_expert: bool = True):
    return _G().GroupedConfig(SMALL_TILE, per_expert)


def run_grouped(p, config) -> torch.Tensor:
    """Emulate compile_grouped_fc1 / compile_grouped_fc2(p's formats, config, E)(*p.args); returns C.
    Per-expert tiles: every warp runs `locate` for its CTA row (all must agree); windows: the experts
    from sorted_expert[w0] to sorted_expert[w1 - 1]."""
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_tiled as KT

    G = _G()
    num_e, n_rows, kb = p.args[2].shape
    logic = G.GroupedLogic(p.fc, p.a_fmt, p.b_fmt, p.activation, config, num_e)
    args = p.args[:9] if p.fc == 1 else p.args[:8] + (p.args[7],)
    gmem = EMU.GlobalMemory()
    a, sfa, b, sfb, c, _, wa, aa, act = (gmem.put(t) for t in args)
    k, n = kb * 2, p.out.shape[1]
    start, owner = p.args[5].cpu().numpy(), p.args[-1].tolist()
    total, bm = int(start[num_e]), config.tile.bm
    for by in range(logic.grid_m(p.out.shape[0])):  # blockIdx.y
        if config.per_expert:
            vals = np.stack(logic.locate(MoeEmuOps(gmem), LANE, np.int32(by), start))  # (found, e, j) x lanes
            assert (vals == vals[:, :1]).all(), f"CTA row {by}: the lanes disagree on the tile"
            hit, e, j = (int(v) for v in vals[:, 0])
            if not hit:
                continue
            spans = [(e, int(start[e]) + j * bm, min(int(start[e]) + (j + 1) * bm, int(start[e + 1])))]
        else:
            w0 = by * bm
            if w0 >= total:
                continue
            w1 = min(w0 + bm, total)
            spans = [
                (e, max(int(start[e]), w0), min(int(start[e + 1]), w1)) for e in range(owner[w0], owner[w1 - 1] + 1)
            ]
        for e, lo, hi in spans:
            if lo >= hi:
                continue
            rt = KT.Runtime(
                a,
                sfa,
                b + e * n_rows * kb,
                sfb + e * p.args[3].shape[1],
                c,
                wa + 4 * e,
                aa + 4 * e,
                act,
                np.int32(hi),
                np.int32(n),
                np.int32(k),
                np.float32(1.0),
            )
            for bx in range(logic.grid_n(n_rows)):  # blockIdx.x
                EMU.emulate_tile(logic, gmem, rt, np.int32(lo), np.int32(bx * config.tile.bn), MoeEmuOps)
    raw = torch.from_numpy(gmem.get(c)[: p.out.numel() * p.out.element_size()].copy())
    return raw.view(p.out.dtype).reshape(p.out.shape)


# Windows of 64 rows: expert 0's 3 rows and expert 2's first 61 share window 0; window 1 holds the
# rest of expert 2, expert 3's single row and the start of expert 4; expert 1 and 5 are empty.
COUNTS = [3, 0, 70, 1, 60, 0]


@pytest.mark.parametrize(
    "fc, a_fmt, b_fmt, activation",
    [
        (1, "bfloat16", "nvfp4", "silu"),
        (1, "nvfp4", "nvfp4", "swiglu_oai"),
        (1, "bfloat16", "mxfp4", "relu2"),
        (2, "bfloat16", "nvfp4", None),
        (2, "nvfp4", "nvfp4", None),
        (1, "mxfp8", "mxfp4", "silu"),  # w4a8_mx (session 66): A's E4M3 words regrouped into the FP4 K order
        (1, "mxfp8", "nvfp4", "relu2"),  # w4a8_nvfp4
        (2, "mxfp8", "mxfp4", None),
        (2, "mxfp8", "nvfp4", None),
    ],
)
@pytest.mark.parametrize("per_expert", [True, False], ids=["expert_tiles", "windows"])
def test_grouped_matches_the_oracle(fc, a_fmt, b_fmt, activation, per_expert):
    p = grouped_problem(fc, a_fmt, b_fmt, activation, COUNTS, r_cap=150)
    check(p, run_grouped(p, small(per_expert)))


@pytest.mark.parametrize("fc, activation", [(1, "silu"), (1, "swiglu_oai"), (2, None)])
@pytest.mark.parametrize("per_expert", [True, False], ids=["expert_tiles", "windows"])
def test_w4a8_mx_on_fp8_mma(fc, activation, per_expert):
    """w4a8_mx on e4m3 mma.sync (the issue's "FP8 MMA"; `FP8_MMA_PAIR`): A raw E4M3, the MXFP4 weights stored as
    E4M3, each k-step's partial sums times both UE8M0 factors; the same oracle and rule as the bf16-MMA path."""
    p = grouped_problem(fc, "mxfp8", "mxfp4", activation, COUNTS, r_cap=150)
    check(p, run_grouped(p, _G().GroupedConfig(TiledConfig(64, 64, 2, 2, True), per_expert)))


@pytest.mark.parametrize("fc, activation", [(1, "silu"), (1, "relu2"), (2, None)])
def test_dequantized_bf16_a_is_bit_equal_to_the_nvfp4_a(fc, activation):
    """The nvfp4 recipe's dequant bucket (api.ExpertBucket.dequant): A stored as bf16 e2m1 x e4m3
    (what the "nvfp4_deq" gather writes) through the bf16-A kernel gives exactly the NVFP4-A kernel's
    C: the shared tiles hold the same values (times 2^-16 in the NVFP4 path) in the same K order, and
    the epilogue's 2^(C_a + C_b) absorbs the power of two."""
    p = grouped_problem(fc, "nvfp4", "nvfp4", activation, COUNTS, r_cap=150)
    rows = sum(COUNTS)
    a = torch.full(p.x.shape, float("nan"), dtype=torch.bfloat16)
    a[:rows] = p.x[:rows].bfloat16()
    assert torch.equal(a[:rows].float(), p.x[:rows])  # e2m1 x e4m3 is exact in bf16
    q = dataclasses.replace(p, a_fmt="bfloat16", args=(a, torch.zeros(16, dtype=torch.uint8), *p.args[2:]))
    want = run_grouped(p, small())
    got = run_grouped(q, small())
    assert torch.equal(
        got.view(torch.int16 if fc == 1 else torch.int32), want.view(torch.int16 if fc == 1 else torch.int32)
    )
    check(q, got)


@pytest.mark.parametrize("per_expert", [True, False], ids=["expert_tiles", "windows"])
def test_no_routed_rows_writes_nothing(per_expert):
    p = grouped_problem(2, "bfloat16", "nvfp4", None, [0, 0, 0], r_cap=70)
    out = run_grouped(p, small(per_expert))
    assert torch.isnan(out).all()


def test_gate_up_rows_pair_by_eight():
    """b_row of a gated FC1 tile: rows 16p..16p+7 are gate rows j0 + 8p.., the next 8 the up rows."""
    G = _G()
    logic = G.GroupedLogic(1, "bfloat16", "nvfp4", "silu", small(), 6)

    class Rt:
        n = np.int32(100)  # I

    got = [logic.b_row(MoeEmuOps(EMU.GlobalMemory()), Rt, 64, local) for local in (0, 7, 8, 15, 16, 63)]
    rows = [int(np.asarray(r).reshape(-1)[0]) for r, _ in got]
    assert rows == [32, 39, 132, 139, 40, 163]
    assert [bool(np.asarray(ok).reshape(-1)[0]) for _, ok in got] == [True, True, True, True, True, True]
    row, ok = logic.b_row(MoeEmuOps(EMU.GlobalMemory()), Rt, 192, 8)  # j = 96 + 0 < 100; up row 196
    assert int(np.asarray(row).reshape(-1)[0]) == 196 and bool(np.asarray(ok).reshape(-1)[0])
    row, ok = logic.b_row(MoeEmuOps(EMU.GlobalMemory()), Rt, 192, 40)  # j = 96 + 16 = 112 >= I: off
    assert not bool(np.asarray(ok).reshape(-1)[0])


@pytest.mark.parametrize("num_e", [1, 6, 33, 128, 300])
def test_locate_finds_every_tile_once(num_e):
    """`locate` against a Python enumeration of every expert's ceil(rows / bm) tiles, y past the last
    tile (found 0) included; E not a multiple of 32 and lanes past E."""
    G = _G()
    logic = G.GroupedLogic(2, "bfloat16", "nvfp4", None, small(), num_e)
    gen = torch.Generator().manual_seed(num_e)
    counts = torch.randint(0, 200, (num_e,), generator=gen) * (torch.rand(num_e, generator=gen) < 0.7)
    start = np.concatenate([[0], np.cumsum(counts.numpy())]).astype(np.int32)
    want = [(e, j) for e in range(num_e) for j in range(-(-int(counts[e]) // 64))]
    for y in range(len(want) + 3):
        vals = np.stack(logic.locate(EMU.EmuOps(EMU.GlobalMemory()), LANE, np.int32(y), start))
        assert (vals == vals[:, :1]).all()
        got = tuple(int(v) for v in vals[:, 0])
        assert got == ((1, *want[y]) if y < len(want) else (0, 0, 0)), f"tile {y}"


def test_invalid_variants_are_rejected():
    G = _G()
    assert G.why_not(1, "mxfp8", "nvfp4", "silu", small()) is None  # the expert kernels' MXFP8 x FP4 pairs
    assert G.why_not(1, "nvfp4", "mxfp4", "silu", small()) is not None  # no expert kernel takes NVFP4 x MXFP4
    assert G.why_not(1, "float16", "nvfp4", "silu", small()) is not None
    fp8 = G.GroupedConfig(TiledConfig(64, 64, 2, 2, True))
    assert G.why_not(1, "mxfp8", "mxfp4", "silu", fp8) is None
    assert "MXFP4 weights (w4a8_mx) only" in G.why_not(1, "mxfp8", "nvfp4", "silu", fp8)
    assert "MXFP4 weights (w4a8_mx) only" in G.why_not(2, "bfloat16", "nvfp4", None, fp8)
    assert G.why_not(1, "bfloat16", "nvfp4", "gelu", small()) is not None
    assert G.why_not(2, "bfloat16", "nvfp4", None, G.GroupedConfig(TiledConfig(128, 128, 2, 4, group_m=16))) is not None
    assert G.why_not(2, "bfloat16", "nvfp4", None, TiledConfig(128, 128, 2, 4)) is not None  # not a GroupedConfig
    assert "num_experts" in G.why_not(2, "bfloat16", "nvfp4", None, small(), num_experts=2000)
    assert "multiple of 128" in G.why_not(2, "bfloat16", "nvfp4", None, small(), k=96)
    assert G.why_not(2, "bfloat16", "nvfp4", None, small(), k=768) is None
    with pytest.raises(ValueError, match="grouped expert kernel"):
        G.GroupedLogic(3, "bfloat16", "nvfp4", None, small(), 4)


def _caps(mode, source, max_tokens, *, e=128, k=8, h=2048, i=768, act="silu"):
    from flashinfer.experimental.b12x.moe.fused_moe import api

    from .moe_cases import weight_plan

    wp = weight_plan(source, act, (mode,), e=e, h=h, i=i)
    return api.Caps(max_tokens=max_tokens, num_topk=k, device="cpu", weight_plan=wp, quant_mode=mode)


def test_w4a8_takes_the_grouped_bucket_only_with_its_switch(monkeypatch):
    from flashinfer.experimental.b12x.moe.fused_moe import _buckets, api
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    for mode, source in (("w4a8_mx", "fp4_e8m0_k32"), ("w4a8_nvfp4", "modelopt_nvfp4")):
        caps = _caps(mode, source, 4096)
        monkeypatch.setattr(_buckets, "GROUPED_W4A8", False)  # whatever the default: off means no grouped bucket
        assert api.tiled_from(caps) is None
        monkeypatch.setattr(_buckets, "GROUPED_W4A8", True)
        assert api.tiled_from(caps) == 512
        for fp8 in (False, True):  # GROUPED_W4A8_FP8: w4a8_mx (MXFP4 weights) on the e4m3 MMA tile
            monkeypatch.setattr(_buckets, "GROUPED_W4A8_FP8", fp8)
            last = api.with_tiled_bucket(caps, X.default_buckets(4096))[-1]
            want = _G().fp8_config() if fp8 and mode == "w4a8_mx" else _G().default_config(1)
            assert last.tiled and last.fc1 == want and last.max_tokens == 4096
        monkeypatch.setattr(_buckets, "GROUPED_W4A8_FP8", False)


def test_heuristic_moves_large_t_to_one_grouped_bucket():
    """From T * k / E >= TILED_ROWS (32; E = 128, k = 8: T >= 512) the grouped kernels; below, the
    decode buckets unchanged, the one that held T = 512 cut at 511."""
    from flashinfer.experimental.b12x.moe.fused_moe import _buckets, api
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    caps = _caps("w4a16", "modelopt_nvfp4", 4096)
    assert api.tiled_from(caps) == -(-api.TILED_ROWS * 128 // 8) == 512
    got = api.with_tiled_bucket(caps, X.default_buckets(4096))
    assert [b.max_tokens for b in got] == [64, 511, 4096]
    assert [b.tiled for b in got] == [False, False, True]
    assert got[-1].fc1 == _G().default_config(1)
    assert ("tiled", 2) in api.expert_variants(True, 128, 8, 4096, got)
    assert api.expert_bucket(got, 511) == 1 and api.expert_bucket(got, 512) == 2
    nv = _caps("nvfp4", "modelopt_nvfp4", 8192, e=512, k=10, h=4096, i=1024)
    assert api.tiled_from(nv) == 1639  # ceil(32 * 512 / 10)
    small = _caps("w4a16", "modelopt_nvfp4", 64)
    assert api.tiled_from(small) is None  # T * k / E stays below TILED_ROWS
    assert api.with_tiled_bucket(small, X.default_buckets(64)) == X.default_buckets(64)
    w4a8 = api.tiled_from(_caps("w4a8_mx", "fp4_e8m0_k32", 4096))  # GROUPED_W4A8 (its own test): 512 or none
    assert w4a8 == (512 if _buckets.GROUPED_W4A8 else None)
    assert api.tiled_from(_caps("w4a16", "modelopt_nvfp4", 4096, h=2048, i=96 * 8)) == 512
    assert api.tiled_from(_caps("w4a16", "modelopt_nvfp4", 4096, i=800)) is None  # I % 128 != 0
    one = _caps("w4a16", "modelopt_nvfp4", 64, e=8, k=8)  # T >= 32: the grouped bucket
    assert [b.max_tokens for b in api.with_tiled_bucket(one, X.default_buckets(64))] == [31, 64]
    tiny = _caps("w4a16", "modelopt_nvfp4", 16, e=4, k=4)  # TILED_ROWS * 4 / 4 = 32 > 16: none
    assert api.tiled_from(tiny) is None
