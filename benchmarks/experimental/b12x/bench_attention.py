r"""Benchmark b12x.attention.paged decode against SDPA (FA2, cuDNN) and FlashInfer's decode wrapper.

    python -m benchmarks.experimental.b12x.bench_attention [--quick] [--kv bf16|fp8|all]
        [--mode decode|extend|all] [--batch 1 8 32 128] [--kv-len 1024 8192 32768]
        [--q-len 512 1024 2048 4096] [--decode-configs heuristic hf h:t66 ...]
        [--extend-configs heuristic 128x64x2x1p ...] [--timer events|graph] [--calls-per-graph N]
        [--json PATH]

Extend table (--mode extend or all): causal prefill without a cached prefix (kv_len = q_len, so
SDPA's top-left is_causal mask equals our right-aligned one), q_len in {512, 1024, 2048, 4096},
`extend_batch(q_len)` requests (4..16, about 32k query tokens), same heads / D / page. FLOPs (the
TFLOP/s column): 2 matmuls over the visible (query, key) pairs,
  `causal_flops` = 2 * B * Hq * (D + Dv) * (L * (N - L) + L * (L + 1) / 2).
Peers: SDPA FA2 and cuDNN with is_causal=True on contiguous [B, H, L, D] bf16 copies of q/K/V.
Ours once per --extend-configs entry (default `EXTEND_CONFIGS`: the heuristic's, row "b12x.paged",
then block_m x block_n x stages x row_blocks entries, a trailing "p" for page_prefetch, "c" for
cross_tile, "sN" for sub_tiles (software-pipelined key slices), "lN" for lazy_rescale (ExtendConfig), rows
"b12x.paged <entry>"), so one run measures the heuristic's choice against its alternatives.

Problem: decode (one query row per request), 32 query / 8 KV heads, head dim 128, page size 16, every
request of the case has kv_len keys; pages are a random permutation of the cache.
Bytes (the TB/s and % of the copy ceiling columns): the KV the op must read,
  B * kv_len * Hkv * (D + Dv) * kv_itemsize  (q, out and the page table are < 0.1% of it).
Ours: a plan prepared at capacity B, `run(binding=...)` (schedule + decode + merge launches), once
per --decode-configs entry (default `DECODE_CONFIGS`). An entry is `heuristic` (the plan's own
selection, row "b12x.paged") or `DECODE[:tN][:mN]` (row "b12x.paged <entry>"): DECODE is `h` (the
heuristic's DecodeConfig) or `WxKxS` (warps x keys_per_warp x stages), either with trailing flags:
`f` fused_merge=True (no merge launch: the last CTA of a split request merges), `s`
fused_schedule=True (no schedule launch: each CTA finds its own work row; B <= 128); `tN` / `mN` replace
the schedule's target_items / min_chunk (default: `split_schedule`'s). Such entries are passed as
`plan(caps, override=api.Selection(decode, schedule))`, with a work list of B + max(N, default) rows.
Peers on the same K/V in contiguous [B, Hkv, kv_len, D] bf16 (fp8 cases: the bf16 copy; SDPA has no
fp8 KV): SDPA with SDPBackend.FLASH_ATTENTION and CUDNN_ATTENTION (enable_gqa; --no-sdpa skips them), and, with
--flashinfer-site DIR (or $B12X_FLASHINFER_SITE), FlashInfer's stable BatchDecodeWithPagedKVCacheWrapper
on the same paged cache (bf16 and fp8 e4m3 KV), row "flashinfer decode", and on the extend cases its
BatchPrefillWithPagedKVCacheWrapper (causal; _flashinfer_extend.py), row "flashinfer prefill". This tree IS a `flashinfer`
distribution whose `flashinfer` has no kernels, so FlashInfer's wheel cannot be imported here: it runs
in a child process (_flashinfer_peer.py) with DIR first on sys.path, one child per KV dtype timing
every shape (one JIT each). The parent saves each case (q, page table and its indptr/indices/
last_page_len form, our output, the SDPA reference, the K/V seed and byte fingerprints) to a temp
file; the child redraws the K/V from the seed, checks it is bit-identical, checks FlashInfer's output
against the reference (a disagreeing peer is reported, not timed) and times it with our clock.
Without the option the FlashInfer peer is skipped and the reason printed.
Each case first checks ours against the SDPA output (bf16) or the reference (fp8).
An entry may end in "@bf16" or "@fp8" (timed on that KV dtype only), and --decode-configs takes preset
names (`DECODE_PRESETS`: "fp8-small", issue #8's fp8 candidates beside the heuristic); --shapes BxL ...
lists the decode cases instead of the --batch x --kv-len grid, e.g.
    --kv all --shapes 1x1024 1x8192 1x32768 8x1024 32x1024 --decode-configs fp8-small --copy-rows
--copy-rows adds a row "copy (same bytes)" per decode case: a device copy (an SM kernel, same timer)
moving the case's KV bytes, half read and half written. With both KV dtypes the run then prints, per
(B, L), the fp8 / bf16 ratio of "b12x.paged", the fp8 time issue #8's 1.7x needs, and whether the
same-size copy of the fp8 KV itself is faster than that (where it is not, no kernel reading those
bytes reaches 1.7x under this timer); the report's extra "fp8_over_bf16" holds the same.
--calls-per-graph N (graph timer) captures N back-to-back calls of every row (ours, the peers, the
copy, the FlashInfer child's) in each graph and reports the time a call: without the graph launch one
call a graph adds, as inside a serving step's graph (norm.mhc's T = 1 figure is timed that way too).
Without --json the report goes to $OUT/b12x_attention.json when $OUT is set.

How to run the FlashInfer peer. Here (CPU machine, with an index), stage the two wheels in a
git-ignored folder: flashinfer-python 0.7.2.post1 (py3-none-any, 59 MiB) and the apache-tvm-ffi its
METADATA requires (>=0.1.11,<0.2); 62.4 MiB together, so they travel alone in one device call:

    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_28_x86_64 -d .devwheels/fi flashinfer-python==0.7.2.post1 \
        'apache-tvm-ffi>=0.1.11,<0.2'

On the device machine (a `run` call per line; the first carries [".devwheels/fi"], then the two
install commands that ../shared/tools/device-wheels prints, with their own carries):

    python3 -m pip install -q --no-deps --target /root/fi .devwheels/fi/*.whl
    <the two device-wheels install commands>
    export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages && \
      python3 -m pip install -q --no-deps --no-build-isolation -e . && \
      python3 -m benchmarks.experimental.b12x.bench_attention --flashinfer-site /root/fi \
        --json $OUT/b12x_attention.json

/root/fi first on the child's sys.path also shadows /root/site's apache-tvm-ffi with FlashInfer's.
FlashInfer's other dependencies (ninja, einops, ...) must come from the image (GPU.md: they did); a
missing one is named in the skip reason the child prints.
Budget ~26 s of FlashInfer JIT per KV dtype (and per --flashinfer-variants entry; "tc,cuda" adds the
CUDA-core decode kernels as a second row); the JIT cache (~/.cache/flashinfer) lasts while the
machine stays warm. A fresh machine is bare: all installs again.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import b12x
from benchmarks.experimental.b12x import _flashinfer_extend as fiext
from benchmarks.experimental.b12x import _flashinfer_peer as fipeer
from benchmarks.experimental.b12x.common import (
    _REPO_ROOT,
    COPY_IMPL,
    Case,
    Table,
    add_calls_per_graph,
    ceilings,
    check_calls_per_graph,
    int_dims,
    measure,
    require_cuda,
    same_size_copy,
    standard_parser,
    write_report,
)
from flashinfer.experimental.b12x._lib.arch import target_arch
from flashinfer.experimental.b12x.attention.paged._config import (
    FUSED_SCHEDULE_MAX_BATCH,
    DecodeConfig,
    default_config,
    default_extend_config,
    parse_decode_entry,
    parse_extend_config,
    split_schedule,
    why_not,
    why_not_extend,
)
from flashinfer.experimental.b12x.attention.paged.api import Selection

MODULE = "benchmarks.experimental.b12x.bench_attention"
BATCHES, KV_LENS = (1, 8, 32, 128), (1024, 8192, 32768)
QUICK_BATCHES, QUICK_KV_LENS = (1, 32), (1024, 8192)
EXTEND_Q_LENS, QUICK_EXTEND_Q_LENS = (512, 1024, 2048, 4096), (1024, 4096)
# the heuristic's row (128x64x2x1 on the H200), then the alternatives it is judged against: page
# prefetch (p), two 4-warp CTAs per SM (64x64x2x1), and FlashAttention-2's 32 rows a warp
# (row_blocks 2: half the shared-memory reads of K/V per flop, 255 registers with ~100-160 B of
# spills of loop invariants, two CTAs per SM)
EXTEND_CONFIGS = ("heuristic", "128x64x2x1p", "64x64x2x1", "128x32x2x2", "128x64x2x2", "128x64x2x2p")
# the heuristic's row (split_schedule: one wave of resident CTAs, three launches), then: fused merge,
# fused merge + schedule (one launch), the previous schedule (4 CTAs per SM over the heads = 66 items
# at 8 KV heads) with three and with one launch, shorter and longer shortest chunks, and two stages
# (more resident CTAs), each with one launch
DECODE_CONFIGS = ("heuristic", "hf", "hfs", "h:t66", "hfs:t66", "hfs:m128", "hfs:m512", "4x16x2fs")
# issue #8's fp8 near misses (B = 1 L = 1k / 8k / 32k, B = 8 / 32 L = 1k), timed beside the heuristic by
# `--decode-configs fp8-small` (a preset name, `DECODE_PRESETS`); "@fp8": fp8 KV cases only, so the bf16
# cases of a `--kv all` run time the heuristic alone (the ratio's denominator). Session 14 found the
# fixed chain (launch, lengths -> page table -> KV, partial rows + ticket + merge), not the bytes in
# flight, to be what fp8 misses at these shapes (docs/predictions/attention.md), so the new rows are
# merges without global partials (clusters) at more CTAs a request, on 4-warp CTAs that fit two an SM
# (a 16-CTA cluster then needs 8 SMs of a GPC, not 16: session 14's 8-warp c16p queued), beside
# session 14's measured best per shape.
FP8_SMALL_CONFIGS = (
    "4x16x4fspldk:c16p@fp8",  # B = 1: 16 CTAs a head (2 an SM), 3 x 4 KB sub-tiles in flight a warp
    "4x32x2fspldk:c16p@fp8",  # B = 1: the same cluster on fp8's two-page tile (32 KB in flight a CTA)
    "8x32x2fspldk:c8p@fp8",  # B = 1 L = 2k-8k: session 14's best (10.46 µs at 8k)
    "8x32x2fspldk@fp8",  # B = 1 L = 32k: session 14's best (25.03 µs)
    "4x32x2fspldk:c4p@fp8",  # B = 8 L = 1k: 4 CTAs a request of 256 keys, 256 CTAs at 2 an SM: one wave
    "4x16x4fspldk:c4p@fp8",  # B = 8 L = 1k: the same cluster, 48 KB in flight a CTA
    "8x32x2fspldk:c2p@fp8",  # B = 8 L = 1k: session 14's best (8.26 µs)
    "4x32x2fspldke@fp8",  # B = 32 L = 1k: the heuristic's tile + early page-table prefetch (22.62 vs 22.98)
)
DECODE_PRESETS = {"fp8-small": ("heuristic", *FP8_SMALL_CONFIGS)}
KV_ONLY = {"bf16": "bfloat16", "fp8": "float8_e4m3fn"}  # an entry's "@kv" suffix: time it on that KV dtype only
EXTEND_TOKENS = 32768  # query tokens per extend case: enough CTAs (>= 8 waves) at every q_len
HQ, HKV, D, PAGE = fipeer.HQ, fipeer.HKV, fipeer.D, fipeer.PAGE
FI_TIMEOUT_S = 1800  # one child per dtype: JIT (~26 s) + redrawing and timing every shape
paged = b12x.attention.paged


def flashinfer_skip_note(site: str | None) -> str | None:
    """Why the FlashInfer peer will not run (None: it runs in a child with ``site`` first on sys.path)."""
    if site is None:
        where = Path(_REPO_ROOT, "flashinfer")
        return (
            f"this tree's flashinfer ({where}) has no kernels and shadows FlashInfer's wheel in this process; "
            "pass --flashinfer-site DIR or set B12X_FLASHINFER_SITE (DIR: pip install --no-deps --target DIR "
            "flashinfer-python apache-tvm-ffi) to time it in a child process"
        )
    return None


def _sdpa(backend, causal=False):
    from torch.nn.attention import sdpa_kernel

    def call(q4, k4, v4):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, is_causal=causal, enable_gqa=True)

    return call


def split_entry(entry: str) -> tuple[str, str | None]:
    """(entry without its "@bf16" / "@fp8" suffix, the KV dtype it is limited to or None)."""
    body, at, kv = entry.partition("@")
    if not at:
        return entry, None
    if kv not in KV_ONLY:
        raise ValueError(f"a decode entry's suffix is @bf16 or @fp8, got {entry!r}")
    return body, KV_ONLY[kv]


def expand_presets(entries) -> list[str]:
    """--decode-configs with preset names (`DECODE_PRESETS`) replaced by their entries, first use kept."""
    out = []
    for entry in entries:
        for e in DECODE_PRESETS.get(entry, (entry,)):
            if e not in out:
                out.append(e)
    return out


def parse_shapes(texts) -> list[tuple[int, int]]:
    """--shapes 'BxL' entries as (batch, kv_len)."""
    out = []
    for text in texts:
        dims = int_dims(text, 2)
        if dims is None or 0 in dims:
            raise ValueError(f"a shape is BxL (requests x KV length), like 8x1024, got {text!r}")
        out.append(dims)
    return out


def decode_selection(entry: str, kv_dtype: str, arch: str, sm_count: int):
    """The Selection an entry stands for (None: 'heuristic', the plan's own)."""
    entry = split_entry(entry)[0]
    if entry == "heuristic":
        return None
    decode, flags, target, min_chunk = parse_decode_entry(entry)
    if decode is None:
        h = default_config(kv_dtype, D, PAGE, arch)
        decode = DecodeConfig(h.warps, h.keys_per_warp, h.stages, fused_merge="f" in flags, fused_schedule="s" in flags)
    sched = split_schedule(decode, kv_dtype, D, HKV, sm_count, arch)
    sched = dataclasses.replace(
        sched, target_items=target or sched.target_items, min_chunk=min_chunk or sched.min_chunk
    )
    return Selection(decode, sched)  # the schedule keeps split_schedule's pairs / group / budget: the kernel's own


def extend_batch(q_len: int, tokens: int = EXTEND_TOKENS) -> int:
    """Requests of an extend case: about `tokens` query tokens, 4..16 requests."""
    return max(4, min(16, tokens // q_len))


def causal_flops(batch: int, q_len: int, kv_len: int, hq: int, d: int, dv: int) -> int:
    """QK^T and PV over the visible pairs: query i of L (right-aligned) sees kv_len - L + i + 1 keys."""
    pairs = q_len * (kv_len - q_len) + q_len * (q_len + 1) // 2
    return 2 * batch * hq * (d + dv) * pairs


def run_extend_case(table, args, batch, q_len, fp8, dev, want_record=False):
    """Causal prefill of `batch` requests of q_len tokens (no prefix): ours vs SDPA FA2 / cuDNN; with
    want_record, also the record of the FlashInfer prefill peer (`_flashinfer_extend.extend_record`). Returns
    (case, record or None)."""
    drawn = fiext.make_extend_case(batch, q_len, fp8, dev)
    q, k_cache, v_cache, page_table = drawn["q"], drawn["k_cache"], drawn["v_cache"], drawn["page_table"]
    lens, cu, descale = drawn["lens"], drawn["cu"], drawn["descale"]
    kv_len, pages_per, num_pages = q_len, q_len // PAGE, k_cache.shape[0]
    kv_name = "fp8" if fp8 else "bf16"
    flops = causal_flops(batch, q_len, kv_len, HQ, D, D)
    case = Case(f"extend_{kv_name}", {"B": batch, "Lq": q_len, "L": kv_len}, flops=flops, ceiling="bf16")
    kc = fiext.contiguous_bf16(k_cache, page_table, descale)
    vc = fiext.contiguous_bf16(v_cache, page_table, descale)
    q4 = q.view(batch, q_len, HQ, D).transpose(1, 2).contiguous()  # [B, Hq, L, D]
    want = torch.nn.functional.scaled_dot_product_attention(q4, kc, vc, is_causal=True, enable_gqa=True).float()
    kv_dtype = "float8_e4m3fn" if fp8 else "bfloat16"
    heuristic = default_extend_config(kv_dtype, D, target_arch(dev), "extend")
    for entry in args.extend_configs:
        config = heuristic if entry == "heuristic" else parse_extend_config(entry)
        caps = paged.Caps(
            device=str(dev), mode="extend", dtype="bfloat16", kv_dtype=kv_dtype, num_q_heads=HQ, num_kv_heads=HKV,
            head_dim_qk=D, head_dim_vo=D, page_size=PAGE, max_total_q=batch * q_len, max_batch=batch,
            max_page_table_width=pages_per, max_work_items=1, max_partial_rows=1, num_cache_pages=num_pages,
            config=config,
        )  # fmt: skip
        plan = paged.plan(caps)
        with b12x.PreparationSession(dev) as session:
            session.prepare([plan])
        kw = dict(k_descale=descale, v_descale=descale) if fp8 else {}
        binding = paged.bind(plan, q=q, k_cache=k_cache, v_cache=v_cache, page_table=page_table, cache_seqlens=lens,
                             cu_seqlens_q=cu, **kw)  # fmt: skip
        out, _ = paged.run(binding=binding)
        got = out.view(batch, q_len, HQ, D).transpose(1, 2).float()
        err = (got - want).abs().max().item()
        del got
        tol = 0.05 if fp8 else 0.02
        note = f"{config}; max |ours - sdpa| = {err:.2e}" + (" (fp8 KV vs its bf16 dequant)" if fp8 else "")
        if not err <= tol:
            note += " MISMATCH"
            print(f"WARNING {case.label}: {note}", file=sys.stderr)
        impl = "b12x.paged" if entry == "heuristic" else f"b12x.paged {entry}"
        table.add(case, impl, measure(lambda binding=binding: paged.run(binding=binding), args), note=note)
        session.release(plan)
    del want
    _time_sdpa_peers(table, case, args, (q4, kc, vc), fp8, causal=True)
    record = fiext.extend_record(batch, q_len, fp8, drawn, tol=0.05 if fp8 else 0.02) if want_record else None
    return case, record


def _time_sdpa_peers(table, case, args, qkv, fp8: bool, causal: bool = False) -> None:
    """SDPA's FA2 and cuDNN backends on the contiguous bf16 copies (none with --no-peers or --no-sdpa); a
    backend that refuses the shape is skipped with its reason."""
    if args.no_peers or args.no_sdpa:
        return
    from torch.nn.attention import SDPBackend

    for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
        fn = _sdpa(backend, causal=causal)
        label = name + (" (bf16 kv)" if fp8 else "")
        try:
            fn(*qkv)
            table.add(case, label, measure(lambda fn=fn: fn(*qkv), args), peer=True)
        except RuntimeError as e:
            print(f"peer {label} skipped on {case.label}: {str(e).splitlines()[0][:160]}", file=sys.stderr)


def decode_caps(dev, kv_dtype: str, cap: int, kv_len: int, num_pages: int, selection=None):
    """The decode plan's Caps for requests of up to kv_len keys: `cap` requests (--capacity, else the case's
    batch), work rows for the selection's split target (the default's where `selection` is None)."""
    work = paged.default_max_work_items(cap, HKV)
    if selection is not None:
        work = max(work, cap + selection.schedule.target_items)
    return paged.Caps(
        device=str(dev), mode="decode", dtype="bfloat16", kv_dtype=kv_dtype,
        num_q_heads=HQ, num_kv_heads=HKV, head_dim_qk=D, head_dim_vo=D, page_size=PAGE, max_total_q=cap,
        max_batch=cap, max_page_table_width=kv_len // PAGE, max_work_items=work,
        max_partial_rows=paged.default_max_partial_rows(work, HQ), num_cache_pages=num_pages,
    )  # fmt: skip


def run_case(table, args, batch, kv_len, fp8, dev, want_record=False):
    """Time ours (a row per --decode-configs entry) and the SDPA peers on one case; returns (case,
    FlashInfer case record or None)."""
    drawn = fipeer.make_case(batch, kv_len, fp8, dev)
    q, k_cache, v_cache = drawn["q"], drawn["k_cache"], drawn["v_cache"]
    page_table, lens, descale = drawn["page_table"], drawn["lens"], drawn["descale"]
    itemsize = 1 if fp8 else 2
    kv_bytes = batch * kv_len * HKV * 2 * D * itemsize
    kv_name = "fp8" if fp8 else "bf16"
    cap = max(batch, args.capacity or batch)  # the plan's request capacity; the live batch is `batch`
    shape = {"B": batch, "L": kv_len} if cap == batch else {"B": batch, "L": kv_len, "cap": cap}
    case = Case(f"decode_{kv_name}", shape, bytes=kv_bytes, ceiling="copy")
    kv_dtype = "float8_e4m3fn" if fp8 else "bfloat16"
    kc = fiext.contiguous_bf16(k_cache, page_table, descale)
    vc = fiext.contiguous_bf16(v_cache, page_table, descale)
    q4 = q.unsqueeze(2)  # [B, Hq, 1, D]
    want = torch.nn.functional.scaled_dot_product_attention(q4, kc, vc, enable_gqa=True).squeeze(2)
    tol = 0.05 if fp8 else 0.02
    arch, sms = target_arch(dev), torch.cuda.get_device_properties(dev).multi_processor_count
    record = None
    for entry in args.decode_configs:
        entry, only = split_entry(entry)
        if only not in (None, kv_dtype):
            continue
        selection = decode_selection(entry, kv_dtype, arch, sms)
        if selection is not None and selection.decode.fused_schedule and cap > FUSED_SCHEDULE_MAX_BATCH:
            print(f"b12x.paged {entry} skipped on {case.label}: fused_schedule needs B <= {FUSED_SCHEDULE_MAX_BATCH}")
            continue
        caps = decode_caps(dev, kv_dtype, cap, kv_len, k_cache.shape[0], selection)
        plan = paged.plan(caps, override=selection)
        with b12x.PreparationSession(dev) as session:
            session.prepare([plan])
        kw = dict(k_descale=descale, v_descale=descale) if fp8 else {}
        binding = paged.bind(plan, q=q, k_cache=k_cache, v_cache=v_cache, page_table=page_table, cache_seqlens=lens,
                             **kw)  # fmt: skip
        out, _ = paged.run(binding=binding)
        err = (out.float() - want.float()).abs().max().item()
        sel = plan.state.selection
        note = f"{sel.decode}, {sel.schedule}"
        if getattr(sel, "small", None) is not None:  # the plan's live small-batch kernel
            note += f"; live B <= {sel.small_below}: {sel.small.decode}"
        note += f"; max |ours - sdpa| = {err:.2e}"
        note += " (fp8 KV vs its bf16 dequant)" if fp8 else ""
        if not err <= tol:
            note += " MISMATCH"
            print(f"WARNING {case.label} {entry}: {note}", file=sys.stderr)
        impl = "b12x.paged" if entry == "heuristic" else f"b12x.paged {entry}"
        table.add(case, impl, measure(lambda binding=binding: paged.run(binding=binding), args), note=note)
        if want_record and record is None:  # FlashInfer is checked against the first entry's output
            record = fipeer.case_record(batch, kv_len, fp8, drawn, out, want, tol)
        session.release(plan)  # the caches go with this frame; run() empties the allocator cache
    if args.copy_rows:  # its own generator: the case's inputs stay those of runs without it
        fn = same_size_copy(kv_bytes, 1, dev, torch.Generator(device=dev).manual_seed(1))
        note = "reference: a device copy moving the case's KV bytes (half read, half written), same timer"
        table.add(case, COPY_IMPL, measure(fn, args), peer=True, note=note)
        del fn
    _time_sdpa_peers(table, case, args, (q4, kc, vc), fp8)
    return case, record


FP8_TARGET = 1.7  # issue #8: FP8 KV >= 1.7x faster than BF16 KV at the same decode shape


def fp8_over_bf16(rows, target: float = FP8_TARGET, impl: str = "b12x.paged") -> list[dict]:
    """Per decode (B, L) with both KV dtypes timed: bf16 and fp8 µs of `impl`, their ratio, the fp8
    time `target` needs (bf16 / target) and, where --copy-rows timed it, the same-size copy of the fp8
    case's KV bytes: `copy_allows` is False where even that copy is slower than the time needed (no
    kernel reading those bytes can reach the target there under this timer)."""
    times = {}
    for r in rows:
        kind = {"decode_bf16": "bf16", "decode_fp8": "fp8"}.get(r.case.name)
        if kind is None or r.impl not in (impl, COPY_IMPL):
            continue
        key = (r.case.shape.get("B"), r.case.shape.get("L"))
        times.setdefault(key, {})[(kind, r.impl)] = r.time_us
    out = []
    for (b, length), t in times.items():
        bf16, fp8 = t.get(("bf16", impl)), t.get(("fp8", impl))
        if bf16 is None or fp8 is None:
            continue
        need = bf16 / target
        copy = t.get(("fp8", COPY_IMPL))
        out.append(
            dict(B=b, L=length, bf16_us=bf16, fp8_us=fp8, ratio=bf16 / fp8, fp8_needed_us=need,
                 fp8_copy_us=copy, copy_allows=None if copy is None else copy <= need)
        )  # fmt: skip
    return out


def print_fp8_over_bf16(found: list[dict], target: float = FP8_TARGET) -> None:
    for d in found:
        line = f"fp8 / bf16 KV B={d['B']} L={d['L']}: {d['ratio']:.2f}x (>= {target}x needs fp8 <= {d['fp8_needed_us']:.2f} us"
        if d["fp8_copy_us"] is not None:
            verdict = "within reach" if d["copy_allows"] else "beyond it: slower than the needed time"
            line += f"; the same-size copy of fp8's KV bytes takes {d['fp8_copy_us']:.2f} us, {verdict}"
        print(line + ")")


def peer_command(site: str, case_file: str | os.PathLike, args) -> list[str]:
    """The child's command line: same clock, iteration counts and device as this run."""
    cmd = [sys.executable, "-m", fipeer.__name__, "--site", str(site), "--cases", str(case_file)]
    cmd += ["--variants", args.flashinfer_variants, "--timer", args.timer, "--device", str(args.device)]
    cmd += ["--iters", str(args.iters), "--warmup", str(args.warmup)] + (["--quick"] if args.quick else [])
    return cmd + ["--calls-per-graph", str(args.calls_per_graph)]


def run_flashinfer_peer(table, args, cases: dict, records: list[dict], kv_name: str) -> str:
    """Time FlashInfer on ``records`` in one child process; add its rows to ``table``; return a status."""
    with tempfile.TemporaryDirectory(prefix="b12x_fi_") as tmp:
        case_file = Path(tmp) / f"cases_{kv_name}.pt"
        fipeer.save_cases(case_file, records)
        cmd = peer_command(args.flashinfer_site, case_file, args)
        print(f"flashinfer peer ({kv_name}, {len(records)} shapes, JIT on first use): child process", flush=True)
        try:  # stderr (FlashInfer's JIT log, tracebacks) goes straight through
            proc = subprocess.run(cmd, cwd=_REPO_ROOT, stdout=subprocess.PIPE, text=True, timeout=FI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"skipped: the child ran past {FI_TIMEOUT_S} s"
    for line in proc.stdout.splitlines():
        if not line.startswith(fipeer.RESULT_MARKER):
            print(f"  [flashinfer] {line}")
    result = fipeer.parse_result(proc.stdout)
    if result is None:
        return f"skipped: the child (exit {proc.returncode}) printed no result"
    if result["status"] != "ok":
        return f"{result['status']}: {result.get('reason', '?')}"
    where = f"flashinfer {result['flashinfer_version']} at {result['flashinfer_file']}"
    timed = 0
    for r in result["results"]:
        case = cases[(r["fp8"], r["batch"], r["kv_len"])]
        if r["timing"] is None:
            print(f"WARNING peer {r['impl']} on {case.label}: {r['note']}", file=sys.stderr)
            continue
        table.add(case, r["impl"], fipeer.timing_from(r["timing"]), peer=True, note=r["note"])
        timed += 1
    untimed = [f"{r['impl']} B={r['batch']} L={r['kv_len']}: {r['note']}" for r in result["results"] if not r["timing"]]
    return f"measured {timed}/{len(result['results'])} ({where})" + (f"; {'; '.join(untimed)}" if untimed else "")


def build_parser():
    parser = standard_parser(__doc__.splitlines()[0])
    parser.add_argument("--kv", choices=("bf16", "fp8", "all"), default="all", help="KV cache dtype")
    parser.add_argument("--mode", choices=("decode", "extend", "all"), default="decode", help="which table(s)")
    parser.add_argument("--q-len", type=int, nargs="+", default=None, help=f"extend q_lens (default {EXTEND_Q_LENS})")
    parser.add_argument(
        "--extend-configs", nargs="+", default=list(EXTEND_CONFIGS), metavar="MxNxSxR[p][c][sN][lN]",
        help="extend kernel configs to time (block_m x block_n x stages x row_blocks, 'p': page_prefetch, 'c': "
        "cross_tile, 'sN': sub_tiles, 'lN': lazy_rescale; or 'heuristic'), a row each; 'LARGE+SMALL@N[c|o][s][r|R]': "
        "the live tile choice (c: if-nodes, o: PDL overlap, s: small kernel first, r / R: the small / both "
        "kernels persistent), e.g. 256x64x3x2pgiw+128x64x2x2p@768osr",
    )  # fmt: skip
    parser.add_argument(
        "--decode-configs", nargs="+", default=list(DECODE_CONFIGS), metavar="ENTRY",
        help="decode configs to time, a row each: 'heuristic' or h|WxKxS[f][s][p][l][d][r][g][k][e][q][:tN][:mN][:oN][:uN][:cN[p]] "
        "(f: fused merge; s: fused schedule, B <= 128; p, l, d: fast prologue, preloaded lengths, direct items; r: "
        "persistent one-wave grid; g: page-table prefetch per item; k: lean ticket (one fence); e: early page-table "
        "prefetch; q: Q's fragments reloaded each sub-tile (fewer registers); tN / mN: the schedule's target_items / min_chunk; oN min_ctas, uN merge_unroll; cN: clusters of N "
        "CTAs a request merging through DSMEM, N in 2, 4, 8 (16 on sm_90a), with f and s: e.g. 8x16x2fspld:c8; cNp: "
        "the same cluster, each CTA pushing its slices to the peers with st.async: 8x16x2fspld:c8p); a trailing "
        f"@bf16 / @fp8 times the entry on that KV dtype only; presets: {', '.join(DECODE_PRESETS)}",
    )  # fmt: skip
    parser.add_argument("--batch", type=int, nargs="+", default=None, help=f"batch sizes (default {BATCHES})")
    parser.add_argument(
        "--shapes", nargs="+", default=None, metavar="BxL",
        help="decode cases as requests x KV length (e.g. 1x1024 8x1024), instead of --batch x --kv-len",
    )  # fmt: skip
    parser.add_argument("--kv-len", type=int, nargs="+", default=None, help=f"KV lengths (default {KV_LENS})")
    site_help = "folder holding FlashInfer's wheel (pip install --no-deps --target DIR); times it in a child process"
    parser.add_argument(
        "--flashinfer-site", metavar="DIR", default=os.environ.get("B12X_FLASHINFER_SITE") or None, help=site_help
    )
    parser.add_argument(
        "--no-sdpa", action="store_true",
        help="skip the SDPA peers (FlashInfer's still runs with --flashinfer-site): a FlashInfer re-time in one call",
    )  # fmt: skip
    variants_help = f"comma-separated FlashInfer variants of {sorted(fipeer.VARIANTS)} (tc: use_tensor_cores=True)"
    parser.add_argument("--flashinfer-variants", default="tc", help=variants_help)
    parser.add_argument(
        "--copy-rows", action="store_true",
        help="decode: also time a device copy of each case's KV bytes (row 'copy (same bytes)'), and with both KV "
        "dtypes say where FP8 >= 1.7x BF16 would need fp8 to beat that copy",
    )  # fmt: skip
    parser.add_argument(
        "--capacity", type=int, default=None, metavar="N",
        help="decode: plans sized for N requests (Caps.max_batch, max_total_q, work rows) serving each case's live "
        "batch below it, as a serving plan does; the heuristic then chooses by N (rows gain a 'cap' field; cases "
        "of more requests keep their own size)",
    )  # fmt: skip
    parser.add_argument(
        "--live-small", type=int, default=None, metavar="N",
        help="decode: set attention.paged's live small-batch bound (_decode_choice.LIVE_SMALL_BATCH) for this run: "
        "plans above 16 requests also run the 8-warp cluster-pairs kernel for live batches of at most N (0: off; "
        "default: the library's)",
    )  # fmt: skip
    add_calls_per_graph(parser)  # every row, the FlashInfer child's too
    return parser


def parse_args(argv: list[str] | None = None):
    parser = build_parser()
    args = parser.parse_args(argv)
    check_calls_per_graph(parser, args)
    if args.flashinfer_site is not None and not Path(args.flashinfer_site).is_dir():
        parser.error(f"--flashinfer-site (or B12X_FLASHINFER_SITE) must be a directory, got {args.flashinfer_site!r}")
    names = [v.strip() for v in args.flashinfer_variants.split(",") if v.strip()]
    if not names or any(v not in fipeer.VARIANTS for v in names):
        parser.error(f"--flashinfer-variants must name some of {sorted(fipeer.VARIANTS)}, got {names}")
    if args.live_small is not None and not 0 <= args.live_small <= 16:
        parser.error(f"--live-small must be in 0..16 (the pairs' plan capacity), got {args.live_small}")
    if args.capacity is not None and not 1 <= args.capacity <= 1024:
        parser.error(f"--capacity must be a request count in 1..1024, got {args.capacity}")
    if args.kv_len and any(n % PAGE for n in args.kv_len):
        parser.error(f"--kv-len values must be multiples of the page size {PAGE}")
    if args.q_len and any(n < PAGE or n % PAGE for n in args.q_len):
        parser.error(f"--q-len values must be positive multiples of the page size {PAGE}")
    try:
        args.shapes = parse_shapes(args.shapes) if args.shapes else None
    except ValueError as e:
        parser.error(f"--shapes: {e}")
    if args.shapes and any(n % PAGE for _, n in args.shapes):
        parser.error(f"--shapes KV lengths must be multiples of the page size {PAGE}")
    args.decode_configs = expand_presets(args.decode_configs)
    for entry in args.decode_configs:
        try:
            entry, only = split_entry(entry)
            if entry == "heuristic":
                continue
            decode, *_ = parse_decode_entry(entry)
        except ValueError as e:
            parser.error(f"--decode-configs: {e}")
        timed = {"bf16": ("bfloat16",), "fp8": ("float8_e4m3fn",), "all": ("bfloat16", "float8_e4m3fn")}[args.kv]
        timed = tuple(kv for kv in timed if only in (None, kv))
        for kv in timed if decode is not None else ():  # the KV dtypes this run times (r: fp8 needs 4x32x3)
            reason = why_not("bfloat16", kv, HQ, HKV, D, D, PAGE, decode, "sm_90a")
            if reason is not None:
                parser.error(f"--decode-configs {entry}: {reason}")
    for entry in args.extend_configs:
        if entry == "heuristic":
            continue
        try:
            config = parse_extend_config(entry)
        except ValueError as e:
            parser.error(f"--extend-configs: {e}")
        reason = why_not_extend("bfloat16", "bfloat16", HQ, HKV, D, D, PAGE, config, "sm_90a")
        if reason is not None:
            parser.error(f"--extend-configs {entry}: {reason}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dev = require_cuda("bench_attention", args.device)
    if args.live_small is not None:  # a switch of the library's heuristic, for an A/B in separate runs
        from flashinfer.experimental.b12x.attention.paged import _decode_choice

        _decode_choice.LIVE_SMALL_BATCH = args.live_small
    batches = args.batch or (QUICK_BATCHES if args.quick else BATCHES)
    kv_lens = args.kv_len or (QUICK_KV_LENS if args.quick else KV_LENS)
    ceil = ceilings(dev)
    modes = ("decode", "extend") if args.mode == "all" else (args.mode,)
    title = f"b12x attention.paged {'+'.join(modes)} on {ceil.device_name} (Hq {HQ}, Hkv {HKV}, D {D}, page {PAGE})"
    title += f", {args.calls_per_graph} calls a graph" if args.calls_per_graph > 1 else ""
    table = Table(title, ceil)
    fi_note = flashinfer_skip_note(args.flashinfer_site)
    if fi_note and not args.no_peers:
        print(f"peer flashinfer skipped: {fi_note}")
    with_fi = fi_note is None and not args.no_peers
    fi_status = {}
    kinds = {"bf16": (False,), "fp8": (True,), "all": (False, True)}[args.kv]
    if "extend" in modes:
        for fp8 in kinds:
            cases, records = {}, []
            for q_len in args.q_len or (QUICK_EXTEND_Q_LENS if args.quick else EXTEND_Q_LENS):
                batch = extend_batch(q_len)
                case, record = run_extend_case(table, args, batch, q_len, fp8, dev, want_record=with_fi)
                cases[(fp8, batch, q_len)] = case
                records += [record] if record is not None else []
                torch.cuda.empty_cache()
            if records:  # FlashInfer's paged prefill in one child per dtype, as the decode peer
                kv_name = ("fp8" if fp8 else "bf16") + " extend"
                fi_status[kv_name] = run_flashinfer_peer(table, args, cases, records, kv_name)
                print(f"peer flashinfer ({kv_name}): {fi_status[kv_name]}")
    for fp8 in kinds if "decode" in modes else ():
        cases, records = {}, []
        for batch, kv_len in args.shapes or [(b, n) for b in batches for n in kv_lens]:
            case, record = run_case(table, args, batch, kv_len, fp8, dev, want_record=with_fi)
            cases[(fp8, batch, kv_len)] = case
            records += [record] if record is not None else []
            torch.cuda.empty_cache()
        if records:  # one child per dtype: FlashInfer JIT-compiles once for all its shapes
            kv_name = "fp8" if fp8 else "bf16"
            fi_status[kv_name] = run_flashinfer_peer(table, args, cases, records, kv_name)
            print(f"peer flashinfer ({kv_name}): {fi_status[kv_name]}")
    table.print()
    ratios = fp8_over_bf16(table.rows)
    print_fp8_over_bf16(ratios)
    fi_extra = "not run (--no-peers)" if args.no_peers else (fi_note or fi_status)
    extra = {"flashinfer_peer": fi_extra, "bytes": "B*L*Hkv*(D+Dv)*kv_itemsize",
             "flops": "extend: 2*B*Hq*(D+Dv)*(Lq*(L-Lq) + Lq*(Lq+1)/2)", "fp8_over_bf16": ratios}  # fmt: skip
    write_report(table, args, "b12x_attention.json", MODULE, argv, dev, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
