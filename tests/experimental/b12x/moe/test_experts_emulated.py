"""moe.fused_moe expert GEMMs (_kernel_experts.py): the kernels' own per-thread logic on the CPU PTX
emulator (tests/experimental/b12x/gemm/emulator.py), against a torch computation from
`reference.expert_matrix` on random weights packed by `prepare_weights`.

`run_experts` mirrors the `@cute.kernel` body (grid (N tiles, G) of either grid variant, the group
loop, the warps' K loop, the barriers) and calls the same `ExpertLogic` methods with `EmuOps` on the
launchers' exact arguments, the CTA row -> (expert, rows) step (`expert_rows`) included. Out-of-range or misaligned accesses fail inside the emulator; C starts poisoned (NaN) and
rows >= start[E] of A hold NaN, so a row read or written outside its expert shows. The helpers
(`make_problem`, `oracle`, `check`) are shared with test_experts_gpu.py.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from flashinfer.experimental.b12x._lib import quant as Q
from flashinfer.experimental.b12x.gemm.blockscaled._kernel_decode import DecodeConfig
from flashinfer.experimental.b12x.moe.fused_moe import reference as R
from flashinfer.experimental.b12x.moe.fused_moe import weights as W

from .moe_cases import EXPERT_PAIRS as PAIRS
from .moe_cases import weight_plan

pytestmark = pytest.mark.interpret

_spec = importlib.util.spec_from_file_location(
    "_b12x_gemm_emulator", Path(__file__).parents[1] / "gemm" / "emulator.py"
)
EMU = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(EMU)
LANE = np.arange(32, dtype=np.int32)
SOURCE = {"nvfp4": "modelopt_nvfp4", "mxfp4": "fp4_e8m0_k32"}
ACT_PARAMS = (7.0, 1.702, 1.0)


# ---- launch arguments and the torch oracle --------------------------------------------------------
@dataclass
class Problem:
    fc: int
    a_fmt: str
    b_fmt: str
    activation: str | None
    args: tuple  # the launcher's tensors, in its order
    x: torch.Tensor  # fp32 [R_cap, K]: A as the kernel reads it (no global scale)
    w: torch.Tensor  # fp32 [E, N, K]: expert_matrix (alpha included)
    start: list
    inter: int  # I

    @property
    def out(self) -> torch.Tensor:
        return self.args[4]


def _quantized_a(x: torch.Tensor, a_fmt: str, start: list):
    """(A, SFA, x as the kernel reads it, a_alpha) for fp32 rows x [R, K] sorted by expert."""
    e = len(start) - 1
    dev = x.device
    if a_fmt == "bfloat16":
        a = x.bfloat16()
        alpha = torch.rand(e, device=dev) + 0.5  # not 1, so a missing a_alpha shows
        return a, torch.zeros(16, dtype=torch.uint8, device=dev), a.float(), alpha
    if a_fmt == "mxfp8":
        v, s = Q.quantize_mxfp8(x)
        alpha = torch.rand(e, device=dev) + 0.5
        return v.view(torch.uint8), Q.swizzle_scales(s, Q.UE8M0_ONE_BYTE), Q.dequantize_mxfp8(v, s), alpha
    # nvfp4: each expert's rows with their own global scale (step 2 uses a1_gscale[expert])
    qs, sfs, gss = [], [], []
    bounds = list(zip(start[:-1], start[1:])) + [(start[-1], x.shape[0])]
    for lo, hi in bounds:
        gs = Q.nvfp4_global_scale(x[lo:hi])
        q, sf = Q.quantize_nvfp4(x[lo:hi], gs)
        qs.append(q), sfs.append(sf), gss.append(gs)
    q, sf = torch.cat(qs), torch.cat(sfs)
    x_raw = Q.dequantize_nvfp4(q, sf, 1.0)
    alpha = 1.0 / torch.stack(gss[:e]).float()
    return q, Q.swizzle_scales(sf, 0).view(torch.uint8), x_raw, alpha


def _experts(fc_activation, b_fmt, e, h, i, seed, device):
    """prepare_weights on random fp32 weights quantized on `device` with the `_lib.quant` oracles."""
    wplan = weight_plan(SOURCE[b_fmt], fc_activation, e=e, h=h, i=i, layout="w31")
    g = torch.Generator(device=device).manual_seed(seed)
    w1 = torch.randn(e, wplan.fc1_rows, h, generator=g, device=device) * 0.2
    w2 = torch.randn(e, h, i, generator=g, device=device) * 0.2
    if b_fmt == "mxfp4":
        (v1, s1), (v2, s2) = Q.quantize_mxfp4(w1), Q.quantize_mxfp4(w2)
        ckpt = dict(w1_fp4=v1, w1_blockscale=s1, w2_fp4=v2, w2_blockscale=s2)
    else:
        gs1 = torch.stack([Q.nvfp4_global_scale(w) for w in w1])
        gs2 = torch.stack([Q.nvfp4_global_scale(w) for w in w2])
        q1 = [Q.quantize_nvfp4(w1[x], gs1[x]) for x in range(e)]
        q2 = [Q.quantize_nvfp4(w2[x], gs2[x]) for x in range(e)]
        ckpt = dict(
            w1_fp4=torch.stack([q[0] for q in q1]),
            w1_blockscale=torch.stack([q[1] for q in q1]),
            w1_global_scale=gs1,
            a1_gscale=torch.full((e,), 60.0, device=device),
            w2_fp4=torch.stack([q[0] for q in q2]),
            w2_blockscale=torch.stack([q[1] for q in q2]),
            w2_global_scale=gs2,
            a2_gscale=torch.full((e,), 25.0, device=device),
        )
    return wplan, W.prepare_weights(plan=wplan, **ckpt)


def make_problem(fc, a_fmt, b_fmt, activation, counts, *, h=256, i=128, r_cap=None, seed=0, device="cpu", active=None):
    """Random expert weights (prepare_weights) and sorted rows: counts[e] rows for expert e.
    active: the grid's expert list (last launcher argument); None = every expert, 0..E-1."""
    num_e = len(counts)
    wplan, experts = _experts(activation if fc == 1 else "silu", b_fmt, num_e, h, i, seed, device)
    start = [0]
    for c in counts:
        start.append(start[-1] + c)
    rows = start[-1]
    r_cap = r_cap or rows + 5
    k = h if fc == 1 else i
    g = torch.Generator(device=device).manual_seed(seed + 1)
    x = torch.randn(r_cap, k, generator=g, device=device) * (1.5 if fc == 1 else 0.5)
    a, sfa, x_read, a_alpha = _quantized_a(x, a_fmt, start)
    if a.dtype == torch.bfloat16:
        a[rows:] = float("nan")  # never read
    else:
        a[rows:] = 0xFF
    if fc == 1:
        vals, scales, w_alpha, n = experts.w1_values, experts.w1_scales, experts.w1_alpha, wplan.fc1_rows
    else:
        vals, scales, w_alpha, n = experts.w2_values, experts.w2_scales, experts.w2_alpha, h
    w = torch.stack([R.expert_matrix(vals[e], scales[e], w_alpha[e], b_fmt, n, k) for e in range(num_e)])
    out_cols = i if fc == 1 else h
    out = torch.full((r_cap, out_cols), float("nan"), dtype=torch.bfloat16 if fc == 1 else torch.float32, device=device)
    sfb = scales.view(torch.uint8).reshape(num_e, -1)
    st = torch.tensor(start, dtype=torch.int32, device=device)
    args = [a, sfa, vals, sfb, out, st, w_alpha, a_alpha.float()]
    if fc == 1:
        args.append(torch.tensor(ACT_PARAMS, dtype=torch.float32, device=device))
    active = list(range(num_e)) if active is None else active
    args.append(torch.tensor(active, dtype=torch.int32, device=device))
    return Problem(fc, a_fmt, b_fmt, activation, tuple(args), x_read, w, start, i)


