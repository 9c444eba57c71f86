"""attention.paged kernels compile on the CPU for sm_90a and sm_120a (fake tensors, symbolic sizes).

Default tier: the decode and extend kernels at their default configs for bf16 and fp8 KV, the
schedules and the merge kernel, for both archs; the extend kernel's register use (ptxas -v on its
PTX, when a ptxas is installed). `slow`: every head dim / page size / group size / KV dtype /
config the caps accept.
"""

import dataclasses
import itertools
import re

import pytest
import torch

from flashinfer.experimental.b12x._lib import cuda_binary as CB
from flashinfer.experimental.b12x.attention.paged._config import (
    FUSED_SCHEDULE_MAX_BATCH,
    DecodeConfig,
    ExtendConfig,
    ScheduleConfig,
    default_config,
    default_extend_config,
    resident_ctas,
    why_not,
    why_not_extend,
)

pytestmark = pytest.mark.compile

ARCHS = ("sm_90a", "sm_120a")


def _modules():
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    from flashinfer.experimental.b12x.attention.paged import _kernel_decode, _kernel_split

    return _kernel_decode, _kernel_split


def _extend_module():
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    from flashinfer.experimental.b12x.attention.paged import _kernel_extend

    return _kernel_extend


def _targets(ptx: str) -> list[str]:
    return [line.split()[1] for line in ptx.splitlines() if line.startswith(".target")]


def _check_binary(fn, arch):
    ptx = fn.artifacts.PTX
    assert _targets(ptx) == [arch]
    assert fn.artifacts.CUBIN[:4] == b"\x7fELF"
    assert "wgmma" not in ptx and "tcgen05" not in ptx  # portable warp-level MMA only
    return ptx


def compile_flag_pair(arch, kv, shape, d, base_flags, **flag):
    """The decode kernel of `shape` (warps, keys, stages) with `base_flags`, without and with `flag`, at 32 / 8
    heads and head dim d: ([ptx, ptx], [ptxas resources, ...]); skips where the config does not fit `arch`."""
    kd, _ = _modules()
    dims = ("bfloat16", kv, 32, 8, d, d, 16)
    base = DecodeConfig(*shape, **base_flags)
    if why_not(*dims, base, arch) is not None:
        pytest.skip(why_not(*dims, base, arch))
    sched = ScheduleConfig(base.tile_keys, 33, 256)
    fns = [kd.compile_decode(*dims, c, arch=arch, schedule=sched) for c in (base, dataclasses.replace(base, **flag))]
    return [_check_binary(fn, arch) for fn in fns], [CB.resources(fn.artifacts.CUBIN) for fn in fns]


