"""The SM120 grouped expert GEMMs (`_kernel_grouped_sm120`) on this CPU machine: FC1 (silu, swiglu_oai,
relu2) and FC2 compile for sm_120a and sm_121a with the block-scaled MMA and nothing spilled, `why_not`
names every case it does not implement, and every piece of its address arithmetic agrees with the
`_lib.quant` swizzle oracle, with `ExpertWeights`' packed layout, with `_kernel_grouped`'s interleave
and with the DSL's SM120 layouts; a torch walk of the kernel's tiles through the same functions
matches the experts' oracle (test_experts_emulated's `check`: reference.expert_matrix / activation).

No SM120 GPU exists in this project's sessions: nothing here runs the kernel (its docstring)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from flashinfer.experimental.b12x._lib import quant as Q
from flashinfer.experimental.b12x.gemm.blockscaled._kernel_sm120 import (
    Sm120Config,
    sf_tile_bytes,
    sf_tile_offset,
    smem_sf_index,
)
from flashinfer.experimental.b12x.moe.fused_moe import _kernel_grouped_sm120 as K
from flashinfer.experimental.b12x.moe.fused_moe import weights as W

from .moe_cases import weight_plan

MMA = "mma.sync.aligned.kind::mxf4nvf4.block_scale.scale_vec::4X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue4m3"
FMT = "nvfp4"
STAGE = sf_tile_bytes(FMT, 128, 128)  # 1024 scale bytes a stage and operand


def _toolchain():
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")


# ---- compile gate ---------------------------------------------------------------------------------
def _ptxas(ptx: str, arch: str) -> str:
    """ptxas -v's register and spill lines ('' without a ptxas on PATH; the DSL writes PTX ISA 9.x, CUDA
    13.0's ptxas reads up to 9.0 and the kernel uses nothing newer: test_experts_compile's `_spills`)."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return ""
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(re.sub(r"^\.version 9\.\d+", ".version 9.0", ptx, flags=re.M))
        out = subprocess.run(
            [ptxas, f"-arch={arch}", "-v", str(src), "-o", str(Path(d) / "k.cubin")], capture_output=True, text=True
        )
    assert out.returncode == 0, out.stderr[-2000:]
    return " ".join(line.strip() for line in out.stderr.splitlines() if "spill" in line or "registers" in line)


CASES = [
    (1, "silu", 128),
    (2, None, 128),
    (1, "swiglu_oai", 256),
    (1, "relu2", 256),
    (2, None, 256),
]


@pytest.mark.compile
@pytest.mark.parametrize("arch", K.ARCHS)
@pytest.mark.parametrize("fc, activation, num_experts", CASES)
def test_builds_on_the_block_scaled_mma_without_spills(fc, activation, num_experts, arch):
    """E = 128 / 256 (H, I, R_cap are symbolic: E = 128, H = 2048, I = 768 is this build): the target,
    only the NVFP4 block-scaled MMA (2 x 8 atoms a warp, 2 K-blocks a K-tile: 32 in the loop body),
    the per-row 4-byte scale gathers, no local memory, no spills."""
    _toolchain()
    cfg = K.default_config()
    if fc == 1:
        fn = K.compile_grouped_sm120_fc1(activation, cfg, arch, num_experts)
    else:
        fn = K.compile_grouped_sm120_fc2(cfg, arch, num_experts)
    ptx = fn.artifacts.PTX
    assert [line.split()[1] for line in ptx.splitlines() if line.startswith(".target")] == [arch]
    assert fn.artifacts.CUBIN[:4] == b"\x7fELF"
    mmas = re.findall(r"mma\.sync\S*", ptx)
    assert set(mmas) == {MMA} and len(mmas) == 32, (set(mmas), len(mmas))
    assert "kind::mxf4nvf4" in ptx and "block_scale" in ptx
    # 4-byte A (and gated B) scale words, 16-byte values; the verbatim B scale tile only when not gated
    assert re.search(r"cp\.async\.ca\.shared\.global(\.\w+)* \[[^]]+\], \[[^]]+\], 4(, 4)?;", ptx)
    assert "cp.async.cg.shared.global" in ptx and "ldmatrix.sync.aligned" in ptx
    assert ".local" not in ptx, "the kernel spills to local memory"
    assert "wgmma" not in ptx and "tcgen05" not in ptx
    assert ("ex2.approx.f32" in ptx) == (activation in ("silu", "swiglu_oai"))
    info = _ptxas(ptx, arch)
    assert not info or " 0 bytes spill stores" in info, f"ptxas spills: {info}"
    print(f"fc{fc} {activation} E={num_experts} {arch}: {info}")


