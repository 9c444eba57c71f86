"""Compile gate (CPU, sm_90a and sm_120a) of the extend kernel's load paths, read from its PTX.

- Q is staged with 16-byte cp.async (block_m * D / 8 vectors over the CTA's threads, zero-filled
  past the tile's tokens) instead of one 2-byte load per element and thread: no 16-bit global loads.
- page_prefetch: the page-table entries of the tile after next are loaded between the loop's
  cp.async commit and its first mma (their latency hides behind the tile's math); without it the
  loop has no global load there (the lookups sit in front of each tile's cp.async issue).
- The variants `bench_attention --mode extend` times compile for both archs and fit the register
  budget (ptxas -v, when a ptxas is installed): no spills at 16 rows a warp, bounded spills of loop
  invariants at 32 (row_blocks 2), two CTAs per SM for the 4-warp ones.
- sub_tiles / lazy_rescale (the pipelined variants the lead sweeps): two traced bodies, one more
  max/sum step per slice, one warp vote per step; the sliced tile re-reads Q per slice (SASS LDSM
  count) instead of keeping it live and spilling; out-of-range fields are rejected by name.
- block_m 256 and stagger: compile on sm_90a (sm_120a's 99 KB rejects 256 rows by name), the
  staggered loops trace three tiles' worth of mma (first group's step; the second group's peeled
  step 0 QK^T, its loop's PV + QK^T and the last PV), and fit 255 registers with a small stack
  (cuobjdump; a formulation with the late PV behind a branch in the loop got 32 registers and a
  6 KB stack from ptxas).
"""

import dataclasses
import re

import pytest

from flashinfer.experimental.b12x._lib import cuda_binary as CB
from flashinfer.experimental.b12x.attention.paged._config import ExtendConfig, default_extend_config, why_not_extend

from .test_paged_compile import ARCHS, _check_binary, _extend_module, _ptxas_usage

pytestmark = pytest.mark.compile

PREFETCH = ExtendConfig(128, 64, 2, 1, page_prefetch=True)
BENCHED = {  # bench_attention.EXTEND_CONFIGS past the heuristic's row, and a prefetching 4-warp one
    "m128n64p": PREFETCH,
    "m64n64": ExtendConfig(64, 64, 2, 1),
    "m64n64p": ExtendConfig(64, 64, 2, 1, page_prefetch=True),
    "m128n32r2": ExtendConfig(128, 32, 2, 2),
    "m128n64r2": ExtendConfig(128, 64, 2, 2),
    "m128n64r2p": ExtendConfig(128, 64, 2, 2, page_prefetch=True),
}
# row_blocks 2 keeps 32 rows of O (128 fp32 registers at Dv 128) and S per thread: ptxas (CUDA 13.0)
# spills 92-164 bytes of loop invariants at 255 registers; more would mean the tile loop itself spills
SPILL_BYTES = {1: 0, 2: 256}


def _tiered(combos, default) -> list:
    """pytest params of `combos` (tuples of parameter values): those `default(*combo)` accepts run in
    the default tier, the rest in `slow` (the variant sweeps cost 5-30 s of CPU a compile; the default
    tier keeps each variant on at least one arch and KV dtype, and the live defaults on all)."""
    return [c if default(*c) else pytest.param(*c, marks=pytest.mark.slow) for c in combos]


KV_DTYPES = ("bfloat16", "float8_e4m3fn")


def _compile(kv_dtype, cfg, arch, page_size=16):
    ke = _extend_module()
    return _check_binary(ke.compile_extend("bfloat16", kv_dtype, 32, 8, 128, 128, page_size, cfg, arch=arch), arch)