def oracle(p: Problem) -> torch.Tensor:
    """fp64 [start[E], N_out]: act(x @ W_e^T * a_alpha[e]) (FC1) or x @ W_e^T * a_alpha[e] (FC2)."""
    a_alpha = p.args[7].double()
    parts = []
    for e in range(len(p.start) - 1):
        lo, hi = p.start[e], p.start[e + 1]
        h = (p.x[lo:hi].double() @ p.w[e].double().t()) * a_alpha[e]
        if p.fc == 1:
            h = R.activation(h, p.activation, p.inter, *ACT_PARAMS)
        parts.append(h)
    return torch.cat(parts)


def summation_bound(p: Problem) -> torch.Tensor:
    """Per element: the fp32 summation-order bound 2 K 2^-24 (|x| @ |W_e|^T) |a_alpha[e]| (AGENTS.md)."""
    a_alpha = p.args[7].double()
    k = p.x.shape[1]
    parts = []
    for e in range(len(p.start) - 1):
        lo, hi = p.start[e], p.start[e + 1]
        parts.append((p.x[lo:hi].double().abs() @ p.w[e].double().abs().t()) * a_alpha[e] * (2 * k * 2.0**-24))
    return torch.cat(parts)


def check(p: Problem, out: torch.Tensor) -> None:
    """Rows < start[E]: the tolerance rule; rows >= start[E]: still the NaN poison (never written)."""
    rows = p.start[-1]
    assert torch.isnan(out[rows:].float()).all(), "a row past start[E] was written"
    ours = out[:rows].double().cpu()
    assert not torch.isnan(ours).any(), "a row of an expert was not written (NaN poison left)"
    ref = oracle(p).cpu()
    err = (ours - ref).abs()
    if p.fc == 2:  # fp32 out: only the summation order may differ
        over = err - summation_bound(p).cpu() - ref.abs() * 2.0**-22
        assert over.max().item() <= 0, f"FC2 error {err.max().item():.3e} above the fp32 summation bound"
        return
    # FC1 stores bf16: at most 2x the error of torch's same-precision peer (the bf16 rounding of the
    # fp32 result), plus a floor of 2^-20 of the largest magnitude.
    peer = ref.float().bfloat16().double()
    peer_err = (peer - ref).abs().max().item()
    floor = ref.abs().max().item() * 2.0**-20
    assert err.max().item() <= 2 * peer_err + floor, f"FC1 error {err.max().item():.3e} > 2 x {peer_err:.3e}"


