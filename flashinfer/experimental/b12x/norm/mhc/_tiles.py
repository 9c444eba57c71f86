"""norm.mhc kernel tiles (stdlib only): one frozen dataclass per kernel family (pass 1, the apply, row, wide and walk
pass 2, the one-launch kernels), each checking its own fields. The selection over them, the defaults per arch and the
split-K heuristic live in _config.py, which re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass

STREAM_FORMS = ("pre", "post", "post_pre", "bcast")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class StreamConfig:
    """Tile of pass 1: block_t tokens x 4 streams x block_h hidden per step (block_h divides H)."""

    block_t: int
    block_h: int
    num_warps: int = 4
    num_stages: int = 2
    # pre's sum of squares: "auto" (elementwise when it fits in 32 registers, else per step), "step"
    # (a row reduction per step), "lazy" (elementwise, one reduction after the loop), "gram" (on the
    # tensor cores: the diagonal of a @ a^T, one more dot of N = block_t per step), "diag" (only the
    # 16 x 16 diagonal blocks of that product: one batched dot of N = 16 per step)
    sq: str = "auto"
    # pre's fn operand: "kernel" (fp32 fn split into hi + lo in every program, each step), "pre" (a
    # launch before pass 1 splits fn once into hi + lo in the activation dtype: no split ALU in the
    # loop), "hi" (that launch keeps hi only: one dot a step; fn rounded to the activation dtype)
    fn_split: str = "kernel"
    # programmatic dependent launch (sm_90+): launched with launch_pdl, the kernel waits on the one
    # before it (griddepcontrol.wait) before its first load, then lets the next one launch its programs
    pdl: bool = False
    # with pdl: no early release; the next kernel launches as this one's programs exit (a dependent released at entry
    # takes slots this kernel's later programs need: session 61's mid tiles)
    pdl_at_exit: bool = False

    def __post_init__(self) -> None:
        for name in ("block_t", "block_h", "num_warps"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                raise ValueError(f"StreamConfig.{name} must be a power of two >= 1, got {v!r}")
        _check_bools("StreamConfig", self, ("pdl", "pdl_at_exit"))
        _check_at_exit("StreamConfig", self)
        _check_pass1_tile("StreamConfig", self.block_t, self.block_h, self.num_warps, self.sq, self.fn_split)


SQ_MODES = ("auto", "step", "lazy", "gram", "diag")
FN_SPLITS = ("kernel", "pre", "hi")  # _kernel.FN_SPLIT_MODES


def _check_at_exit(cls: str, config) -> None:
    if config.pdl_at_exit and not config.pdl:
        raise ValueError(f"{cls}.pdl_at_exit needs pdl=True (it says when a programmatic dependent releases the next)")


def _check_bools(cls: str, config, names) -> None:
    for name in names:
        if not isinstance(getattr(config, name), bool):
            raise ValueError(f"{cls}.{name} must be a bool, got {getattr(config, name)!r}")


def _int_at_least(v, lo: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo


def _positive_int(v) -> bool:
    return _int_at_least(v, 1)


def _check_pass1_tile(cls: str, block_t: int, block_h: int, num_warps: int, sq: str, fn_split: str) -> None:
    """The checks every pass-1 tile (StreamConfig, FusedConfig) shares."""
    if sq not in SQ_MODES:
        raise ValueError(f"{cls}.sq must be one of {SQ_MODES}, got {sq!r}")
    if fn_split not in FN_SPLITS:
        raise ValueError(f"{cls}.fn_split must be one of {FN_SPLITS}, got {fn_split!r}")
    if block_h < 8:
        raise ValueError(f"{cls}.block_h must be >= 8 (a dot's K), got {block_h}")
    if sq == "diag" and (block_h < 16 or block_t < 16):
        raise ValueError(f"{cls}(sq='diag') needs block_t >= 16 and block_h >= 16, got {block_t} x {block_h}")
    if num_warps % 4 == 0 and block_t >= 64:
        raise ValueError(
            f"{cls}(block_t={block_t}, num_warps={num_warps}) would compile to wgmma on "
            "sm_90a (hardware policy: mma.sync only): use block_t <= 32 at 4+ warps, or 2 warps"
        )


@dataclass(frozen=True)
class ApplyConfig:
    """Tile of pass 2: `tokens` rows per program (warps go to tokens first, so the tiny 4x4 math
    is not replicated per warp), streamed in chunks of `block_h` (clipped to divide H) with
    `stages` - 1 chunks prefetched by the loop pipeliner."""

    tokens: int
    block_h: int
    stages: int = 3
    num_warps: int = 4

    def __post_init__(self) -> None:
        for name in ("tokens", "block_h", "num_warps"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                raise ValueError(f"ApplyConfig.{name} must be a power of two >= 1, got {v!r}")
        if self.block_h < 128 or not isinstance(self.stages, int) or self.stages < 1:
            raise ValueError(f"ApplyConfig needs block_h >= 128 and stages >= 1, got {self}")

    def tile(self, hidden: int) -> tuple[int, int, int]:
        """(TOK, BLOCK_H, STAGES) for `hidden` (a multiple of 128)."""
        return self.tokens, min(self.block_h, hidden & -hidden), self.stages


@dataclass(frozen=True)
class RowConfig:
    """Tile of the "row" pass 2 (_kernel_row.py): one token per program, its whole row as one
    [4, block_h] tile when block_h >= H (else streamed in block_h chunks), the split partials
    summed block_s rows a step."""

    block_h: int = 8192
    block_s: int = 64
    num_warps: int = 16
    # chunked rows (block_h < H): the chunk loops' software pipeline depth (cp.async; 1: none, each
    # chunk waits its own load)
    stages: int = 1
    # the weights (pre, post, comb: softmax + Sinkhorn) as per-thread scalars from one [block_s, 32]
    # partial reduction (_kernel_wide's finish) instead of [4] / [4, 4] tiles reduced across lanes
    scalar: bool = False
    pdl: bool = False  # programmatic dependent launch, as StreamConfig.pdl
    pdl_at_exit: bool = False  # as StreamConfig.pdl_at_exit
    # > 0: the walk pass 2 (_kernel_walk.py), `walk` resident programs an SM dealt runs of (token, block_h
    # chunk) units, streamed `stages` deep; no norm weight (MhcConfig.row_walk)
    walk: int = 0

    def __post_init__(self) -> None:
        if not _int_at_least(self.walk, 0):
            raise ValueError(f"RowConfig.walk must be an int >= 0, got {self.walk!r}")
        if self.walk and self.scalar:
            raise ValueError("RowConfig.walk takes the weights as tiles: scalar must be False")
        for name in ("block_h", "block_s", "num_warps"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                raise ValueError(f"RowConfig.{name} must be a power of two >= 1, got {v!r}")
        if not isinstance(self.stages, int) or self.stages < 1:
            raise ValueError(f"RowConfig.stages must be an int >= 1, got {self.stages!r}")
        _check_bools("RowConfig", self, ("scalar", "pdl", "pdl_at_exit"))
        _check_at_exit("RowConfig", self)
        if self.block_h < 128:
            raise ValueError(f"RowConfig.block_h must be >= 128, got {self.block_h}")


PASS2_KINDS = ("apply", "row")


@dataclass(frozen=True)
class SmallConfig:
    """The one-launch path (_kernel_small.py) for calls of at most `max_tokens` tokens: one program
    per `block_h` slice of each stream (clipped to divide H), the last one to finish computes the
    weights and y."""

    max_tokens: int = 4
    block_h: int = 128
    post_pre_block_h: int = 32  # post_pre holds 4 more fp32 tiles: 64 spills at 8 warps, 32 does not
    num_warps: int = 8

    def slice_h(self, form: str, hidden: int) -> int:
        """Hidden elements per stream of one program for `form` (a power of two dividing hidden)."""
        return min(self.post_pre_block_h if form == "post_pre" else self.block_h, hidden & -hidden)

    def __post_init__(self) -> None:
        for name in ("max_tokens", "block_h", "post_pre_block_h", "num_warps"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                raise ValueError(f"SmallConfig.{name} must be a power of two >= 1, got {v!r}")
        if self.max_tokens > 16 or min(self.block_h, self.post_pre_block_h) < 16:
            raise ValueError(f"SmallConfig needs max_tokens <= 16 and block_h >= 16, got {self}")


@dataclass(frozen=True)
class WideConfig:
    """The "wide" pass 2 (_kernel_wide.py) for calls of at most `max_tokens` tokens without a norm
    weight: grid (T, H / block_y), every program sums its token's partials ([block_s, 32] a step)
    and writes block_y columns of y; program (t, 0) also writes post and comb (scalar Sinkhorn)."""

    max_tokens: int = 4
    block_y: int = 256
    block_s: int = 256
    num_warps: int = 4
    pdl: bool = False  # programmatic dependent launch, as StreamConfig.pdl (pass 2 only: tiny is one launch)
    # the Sinkhorn rounds' row / column sums as trees and their reciprocals as rsqrt.approx squared
    # (MUFU.RSQ + FMUL, ~2^-22 relative) instead of div.full's range-checked sequence: ~35 instead of
    # ~65 dependent cycles per half-round (SASS, sm_90a), 40 half-rounds on program 0's critical path
    fast: bool = False
    # post and comb (the Sinkhorn chain) in one more program of their own, which writes no y, instead of
    # in program (t, 0) after its y store (the tiny one-launch kernel ignores it)
    apart: bool = False

    def __post_init__(self) -> None:
        for name in ("max_tokens", "block_y", "block_s", "num_warps"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                raise ValueError(f"WideConfig.{name} must be a power of two >= 1, got {v!r}")
        _check_bools("WideConfig", self, ("pdl", "fast", "apart"))
        if self.block_y < 32:
            raise ValueError(f"WideConfig.block_y must be >= 32, got {self.block_y}")


@dataclass(frozen=True)
class LastConfig:
    """The "last" one-launch path (_kernel_last.py) for calls of at most `max_tokens` tokens (with or
    without a norm weight): one program per `steps` pass-1 steps of [16 tokens, 4 x block_h] (block_h
    divides H), the last program to arrive (a ticket) sums every partial in one tile, writes y, post
    and comb for each token, and resets the ticket."""

    max_tokens: int = 4
    block_h: int = 32
    steps: int = 1
    num_warps: int = 8
    sq: str = "step"  # pass 1's squares: "step", "gram" or "diag" (StreamConfig.sq)
    fast: bool = True  # the Sinkhorn's approximate reciprocals (WideConfig.fast)
    # a register cap for ptxas (None: its own choice). sm_90a at 8 warps: 145 (pre) / 218 (post_pre)
    # registers, one program per SM; 128 fits two (224 programs in one wave) and spills in the finish
    maxnreg: int | None = None
    # T > 1: the last program issues token t + 1's row and partial loads before token t's y (one L2
    # round trip per call instead of one per token; twice the row's registers)
    prefetch: bool = False

    def __post_init__(self) -> None:
        if self.maxnreg is not None and (
            not isinstance(self.maxnreg, int) or isinstance(self.maxnreg, bool) or not 24 <= self.maxnreg <= 255
        ):
            raise ValueError(f"LastConfig.maxnreg must be None or an int in [24, 255], got {self.maxnreg!r}")
        for name in ("max_tokens", "block_h", "num_warps"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                raise ValueError(f"LastConfig.{name} must be a power of two >= 1, got {v!r}")
        if not isinstance(self.steps, int) or isinstance(self.steps, bool) or self.steps < 1:
            raise ValueError(f"LastConfig.steps must be an int >= 1, got {self.steps!r}")
        if self.max_tokens > 16:
            raise ValueError(f"LastConfig.max_tokens must be <= 16 (the pass-1 tile's tokens), got {self.max_tokens}")
        if self.sq not in ("step", "gram", "diag"):
            raise ValueError(f"LastConfig.sq must be 'step', 'gram' or 'diag', got {self.sq!r}")
        _check_bools("LastConfig", self, ("fast", "prefetch"))
        _check_pass1_tile("LastConfig", 16, self.block_h, self.num_warps, self.sq, "kernel")


@dataclass(frozen=True)
class FusedConfig:
    """Tile of the one-launch kernel (_kernel_fused.py): one program per block of `block_t` tokens
    and split of the hidden dimension (`steps_per_split` steps of `block_h` per stream); the last
    program of a token block to finish (a ticket) computes its weights and y, reading the rows back
    from L2 in `finish_h`-wide chunks (with `prefetch`, the next chunk's loads in flight: +33
    registers on the default pre tile) and the partials `block_s` splits a step."""

    block_t: int = 32
    block_h: int = 16
    steps_per_split: int = 16
    num_warps: int = 4
    num_stages: int = 2
    sq: str = "gram"
    finish_h: int = 64
    block_s: int = 2
    prefetch: bool = True
    fn_split: str = "kernel"  # pre's fn operand, as StreamConfig.fn_split

    def __post_init__(self) -> None:
        for name in ("block_t", "block_h", "num_warps", "finish_h", "block_s"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                raise ValueError(f"FusedConfig.{name} must be a power of two >= 1, got {v!r}")
        for name in ("steps_per_split", "num_stages"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"FusedConfig.{name} must be an int >= 1, got {v!r}")
        if self.block_t < 16:
            raise ValueError(f"FusedConfig.block_t must be >= 16 (a dot's M), got {self.block_t}")
        if not isinstance(self.prefetch, bool):
            raise ValueError(f"FusedConfig.prefetch must be a bool, got {self.prefetch!r}")
        if self.sq == "auto":
            raise ValueError("FusedConfig.sq must be step, lazy or gram (no auto), got 'auto'")
        _check_pass1_tile("FusedConfig", self.block_t, self.block_h, self.num_warps, self.sq, self.fn_split)

    def split(self, hidden: int, split_k: int | None = None) -> tuple[int, int]:
        """(splits, steps per split) at `hidden`: Caps.split_k splits when given, else enough
        splits of steps_per_split steps to cover hidden // block_h. Independent of T: a token
        block's programs run side by side, so its rows are still in L2 when the finisher reads them."""
        n_steps = hidden // self.block_h
        want = split_k if split_k is not None else cdiv(n_steps, self.steps_per_split)
        cps = cdiv(n_steps, max(1, min(want, n_steps)))
        return cdiv(n_steps, cps), cps


@dataclass(frozen=True)
class SmallLaunch:
    """How calls of `form` at first..last live tokens launch (MhcConfig.small_launches): pass 1's small tile
    and the pass 2 after it (the wide kernel, or row_small) as programmatic dependents, pass 1 split for
    ctas_per_sm programs an SM. A runtime choice among compiled kernels: the pdl tiles are compile jobs of
    their own beside the plain ones."""

    form: str  # "pre" or "post_pre" (SMALL_LAUNCH_FORMS)
    first: int
    last: int
    ctas_per_sm: int

    def __post_init__(self) -> None:
        if self.form not in SMALL_LAUNCH_FORMS:
            raise ValueError(f"SmallLaunch.form must be one of {SMALL_LAUNCH_FORMS}, got {self.form!r}")
        for name in ("first", "last", "ctas_per_sm"):
            if not _positive_int(getattr(self, name)):
                raise ValueError(f"SmallLaunch.{name} must be an int >= 1, got {getattr(self, name)!r}")
        if self.last < self.first:
            raise ValueError(f"SmallLaunch.last must be >= first={self.first}, got {self.last}")


SMALL_LAUNCH_FORMS = ("pre", "post_pre")  # the pass-1 forms SmallLaunch applies to (bcast and post keep theirs)
