"""attention.paged: Caps -> plan -> (PreparationSession) -> bind -> run. Host code only, no kernels.

    caps = Caps(device="cuda", mode="decode", dtype="bfloat16", kv_dtype="float8_e4m3fn",
                num_q_heads=32, num_kv_heads=8, head_dim_qk=128, head_dim_vo=128, page_size=16,
                max_total_q=128, max_batch=128, max_page_table_width=2048,
                max_work_items=default_max_work_items(128, 8),
                max_partial_rows=default_max_partial_rows(default_max_work_items(128, 8), 32),
                num_cache_pages=300_000)
    p = plan(caps)
    with b12x.PreparationSession("cuda") as s:
        s.prepare([p])
    out, lse = run(binding=bind(p, q=q, k_cache=k, v_cache=v, page_table=pt, cache_seqlens=lens,
                                k_descale=kd, v_descale=vd))

Implemented: modes "decode" (every request has one query row), "extend" (ragged q_len >= 0 per
request, `cu_seqlens_q`) and "verify" (extend with one q_len for every request), q bf16/fp16, KV in
q's dtype or fp8 e4m3 (with per-(request, KV head) descales), head_dim_qk and head_dim_vo each in {64,
128, 256} (Dqk != Dv too: the default tiles are those of the larger), page size 16/32/64/128, Hq/Hkv <= 16,
sliding window (`window_left`), sink logits.
msa_block_sparse raises NotImplementedError at plan time. Tensor contracts: FORMATS.md
"attention.paged" and `reference.py`.

`run` launches its kernels on torch's current stream, reads no live tensor on the host and
allocates nothing, so a captured CUDA graph replays correctly for any live lengths (and any number
of empty requests) within the capacities. Decode: (1) schedule: split the live KV lengths into
work items (on device), (2) decode: one CTA per (item, KV head), (3) merge: combine the items of
split requests (with `DecodeConfig(fused_merge=True)` the last CTA of each split (request, KV head)
merges instead, through a ticket counter in the plan's scratch, and there is no third launch; with
`fused_schedule=True`, batches up to FUSED_SCHEDULE_MAX_BATCH, each decode CTA recomputes its work
row and there is no first launch). The
split is `split_schedule`'s (one wave of resident CTAs); `plan(caps, override=Selection(decode,
schedule))` sets both configs. The heuristic lives in `_decode_choice`: plans of 5-16 requests on sm_90a decode as
two-CTA clusters fed by the live schedule (`DecodeConfig.cluster_pairs`); `Selection.small` may add a second
one-launch kernel that run() launches instead for live batches of at most `small_below` requests (the live batch is
the bound tensors' shape, so no host read: `_decode_choice.LIVE_SMALL_BATCH`, 16 since session 39).
Extend/verify: (1) schedule: one item per (request, tile of query tokens) from the
live cu_seqlens_q, (2) extend: one FlashAttention-2 CTA per (item, KV head); with two tiles
(`ExtendConfig.small`, `_kernel_extend_schedule`) the schedule also picks the tile from the live
token-weighted mean q_len and both extend kernels launch, the unchosen one with 0 items (with
`conditional`, under torch CUDA-graph capture, each in an if-node on the choice, so the unchosen one
is not launched; with `overlap`, the second one as a programmatic dependent launch; `small_first`,
`early_launch` and `persistent` order them, chain the first to the schedule and make a dead grid one
wave: `ExtendConfig`). Verify runs the
extend kernel: its q_len * G rows fill the same packed tiles, and one kernel is one thing to get
right (decode's split-KV would help verify only at small batch and long context).
CPU tensors run `reference.py` instead.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ..._lib.checks import describe
from ..._lib.custom_op import eager_binding_refused
from ..._lib.scratch import ScratchBufferSpec, dtype_name
from ...preparation.plan import Plan
from ._bind_values import check_values as check_live_values
from ._bind_views import kept as kept_views
from ._bind_views import scratch_views
from ._caps_checks import (  # noqa: F401 (the op's modes and limits: callers read them from api)
    DTYPES,
    EXTEND_MODES,
    IMPLEMENTED_MODES,
    INT32_MAX,
    KV_DTYPES,
    MAX_BATCH,
    MAX_GRID_Y,
    MODES,
    OP,
    check_fused_schedule_batch,
    validate_caps,
)
from ._config import (
    FUSED_SCHEDULE_MAX_BATCH,
    DecodeConfig,
    ExtendConfig,
    ScheduleConfig,
    default_extend_config,
    extend_item_capacity,
    tile_head_dim,
    why_not,
    why_not_extend,
    why_not_schedule,
)
from ._config_extend import resident_ctas
from ._decode_choice import decode_choice, small_choice
from .reference import LOG2E, paged_attention_reference

DEFAULT_SM_COUNT = 132  # H200; only sizes the default work list when no device can be asked


# ---- capacities ----------------------------------------------------------------------------------
def target_items(num_kv_heads: int, sm_count: int = DEFAULT_SM_COUNT) -> int:
    """Split items the default work list reserves beyond one per request: 4 CTAs per SM over the KV
    heads, room for `split_schedule`'s target (one wave of resident CTAs, at most 4 per SM at 128
    threads and ~56 KB of shared memory each) and for overrides up to that size."""
    return max(1, math.ceil(4 * sm_count / num_kv_heads))


def default_max_work_items(max_batch: int, num_kv_heads: int, sm_count: int = DEFAULT_SM_COUNT) -> int:
    """Work-list rows: one per request plus the split target (the schedule never exceeds it)."""
    return max_batch + target_items(num_kv_heads, sm_count)


def default_max_partial_rows(max_work_items: int, num_q_heads: int) -> int:
    """Partial-output rows ([Dv] fp32 each): one per (work item, query head)."""
    return max_work_items * num_q_heads


@dataclass(frozen=True, kw_only=True)
class Caps:
    """Static geometry and capacities of one paged-attention instance (see the module docstring).

    max_total_q: query rows (decode: = live batch); max_batch: requests; max_page_table_width:
    page-table columns; max_work_items / max_partial_rows: decode's split-KV work list and
    partial-output rows (the work list holds min(max_work_items, max_partial_rows // num_q_heads)
    items and must hold at least max_batch; extend/verify size their own tile list from
    max_total_q and max_batch); num_cache_pages: pages in the KV cache; use_cuda_graph: accepted
    for API compatibility (run is always capture-safe); copy_runtime_metadata: run first copies
    cache_seqlens, page_table (and cu_seqlens_q) into plan-owned buffers (stable addresses for
    graph capture); config: a `DecodeConfig` (decode; `fused_merge=True` merges split requests in
    their last CTA) or `ExtendConfig` (extend/verify) to use instead of the heuristic one; pdl
    (decode): "off", "wait" or "prefetch", the decode kernel's programmatic dependent launch
    (`DecodeConfig.pdl`: "wait" is always correct; "prefetch" needs the kernel launched just before
    attention to leave cache_seqlens and the page table alone, so not with copy_runtime_metadata),
    applied to the heuristic's config or to `config`.
    """

    device: str
    mode: str
    dtype: str
    kv_dtype: str
    num_q_heads: int
    num_kv_heads: int
    head_dim_qk: int
    head_dim_vo: int
    page_size: int
    max_total_q: int
    max_batch: int
    max_page_table_width: int
    max_work_items: int
    max_partial_rows: int
    num_cache_pages: int
    use_cuda_graph: bool = False
    copy_runtime_metadata: bool = False
    msa_block_sparse: bool = False
    config: object = None
    pdl: str = "off"

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", str(self.device))
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        object.__setattr__(self, "kv_dtype", dtype_name(self.kv_dtype))

    @property
    def group(self) -> int:
        return self.num_q_heads // self.num_kv_heads

    @property
    def item_capacity(self) -> int:
        return min(self.max_work_items, self.max_partial_rows // self.num_q_heads)


# ---- the plan ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Selection:
    """What preparation selects: the decode kernel's config and the split schedule's; small (a Selection of a
    one-launch kernel, or None): the kernel that runs instead for live batches of at most small_below requests
    (`_decode_choice.LIVE_SMALL_BATCH`)."""

    decode: object
    schedule: ScheduleConfig
    small: object = None
    small_below: int = 0


@dataclass(frozen=True)
class ExtendSelection:
    """What preparation selects in modes extend/verify: the extend kernel's config."""

    extend: ExtendConfig


@dataclass(frozen=True)
class PagedAttentionPlan(Plan):
    def _sm_count(self) -> int:
        import torch

        dev = torch.device(self.caps.device)
        if dev.type == "cuda" and torch.cuda.is_available():
            return torch.cuda.get_device_properties(dev).multi_processor_count
        return DEFAULT_SM_COUNT

    def heuristic(self, arch):
        caps = self.caps
        if caps.mode in EXTEND_MODES:
            return ExtendSelection(
                caps.config
                or default_extend_config(
                    caps.kv_dtype, tile_head_dim(caps.head_dim_qk, caps.head_dim_vo), arch or "sm_120a", caps.mode
                )
            )
        arch = arch or "sm_120a"
        decode, schedule = decode_choice(caps, arch, self._sm_count())
        small = small_choice(caps, arch, self._sm_count())
        if small is None:
            return Selection(decode, schedule)
        return Selection(decode, schedule, small=Selection(*small[:2]), small_below=small[2])

    def kernels(self, config, arch):
        c = self.caps
        dims = (c.dtype, c.kv_dtype, c.num_q_heads, c.num_kv_heads, c.head_dim_qk, c.head_dim_vo, c.page_size)
        if c.mode in EXTEND_MODES:
            from ._kernel_extend import compile_extend

            ext = config.extend
            reason = why_not_extend(*dims, ext, arch)
            if reason is not None:
                raise NotImplementedError(f"{OP}: {reason}")
            if ext.small is not None:  # the live tile choice: schedule, large kernel, small kernel
                from ._kernel_extend_schedule import compile_dual_extend_schedule

                tokens = (ext.tokens_per_tile(c.group), ext.small.tokens_per_tile(c.group), ext.small_below)
                tiles = []
                for tile, pdl, persistent in zip(ext.tiles(), ext.pdl_modes(), ext.persistent_tiles()):
                    # persistent: one wave of CTAs (an argument only then: the large kernel keeps the
                    # single-tile plan's compile key)
                    ctas = resident_ctas(c.kv_dtype, c.head_dim_qk, c.head_dim_vo, tile, arch) * self._sm_count()
                    tiles.append(
                        (compile_extend, (*dims, tile, arch, pdl, ctas) if persistent else (*dims, tile, arch, pdl))
                    )
                sched = (*tokens, arch, True) if ext.early_launch else (*tokens, arch)  # True: trigger
                return ((compile_dual_extend_schedule, sched), *tiles)
            from ._kernel_split import compile_extend_schedule

            if ext.ranked:  # the list in rank-major order (same contract); the same extend kernel
                from ._kernel_extend_ranked import compile_ranked_extend_schedule as compile_extend_schedule

                ext = dataclasses.replace(ext, ranked=False)
            return (
                (compile_extend_schedule, (ext.tokens_per_tile(c.group), arch)),
                (compile_extend, (*dims, ext, arch)),
            )
        from ._kernel_decode import compile_decode
        from ._kernel_split import compile_merge, compile_schedule

        reason = why_not(*dims, config.decode, arch)
        if reason is not None:
            raise NotImplementedError(f"{OP}: {reason}")
        # launch order: schedule (unless fused_schedule), decode, merge (unless fused_merge)
        if config.decode.fused_schedule:
            kernels = ((compile_decode, (*dims, config.decode, arch, config.schedule)),)
        else:
            kernels = ((compile_schedule, (config.schedule, arch)), (compile_decode, (*dims, config.decode, arch)))
        if not config.decode.fused_merge:
            kernels = (*kernels, (compile_merge, (c.dtype, c.num_q_heads, c.num_kv_heads, c.head_dim_vo, arch)))
        if config.small is not None:  # last: the live small-batch kernel (run() picks it by the live batch)
            reason = why_not(*dims, config.small.decode, arch)
            if reason is not None:
                raise NotImplementedError(f"{OP}: small: {reason}")
            kernels = (*kernels, (compile_decode, (*dims, config.small.decode, arch, config.small.schedule)))
        return kernels

    def scratch_specs(self, config=None, device="cuda"):
        c = self.caps
        cap, hq = c.item_capacity, c.num_q_heads
        if c.mode in EXTEND_MODES:
            ext = (config or self.heuristic(None)).extend
            tiles = extend_item_capacity(c.max_total_q, c.max_batch, ext.list_tokens(c.group))
            specs = [
                ScratchBufferSpec("tiles", (tiles, 2), "int32", device),
                ScratchBufferSpec("count", (4,), "int32", device),
                ScratchBufferSpec("choice", (2,), "uint8", device),  # live tile choice: which kernel runs
                ScratchBufferSpec("out", (c.max_total_q, hq, c.head_dim_vo), c.dtype, device),
                ScratchBufferSpec("lse", (c.max_total_q, hq), "float32", device),
                ScratchBufferSpec("unit", (1, 1), "float32", device),
                ScratchBufferSpec("no_sink", (hq,), "float32", device),
            ]
            if c.copy_runtime_metadata:
                specs.append(ScratchBufferSpec("cache_seqlens", (c.max_batch,), "int32", device))
                specs.append(ScratchBufferSpec("page_table", (c.max_batch, c.max_page_table_width), "int32", device))
                specs.append(ScratchBufferSpec("cu_seqlens_q", (c.max_batch + 1,), "int32", device))
            return tuple(specs)
        specs = [
            ScratchBufferSpec("work", (cap, 4), "int32", device),
            ScratchBufferSpec("requests", (c.max_batch, 2), "int32", device),
            ScratchBufferSpec("tickets", (c.max_batch, c.num_kv_heads), "int32", device),  # fused merge
            ScratchBufferSpec("count", (4,), "int32", device),
            ScratchBufferSpec("partial_out", (cap, hq, c.head_dim_vo), "float32", device),
            ScratchBufferSpec("partial_lse", (cap, hq), "float32", device),
            ScratchBufferSpec("out", (c.max_total_q, hq, c.head_dim_vo), c.dtype, device),
            ScratchBufferSpec("lse", (c.max_total_q, hq), "float32", device),
            ScratchBufferSpec("unit", (1, 1), "float32", device),
        ]
        if c.copy_runtime_metadata:
            specs.append(ScratchBufferSpec("cache_seqlens", (c.max_batch,), "int32", device))
            specs.append(ScratchBufferSpec("page_table", (c.max_batch, c.max_page_table_width), "int32", device))
        return tuple(specs)

    def prime(self, state) -> None:
        import torch

        state.scratch["unit"].fill_(1.0)
        if "tickets" in state.scratch:  # the fused merge's counters: zero, and back to zero after each run
            state.scratch["tickets"].zero_()
        if state.arch is None:
            return
        c, dev = self.caps, state.device
        gen = torch.Generator(device=dev).manual_seed(0)
        kv_t = torch.float8_e4m3fn if c.kv_dtype == "float8_e4m3fn" else getattr(torch, c.kv_dtype)
        q = torch.randn(1, c.num_q_heads, c.head_dim_qk, device=dev, generator=gen).to(getattr(torch, c.dtype))
        k = torch.randn(1, c.page_size, c.num_kv_heads, c.head_dim_qk, device=dev, generator=gen).to(kv_t)
        v = torch.randn(1, c.page_size, c.num_kv_heads, c.head_dim_vo, device=dev, generator=gen).to(kv_t)
        small = state.selection.small_below if getattr(state.selection, "small", None) is not None else 0
        most = min(c.max_batch, c.max_total_q)  # each decode kernel once (the small one serves up to `small`)
        for batch in (1, small + 1) if 0 < small < most else (1,):
            pt = torch.zeros(batch, 1, dtype=torch.int32, device=dev)
            lens = torch.ones(batch, dtype=torch.int32, device=dev)
            cu = torch.arange(batch + 1, dtype=torch.int32, device=dev)
            qb = q.repeat(batch, 1, 1)
            run(binding=bind(self, q=qb, k_cache=k, v_cache=v, page_table=pt, cache_seqlens=lens, cu_seqlens_q=cu))
        torch.cuda.synchronize(dev)


def plan(caps: Caps, *, invocation=None, override=None) -> PagedAttentionPlan:
    """A pure, hashable plan for `caps` (validates them; allocates and compiles nothing)."""
    if not isinstance(caps, Caps):
        raise TypeError(f"caps must be an attention.paged Caps, got {type(caps).__name__}")
    validate_caps(caps)
    if override is not None:
        _validate_override(caps, override)
    return PagedAttentionPlan(op=OP, caps=caps, invocation=invocation, override=override)


def _validate_override(caps: Caps, override) -> None:
    """A decode override is a Selection(DecodeConfig, ScheduleConfig) the kernels implement; an
    extend/verify override an ExtendSelection(ExtendConfig). Raises ValueError saying which part."""
    dims = (caps.dtype, caps.kv_dtype, caps.num_q_heads, caps.num_kv_heads, caps.head_dim_qk, caps.head_dim_vo)
    if caps.mode in EXTEND_MODES:
        if not isinstance(override, ExtendSelection) or not isinstance(override.extend, ExtendConfig):
            raise ValueError(
                f"override must be an ExtendSelection(ExtendConfig) or None in mode {caps.mode!r}, "
                f"got {type(override).__name__}"
            )
        reason = why_not_extend(*dims, caps.page_size, override.extend, "sm_90a")
        if reason is not None:
            raise ValueError(f"override.extend: {reason}")
        return
    if not isinstance(override, Selection):
        raise ValueError(f"override must be a Selection or None, got {type(override).__name__}")
    if not isinstance(override.decode, DecodeConfig):
        raise ValueError(f"override.decode must be a DecodeConfig, got {type(override.decode).__name__}")
    reason = why_not(*dims, caps.page_size, override.decode, "sm_90a")
    if reason is not None:
        raise ValueError(f"override.decode: {reason}")
    check_fused_schedule_batch(caps, override.decode, "override.decode")
    reason = why_not_schedule(override.schedule)
    if reason is not None:
        raise ValueError(f"override.schedule: {reason}")
    if override.small is None:
        return
    small = override.small
    if not isinstance(small, Selection) or small.small is not None:
        raise ValueError(f"override.small must be a Selection without a small of its own, or None, got {small!r}")
    if isinstance(override.small_below, bool) or not isinstance(override.small_below, int):
        raise ValueError(f"override.small_below must be an int, got {override.small_below!r}")
    most = min(caps.max_batch - 1, FUSED_SCHEDULE_MAX_BATCH)  # the small kernel is a fused-schedule one
    if not 1 <= override.small_below <= most:
        raise ValueError(
            f"override.small_below must be in 1..min(max_batch - 1, FUSED_SCHEDULE_MAX_BATCH) ({most}), "
            f"got {override.small_below}"
        )
    if not isinstance(small.decode, DecodeConfig) or not (small.decode.fused_merge and small.decode.fused_schedule):
        raise ValueError(
            f"override.small.decode must be a one-launch DecodeConfig (fused_merge, fused_schedule), got {small.decode!r}"
        )
    reason = why_not(*dims, caps.page_size, small.decode, "sm_90a") or why_not_schedule(small.schedule)
    if reason is not None:
        raise ValueError(f"override.small: {reason}")


# ---- bind ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Binding:
    """Views and scalars of one call (made by `bind`; holds no new storage)."""

    plan: PagedAttentionPlan
    q: object
    k_cache: object  # fp8 caches: an fp16 view (two e4m3 per element) for the kernel
    v_cache: object
    page_table: object
    cache_seqlens: object
    out: object
    lse: object
    k_descale: object
    v_descale: object
    sink: object
    has_sink: int
    window_left: int
    sm_scale: float
    work: object  # work list rows this call can use (decode: batch + split target; extend: query tiles)
    scratch: dict = field(repr=False)
    reference_inputs: tuple = field(repr=False, default=())
    cu_seqlens_q: object = None  # extend/verify: the request rows of q
    decode_views: tuple = field(repr=False, default=())  # decode: (requests, count, part_o, part_lse, tickets)
    # extend: (count,) with one tile; the live tile choice: (counts [2], flags [2], large kernel's work rows, large
    # count, small count, large flag, small flag (0-d bool views: the if-nodes' predicates))
    extend_views: tuple = field(repr=False, default=())
    check_values: bool = True  # bind's choice; under torch.compile the op binds again with it at run time


def _tensor(name: str, t, *, dtype, shape, device, last_contiguous=True, align=0):
    """Check one argument; `shape` entries of None match anything. Raises ValueError naming it.
    Runs several times in every bind, so the passing path builds no strings and reads each tensor
    attribute once (session 46: bind's host time)."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    size, td = t.shape, t.device
    ok = t.dtype == dtype and len(size) == len(shape) and td.type == device.type
    ok = ok and (device.index is None or td.index == device.index)
    if ok:
        for want_n, n in zip(shape, size):
            if want_n is not None and want_n != n:
                ok = False
                break
    if not ok:
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{name} must be {str(dtype).removeprefix('torch.')} {want} on {device}, got {describe(t)}")
    if last_contiguous and size and size[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must have a contiguous last dimension, got strides {list(t.stride())}")
    if align and td.type == "cuda":
        bad = t.data_ptr() % align or any(s * t.element_size() % align for s in t.stride()[:-1])
        if bad:
            raise ValueError(
                f"{name} must start {align}-byte aligned with {align}-byte aligned strides, got address "
                f"{t.data_ptr():#x} and strides {list(t.stride())} (elements of {t.element_size()} bytes)"
            )
    return t


def bind(
    plan: PagedAttentionPlan,
    *,
    scratch=None,
    q,
    k_cache,
    v_cache,
    page_table,
    cache_seqlens,
    cu_seqlens_q=None,
    output=None,
    lse=None,
    k_descale=None,
    v_descale=None,
    attention_sink_bias=None,
    window_left: int = -1,
    sm_scale: float | None = None,
    sinks=None,
    check_values: bool = True,
) -> Binding:
    """Check the call's tensors against the plan's caps and build views (never allocates or writes).

    Decode: q [batch, Hq, D]; cu_seqlens_q may be omitted (it must be arange(batch + 1); it is not
    read). Extend/verify: q [total_q, Hq, D] with cu_seqlens_q int32 [batch + 1] (cu[0] = 0,
    non-decreasing, cu[batch] <= total_q: rows past cu[batch], e.g. CUDA-graph padding, are left
    unwritten; q_len <= cache_seqlens per request; verify: one q_len for all). Every mode: cache_seqlens >= 0
    (in decode 0 is an empty request, e.g. a padding slot: its row is 0 and its LSE -inf), each request's pages
    fit the page table's columns, and the page ids a request reads (its first ceil(cache_seqlens / page_size)
    columns; the rest may hold anything) lie in [0, k_cache pages). Those value checks read the tensors on the
    host (one device read, which waits for the GPU work queued before it), except while a CUDA graph is being
    captured or with `check_values=False` (for an eager serving loop that binds every step and must not wait on
    the GPU): values a binding runs or is replayed with unchecked are the caller's to keep valid; the kernels clamp
    page ids into the cache and page-table columns into the table, so bad ones give wrong rows, never an access
    outside the cache (`test_paged_bad_values_gpu.py`). output/lse default to the plan's buffers (valid until the next run).
    Under torch.compile bind checks shapes and dtypes while tracing, output/lse default to new tensors, and `run`
    is one custom op that binds again (every other check) and runs when the graph runs (`_ops.py`).
    k_descale/v_descale (fp8 KV only; default 1) are fp32 broadcastable to [batch, Hkv]. sm_scale defaults to
    1/sqrt(D). sinks: another name of attention_sink_bias (fp32 [Hq] sink logits; pass one of the two).
    """
    import torch

    if not isinstance(plan, PagedAttentionPlan):
        raise TypeError(f"plan must come from attention.paged.plan(), got {type(plan).__name__}")
    state = plan.state  # raises PlanNotPreparedError naming PreparationSession
    c = plan.caps
    dev = torch.device(state.device)
    # Under torch.compile tensors have no addresses or values: those checks run when the op runs (`_ops.py`)
    traced = torch.compiler.is_compiling()
    if scratch is None:
        scratch = state.scratch
    elif scratch is not state.scratch and (
        traced or not isinstance(scratch, dict) or any(n not in scratch for n in state.scratch)
    ):
        raise ValueError(
            "scratch must be the plan's scratch views (plan.state.scratch) or None"
            + (" (under torch.compile: None)" if traced else "")
        )
    qt, kvt = getattr(torch, c.dtype), getattr(torch, c.kv_dtype)
    align = 16 if dev.type == "cuda" and not traced else 0

    _tensor("q", q, dtype=qt, shape=(None, c.num_q_heads, c.head_dim_qk), device=dev, align=align)
    total_q = q.shape[0]
    _tensor("cache_seqlens", cache_seqlens, dtype=torch.int32, shape=(None,), device=dev)
    batch = cache_seqlens.shape[0]
    if not cache_seqlens.is_contiguous():
        raise ValueError(f"cache_seqlens must be contiguous, got strides {list(cache_seqlens.stride())}")
    if batch > c.max_batch:
        raise ValueError(f"cache_seqlens holds {batch} requests, more than max_batch={c.max_batch}")
    if total_q > c.max_total_q:
        raise ValueError(f"q holds {total_q} rows, more than max_total_q={c.max_total_q}")
    if c.mode == "decode" and total_q != batch:
        raise ValueError(f"decode mode: q must have one row per request ({batch}), got {total_q} rows")
    if cu_seqlens_q is not None:
        _tensor("cu_seqlens_q", cu_seqlens_q, dtype=torch.int32, shape=(batch + 1,), device=dev)
    elif c.mode in EXTEND_MODES:
        raise ValueError(f"cu_seqlens_q (int32 [batch + 1] = [{batch + 1}]) is required in mode {c.mode!r}")
    for name, t, d in (("k_cache", k_cache, c.head_dim_qk), ("v_cache", v_cache, c.head_dim_vo)):
        _tensor(name, t, dtype=kvt, shape=(None, c.page_size, c.num_kv_heads, d), device=dev, align=align)
        if t.shape[0] > c.num_cache_pages:
            raise ValueError(f"{name} holds {t.shape[0]} pages, more than num_cache_pages={c.num_cache_pages}")
    if k_cache.shape[0] != v_cache.shape[0]:
        raise ValueError(f"k_cache and v_cache must hold the same pages, got {k_cache.shape[0]} and {v_cache.shape[0]}")
    _tensor("page_table", page_table, dtype=torch.int32, shape=(batch, None), device=dev)
    if page_table.shape[1] > c.max_page_table_width:
        raise ValueError(
            f"page_table has {page_table.shape[1]} columns, more than max_page_table_width={c.max_page_table_width}"
        )
    if not isinstance(window_left, int) or isinstance(window_left, bool) or window_left < -1:
        raise ValueError(f"window_left must be an int >= -1 (-1: no window), got {window_left!r}")
    scale = 1.0 / math.sqrt(c.head_dim_qk) if sm_scale is None else float(sm_scale)
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"sm_scale must be a finite float > 0, got {sm_scale!r}")

    if not isinstance(check_values, bool):
        raise ValueError(f"check_values must be a bool, got {check_values!r}")
    if check_values and not traced and not _capturing(dev):
        cu = cu_seqlens_q if c.mode in EXTEND_MODES else None
        check_live_values(c, cu, cache_seqlens, page_table, total_q, k_cache.shape[0])

    fp8 = c.kv_dtype == "float8_e4m3fn"
    descales = []  # the caller's, broadcast to [batch, Hkv]; None: the plan's unit view (below)
    for name, t in (("k_descale", k_descale), ("v_descale", v_descale)):
        if t is None:
            descales.append(None)
            continue
        if not fp8:
            raise ValueError(f"{name} applies to float8_e4m3fn KV only; kv_dtype is {c.kv_dtype}")
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.device != q.device:
            got = describe(t)
            raise ValueError(f"{name} must be float32 broadcastable to [{batch}, {c.num_kv_heads}] on {dev}, got {got}")
        try:
            descales.append(t.expand(batch, c.num_kv_heads))
        except RuntimeError:
            raise ValueError(
                f"{name} must broadcast to [batch, Hkv] = [{batch}, {c.num_kv_heads}], got {list(t.shape)}"
            ) from None
    if sinks is not None and attention_sink_bias is not None:
        raise ValueError("pass the sink logits as attention_sink_bias or as sinks, not both")
    sink, sink_name = (attention_sink_bias, "attention_sink_bias") if sinks is None else (sinks, "sinks")
    if sink is not None:
        _tensor(sink_name, sink, dtype=torch.float32, shape=(c.num_q_heads,), device=dev)
        if not sink.is_contiguous():
            raise ValueError(f"{sink_name} must be contiguous")
    out_shape, lse_shape = (total_q, c.num_q_heads, c.head_dim_vo), (total_q, c.num_q_heads)
    if output is not None:
        _tensor("output", output, dtype=qt, shape=out_shape, device=dev, align=align)
    if lse is not None:
        _tensor("lse", lse, dtype=torch.float32, shape=lse_shape, device=dev)
    if traced:  # the op binds again when it runs; the plan's buffers stay out of the graph (`_ops.py`)
        return _ops.traced_binding(plan, q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, output, lse,
                                   descales, sink, window_left, scale, check_values)  # fmt: skip
    own = scratch is state.scratch
    views = scratch_views(c, state.selection, scratch, batch, total_q, kept_views(state) if own else None)
    if not own:  # a caller's scratch: its views are checked like a caller's buffers
        if output is None:
            _tensor("output", views.out, dtype=qt, shape=out_shape, device=dev, align=align)
        if lse is None:
            _tensor("lse", views.lse, dtype=torch.float32, shape=lse_shape, device=dev)
    output = views.out if output is None else output
    lse = views.lse if lse is None else lse
    reference_inputs = ()
    k_view, v_view = k_cache, v_cache
    if dev.type != "cuda":
        reference_inputs = (q, k_cache, v_cache, page_table, cache_seqlens, k_descale, v_descale, cu_seqlens_q)
    elif fp8:
        k_view, v_view = k_cache.view(torch.float16), v_cache.view(torch.float16)
    return Binding(
        plan=plan, q=q, k_cache=k_view, v_cache=v_view, page_table=page_table, cache_seqlens=cache_seqlens,
        out=output, lse=lse, k_descale=views.unit if descales[0] is None else descales[0],
        v_descale=views.unit if descales[1] is None else descales[1],
        sink=views.no_sink if sink is None else sink, has_sink=int(sink is not None),
        window_left=window_left, sm_scale=scale, work=views.work, scratch=scratch,
        reference_inputs=reference_inputs, cu_seqlens_q=cu_seqlens_q, decode_views=views.decode_views,
        extend_views=views.extend_views, check_values=check_values,
    )  # fmt: skip


def _capturing(dev) -> bool:
    import torch

    return dev.type == "cuda" and torch.cuda.is_current_stream_capturing()


# ---- run -----------------------------------------------------------------------------------------
def _launchers(plan):
    state = plan.state
    cached = state.extra.get("launchers")  # keyed on the identity of state.kernels, which a re-selection replaces
    if cached is None or cached[0] is not state.kernels:
        cached = state.extra["launchers"] = (state.kernels, tuple(k(*args) for k, args in state.kernels))
    return cached[1]


def run(*, binding: Binding, plan=None):
    """Compute attention for `binding` on torch's current stream; returns (out, lse) (base-2 LSE).

    No host reads of live tensors, no allocation, no compilation: safe to capture in a CUDA graph. Under
    torch.compile the call is one custom op (`_ops.py`) that binds again and runs when the graph runs.
    """
    import torch

    if not isinstance(binding, Binding):
        raise TypeError(f"binding must come from attention.paged.bind(), got {type(binding).__name__}")
    if plan is not None and plan is not binding.plan:
        raise ValueError("plan must be the plan the binding was made from (or None)")
    b = binding
    state = b.plan.state
    if torch.compiler.is_compiling():  # one opaque node (`_ops.py`): torch.compile cannot trace a launch
        if b.scratch:  # made eagerly: it holds the plan's buffers and kernel views, which the op cannot take
            raise eager_binding_refused()
        _ops.call(b)
        return b.out, b.lse
    if state.arch is None:
        return _run_reference(b)
    if b.q.shape[0] == 0:  # no request: nothing to launch (a zero-sized grid is a launch error)
        return b.out, b.lse
    if b.plan.caps.mode in EXTEND_MODES:
        return _run_extend(b)
    launchers = list(_launchers(b.plan))
    decode_config = state.selection.decode
    lens, pt = b.cache_seqlens, b.page_table
    if b.plan.caps.copy_runtime_metadata:
        s = b.scratch
        batch, width = pt.shape
        s["cache_seqlens"][:batch].copy_(lens)
        s["page_table"][:batch, :width].copy_(pt)
        lens, pt = s["cache_seqlens"][:batch], s["page_table"][:batch, :width]
    req, count, part_o, part_lse, tickets = b.decode_views
    small = state.selection.small
    if small is not None:
        small_launcher = launchers.pop()
        if lens.shape[0] <= state.selection.small_below:  # the live batch (a shape: no host read)
            launchers, decode_config = [small_launcher], small.decode
    if not decode_config.fused_schedule:
        launchers.pop(0)(lens, b.work, req, count, b.window_left)
    launchers.pop(0)(b.q, b.k_cache, b.v_cache, pt, b.work, count, b.out, b.lse, part_o, part_lse, b.sink,
                     b.k_descale, b.v_descale, req, tickets, lens, b.sm_scale * LOG2E, b.has_sink, b.window_left)  # fmt: skip
    if launchers:  # the separate merge (fused_merge=False)
        launchers[0](req, part_o, part_lse, b.sink, b.out, b.lse, b.has_sink)
    return b.out, b.lse


def run_decode(*, binding: Binding, plan=None):
    """`run` for a binding of a decode plan (raises ValueError for another mode): (out, lse)."""
    return _run_mode(binding, plan, ("decode",), "run_decode")


def run_extend(*, binding: Binding, plan=None):
    """`run` for a binding of an extend or verify plan (raises ValueError for decode): (out, lse)."""
    return _run_mode(binding, plan, EXTEND_MODES, "run_extend")


def _run_mode(binding, plan, modes, name: str):
    if isinstance(binding, Binding) and binding.plan.caps.mode not in modes:
        raise ValueError(
            f"{name} runs a binding of a plan in mode {' / '.join(modes)}; this one's plan has mode "
            f"{binding.plan.caps.mode!r} (use run, or run_decode / run_extend to match)"
        )
    return run(binding=binding, plan=plan)


def _run_extend(b: Binding):
    launchers = _launchers(b.plan)
    s = b.scratch
    lens, pt, cu = b.cache_seqlens, b.page_table, b.cu_seqlens_q
    if b.plan.caps.copy_runtime_metadata:
        batch, width = pt.shape
        s["cache_seqlens"][:batch].copy_(lens)
        s["page_table"][:batch, :width].copy_(pt)
        s["cu_seqlens_q"][: batch + 1].copy_(cu)
        lens, pt, cu = s["cache_seqlens"][:batch], s["page_table"][:batch, :width], s["cu_seqlens_q"][: batch + 1]
    scale = b.sm_scale * LOG2E
    if len(b.extend_views) > 1:  # the live tile choice: the schedule gives the unchosen kernel 0 items
        sched, large, small = launchers
        counts, flags, large_work, large_count, small_count, large_pred, small_pred = b.extend_views
        sched(cu, b.work, counts, flags)
        ext = b.plan.state.selection.extend
        graph = _if_node_graph() if ext.conditional else None
        order = ((large, large_work, large_count, large_pred), (small, b.work, small_count, small_pred))
        for fn, work, count, pred in order[::-1] if ext.small_first else order:
            if graph is not None:
                graph.begin_capture_to_if_node(pred)
            fn(b.q, b.k_cache, b.v_cache, pt, cu, lens, work, count, b.out, b.lse, b.sink, b.k_descale, b.v_descale,
               scale, b.has_sink, b.window_left)  # fmt: skip
            if graph is not None:
                graph.end_capture_to_conditional_node()
        return b.out, b.lse
    sched, extend = launchers
    (count,) = b.extend_views
    sched(cu, b.work, count)
    extend(b.q, b.k_cache, b.v_cache, pt, cu, lens, b.work, count, b.out, b.lse, b.sink, b.k_descale, b.v_descale,
           scale, b.has_sink, b.window_left)  # fmt: skip
    return b.out, b.lse


def _if_node_graph():
    """The torch CUDA graph being captured on the current stream when it can take if-nodes (torch
    with `CUDAGraph.begin_capture_to_if_node`, CUDA >= 12.4), else None (eager, or a capture this
    torch cannot nest a conditional node in: both kernels are then launched)."""
    import torch

    if not torch.cuda.is_current_stream_capturing():
        return None
    cls = torch.cuda.CUDAGraph
    if not hasattr(cls, "begin_capture_to_if_node") or not hasattr(cls, "get_currently_capturing_graph"):
        return None
    try:
        return cls.get_currently_capturing_graph()
    except RuntimeError:  # a capture not begun by torch.cuda.graph
        return None


def _run_reference(b: Binding):
    q, k, v, pt, lens, kd, vd, cu = b.reference_inputs
    import torch

    batch = lens.shape[0]
    if cu is None:
        cu = torch.arange(batch + 1, dtype=torch.int32)
    sink = b.sink if b.has_sink else None
    out, lse = paged_attention_reference(
        q, k, v, pt, lens, cu, sm_scale=b.sm_scale, window_left=b.window_left, sinks=sink, k_descale=kd, v_descale=vd
    )
    rows = int(cu[-1]) if batch else 0  # like the kernels: rows past the last request stay as they were
    b.out[:rows].copy_(out[:rows])
    b.lse[:rows].copy_(lse[:rows])
    return b.out, b.lse


def clear_caches() -> None:
    """Forget this op's compiled kernels in memory (the disk cache stays)."""
    import sys

    for name in ("._kernel_decode", "._kernel_split", "._kernel_extend", "._kernel_extend_schedule",
                 "._kernel_extend_ranked"):  # fmt: skip
        module = sys.modules.get(__package__ + name)
        if module is None:
            continue
        for attr in (
            "compile_decode",
            "compile_schedule",
            "compile_merge",
            "compile_extend",
            "compile_extend_schedule",
            "compile_dual_extend_schedule",
            "compile_ranked_extend_schedule",
        ):
            k = getattr(module, attr, None)
            if k is not None:
                k.cache_clear()


from . import _ops  # noqa: E402 - registers torch.ops.b12x.attention_paged_run_
