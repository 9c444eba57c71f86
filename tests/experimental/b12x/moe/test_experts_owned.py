"""moe.fused_moe expert GEMMs, warp-owned tiles and warp groups along N (`DecodeConfig.wn`, the
`_kernel_experts` docstring's "Warp-owned tiles"), on the CPU PTX emulator against the torch oracle
(test_experts_emulated's `run_experts`, which mirrors the kernel body: each warp's first chunk and
column offset from `ExpertLogic.warp_work`, the direct register epilogue when a warp runs the whole
K). C starts poisoned (NaN), rows outside the experts of A hold NaN."""

from __future__ import annotations

import pytest
import torch

from flashinfer.experimental.b12x.gemm.blockscaled._kernel_decode import DecodeConfig

from .test_experts_emulated import check, make_problem, run_experts

pytestmark = pytest.mark.interpret


def _X():
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    return X


def _owned(warps, tiles, ntiles, prefetch=1):
    return DecodeConfig(warps, tiles, ntiles, 1, prefetch, wcache="na", acache="el", wn=warps)


@pytest.mark.parametrize(
    "fc, a_fmt, b_fmt, activation",
    [
        (1, "bfloat16", "nvfp4", "silu"),
        (1, "nvfp4", "nvfp4", "relu2"),
        (1, "mxfp8", "mxfp4", "swiglu_oai"),
        (2, "bfloat16", "nvfp4", None),
        (2, "mxfp8", "nvfp4", None),
    ],
)
def test_owned_tiles_every_kind(fc, a_fmt, b_fmt, activation):
    # H = 288, I = 96 (FC1) / H = 96, I = 288 (FC2): K = 288 is 3 chunks, the last partial, so
    # every warp runs a K tail; N = 96 is not a multiple of the CTA's columns (2 warps x 16 or 32);
    # an expert of 10 rows takes two 8-token groups, one has no rows
    h, i = (288, 96) if fc == 1 else (96, 288)
    p = make_problem(fc, a_fmt, b_fmt, activation, [1, 0, 10, 3], h=h, i=i, seed=31 + fc)
    cfg = _owned(2, 2 if fc == 1 else 1, 1)
    assert _X().ExpertLogic(fc, a_fmt, b_fmt, activation, cfg).direct
    check(p, run_experts(p, cfg, "identity"))


@pytest.mark.parametrize("prefetch", [1, 2, 4])
@pytest.mark.parametrize("fc, activation", [(1, "swiglu_oai"), (2, None)])
def test_owned_tiles_prefetch_depths_agree_bit_for_bit(fc, activation, prefetch):
    # the pipeline only moves when the weight loads issue: the same sums at every depth (K = 640:
    # 5 chunks, fewer than 1 + prefetch 4 ahead for a warp, so the prologue loads past the last chunk)
    h, i = (640, 64) if fc == 1 else (64, 640)
    p = make_problem(fc, "bfloat16", "nvfp4", activation, [3, 0, 9], h=h, i=i, seed=41)
    want = run_experts(p, _owned(4, 2, 1, 1), "list")
    check(p, want)
    got = run_experts(p, _owned(4, 2, 1, prefetch), "list")
    assert torch.equal(got.view(torch.int16), want.view(torch.int16)), prefetch


@pytest.mark.parametrize("fc, activation", [(1, "silu"), (1, "relu2"), (2, None)])
def test_owned_tiles_16_token_groups_and_spans(fc, activation):
    # 16-token groups (ntiles 2: 8 accumulator positions per tile and lane), an expert of 17 rows
    # (two groups, the second one row), and two column tiles per CTA (span 2, the second past N)
    h, i = (256, 96) if fc == 1 else (96, 256)
    p = make_problem(fc, "nvfp4", "nvfp4", activation, [17, 2, 0], h=h, i=i, seed=43)
    check(p, run_experts(p, _owned(2, 2, 2, 2), "list", 2))


@pytest.mark.parametrize("fc, activation", [(1, "silu"), (1, "relu2"), (2, None)])
def test_warp_groups_with_split_k(fc, activation):
    # wn = 2 groups of 4 warps (kstep 4): each group splits K and reduces through shared memory at
    # its own columns (finish sums the 4 warps of the column's group only)
    h, i = (640, 96) if fc == 1 else (96, 640)
    p = make_problem(fc, "bfloat16", "mxfp4", activation, [5, 0, 12], h=h, i=i, seed=45)
    cfg = DecodeConfig(8, 2, 1, 1, 1, wcache="na", acache="el", wn=2)
    logic = _X().ExpertLogic(fc, "bfloat16", "mxfp4", activation, cfg)
    assert not logic.direct and logic.kstep == 4 and logic.cols == 2 * logic.cols_w
    check(p, run_experts(p, cfg, "identity"))


def test_owned_list_grid_skips_unlisted_experts():
    # the list's sentinel entries (E) and an expert with rows left off the list: the latter's rows
    # stay NaN (the check names them), the listed ones are right
    p = make_problem(1, "bfloat16", "nvfp4", "silu", [0, 3, 0, 9, 2], seed=47, active=[3, 1, 4, 5])
    check(p, run_experts(p, _owned(4, 2, 1), "list"))
    q = make_problem(1, "bfloat16", "nvfp4", "silu", [0, 3, 0, 9, 2], seed=47, active=[3, 1, 5, 5])
    with pytest.raises(AssertionError, match="was not written"):
        check(q, run_experts(q, _owned(4, 2, 1), "list"))