# ---- the emulated kernel --------------------------------------------------------------------------
class MoeEmuOps(EMU.EmuOps):
    def ex2(self, x):
        """2^x rounded to fp32, inf past its range (the device's ex2.approx does the same)."""
        with np.errstate(over="ignore"):
            return np.exp2(self.f32(x).astype(np.float64)).astype(np.float32)


def run_experts(p: Problem, config: DecodeConfig, grid: str = "list", span: int = 1) -> torch.Tensor:
    """Emulate compile_fc1 / compile_fc2(p's formats, config, grid, span)(*p.args); returns C."""
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    logic = X.ExpertLogic(p.fc, p.a_fmt, p.b_fmt, p.activation, config, grid, span)
    args = p.args[:9] if p.fc == 1 else p.args[:8] + (p.args[7],)  # FC2 passes a_alpha as the unused act params
    gmem = EMU.GlobalMemory()
    a, sfa, b, sfb, c, st, wa, aa, act = (gmem.put(t) for t in args)
    num_e, n_rows, kb = p.args[2].shape
    k, n = kb * 2, p.out.shape[1]
    start = p.args[5].tolist()
    active = p.args[-1].tolist()
    for slot in range(logic.grid_experts(num_e, len(active))):  # blockIdx.y
        # identity: e = y; list: e = active[y] (an entry >= E: no rows), as the kernel computes it
        e, lo, hi = logic.expert_rows(_UNIFORM, slot, num_e, active, start)
        for bx in range(logic.grid_n(n)):  # blockIdx.x
            smem = np.zeros(logic.red_floats * 4, dtype=np.uint8)
            scale = logic.expert_scale(MoeEmuOps(gmem, smem), wa + 4 * e, aa + 4 * e)  # once per CTA
            groups = (hi - lo + logic.ntok - 1) // logic.ntok
            chunks = logic.k_chunks(k)
            early = {}  # ExpertConfig.early: each warp's next group's weight stages, issued ahead
            for w in range(config.warps if logic.early else 0):
                first, wcol = logic.warp_work(w)
                rt0 = X.ExpertRuntime(a, sfa, b + e * n_rows * kb, sfb + e * p.args[3].shape[1], c, wa + 4 * e,
                                      aa + 4 * e, act, np.int32(0), np.int32(n), np.int32(k), np.float32(1.0),
                                      np.int32(lo))  # fmt: skip
                live = logic.early_chunks(_UNIFORM, slot, num_e, active, lo, hi, chunks)
                nw0 = np.int32(logic.tile_n0(bx, 0) + wcol)
                early[w] = logic.prefetch_prologue(
                    MoeEmuOps(gmem, smem), rt0, LANE, nw0, np.int32(first), np.int32(live)
                )
            for grp in range(groups):
                row0 = lo + grp * logic.ntok
                rt = X.ExpertRuntime(
                    a,
                    sfa,
                    b + e * n_rows * kb,
                    sfb + e * p.args[3].shape[1],
                    c,
                    wa + 4 * e,
                    aa + 4 * e,
                    act,
                    np.int32(min(hi - row0, logic.ntok)),
                    np.int32(n),
                    np.int32(k),
                    np.float32(1.0),
                    np.int32(row0),
                )
                for j in range(span):  # the CTA's column tiles
                    n0 = np.int32(logic.tile_n0(bx, j))
                    for w in range(config.warps):  # the K loop and the partial sums
                        ops = MoeEmuOps(gmem, smem)
                        first, wcol = logic.warp_work(w)  # wn > 1: warp groups along N
                        nw = np.int32(n0 + wcol)
                        acc = logic.zero_acc(ops)
                        if logic.early:  # (prefetch > 0) this group's stages were issued ahead
                            stages = early[w]
                            for ch in range(first, chunks, logic.kstep):
                                stages, acc = logic.pipelined_chunk(
                                    ops, rt, LANE, nw, np.int32(ch), np.int32(chunks), stages, acc
                                )
                            more = np.int32(chunks * min(groups - 1 - grp, 1))  # the next group's first stages
                            early[w] = logic.prefetch_prologue(ops, rt, LANE, nw, np.int32(first), more)
                        else:  # gemm decode's K loop (DecodeLogic.k_loop), as the kernel runs it
                            acc = EMU.k_loop(logic, ops, rt, nw, first, logic.kstep, np.int32(chunks), acc)
                        if logic.direct:  # warp-owned tiles: the accumulators are the outputs
                            logic.store_direct(ops, rt, LANE, nw, acc, scale)
                        else:
                            logic.reduce_stage(ops, 0, w, LANE, acc)
                    for w in range(0 if logic.direct else config.warps):  # after the barrier
                        logic.finish(MoeEmuOps(gmem, smem), rt, 0, w * 32 + LANE, n0, scale)
    raw = torch.from_numpy(gmem.get(c)[: p.out.numel() * p.out.element_size()].copy())
    return raw.view(p.out.dtype).reshape(p.out.shape)


