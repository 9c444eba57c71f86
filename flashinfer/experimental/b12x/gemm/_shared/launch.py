"""Dispatch for the GEMM kernels: M bucket -> kernel variant, launch arguments, one launch.

Buckets (live M is a run-time extent; only the bucket is part of a compile key):

    decode8   M <= 8      decode kernel, one 8-token MMA tile (weight bytes dominate)
    decode16  M <= 16     decode kernel, two token tiles
    decode32  M <= 32     decode kernel, four token tiles (still weight-bandwidth-bound W4A16)
    decode64  M <= 64     decode kernel, eight token tiles
    tiled64   M <= 256    tiled kernel, 64 x 128 CTA tiles (65 <= M: dequantizing both operands to
                          bf16 tiles in shared memory pays off only when M amortizes it)
    tiled128  M > 256     tiled kernel, 128 x 128 (or 128 x 256) CTA tiles; from M = 1024 on (the
                          live M decides) NVFP4 / MXFP4 / MXFP8 / tensor-FP8 weights take the
                          two-pass path (`blockscaled/_twopass.py`: each operand dequantized
                          once, then a 16-bit cp.async GEMM)

The same variants run on sm_90a and sm_120a (portable mma.sync kernels). On sm_120a / sm_121a the
tiled buckets of NVFP4 / MXFP4 / MXFP8 pairs can use the native block-scaled MMA kernel
(`_kernel_sm120`; compiled on the CPU, never run: opt in with B12X_GEMM_SM120_MMA=1, `sm120_mma`).
The decode8 / decode16 buckets of weight-only NVFP4 / MXFP4 / MXFP8 can run the Triton GEMV
(`blockscaled/_kernel_gemv`, a `GemvConfig`): a plan override, or B12X_GEMM_DECODE_KERNEL=triton;
those of W4A16 NVFP4 the stream-layout decode kernel (`blockscaled/_kernel_stream`, a `StreamConfig`,
weight repacked once by `_stream_cache`): a plan override, or B12X_GEMM_DECODE_KERNEL=stream. `launch_args` builds the tensors every kernel takes,
(A, SFA, B, SFB, C, S0, S1, S2) + alpha: the epilogue multiplies by alpha * S0 * S1 * S2 * 2^E with
S0 the caller's alpha tensor, S1 / S2 the per-tensor scale (fp8_tensor) or Weight alpha of A / B
(1.0 where absent), so no scalar is ever read on the host. The decode buckets' shape-aware heuristic and the
switches of its rules, with their evidence, are `decode_rules` (re-exported here: `decode_config_for`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys

import torch

from . import decode_rules as R
from .decode_rules import DECODE_OPTS_ENV, decode_config_for, with_decode_opts  # noqa: F401 (the API)
from .formats import FORMAT

BUCKETS = ("decode8", "decode16", "decode32", "decode64", "tiled64", "tiled128")
BUCKET_MAX_M = {"decode8": 8, "decode16": 16, "decode32": 32, "decode64": 64, "tiled64": 256, "tiled128": math.inf}


def bucket_for(m: int) -> str:
    """The M bucket a live M runs in."""
    for name in BUCKETS:
        if m <= BUCKET_MAX_M[name]:
            return name
    raise AssertionError(m)


SM120_MMA_ENV = "B12X_GEMM_SM120_MMA"


def sm120_mma(a_fmt: str | None, b_fmt: str | None, bucket: str, arch: str | None) -> bool:
    """True when the tiled bucket of an NVFP4 / MXFP4 / MXFP8 pair (both operands quantized) on
    SM120 / SM121 uses the native block-scaled MMA kernel (`_kernel_sm120`). That kernel compiles for
    sm_120a on the CPU but has never run (no SM120 GPU in this project's sessions), so it is opt-in:
    B12X_GEMM_SM120_MMA=1. Other archs, pairs and buckets keep the portable kernels. Its cp.async
    reads the swizzled scales 16 bytes at a time: they must start 16-byte aligned (the quantizers and
    pack_weight allocate them so; a 128x4 atom is 512 bytes)."""
    if not bucket.startswith("tiled") or os.environ.get(SM120_MMA_ENV) != "1" or a_fmt is None or arch is None:
        return False
    from ..blockscaled import _kernel_sm120 as KS

    return arch in KS.ARCHS and a_fmt == b_fmt and b_fmt in KS.RECIPES


# Epilogues whose fused configs keep the plain heuristic's warp groups (`DecodeConfig.wn`, without ashare) under
# pdl "off" / "wait". H200 session 40 (`bench_gemm --epilogue`, W4A16 M = 16 28672 x 4096, cold weights, graph
# timer; the one shape the heuristic groups): residual wn 2 vs 1 34.37 / 36.95 µs plain, 33.98 / 36.65 under
# "wait" (-7%); silu_mul 34.50 / 34.44 and 34.19 / 34.39 (even), so it keeps one group. "prefetch" was not timed.
GROUPED_EPILOGUES = ("residual",)


def fused_config(
    bucket: str,
    n: int,
    k: int,
    b_fmt: str,
    a_fmt: str | None,
    epilogue: str = "none",
    pdl: str = "off",
    opts: str | None = None,
    norm: bool = False,
    rope=None,
    hints: bool | None = None,
    span: str | None = None,
    arch: str | None = None,
):
    """The fused decode kernel's `FusedConfig` (blockscaled/_kernel_decode_fused: a fused epilogue and/or
    programmatic dependent launch) for a decode bucket: `decode_config_for`'s K loop with one warp group
    (wn 1, no ashare, kgroup 1: what that kernel runs; GROUPED_EPILOGUES under pdl "off" / "wait" keep the
    heuristic's groups, without ashare), tiles doubled to an even count for silu_mul
    (gate and up halves: T = 1 gate_up 11264 x 2048 gets 352 CTAs of 16 gate + 16 up rows instead of
    704 of 16 rows), fewer warps while the reduction buffer or a chunk per warp says so. n: the
    weight's rows (2I for silu_mul); norm: A RMS-normalized in the kernel (FusedConfig.norm). opts: DecodeConfig changes as `with_decode_opts` takes them, applied
    last (a plan override's way to sweep, e.g. "unroll=1,prefetch=1": the gated T = 1 config then
    needs 64 registers a lane instead of 112, ptxas 13.0 sm_90a); B12X_GEMM_DECODE_OPTS applies only
    through decode_config_for. rope: the `_epilogue.RopeLayout` of epilogue "rope_append" (which keeps
    the heuristic's tiles: its pairs are local rows r and r + BN/2 of any BN, so T = 1 qkv 3072 x 2048
    keeps 192 CTAs of 16 rows = 8 pairs); B12X_GEMM_ROPE_EARLY=1 gives it FusedConfig.early up to 32
    tokens (a sweep switch, unset: off). span: FusedConfig.span, None for `prefetch_span`'s choice
    (opts may also carry "span=rows" / "span=step"); hints: the base takes `decode_config_for`'s cache
    hints (False: the plain loads of every fused plan before session 25), None for all but a whole-row
    prefetch (pdl "prefetch" with span "rows", whose weight is in L2 when the K loop reads it). arch: the
    plain kernel's one-wave rule (unroll 1 over a grid in ONE_WAVE_CTAS's range) for decode_rules' ONE_WAVE_ARCHS
    and ONE_WAVE_EPILOGUES, as `default_config` gives it (None: a shape-only query).

    H200 2026-12-03 07:10-07:30 (session 25, `bench_gemm --sweep-subset pdl`, W4A16 NVFP4, cold weights,
    M = 1 / 16 at 4096 x 4096, 28672 x 4096, 4096 x 14336, 7168 x 2048; `bench_block` A/B): the hints
    speed the fused kernel up under a plain launch (2-8%: 28672 x 4096 M = 1 26.81 -> 24.66 us), "wait"
    (4096 x 4096 M = 1 5.27 -> 5.02) and the first-step prefetch; after a whole-row prefetch they are
    even or slower (4096 x 4096 M = 1 5.37 -> 5.47, 7168 x 2048 M = 16 5.90 -> 6.02; the block's gate_up
    at T = 1 / 8 +0.45 / +0.27 us). "step" keeps the whole-row prefetch's gain at the small shapes (the
    same lines there) without its loss at the big ones (28672 x 4096 M = 1 31.55 -> 25.16, 4096 x 14336
    15.19 -> 13.50); at the block's 3-13 MB weights it loses (T = 32 74.34 -> 76.16 us)."""
    from ..blockscaled._kernel_decode import DecodeConfig
    from ..blockscaled._kernel_decode_fused import FusedConfig, span_reason, why_not

    if not bucket.startswith("decode"):
        raise ValueError(f"a fused epilogue or pdl runs in the decode buckets (M <= 64), got bucket {bucket}")
    opts, span_opt = _split_span(opts)
    span = span_opt or span or prefetch_span(pdl, n, k, b_fmt)
    reason = span_reason(span, pdl)
    if reason is not None:  # before the warps loop below, which would only halve warps on it
        raise ValueError(reason)
    if hints is None:
        hints = not (pdl == "prefetch" and span == "rows")
    one_wave = arch in R.ONE_WAVE_ARCHS and epilogue in R.ONE_WAVE_EPILOGUES and not norm
    base = decode_config_for(
        BUCKET_MAX_M[bucket],
        n,
        k,
        b_fmt,
        a_fmt,
        hints=hints,
        one_wave=one_wave,
        fp4_mul=R.FUSED_FP4_MUL,
        fused="norm" if norm else epilogue,
    )
    silu_groups = one_wave and epilogue == "silu_mul" and R.fused_silu_groups(n, b_fmt, base)
    wn = base.wn if (epilogue in GROUPED_EPILOGUES or silu_groups) and pdl in ("off", "wait") else 1
    # (ksplit and pdl_wait are the plain kernel's: B12X_GEMM_DECODE_OPTS may have set them on the base)
    base = dataclasses.replace(base, wn=wn, ashare=False, kgroup=1, probe="", ksplit=1, pdl_wait=False)
    if silu_groups and wn > 1 and b_fmt == "mxfp4":
        # 100 registers where unroll 2 takes 153 (ptxas 13.0 sm_90a), under either FP4 placement
        mul = R.FUSED_MXFP4_GROUPS_MUL and R.FUSED_FP4_MUL and hints and a_fmt == "bfloat16"
        base = dataclasses.replace(base, unroll=1, fp4="mul" if mul else base.fp4)
    if epilogue == "silu_mul" and base.tiles % 2:
        base = dataclasses.replace(base, tiles=2 * base.tiles)
    if epilogue == "silu_mul" and norm and base.prefetch == 0:
        # the norm's g words and sums of squares on top of the gated tiles: ptxas 13.0 sm_90a needs 148
        # registers a lane at T <= 8 with unroll 2 (one 256-thread CTA a SM), 127 as the 1-chunk pipeline
        base = dataclasses.replace(base, unroll=1, prefetch=1, clamp=False)  # the pipeline predicates its loads
    if opts:
        base = with_decode_opts(base, opts)
    out_dtype = "bfloat16"
    # the early tables take 4 registers a lane per finish pass: at 64 tokens (4 passes) the rope qkv
    # needs 247 registers a lane against 211 (255 + 96 bytes of stack with the norm; ptxas 13.0 sm_90a)
    early = epilogue == "rope_append" and os.environ.get(ROPE_EARLY_ENV) == "1" and base.ntiles <= 4
    config = FusedConfig(base, epilogue, pdl, norm, rope, early, span)
    while base.warps > 1 and why_not(a_fmt or b_fmt, b_fmt, out_dtype, config) is not None:
        base = dataclasses.replace(base, warps=base.warps // 2)
        config = FusedConfig(base, epilogue, pdl, norm, rope, early, span)
    assert isinstance(base, DecodeConfig)
    return config


# prefetch_span: weights up to this many bytes (values + scales) prefetch whole rows under pdl
# "prefetch"; larger ones only the first step's K range. Well below the L2 of every target (H200 50 MB,
# RTX 5090 96 MB), with room for the activations and the kernel before. Session 25 (H200): the demo
# block's weights (3-13 MB, NVFP4) prefer whole rows (T = 32 74.3 vs 76.2 us); MXFP8 7168 x 2048 (15.1
# MB) at M = 16 the step (6.44 vs 6.79 us), MXFP8 4096 x 4096 (17.3 MB) too (7.21 vs 7.92).
ROWS_PREFETCH_BYTES = 14 << 20


def prefetch_span(pdl: str, n: int, k: int, b_fmt: str) -> str:
    """The FusedConfig.span `fused_config` picks: "rows" (the whole weight to L2 before the wait) for a
    weight of at most ROWS_PREFETCH_BYTES, where every line prefetched stays until its K loop reads it;
    "step" for larger ones, whose resident CTAs' whole rows would evict each other (H200 session 25,
    W4A16 M = 1: 28672 x 4096, 66 MB, rows 31.55 -> step 25.16 us; 4096 x 14336, 33 MB, 15.19 -> 13.50;
    MXFP8 M = 16 7168 x 2048, 15.1 MB, 6.79 -> 6.44; at W4A16's 8-9 MB both spans are the same lines).
    "rows" whenever pdl is not "prefetch" (span unused)."""
    if pdl != "prefetch":
        return "rows"
    spec = FORMAT[b_fmt]
    weight = spec.row_bytes(k) * n + (n * (k // spec.sf_vec) if spec.swizzled else 0)
    return "rows" if weight <= ROWS_PREFETCH_BYTES else "step"


def _split_span(opts: str | None) -> tuple[str | None, str | None]:
    """(opts without its "span=..." item, that span or None): `fused_config`'s opts carry the
    FusedConfig's span beside the DecodeConfig changes."""
    if not opts:
        return opts, None
    items = [part.strip() for part in opts.split(",") if part.strip()]
    spans = [i.partition("=")[2].strip() for i in items if i.partition("=")[0].strip() == "span"]
    rest = ",".join(i for i in items if i.partition("=")[0].strip() != "span")
    return rest or None, (spans[-1] if spans else None)


ROPE_EARLY_ENV = "B12X_GEMM_ROPE_EARLY"  # =1: fused_config's rope_append configs load their tables early

# A pdl "wait" query with no epilogue, norm or rope ran the fused kernel in `fused_config`'s one warp group: at M =
# 16 28672 x 4096 that gave up the plain kernel's shared-activation warp groups (session 25: fused "wait" 36.87 µs,
# 1.54x cuBLAS; plain 32.74). With this on (since session 39), such a query takes the plain decode heuristic as a
# programmatic dependent (`DecodeConfig.pdl_wait`) wherever that heuristic has warp groups (wn > 1). Session 39's
# s38_c (614558d, H200, graph timer): the GPU tests passed; M = 16 28672 x 4096 plain + pdl_wait 32.07 µs against
# fused "wait" 36.56 (one group) and 33.75 (two groups, opt-in); docs/performance.md, session 39.
PLAIN_PDL_GROUPS = True


def pdl_config(bucket: str, n: int, k: int, b_fmt: str, a_fmt: str | None, pdl: str, arch: str | None = None):
    """The config of a pdl query without epilogue, norm or rope in a decode bucket: `fused_config`, or with
    PLAIN_PDL_GROUPS and pdl "wait" the plain heuristic with pdl_wait where it has warp groups."""
    if PLAIN_PDL_GROUPS and pdl == "wait":
        base = default_config(bucket, n, k, b_fmt, a_fmt=a_fmt, arch=arch)
        if type(base).__name__ == "DecodeConfig" and base.wn > 1:
            return dataclasses.replace(base, pdl_wait=True)
    return fused_config(bucket, n, k, b_fmt, a_fmt, pdl=pdl, arch=arch)


def is_fused(config) -> bool:
    """Whether `config` runs the fused decode kernel (its launcher takes R and G after S2, eps after
    alpha: `fused_args`)."""
    return type(config).__name__ == "FusedConfig"


def fused_args(args, alpha_f, out, residual=None, norm_weight=None, eps=1e-6, rope=None):
    """`launch_args`' (args, alpha) -> the fused launcher's (A, SFA, B, SFB, C, S0, S1, S2, R, G, alpha,
    eps): R the residual or C, G the norm weight or A flattened (never read when absent); with rope
    (a `_epilogue.RopeAppend`, epilogue "rope_append") its six tensors COS, SIN, KC, VC, SP, SO go
    after G."""
    r = out if residual is None else residual
    g = args[0].reshape(-1) if norm_weight is None else norm_weight
    if rope is not None:
        return (*args, r, g, *rope.tensors(), alpha_f, float(eps))
    return (*args, r, g, alpha_f, float(eps))


def _is_sm120(config) -> bool:
    return type(config).__name__ == "Sm120Config"


def _is_gemv(config) -> bool:
    return type(config).__name__ == "GemvConfig"


def is_stream(config) -> bool:
    """Whether `config` runs the stream-layout decode kernel (its weight operand is
    `blockscaled/_stream_cache.stream_weight`, not the plain values)."""
    return type(config).__name__ == "StreamConfig"


DECODE_KERNEL_ENV = "B12X_GEMM_DECODE_KERNEL"  # "triton": the Triton GEMV; "stream": the stream kernel
STREAM_BUCKETS = ("decode8", "decode16")
# Whether W4A16 NVFP4 decode runs the stream-layout kernel when B12X_GEMM_DECODE_KERNEL is unset
# (False until an H200 sweep says so: docs/predictions/gemm_decode.md, session 7).
STREAM_DEFAULT = False


def stream_selected(a_fmt: str | None, b_fmt: str | None, bucket: str) -> bool:
    """Whether this case runs the stream-layout decode kernel: B12X_GEMM_DECODE_KERNEL=stream, or
    unset with STREAM_DEFAULT (W4A16 NVFP4 at M <= 16; shapes without a stream layout keep the
    decode kernel; "cute" / "triton" turn it off)."""
    env = os.environ.get(DECODE_KERNEL_ENV)
    if not (env == "stream" or (env is None and STREAM_DEFAULT)):
        return False
    return bucket in STREAM_BUCKETS and a_fmt in R.SHARED_A and b_fmt == "nvfp4"


def default_config(
    bucket: str,
    n: int | None = None,
    k: int | None = None,
    b_fmt: str | None = None,
    *,
    a_fmt: str | None = None,
    arch: str | None = None,
):
    """The heuristic config of a bucket (the kernel modules say what they were tuned on); decode
    buckets use the shape-aware `decode_config_for` when the problem's N, K and weight format are given;
    tiled buckets of block-scaled pairs on SM120 the native MMA kernel's when `sm120_mma` says so."""
    if sm120_mma(a_fmt, b_fmt, bucket, arch):
        from ..blockscaled._kernel_sm120 import default_config as sm120_config

        return sm120_config(a_fmt)
    from ..blockscaled import _gemv_config as GC

    if n is not None and k is not None and stream_selected(a_fmt, b_fmt, bucket):
        from ..blockscaled._kernel_stream import default_config as stream_config

        found = stream_config(BUCKET_MAX_M[bucket], n, k, a_fmt)
        if found is not None:
            return found
    if GC.selected(a_fmt, b_fmt, bucket):
        return GC.default_config(n, k, b_fmt)
    if bucket.startswith("decode"):
        from ..blockscaled._kernel_decode import default_config as decode_config

        if n is not None and k is not None and b_fmt is not None:
            return decode_config_for(BUCKET_MAX_M[bucket], n, k, b_fmt, a_fmt, one_wave=arch in R.ONE_WAVE_ARCHS)
        return decode_config(BUCKET_MAX_M[bucket])
    from ..blockscaled._kernel_tiled import default_config as tiled_config

    tiled = tiled_config(int(min(BUCKET_MAX_M[bucket], 1 << 30)), n, b_fmt)
    if bucket == TWOPASS_BUCKET and twopass_selected(a_fmt, b_fmt):
        from ..blockscaled._twopass import TwoPassConfig

        return TwoPassConfig(tiled=tiled)  # from its min_m on; the tiled kernel below
    return tiled


TWOPASS_ENV = "B12X_GEMM_TWOPASS"  # "0": the tiled kernel in tiled128 too; "1" (or unset): two-pass
TWOPASS_BUCKET = "tiled128"


def twopass_selected(a_fmt: str | None, b_fmt: str | None) -> bool:
    """Whether the tiled128 bucket (M > 256) of this pair runs the two-pass path (`_twopass.py`:
    dequantize once, then a 16-bit cp.async GEMM) by default; B12X_GEMM_TWOPASS=0 keeps the tiled
    kernel (an A/B switch)."""
    from ..blockscaled._twopass import eligible

    return os.environ.get(TWOPASS_ENV, "1") != "0" and eligible(a_fmt, b_fmt)


def is_twopass(config) -> bool:
    return type(config).__name__ == "TwoPassConfig"


def prime_ms(config, m: int) -> tuple[int, ...]:
    """The live M values a plan's prime (or prewarm) runs a variant at so that each of its kernels has
    launched once before any capture: m, and for a two-pass config whose tiled side serves some M of
    the bucket (257 .. min_m - 1) one M there too."""
    if is_twopass(config) and m >= config.min_m > BUCKET_MAX_M["tiled64"] + 1:
        return (m, config.min_m - 1)
    return (m,)


def compile_fn(bucket: str, config=None):
    """The `@kernel` compile function of a bucket's kernel (of `config`'s kernel when it is an
    `Sm120Config`)."""
    if _is_sm120(config):
        from ..blockscaled._kernel_sm120 import compile_sm120

        return compile_sm120
    if is_fused(config):
        from ..blockscaled._kernel_decode_fused import compile_decode_fused

        return compile_decode_fused
    if _is_gemv(config):
        from ..blockscaled._kernel_gemv import compile_gemv

        return compile_gemv
    if is_stream(config):
        from ..blockscaled._kernel_stream import compile_stream

        return compile_stream
    if bucket.startswith("decode"):
        from ..blockscaled._kernel_decode import compile_decode

        return compile_decode
    from ..blockscaled._kernel_tiled import compile_tiled

    return compile_tiled


def why_not(a_fmt: str, b_fmt: str, out_dtype: str, bucket: str, config) -> str | None:
    if is_twopass(config):
        from ..blockscaled._twopass import why_not as twopass_reason

        if not bucket.startswith("tiled"):
            return f"a TwoPassConfig serves the tiled buckets (M > 64), got {bucket}"
        return twopass_reason(a_fmt, b_fmt, out_dtype, config)
    if _is_sm120(config):
        from ..blockscaled._kernel_sm120 import why_not as sm120_reason

        return sm120_reason(a_fmt, b_fmt, out_dtype, config)
    if is_fused(config):
        from ..blockscaled._kernel_decode_fused import why_not as fused_reason

        if not bucket.startswith("decode") or config.max_m < BUCKET_MAX_M[bucket]:
            return f"a FusedConfig serves a decode bucket with 8 ntiles >= the bucket's M, got {bucket}, {config}"
        return fused_reason(a_fmt, b_fmt, out_dtype, config)
    if _is_gemv(config):
        from ..blockscaled._gemv_config import why_not as gemv_reason

        return gemv_reason(a_fmt, b_fmt, out_dtype, config, bucket)
    if is_stream(config):
        from ..blockscaled._kernel_stream import why_not as stream_reason

        if bucket not in STREAM_BUCKETS or config.max_m < BUCKET_MAX_M[bucket]:
            return f"a StreamConfig serves decode8 / decode16 with 8 ntiles >= the bucket's M, got {bucket}, {config}"
        return stream_reason(a_fmt, b_fmt, out_dtype, config)
    if bucket.startswith("decode"):
        from ..blockscaled._kernel_decode import why_not as reason
    else:
        from ..blockscaled._kernel_tiled import why_not as reason
    return reason(a_fmt, b_fmt, out_dtype, config)


def kernel_key(a_fmt: str, b_fmt: str, out_dtype: str, bucket: str, arch: str, config=None) -> tuple:
    """(compile function, key arguments) of one single-kernel variant (`kernel_keys` for any)."""
    cfg = default_config(bucket, b_fmt=b_fmt, a_fmt=a_fmt, arch=arch) if config is None else config  # shape-blind
    if is_twopass(cfg):
        raise ValueError(f"{cfg} launches several kernels: use kernel_keys / make_launcher")
    return compile_fn(bucket, cfg), (a_fmt, b_fmt, out_dtype, cfg, arch)


def kernel_keys(a_fmt: str, b_fmt: str, out_dtype: str, bucket: str, arch: str, config) -> tuple:
    """((compile function, key arguments), ...) of every kernel a variant launches (what a plan
    compiles before `make_launcher` may run)."""
    if is_twopass(config):
        from ..blockscaled._twopass import kernel_keys as twopass_keys

        return twopass_keys(a_fmt, b_fmt, out_dtype, config, arch)
    return (kernel_key(a_fmt, b_fmt, out_dtype, bucket, arch, config),)


def make_launcher(a_fmt: str, b_fmt: str, out_dtype: str, bucket: str, arch: str, config):
    """The callable `fn(A, SFA, B, SFB, C, S0, S1, S2, alpha)` (or the fused form) of a variant,
    resolving (compiling, loading) its kernels."""
    if is_twopass(config):
        from ..blockscaled._twopass import TwoPassLauncher

        return TwoPassLauncher(a_fmt, b_fmt, out_dtype, config, arch)
    fn, key = kernel_key(a_fmt, b_fmt, out_dtype, bucket, arch, config)
    return fn(*key)


# ---- per-device constants (created once, outside any graph capture when prewarmed) ---------------
_CONSTS: dict = {}


def device_constants(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 [1] holding 1.0, uint8 [16] zeros) on `device`: the stand-ins for absent scales."""
    key = str(device)
    found = _CONSTS.get(key)
    if found is None:
        found = _CONSTS[key] = (
            torch.ones(1, dtype=torch.float32, device=device),
            torch.zeros(16, dtype=torch.uint8, device=device),
        )
    return found


def clear() -> None:
    _CONSTS.clear()
    cache = sys.modules.get(__name__.rsplit(".", 2)[0] + ".blockscaled._stream_cache")
    if cache is not None:
        cache.clear()
    gemv = sys.modules.get(__name__.rsplit(".", 2)[0] + ".blockscaled._kernel_gemv")
    if gemv is not None:  # split-K workspaces of the Triton GEMV (never imported just to clear)
        gemv.WORKSPACES.clear()


def _scale_arg(fmt: str, scales, ones, dummy):
    spec = FORMAT[fmt]
    if spec.swizzled:
        return scales.view(torch.uint8).reshape(-1)
    if spec.scale == "fp32_block":
        return scales.reshape(-1)
    if spec.scale == "fp32_scalar":
        return ones  # the per-tensor scale travels as S1 / S2
    return dummy


def launch_args(a_fmt, a_values, a_scales, a_alpha, b_fmt, b_values, b_scales, b_alpha, alpha, out):
    """The kernels' arguments: ((A, SFA, B, SFB, C, S0, S1, S2), alpha as a float).

    alpha: a Python number (baked into the launch) or a 1-element fp32 device tensor (read by the
    kernel, so a captured graph follows its value). a_alpha / b_alpha: an operand Weight's fp32 [1]
    alpha, or None.
    """
    ones, dummy = device_constants(out.device)
    a = a_values if FORMAT[a_fmt].family == "raw16" else a_values.view(torch.uint8)
    b = b_values.view(torch.uint8)
    if isinstance(alpha, torch.Tensor):
        s0, alpha_f = alpha.reshape(1), 1.0
    else:
        s0, alpha_f = ones, float(alpha)
    if a_fmt == "fp8_tensor":
        s1 = a_scales.reshape(1)
    else:
        s1 = ones if a_alpha is None else a_alpha.reshape(1)
    if b_fmt == "fp8_tensor":  # a tensor-FP8 Weight's alpha is always 1: its scale is `scales`
        s2 = b_scales.reshape(1)
    else:
        s2 = ones if b_alpha is None else b_alpha.reshape(1)
    sfa = _scale_arg(a_fmt, a_scales, ones, dummy)
    sfb = _scale_arg(b_fmt, b_scales, ones, dummy)
    return (a, sfa, b, sfb, out, s0, s1, s2), alpha_f