def test_warp_work_and_columns():
    X = _X()
    logic = X.ExpertLogic(1, "bfloat16", "nvfp4", "silu", _owned(8, 2, 1))
    # 8 warps, each one gate tile + its up tile: 16 output columns a warp, 128 a CTA
    assert (logic.cols, logic.cols_w, logic.kstep, logic.direct) == (128, 16, 1, True)
    assert [logic.warp_work(w) for w in (0, 3, 7)] == [(0, 0), (0, 48), (0, 112)]
    assert logic.grid_n(768) == 6
    fc2 = X.ExpertLogic(2, "bfloat16", "nvfp4", None, _owned(8, 1, 1))
    assert (fc2.cols, fc2.cols_w) == (128, 16) and fc2.grid_n(2048) == 16
    split = X.ExpertLogic(2, "bfloat16", "nvfp4", None, DecodeConfig(8, 2, 1, 1, 0, wn=4))
    assert [split.warp_work(w) for w in (0, 1, 2, 7)] == [(0, 0), (1, 0), (0, 32), (1, 96)]
    plain = X.ExpertLogic(2, "bfloat16", "nvfp4", None, DecodeConfig(8, 2, 1, 1))
    assert plain.warp_work(5) == (5, 0) and not plain.direct and plain.whint is None and plain.ahint is None
    assert (logic.whint, logic.ahint) == ("na", "el")


def test_owned_labels_are_in_the_sweep():
    X = _X()
    names = {1: ("own8", "own8p2", "own4p2", "own2p4"), 2: ("own4p2/own8p2", "own2p4/own8p2")}
    for ntiles in (1, 2):
        labels = {label: (fc1, fc2) for label, fc1, fc2, _ in X.sweep_pairs(ntiles)}
        for name in names[ntiles]:
            fc1, fc2 = labels[name]
            assert fc1.wn == fc1.warps and fc2.wn == fc2.warps and fc1.ntiles == fc2.ntiles == ntiles
            assert (fc1.wcache, fc1.acache, fc2.wcache, fc2.acache) == ("na", "el", "na", "el")
        assert labels["w8n2p1"][0].wn == 2 and labels["w4p1h"][0].wcache == "na"


def test_gemm_only_options_stay_rejected():
    import dataclasses

    X = _X()
    for field, value in (("clamp", True), ("kgroup", 2), ("ashare", True)):
        cfg = dataclasses.replace(DecodeConfig(4, 2, 1, 1, 0, wn=2), **{field: value})
        with pytest.raises(ValueError, match=f"config.{field} = .* is not implemented by the expert kernels"):
            X.ExpertLogic(2, "bfloat16", "nvfp4", None, cfg)
    with pytest.raises(ValueError, match="wn must be one of"):
        X.ExpertLogic(2, "bfloat16", "nvfp4", None, DecodeConfig(4, 2, 1, 1, 0, wn=8))
    with pytest.raises(ValueError, match="wcache must be one of"):
        X.ExpertLogic(2, "bfloat16", "nvfp4", None, DecodeConfig(4, 2, 1, 1, 0, wcache="xx"))


@pytest.mark.parametrize("grid", ["list", "identity"])
@pytest.mark.parametrize("fc, activation", [(1, "silu"), (2, None)])
def test_early_weight_stages_are_the_same_sums(fc, activation, grid):
    # ExpertConfig.early only moves when the first stages issue (before start[e]; the next group's
    # at the end of a group): bit-identical to the plain pipeline. An expert with 17 rows (three
    # 8-token groups), one without rows (identity: its CTAs load nothing), the list's sentinels.
    X = _X()
    h, i = (640, 96) if fc == 1 else (96, 640)
    counts = [17, 0, 3, 1]
    p = make_problem(fc, "bfloat16", "nvfp4", activation, counts, h=h, i=i, seed=51, active=[0, 2, 3, 4, 4])
    plain = _owned(4, 2, 1, 2)
    want = run_experts(p, plain, grid)
    check(p, want)
    early = X.ExpertConfig(**{f: getattr(plain, f) for f in ("warps", "tiles", "ntiles", "unroll", "prefetch",
                                                             "wcache", "acache", "wn")}, early=True)  # fmt: skip
    assert X.ExpertLogic(fc, "bfloat16", "nvfp4", activation, early, grid).early
    got = run_experts(p, early, grid)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_early_needs_prefetch_and_one_tile():
    X = _X()
    with pytest.raises(ValueError, match="early weight stages need prefetch > 0 and span 1, got prefetch 0"):
        X.ExpertLogic(2, "bfloat16", "nvfp4", None, X.ExpertConfig(4, 2, 1, 1, 0, early=True))
    with pytest.raises(ValueError, match="got prefetch 1, span 2"):
        X.ExpertLogic(2, "bfloat16", "nvfp4", None, X.ExpertConfig(4, 2, 1, 1, 1, early=True), "list", 2)
    assert X.ExpertConfig(4, 2, 1, 1, 1) != DecodeConfig(4, 2, 1, 1, 1)  # the class is part of the key