class _UniformOps:
    """The ops `ExpertLogic.expert_rows` uses, on the CTA-uniform Python ints the emulator keeps."""

    imin = staticmethod(min)
    i32 = staticmethod(int)


_UNIFORM = _UniformOps()


SMALL = DecodeConfig(warps=2, tiles=2, ntiles=2, unroll=1)
X_DEFAULT = DecodeConfig(warps=8, tiles=2, ntiles=1, unroll=2)  # _kernel_experts.default_config(8)


@pytest.mark.parametrize("activation", ["silu", "relu2", "swiglu_oai"])
@pytest.mark.parametrize("a_fmt, b_fmt", PAIRS)
def test_fc1_every_pair_and_activation(a_fmt, b_fmt, activation):
    # E = 3: one expert empty, one past a 16-token group (two groups), one small
    p = make_problem(1, a_fmt, b_fmt, activation, [3, 0, 18], seed=len(a_fmt) + len(activation))
    check(p, run_experts(p, SMALL))


@pytest.mark.parametrize("a_fmt, b_fmt", PAIRS)
def test_fc2_every_pair(a_fmt, b_fmt):
    p = make_problem(2, a_fmt, b_fmt, None, [5, 17, 0], seed=len(a_fmt) + 3)
    check(p, run_experts(p, SMALL, "identity"))  # the full grid's variant (FC1's tests run the list's)