# the decode flags DECODE_LATENCY_FLAGS turns on in every default config, off: the baseline of the
# tests below that measure what one flag adds
NO_LATENCY_FLAGS = dict(fast_prologue=False, preload_lengths=False, direct_items=False)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_decode_default_config_compiles(arch, kv_dtype):
    kd, _ = _modules()
    cfg = default_config(kv_dtype, 128, 16, arch)
    fn = kd.compile_decode("bfloat16", kv_dtype, 32, 8, 128, 128, 16, cfg, arch=arch)
    ptx = _check_binary(fn, arch)
    mma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" if kv_dtype == "float8_e4m3fn" else "bf16.bf16.f32"
    assert mma in ptx and "ldmatrix.sync.aligned.m8n8.x4.trans" in ptx and "cp.async.cg.shared.global" in ptx
    if kv_dtype == "float8_e4m3fn":
        # e4m3 -> fp16 in registers: 2 cvt per 4 bytes of K and V, 2 prmt per 8 bytes of V, for each
        # 16 keys a warp's sub-tile holds (32 with the two-page sub-tiles of sm_90a's fp8 default)
        per16 = cfg.keys_per_warp // 16
        assert ptx.count("cvt.rn.f16x2.e4m3x2") == 64 * per16 and ptx.count("prmt.b32") == 16 * per16
    # 64-bit cache offsets: page * page_stride is a 64-bit multiply
    assert "mul.lo.s64" in ptx or "mad.lo.s64" in ptx or "mul.wide.s32" in ptx


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_decode_fused_merge_compiles(arch, kv_dtype, tmp_path):
    """fused_merge (lean_ticket off: its fenced form): one acq_rel ticket (atom.add at GPU scope) between a release and an acquire fence,
    the same mma work as the unfused kernel, which has no atomics or fences; no register spills."""
    kd, _ = _modules()
    cfg = dataclasses.replace(default_config(kv_dtype, 128, 16, arch), fused_merge=True, lean_ticket=False)
    fused = _check_binary(kd.compile_decode("bfloat16", kv_dtype, 32, 8, 128, 128, 16, cfg, arch=arch), arch)
    plain = kd.compile_decode(
        "bfloat16", kv_dtype, 32, 8, 128, 128, 16, default_config(kv_dtype, 128, 16, arch), arch=arch
    )
    plain = plain.artifacts.PTX
    atoms = [line.split()[0] for line in fused.splitlines() if line.strip().startswith("atom.")]
    assert atoms == ["atom.global.acq_rel.add.u32"]  # PTX's default scope: .gpu
    assert fused.count("fence.acq_rel.gpu;") == 2
    assert "atom." not in plain and "fence." not in plain
    mma = "mma.sync.aligned.m16n8k16"
    assert fused.count(mma) == plain.count(mma) > 0
    regs, spills = _ptxas_usage(fused, arch, tmp_path)
    assert spills == 0 and regs * 32 * cfg.warps <= 65536, (regs, spills)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_decode_one_launch_compiles(arch, kv_dtype, tmp_path):
    """fused_schedule + fused_merge: the work row comes from a warp-wide sum (redux.sync), scan and
    ballot over cache_seqlens; the schedule it recomputes is a compile argument, required."""
    kd, _ = _modules()
    base = default_config(kv_dtype, 128, 16, arch)
    cfg = dataclasses.replace(base, fused_merge=True, fused_schedule=True)
    dims = ("bfloat16", kv_dtype, 32, 8, 128, 128, 16)
    fn = kd.compile_decode(*dims, cfg, arch=arch, schedule=ScheduleConfig(64, 33, 256))
    ptx = _check_binary(fn, arch)
    plain = kd.compile_decode(*dims, base, arch=arch).artifacts.PTX
    assert "redux.sync" in ptx and "vote.sync.ballot" in ptx and "redux.sync" not in plain
    assert ptx.count("atom.global.acq_rel.add") == 1
    assert ptx.count("mma.sync.aligned.m16n8k16") == plain.count("mma.sync.aligned.m16n8k16")
    regs, spills = _ptxas_usage(ptx, arch, tmp_path)
    assert spills == 0 and regs * 32 * cfg.warps <= 65536, (regs, spills)
    with pytest.raises(ValueError, match="schedule must be a ScheduleConfig with fused_schedule and None without"):
        kd.compile_decode(*dims, cfg, arch=arch)
    with pytest.raises(ValueError, match="schedule must be a ScheduleConfig with fused_schedule and None without"):
        kd.compile_decode(*dims, base, arch=arch, schedule=ScheduleConfig())


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_decode_pdl_compiles(arch, kv_dtype):
    """pdl "wait": one griddepcontrol.wait before any global access, then launch_dependents; the
    kernel otherwise unchanged (same mma count). "prefetch": L2 prefetches of K and V rows before
    the wait, and no global store before it (the scratch rows are written after)."""
    kd, _ = _modules()
    dims = ("bfloat16", kv_dtype, 32, 8, 128, 128, 16)
    base = dataclasses.replace(default_config(kv_dtype, 128, 16, arch), fused_merge=True, fused_schedule=True)
    sched = ScheduleConfig(64, 33, 256)
    plain = kd.compile_decode(*dims, base, arch=arch, schedule=sched).artifacts.PTX
    assert "griddepcontrol" not in plain
    for pdl in ("wait", "prefetch"):
        ptx = _check_binary(
            kd.compile_decode(*dims, dataclasses.replace(base, pdl=pdl), arch=arch, schedule=sched), arch
        )
        assert ptx.count("griddepcontrol.wait") == 1 and ptx.count("griddepcontrol.launch_dependents") == 1
        assert ptx.index("griddepcontrol.wait") < ptx.index("griddepcontrol.launch_dependents")
        head = ptx[: ptx.index("griddepcontrol.wait")]
        assert "st.global" not in head and "atom." not in head and "cp.async" not in head
        mma = "mma.sync.aligned.m16n8k16"
        assert ptx.count(mma) == plain.count(mma) > 0
        if pdl == "wait":
            assert "ld.global" not in head and "prefetch.global.L2" not in head
        else:
            assert head.count("prefetch.global.L2") == 2  # one K line and one V line a loop step


def _loads_before_first_barrier(ptx: str) -> int:
    head = ptx[: ptx.index("bar.sync")]
    return head.count("ld.global.")


