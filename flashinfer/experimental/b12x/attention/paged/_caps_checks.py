"""attention.paged's capacity checks: `validate_caps` (what `plan` checks of a `Caps` before anything else) and
the op's limits it checks against. Host code; split from `api.py` so the lifecycle module stays readable."""

from __future__ import annotations

from ._config import (
    FUSED_SCHEDULE_MAX_BATCH,
    DecodeConfig,
    ExtendConfig,
    default_extend_config,
    extend_item_capacity,
    tile_head_dim,
    why_not,
    why_not_extend,
    why_not_pdl,
)

OP = "attention.paged"
MODES = ("decode", "extend", "verify")
IMPLEMENTED_MODES = MODES
EXTEND_MODES = ("extend", "verify")
DTYPES = ("bfloat16", "float16")
KV_DTYPES = ("bfloat16", "float16", "float8_e4m3fn")
INT32_MAX = 2**31 - 1
MAX_BATCH = 60000  # + the split target stays under the 65535 limit of a grid's y dimension
MAX_GRID_Y = 65535  # extend: one CTA row per query tile


def validate_caps(caps) -> None:
    """Raises ValueError (NotImplementedError for what the kernels do not implement) naming the field of an
    attention.paged `Caps` that is out of range or inconsistent; `plan` calls it before anything else."""
    if caps.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {caps.mode!r}")
    if caps.msa_block_sparse:
        raise NotImplementedError(f"{OP}: msa_block_sparse=True is not implemented")
    if caps.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {caps.dtype!r}")
    if caps.kv_dtype not in (caps.dtype, "float8_e4m3fn"):
        raise ValueError(f"kv_dtype must be {caps.dtype!r} (the q dtype) or 'float8_e4m3fn', got {caps.kv_dtype!r}")
    for name in ("num_q_heads", "num_kv_heads", "head_dim_qk", "head_dim_vo", "page_size", "max_total_q",
                 "max_batch", "max_page_table_width", "max_work_items", "max_partial_rows", "num_cache_pages"):  # fmt: skip
        value = getattr(caps, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if caps.num_q_heads % caps.num_kv_heads:
        raise ValueError(f"num_q_heads ({caps.num_q_heads}) must be a multiple of num_kv_heads ({caps.num_kv_heads})")
    if caps.max_page_table_width * caps.page_size > 2**30:
        raise ValueError(
            f"max_page_table_width * page_size (the longest request) must be <= 2^30 keys, got "
            f"{caps.max_page_table_width} * {caps.page_size}"
        )
    if caps.max_batch * caps.max_page_table_width * caps.page_size > INT32_MAX:
        raise ValueError(
            f"max_batch * max_page_table_width * page_size must be < 2^31 (KV positions are int32), got "
            f"{caps.max_batch} * {caps.max_page_table_width} * {caps.page_size}"
        )
    if caps.max_batch > MAX_BATCH:
        raise ValueError(f"max_batch must be <= {MAX_BATCH} (work items are a grid dimension), got {caps.max_batch}")
    if caps.mode == "decode" and caps.item_capacity < caps.max_batch:
        raise ValueError(
            f"the work list must hold max_batch={caps.max_batch} items: min(max_work_items={caps.max_work_items}, "
            f"max_partial_rows // num_q_heads={caps.max_partial_rows // caps.num_q_heads}) is smaller "
            "(use default_max_work_items / default_max_partial_rows)"
        )
    reason = why_not_pdl(caps.pdl, caps.mode, caps.copy_runtime_metadata, caps.config)
    if reason is not None:
        raise ValueError(reason)
    dims = (caps.dtype, caps.kv_dtype, caps.num_q_heads, caps.num_kv_heads, caps.head_dim_qk, caps.head_dim_vo)
    if caps.mode in EXTEND_MODES:
        if caps.config is not None and not isinstance(caps.config, ExtendConfig):
            raise ValueError(
                f"config must be an ExtendConfig or None in mode {caps.mode!r}, got {type(caps.config).__name__}"
            )
        dim = tile_head_dim(caps.head_dim_qk, caps.head_dim_vo)
        config = caps.config or default_extend_config(caps.kv_dtype, dim, "sm_120a", caps.mode)
        reason = why_not_extend(*dims, caps.page_size, config, "sm_90a")
        if reason is None and caps.num_q_heads % caps.num_kv_heads == 0:
            tokens = config.list_tokens(caps.group)
            tiles = extend_item_capacity(caps.max_total_q, caps.max_batch, tokens)
            if tiles > MAX_GRID_Y:
                raise ValueError(
                    f"max_total_q={caps.max_total_q} and max_batch={caps.max_batch} allow {tiles} query tiles of "
                    f"{tokens} tokens, more than the {MAX_GRID_Y} a grid dimension holds"
                )
    else:
        if caps.config is not None and not isinstance(caps.config, DecodeConfig):
            raise ValueError(f"config must be a DecodeConfig or None, got {type(caps.config).__name__}")
        reason = why_not(*dims, caps.page_size, caps.config or DecodeConfig(), "sm_90a")
        if reason is None and caps.config is not None:
            check_fused_schedule_batch(caps, caps.config, "config")
    if reason is not None:
        raise NotImplementedError(f"{OP}: {reason}")


def check_fused_schedule_batch(caps, config: DecodeConfig, name: str) -> None:
    """`name` (a config the caller gave) may use the fused schedule only up to FUSED_SCHEDULE_MAX_BATCH requests."""
    if config.fused_schedule and caps.max_batch > FUSED_SCHEDULE_MAX_BATCH:
        raise ValueError(
            f"{name}: fused_schedule needs max_batch <= {FUSED_SCHEDULE_MAX_BATCH} (every CTA scans the batch), "
            f"got max_batch={caps.max_batch}"
        )