@pytest.mark.parametrize("fc, activation", [(1, "silu"), (1, "relu2"), (2, None)])
def test_k_tail_and_one_token_tile(fc, activation):
    # H = 288, I = 96: K is not a multiple of the 128-value chunk (spans past K are predicated off);
    # ntiles = 1 groups rows by 8; 4 warps leave some warps without chunks.
    p = make_problem(fc, "bfloat16", "nvfp4", activation, [9, 1, 0], h=288, i=96, seed=5)
    check(p, run_experts(p, DecodeConfig(warps=4, tiles=2, ntiles=1, unroll=1), "identity"))


def test_default_config_and_wide_tiles():
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    cfg = X.default_config(16)
    assert cfg.ntiles == 2 and X.default_config(8).ntiles == 1
    p = make_problem(1, "nvfp4", "nvfp4", "swiglu_oai", [2, 4, 1], seed=9)
    check(p, run_experts(p, cfg))
    p = make_problem(2, "mxfp8", "mxfp4", None, [2, 0, 11], seed=8)  # 11 rows: two 8-row groups
    check(p, run_experts(p, X.default_config(8)))
    p = make_problem(1, "bfloat16", "mxfp4", "silu", [2, 0, 6], seed=10)
    check(p, run_experts(p, DecodeConfig(warps=1, tiles=4, ntiles=1, unroll=1)))


@pytest.mark.parametrize("fc, activation", [(1, "relu2"), (2, None)])
def test_compact_grid_runs_only_the_listed_experts(fc, activation):
    # the routing's list (compact_grid): experts with rows in any order, then the sentinel E; the
    # grid has fewer rows of CTAs than experts
    p = make_problem(fc, "nvfp4", "nvfp4", activation, [0, 3, 0, 9, 2], seed=12, active=[3, 1, 4, 5])
    check(p, run_experts(p, SMALL))
    # an expert with rows left off the list keeps its rows unwritten (the check's NaN poison sees it)
    q = make_problem(fc, "nvfp4", "nvfp4", activation, [0, 3, 0, 9, 2], seed=12, active=[3, 1, 5, 5])
    with pytest.raises(AssertionError, match="was not written"):
        check(q, run_experts(q, SMALL))