@pytest.mark.compile
def test_other_archs_and_formats_are_refused_before_tracing():
    _toolchain()
    cfg = K.default_config()
    with pytest.raises(ValueError, match=r"arch sm_90a: the block-scaled mma.sync \(kind::mxf4nvf4\) needs one of"):
        K.compile_grouped_sm120_fc1("silu", cfg, "sm_90a", 128)
    with pytest.raises(ValueError, match="arch sm_90a"):
        K.compile_grouped_sm120_fc2(cfg, "sm_90a", 128)
    with pytest.raises(ValueError, match="activation must be one of"):
        K.compile_grouped_sm120_fc1("gelu", cfg, "sm_120a", 128)
    with pytest.raises(ValueError, match="num_experts must be"):
        K.compile_grouped_sm120_fc2(cfg, "sm_120a", 2000)


def _accumulator_pairs(tiled_mma, threads):
    """Per thread: the tile coordinates of its accumulator n-atoms 2q and 2q + 1 (plain Python at trace
    time: the DSL rewrites loops inside a jit function into device loops)."""
    import cutlass.cute as cute

    ident = cute.make_identity_tensor((128, 128))
    out = []
    for tid in range(threads):
        c = tiled_mma.get_slice(tid).partition_C(ident)
        modes = [cute.size(c, mode=[m]) for m in range(3)]
        out.append(
            [
                (c[v, mi, 2 * q], c[v, mi, 2 * q + 1])
                for v in range(modes[0])
                for mi in range(modes[1])
                for q in range(modes[2] // 2)
            ]
        )
    return out


@pytest.mark.compile
def test_layouts_agree_with_the_dsl_partitions():
    """Traced on the DSL at sm_120a: (1) `smem_sf_word` + c is the DSL's SFA / SFB shared layout at
    every (row, K, stage); (2) the gated B layout maps tile row l to weight row fc1_b_row(0, l, I);
    (3) in every thread's accumulator, n-atom 2q + 1 is n-atom 2q's column + 8 and 2q's is a gate
    column (n % 16 < 8): the epilogue's gate / up pairing."""
    _toolchain()
    import cutlass.cute as cute

    from tests.experimental.b12x.gemm.sm120_probe import scale_layouts

    stages, inter, k = 2, 77, 256
    gemm = K.GroupedSm120(1, "silu", Sm120Config(stages=stages), 8)

    def extra(tiled_mma, found):
        gl = K.gated_b_layout(k, inter)
        found["rows"] = [cute.crd2idx((r, 0), gl) for r in range(128)]
        found["pairs"] = _accumulator_pairs(tiled_mma, gemm.threads)

    found = scale_layouts(gemm, stages, extra)
    for name in ("a", "b"):
        for (r, kk, s), offset in found[name].items():
            c = kk // 16
            assert offset == s * STAGE + K.smem_sf_word(r, c // 4) + c % 4, (name, r, kk, s)
    assert found["rows"] == [K.fc1_b_row(0, r, inter)[0] * k for r in range(128)]
    covered = set()
    for tid, pairs in enumerate(found["pairs"]):
        for (m, n), (m_up, n_up) in pairs:
            assert (m_up, n_up) == (m, n + 8) and n % 16 < 8, (tid, m, n, m_up, n_up)
            covered |= {(m, n), (m_up, n_up)}
    assert len(covered) == 128 * 128  # every accumulator of the tile, each once


# ---- why_not and the launch contract ----------------------------------------------------------------
@pytest.mark.contract
def test_why_not_names_each_reason():
    cfg = K.default_config()
    assert K.why_not(1, FMT, FMT, "silu", cfg, 2048, 128, "sm_120a") is None
    assert K.why_not(2, FMT, FMT, None, cfg, k=768, num_experts=256, arch="sm_121a") is None
    assert K.why_not(1, FMT, FMT, "relu2", cfg) is None
    for arch in ("sm_90a", "sm_100a", "sm_89"):
        assert K.why_not(1, FMT, FMT, "silu", cfg, arch=arch).startswith(f"arch {arch}: the block-scaled")
    for a_fmt, b_fmt in (("bfloat16", FMT), ("mxfp8", "mxfp4"), ("mxfp8", FMT), (FMT, "mxfp4"), ("mxfp4", "mxfp4")):
        assert "implements only the nvfp4 recipe" in K.why_not(1, a_fmt, b_fmt, "silu", cfg), (a_fmt, b_fmt)
    assert "fc must be 1 or 2" in K.why_not(3, FMT, FMT, None, cfg)
    assert "activation must be one of" in K.why_not(1, FMT, FMT, "gelu", cfg)
    assert "FC2 takes no activation" in K.why_not(2, FMT, FMT, "silu", cfg)
    assert "positive multiple of 128" in K.why_not(2, FMT, FMT, None, cfg, k=704)
    assert "positive multiple of 128" in K.why_not(2, FMT, FMT, None, cfg, k=0)
    assert "num_experts must be 1..1024" in K.why_not(2, FMT, FMT, None, cfg, num_experts=1025)
    assert "tile must be 128 x 128 x 128" in K.why_not(1, FMT, FMT, "silu", Sm120Config(bm=64))
    assert "exceed the" in K.why_not(1, FMT, FMT, "silu", Sm120Config(stages=6))
    assert "config must be a Sm120Config" in K.why_not(2, FMT, FMT, None, object())
    with pytest.raises(ValueError, match="SM120 grouped expert kernel: fc must be"):
        K.GroupedSm120(3, None, cfg, 4)


@pytest.mark.contract
def test_launch_contract_is_the_grouped_kernels():
    """The fake tensors have `_kernel_experts.fake_args`' dtypes and ranks in the same order (the
    binding's argument tuples fit both kernels), with stricter alignment only."""
    _toolchain()
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    for fc, out in ((1, "bfloat16"), (2, "float32")):
        ours, theirs = K.fake_args(fc), X.fake_args(FMT, out)
        assert [(t.element_type, len(t.shape)) for t in ours] == [(t.element_type, len(t.shape)) for t in theirs]


# ---- address arithmetic against the swizzle oracle --------------------------------------------------
def _stage_from_words(storage, rows_global, ok, kt, cols):
    """One stage's 1 KB scale tile as the kernel's word gathers fill it: tile row t (ok[t]) <- global
    row rows_global[t], words kt * 2 + a; unfilled bytes stay 0xEE."""
    stage = torch.full((STAGE,), 0xEE, dtype=torch.uint8)
    t = torch.arange(128)
    for a in range(2):
        src = K.sf_word_offset(rows_global, kt * 2 + a, cols)
        dst = K.smem_sf_word(t, a)
        for c in range(4):
            stage[(dst + c)[ok]] = storage[(src + c)[ok]]
    return stage


def _smem_index():
    return torch.tensor([[smem_sf_index(FMT, 128, 128, r, c) for c in range(8)] for r in range(128)])


@pytest.mark.reference
@pytest.mark.parametrize("r_cap, k", [(300, 256), (1000, 2048), (129, 128)])
def test_a_scale_rows_of_any_tile_start(r_cap, k):
    """Tiles starting at hand-picked and random sorted rows (block edges, 31/32, one row from the end)
    with every live row count: the gathered stage read through `smem_sf_index` (what the MMA reads) is
    the oracle's grid at (start + t, 8 kt + c), and rows past the live ones stay unwritten."""
    cols = k // 16
    g = torch.Generator().manual_seed(r_cap + k)
    grid = torch.randint(0, 256, (r_cap, cols), generator=g, dtype=torch.uint8)
    storage = Q.swizzle_scales(grid, 0)
    index = _smem_index()
    starts = [0, 1, 31, 32, 33, 95, 127, 128, r_cap - 1, r_cap - 128] + torch.randint(
        0, r_cap, (12,), generator=g
    ).tolist()
    for lo in sorted({s for s in starts if 0 <= s < r_cap}):
        rows = min(128, r_cap - lo, 1 + (lo * 37) % 128)
        t = torch.arange(128)
        for kt in range(k // 128):
            stage = _stage_from_words(storage, lo + t, t < rows, kt, cols)
            got = stage[index]
            assert torch.equal(got[:rows], grid[lo : lo + rows, kt * 8 : kt * 8 + 8]), (lo, rows, kt)
            assert (got[rows:] == 0xEE).all(), (lo, rows, kt)


def _experts(activation, layout, e=3, h=256, i=160, seed=0):
    """Random NVFP4 checkpoint tensors and their ExpertWeights (FC1 [E, N1, H], FC2 [E, H, I])."""
    wplan = weight_plan("modelopt_nvfp4", activation, e=e, h=h, i=i, layout=layout)
    g = torch.Generator().manual_seed(seed)
    n1 = wplan.fc1_rows
    ck = dict(
        w1_fp4=torch.randint(0, 256, (e, n1, h // 2), generator=g, dtype=torch.uint8),
        w1_blockscale=torch.randint(0, 127, (e, n1, h // 16), generator=g, dtype=torch.uint8).view(torch.float8_e4m3fn),
        w1_global_scale=torch.ones(e),
        w2_fp4=torch.randint(0, 256, (e, h, i // 2), generator=g, dtype=torch.uint8),
        w2_blockscale=torch.randint(0, 127, (e, h, i // 16), generator=g, dtype=torch.uint8).view(torch.float8_e4m3fn),
        w2_global_scale=torch.ones(e),
        a1_gscale=torch.ones(e),
        a2_gscale=torch.ones(e),
    )
    return ck, W.prepare_weights(plan=wplan, **ck)


@pytest.mark.reference
@pytest.mark.parametrize("layout", ["w13", "w31"])
def test_b_scales_and_rows_of_an_expert_weight(layout):
    """Expert e's B tiles in `ExpertWeights` (prepare_weights on random checkpoint tensors), read as
    the kernel reads them, are the checkpoint's rows: FC2 and relu2 tile rows n0 + r through the
    verbatim tile at e * SB + sf_tile_offset; a gated tile's row l through `fc1_b_row`'s gathers and
    `gated_b_layout`'s values, the gate (up) rows of output j from the checkpoint's gate (up) half."""
    e_count, h, i = 3, 256, 160
    ck, ex = _experts("silu", layout, e_count, h, i)
    index = _smem_index()
    cols = h // 16
    sfb = ex.w1_scales.view(torch.uint8).reshape(e_count, -1)
    gate_first = layout == "w31"
    for e in range(e_count):
        for n0 in range(0, 2 * i, 128):
            local = torch.arange(128)
            row, ok = K.fc1_b_row(n0, local, i)
            j = (n0 >> 1) + ((local >> 4) << 3) + (local & 7)  # the output column, as the epilogue's
            up = ((local >> 3) & 1).bool()
            ck_row = torch.where(up == gate_first, j + i, j)  # checkpoint row: w31 gate first, w13 up first
            for kt in range(h // 128):
                got = _stage_from_words(sfb[e], row, ok, kt, cols)[index]
                want = ck["w1_blockscale"].view(torch.uint8)[e, ck_row.clamp(max=2 * i - 1), kt * 8 : kt * 8 + 8]
                assert torch.equal(got[ok], want[ok]), (e, n0, kt)
            # values: gated_b_layout from weight row n0 / 2 (strides in elements; bytes = elements / 2)
            offs = torch.tensor([K.fc1_b_row(0, int(r), i)[0] for r in range(128)]) + (n0 >> 1)
            vals = ex.w1_values[e].reshape(-1, h // 2)
            assert torch.equal(vals[offs[ok]], ck["w1_fp4"][e, ck_row[ok]]), (e, n0)
    ck2, ex2 = _experts("silu", "w13", e_count, h, 256)  # FC2 [E, H, I = 256]: K-tiles of two scale atoms
    sfb2, k2 = ex2.w2_scales.view(torch.uint8).reshape(e_count, -1), 256
    for e in range(e_count):
        for n0 in range(0, h, 128):
            for kt in range(k2 // 128):
                off = sf_tile_offset(FMT, n0, kt * 128, k2)
                tile = sfb2[e, off : off + STAGE][index]
                live = min(128, h - n0)
                want = ck2["w2_blockscale"].view(torch.uint8)[e, n0 : n0 + live, kt * 8 : kt * 8 + 8]
                assert torch.equal(tile[:live], want), (e, n0, kt)
    # the expert's base: SB bytes an expert, the flat storage's expert e starts at e * SB
    flat = ex.w1_scales.view(torch.uint8).reshape(-1)
    sb = sfb.shape[1]
    assert sb % 512 == 0 and torch.equal(flat[2 * sb : 3 * sb], sfb[2])


@pytest.mark.reference
def test_fc1_interleave_is_the_grouped_kernels():
    """fc1_b_row and out_column against `_kernel_grouped.GroupedLogic.b_row` (the grouped kernel's
    interleave) for every row of every tile at several I, and the gated tiles cover each gate and up
    row exactly once."""
    from flashinfer.experimental.b12x.moe.fused_moe._kernel_grouped import GroupedLogic

    for inter in (64, 160, 768, 1000):
        logic = SimpleNamespace(gated=True)
        seen = []
        for n0 in range(0, 2 * inter + 127, 128):
            if n0 >= 2 * inter:
                break
            for local in range(128):
                want = GroupedLogic.b_row(logic, None, SimpleNamespace(n=inter), n0, local)
                got = K.fc1_b_row(n0, local, inter)
                assert (got[0], bool(got[1])) == (want[0], bool(want[1])), (inter, n0, local)
                if got[1]:
                    seen.append(got[0])
                    if (local >> 3) & 1 == 0:  # a gate row: its output column and its up row's
                        assert K.out_column(n0, local) == got[0]
                        assert K.fc1_b_row(n0, local + 8, inter)[0] == got[0] + inter
        assert sorted(seen) == list(range(2 * inter)), inter


# ---- the kernel's tile walk in torch against the experts' oracle -------------------------------------
def _decode_fp4(values: torch.Tensor) -> torch.Tensor:
    return Q.e2m1_decode(Q.unpack_e2m1(values.view(torch.uint8))).float()


def _e4m3(raw: torch.Tensor) -> torch.Tensor:
    return Q.e4m3_decode(raw.view(torch.float8_e4m3fn)).float()


def emulate(p, activation):
    """The kernel's data flow on p's launcher arguments: CTA rows through `locate` (its warp code on the
    PTX emulator), per tile and K-tile the scale stages the gathers / verbatim copy fill, read back at
    the MMA's `smem_sf_index`, products of 64-K blocks summed in fp32, the epilogue's scale, pairing
    (n, n + 8) and `X.Activation.act` on the emulator, masked stores."""
    from .test_experts_emulated import EMU, LANE, MoeEmuOps

    a, sfa, b, sfb, c, start, w_alpha, a_alpha = p.args[:8]
    num_e, n_b, kbytes = b.shape
    k, r_cap, n_out = kbytes * 2, c.shape[0], c.shape[1]
    kern = K.GroupedSm120(p.fc, activation, K.default_config(), num_e)
    gmem = EMU.GlobalMemory()
    ops = MoeEmuOps(gmem)
    rt = SimpleNamespace(s2_base=gmem.put(p.args[8]) if p.fc == 1 else 0)
    out = c.clone()
    deq_a, deq_b = _decode_fp4(a), _decode_fp4(b.reshape(num_e * n_b, kbytes)).reshape(num_e, n_b, k)
    sfa_flat, index, cols = sfa.view(torch.uint8).reshape(-1), _smem_index(), k // 16
    start_np = start.numpy()
    t = torch.arange(128)
    for by in range(kern.grid_m(r_cap)):
        vals = np.stack(kern.locate(ops, LANE, np.int32(by), start_np))
        assert (vals == vals[:, :1]).all(), f"CTA row {by}: the lanes disagree on the tile"
        found, e, j = (int(v) for v in vals[:, 0])
        if not found:
            continue
        lo = int(start_np[e]) + j * 128
        rows = min(lo + 128, int(start_np[e + 1])) - lo
        scale = np.float32(w_alpha[e].item()) * np.float32(a_alpha[e].item())
        for n0 in range(0, n_b, 128):
            if kern.gated:
                b_rows, b_ok = K.fc1_b_row(n0, t, n_b // 2)
            else:
                b_rows, b_ok = n0 + t, n0 + t < n_b
            ta = torch.zeros(128, k)
            ta[:rows] = deq_a[lo : lo + rows]
            tb = torch.zeros(128, k)
            tb[b_ok] = deq_b[e, b_rows[b_ok]]
            acc = torch.zeros(128, 128)
            for kt in range(k // 128):
                sa = _e4m3(_stage_from_words(sfa_flat, lo + t, t < rows, kt, cols)[index])
                if kern.gated:
                    sb = _e4m3(_stage_from_words(sfb[e], b_rows, b_ok, kt, cols)[index])
                else:
                    off = sf_tile_offset(FMT, n0, kt * 128, k)
                    sb = _e4m3(sfb[e, off : off + STAGE][index])
                for kb in range(2):  # one m16n8k64 K-block: 4 scales a row
                    ks = slice(kt * 128 + kb * 64, kt * 128 + kb * 64 + 64)
                    xa = ta[:, ks] * sa[:, kb * 4 : kb * 4 + 4].repeat_interleave(16, 1)
                    xb = tb[:, ks] * sb[:, kb * 4 : kb * 4 + 4].repeat_interleave(16, 1)
                    acc += xa @ xb.t()
            y = acc[:rows].numpy() * scale
            if not kern.gated:
                if kern.activation is not None:
                    y = _act(kern, ops, rt, y, np.zeros_like(y))
                live = min(128, n_out - n0)
                out[lo : lo + rows, n0 : n0 + live] = torch.from_numpy(y[:, :live]).to(out.dtype)
                continue
            gate_cols = [n for n in range(128) if n % 16 < 8 and K.out_column(n0, n) < n_out]
            act = _act(kern, ops, rt, y[:, gate_cols], y[:, [n + 8 for n in gate_cols]])
            out[lo : lo + rows, [K.out_column(n0, n) for n in gate_cols]] = torch.from_numpy(act).to(out.dtype)
    return out


def _act(kern, ops, rt, x, u):
    """`X.Activation.act` on the emulator, 32 lanes at a time."""
    flat_x, flat_u = x.astype(np.float32).reshape(-1), u.astype(np.float32).reshape(-1)
    res = np.empty_like(flat_x)
    for s in range(0, flat_x.size, 32):
        n = min(32, flat_x.size - s)
        xs, us = np.zeros(32, np.float32), np.zeros(32, np.float32)
        xs[:n], us[:n] = flat_x[s : s + n], flat_u[s : s + n]
        res[s : s + n] = kern.act(ops, rt, xs, us)[:n]
    return res.reshape(x.shape)


@pytest.mark.reference
@pytest.mark.parametrize(
    "fc, activation, h, i",
    [(1, "silu", 256, 160), (1, "swiglu_oai", 256, 160), (1, "relu2", 128, 160), (2, None, 224, 256)],
)
def test_tile_walk_matches_the_expert_oracle(fc, activation, h, i):
    """Experts with 0, 1, 130 (two tiles), 300 (three) and 37 rows (tiles starting mid-block), I = 160
    (a gated FC1's last tile half live, relu2's last 32 rows), H = 224 (FC2's last tile 96 columns):
    every row of an expert within the oracle's tolerance rule, rows past start[E] never written."""
    _toolchain()
    from .test_experts_emulated import check, make_problem

    p = make_problem(fc, FMT, FMT, activation, [0, 1, 130, 300, 37, 0], h=h, i=i, seed=3)
    check(p, emulate(p, activation))
