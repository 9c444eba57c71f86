"""The cluster merge of the decode kernel on the CPU (`DecodeConfig.cluster`, bench part `:cN`;
docs/predictions/attention.md, "Session 10b"). The GPU tier is test_paged_cluster_gpu.py.

reference: the bench entries, repr and predicate; the split (`_config.cluster_ranges`, the kernel's
`ClusterMerge.item` arithmetic) tiles every visible range in C chunks of whole tiles; an emulation in
float64 of the algorithm as the kernel runs it (C CTAs a (request, KV head), each a partial row over
its chunk with v_descale folded and no sink; every rank combining its head-dim columns of all C
partials, the sink joining the denominator there) against reference.py; the planned lifecycle with the
flag on CPU tensors (reference backend) on poisoned outputs.
compile: sm_90a (8 warps) and sm_120a (4 warps), bf16 and fp8, C 2 / 8 (and 16 on sm_90a): the launch carries the
cluster-dimension attribute (host IR), the PTX has two cluster barriers and 2 C DSMEM loads a column
pass, no atomic, no fence and no fp32 global store but the LSE's (no partial rows), the same mma /
cp.async work as the config without the flag, no spills; SASS has the cluster barrier instructions and
no MEMBAR / ATOMG. The default configs' PTX is unchanged by the flag's code (checked before/after at
commit time: 14 configs, both archs, byte-identical).
push (`cluster_push`, bench part `:cNp`): the entry, repr and predicate; the emulation routes the
partials through flat receive buffers with the kernel's slot functions (every slot written once, each
rank reading only its own columns); compile: one relaxed cluster arrive at the start and one wait,
st.async (16-byte values, 4-byte LSEs) and one try_wait.acquire.cluster, the only fence the mbarrier
init's, no DSMEM load; SASS has no MEMBAR (the pull merge's release) and STAS.128 / STAS between the
cluster wait and the mbarrier wait. Adding the flag left the default configs' PTX byte-identical
(4 configs, cluster 0 and 8, bf16 / fp8, both archs, checked at commit time).
"""

import dataclasses
import math
import re

import numpy as np
import pytest
import torch

import b12x
from flashinfer.experimental.b12x.attention.paged._config import (
    DecodeConfig,
    ScheduleConfig,
    cluster_ranges,
    parse_decode_entry,
    smem_bytes,
    split_schedule,
    why_not,
)
from flashinfer.experimental.b12x.attention.paged.api import Selection
from flashinfer.experimental.b12x.attention.paged.reference import LOG2E, paged_attention_reference

from .paged_cases import make_case
from .test_paged_compile import _check_binary, _modules, _ptxas_usage
from .test_paged_lean import _sass, check_cpu_lifecycle, cpu_caps

ARCHS = ("sm_90a", "sm_120a")
LATENCY = dict(fused_merge=True, fused_schedule=True, fast_prologue=True, preload_lengths=True, direct_items=True)
W8 = DecodeConfig(8, 16, 2, **LATENCY)
W4 = DecodeConfig(4, 16, 2, **LATENCY)  # fits sm_120a's 99 KB
DIMS = ("bfloat16", "bfloat16", 32, 8, 128, 128, 16)
paged = b12x.attention.paged


# ---- reference tier ------------------------------------------------------------------------------
@pytest.mark.reference
def test_bench_entries_repr_and_predicate():
    decode, flags, target, min_chunk = parse_decode_entry("8x16x2fspld:c8")
    assert decode == dataclasses.replace(W8, cluster=8) and (flags, target, min_chunk) == (set("fspld"), None, None)
    assert parse_decode_entry("8x16x2fspldk:m128:c4")[0] == dataclasses.replace(W8, cluster=4, lean_ticket=True)
    assert "cluster=8" in repr(decode) and repr(W8) == repr(dataclasses.replace(W8, cluster=0))
    with pytest.raises(ValueError, match="explicit WxKxS"):
        parse_decode_entry("hfs:c8")
    assert why_not(*DIMS, decode, "sm_90a") is None
    assert why_not(*DIMS, dataclasses.replace(W4, cluster=8), "sm_120a") is None
    assert why_not(*DIMS, dataclasses.replace(W8, cluster=16), "sm_90a") is None
    assert "non-portable, above 8) is for sm_90a only" in why_not(*DIMS, dataclasses.replace(W4, cluster=16), "sm_120a")
    assert "cluster must be one of (0, 2, 4, 8, 16), got 3" in why_not(
        *DIMS, dataclasses.replace(W8, cluster=3), "sm_90a"
    )
    assert "cluster must be one of" in why_not(*DIMS, dataclasses.replace(W8, cluster=True), "sm_90a")
    for bad in (dict(fused_merge=False), dict(fused_schedule=False), dict(persistent=True), dict(pdl="prefetch")):
        reason = why_not(*DIMS, dataclasses.replace(W8, cluster=4, **bad), "sm_90a")
        assert reason is not None and "needs fused_merge=True and fused_schedule=True" in reason, bad
    assert why_not(*DIMS, dataclasses.replace(W8, cluster=4, pdl="wait"), "sm_90a") is None
    grow = smem_bytes("bfloat16", 128, 128, dataclasses.replace(W8, cluster=2)) - smem_bytes("bfloat16", 128, 128, W8)
    assert grow == (16 * 128 + 16) * 4 + 16