@pytest.mark.parametrize("fc, activation", [(1, "swiglu_oai"), (2, None)])
def test_identity_grid_runs_every_expert_without_reading_the_list(fc, activation):
    # grid "identity": E rows of CTAs, expert = blockIdx.y. The list passed is one entry, E (the
    # list variant would launch one row of CTAs that has nothing to do): every expert's rows are
    # still written, so the grid is E rows and the entry is never read.
    counts = [0, 3, 0, 9, 2]
    p = make_problem(fc, "nvfp4", "nvfp4", activation, counts, seed=13, active=[len(counts)])
    check(p, run_experts(p, SMALL, "identity"))
    with pytest.raises(AssertionError, match="was not written"):
        check(p, run_experts(p, SMALL, "list"))
    q = make_problem(fc, "mxfp8", "mxfp4", activation, [4, 0, 17], seed=14, active=[-7777])
    check(q, run_experts(q, X_DEFAULT, "identity"))


def test_both_grids_agree_bit_for_bit():
    # the same CTAs, reached two ways: every expert by index, or the list of experts with rows
    counts = [2, 0, 5, 0, 1, 16]
    hit = [e for e, c in enumerate(counts) if c]
    p = make_problem(1, "bfloat16", "mxfp4", "silu", counts, seed=15, active=hit + [len(counts)] * 2)
    out = run_experts(p, SMALL, "identity")
    check(p, out)
    assert torch.equal(out.view(torch.int16), run_experts(p, SMALL, "list").view(torch.int16))


@pytest.mark.parametrize("grid", ["identity", "list"])
def test_all_experts_empty_writes_nothing(grid):
    p = make_problem(2, "bfloat16", "nvfp4", None, [0, 0, 0], r_cap=4)
    out = run_experts(p, SMALL, grid)
    assert torch.isnan(out).all()


def test_swiglu_clamps_reach_the_epilogue():
    # large activations push gate and up past the limit: the clamp must happen in the kernel
    p = make_problem(1, "bfloat16", "nvfp4", "swiglu_oai", [4, 2, 3], seed=11)
    x = p.args[0].float() * 40
    a = x.bfloat16()
    p = Problem(p.fc, p.a_fmt, p.b_fmt, p.activation, (a,) + p.args[1:], a.float(), p.w, p.start, p.inter)
    ref = oracle(p)
    assert (ref.abs() > 7.0).any() and not torch.isnan(ref).any()
    check(p, run_experts(p, SMALL))


def test_invalid_variants_are_rejected():
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    with pytest.raises(ValueError, match="A format nvfp4 x weight format mxfp4 is not one of"):
        X.ExpertLogic(1, "nvfp4", "mxfp4", "silu", SMALL)
    with pytest.raises(ValueError, match="a gated FC1 needs tiles >= 2"):
        X.ExpertLogic(1, "bfloat16", "nvfp4", "silu", DecodeConfig(2, 1, 1, 1))
    with pytest.raises(ValueError, match="activation must be one of"):
        X.ExpertLogic(1, "bfloat16", "nvfp4", "gelu", SMALL)
    with pytest.raises(ValueError, match=r"grid must be one of \('identity', 'list'\), got 'compact'"):
        X.ExpertLogic(2, "bfloat16", "nvfp4", None, SMALL, "compact")
    with pytest.raises(ValueError, match="hidden_size must be a positive multiple of 32, got 80"):
        X.check_dims(80, 64)
    X.ExpertLogic(1, "bfloat16", "nvfp4", "relu2", DecodeConfig(2, 1, 1, 1))  # relu2 is not gated


# ---- the sweep's tilings: weight prefetch, few warps, wide tiles ----------------------------------
def _sweep_configs(fc: int) -> list:
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    found = []
    for ntiles in (1, 2):
        for _, fc1, fc2, _ in X.sweep_pairs(ntiles):
            cfg = fc1 if fc == 1 else fc2
            if cfg not in found:
                found.append(cfg)
    return found


def _cfg_id(cfg) -> str:
    return f"w{cfg.warps}t{cfg.tiles}n{cfg.ntiles}u{cfg.unroll}p{cfg.prefetch}"


