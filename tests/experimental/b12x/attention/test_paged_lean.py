"""The B = 1 latency knobs of the decode kernel on the CPU (`DecodeConfig.lean_ticket`, bench flag k;
`DecodeConfig.early_pages`, bench flag e; docs/predictions/attention.md, "Session 10").

reference: the bench entries and the predicate; the page-table prefetch's line map
(`_config.early_page_entry`, the kernel's mirror) touches every 128-byte line of every live row, for
rows at any alignment, and the grids the bench launches cover the table; the planned lifecycle
with the knobs on CPU tensors (reference backend) fills NaN-poisoned outputs with the reference.
compile: sm_90a and sm_120a, the knobs change no math (same mma / cp.async / barrier counts), the
lean ticket has no fence.acq_rel (one MEMBAR.GPU in the SASS instead of three, the acquire's L1
invalidation still before the merge's first load), early_pages one L2 prefetch before the lengths
load; no spills. The GPU tier is test_paged_lean_gpu.py.
"""

import dataclasses
import re
import warnings

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib import cuda_binary as CB
from flashinfer.experimental.b12x.attention.paged._config import (
    DecodeConfig,
    ScheduleConfig,
    early_page_entry,
    early_page_lines,
    parse_decode_entry,
    split_schedule,
    why_not,
)
from flashinfer.experimental.b12x.attention.paged.api import Selection

from .paged_cases import make_case
from .test_paged_compile import _check_binary, _modules, _ptxas_usage

ARCHS = ("sm_90a", "sm_120a")
LATENCY = dict(fused_merge=True, fused_schedule=True, fast_prologue=True, preload_lengths=True, direct_items=True)
W8 = DecodeConfig(8, 16, 2, **LATENCY)  # 8x16x2fspld, the session-9 winner (sm_90a: 136 KB of shared memory)
W4 = DecodeConfig(4, 16, 2, **LATENCY)  # fits sm_120a's 99 KB
paged = b12x.attention.paged


# ---- reference tier ------------------------------------------------------------------------------
@pytest.mark.reference
def test_bench_entries_and_predicate():
    decode, flags, target, min_chunk = parse_decode_entry("8x16x2fspldke:m128")
    assert decode == dataclasses.replace(W8, lean_ticket=True, early_pages=True)
    assert (flags, target, min_chunk) == (set("fspldke"), None, 128)
    assert parse_decode_entry("8x16x2fspldk")[0] == dataclasses.replace(W8, lean_ticket=True)
    assert parse_decode_entry("8x16x2fsplde")[0] == dataclasses.replace(W8, early_pages=True)
    assert "lean_ticket=True, early_pages=True" in repr(decode)
    assert repr(W8) == repr(dataclasses.replace(W8, lean_ticket=False))  # the old form when off
    for bad in ("hk", "hfse", "8x16x2fkk"):
        with pytest.raises(ValueError):
            parse_decode_entry(bad)
    dims = ("bfloat16", "bfloat16", 32, 8, 128, 128, 16)
    assert why_not(*dims, decode, "sm_90a") is None
    assert "lean_ticket must be a bool" in why_not(*dims, dataclasses.replace(W8, lean_ticket=1), "sm_90a")
    assert "early_pages must be a bool" in why_not(*dims, dataclasses.replace(W8, early_pages="y"), "sm_90a")