@pytest.mark.parametrize("arch", ARCHS)
def test_decode_fp8_fast_prologue_compiles(arch, tmp_path):
    """fast_prologue (fp8): the k/v descale loads leave before the first CTA barrier (two more global
    loads there), Q is staged by 16-byte vectors (no 16-bit shared loads or stores left), the main
    loop is unchanged (same mma and cvt counts), no spills. For bf16 KV the flag changes nothing."""
    kd, _ = _modules()
    base = dataclasses.replace(default_config("float8_e4m3fn", 128, 16, arch), fused_merge=True, fused_schedule=True)
    base = dataclasses.replace(base, **NO_LATENCY_FLAGS)  # the default has them (DECODE_LATENCY_FLAGS)
    fast = dataclasses.replace(base, fast_prologue=True)
    dims = ("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16)
    sched = ScheduleConfig(64, 33, 256)
    plain = kd.compile_decode(*dims, base, arch=arch, schedule=sched).artifacts.PTX
    ptx = _check_binary(kd.compile_decode(*dims, fast, arch=arch, schedule=sched), arch)
    assert _loads_before_first_barrier(ptx) == _loads_before_first_barrier(plain) + 2
    assert "ld.shared.b16" in plain and "st.shared.b16" in plain  # the per-element staging loop
    assert "ld.shared.b16" not in ptx and "st.shared.b16" not in ptx
    assert ptx.count("ld.shared.v4") == plain.count("ld.shared.v4") + 2  # 16 bf16 of Q a thread
    assert ptx.count("st.shared.v4") == plain.count("st.shared.v4") + 2  # 16 fp16 of Q a thread
    for op in ("mma.sync.aligned.m16n8k16", "cvt.rn.f16x2.e4m3x2", "prmt.b32"):
        assert ptx.count(op) == plain.count(op), op
    regs, spills = _ptxas_usage(ptx, arch, tmp_path)
    assert spills == 0 and regs * 32 * fast.warps <= 65536, (regs, spills)
    bf16 = ("bfloat16", "bfloat16", 32, 8, 128, 128, 16)
    same = kd.compile_decode(*bf16, dataclasses.replace(base, fast_prologue=True), arch=arch, schedule=sched)
    assert same.artifacts.PTX.count("bar.sync") == kd.compile_decode(
        *bf16, base, arch=arch, schedule=sched
    ).artifacts.PTX.count("bar.sync")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_decode_preloaded_lengths_compile(arch, kv_dtype, tmp_path):
    """preload_lengths: the fused schedule's two passes over the batch are unrolled (4 warp sums and
    4 ballots for 128 requests, one of each in the loop form) on lengths loaded up front; the main
    loop is unchanged; without fused_schedule the flag changes nothing."""
    kd, _ = _modules()
    base = dataclasses.replace(default_config(kv_dtype, 128, 16, arch), fused_merge=True, fused_schedule=True)
    base = dataclasses.replace(base, **NO_LATENCY_FLAGS)  # the default has them (DECODE_LATENCY_FLAGS)
    dims = ("bfloat16", kv_dtype, 32, 8, 128, 128, 16)
    sched = ScheduleConfig(64, 33, 256)
    plain = kd.compile_decode(*dims, base, arch=arch, schedule=sched).artifacts.PTX
    cfg = dataclasses.replace(base, preload_lengths=True)
    ptx = _check_binary(kd.compile_decode(*dims, cfg, arch=arch, schedule=sched), arch)
    steps = FUSED_SCHEDULE_MAX_BATCH // 32
    assert plain.count("redux.sync") == 1 and ptx.count("redux.sync") == steps
    assert plain.count("vote.sync.ballot") == 1 and ptx.count("vote.sync.ballot") == steps
    assert ptx.count("mma.sync.aligned.m16n8k16") == plain.count("mma.sync.aligned.m16n8k16")
    regs, spills = _ptxas_usage(ptx, arch, tmp_path)
    assert spills == 0 and regs * 32 * cfg.warps <= 65536, (regs, spills)
    unfused = dataclasses.replace(base, fused_schedule=False)
    a = kd.compile_decode(*dims, unfused, arch=arch).artifacts.PTX
    b = kd.compile_decode(*dims, dataclasses.replace(unfused, preload_lengths=True), arch=arch).artifacts.PTX
    assert a.count("\n") == b.count("\n") and "redux.sync" not in b


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(
    "cfg",
    [DecodeConfig(4, 16, 3, True, True, True, 3), DecodeConfig(4, 16, 4, True, True, True, 3),
     DecodeConfig(2, 16, 3, True, True, True, 6), DecodeConfig(4, 16, 6, True, True), DecodeConfig(2, 16, 4, True, True, True)],
    ids=["w4s3-o3", "w4s4-o3", "w2s3-o6", "w4s6", "w2s4"],
)  # fmt: skip
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_decode_streaming_configs_compile(arch, cfg, kv_dtype, tmp_path):
    """The fp8 streaming sweep's configs (docs/predictions/attention.md): more stages, two-warp CTAs,
    and the min_ctas launch bound, which ptxas must honour (registers x threads x min_ctas <= 64K;
    it spills a few loop invariants for that, bounded here so growth shows). bf16 KV compiles too:
    the bench accepts an entry only if both KV dtypes do."""
    kd, _ = _modules()
    if why_not("bfloat16", kv_dtype, 32, 8, 128, 128, 16, cfg, arch) is not None:
        pytest.skip(why_not("bfloat16", kv_dtype, 32, 8, 128, 128, 16, cfg, arch))
    dims = ("bfloat16", kv_dtype, 32, 8, 128, 128, 16)
    ptx = _check_binary(
        kd.compile_decode(*dims, cfg, arch=arch, schedule=ScheduleConfig(16 * cfg.warps, 50, 256)), arch
    )
    assert re.search(rf"cp\.async\.wait_group\s+{cfg.stages - 2};", ptx)  # the main loop's wait
    if cfg.min_ctas:
        assert f".minnctapersm {cfg.min_ctas}" in ptx
    regs, spills = _ptxas_usage(ptx, arch, tmp_path)
    assert regs * 32 * cfg.warps * max(1, cfg.min_ctas) <= 65536, (regs, spills)
    assert spills <= (96 if cfg.min_ctas else 0), (regs, spills)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_decode_two_page_sub_tiles_compile(arch, kv_dtype, tmp_path):
    """keys_per_warp 32 on 16-key pages: the same copies (cp.async count) and mma as 32 keys on
    64-key pages, plus one page-table read per sub-tile for its second page (prologue: stages - 1,
    main loop: 1); fp8 fits the register budget of two CTAs an SM without spills."""
    kd, _ = _modules()
    cfg = DecodeConfig(4, 32, 2 if arch == "sm_120a" else 3, True, True, fast_prologue=True)
    dims = ("bfloat16", kv_dtype, 32, 8, 128, 128)
    if why_not(*dims, 16, cfg, arch) is not None:
        pytest.skip(why_not(*dims, 16, cfg, arch))
    sched = ScheduleConfig(cfg.tile_keys, 33, 512)
    two = _check_binary(kd.compile_decode(*dims, 16, cfg, arch=arch, schedule=sched), arch)
    one = kd.compile_decode(*dims, 64, cfg, arch=arch, schedule=sched).artifacts.PTX
    for op in ("cp.async.cg.shared.global", "mma.sync.aligned.m16n8k16", "ldmatrix.sync.aligned"):
        assert two.count(op) == one.count(op) > 0, op
    assert two.count("ld.global.") == one.count("ld.global.") + (cfg.stages - 1) + 2
    regs, spills = _ptxas_usage(two, arch, tmp_path)
    assert spills == 0, (regs, spills)
    if kv_dtype == "float8_e4m3fn":
        assert regs * 32 * cfg.warps * 2 <= 65536, regs


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("max_batch", [8, 128], ids=["eight-warp", "wide"])
def test_decode_fp8_batch_tiles_compile(arch, max_batch, tmp_path):
    """fp8's two-page tile at the batches that change its warps (FP8_EIGHT_WARP_MAX: 8 warps, one CTA an
    SM; FP8_WIDE_BATCH: 2 warps, five an SM), as the one-launch plan runs it: no spills, and the
    registers let the CTAs an SM that `resident_ctas` counts on run. sm_120a's default keeps 4 warps x
    16 keys; its 99 KB fit 2 x 32 x 2 but not 8 x 32 x 2, so that arch compiles the wide tile only."""
    kd, _ = _modules()
    tile = DecodeConfig(8 if max_batch == 8 else 2, 32, 2)
    cfg = default_config("float8_e4m3fn", 128, 16, "sm_90a", max_batch=max_batch)
    assert (cfg.warps, cfg.keys_per_warp, cfg.stages) == (tile.warps, 32, 2)
    cfg = dataclasses.replace(cfg, fused_merge=True, fused_schedule=True)
    dims = ("bfloat16", "float8_e4m3fn", 32, 8, 128, 128)
    if why_not(*dims, 16, cfg, arch) is not None:
        assert arch != "sm_90a" and tile.warps == 8, why_not(*dims, 16, cfg, arch)
        pytest.skip(why_not(*dims, 16, cfg, arch))
    fn = kd.compile_decode(*dims, 16, cfg, arch=arch, schedule=ScheduleConfig(cfg.tile_keys, 17, 512))
    regs, spills = _ptxas_usage(_check_binary(fn, arch), arch, tmp_path)
    assert spills == 0, (regs, spills)
    assert regs * 32 * cfg.warps * resident_ctas("float8_e4m3fn", 128, cfg, arch) <= 65536, regs


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("preload", [False, True])
def test_decode_direct_items_compile(arch, preload, tmp_path):
    """direct_items: a batch-size test before the scan (which stays, for split batches), one extra
    length load on the direct path; the main loop is unchanged; no spills."""
    kd, _ = _modules()
    base = DecodeConfig(4, 16, 3, True, True, fast_prologue=True, preload_lengths=preload)
    dims = ("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16)
    sched = ScheduleConfig(64, 33, 256)
    plain = kd.compile_decode(*dims, base, arch=arch, schedule=sched).artifacts.PTX
    cfg = dataclasses.replace(base, direct_items=True)
    ptx = _check_binary(kd.compile_decode(*dims, cfg, arch=arch, schedule=sched), arch)
    assert ptx.count("redux.sync") == plain.count("redux.sync") > 0  # the scan is still there
    assert ptx.count("ld.global.") == plain.count("ld.global.") + 1
    assert ptx.count("mma.sync.aligned.m16n8k16") == plain.count("mma.sync.aligned.m16n8k16")
    regs, spills = _ptxas_usage(ptx, arch, tmp_path)
    assert spills == 0 and regs * 32 * cfg.warps <= 65536, (regs, spills)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("unroll", [4, 8])
def test_decode_batched_merge_compiles(arch, unroll, tmp_path):
    """merge_unroll 4 / 8: the fused merge loads `unroll` items (G = 4 rows x (1 LSE + Dv / 32 columns)
    a lane) in straight-line code before folding them: 20 more global loads per extra item than the
    two-item loop of the default; the main loop is unchanged; no spills."""
    kd, _ = _modules()
    base = dataclasses.replace(default_config("float8_e4m3fn", 128, 16, arch), fused_merge=True, fused_schedule=True)
    dims = ("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16)
    sched = ScheduleConfig(64, 33, 256)
    plain = kd.compile_decode(*dims, base, arch=arch, schedule=sched).artifacts.PTX
    cfg = dataclasses.replace(base, merge_unroll=unroll)
    ptx = _check_binary(kd.compile_decode(*dims, cfg, arch=arch, schedule=sched), arch)
    assert ptx.count("ld.global.") - plain.count("ld.global.") == (unroll - 2) * 4 * (1 + 128 // 32)
    assert ptx.count("mma.sync.aligned.m16n8k16") == plain.count("mma.sync.aligned.m16n8k16")
    regs, spills = _ptxas_usage(ptx, arch, tmp_path)
    assert spills == 0 and regs * 32 * cfg.warps <= 65536, (regs, spills)


def test_fused_merge_acquire_invalidates_l1():
    """The merging CTA reads partial rows other SMs wrote: its acquire fence must drop stale L1 lines
    (SASS CCTL.IVALL after MEMBAR.GPU) before the first load of them. Checked on the cubin's SASS."""
    kd, _ = _modules()
    cfg = DecodeConfig(4, 16, 3, fused_merge=True)
    fn = kd.compile_decode("bfloat16", "bfloat16", 32, 8, 128, 128, 16, cfg, arch="sm_90a")
    ops = CB.instructions(fn.artifacts.CUBIN)
    atom = next(i for i, op in enumerate(ops) if op.startswith("ATOMG.E.ADD.STRONG.GPU"))
    acquire = next(i for i in range(atom + 1, len(ops)) if ops[i].startswith("MEMBAR"))
    assert ops[acquire].startswith("MEMBAR.ALL.GPU") or ops[acquire].startswith("MEMBAR.SC.GPU")
    ivall = next(i for i in range(acquire, len(ops)) if ops[i] == "CCTL.IVALL")
    first_load = next(i for i in range(acquire, len(ops)) if ops[i].startswith("LDG"))
    assert ivall < first_load


@pytest.mark.parametrize("arch", ARCHS)
def test_schedule_and_merge_compile(arch):
    _, ks = _modules()
    _check_binary(ks.compile_schedule(ScheduleConfig(), arch=arch), arch)
    _check_binary(ks.compile_merge("bfloat16", 32, 8, 128, arch=arch), arch)


def test_launcher_signature_and_symbolic_sizes():
    """The disk-loaded launcher names its contract: sizes shared across tensors are one symbol."""
    kd, _ = _modules()
    key = ("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16, default_config("float8_e4m3fn", 128, 16, "sm_90a"))
    kd.compile_decode.precompile(*key, arch="sm_90a")  # into this test's disk cache
    kd.compile_decode.cache_clear()
    fn = kd.compile_decode(*key, arch="sm_90a")  # the tvm-ffi function loaded from disk
    with pytest.raises(TypeError) as info:
        fn(torch.zeros(1))
    sig = str(info.value)
    for part in (
        "mQ: Tensor([n0, 32, 128], bfloat16)",
        "mK: Tensor([n1, 16, 8, 64], float16)",  # fp8 cache as an fp16 view: two e4m3 per element
        "mOut: Tensor([n0, 32, 128], bfloat16), mLse: Tensor([n0, 32], float32)",
        "mWork: Tensor([n4, 4], int32)",
        "mPartO: Tensor([n4, 32, 128], float32)",
        "mKDesc: Tensor([n2, 8], float32)",
        "scale_log2: float32, has_sink: int32",
    ):
        assert part in sig, sig


def test_config_predicate():
    # 32 keys a warp on 16-key pages: a sub-tile spans two pages (the kernel copies it in two pieces)
    assert why_not("bfloat16", "bfloat16", 32, 8, 128, 128, 16, DecodeConfig(keys_per_warp=32), "sm_90a") is None
    big = DecodeConfig(warps=8, keys_per_warp=32, stages=4)
    assert "bytes of shared memory, sm_120a has" in why_not("bfloat16", "bfloat16", 32, 8, 256, 256, 64, big, "sm_120a")
    for arch, kv in itertools.product(ARCHS, ("bfloat16", "float8_e4m3fn")):
        for d in (64, 128, 256):
            assert why_not("bfloat16", kv, 32, 8, d, d, 16, default_config(kv, d, 16, arch), arch) is None


def _sweep():
    for arch, kv, d, page, (hq, hkv) in itertools.product(
        ARCHS, ("bfloat16", "float16", "float8_e4m3fn"), (64, 128, 256), (16, 32, 64, 128), ((8, 8), (32, 8), (64, 4))
    ):
        q = "float16" if kv == "float16" else "bfloat16"
        yield arch, q, kv, d, page, hq, hkv, default_config(kv, d, page, arch)
    for arch, cfg in itertools.product(
        ARCHS, (DecodeConfig(4, 32, 2), DecodeConfig(8, 16, 2), DecodeConfig(2, 16, 4), DecodeConfig(4, 16, 3))
    ):
        yield arch, "bfloat16", "float8_e4m3fn", 128, 64, 32, 8, cfg
    for arch, kv, d, (hq, hkv) in itertools.product(
        ARCHS, ("float16", "float8_e4m3fn"), (64, 256), ((8, 8), (64, 4))
    ):  # the fused merge at its extremes: G 1 and 16 (four passes of 4 rows), Dv 64 and 256; with
        # the fused schedule at D 64
        cfg = dataclasses.replace(default_config(kv, d, 16, arch), fused_merge=True, fused_schedule=d == 64)
        yield arch, "float16", kv, d, 16, hq, hkv, cfg


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv, page", [("bfloat16", 32), ("bfloat16", 128), ("float8_e4m3fn", 128)])
def test_decode_compiles_at_the_other_page_sizes(arch, kv, page):
    """Pages of 32 and 128 keys (the issue's 16 / 32 / 64 / 128; the gpu tier runs 16 and 64): the default decode
    config accepts them and its kernel builds, its page walk addressing whole pages (session 65's audit found no
    decode compile at these sizes outside the slow sweep)."""
    kd, _ = _modules()
    cfg = default_config(kv, 128, page, arch)
    assert why_not("bfloat16", kv, 32, 8, 128, 128, page, cfg, arch) is None
    _check_binary(kd.compile_decode("bfloat16", kv, 32, 8, 128, 128, page, cfg, arch=arch), arch)


def test_clear_caches_forgets_the_compiled_kernels():
    """attention.paged.clear_caches(): the op's kernels leave memory (the next call loads or compiles again)."""
    from flashinfer.experimental.b12x.attention import paged

    kd, ks = _modules()
    cfg = default_config("bfloat16", 128, 32, "sm_90a")
    args = ("bfloat16", "bfloat16", 32, 8, 128, 128, 32, cfg)
    kd.compile_decode(*args, arch="sm_90a")
    ks.compile_merge("bfloat16", 32, 8, 128, arch="sm_90a")
    assert kd.compile_decode.resolved(*args, arch="sm_90a") and ks.compile_merge.resolved(
        "bfloat16", 32, 8, 128, arch="sm_90a"
    )
    paged.clear_caches()
    assert not kd.compile_decode.resolved(*args, arch="sm_90a")
    assert not ks.compile_merge.resolved("bfloat16", 32, 8, 128, arch="sm_90a")


@pytest.mark.slow
@pytest.mark.parametrize("arch,q,kv,d,page,hq,hkv,cfg", list(_sweep()))
def test_decode_sweep_compiles(arch, q, kv, d, page, hq, hkv, cfg):
    kd, ks = _modules()
    if why_not(q, kv, hq, hkv, d, d, page, cfg, arch) is not None:
        pytest.skip(why_not(q, kv, hq, hkv, d, d, page, cfg, arch))
    schedule = ScheduleConfig() if cfg.fused_schedule else None
    _check_binary(kd.compile_decode(q, kv, hq, hkv, d, d, page, cfg, arch=arch, schedule=schedule), arch)
    _check_binary(ks.compile_merge(q, hq, hkv, d, arch=arch), arch)


# ---- extend / verify --------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("mode", ["extend", "verify"])
def test_extend_default_config_compiles(arch, kv_dtype, mode):
    ke = _extend_module()
    cfg = default_extend_config(kv_dtype, 128, arch, mode)
    ptx = _check_binary(ke.compile_extend("bfloat16", kv_dtype, 32, 8, 128, 128, 16, cfg, arch=arch), arch)
    mma = "m16n8k16.row.col.f32.f16.f16.f32" if kv_dtype == "float8_e4m3fn" else "m16n8k16.row.col.f32.bf16.bf16.f32"
    # per KV tile and 16-row block: (block_n / 8) * (D / 16) mma for S plus (Dv / 8) * (block_n / 16)
    # for O; a warp owns row_blocks such blocks (2: the bf16 extend default, FlashAttention-2's 32 rows)
    per_tile = cfg.row_blocks * ((cfg.block_n // 8) * (128 // 16) + (128 // 8) * (cfg.block_n // 16))
    # stagger (sm_90a's extend default) traces three tiles' worth: the first group's step, the second
    # group's peeled first step and its late step (test_paged_extend_compile checks the shape)
    assert ptx.count(mma) == (3 if cfg.stagger else 1) * per_tile
    assert "ldmatrix.sync.aligned.m8n8.x4.trans" in ptx and "cp.async.cg.shared.global" in ptx
    if kv_dtype == "float8_e4m3fn":
        # e4m3 -> fp16 in registers: K (block_n x D) and V (block_n x Dv) bytes, 2 cvt per 4 bytes
        assert ptx.count("cvt.rn.f16x2.e4m3x2") == 2 * cfg.block_n * 128 * 2 // 4 // 32
    assert "mul.lo.s64" in ptx or "mad.lo.s64" in ptx or "mul.wide.s32" in ptx  # 64-bit page offsets


@pytest.mark.parametrize("arch", ARCHS)
def test_extend_two_row_blocks_per_warp_compiles(arch):
    """row_blocks 2 (32 rows a warp, Q re-read per head-dim block): twice the mma per tile and per
    warp, Q's ldmatrix inside the tile loop (D / 16 of them) next to K's and V's."""
    ke = _extend_module()
    cfg = ExtendConfig(block_m=128, block_n=32, stages=2, row_blocks=2)
    ptx = _check_binary(ke.compile_extend("bfloat16", "bfloat16", 32, 8, 128, 128, 16, cfg, arch=arch), arch)
    assert ptx.count("m16n8k16.row.col.f32.bf16.bf16.f32") == 2 * ((32 // 8) * (128 // 16) + (128 // 8) * (32 // 16))
    # per tile: Q 2 x D/16, K (32 keys x D) / (16 x 16), V (Dv x 32 keys) / (16 x 16)
    assert ptx.count("ldmatrix.sync.aligned") == 2 * 8 + 16 + 16


@pytest.mark.parametrize("arch", ARCHS)
def test_extend_schedule_compiles(arch):
    _, ks = _modules()
    _check_binary(ks.compile_extend_schedule(16, arch=arch), arch)


def _ptxas_usage(ptx: str, arch: str, tmp_path) -> tuple[int, int]:
    """(registers, spill bytes) of the PTX's kernel per the installed ptxas (PTX ISA lowered to what
    that ptxas reads: the kernels use nothing newer)."""
    import re
    import shutil
    import subprocess

    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas on PATH")
    version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"release (\d+)\.(\d+)", version)
    if found is None or int(found.group(1)) < 12:
        pytest.skip(f"ptxas too old: {version.strip().splitlines()[-1:]}")
    isa = f"{int(found.group(1)) - 4}.{found.group(2)}"  # CUDA 13.0 reads PTX ISA 9.0, 12.8 reads 8.8
    src = tmp_path / "k.ptx"
    src.write_text(re.sub(r"^\.version \d+\.\d+", f".version {isa}", ptx, flags=re.M))
    res = subprocess.run([ptxas, f"-arch={arch}", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True)  # fmt: skip
    if res.returncode:
        pytest.skip(f"ptxas could not read the PTX: {res.stderr.strip()[:200]}")
    regs = int(re.search(r"Used (\d+) registers", res.stderr).group(1))
    spills = int(re.search(r"(\d+) bytes spill stores", res.stderr).group(1))
    return regs, spills


@pytest.mark.parametrize("mode", ["extend", "verify"])
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_extend_fits_the_register_budget(kv_dtype, mode, tmp_path):
    """16 rows a warp (fp8 extend, verify): Q, S and O stay in registers, no spills, and few enough
    registers for one 8-warp CTA (block_m 128) or two 4-warp CTAs (64) per SM. 32 rows a warp (the
    bf16 extend default, 4 warps): two CTAs per SM; ptxas spills a few loop-invariant values, reloaded
    once per KV tile, which the H200 measurement that chose it already pays (bounded here so growth
    shows)."""
    ke = _extend_module()
    cfg = default_extend_config(kv_dtype, 128, "sm_90a", mode)
    fn = ke.compile_extend("bfloat16", kv_dtype, 32, 8, 128, 128, 16, cfg, arch="sm_90a")
    regs, spills = _ptxas_usage(fn.artifacts.PTX, "sm_90a", tmp_path)
    assert regs * 32 * cfg.warps * (2 if cfg.warps == 4 else 1) <= 65536, (regs, spills)
    assert spills <= (256 if cfg.row_blocks == 2 else 0), (regs, spills)


def test_extend_config_predicate():
    assert why_not_extend("bfloat16", "bfloat16", 32, 8, 128, 128, 16, ExtendConfig(block_m=48), "sm_90a") == (
        "config out of range: ExtendConfig(block_m=48, block_n=64, stages=2, row_blocks=1)"
    )
    big = ExtendConfig(block_m=128, block_n=128, stages=3)
    assert "bytes of shared memory, sm_120a has" in why_not_extend(
        "bfloat16", "bfloat16", 32, 8, 128, 128, 16, big, "sm_120a"
    )
    for arch, kv in itertools.product(ARCHS, ("bfloat16", "float8_e4m3fn")):
        for d in (64, 128, 256):
            for mode in ("extend", "verify"):
                cfg = default_extend_config(kv, d, arch, mode)
                assert why_not_extend("bfloat16", kv, 32, 8, d, d, 16, cfg, arch) is None


def _extend_sweep():
    for arch, kv, d, page, (hq, hkv) in itertools.product(
        ARCHS, ("bfloat16", "float16", "float8_e4m3fn"), (64, 128, 256), (16, 128), ((8, 8), (40, 8), (64, 4))
    ):
        q = "float16" if kv == "float16" else "bfloat16"
        yield arch, q, kv, d, page, hq, hkv, default_extend_config(kv, d, arch)
        yield arch, q, kv, d, page, hq, hkv, default_extend_config(kv, d, arch, "verify")
    alternatives = (ExtendConfig(128, 64), ExtendConfig(32, 32, 3), ExtendConfig(16, 128), ExtendConfig(128, 64, 2, 2))
    for arch, cfg in itertools.product(ARCHS, alternatives):
        yield arch, "bfloat16", "float8_e4m3fn", 128, 64, 32, 8, cfg


@pytest.mark.slow
@pytest.mark.parametrize("arch,q,kv,d,page,hq,hkv,cfg", list(_extend_sweep()))
def test_extend_sweep_compiles(arch, q, kv, d, page, hq, hkv, cfg):
    ke = _extend_module()
    if why_not_extend(q, kv, hq, hkv, d, d, page, cfg, arch) is not None:
        pytest.skip(why_not_extend(q, kv, hq, hkv, d, d, page, cfg, arch))
    _check_binary(ke.compile_extend(q, kv, hq, hkv, d, d, page, cfg, arch=arch), arch)