@pytest.mark.reference
def test_push_entry_repr_and_predicate():
    """`:cNp` is cluster N with cluster_push; the flag is in the repr (the compile key) only when set,
    is a bool, needs a cluster, and its shared memory (mbarrier + receive buffer, G <= 16 rows) fits
    the W4 config on sm_120a."""
    decode = parse_decode_entry("8x16x2fspld:c8p")[0]
    assert decode == dataclasses.replace(W8, cluster=8, cluster_push=True)
    assert parse_decode_entry("8x16x2fspld:c8")[0].cluster_push is False
    assert "cluster=8, cluster_push=True" in repr(decode)
    assert repr(dataclasses.replace(decode, cluster_push=False)) == repr(dataclasses.replace(W8, cluster=8))
    for bad in ("8x16x2fspld:cp", "8x16x2fspld:c8pp", "8x16x2fspld:c8q"):
        with pytest.raises(ValueError):
            parse_decode_entry(bad)
    assert why_not(*DIMS, decode, "sm_90a") is None
    assert why_not(*DIMS, dataclasses.replace(W4, cluster=8, cluster_push=True), "sm_120a") is None
    assert why_not(*DIMS, dataclasses.replace(W8, cluster=16, cluster_push=True), "sm_90a") is None
    assert "cluster_push=True needs cluster > 0" in why_not(*DIMS, dataclasses.replace(W8, cluster_push=True), "sm_90a")
    assert "cluster_push must be a bool" in why_not(*DIMS, dataclasses.replace(decode, cluster_push=1), "sm_90a")
    push = smem_bytes("bfloat16", 128, 128, decode) - smem_bytes("bfloat16", 128, 128, W8)
    assert push == (4 + 16 * 128 + 16 * 8) * 4 + 16


@pytest.mark.reference
@pytest.mark.parametrize("cluster", [2, 4, 8, 16])
@pytest.mark.parametrize("tile", [64, 128])
def test_cluster_ranges_tile_the_visible_keys(cluster, tile):
    """Rank r's [start, end): contiguous, in rank order, covering exactly the visible range; every
    chunk but the last non-empty one a whole number of tiles from the window's start; empty ranks
    (short requests) sit at the end with start == end == length."""
    for length in (0, 1, 15, 16, 127, 128, 129, 1000, 1024, 8192, 32768, 33333):
        for window_left in (-1, 0, 5, 100, 4095):
            lo = length - (length if window_left < 0 else min(length, window_left + 1))
            got = cluster_ranges(length, window_left, cluster, tile)
            assert len(got) == cluster and got[0][0] == lo and got[-1][1] == length
            assert all(a[1] == b[0] for a, b in zip(got, got[1:])), got
            sizes = [e - s for s, e in got]
            live = [n for n in sizes if n]
            assert all(n % tile == 0 for n in live[:-1]) and all(n == live[0] for n in live[:-1])
            assert sizes == live + [0] * (cluster - len(live))
            assert all(s == length for s, e in got[len(live) :])
            if length - lo >= cluster * tile:
                assert len(live) == cluster  # long requests use every rank


def _exp2(x):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.exp2(x)


