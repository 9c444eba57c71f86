"""The decode stream layout (`_shared/stream_layout`) and the stream decode kernel on the CPU: the
permutation by hand, pack/unpack round trips, the kernel's logic on the PTX emulator against the fp32
reference, the plan/API plumbing, and builds for sm_90a and sm_120a (GPU tier: test_stream_gpu.py)."""

import dataclasses

import numpy as np
import pytest
import torch

from flashinfer.experimental.b12x._lib import quant as Q
from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm._shared import stream_layout as SL
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_stream as KS

from . import emulated as E
from .helpers import TORCH, check_tolerance, make_operands


def _random_nvfp4(n, k, seed):
    g = torch.Generator().manual_seed(seed)
    values = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=g)
    sf = torch.randint(0, 127, (n, k // 16), dtype=torch.uint8, generator=g)
    return values, sf, Q.swizzle_scales(sf, 0)


# ---- the layout ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kc", SL.KCS)
def test_layout_by_hand(kc):
    """Every lane's bytes where the docstring says, element by element (an independent loop)."""
    n, k = 32, 128 * kc * 2
    values, sf, storage = _random_nvfp4(n, k, seed=kc)
    packed = SL.pack_stream(values, storage, n, k, kc)
    assert packed.shape == (n // 16, 2, SL.slab_bytes(kc)) and packed.dtype == torch.uint8
    p = packed.numpy()
    v, f = values.numpy(), sf.numpy()
    for r in range(n // 16):
        for s in range(2):
            for g in range(8):
                for t in range(4):
                    lane = 4 * g + t
                    for ci in range(kc):
                        c = kc * s + ci
                        for h in range(2):
                            row = 16 * r + 8 * h + g
                            load = p[r, s, (2 * ci + h) * 512 + lane * 16 : (2 * ci + h) * 512 + lane * 16 + 16]
                            k0 = 128 * c + 32 * t
                            np.testing.assert_array_equal(load, v[row, k0 // 2 : k0 // 2 + 16])
                            word = (2 * kc + ci // 4) * 512 + lane * 16 + 4 * (ci % 4)
                            for j in range(2):
                                assert p[r, s, word + 2 * h + j] == f[row, k0 // 16 + j]


@pytest.mark.parametrize("major", SL.MAJORS)
@pytest.mark.parametrize("order", SL.ORDERS)
@pytest.mark.parametrize("kc", SL.KCS)
@pytest.mark.parametrize("n, k", [(16, 1024), (48, 2048), (64, 5120)])
def test_pack_unpack_round_trip(kc, n, k, order, major):
    if k % (128 * kc):
        pytest.skip("no layout")
    values, sf, storage = _random_nvfp4(n, k, seed=n + k)
    packed = SL.pack_stream(values, storage.view(torch.float8_e4m3fn), n, k, kc, order, major)
    assert packed.numel() == n * k * 9 // 16  # the same bytes, moved
    v, f = SL.unpack_stream(packed, n, k, kc, order, major)
    assert torch.equal(v, values) and torch.equal(f, sf)
    if major == "slab":  # slab s of tile r at [s, r]
        tile_major = SL.pack_stream(values, storage, n, k, kc, order)
        assert torch.equal(packed.transpose(0, 1), tile_major)


def test_natural_order_by_hand():
    """One word: values 0..7 (plain bytes 0x10, 0x32, 0x54, 0x76) -> nibbles 0, 2, 4, 6, 1, 3, 5, 7."""
    values = torch.tensor([[0x10, 0x32, 0x54, 0x76] * 128] * 16, dtype=torch.uint8)
    storage = Q.swizzle_scales(torch.zeros(16, 64, dtype=torch.uint8), 0)
    packed = SL.pack_stream(values, storage, 16, 1024, 4, "natural")
    assert packed[0, 0, :4].tolist() == [0x20, 0x64, 0x31, 0x75]
    plain = SL.pack_stream(values, storage, 16, 1024, 4, "fp4")
    assert plain[0, 0, :4].tolist() == [0x10, 0x32, 0x54, 0x76]


def test_layout_rejects_shapes_it_cannot_hold():
    values, _, storage = _random_nvfp4(32, 640, seed=1)
    with pytest.raises(ValueError, match="K % 512 == 0"):
        SL.pack_stream(values, storage, 32, 640, 4)
    with pytest.raises(ValueError, match="kc"):
        SL.pack_stream(values, storage, 32, 640, 2)
    with pytest.raises(ValueError, match="values must be"):
        SL.pack_stream(values[:16], storage, 32, 1024, 4)
    assert SL.why_not(4096, 5632, 4) is None and SL.why_not(4096, 5632, 8) is not None


# ---- the kernel's logic on the emulator --------------------------------------------------------
def _args(ops, out_dtype, kc, order="natural", major="tile"):
    out = torch.full((ops.m, ops.n), float("nan"), dtype=TORCH[out_dtype])
    packed = SL.pack_stream(ops.b_values, ops.b_scales, ops.n, ops.k, kc, order, major).reshape(ops.n, -1)
    args, alpha = L.launch_args(
        ops.a_fmt, ops.a_values, None, None, "nvfp4", packed, ops.b_scales, ops.weight.alpha, ops.alpha, out
    )
    return args, alpha


EMU = [
    KS.StreamConfig(warps=2, wn=1, kc=4, ntiles=1),  # 2 warps split K of one tile
    KS.StreamConfig(warps=4, wn=2, kc=4, ntiles=2, prefetch=1),  # 2 tiles x 2 K warps, pipelined
    KS.StreamConfig(warps=4, wn=4, kc=8, ntiles=1, prefetch=1, wcache="nc", acache="nc", order="fp4"),
    KS.StreamConfig(warps=8, wn=2, kc=4, ntiles=2, unroll=2),  # idle K warps (4 per tile, 2 slabs)
    KS.StreamConfig(warps=2, wn=2, kc=4, ntiles=1, load="bulk", stages=2),  # 6 slabs a warp: 3 phases
    KS.StreamConfig(warps=4, wn=1, kc=8, ntiles=2, load="bulk", stages=2),  # 1 slab a warp, 1 idle warp
    KS.StreamConfig(warps=4, wn=2, kc=4, ntiles=1, load="bulk", stages=4, unroll=2),  # 3 slabs < 4 stages
    KS.StreamConfig(warps=4, wn=4, kc=4, ntiles=2, load="bulk", stages=3),  # 6 slabs over 3 stages
    KS.StreamConfig(warps=2, wn=2, kc=4, ntiles=2, load="bulk", lockstep=True),  # CTA barrier per slab
    KS.StreamConfig(warps=4, wn=2, kc=4, ntiles=1, load="bulk", major="slab"),  # slab-major, K split
    KS.StreamConfig(warps=2, wn=2, kc=4, ntiles=2, prefetch=1, major="slab"),  # ldg, 2 slabs
]


@pytest.mark.interpret
@pytest.mark.parametrize(
    "cfg",
    EMU,
    ids=lambda c: (
        f"w{c.warps}wn{c.wn}kc{c.kc}nt{c.ntiles}p{c.prefetch}{c.load}{c.stages}{c.order}{'L' if c.lockstep else ''}{c.major}"
    ),
)
@pytest.mark.parametrize("a_fmt", ["bfloat16", "float16"])
def test_stream_kernel_logic_matches_the_reference(cfg, a_fmt):
    m = 3 if cfg.ntiles == 1 else 11
    # N = 48: 3 tiles, so wn 2 / 4 leave a CTA's last tiles past N (clamped, never stored); bulk
    # configs take K = 3072 (6 / 3 slabs): their buffers refill and their phases wrap
    k = 3072 if cfg.load == "bulk" else 1024
    ops = make_operands(a_fmt, "nvfp4", m, 48, k, seed=cfg.warps + cfg.kc)
    args, alpha = _args(ops, "bfloat16", cfg.kc, cfg.order, cfg.major)
    check_tolerance(E.run_stream(a_fmt, "nvfp4", "bfloat16", cfg, args, alpha), ops, "bfloat16")


@pytest.mark.interpret
def test_stream_kernel_equals_the_decode_kernel_bitwise_with_one_slab_per_warp():
    """kc 4 with K = 512 is one slab: the same chunk math in the same order as the decode kernel with
    one warp and tiles 1, so with the plain nibble order the fp32 outputs match bit for bit (the
    layout moved bytes only)."""
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD

    ops = make_operands("bfloat16", "nvfp4", 5, 32, 512, seed=9)
    args, alpha = _args(ops, "float32", 4, "fp4")
    cfg = KS.StreamConfig(warps=1, kc=4, order="fp4")
    ours = E.run_stream("bfloat16", "nvfp4", "float32", cfg, args, alpha)
    dec_args, _ = L.launch_args(
        "bfloat16",
        ops.a_values,
        None,
        None,
        "nvfp4",
        ops.b_values,
        ops.b_scales,
        ops.weight.alpha,
        ops.alpha,
        torch.full((5, 32), float("nan")),
    )
    plain = E.run_decode("bfloat16", "nvfp4", "float32", KD.DecodeConfig(1, 1, 1, 1), dec_args, alpha)
    assert torch.equal(ours.view(torch.int32), plain.view(torch.int32))


@pytest.mark.interpret
@pytest.mark.parametrize("load", ["bulk", "ldg"])
def test_placed_order_equals_natural_bitwise(load):
    """order "placed" moves each code's bits at pack time and extracts them with fewer instructions;
    the dequantized registers, so the fp32 sums, are those of order "natural" bit for bit."""
    ops = make_operands("bfloat16", "nvfp4", 11, 32, 2048, seed=4)
    outs = []
    for order in ("natural", "placed"):
        cfg = KS.StreamConfig(warps=2, wn=2, kc=4, ntiles=2, load=load, order=order)
        args, alpha = _args(ops, "float32", 4, order)
        outs.append(E.run_stream("bfloat16", "nvfp4", "float32", cfg, args, alpha))
    assert torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32))
    check_tolerance(outs[1], ops, "float32")


def test_placed_pairs_are_the_natural_pairs():
    """dequant.fp4_pair_placed on placed words == dequant.fp4_pair on the natural words, every pair,
    random words plus all 16 codes in every position."""
    from flashinfer.experimental.b12x.gemm._shared import dequant as DQ

    from .emulator import EmuOps, GlobalMemory

    emu = EmuOps(GlobalMemory())
    g = torch.Generator().manual_seed(0)
    nat = torch.randint(0, 256, (32 * 64,), dtype=torch.uint8, generator=g)
    every = torch.arange(16, dtype=torch.uint8).repeat_interleave(8).reshape(16, 8)  # word of one code
    nat = torch.cat([nat, (every[:, 0::2] | every[:, 1::2] << 4).reshape(-1).repeat(4)])
    placed = SL._place(nat)
    assert torch.equal(SL._unplace(placed), nat)
    for chunk in range(0, nat.numel(), 128):  # 32 lanes x 4 bytes
        wn = SL._words(nat[chunk : chunk + 128]).numpy()
        wp = SL._words(placed[chunk : chunk + 128]).numpy()
        for i in range(4):
            want = DQ.fp4_pair(emu, emu.u32(wn), i, "bfloat16")
            np.testing.assert_array_equal(DQ.fp4_pair_placed(emu, emu.u32(wp), i), want)
    assert "bf16" in KS.why_not("float16", "nvfp4", "bfloat16", KS.StreamConfig(order="placed"))


# ---- configs, selection, plumbing ----------------------------------------------------------------
def test_config_validation_names_the_problem():
    assert KS.why_not("bfloat16", "nvfp4", "bfloat16", KS.StreamConfig()) is None
    assert "NVFP4" in KS.why_not("bfloat16", "mxfp4", "bfloat16", KS.StreamConfig())
    assert "kc" in KS.why_not("bfloat16", "nvfp4", "bfloat16", KS.StreamConfig(kc=2))
    assert "wn" in KS.why_not("bfloat16", "nvfp4", "bfloat16", KS.StreamConfig(warps=4, wn=8))
    assert "ntiles" in KS.why_not("bfloat16", "nvfp4", "bfloat16", KS.StreamConfig(ntiles=4))
    assert "lockstep" in KS.why_not("bfloat16", "nvfp4", "bfloat16", KS.StreamConfig(load="bulk", wn=2, lockstep=True))
    assert "lockstep" in KS.why_not("bfloat16", "nvfp4", "bfloat16", KS.StreamConfig(wn=8, lockstep=True))
    with pytest.raises(ValueError, match="stream decode kernel"):
        KS.StreamLogic("nvfp4", "nvfp4", "bfloat16", KS.StreamConfig())


@pytest.mark.parametrize("n, k", [(28672, 4096), (4096, 14336), (11264, 2048), (2048, 5632), (7168, 2048)])
@pytest.mark.parametrize("m", [1, 16])
def test_default_and_candidates_are_valid(m, n, k):
    base = KS.default_config(m, n, k)
    assert base is not None and KS.shape_reason(n, k, base) is None and KS.config_reason(base) is None
    assert base.max_m >= m
    cands = KS.candidate_configs(m, n, k)
    assert len(cands) == len(set(cands)) >= 8
    assert all(KS.shape_reason(n, k, c) is None and c.max_m >= m for c in cands)
    assert KS.default_config(m, 4096, 640) is None  # K % 512: no stream layout


def test_env_selects_the_stream_kernel_only_where_it_applies(monkeypatch):
    monkeypatch.setenv(L.DECODE_KERNEL_ENV, "stream")
    cfg = L.default_config("decode8", 28672, 4096, "nvfp4", a_fmt="bfloat16")
    assert isinstance(cfg, KS.StreamConfig) and cfg == KS.default_config(8, 28672, 4096)
    assert not isinstance(L.default_config("decode8", 4096, 640, "nvfp4", a_fmt="bfloat16"), KS.StreamConfig)
    assert not isinstance(L.default_config("decode8", 4096, 4096, "nvfp4", a_fmt="nvfp4"), KS.StreamConfig)
    assert not isinstance(L.default_config("decode32", 4096, 4096, "nvfp4", a_fmt="bfloat16"), KS.StreamConfig)
    monkeypatch.delenv(L.DECODE_KERNEL_ENV)
    unset = L.default_config("decode8", 28672, 4096, "nvfp4", a_fmt="bfloat16")
    assert isinstance(unset, KS.StreamConfig) == L.STREAM_DEFAULT
    monkeypatch.setenv(L.DECODE_KERNEL_ENV, "cute")
    assert not isinstance(L.default_config("decode8", 28672, 4096, "nvfp4", a_fmt="bfloat16"), KS.StreamConfig)
    monkeypatch.setattr(L, "STREAM_DEFAULT", True)  # the one-line switch, once the H200 sweep backs it
    monkeypatch.delenv(L.DECODE_KERNEL_ENV)
    assert isinstance(L.default_config("decode16", 28672, 4096, "nvfp4", a_fmt="float16"), KS.StreamConfig)
    assert not isinstance(L.default_config("decode16", 28672, 4096, "mxfp4", a_fmt="bfloat16"), KS.StreamConfig)


def test_plan_override_checks_the_shape():
    from flashinfer.experimental.b12x.gemm.blockscaled import api

    q = api.GemmQuery("bfloat16", "nvfp4", 4096, 5632, max_m=8)
    api.plan(q, override={"decode8": KS.StreamConfig(kc=4)})
    with pytest.raises(ValueError, match="K % 1024"):
        api.plan(q, override={"decode8": KS.StreamConfig(kc=8)})
    with pytest.raises(ValueError, match="stream decode kernel"):
        api.plan(api.GemmQuery("nvfp4", "nvfp4", 4096, 4096, max_m=8), override={"decode8": KS.StreamConfig()})
    with pytest.raises(ValueError, match="decode8 / decode16"):
        api.plan(api.GemmQuery("bfloat16", "nvfp4", 4096, 4096), override={"decode32": KS.StreamConfig(ntiles=2)})


def test_packed_weights_are_cached_per_weight_and_kc():
    from flashinfer.experimental.b12x.gemm.blockscaled import _stream_cache as SC

    ops = make_operands("bfloat16", "nvfp4", 1, 32, 1024, seed=2)
    w = ops.weight
    p4 = SC.stream_weight(w.values, w.scales, 32, 1024, 4)
    assert SC.stream_weight(w.values, w.scales, 32, 1024, 4) is p4
    assert SC.stream_weight(w.values, w.scales, 32, 1024, 4, "natural") is not p4
    p8 = SC.stream_weight(w.values, w.scales, 32, 1024, 8)
    assert p8 is not p4 and p8.shape == (32, 1024 * 9 // 16)
    v, f = SL.unpack_stream(p4.view(2, 2, -1), 32, 1024, 4)
    assert torch.equal(v, w.values.view(torch.uint8))
    other = make_operands("bfloat16", "nvfp4", 1, 32, 1024, seed=3).weight
    assert not torch.equal(SC.stream_weight(other.values, other.scales, 32, 1024, 4), p4)


# ---- builds ----------------------------------------------------------------------------------------
BUILDS = [
    KS.StreamConfig(warps=8, wn=8, kc=4, ntiles=1, load="bulk", stages=2),
    KS.StreamConfig(warps=8, wn=8, kc=4, ntiles=1, prefetch=1),
    KS.StreamConfig(warps=4, wn=1, kc=8, ntiles=2, load="bulk", stages=2),
    KS.StreamConfig(warps=8, wn=8, kc=4, ntiles=2, load="bulk", stages=2, lockstep=True, order="placed"),
]


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize(
    "cfg", BUILDS, ids=lambda c: f"wn{c.wn}kc{c.kc}nt{c.ntiles}p{c.prefetch}{c.load}{c.order}{c.lockstep}"
)
def test_stream_kernel_builds(cfg, arch):
    fn = KS.compile_stream("bfloat16", "nvfp4", "bfloat16", cfg, arch=arch)
    ptx = fn.artifacts.PTX
    assert "mma.sync.aligned.m16n8k16" in ptx
    assert ".local" not in ptx  # no stack arrays
    assert ptx.count("bar.sync") == 1 + cfg.lockstep  # the reduction's barrier (+ lockstep's per slab)
    if cfg.load == "bulk":
        assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
        assert f"{SL.slab_bytes(cfg.kc)}, [" in ptx  # one copy is one whole slab
    else:
        assert "L1::no_allocate" in ptx  # the default weight hint


@pytest.mark.compile
@pytest.mark.parametrize("load", ["ldg", "bulk"])
def test_stream_kernel_sass_streams_whole_slabs_without_spills(load, cuda_binary):
    """sm_90a SASS: no local memory (spills), no scattered scale loads; "ldg": every weight load a
    128-bit LDG (the prologue's slab and the loop's); "bulk": slab copies (UBLKCP) on mbarriers and
    one 128-bit shared load per 512-byte warp load of the slab."""
    cfg = KS.default_config(1, 28672, 4096)
    cfg = cfg if load == "bulk" else dataclasses.replace(cfg, load="ldg", prefetch=1)
    sass = cuda_binary.sass(KS.compile_stream("bfloat16", "nvfp4", "bfloat16", cfg, arch="sm_90a").artifacts.CUBIN)
    assert "LDL" not in sass and "STL" not in sass
    assert "LDG.E.U16" not in sass and "LDG.E.U8" not in sass
    if load == "bulk":
        assert "UBLKCP" in sass and "SYNCS.PHASECHK" in sass and "LDG.E.NA" not in sass
        assert sass.count("LDS.128") >= SL.loads(cfg.kc)
    else:
        assert sass.count("LDG.E.NA.128") >= 2 * SL.loads(cfg.kc)


@pytest.mark.compile
def test_stream_probe_is_gated_and_keeps_only_the_loads(monkeypatch, cuda_binary):
    from flashinfer.experimental.b12x.gemm.blockscaled._kernel_decode import PROBE_ENV

    base = KS.default_config(1, 28672, 4096)
    probe = dataclasses.replace(base, probe="loads")
    monkeypatch.delenv(PROBE_ENV, raising=False)
    assert "timing probe" in KS.why_not("bfloat16", "nvfp4", "bfloat16", probe)
    monkeypatch.setenv(PROBE_ENV, "1")
    assert KS.why_not("bfloat16", "nvfp4", "bfloat16", probe) is None
    assert KS.probe_variants(base)[:2] == (base, probe)
    sass = cuda_binary.sass(KS.compile_stream("bfloat16", "nvfp4", "bfloat16", probe, arch="sm_90a").artifacts.CUBIN)
    assert "UBLKCP" in sass and sass.count("LDS.128") >= SL.loads(base.kc) and "HMMA" not in sass


@pytest.mark.compile
def test_launch_bound_keeps_m16_builds_out_of_local_memory(cuda_binary):
    """8-warp M <= 16 bulk build (narrow N's default): with the launch bound (min_ctas 1, the default)
    ptxas takes the registers it needs and nothing spills (without one, ptxas of CuTe DSL 4.8.1 capped
    this build at 64 registers and spilled 32 bytes in the K loop on sm_90a)."""
    cfg = KS.default_config(16, 4096, 14336)
    assert cfg.warps == 8 and cfg.ntiles == 2 and cfg.load == "bulk" and cfg.min_ctas == 1
    sass = cuda_binary.sass(KS.compile_stream("bfloat16", "nvfp4", "bfloat16", cfg, arch="sm_90a").artifacts.CUBIN)
    assert "STL" not in sass and "LDL" not in sass