@pytest.mark.parametrize("config", _sweep_configs(1), ids=_cfg_id)
def test_fc1_sweep_tilings(config):
    # H = 416: 4 chunks, the last one partial; an expert past one group of 8 * ntiles rows and one
    # with a single row: the prefetch pipeline's loads past the last chunk and past N stay off
    p = make_problem(1, "bfloat16", "nvfp4", "silu", [1, 0, 8 * config.ntiles + 3], h=416, i=64, seed=21)
    check(p, run_experts(p, config, "identity"))


@pytest.mark.parametrize("config", _sweep_configs(2), ids=_cfg_id)
def test_fc2_sweep_tilings(config):
    # I = 416 (FC2's K): fewer chunks than some configs' warps; H = 96 is not a multiple of 64-row tiles
    p = make_problem(2, "nvfp4", "nvfp4", None, [8 * config.ntiles + 1, 2, 0], h=96, i=416, seed=22)
    check(p, run_experts(p, config, "list"))


def test_prefetch_is_the_same_sums_as_the_plain_loop():
    # the pipeline only moves when weight loads issue: bit-identical output to prefetch 0
    p = make_problem(1, "mxfp8", "mxfp4", "swiglu_oai", [3, 0, 10], h=640, i=64, seed=23)
    plain = run_experts(p, DecodeConfig(2, 2, 2, 1, 0), "identity")
    check(p, plain)
    for prefetch in (1, 2, 4):
        got = run_experts(p, DecodeConfig(2, 2, 2, 1, prefetch), "identity")
        assert torch.equal(got.view(torch.int16), plain.view(torch.int16)), prefetch


def test_scale_is_loaded_once_per_cta_before_the_groups():
    # w_alpha / a_alpha of the CTA's expert (not of another one): an expert with two groups of rows
    p = make_problem(2, "bfloat16", "nvfp4", None, [0, 17, 4], seed=24)
    p.args[6][1] *= 3.0  # w_alpha of expert 1 only: the oracle's matrices carry it too
    p.w[1] *= 3.0
    check(p, run_experts(p, DecodeConfig(2, 2, 1, 1, 1), "identity"))


def test_gemm_only_options_are_rejected():
    import dataclasses

    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    if "kgroup" not in {f.name for f in dataclasses.fields(DecodeConfig)}:
        pytest.skip("this DecodeConfig has no kgroup option")
    cfg = dataclasses.replace(SMALL, kgroup=2)
    with pytest.raises(ValueError, match="config.kgroup = 2 is not implemented by the expert kernels"):
        X.ExpertLogic(2, "bfloat16", "nvfp4", None, cfg)
    assert X.can_implement(2, "bfloat16", "nvfp4", None, DecodeConfig(2, 2, 1, 1, 2))  # prefetch is


@pytest.mark.parametrize("span", [2, 4])
@pytest.mark.parametrize("fc, activation", [(1, "silu"), (1, "relu2"), (2, None)])
def test_column_tiles_per_cta(fc, activation, span):
    # N not a multiple of cols * span (H = 96 for FC2: 3 tiles of 32; I = 96 for FC1: 6 gated tiles
    # of 16, 3 relu2 tiles of 32): the last CTA's tiles past N store nothing (NaN poison past the
    # expert rows, every column of every row written)
    p = make_problem(fc, "nvfp4", "nvfp4", activation, [3, 0, 10], h=96 if fc == 2 else 256, i=96 if fc == 1 else 128,
                     seed=25 + span)  # fmt: skip
    check(p, run_experts(p, DecodeConfig(2, 2, 1, 1, 1), "list", span))


def test_span_is_checked():
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    with pytest.raises(ValueError, match=r"span must be one of \(1, 2, 4\) \(column tiles per CTA\), got 3"):
        X.ExpertLogic(2, "bfloat16", "nvfp4", None, SMALL, "list", 3)
    logic = X.ExpertLogic(2, "bfloat16", "nvfp4", None, SMALL, "list", 2)
    assert logic.grid_n(96) == 2 and logic.tile_n0(1, 1) == 96  # CTA 1: tiles 2 and 3 (past N = 96)