def push_buffers(part_o, part_lse, cluster):
    """The push merge's data flow through flat receive buffers, with the kernel's own slot functions
    (`_cluster_merge.push_slot` / `push_lse_slot`) and its loops: sender s writes each 16-byte vector
    (row r, columns c .. c + 3) to rank c // cols and its G LSEs to every rank. Every slot of every
    buffer is written exactly once (no overlap, no hole). Returns the C buffers."""
    from flashinfer.experimental.b12x.attention.paged._cluster_merge import push_lse_slot, push_slot

    group, dv = part_o[0].shape
    cols = dv // cluster
    recv = np.full((cluster, cluster * group * (cols + 1)), np.nan)
    writes = np.zeros(recv.shape, dtype=int)
    for s in range(cluster):
        for r in range(group):
            for c in range(0, dv, 4):
                dest, off = push_slot(s, r, c, group, cols)
                recv[dest, off : off + 4] = part_o[s][r, c : c + 4]
                writes[dest, off : off + 4] += 1
        for t in range(cluster * group):  # thread (pass) t: row t % G to rank t // G
            off = push_lse_slot(s, t % group, group, cols, cluster)
            recv[t // group, off] = part_lse[s][t % group]
            writes[t // group, off] += 1
    assert (writes == 1).all(), "push slots overlap or leave a hole"
    return recv


def emulate_cluster(case, cluster, tile, *, window_left=-1, sinks=None, push=False):
    """The cluster kernel in float64: CTA (request b, rank r, KV head h) computes the partial row of
    its chunk (O over its own sum, base-2 LSE; an empty chunk: 0 and -inf), then each rank combines
    its columns of the C partials and writes them (rank 0 also the LSE). push: rank r reads them from
    its receive buffer (`push_buffers`) instead of the peers' partial rows. Returns (out, lse)."""
    from flashinfer.experimental.b12x.attention.paged._cluster_merge import push_lse_slot, push_slot

    q = case.q.double().numpy()
    total_q, hq, d = q.shape
    hkv = case.k_dense[0].shape[1]
    group, dv = hq // hkv, case.v_dense[0].shape[2]
    scale_log2 = LOG2E / math.sqrt(d)
    sink2 = None if sinks is None else sinks.double().numpy() * LOG2E
    out = np.full((total_q, hq, dv), np.nan)
    lse = np.full((total_q, hq), np.nan)
    cols = dv // cluster
    for b, n in enumerate(case.cache_seqlens.tolist()):
        keys_k = case.k_dense[b].double().numpy()
        keys_v = case.v_dense[b].double().numpy()
        for h in range(hkv):
            heads = slice(h * group, (h + 1) * group)
            part_o, part_lse = [], []
            for start, end in cluster_ranges(n, window_left, cluster, tile):
                s = q[b, heads] @ keys_k[start:end, h].T * scale_log2
                m = s.max(axis=1) if end > start else np.full(group, -np.inf)
                m_use = np.where(m == -np.inf, 0.0, m)
                p = _exp2(s - m_use[:, None])
                total = p.sum(axis=1)
                pos = total > 0
                part_lse.append(np.where(pos, m_use + np.log2(np.where(pos, total, 1.0)), -np.inf))
                part_o.append((p @ keys_v[start:end, h]) * np.where(pos, 1.0 / np.where(pos, total, 1.0), 0.0)[:, None])
            recv = push_buffers(part_o, part_lse, cluster) if push else None
            for rank in range(cluster):  # each rank's columns, from every peer's partial
                c = slice(rank * cols, (rank + 1) * cols)
                lses, vals = part_lse, [oi[:, c] for oi in part_o]
                if push:  # row r, column rank * cols + j of sender i, from this rank's own buffer
                    rows, cs = np.meshgrid(range(group), range(rank * cols, (rank + 1) * cols), indexing="ij")
                    assert all(push_slot(0, 0, j, group, cols)[0] == rank for j in range(c.start, c.stop))
                    lses = [recv[rank, [push_lse_slot(i, r, group, cols, cluster) for r in range(group)]]
                            for i in range(cluster)]  # fmt: skip
                    vals = [recv[rank, push_slot(i, rows, cs, group, cols)[1]] for i in range(cluster)]
                top = np.max(lses, axis=0)
                top_use = np.where(top == -np.inf, 0.0, top)
                scale = [_exp2(li - top_use) for li in lses]
                total = sum(scale)
                o = sum(si[:, None] * oi for si, oi in zip(scale, vals))
                pos = total > 0
                row_lse = np.where(pos, top_use + np.log2(np.where(pos, total, 1.0)), -np.inf)
                factor = np.where(pos, 1.0 / np.where(pos, total, 1.0), 0.0)
                if sink2 is not None:
                    sk = sink2[heads]
                    hi = np.maximum(row_lse, sk)
                    full = hi + np.log2(_exp2(row_lse - hi) + _exp2(sk - hi))
                    factor = factor * _exp2(row_lse - full)
                    row_lse = full
                out[b, heads, c] = o * factor[:, None]
                if rank == 0:
                    lse[b, heads] = row_lse
    return torch.from_numpy(out).float(), torch.from_numpy(lse).float()


@pytest.mark.reference
@pytest.mark.parametrize("cluster", [2, 4, 8, 16])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize(
    "lens, window_left", [([1, 17, 130, 0], -1), ([3000, 5], -1), ([4096], 1000), ([0, 0, 33], 0), ([2049, 700], 200)]
)
@pytest.mark.parametrize("push", [False, True], ids=["pull", "push"])
def test_emulated_cluster_matches_reference(cluster, kv_dtype, lens, window_left, push):
    case = make_case(lens, num_q_heads=8, num_kv_heads=2, head_dim=64, kv_dtype=kv_dtype, seed=len(lens) + cluster)
    for sinks in (None, torch.randn(8)):
        out, lse = emulate_cluster(case, cluster, 128, window_left=window_left, sinks=sinks, push=push)
        ref_out, ref_lse = paged_attention_reference(
            case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q,
            window_left=window_left, sinks=sinks, k_descale=case.k_descale, v_descale=case.v_descale,
        )  # fmt: skip
        assert not torch.isnan(out).any() and not torch.isnan(lse).any(), "a column or row was never written"
        torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
        finite = torch.isfinite(ref_lse)
        assert torch.equal(finite, torch.isfinite(lse))
        torch.testing.assert_close(lse[finite], ref_lse[finite], rtol=1e-5, atol=1e-5)


@pytest.mark.reference
@pytest.mark.parametrize(
    "entry", ["8x16x2fspld:c8", "4x16x2fs:c2", "8x16x2fspldke:c4", "8x16x2fspld:c16", "8x16x2fspld:c8p", "4x16x2fs:c2p"]
)
def test_cpu_lifecycle_with_the_flag_matches_the_reference(entry):
    """plan(override) -> prepare -> bind -> run on CPU tensors (the reference backend): the plan
    validates the flag and the NaN-poisoned outputs get the reference's rows."""
    decode = parse_decode_entry(entry)[0]
    case = make_case([1, 300, 33], num_q_heads=8, num_kv_heads=2, head_dim=64, page_size=16, seed=len(entry))
    sched = split_schedule(decode, "bfloat16", 64, 2, 132, "sm_90a")
    caps = cpu_caps(case)
    plan = paged.plan(caps, override=Selection(decode, sched))
    with pytest.raises(ValueError, match="cluster"):
        paged.plan(caps, override=Selection(dataclasses.replace(decode, cluster=5), sched))
    check_cpu_lifecycle(case, plan)


# ---- compile tier --------------------------------------------------------------------------------
def _compile(cfg, arch, kv_dtype="bfloat16"):
    kd, _ = _modules()
    dims = ("bfloat16", kv_dtype, *DIMS[2:])
    assert why_not(*dims, cfg, arch) is None
    return kd.compile_decode(*dims, cfg, arch=arch, schedule=ScheduleConfig(cfg.tile_keys, 17, 128))


SAME_WORK = ("mma.sync.aligned.m16n8k16", "cvt.rn.f16x2.e4m3x2", "cp.async.cg.shared.global", "ldmatrix")
CLUSTER_DIM_ATTR = "struct<(i32, i32, i32)>"  # the launch's cudaLaunchAttributeClusterDimension value (host IR)


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("cluster", [2, 8, 16])
def test_cluster_merge_compiles(arch, kv_dtype, cluster, tmp_path):
    if cluster > 8 and arch != "sm_90a":
        pytest.skip("cluster 16 (non-portable) is sm_90a only")
    base = W8 if arch == "sm_90a" else W4
    plain_fn = _compile(base, arch, kv_dtype)
    plain = plain_fn.artifacts.PTX
    assert CLUSTER_DIM_ATTR not in str(plain_fn.ir_module)
    cfg = dataclasses.replace(base, cluster=cluster)
    fn = _compile(cfg, arch, kv_dtype)
    ptx = _check_binary(fn, arch)
    assert CLUSTER_DIM_ATTR in str(fn.ir_module), "the launch has no cluster dimension attribute"
    for op in SAME_WORK:
        assert ptx.count(op) == plain.count(op), op
    # the release arrive, then the relaxed one that keeps shared memory alive; one wait each
    assert ptx.count("barrier.cluster.arrive;") == 1 and ptx.count("barrier.cluster.arrive.relaxed;") == 1
    assert ptx.count("barrier.cluster.wait") == 2
    passes = -(-4 * (128 // cluster) // (32 * cfg.warps))  # column passes of the combine (G = 4 rows)
    assert ptx.count("ld.shared::cluster") == 2 * cluster * passes  # o and LSE of every rank
    assert ptx.count("mapa.shared::cluster") == 2 * cluster * passes
    assert not re.findall(r"^\s*(?:@\S+\s+)?(?:atom|red|fence|membar)\.", ptx, flags=re.M)  # no ticket, no fence
    assert "atom.global" in plain
    stores = sorted(re.findall(r"st\.global[.\w]*", ptx))
    assert stores == ["st.global.b16"] * passes + ["st.global.b32"] * passes, stores  # output, LSE: no partials
    assert len(re.findall(r"st\.global[.\w]*", plain)) > 2
    regs, spills = _ptxas_usage(ptx, arch, tmp_path)
    assert spills == 0 and regs * 32 * cfg.warps <= 65536, (regs, spills)


@pytest.mark.compile
def test_cluster_merge_sass():
    """sm_90a SASS: the cluster barriers (UCGABAR arrive / wait), DSMEM loads, no MEMBAR, no ATOMG;
    the plain config has its ticket's MEMBAR and ATOMG."""
    ops = _sass(_compile(dataclasses.replace(W8, cluster=4), "sm_90a").artifacts.CUBIN)
    plain = _sass(_compile(W8, "sm_90a").artifacts.CUBIN)
    assert sum("CGABAR_ARV" in op for op in ops) == 2 and sum("CGABAR_WAIT" in op for op in ops) == 2
    assert not any(op.startswith(("ATOMG", "RED")) for op in ops)
    assert any(op.startswith("ATOMG") for op in plain)
    # one MEMBAR.ALL.GPU, the first arrive's release (ptxas has no cluster-scope membar), after the
    # partial row's shared stores; the relaxed second arrive adds none
    membar = [i for i, op in enumerate(ops) if op.startswith("MEMBAR")]
    arrive = [i for i, op in enumerate(ops) if "CGABAR_ARV" in op]
    assert ops[membar[0]] == "MEMBAR.ALL.GPU" and len(membar) == 1 and membar[0] < arrive[0]
    remote = [i for i, op in enumerate(ops) if re.match(r"LD\.E\b", op)]  # ld.shared::cluster: generic LD
    assert remote and arrive[0] < remote[0] and remote[-1] < arrive[1], "DSMEM reads between the barriers"
    wait = [i for i, op in enumerate(ops) if "CGABAR_WAIT" in op]
    assert all(ops[i + 1] == "CCTL.IVALL" for i in wait[:1])  # the acquire


FENCE_OR_ATOMIC = r"^\s*(?:@\S+\s+)?((?:atom|red|fence|membar)\.[.\w:]*)"


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("cluster", [2, 8, 16])
def test_cluster_push_compiles(arch, kv_dtype, cluster, tmp_path):
    """cluster_push: the mbarrier's init (one fence.mbarrier_init, the only fence) and the start's relaxed
    cluster arrive, one cluster wait, then one 16-byte st.async a row vector pass and one 4-byte st.async
    for the LSEs (a mapa each of address and mbarrier), one try_wait.acquire.cluster; no release arrive,
    no second barrier, no DSMEM load; the same mma / cp.async work and global stores as the pull merge."""
    if cluster > 8 and arch != "sm_90a":
        pytest.skip("cluster 16 (non-portable) is sm_90a only")
    pull = dataclasses.replace(W8 if arch == "sm_90a" else W4, cluster=cluster)
    pull_ptx = _compile(pull, arch, kv_dtype).artifacts.PTX
    cfg = dataclasses.replace(pull, cluster_push=True)
    fn = _compile(cfg, arch, kv_dtype)
    ptx = _check_binary(fn, arch)
    assert CLUSTER_DIM_ATTR in str(fn.ir_module), "the launch has no cluster dimension attribute"
    for op in SAME_WORK:
        assert ptx.count(op) == pull_ptx.count(op), op
    assert sorted(re.findall(r"st\.global[.\w]*", ptx)) == sorted(re.findall(r"st\.global[.\w]*", pull_ptx))
    assert ptx.count("barrier.cluster.arrive.relaxed;") == 1 and ptx.count("barrier.cluster.arrive;") == 0
    assert ptx.count("barrier.cluster.wait") == 1 and "ld.shared::cluster" not in ptx
    assert ptx.count("mbarrier.init.shared") == 1 and ptx.count("mbarrier.arrive.expect_tx") == 1
    assert ptx.count("mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64") == 1
    assert re.findall(FENCE_OR_ATOMIC, ptx, flags=re.M) == ["fence.mbarrier_init.release.cluster"]
    passes = -(-4 * 128 // 4 // (32 * cfg.warps))  # 16-byte vectors of the G = 4 rows, a thread each
    vec = "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32"
    assert ptx.count(vec) == passes
    assert ptx.count("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32") == 1  # C x G <= threads
    assert ptx.count("mapa.shared::cluster.u32") == 2 * (passes + 1)
    assert ptx.index("barrier.cluster.arrive.relaxed") < ptx.index("barrier.cluster.wait") < ptx.index(vec)
    regs, spills = _ptxas_usage(ptx, arch, tmp_path)
    assert spills == 0 and regs * 32 * cfg.warps <= 65536, (regs, spills)


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
def test_cluster_push_sass(arch):
    """SASS of the push merge: no MEMBAR anywhere (the pull merge's MEMBAR.ALL.GPU release is gone) and
    no DSMEM load (LD.E); the mbarrier init (SYNCS.EXCH.64) and its arrive before the one cluster arrive
    (UCGABAR_ARV, kernel start); the cluster wait (+ CCTL.IVALL, its acquire) before the st.async stores
    (STAS.128 the values, STAS the LSEs), then the mbarrier wait (SYNCS.PHASECHK.TRANS64.TRYWAIT, its
    acquire.cluster a CCTL.IVALL) and no cluster barrier after it."""
    cfg = dataclasses.replace(W8 if arch == "sm_90a" else W4, cluster=8, cluster_push=True)
    ops = _sass(_compile(cfg, arch).artifacts.CUBIN)
    pull = _sass(_compile(dataclasses.replace(cfg, cluster_push=False), arch).artifacts.CUBIN)
    assert "MEMBAR.ALL.GPU" in pull and not any(op.startswith("MEMBAR") for op in ops)
    assert not any(re.match(r"LD\.E\b", op) or op.startswith(("ATOMG", "RED")) for op in ops)

    def where(pred):
        return [i for i, op in enumerate(ops) if pred(op)]

    init, arrive = where(lambda op: "SYNCS.EXCH.64" in op), where(lambda op: "CGABAR_ARV" in op)
    wait, stas = where(lambda op: "CGABAR_WAIT" in op), where(lambda op: op.startswith("STAS"))
    trywait = where(lambda op: "SYNCS.PHASECHK.TRANS64.TRYWAIT" in op)
    assert len(init) == 1 and len(arrive) == 1 and len(wait) == 1 and len(trywait) == 1
    assert [ops[i].split()[0] for i in stas] == ["STAS.128", "STAS"]
    assert init[0] < arrive[0] < wait[0] < stas[0] and stas[-1] < trywait[0]
    assert ops[wait[0] + 1] == "CCTL.IVALL" and ops[trywait[0] + 1].endswith("CCTL.IVALL")


@pytest.mark.compile
def test_cluster_push_loops_when_threads_are_few():
    """G 16 (64 q / 4 kv heads) with 2 warps and C 8: the 128 LSE sends take two passes of the 64
    threads (a missing one would leave its receiver's mbarrier waiting forever), the 512 value vectors
    eight; every thread waits once."""
    kd, _ = _modules()
    cfg = DecodeConfig(2, 16, 2, **LATENCY, cluster=8, cluster_push=True)
    dims = ("bfloat16", "bfloat16", 64, 4, 128, 128, 16)
    assert why_not(*dims, cfg, "sm_90a") is None
    ptx = kd.compile_decode(*dims, cfg, arch="sm_90a", schedule=ScheduleConfig(cfg.tile_keys, 17, 128)).artifacts.PTX
    assert ptx.count("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32") == 2
    assert ptx.count("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32") == 8
    assert ptx.count("mbarrier.try_wait.parity.acquire.cluster") == 1
