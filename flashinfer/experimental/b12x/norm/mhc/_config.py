"""norm.mhc configuration: the selection (MhcConfig), the defaults per arch, and the split-K heuristic (stdlib only).
The kernel tiles it selects among are in _tiles.py (re-exported here).

Tiles fit by CPU compiles for sm_90a / sm_120a (registers, spills, mma.sync and no wgmma in the PTX: Triton picks
wgmma on sm_90a for num_warps % 4 == 0 with BLOCK_T >= 64, so 4-warp tiles keep BLOCK_T <= 32 and larger token blocks
use 2 warps), chosen by timed sweeps (bench_norm.py; the measurements are cited where a default takes them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ._tiles import (
    PASS2_KINDS,
    STREAM_FORMS,
    ApplyConfig,
    FusedConfig,
    LastConfig,
    RowConfig,
    SmallConfig,
    SmallLaunch,
    StreamConfig,
    WideConfig,
    _check_bools,
    _int_at_least,
    _positive_int,
    cdiv,
)


@dataclass(frozen=True)
class MhcConfig:
    """The selection. `*_small` tiles run up to `small_max_tokens` live tokens, `*_large` above.

    ctas_per_sm: the split heuristic aims at this many pass-1 programs per SM.
    """

    pre_small: StreamConfig = StreamConfig(block_t=16, block_h=32, num_warps=4, num_stages=2)  # 88 registers (sm_90a)
    # 64 tokens on 2 warps (4 would be wgmma): 186 registers. fn (hi + lo, 128 bytes per k) is read from L2 once per
    # 128 residual bytes per k (twice that at BLOCK_T=32 x 4 warps, sweep "pre_t32"); BLOCK_H=32 spills.
    pre_large: StreamConfig = StreamConfig(block_t=64, block_h=16, num_warps=2, num_stages=4)
    post_pre_small: StreamConfig = StreamConfig(block_t=16, block_h=32, num_warps=4, num_stages=2)  # 185 registers
    post_pre_large: StreamConfig = StreamConfig(block_t=32, block_h=16, num_warps=4, num_stages=2)  # 183; 2 warps spill
    bcast: StreamConfig = StreamConfig(block_t=32, block_h=32, num_warps=4, num_stages=2)
    post: StreamConfig = StreamConfig(block_t=4, block_h=128, num_warps=4, num_stages=1)
    # the apply pass 2: one token per 4-warp program at small T (8 KiB chunks, 3 prefetched); 4 a program at large T
    apply_small: ApplyConfig = ApplyConfig(tokens=1, block_h=1024, stages=4)
    apply_large: ApplyConfig = ApplyConfig(tokens=4, block_h=256, stages=4)
    # the "row" pass 2: one token per 8-warp program, the row read once. H200: 8 warps 234 us at T=8192 (16 warps 343;
    # the apply pass 2 1255), 8.7 us at T=1 (apply 33.6).
    row_small: RowConfig = RowConfig(block_h=8192, block_s=256, num_warps=8)
    row_large: RowConfig = RowConfig(block_h=8192, block_s=16, num_warps=8)
    # which pass 2 runs: "row" or the older "apply" (TOK tokens a program, 2-3 reads of the row)
    pass2: str = "row"
    # the one-launch path at T <= small.max_tokens (pre, post_pre, bcast); None: off (unmeasured)
    small: SmallConfig | None = None
    # post_pre above small_max_tokens as post's kernel, then pre's pass 1 on the stored residual.
    # H200 (04:04 UTC run): whole post_pre 909 us at T=8192 (fused pass 1: 1154), 108 at T=1024 (172)
    post_pre_split: bool = True
    # pass 2 at T <= wide.max_tokens without a norm weight: the wide kernel (y over H / block_y
    # programs, scalar Sinkhorn); None: off (the default until measured)
    wide: WideConfig | None = None
    # the whole call in ONE launch at T <= tiny.max_tokens without a norm weight (_kernel_tiny.py:
    # pass 1 with the small stream tile, then this finish tile's y programs, which wait on it);
    # None: off (the default until measured). tiny.max_tokens must be <= small_max_tokens.
    tiny: WideConfig | None = None
    # the whole call in ONE launch at T <= last.max_tokens, the last program to arrive finishing it
    # (_kernel_last.py; with or without a norm weight; takes precedence over tiny and small); None:
    # off (the default until measured)
    last: LastConfig | None = None
    small_max_tokens: int = 64
    # pre's pass 1 (pre_mid; post_pre_split's borrowed pre too) and the row pass 2 (row_mid) for
    # small_max_tokens < T <= mid_max_tokens when set (None: the large tiles from small_max_tokens + 1)
    pre_mid: StreamConfig | None = None
    row_mid: RowConfig | None = None
    mid_max_tokens: int = 128
    ctas_per_sm: int = 4
    # calls whose form and live token count one of these covers run their small-T kernels as programmatic
    # dependents with that entry's split target (SmallLaunch; ranges of one form must not overlap; none
    # applies above small_max_tokens); other calls keep the tiles as given and ctas_per_sm
    small_launches: tuple = ()
    # the one-launch kernel (_kernel_fused.py) for pre / bcast (fused_pre) and post_pre
    # (fused_post_pre) at T >= fused_min_tokens; None: the two-pass path (fused_config turns it
    # on: FUSED_PRE, FUSED_POST_PRE; sm_90a's default_config does not). From 512 tokens by prediction:
    # the finisher's y loop walks H in [block_t, finish_h] tiles whatever the live tokens (~112
    # dependent L2 round trips at H = 7168), ~20 us that the two-pass path beats at small T.
    fused_pre: FusedConfig | None = None
    fused_post_pre: FusedConfig | None = None
    fused_min_tokens: int = 512
    # the two-pass path above 2 * small_max_tokens in token chunks of at most chunk_tokens, each chunk's passes
    # (post_pre_split: post, then pre's two) back to back, so that pass 2 (and pass 1 after post) re-reads the
    # chunk's residual out of L2 instead of HBM; chunks are even (cdiv(T, chunk_tokens) of them), so each holds
    # more than small_max_tokens tokens and runs the large (or mid) tiles. None: one chunk (every call whole).
    # Opt-in: slower on an H100 at 14 of 16 rows (session 56, docs/performance.md: pass 2 already streams at 90% of
    # copy, and each run adds a launch boundary and more pass-1 splits).
    chunk_tokens: int | None = None
    # pass 1's split count rounded down instead of up (split_for's whole_wave): at most ctas_per_sm programs an SM,
    # so a grid never spills a short second wave. sm_90a's pre_large (48 KB of pipeline stages + 1 KB) holds 4
    # programs an SM, the default's target: at T = 8192 rounding up gives 128 token blocks x 5 splits = 640 programs
    # for 528 slots (1.21 waves), down 4 splits = 512 (session 56's CPU count). pre's pass 1 only (post_pre_split's
    # too): bcast's 32 x 32 tile holds 6 an SM, and its grid already fits. On in sm_90a's default_config (session 57).
    whole_wave: bool = False
    # the walk pass 2 (RowConfig with walk > 0) above mid_max_tokens (small_max_tokens without row_mid) to walk_max_tokens
    row_walk: RowConfig | None = None
    walk_max_tokens: int = 4096
    # hidden sizes up to this walk at every T above the mid tiles (walk_max_tokens bounds the wider ones only); 0: none
    walk_all_max_hidden: int = 0
    # > 0: pre's large pass-1 tile (post_pre_split's borrowed pre too) takes its own fn_split only from this many
    # live tokens; below, the same tile splits fp32 fn into hi + lo in its loop (fn_split "kernel"), so the call
    # has no split launch (a fixed ~3-5 µs against the loop's ALU, which grows with T). 0: its fn_split at every T
    fn_split_min_tokens: int = 0

    def rounds_down(self, form: str) -> bool:
        """Whether pass 1 of `form` takes whole_wave's split count (split_for)."""
        return self.whole_wave and form == "pre"

    def pass1_splits(self, form: str, tokens: int, block_t: int, n_chunks: int, target_ctas: int, split_k=None):
        """(splits, chunks per split) of `form`'s pass 1 under this selection: split_for, rounding down where
        rounds_down(form) says so. Every caller that launches or sizes pass 1 asks here."""
        return split_for(tokens, block_t, n_chunks, target_ctas, split_k, whole_wave=self.rounds_down(form))

    def __post_init__(self) -> None:
        if self.pass2 not in PASS2_KINDS:
            raise ValueError(f"MhcConfig.pass2 must be one of {PASS2_KINDS}, got {self.pass2!r}")
        if not _positive_int(self.ctas_per_sm):
            raise ValueError(f"MhcConfig.ctas_per_sm must be an int >= 1, got {self.ctas_per_sm!r}")
        self._check_small_launches()
        if not isinstance(self.fused_min_tokens, int) or self.fused_min_tokens < 1:
            raise ValueError(f"MhcConfig.fused_min_tokens must be an int >= 1, got {self.fused_min_tokens!r}")
        if self.fused_pre is not None and not isinstance(self.fused_pre, FusedConfig):
            got = type(self.fused_pre).__name__
            raise ValueError(f"MhcConfig.fused_pre must be a FusedConfig or None, got {got}")
        if self.wide is not None and not isinstance(self.wide, WideConfig):
            raise ValueError(f"MhcConfig.wide must be a WideConfig or None, got {type(self.wide).__name__}")
        if self.tiny is not None and not isinstance(self.tiny, WideConfig):
            raise ValueError(f"MhcConfig.tiny must be a WideConfig or None, got {type(self.tiny).__name__}")
        if self.tiny is not None and self.tiny.max_tokens > self.small_max_tokens:
            raise ValueError(
                f"MhcConfig.tiny.max_tokens={self.tiny.max_tokens} must be <= small_max_tokens={self.small_max_tokens}"
            )
        if not isinstance(self.mid_max_tokens, int) or self.mid_max_tokens < self.small_max_tokens:
            raise ValueError(
                f"MhcConfig.mid_max_tokens must be an int >= small_max_tokens={self.small_max_tokens}, "
                f"got {self.mid_max_tokens!r}"
            )
        _check_bools("MhcConfig", self, ("whole_wave",))
        if self.chunk_tokens is not None and (
            not isinstance(self.chunk_tokens, int) or self.chunk_tokens <= 2 * self.small_max_tokens
        ):
            raise ValueError(
                f"MhcConfig.chunk_tokens must be None or an int > 2 * small_max_tokens = {2 * self.small_max_tokens}, "
                f"got {self.chunk_tokens!r}"
            )
        if self.last is not None and not isinstance(self.last, LastConfig):
            raise ValueError(f"MhcConfig.last must be a LastConfig or None, got {type(self.last).__name__}")
        if self.row_walk is not None and (not isinstance(self.row_walk, RowConfig) or not self.row_walk.walk):
            raise ValueError(f"MhcConfig.row_walk must be None or a RowConfig with walk > 0, got {self.row_walk!r}")
        if not _positive_int(self.walk_max_tokens):
            raise ValueError(f"MhcConfig.walk_max_tokens must be an int >= 1, got {self.walk_max_tokens!r}")
        if not isinstance(self.walk_all_max_hidden, int) or self.walk_all_max_hidden < 0:
            raise ValueError(f"MhcConfig.walk_all_max_hidden must be an int >= 0, got {self.walk_all_max_hidden!r}")
        if not _int_at_least(self.fn_split_min_tokens, 0):
            raise ValueError(f"MhcConfig.fn_split_min_tokens must be an int >= 0, got {self.fn_split_min_tokens!r}")
        if self.fused_post_pre is not None and not isinstance(self.fused_post_pre, FusedConfig):
            got = type(self.fused_post_pre).__name__
            raise ValueError(f"MhcConfig.fused_post_pre must be a FusedConfig or None, got {got}")

    def _check_small_launches(self) -> None:
        if not isinstance(self.small_launches, tuple) or not all(
            isinstance(r, SmallLaunch) for r in self.small_launches
        ):
            raise ValueError(f"MhcConfig.small_launches must be a tuple of SmallLaunch, got {self.small_launches!r}")
        for r in self.small_launches:
            clash = [
                o
                for o in self.small_launches
                if o is not r and o.form == r.form and o.first <= r.last and r.first <= o.last
            ]
            if clash:
                raise ValueError(f"MhcConfig.small_launches: {r} overlaps {clash[0]}")

    def small_launch(self, form: str, tokens: int) -> SmallLaunch | None:
        """The SmallLaunch entry covering `form` at `tokens` live tokens, or None (always above
        small_max_tokens: the entries change the small-T kernels only)."""
        if tokens > self.small_max_tokens:
            return None
        for r in self.small_launches:
            if r.form == form and r.first <= tokens <= r.last:
                return r
        return None

    def target_ctas(self, tokens: int, sms: int, form: str | None = None) -> int:
        """Pass 1's split target (programs) of `form` at `tokens` live tokens on `sms` SMs."""
        rule = self.small_launch(form, tokens)
        return (rule.ctas_per_sm if rule else self.ctas_per_sm) * sms

    def _applying(self, form: str | None = None) -> tuple:
        """The SmallLaunch entries (of `form`, or all) that cover some T <= small_max_tokens. The compile
        jobs ask stream / apply / wide_for for the tile at an entry's first T: the tile its calls run."""
        return tuple(r for r in self.small_launches if r.first <= self.small_max_tokens and form in (None, r.form))

    def fused_tile(self, form: str) -> FusedConfig | None:
        """The one-launch tile of `form` (None: that form never runs it)."""
        if form == "post":
            return None
        return self.fused_post_pre if form == "post_pre" else self.fused_pre

    def fused(self, form: str, tokens: int) -> FusedConfig | None:
        """The one-launch tile at `tokens` live tokens, or None (the small path, when configured,
        takes precedence up to its max_tokens). post_pre above small_max_tokens with
        post_pre_split runs post's kernel and then pre (one launch when fused_pre is set)."""
        if tokens < self.fused_min_tokens or (self.small is not None and tokens <= self.small.max_tokens):
            return None
        if form == "post_pre" and self.splits_post_pre(tokens):
            return None
        return self.fused_tile(form)

    def splits_post_pre(self, tokens: int) -> bool:
        """Whether post_pre at `tokens` live tokens runs as post's kernel, then pre on the residual it stored
        (post_pre_split, above small_max_tokens)."""
        return self.post_pre_split and tokens > self.small_max_tokens

    def fused_forms(self, forms, max_tokens: int) -> tuple:
        """The forms of `forms` that may run the one-launch kernel up to max_tokens (post_pre_split
        borrows pre's above small_max_tokens)."""
        if max_tokens < self.fused_min_tokens:
            return ()
        out = [f for f in forms if self.fused_tile(f) is not None]
        if self.post_pre_split and "post_pre" in forms:
            if min(max_tokens, self.small_max_tokens) < self.fused_min_tokens:
                out = [f for f in out if f != "post_pre"]  # post_pre never runs in one launch
            if max_tokens > self.small_max_tokens:
                out.append("pre")  # post's kernel, then the one-launch pre
        return tuple(f for f in STREAM_FORMS if f in out and self.fused_tile(f) is not None)

    def counters(self, forms, max_tokens: int) -> int:
        """Ticket counters the plan needs: one per token block of the one-launch kernel (1 at least:
        the small path's; 3 with the tiny kernel)."""
        tiles = [self.fused_tile(f) for f in self.fused_forms(forms, max_tokens)]
        tiny = 3 if self.tiny is not None and any(f != "post" for f in forms) else 1  # _kernel_tiny.COUNTERS
        return max([tiny] + [cdiv(max_tokens, c.block_t) for c in tiles])

    def chunks(self, tokens: int) -> tuple:
        """(first token, tokens) of each chunk the two-pass path walks at `tokens` live tokens (chunk_tokens)."""
        c = self.chunk_tokens
        if c is None or tokens <= c:
            return ((0, tokens),)
        k = cdiv(tokens, c)
        return tuple((i * tokens // k, (i + 1) * tokens // k - i * tokens // k) for i in range(k))

    def apply(self, tokens: int, form: str | None = None):
        """The pass-2 tile after `form`'s pass 1 at `tokens` live tokens (an ApplyConfig or a RowConfig,
        by `pass2`)."""
        small = tokens <= self.small_max_tokens
        if self.pass2 == "row":
            if self.row_mid is not None and not small and tokens <= self.mid_max_tokens:
                return self.row_mid
            if small and self.small_launch(form, tokens):
                return dataclasses.replace(self.row_small, pdl=True)
            return self.row_small if small else self.row_large
        return self.apply_small if small else self.apply_large

    def walk_for(self, tokens: int, weighted: bool, hidden: int | None = None) -> RowConfig | None:
        """The walk pass-2 tile at `tokens` live tokens of `hidden` (None: a wide one) (row_walk), or None: the call
        takes `apply`'s tile."""
        low = self.mid_max_tokens if self.row_mid is not None else self.small_max_tokens
        narrow = hidden is not None and hidden <= self.walk_all_max_hidden
        if self.row_walk is None or weighted or self.pass2 != "row" or tokens <= low:
            return None
        return self.row_walk if narrow or tokens <= self.walk_max_tokens else None

    def pass2_tiles(self, max_tokens: int, forms=STREAM_FORMS, hidden: int | None = None) -> tuple:
        """Every pass-2 tile this selection may run after `forms`' pass 1 up to `max_tokens` live tokens of `hidden`
        (the compile jobs; a walk tile compiles without a weight)."""
        points = [(f, t) for f in forms if f != "post" for t in self._points(f, max_tokens)]
        walk = [self.walk_for(t, False, hidden) for _, t in points]
        return tuple(dict.fromkeys([self.apply(t, f) for f, t in points] + [w for w in walk if w is not None]))

    def _points(self, form: str, max_tokens: int, first: int = 1) -> tuple:
        """The T from `first` to max_tokens at which `form`'s pass-1 or pass-2 tile may change (both are constant
        between them): `first`, each regime's first T, each SmallLaunch's first and last + 1."""
        pts = {first, self.small_max_tokens + 1, self.mid_max_tokens + 1}
        pts |= {lo for _, lo, _ in self.regimes(form, max_tokens)}
        pts |= {t for r in self.small_launches if r.form == form for t in (r.first, r.last + 1)}
        return tuple(sorted(t for t in pts if first <= t <= max(max_tokens, 1)))

    def stream(self, form: str, tokens: int) -> StreamConfig:
        """The pass-1 tile of `form` at `tokens` live tokens."""
        if self.small_launch(form, tokens):
            return dataclasses.replace(getattr(self, f"{form}_small"), pdl=True)
        for cfg, lo, hi in self.regimes(form, max(tokens, 1)):
            if lo <= tokens <= hi:
                return cfg
        return self.regimes(form, 1)[0][0]

    def wide_for(self, tokens: int, form: str | None = None) -> WideConfig | None:
        """The wide pass-2 tile after `form`'s pass 1 at `tokens` live tokens (None: no wide pass 2
        configured)."""
        if self.wide is not None and self.small_launch(form, tokens):
            return dataclasses.replace(self.wide, pdl=True)
        return self.wide

    def wides(self, max_tokens: int | None = None, forms=STREAM_FORMS) -> tuple:
        """Every wide pass-2 tile this selection may run after `forms`' pass 1 up to `max_tokens` live tokens (None:
        at any T, after any form), the compile jobs."""
        if self.wide is None:
            return ()
        if max_tokens is not None:
            cap = min(max_tokens, self.wide.max_tokens)
            return tuple(dict.fromkeys(self.wide_for(t, f) for f in forms if f != "post" for t in self._points(f, cap)))
        pdl = tuple(self.wide_for(r.first, r.form) for r in self._applying() if r.first <= self.wide.max_tokens)
        return tuple(dict.fromkeys((self.wide, *pdl)))

    def regimes(self, form: str, max_tokens: int) -> tuple:
        """((tile, first T, last T), ...) covering 1..max_tokens for `form`."""
        if form in ("bcast", "post"):
            return ((getattr(self, form), 1, max_tokens),)
        small, large = getattr(self, f"{form}_small"), getattr(self, f"{form}_large")
        cut = min(self.small_max_tokens, max_tokens)
        out = [(small, 1, cut)]
        if form == "pre" and self.pre_mid is not None and max_tokens > cut:
            mid_cut = min(self.mid_max_tokens, max_tokens)
            if mid_cut > cut:
                out.append((self.pre_mid, cut + 1, mid_cut))
            cut = mid_cut
        inline = self._inline_pre() if form == "pre" else None
        if inline is not None and max_tokens > cut and self.fn_split_min_tokens > cut + 1:
            last = min(self.fn_split_min_tokens - 1, max_tokens)
            out.append((inline, cut + 1, last))
            cut = last
        if max_tokens > cut:
            out.append((large, cut + 1, max_tokens))
        return tuple(out)

    def _inline_pre(self) -> StreamConfig | None:
        """pre_large splitting fn in its loop, when fn_split_min_tokens puts it below some T (else None)."""
        if not self.fn_split_min_tokens or self.pre_large.fn_split == "kernel":
            return None
        return dataclasses.replace(self.pre_large, fn_split="kernel")

    def forms_needed(self, forms, max_tokens: int | None = None) -> tuple:
        """The pass-1 forms `forms` run up to `max_tokens` live tokens (None: at any T): post_pre_split adds post
        and pre to post_pre above small_max_tokens."""
        split = self.post_pre_split if max_tokens is None else self.splits_post_pre(max_tokens)
        extra = ("post", "pre") if split and "post_pre" in forms else ()
        return tuple(f for f in STREAM_FORMS if f in forms or f in extra)

    def fn_split_needed(self, forms, max_tokens: int) -> bool:
        """Whether a pre pass-1 tile this selection may run up to `max_tokens` reads a pre-split fn (the
        "fn_split" scratch and the split launch): pre's own tiles, post_pre_split's borrowed pre, the fused pre."""
        tiles = (
            list(self.pass1_tiles("pre", forms, max_tokens)) if "pre" in self.forms_needed(forms, max_tokens) else []
        )
        if "pre" in self.fused_forms(forms, max_tokens):
            tiles.append(self.fused_tile("pre"))
        return any(t.fn_split != "kernel" for t in tiles)

    def pass1_tiles(self, form: str, forms, max_tokens: int) -> tuple:
        """The pass-1 tiles of `form` that a plan of `forms` up to `max_tokens` live tokens runs (its compile jobs):
        post_pre_split runs post_pre's own tile to small_max_tokens and borrows post's and pre's above it."""
        first = 1 if form in forms else self.small_max_tokens + 1
        if form == "post_pre" and self.post_pre_split:
            max_tokens = min(max_tokens, self.small_max_tokens)
        return () if max_tokens < first else self.streams(form, max_tokens, first)

    def streams(self, form: str, max_tokens: int | None = None, first: int = 1) -> tuple:
        """Every tile `form` may run from `first` to `max_tokens` live tokens (None: at any T), the compile jobs."""
        if form in ("bcast", "post"):
            return (getattr(self, form),)
        if max_tokens is not None:
            return tuple(dict.fromkeys(self.stream(form, t) for t in self._points(form, max_tokens, first)))
        mid = (self.pre_mid,) if form == "pre" and self.pre_mid is not None else ()
        inline = self._inline_pre() if form == "pre" else None
        mid += () if inline is None else (inline,)
        pdl = tuple(self.stream(form, r.first) for r in self._applying(form))
        tiles = (getattr(self, f"{form}_small"), *mid, getattr(self, f"{form}_large"), *pdl)
        return tuple(dict.fromkeys(tiles))


# The one-launch tiles of fused_config (unmeasured when chosen: docs/predictions/norm_mhc.md step 5
# has the reasoning; registers from CPU compiles for sm_90a at H = 7168). pre: 32 tokens on 4 warps
# (mma.sync; 64 at 4 warps would be wgmma) reading 16 steps of 64 contiguous elements of the flat
# row (28 splits at H = 7168, so a token block's rows stay in L2 until its finisher reads them),
# squares on the tensor cores: 134 registers (block_s 4: +67, 16: spills, the finisher's partial
# tiles being block_t x block_s x 25 floats; finish_h 128: 250). post_pre: the two-pass post_pre
# tile (32 x 16 per stream a step), 178 registers; 32 x 32 and "gram" squares spill.
FUSED_PRE = FusedConfig(block_t=32, block_h=16, steps_per_split=16, num_warps=4, num_stages=3, sq="gram", block_s=2)
FUSED_POST_PRE = FusedConfig(
    block_t=32, block_h=16, steps_per_split=16, num_warps=4, num_stages=2, sq="step", block_s=2
)


# Where fused_config switches to the one launch. H200 (2026-11-30 08:31, bench_norm --sweep, H = 7168,
# graph timer): one launch vs two passes, pre 17.6 / 17.4 µs at T = 64, 197.8 / 74.6 at T = 1024,
# 594 / 634 at T = 8192; post_pre 230.8 / 108.1 at 1024, 859 / 906 at 8192. The serial finisher of
# each 32-token block costs more than the second read of the residual below several thousand tokens.
FUSED_MIN_TOKENS = 8192


def fused_config(arch: str | None) -> MhcConfig:
    """Session 6's default selection for `arch` (the sweep's "fused_default" row, and what the tests
    of the one-launch kernel derive their tiles from): the one-launch kernel from fused_min_tokens
    (pre and bcast; post_pre there is post's kernel + the one-launch pre), the two-pass path below.
    sm_120a gets a 4-warp 32-token pre tile: the 2-warp 64-token one spills there (255 registers +
    40-byte stack since pass 1 also sums the squares); on sm_90a it takes 186 registers and no stack."""
    fused = dict(fused_pre=FUSED_PRE, fused_post_pre=FUSED_POST_PRE)
    # T <= 4 without a norm weight: the wide pass 2 (H200, session 6, 13:31, graph timer, H 7168: pre
    # T=1 12.8 -> 9.6 µs, post_pre T=1 13.0 -> 10.4, T=4 12.6 -> 10.5 / 13.3 -> 11.2)
    wide = WideConfig(block_y=128)
    if arch is not None and not str(arch).startswith("sm_90"):
        # sm_120a: the 3-stage one-launch pre tile gets 96 registers + an 8-byte stack from ptxas;
        # 2 stages take 140 and no stack
        fused["fused_pre"] = dataclasses.replace(FUSED_PRE, num_stages=2)
        return MhcConfig(
            pre_large=StreamConfig(block_t=32, block_h=32, num_warps=4, num_stages=3),
            fused_min_tokens=FUSED_MIN_TOKENS,
            wide=wide,
            **fused,
        )
    # sm_90a: the one-launch pre (T >= FUSED_MIN_TOKENS) reads fn split once per call into bf16 hi + lo
    # (H200, 14:03: pre T=8192 624 -> 506 µs, 2.11x torch.compile); the smaller pre tiles keep the
    # in-loop split (fn_pre there: T=1024 76.8 -> 81.8 µs)
    fused["fused_pre"] = dataclasses.replace(FUSED_PRE, fn_split="pre")
    return MhcConfig(fused_min_tokens=FUSED_MIN_TOKENS, wide=wide, **fused)


# sm_90a above small_max_tokens: two passes at every T. H200 (session 6, 14:37 sweep, graph timer,
# H = 7168; fused_config's numbers in brackets): pre 55.8 [74.1] µs at T = 1024, 364.1 [497.8] at
# 8192 (37.9% of copy); post_pre 90.3 [108.1] / 651.7 [767.6]. Pass 1 reads fn split once per call
# (no split ALU in the loop) and sums the squares on the 16 x 16 diagonal blocks of a @ a^T (one
# batched mma.sync a step: 190 instructions a warp-step, was 703); pass 2 streams its row in
# 2048-wide chunks through 3 cp.async stages at 4 warps (66 registers, 5 programs per SM).
PRE_LARGE_90 = StreamConfig(block_t=64, block_h=16, num_warps=2, num_stages=4, sq="diag", fn_split="pre")
ROW_LARGE_90 = RowConfig(block_h=2048, block_s=16, num_warps=4, stages=3)


def default_config(arch: str | None) -> MhcConfig:
    """The heuristic's selection for `arch`. sm_90a: the two-pass path at every T (pre's large tile
    with fn split once and diagonal-block squares, its pass-1 split count rounded down to one wave, bcast's
    squares on the diagonal blocks, the row pass 2 streamed above small_max_tokens; T <= small_max_tokens as
    in fused_config, the wide pass 2 at T <= 4 without a norm weight, with its fast Sinkhorn). sm_120a:
    fused_config's selection (bcast's 32 x 32 tile with sq="diag" spills there, and so does its pre_large
    with fn split once: test_mhc_compile)."""
    fused = fused_config(arch)
    if arch is not None and not str(arch).startswith("sm_90"):
        return fused
    # The wide pass 2's Sinkhorn on tree sums and rsqrt.approx^2 reciprocals (WideConfig.fast): H200
    # 2026-11-30 16:41, H = 7168, graph timer: post_pre T=1 10.16 -> 9.59 µs, T=4 11.60 -> 10.80, pre
    # T=1 9.57 -> 9.11 (the programmatic dependent launch rows gained nothing under the graph)
    wide = None if fused.wide is None else dataclasses.replace(fused.wide, fast=True)
    # 65 <= T <= 128: session 6's pre_large and row_large (in-loop fn split, one-shot 8192-wide row).
    # H200, session 7 sweep (docs/performance.md "Sweeps of session 7"), graph timer, H = 7168: at
    # T = 65 the large tiles below read pre 20.9 / post_pre 24.6 µs against 18.6 / 21.7 for these; at
    # T = 1024 55.6 / 88.8 against 78.8 / 106.4. Linear between the two rows they cross near T = 150
    # (pre) and 200 (post_pre): the cut sits at 128, under both.
    session6 = MhcConfig()
    row_mid = dataclasses.replace(session6.row_large, pdl=MID_ROW_PDL_90)
    pre_mid = dataclasses.replace(session6.pre_large, pdl=MID_PRE_EXIT_90, pdl_at_exit=MID_PRE_EXIT_90)
    base = MhcConfig(wide=wide, pre_mid=pre_mid, row_mid=row_mid, mid_max_tokens=128)
    # bcast: one tile at every T (diag measured only inside the 14:37 variant, at T >= 1024)
    base = dataclasses.replace(
        base, pre_large=PRE_LARGE_90, bcast=dataclasses.replace(base.bcast, sq="diag"), row_large=ROW_LARGE_90
    )
    # Session 29 (H200, graph timer, 8 calls a graph, H = 7168; docs/performance.md): the wide pass 2 with post and
    # comb in a program of their own (apart): pre / post_pre T = 1 7.71 / 8.45 vs 8.02 / 8.85 µs, T = 4 and 64 within
    # 1%. The T <= 64 programmatic dependents: session 30's sweep per form and T range (SMALL_LAUNCHES_90).
    wide = None if base.wide is None else dataclasses.replace(base.wide, apart=True)
    # Session 57 (H100, graph timer; docs/performance.md): pass 1's split count rounded down (whole_wave), one wave
    # of 4 programs an SM: pre -8 to -11%, post_pre -5 to -6% from T = 4096; same grid, ties, at T <= 1024.
    base = dataclasses.replace(base, wide=wide, small_launches=SMALL_LAUNCHES_90, whole_wave=True)
    base = dataclasses.replace(base, fn_split_min_tokens=FN_SPLIT_MIN_90)
    if WALK_90 is not None:
        base = dataclasses.replace(
            base, row_walk=WALK_90, walk_max_tokens=WALK_MAX_90, walk_all_max_hidden=WALK_ALL_MAX_HIDDEN_90
        )
    return with_large_t_pdl(base) if LARGE_PDL_90 else base


# sm_90a: the large and walk tiles launched as programmatic dependents (with_large_t_pdl). Session 61 (H100, two runs,
# graph timer, H = 7168 / 4096; session 60's rule, docs/predictions/norm_mhc.md): T = 1024-2048 mean -1.17% (none
# slower than -0.10%), T = 4096-8192 mean -0.56%, T = 128-512 none more than +0.79% slower (mean -0.97%).
LARGE_PDL_90 = True


# sm_90a: the mid row pass 2 (row_mid, T = 65-128) launched as a programmatic dependent, its pass 1 (pre_mid) plain.
# Session 61 (H100, graph timer, H = 7168 / 4096, pre and post_pre at T = 65 / 96 / 128): row_mid alone as a dependent
# -0.0 to -6.5% in five runs, the last two by the rule written before them (docs/predictions/norm_mhc.md, session 61):
# mean -2.56%, none slower than -1.51%. pre_mid as a dependent too lost 4-40% (likely: pre_mid releases its dependents
# at entry, so row_mid's programs sit in the slots pre_mid's later programs need); pre_mid alone -3.3 to +1.5%.
MID_ROW_PDL_90 = True

# sm_90a: the mid pass 1 (pre_mid) as a dependent that releases the next kernel as its programs exit (pdl_at_exit), not
# at entry. Session 62 (H100, two runs, graph timer, `pdl_mid_exit` against the default at T = 65 / 96 / 128, H = 7168 /
# 4096): post_pre -0.5 to -4.4% (mean -1.95%), pre -1.0 to +1.8% (mean -0.02%), where released at entry (pdl_mid_p1) it
# lost 6.5-43%: the early release was that loss. Session 63 (H100, two fresh runs, the rule of
# docs/predictions/norm_mhc.md, session 62): post_pre mean -1.81% (-1.14 to -2.98%), pre mean +0.39% (max +1.86%); on.
MID_PRE_EXIT_90 = True


# sm_90a's MhcConfig.fn_split_min_tokens: below it pre's large tile splits fn in its loop. Session 59 (H100, two runs,
# docs/performance.md; the rule of docs/predictions/norm_mhc.md): the split launch alone takes 6.4 µs at H = 7168
# (4.6 at 4096) in its own graph; in the loop pass 1 took 35.1 -> 30.6 µs at T = 1024 and 182.3 -> 187.4 at 8192
# (H = 7168): pre -7.7 / -7.9% at T = 1024 (H = 7168), -1.4 to -4.2% at 1024-2048 otherwise; T = 4096 within +-1.4%.
FN_SPLIT_MIN_90 = 2049


# sm_90a's walk pass 2 (MhcConfig.row_walk) to WALK_MAX_90 tokens. Session 58 (H100, two runs, docs/performance.md): pre
# -1.0 to -9.5%, post_pre -1.0 to -6.1% at T = 1024-4096, H = 7168 and 4096; +1.2% at 8192 (H = 7168): stops at 4096.
WALK_90 = RowConfig(block_h=1024, block_s=16, num_warps=4, stages=6, walk=5)
WALK_MAX_90 = 4096
# ... except hidden sizes up to WALK_ALL_MAX_HIDDEN_90, which walk at every T. Session 61 (H100, two runs, graph timer,
# `row_walk` against the default at T = 4096 / 8192 / 16384; docs/performance.md): H = 4096 pre -4.3 to -6.2%,
# post_pre -2.1 to -3.2% at T = 8192-16384; H = 5120 pre -5.2 to -6.4%, post_pre -2.7 to -3.4%; H = 6144 pre -1.0 / +1.3%
# (8192 / 16384), post_pre -0.5 / +1.0%; H = 7168 pre +0.8 to +3.5%, post_pre +0.6 to +1.6%.
WALK_ALL_MAX_HIDDEN_90 = 5120


# sm_90a's small-T launches (MhcConfig.small_launches). H200 2026-12-03 22:25 (session 30, graph timer, 8 calls a
# graph, H = 7168, µs; docs/performance.md): the small-T kernels as programmatic dependents against plain
# launches, at split targets of 1 / 2 / 4 programs an SM. At T <= 16 pass 1 has one token block, so 2 and 4 give
# the same 224 splits (one 32-wide chunk each) and 1 gives 112 (two chunks): pre T = 2 7.60 (224) / 8.00 (112) vs
# 7.84 plain, T = 3 7.56 vs 8.48, T = 4 9.57 (224) / **7.59** (112) vs 8.43, T = 6..16 9.76-9.97 vs 10.60-10.84,
# T = 32 11.45 (2 an SM) vs 12.56, T = 64 17.12 vs **15.54** plain; post_pre T = 2 7.84 (112) / 8.16 (224) vs
# 8.55, T = 3 8.69 vs 9.33, T = 4 **10.42** (112) / 8.84 (224) vs 9.31, T = 6..16 10.63-11.02 (112) vs
# 11.38-12.15, T = 32 13.19 (2 an SM) / 13.74 (1) vs 15.92, T = 64 17.95 (1) vs 20.56. The T = 4 swap between the
# forms repeated in two machine sessions; its cause is not found. T = 1 is session 29's (one program an SM).
SMALL_LAUNCHES_90 = (
    SmallLaunch("pre", 1, 1, 1),
    SmallLaunch("pre", 2, 3, 2),
    SmallLaunch("pre", 4, 4, 1),
    SmallLaunch("pre", 5, 32, 2),
    SmallLaunch("post_pre", 1, 3, 1),
    SmallLaunch("post_pre", 4, 4, 2),
    SmallLaunch("post_pre", 5, 16, 1),
    SmallLaunch("post_pre", 17, 32, 2),
    SmallLaunch("post_pre", 33, 64, 1),
)


def with_small_t_pdl(config: MhcConfig) -> MhcConfig:
    """`config` with the kernels of calls up to small_max_tokens tokens (pre / post_pre small pass-1
    tiles, the small row pass 2, the wide pass 2) launched as programmatic dependents; the large-T
    kernels as they are."""
    return _with_pdl_tiles(config, SMALL_T_PDL_TILES)


SMALL_T_PDL_TILES = ("pre_small", "post_pre_small", "row_small")


def with_large_t_pdl(config: MhcConfig) -> MhcConfig:
    """`config` with the large and walk tiles of pass 1 and pass 2 (the kernels of calls above mid_max_tokens
    tokens where mid tiles are set) launched as programmatic dependents; the small-T and mid tiles, the wide pass 2
    and the one-launch kernels as they are."""
    return _with_pdl_tiles(config, LARGE_T_PDL_TILES, wide=False)


# (bcast's and post's one tile runs at every T: not among them.) The mid tiles stay plain: session 61 (H100, graph
# timer, one run) timed them as dependents at T = 128 (pre_mid + row_mid): pre +10% (H = 7168) / +40% (4096), post_pre
# +6% / +29%, while the large tiles gained at T = 256-8192 (docs/predictions/norm_mhc.md, session 61).
LARGE_T_PDL_TILES = ("pre_large", "post_pre_large", "row_large", "row_walk")
MID_T_PDL_TILES = ("pre_mid", "row_mid")


def with_pdl(config: MhcConfig, fast: bool = False) -> MhcConfig:
    """`config` with every two-pass kernel (pass-1 tiles, the row and wide pass 2) launched with
    programmatic dependent launch, and with fast=True the wide pass 2's approximate Sinkhorn
    reciprocals (WideConfig.fast). The one-launch kernels and the apply pass 2 are unchanged."""
    forms = ("pre_small", "post_pre_small", "bcast", "post", "row_small", *MID_T_PDL_TILES, *LARGE_T_PDL_TILES)
    return _with_pdl_tiles(config, forms, fast=fast or (config.wide is not None and config.wide.fast))


def with_tile_fields(config: MhcConfig, names, **fields) -> MhcConfig:
    """`config` with `fields` set on the tiles `names` that it has (mid and walk tiles may be None)."""
    tiles = {n: dataclasses.replace(getattr(config, n), **fields) for n in names if getattr(config, n) is not None}
    return dataclasses.replace(config, **tiles)


def _with_pdl_tiles(config: MhcConfig, names, wide=True, **wide_fields) -> MhcConfig:
    """`config` with the tiles `names` (those it has) and (with `wide`) the wide pass 2 (with `wide_fields`) marked
    pdl."""
    config = with_tile_fields(config, names, pdl=True)
    return with_tile_fields(config, ("wide",), pdl=True, **wide_fields) if wide else config


def split_for(
    tokens: int, block_t: int, n_chunks: int, target_ctas: int, split_k: int | None = None, *, whole_wave=False
):
    """(splits, chunks per split) of pass 1: ~target_ctas programs (or split_k splits), none empty. The split count
    rounds up (at least target_ctas programs), or with `whole_wave` down (at most target_ctas, at least one split:
    MhcConfig.whole_wave)."""
    blocks = max(1, cdiv(tokens, block_t))
    if split_k is not None:
        want = split_k
    else:
        want = max(1, target_ctas // blocks) if whole_wave else cdiv(target_ctas, blocks)
    cps = cdiv(n_chunks, max(1, min(want, n_chunks)))
    return cdiv(n_chunks, cps), cps


def workspace_rows(
    config: MhcConfig, forms, hidden: int, max_tokens: int, target_ctas: int, split_k=None, sms=None
) -> int:
    """Rows of the fp32 [rows, 32] partials: the largest splits(T) * T over 1 <= T <= max_tokens
    (target_ctas: the split target; sms: the SM count that the small_launches' targets scale by, None:
    those calls are not sized)."""
    rows = 0
    if config.small is not None and any(f != "post" for f in forms):
        slices = max(hidden // config.small.slice_h(f, hidden) for f in forms if f != "post")
        rows = slices * min(config.small.max_tokens, max_tokens)
    if config.last is not None and any(f != "post" for f in forms):
        rows = max(
            rows, cdiv(hidden // config.last.block_h, config.last.steps) * min(config.last.max_tokens, max_tokens)
        )
    for form in config.fused_forms(forms, max_tokens):
        rows = max(rows, config.fused_tile(form).split(hidden, split_k)[0] * max_tokens)
    for form in config.forms_needed(forms, max_tokens):
        if form == "post":
            continue  # post writes no partials
        for cfg, lo, hi in config.regimes(form, max_tokens):
            n_chunks = hidden // cfg.block_h
            for blocks in range(cdiv(lo, cfg.block_t), cdiv(hi, cfg.block_t) + 1):
                t = min(blocks * cfg.block_t, hi)  # splits depend on blocks only: take its largest T
                if t >= lo:
                    rows = max(rows, config.pass1_splits(form, t, cfg.block_t, n_chunks, target_ctas, split_k)[0] * t)
        if sms is None:
            continue
        for t in range(1, min(max_tokens, config.small_max_tokens) + 1):
            if config.small_launch(form, t):  # its own split target (MhcConfig.target_ctas)
                tile = config.stream(form, t)
                target = config.target_ctas(t, sms, form)
                splits = config.pass1_splits(form, t, tile.block_t, hidden // tile.block_h, target, split_k)
                rows = max(rows, splits[0] * t)
    return rows