def _lines_of(base, stride, batch, width, prefetched):
    """(128-byte lines the rows' entries span, lines the prefetches touch); addresses in entries."""
    need = {(base + r * stride + e) // 32 for r in range(batch) for e in range(width)}
    got = {(base + r * stride + e) // 32 for r, e in prefetched}
    return need, got


@pytest.mark.reference
@pytest.mark.parametrize("batch", [1, 3, 8, 33])
@pytest.mark.parametrize("width", [1, 2, 31, 32, 33, 64, 100, 513])
def test_early_page_lines_cover_every_row(batch, width):
    """Every line a live row spans is prefetched, whatever the table's alignment (base offset and row
    stride in entries; strided views of a wider table included), and no prefetch leaves its row."""
    for base, extra in ((0, 0), (5, 0), (31, 7), (17, 100)):
        stride = width + extra
        lines = batch * early_page_lines(width)
        prefetched = [early_page_entry(j, batch, width) for j in range(lines + 40)]
        assert all(p is None for p in prefetched[lines:])
        inside = [p for p in prefetched[:lines]]
        assert all(0 <= r < batch and 0 <= e < width for r, e in inside)
        need, got = _lines_of(base, stride, batch, width, inside)
        assert need == got, (base, stride, sorted(need - got))
    assert early_page_entry(0, 1, 0) is None  # an empty table: nothing


@pytest.mark.reference
@pytest.mark.parametrize("cfg", [W8, W4], ids=["8x16x2", "4x16x2"])
def test_bench_grids_cover_the_page_table(cfg):
    """The bench's decode shapes (B <= 32, L <= 32k, 8 KV heads, page 16) launch at least one thread per
    prefetched line; so does the block's step (4 KV heads, B 1..32, 1k context)."""
    for hkv in (8, 4):
        sched = split_schedule(cfg, "bfloat16", 128, hkv, 132, "sm_90a")
        for batch in (1, 8, 32):
            for kv_len in (1024, 8192, 32768):
                rows = batch + sched.target_items  # bind's work view: the grid's CTA rows
                lines = batch * early_page_lines(kv_len // 16)
                assert rows * hkv * 32 * cfg.warps >= lines, (hkv, batch, kv_len)


@pytest.mark.reference
@pytest.mark.parametrize("entry", ["8x16x2fspldk", "8x16x2fsplde", "8x16x2fspldke:m128", "4x16x3fke"])
def test_cpu_lifecycle_with_the_knobs_matches_the_reference(entry):
    """plan(override) -> prepare -> bind -> run on CPU tensors (the reference backend) with the knobs:
    the plan validates them, and the NaN-poisoned outputs get the reference's rows."""
    decode, _, _, min_chunk = parse_decode_entry(entry)
    case = make_case([1, 300, 33], num_q_heads=8, num_kv_heads=2, head_dim=64, page_size=16, seed=len(entry))
    sched = split_schedule(decode, "bfloat16", 64, 2, 132, "sm_90a")
    sched = ScheduleConfig(sched.tile_keys, sched.target_items, min_chunk or sched.min_chunk)
    check_cpu_lifecycle(case, paged.plan(cpu_caps(case), override=Selection(decode, sched)))


def cpu_caps(case):
    """Decode caps on CPU for `case` (3 requests, Hq 8 / Hkv 2, D 64, page 16)."""
    work = paged.default_max_work_items(3, 2)
    return paged.Caps(
        device="cpu", mode="decode", dtype="bfloat16", kv_dtype="bfloat16", num_q_heads=8, num_kv_heads=2,
        head_dim_qk=64, head_dim_vo=64, page_size=16, max_total_q=3, max_batch=3,
        max_page_table_width=case.page_table.shape[1], max_work_items=work,
        max_partial_rows=paged.default_max_partial_rows(work, 8), num_cache_pages=case.k_cache.shape[0],
    )  # fmt: skip


def check_cpu_lifecycle(case, plan):
    """prepare -> bind -> run of `plan` on `case`'s CPU tensors into NaN-poisoned outputs: exactly the
    reference's rows and LSEs."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="b12x: preparing on cpu")
        b12x.PreparationSession("cpu").prepare([plan])
    out = torch.full((3, 8, 64), float("nan"), dtype=torch.bfloat16)
    lse = torch.full((3, 8), float("nan"))
    binding = paged.bind(plan, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                         cache_seqlens=case.cache_seqlens, output=out, lse=lse)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paged.run(binding=binding)
    ref_out, ref_lse = paged.paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q
    )
    assert not out.isnan().any() and not lse.isnan().any()
    torch.testing.assert_close(out.float(), ref_out.to(torch.bfloat16).float(), rtol=0, atol=0)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=0)


# ---- compile tier --------------------------------------------------------------------------------
def _sass(cubin: bytes) -> list[str]:
    """The cubin's SASS instructions in order (predicates kept)."""
    return CB.instructions(cubin)


def _compile(cfg, arch, kv_dtype="bfloat16"):
    kd, _ = _modules()
    dims = ("bfloat16", kv_dtype, 32, 8, 128, 128, 16)
    assert why_not(*dims, cfg, arch) is None
    sched = ScheduleConfig(cfg.tile_keys, 17 if cfg.warps == 8 else 33, 128) if cfg.fused_schedule else None
    return kd.compile_decode(*dims, cfg, arch=arch, schedule=sched)


SAME_WORK = ("mma.sync.aligned.m16n8k16", "cvt.rn.f16x2.e4m3x2", "cp.async.cg.shared.global", "bar.sync",
             "atom.global.acq_rel.add", "redux.sync")  # fmt: skip


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_lean_ticket_and_early_pages_compile(arch, kv_dtype, tmp_path):
    base = W8 if arch == "sm_90a" else W4
    plain = _compile(base, arch, kv_dtype).artifacts.PTX
    assert plain.count("fence.acq_rel.gpu;") == 2 and "prefetch" not in plain
    for flags in (dict(lean_ticket=True), dict(early_pages=True), dict(lean_ticket=True, early_pages=True)):
        cfg = dataclasses.replace(base, **flags)
        fn = _compile(cfg, arch, kv_dtype)
        ptx = _check_binary(fn, arch)
        for op in SAME_WORK:
            assert ptx.count(op) == plain.count(op), (flags, op)
        assert ptx.count("fence.acq_rel.gpu;") == (0 if cfg.lean_ticket else 2), flags
        assert ptx.count("prefetch.global.L2") == (1 if cfg.early_pages else 0), flags
        regs, spills = _ptxas_usage(ptx, arch, tmp_path)
        assert spills == 0 and regs * 32 * cfg.warps <= 65536, (flags, regs, spills)


@pytest.mark.compile
def test_lean_ticket_sass_keeps_one_fence_and_the_l1_invalidation(tmp_path):
    """sm_90a SASS: three MEMBAR.ALL.GPU (each thread's release fence, the atomic's release, the merging
    CTA's acquire fence) become one, the atomic's; the atomic's acquire still invalidates L1
    (CCTL.IVALL) before the merge's first load, and a CTA barrier lies between the partial-row stores
    and the fence, and between the atomic and the merge's loads (what carries thread 0's release and
    acquire to the other threads). early_pages: the L2 prefetch (CCTL.E.PF2) precedes the first load."""
    plain = _sass(_compile(W8, "sm_90a").artifacts.CUBIN)
    ops = _sass(_compile(dataclasses.replace(W8, lean_ticket=True, early_pages=True), "sm_90a").artifacts.CUBIN)  # fmt: skip
    assert sum(op.startswith("MEMBAR") for op in plain) == 3
    assert [op for op in ops if op.startswith("MEMBAR")] == ["MEMBAR.ALL.GPU"]
    fence = next(i for i, op in enumerate(ops) if op.startswith("MEMBAR"))
    atom = next(i for i, op in enumerate(ops) if op.startswith("ATOMG.E.ADD.STRONG.GPU"))
    assert fence < atom
    last_store = max(i for i, op in enumerate(ops[:fence]) if op.startswith("STG"))
    assert any(op.startswith("BAR.SYNC") for op in ops[last_store:fence])
    ivall = next(i for i in range(atom, len(ops)) if ops[i] == "CCTL.IVALL")
    barrier = next(i for i in range(atom, len(ops)) if ops[i].startswith("BAR.SYNC"))
    first_load = next(i for i in range(barrier, len(ops)) if re.match(r"LDG\b|LDG\.", ops[i]))
    assert ivall < barrier < first_load
    prefetch = next(i for i, op in enumerate(ops) if op.startswith("CCTL.E.PF2"))
    assert prefetch < next(i for i, op in enumerate(ops) if op.startswith("LDG"))
    assert not any(op.startswith("CCTL.E.PF2") for op in plain)


@pytest.mark.compile
def test_knobs_without_their_path_are_no_ops():
    """lean_ticket without the fused merge is the plain kernel (the same PTX); early_pages also runs in
    the three-launch kernel (the work row read from the schedule's list) and in the persistent one."""
    kd, _ = _modules()
    dims = ("bfloat16", "bfloat16", 32, 8, 128, 128, 16)
    base = DecodeConfig(4, 16, 3)
    plain = kd.compile_decode(*dims, base, arch="sm_90a").artifacts.PTX
    noop = kd.compile_decode(*dims, dataclasses.replace(base, lean_ticket=True), arch="sm_90a").artifacts.PTX
    assert noop == plain
    three = kd.compile_decode(*dims, dataclasses.replace(base, early_pages=True), arch="sm_90a").artifacts.PTX
    assert three.count("prefetch.global.L2") == 1
    fp8 = dims[:1] + ("float8_e4m3fn",) + dims[2:]
    persistent = DecodeConfig(4, 32, 3, **LATENCY, persistent=True, lean_ticket=True, early_pages=True)
    ptx = kd.compile_decode(*fp8, persistent, arch="sm_90a", schedule=ScheduleConfig(128, 33, 256)).artifacts.PTX
    assert ptx.count("prefetch.global.L2") == 1 and "fence.acq_rel.gpu" not in ptx and "nctaid.y" in ptx