def _cp_async_per_thread(cfg: ExtendConfig, kv_dtype: str, page_size: int, d: int = 128) -> tuple[int, int]:
    """(Q vectors, K + V vectors of one tile) a thread issues, per the kernel's copy layouts (split_issue:
    half the threads copy K and V)."""
    threads = 32 * cfg.warps
    copiers = threads // 2 if cfg.split_issue else threads
    de = d // 2 if kv_dtype == "float8_e4m3fn" else d
    ck = min(page_size, cfg.block_n)
    vec_cols = min(de // (16 if cfg.wide_copy else 8), 32)
    vec_rows = min(copiers // vec_cols, ck)
    per_chunk = ck * (de // 8) // (vec_rows * vec_cols)
    return cfg.block_m * d // 8 // threads, 2 * (cfg.block_n // ck) * per_chunk


def _after_last_commit(ptx: str) -> str:
    """The main loop's code from its (last) cp.async commit to its first mma."""
    tail = ptx[ptx.rindex("cp.async.commit_group") :]
    return tail[: tail.index("mma.sync")]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("mode", ["extend", "verify"])
def test_q_tile_is_staged_with_16_byte_cp_async(arch, kv_dtype, mode):
    cfg = default_extend_config(kv_dtype, 128, arch, mode)
    ptx = _compile(kv_dtype, cfg, arch)
    q_vecs, kv_vecs = _cp_async_per_thread(cfg, kv_dtype, 16)
    # Q once, one prologue tile (stages 2) and the loop's tile
    assert ptx.count("cp.async.cg.shared.global") == q_vecs + (cfg.stages - 1) * kv_vecs + kv_vecs
    assert not re.search(r"ld\.global(\.nc)?\.[bu]16", ptx), "Q (or anything) still loaded 2 bytes at a time"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_page_prefetch_moves_the_lookups_behind_the_issue(arch, kv_dtype):
    chunks = PREFETCH.block_n // 16
    ptx = _compile(kv_dtype, PREFETCH, arch)
    assert len(re.findall(r"ld\.global\.\w+", _after_last_commit(ptx))) == chunks
    q_vecs, kv_vecs = _cp_async_per_thread(PREFETCH, kv_dtype, 16)
    assert ptx.count("cp.async.cg.shared.global") == q_vecs + 2 * kv_vecs
    plain = _compile(kv_dtype, ExtendConfig(128, 64, 2, 1), arch)
    assert not re.findall(r"ld\.global\.\w+", _after_last_commit(plain))


@pytest.mark.parametrize("arch", ARCHS)
def test_page_prefetch_with_three_stages_and_large_pages_compiles(arch):
    """stages 3 (two tiles in the prologue) and one chunk a tile (page 64 >= block_n 32)."""
    cfg = ExtendConfig(64, 32, 3, 1, page_prefetch=True)
    ptx = _compile("bfloat16", cfg, arch, page_size=64)
    assert len(re.findall(r"ld\.global\.\w+", _after_last_commit(ptx))) == 1


@pytest.mark.parametrize(
    "name, kv_dtype",
    # every variant with bf16 KV; with fp8 KV the two prefetching ones (the others: slow)
    _tiered([(n, d) for n in sorted(BENCHED) for d in KV_DTYPES], lambda n, d: d == "bfloat16" or n.endswith("p")),
)
def test_benched_variants_fit_without_spills(name, kv_dtype, tmp_path):
    cfg = BENCHED[name]
    ptx = {arch: _compile(kv_dtype, cfg, arch) for arch in ARCHS if why_not_extend(
        "bfloat16", kv_dtype, 32, 8, 128, 128, 16, cfg, arch) is None}  # fmt: skip
    assert set(ptx) == set(ARCHS)
    regs, spills = _ptxas_usage(ptx["sm_90a"], "sm_90a", tmp_path)
    assert spills <= SPILL_BYTES[cfg.row_blocks] and regs <= 255, (regs, spills)
    if cfg.warps == 4:  # two 4-warp CTAs per SM (registers are allocated 8 a thread at a time)
        assert -(-regs // 8) * 8 * 32 * 4 * 2 <= 65536, regs


PIPELINED = {  # test_paged_extend_gpu.PIPELINED: the variants bench_attention's lead run sweeps
    "m128n64r2ps2": ExtendConfig(128, 64, 2, 2, True, sub_tiles=2),
    "m128n64r2ps2l8": ExtendConfig(128, 64, 2, 2, True, sub_tiles=2, lazy_rescale=8),
    "m128n32r2l8": ExtendConfig(128, 32, 2, 2, lazy_rescale=8),
    "m64n64s4": ExtendConfig(64, 64, 2, 1, sub_tiles=4),
    "m128n32s3r2pc": ExtendConfig(128, 32, 3, 2, True, cross_tile=True),
}


@pytest.mark.parametrize(
    "name, kv_dtype, arch",
    # each variant twice in the default tier: bf16 KV on sm_90a and fp8 KV on sm_120a
    _tiered(
        [(n, d, a) for n in sorted(PIPELINED) for d in KV_DTYPES for a in ARCHS],
        lambda n, d, a: (d, a) in (("bfloat16", "sm_90a"), ("float8_e4m3fn", "sm_120a")),
    ),
)
def test_pipelined_variants_compile(name, kv_dtype, arch):
    """sub_tiles > 1 traces the tile twice (masked and unmasked bodies): twice the mma of one tile, per
    slice one more max/sum step (2 quad shuffles a row each); lazy_rescale adds one warp vote per step."""
    cfg = PIPELINED[name]
    ptx = _compile(kv_dtype, cfg, arch)
    base = _compile(kv_dtype, dataclasses.replace(cfg, sub_tiles=1, lazy_rescale=0, cross_tile=False), arch)
    mma = "mma.sync.aligned.m16n8k16"
    # cross_tile: bodies with the next tile's QK^T (masked, unmasked), the last tile's (no QK^T) and
    # tile 0's QK^T before the loop: 3 tiles' worth of mma
    bodies = 3 if cfg.cross_tile else 2 if cfg.sub_tiles > 1 else 1
    assert ptx.count(mma) == bodies * base.count(mma) > 0
    steps = bodies * cfg.sub_tiles  # online-softmax steps traced
    assert ptx.count("vote.sync.any") == (steps if cfg.lazy_rescale else 0)
    # a quad max (2 shuffles) per row and step; the base kernel has one step
    rows = 2 * cfg.row_blocks
    assert ptx.count("shfl.sync.bfly") - base.count("shfl.sync.bfly") == 2 * rows * (steps - 1)


@pytest.mark.parametrize("field,value,match", [
    ("sub_tiles", 3, "sub_tiles must be 1, 2 or 4, got 3"),
    ("sub_tiles", True, "sub_tiles must be 1, 2 or 4, got True"),
    ("lazy_rescale", 16, "lazy_rescale must be an int in \\[0, 15\\]"),
    ("lazy_rescale", -1, "lazy_rescale must be an int in \\[0, 15\\]"),
    ("page_prefetch", 1, "page_prefetch must be a bool, got 1"),
    ("cross_tile", True, "cross_tile needs stages >= 3 and sub_tiles 1"),
    ("stagger", 1, "stagger must be a bool, got 1"),
    ("stagger", True, "stagger needs 8 warps, stages >= 3, sub_tiles 1 and no cross_tile"),
    ("split_issue", True, "split_issue needs stagger"),
    ("wide_copy", 1, "wide_copy must be a bool, got 1"),
])  # fmt: skip
def test_pipelining_fields_are_validated(field, value, match):
    cfg = dataclasses.replace(ExtendConfig(128, 64, 2, 2), **{field: value})
    reason = why_not_extend("bfloat16", "bfloat16", 32, 8, 128, 128, 16, cfg, "sm_90a")
    assert reason is not None and re.search(match, reason), reason
    small = ExtendConfig(128, 32, 2, 2, sub_tiles=4)  # 8-key slices: below one mma k-block
    assert "block_n 32 must split into sub_tiles 4 slices of a multiple of 16 keys" in why_not_extend(
        "bfloat16", "bfloat16", 32, 8, 128, 128, 16, small, "sm_90a")  # fmt: skip


def _disasm(fn) -> str:
    """The compiled kernel's SASS text (nvdisasm)."""
    return CB.sass(fn.artifacts.CUBIN)


def _sass(fn) -> list[str]:
    """Opcodes of the cubin's SASS."""
    return CB.opcodes(fn.artifacts.CUBIN)


def test_sliced_tile_rereads_q_instead_of_spilling():
    """128x64x2x2 ps2: ptxas would drop the second slice's Q ldmatrix as redundant and keep 64 registers
    of Q fragments live across the first slice's softmax (~100 spill stores and loads); the warp
    barrier before each later slice keeps the reloads: 2 bodies x (32 Q + 32 K + 32 V) LDSM, and
    about as much local memory traffic as the default (16 STL, 16 LDL)."""
    ke = _extend_module()
    cfg = ExtendConfig(128, 64, 2, 2, True, sub_tiles=2)
    ops = _sass(ke.compile_extend("bfloat16", "bfloat16", 32, 8, 128, 128, 16, cfg, arch="sm_90a"))
    assert sum(op.startswith("LDSM") for op in ops) == 2 * 96
    assert sum(op.startswith("STL") for op in ops) <= 32 and sum(op.startswith("LDL") for op in ops) <= 32


WIDE = {  # also test_paged_extend_gpu's cases: 256-row CTAs and the staggered warp groups the lead sweeps
    "m256n64r2p": ExtendConfig(256, 64, 2, 2, True),
    "m256n64s3r2p": ExtendConfig(256, 64, 3, 2, True),
    "m256n64s3r2pg": ExtendConfig(256, 64, 3, 2, True, stagger=True),
    "m256n64s4r2pg": ExtendConfig(256, 64, 4, 2, True, stagger=True),  # two tiles in flight
    "m256n64s3r2pgi": ExtendConfig(256, 64, 3, 2, True, stagger=True, split_issue=True),
    "m256n64s4r2pgi": ExtendConfig(256, 64, 4, 2, True, stagger=True, split_issue=True),
    "m128n32s3pg": ExtendConfig(128, 32, 3, 1, True, stagger=True),  # 8 warps x 16 rows: fits sm_120a
    "m128n64r2pw": ExtendConfig(128, 64, 2, 2, True, wide_copy=True),  # the default with wide_copy
    "m256n64s3r2pgiw": ExtendConfig(256, 64, 3, 2, True, stagger=True, split_issue=True, wide_copy=True),
    "m256n64s3r2pgiwe": ExtendConfig(256, 64, 3, 2, True, stagger=True, split_issue=True, wide_copy=True,
                                     early_pages=True),  # session 8: the default with early_pages
    "m256n64s3r2pgiwek": ExtendConfig(256, 64, 3, 2, True, stagger=True, split_issue=True, wide_copy=True,
                                      early_pages=True, ranked=True),  # and the ranked list (same kernel)
}  # fmt: skip


def _resources(fn) -> tuple[int, int]:
    """(registers, stack bytes) of the cubin's kernel (cuobjdump -res-usage)."""
    usage = CB.resources(fn.artifacts.CUBIN)
    return usage["REG"], usage["STACK"]


@pytest.mark.parametrize(
    "name, kv_dtype, arch",
    # default tier: the live 256-row default (session 8's) with both KV dtypes, the sm_120a rejection of
    # 256 rows (cheap), and the 128-row staggered and wide-copy variants on both archs; the rest: slow
    _tiered(
        [(n, d, a) for n in sorted(WIDE) for d in KV_DTYPES for a in ARCHS],
        lambda n, d, a: n in ("m256n64s3r2pgiwe", "m128n32s3pg", "m128n64r2pw") or (a == "sm_120a" and "m256" in n),
    ),
)
def test_wide_and_staggered_variants_compile(name, kv_dtype, arch):
    cfg = WIDE[name]
    reason = why_not_extend("bfloat16", kv_dtype, 32, 8, 128, 128, 16, cfg, arch)
    if cfg.block_m == 256 and arch == "sm_120a":  # 64 KB of Q alone: two 64-key tiles do not fit 99 KB
        assert reason is not None and "bytes of shared memory" in reason, reason
        return
    assert reason is None, reason
    ke = _extend_module()
    fn = ke.compile_extend("bfloat16", kv_dtype, 32, 8, 128, 128, 16, cfg, arch=arch)
    ptx = _check_binary(fn, arch)
    base = _compile(kv_dtype, dataclasses.replace(cfg, stagger=False, split_issue=False), arch)
    mma = "mma.sync.aligned.m16n8k16"
    assert ptx.count(mma) == (3 if cfg.stagger else 1) * base.count(mma) > 0
    regs, stack = _resources(fn)
    assert regs <= 255 and stack <= 256, (regs, stack)
    if cfg.wide_copy:  # each copying thread's second vector of a key row at an immediate De / 2 (bytes: De)
        second = f"+{64 if kv_dtype == 'float8_e4m3fn' else 128}], 16"
        plain = _compile(kv_dtype, dataclasses.replace(cfg, wide_copy=False), arch)
        assert ptx.count(second) > plain.count(second), (ptx.count(second), plain.count(second))
    if cfg.stagger:  # one tile fewer in flight than stages: the prologue issues stages - 2 tiles; one
        # tile issue in each traced step (the late group's peeled step and loop, the other group's loop
        # unless split_issue leaves the copies to the late group)
        q_vecs, kv_vecs = _cp_async_per_thread(cfg, kv_dtype, 16)
        steps = 2 if cfg.split_issue else 3
        assert ptx.count("cp.async.cg.shared.global") == q_vecs + (cfg.stages - 2 + steps) * kv_vecs


@pytest.mark.parametrize("arch", ARCHS)
def test_dual_extend_schedule_compiles(arch):
    """The live tile choice's schedule (`_kernel_extend_schedule`): one CTA, two 64-bit block sums
    (live tokens and their squares: 64-bit shuffles and products) and a block scan (the chosen
    tile's items), a runtime tile size (an integer division by a register, not by a constant),
    both counts and both one-byte flags written."""
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    from flashinfer.experimental.b12x.attention.paged import _kernel_extend_schedule as kes

    ptx = _check_binary(kes.compile_dual_extend_schedule(64, 32, 768, arch=arch), arch)
    assert ptx.count("bar.sync") >= 6  # two barriers a block sum or scan
    assert re.search(r"mul\.lo\.s64\s", ptx) and "shfl.sync.bfly.b32" in ptx  # L * L in 64 bits, its sum
    assert re.search(r"div\.s32\s", ptx) or re.search(r"div\.u32\s", ptx), "no runtime division by the tile"
    assert "st.global.v2.b32" in ptx  # a work row (request, first token) in one store
    # count[0] and count[1] (the items), count[2] and count[3] zeroed (the persistent kernels' counters)
    counts = re.findall(r"st\.global\.b32\s+\[(%rd\d+)(\+\d+)?\],\s*(\S+);", ptx)
    assert len(counts) == 4 and len({c[0] for c in counts}) == 1, counts
    assert {c[1] for c in counts} == {"", "+4", "+8", "+12"}, counts
    assert [c[2] for c in counts if c[1] in ("+8", "+12")] == ["0", "0"], counts
    flags = re.findall(r"st\.global\.b8\s+\[(%rd\d+)(\+1)?\]", ptx)  # flags[0] and flags[1]
    assert len(flags) == 2 and flags[0][0] == flags[1][0] and {f[1] for f in flags} == {"", "+1"}, flags


@pytest.mark.parametrize("arch", ARCHS)
def test_live_tile_choice_plan_compiles_its_three_kernels(arch):
    """A plan with two tiles compiles the dual schedule and both extend kernels (sm_90a: the 256-row
    candidate default with the 128-row tile; sm_120a: two tiles that fit its 99 KB), the large one
    under the single-tile plan's key (the same kernel, shared with it)."""
    from flashinfer.experimental.b12x.attention import paged

    small = ExtendConfig(128, 64, 2, 2, page_prefetch=True)
    large = default_extend_config("bfloat16", 128, "sm_90a").single if arch == "sm_90a" else small
    small = small if arch == "sm_90a" else ExtendConfig(64, 64, 2, 1, page_prefetch=True)
    dual = dataclasses.replace(large, small=small, conditional=True)
    caps = paged.Caps(
        device="cpu", mode="extend", dtype="bfloat16", kv_dtype="bfloat16", num_q_heads=32, num_kv_heads=8,
        head_dim_qk=128, head_dim_vo=128, page_size=16, max_total_q=4096, max_batch=8, max_page_table_width=256,
        max_work_items=1, max_partial_rows=1, num_cache_pages=2048, config=dual,
    )  # fmt: skip
    plan = paged.plan(caps)
    kernels = plan.kernels(plan.heuristic(arch), arch)
    assert [args[-3:] for _, args in kernels[1:]] == [(large, arch, "none"), (small, arch, "none")]
    _extend_module()
    for fn, args in kernels:
        _check_binary(fn(*args), arch)


@pytest.mark.parametrize("arch", ARCHS)
def test_overlap_lets_the_small_kernel_launch_early(arch):
    """overlap: the large kernel's CTAs each run griddepcontrol.launch_dependents first (before the
    count load: dead CTAs trigger too), the small one is launched as a programmatic dependent (a
    host-side launch attribute: its PTX is the plain kernel's) and waits on nothing."""
    ke = _extend_module()
    cfg = ExtendConfig(128, 64, 2, 2, page_prefetch=True)
    plain = _compile("bfloat16", cfg, arch)
    trigger = _check_binary(ke.compile_extend("bfloat16", "bfloat16", 32, 8, 128, 128, 16, cfg, arch, "trigger"), arch)
    dependent = _check_binary(
        ke.compile_extend("bfloat16", "bfloat16", 32, 8, 128, 128, 16, cfg, arch, "dependent"), arch
    )
    assert "griddepcontrol" not in plain and "griddepcontrol" not in dependent
    assert trigger.count("griddepcontrol.launch_dependents") == 1 and "griddepcontrol.wait" not in trigger
    body = trigger[trigger.index(".entry") :]
    assert body.index("griddepcontrol.launch_dependents") < body.index("ld.global")
    with pytest.raises(ValueError, match="pdl must be one of 'none', 'trigger', 'dependent', 'wait', 'wait"):
        ke.compile_extend("bfloat16", "bfloat16", 32, 8, 128, 128, 16, cfg, arch, "early")


def _draws(ptx: str) -> list[str]:
    return re.findall(r"atom\.[\w.]*add[\w.]*", ptx)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_persistent_kernel_draws_one_item_a_loop(arch, kv_dtype):
    """persistent_ctas (ExtendConfig.persistent): one relaxed atomic add an item (thread 0's
    draw of the next one) and the item body inside a loop; the one-item kernel has no atomic, so the
    single-tile plans and the default stay as they were. The small tile of each arch's dual plan."""
    ke = _extend_module()
    cfg = ExtendConfig(128, 64, 2, 2, page_prefetch=True) if arch == "sm_90a" else ExtendConfig(64, 64, 2, 1)
    plain = _compile(kv_dtype, cfg, arch)
    ptx = _check_binary(
        ke.compile_extend("bfloat16", kv_dtype, 32, 8, 128, 128, 16, cfg, arch, "trigger", persistent_ctas=264), arch
    )
    assert _draws(plain) == [] and len(_draws(ptx)) == 1, _draws(ptx)
    # PTX's default atom is relaxed at GPU scope: the counter orders nothing but itself
    assert not re.search(r"\.(acq_rel|acquire|release|cta|sys)\b", _draws(ptx)[0]), _draws(ptx)
    assert ptx.count("griddepcontrol.launch_dependents") == 1
    assert ptx.count("bar.sync") == plain.count("bar.sync") + 1  # the barrier that ends an item
    with pytest.raises(ValueError, match=re.escape("persistent_ctas must be an int in [0, 65536)")):
        ke.compile_extend("bfloat16", kv_dtype, 32, 8, 128, 128, 16, cfg, arch, "none", persistent_ctas=-1)


def _tile_loop_spills(fn) -> list[int]:
    """STL + LDL of each tile loop (a backward branch over code with HMMA) of the cubin's SASS."""
    text = _disasm(fn)
    ins, labels = [], {}
    for line in text.splitlines():
        label = re.match(r"^\s*(\.L_x_\d+):", line)
        if label:
            labels[label.group(1)] = len(ins)
        elif "*/" in line:
            ins.append(line.split("*/", 1)[-1])
    loops = []
    for i, op in enumerate(ins):
        target = re.search(r"BRA\s+`?\(?(\.L_x_\d+)", op)
        if target and labels.get(target.group(1), i + 1) <= i:
            body = ins[labels[target.group(1)] : i + 1]
            if any("HMMA" in x for x in body) and sum("HMMA" in x for x in body) < len(body) // 2:
                loops.append(sum(("STL" in x) or ("LDL" in x) for x in body))
    return loops


def test_persistent_small_tile_loop_spills_no_more_than_one_item_a_cta():
    """Why `persistent` 1 (the small kernel only) exists: the 128-row tile's loop keeps its spills
    inside the persistent loop (SASS, sm_90a: 6 / 6 STL / LDL a tile against 15 / 16), while the
    256-row staggered tile's second group doubles them (26 / 32 against 13 / 13, persistent 2)."""
    ke = _extend_module()
    small = ExtendConfig(128, 64, 2, 2, page_prefetch=True)
    args = ("bfloat16", "bfloat16", 32, 8, 128, 128, 16, small, "sm_90a")
    plain = _tile_loop_spills(ke.compile_extend(*args))
    persistent = _tile_loop_spills(ke.compile_extend(*args, "trigger", persistent_ctas=264))
    assert plain and persistent and max(persistent) <= max(plain), (plain, persistent)


def _sass_lines(fn) -> list[str]:
    """The cubin's SASS instructions (predicates kept), in order."""
    return CB.instructions(fn.artifacts.CUBIN)


def _prologue_loads(lines: list[str]) -> tuple[int, int]:
    """(global loads before the first EXIT, unpredicated global loads before the first cp.async)."""
    first_exit = next(i for i, x in enumerate(lines) if "EXIT" in x)
    first_copy = next(i for i, x in enumerate(lines) if x.startswith("LDGSTS") or " LDGSTS" in x)
    loads = [i for i, x in enumerate(lines) if re.match(r"(@!?U?P\d+ )?LDG\.", x)]
    before_exit = sum(i < first_exit for i in loads)
    plain = sum(i < first_copy and lines[i].startswith("LDG.") for i in loads)
    return before_exit, plain


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_early_pages_shorten_the_prologue_chain(kv_dtype):
    """early_pages (sm_90a, the 256-row default + e): the work row loads beside the live count (both
    before the dead CTA's exit), and the first tile's page-table entries load unpredicated, beside the
    request's lengths, before any cp.async (without it: one load before the exit and the pages
    predicated on kv_len, i.e. after it). The tile loops are the default's (same instruction count)."""
    ke = _extend_module()
    base_cfg = default_extend_config(kv_dtype, 128, "sm_90a")
    cfg = dataclasses.replace(base_cfg, page_prefetch=True, early_pages=True)
    args = ("bfloat16", kv_dtype, 32, 8, 128, 128, 16)
    base = _sass_lines(ke.compile_extend(*args, dataclasses.replace(cfg, early_pages=False), "sm_90a"))
    early = _sass_lines(ke.compile_extend(*args, cfg, "sm_90a"))
    chunks = cfg.block_n // 16
    assert _prologue_loads(base)[0] == 1 and _prologue_loads(early)[0] == 2  # count (+ the work row)
    # unpredicated before the first cp.async: count, row, q0, q_len end, kv_len (+ the pages)
    assert _prologue_loads(early)[1] >= _prologue_loads(base)[1] + chunks, (
        _prologue_loads(base),
        _prologue_loads(early),
    )
    assert sum("HMMA" in x for x in early) == sum("HMMA" in x for x in base)
    reason = why_not_extend(*args, dataclasses.replace(cfg, page_prefetch=False), "sm_90a")
    assert reason is not None and "early_pages needs page_prefetch" in reason


@pytest.mark.parametrize("arch", ARCHS)
def test_early_launch_waits_for_the_schedule_before_any_load(arch):
    """early_launch: the dual schedule triggers at its start; the first extend kernel (pdl "wait" /
    "wait+trigger", a host-side launch attribute) runs griddepcontrol.wait before its first global
    load (it reads the schedule's count and list), then (with overlap) lets the second kernel start."""
    pytest.importorskip("cutlass")
    from flashinfer.experimental.b12x.attention.paged import _kernel_extend_schedule as kes

    sched = _check_binary(kes.compile_dual_extend_schedule(64, 32, 768, arch, True), arch)
    body = sched[sched.index(".entry") :]
    assert body.count("griddepcontrol.launch_dependents") == 1 and "griddepcontrol.wait" not in body
    assert body.index("griddepcontrol.launch_dependents") < body.index("ld.global")
    plain = _check_binary(kes.compile_dual_extend_schedule(64, 32, 768, arch), arch)
    assert "griddepcontrol" not in plain
    ke = _extend_module()
    cfg = ExtendConfig(128, 64, 2, 2, page_prefetch=True)
    for pdl, trigger in (("wait", 0), ("wait+trigger", 1)):
        ptx = _check_binary(ke.compile_extend("bfloat16", "bfloat16", 32, 8, 128, 128, 16, cfg, arch, pdl), arch)
        body = ptx[ptx.index(".entry") :]
        assert body.count("griddepcontrol.wait") == 1 and body.count("griddepcontrol.launch_dependents") == trigger
        assert body.index("griddepcontrol.wait") < body.index("ld.global")
        if trigger:
            assert body.index("griddepcontrol.wait") < body.index("griddepcontrol.launch_dependents")


@pytest.mark.parametrize("arch", ARCHS)
def test_session8_candidate_plan_compiles(arch):
    """The plan of every session-8 option at once (LIVE_TILE_LAUNCH with early_pages on both tiles:
    sm_90a '256x64x3x2pgiwe+128x64x2x2pe@768oslr'; sm_120a two tiles that fit its 99 KB) compiles its
    triggering schedule, the small kernel (persistent, waits for the schedule, triggers) and the large
    one (the programmatic dependent, under the single-tile key of its config)."""
    from flashinfer.experimental.b12x.attention import paged

    small = ExtendConfig(128, 64, 2, 2, page_prefetch=True, early_pages=True)
    large = dataclasses.replace(default_extend_config("bfloat16", 128, "sm_90a"), early_pages=True)
    if arch == "sm_120a":
        large, small = small, ExtendConfig(64, 64, 2, 1, page_prefetch=True, early_pages=True)
    cfg = dataclasses.replace(large, small=small, overlap=True, small_first=True, early_launch=True, persistent=1)
    caps = paged.Caps(
        device="cpu", mode="extend", dtype="bfloat16", kv_dtype="bfloat16", num_q_heads=32, num_kv_heads=8,
        head_dim_qk=128, head_dim_vo=128, page_size=16, max_total_q=4096, max_batch=8, max_page_table_width=256,
        max_work_items=1, max_partial_rows=1, num_cache_pages=2048, config=cfg,
    )  # fmt: skip
    plan = paged.plan(caps)
    kernels = plan.kernels(plan.heuristic(arch), arch)
    assert kernels[0][1][-1] is True  # the schedule triggers
    assert kernels[1][1][-2:] == (arch, "dependent") and kernels[2][1][-2] == "wait+trigger"
    _extend_module()
    ptxs = [_check_binary(fn(*args), arch) for fn, args in kernels]
    assert "griddepcontrol.launch_dependents" in ptxs[0]
    assert len(_draws(ptxs[2])) == 1 and not _draws(ptxs[1])  # only the small kernel is persistent


@pytest.mark.parametrize("arch", ARCHS)
def test_ranked_schedule_compiles(arch):
    """`_kernel_extend_ranked`: one CTA, three barriers (zeroed counters, the class histogram, its
    prefix), shared-memory atomics for the histogram and each tile's ticket, the count stored once,
    a work row in one 8-byte store; a ranked single-tile plan compiles it instead of the plain one."""
    pytest.importorskip("cutlass")
    from flashinfer.experimental.b12x.attention import paged
    from flashinfer.experimental.b12x.attention.paged import _kernel_extend_ranked as kr

    ptx = _check_binary(kr.compile_ranked_extend_schedule(64, arch), arch)
    assert ptx.count("bar.sync") == 3
    assert re.search(r"atom\.shared(\.cta)?\.add\.u32", ptx)  # histogram and tickets, in shared memory
    assert not re.search(r"\b(atom|red)\.global", ptx) and "st.global.v2.b32" in ptx
    cfg = ExtendConfig(128, 64, 2, 2, page_prefetch=True, ranked=True)
    caps = paged.Caps(
        device="cpu", mode="extend", dtype="bfloat16", kv_dtype="bfloat16", num_q_heads=32, num_kv_heads=8,
        head_dim_qk=128, head_dim_vo=128, page_size=16, max_total_q=4096, max_batch=8, max_page_table_width=256,
        max_work_items=1, max_partial_rows=1, num_cache_pages=2048, config=cfg,
    )  # fmt: skip
    plan = paged.plan(caps)
    (sched, args), (ext, ext_args) = plan.kernels(plan.heuristic(arch), arch)
    assert sched.op == "attention.paged.ranked_extend_schedule" and args == (32, arch)
    assert ext_args[-2] == dataclasses.replace(cfg, ranked=False)  # the unranked tile's kernel and key
