"""gemm.blockscaled entry points: mm and its recipe shorthands, w4a16, plan, prewarm (kernels elsewhere).

    out = b12x.gemm.blockscaled.mm((a, sfa), (b, sfb), ab_dtype="float4_e2m1fn",
                                   sf_dtype="float8_e4m3fn", sf_vec_size=16, alpha=alpha)
    w = b12x.gemm.blockscaled.pack_weight(weight, weight_scale, global_scale=ws2,
                                          global_scale_kind="dequant")    # once, at load time
    y = b12x.gemm.blockscaled.mm(x_bf16, w)                              # weight-only (W4A16 / W8A16)
    b12x.gemm.blockscaled.prewarm(w, token_counts=[1, 8, 16, 64, 4096]); b12x.freeze_kernel_resolution("serving")

C = alpha * deq(A) @ deq(B)^T in fp32 (reference.py), one rounding to bf16/fp16/fp32. CPU tensors run
the reference. On CUDA the live M picks a bucket (`_shared/launch.py`): M <= 64 the decode kernel,
larger M the tiled kernel; only the bucket is a compile key, so a new M inside a warmed bucket never
compiles. Every launch reads scalars on the device (alpha may be a tensor): CUDA-graph safe once the
variant is resolved (prewarm or a prepared plan).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from ..._lib.arch import target_arch
from ..._lib.quant import UE8M0_ONE_BYTE, swizzled_size
from ...preparation.plan import Plan, PlanState, rounds
from .._shared import launch as L
from .._shared.formats import FORMAT, FORMATS, OUT_DTYPES, check_shape, dtype_key, pair_ok
from .._shared.operands import TORCH_OUT, Problem, check_device_operands, check_layout, describe, resolve
from .._shared.weight import Weight, pack_weight
from . import _autotune as AT
from . import _epilogue as EP
from . import reference
from ._epilogue import RopeAppend, RopeLayout

OP = "gemm.blockscaled"
MAX_M = 1 << 30

__all__ = [
    "GemmQuery",
    "RopeAppend",
    "RopeLayout",
    "Weight",
    "mm",
    "mm_block_fp8",
    "mm_mxfp4",
    "mm_nvfp4",
    "pack_weight",
    "plan",
    "prewarm",
    "w4a16",
]


# ---- plans --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GemmQuery:
    """Static facts of a GEMM: A and B formats (formats.py), N, K, output dtype, the capacity of M and
    the live M values to prepare (their buckets; empty: every bucket up to max_m); epilogue and pdl:
    the fused decode kernel's options (`_epilogue` docstring; n stays the weight's rows, 2I for
    "silu_mul"), "none" / "off" for the plain kernels; norm: A RMS-normalized in that kernel (mm's
    norm_weight); rope: the RopeLayout(q_heads, kv_heads, head_dim, page_size) of epilogue
    "rope_append" (n = (q_heads + 2 kv_heads) head_dim), None otherwise.

    Choosing pdl (decode buckets; H200, session 25, docs/performance.md): "wait" makes each launch a
    programmatic dependent of the kernel before it in the stream, so its CTAs become resident while
    that kernel drains (W4A16 M = 1: 0.4-0.6 µs a call, e.g. 4096 x 4096 5.42 -> 5.00); "prefetch" also
    puts the CTA's weight lines in L2 before it waits (whole rows up to 14 MB of weight, the first K step
    above: `launch.prefetch_span`), which gains more where the weight is small and the K loop short
    (7168 x 2048: 4.57 µs) and less elsewhere (4096 x 4096 5.48, 28672 x 4096 25.13 against "wait"'s
    24.56). Under CUDA graph capture either becomes a programmatic edge. Where the plain heuristic has warp
    groups (M 9..16 with N >= 16384, FP4 weights and 16-bit activations), "wait" keeps them and waits inside the
    plain kernel instead (`launch.PLAIN_PDL_GROUPS`, session 39: W4A16 M = 16 28672 x 4096 32.07 µs against the
    fused kernel's 36.56; `DecodeConfig.pdl_wait` saved 0.26-0.43 µs a call there)."""

    a_format: str
    b_format: str
    n: int
    k: int
    out_dtype: str = "bfloat16"
    max_m: int = MAX_M
    m_values: tuple[int, ...] = ()
    epilogue: str = "none"
    pdl: str = "off"
    norm: bool = False
    rope: RopeLayout | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_dtype", dtype_key(self.out_dtype))
        object.__setattr__(self, "m_values", tuple(int(m) for m in self.m_values))
        if self.a_format not in FORMATS or self.b_format not in FORMATS or not pair_ok(self.a_format, self.b_format):
            raise ValueError(f"query formats {self.a_format} x {self.b_format} are not a supported pair")
        if self.out_dtype not in OUT_DTYPES:
            raise ValueError(f"query.out_dtype must be one of {OUT_DTYPES}, got {self.out_dtype!r}")
        if not isinstance(self.max_m, int) or self.max_m < 1:
            raise ValueError(f"query.max_m must be an int >= 1, got {self.max_m!r}")
        if any(m < 1 or m > self.max_m for m in self.m_values):
            raise ValueError(f"query.m_values must lie in [1, max_m={self.max_m}], got {self.m_values}")
        check_shape(OP, self.n, self.k)
        EP.check_query(self)

    @property
    def buckets(self) -> tuple[str, ...]:
        if self.m_values:
            wanted = {L.bucket_for(m) for m in self.m_values}
            return tuple(b for b in L.BUCKETS if b in wanted)
        out = []
        for b in L.BUCKETS:
            out.append(b)
            if self.max_m <= L.BUCKET_MAX_M[b]:
                break
        return tuple(out)


class GemmPlan(Plan):
    """caps = GemmQuery; selection = ((bucket, config), ...); override = {bucket: config} as pairs."""

    def heuristic(self, arch):
        if arch is None:
            return None
        chosen = dict(self.override or ())
        q = self.caps
        if EP.fused(q.epilogue, q.pdl, q.norm):
            fused = lambda b: L.fused_config(  # noqa: E731
                b, q.n, q.k, q.b_format, q.a_format, q.epilogue, q.pdl, norm=q.norm, rope=q.rope, arch=arch
            )
            if q.epilogue == "none" and not q.norm and q.rope is None:  # pdl alone (`L.pdl_config`)
                fused = lambda b: L.pdl_config(b, q.n, q.k, q.b_format, q.a_format, q.pdl, arch)  # noqa: E731
            return tuple((b, chosen.get(b) or fused(b)) for b in q.buckets)
        return tuple(
            (b, chosen.get(b, L.default_config(b, q.n, q.k, q.b_format, a_fmt=q.a_format, arch=arch)))
            for b in q.buckets
        )

    def candidate_parts(self, arch) -> tuple | None:
        """For PreparationSession(autotune=True): per bucket, the heuristic's config first, then its family's
        alternatives (`_autotune`); an override's plan and the reference backend keep their own (None)."""
        if arch is None or self.override is not None:
            return None
        return AT.parts(self.caps, self.heuristic(arch))

    def candidates(self, arch) -> tuple:
        """The selections autotune times (`rounds` of `candidate_parts`), the heuristic's first."""
        parts = self.candidate_parts(arch)
        return (self.heuristic(arch),) if parts is None else rounds(parts)

    def measure_parts(self, state: PlanState) -> tuple[float, ...]:
        return AT.measure_parts(self.caps, state, synthetic_call)

    def kernels(self, config, arch: str) -> tuple:
        q = self.caps
        return tuple(
            key for b, cfg in config for key in L.kernel_keys(q.a_format, q.b_format, q.out_dtype, b, arch, cfg)
        )

    def prime(self, state: PlanState) -> None:
        if state.arch is None:
            return
        q = self.caps
        launchers = {}
        for bucket, cfg in state.selection:
            launchers[bucket] = (L.make_launcher(q.a_format, q.b_format, q.out_dtype, bucket, state.arch, cfg), cfg)
            m = int(min(L.BUCKET_MAX_M[bucket], q.max_m))
            for mp in L.prime_ms(cfg, min(m, 4096)):  # every kernel of the variant runs once
                _run_synthetic(
                    q.a_format, q.b_format, q.n, q.k, mp, q.out_dtype, state.device, launchers[bucket][0], cfg
                )
        state.extra["launchers"] = launchers
        torch.cuda.synchronize(state.device)  # a launch error surfaces at prepare time


def plan(query, *, invocation=None, override=None) -> GemmPlan:
    """A pure, hashable plan. query: a GemmQuery, or a packed Weight (its recipe on both sides).

    invocation: None, or the expected live M (prepares only its bucket when query.m_values is empty).
    override: {bucket: DecodeConfig | TiledConfig} replacing the heuristic for those buckets; a
    `_gemv_config.GemvConfig` for decode8 / decode16 runs the Triton GEMV (weight-only NVFP4 /
    MXFP4 / MXFP8), as B12X_GEMM_DECODE_KERNEL=triton does for every such plan.
    """
    if isinstance(query, Weight):
        query = GemmQuery(query.recipe, query.recipe, query.n, query.k)
    if not isinstance(query, GemmQuery):
        raise ValueError(f"query must be a GemmQuery or a packed Weight, got {type(query).__name__}")
    if invocation is not None:
        if isinstance(invocation, bool) or not isinstance(invocation, int) or not 1 <= invocation <= query.max_m:
            raise ValueError(f"invocation must be None or the expected M in [1, {query.max_m}], got {invocation!r}")
        if not query.m_values:
            query = GemmQuery(**{**query.__dict__, "m_values": (invocation,)})
    pairs = ()
    if override is not None:
        if not isinstance(override, dict):
            raise ValueError(f"override must be a dict {{bucket: config}}, got {type(override).__name__}")
        for b, cfg in override.items():
            if b not in L.BUCKETS:
                raise ValueError(f"override bucket must be one of {L.BUCKETS}, got {b!r}")
            reason = L.why_not(query.a_format, query.b_format, query.out_dtype, b, cfg)
            if reason is None and L.is_stream(cfg):
                from ._kernel_stream import shape_reason

                reason = shape_reason(query.n, query.k, cfg)
            if reason is not None:
                raise ValueError(f"override for {b}: {reason}")
        pairs = tuple(sorted(override.items()))
    return GemmPlan(op=OP, caps=query, invocation=invocation, override=pairs or None)


# ---- one launch ---------------------------------------------------------------------------------
_ARCH: dict = {}


def _arch(device: torch.device) -> str:
    key = str(device)
    if key not in _ARCH:
        _ARCH[key] = target_arch(device)
    return _ARCH[key]


def clear_caches() -> None:
    _ARCH.clear()
    L.clear()


def _device_b(config, p_fmt, b, sb, n, k):
    """The weight operand a variant reads: the stream layout (made once, `_stream_cache`) for a
    StreamConfig, else the values and scales as they are."""
    if not L.is_stream(config):
        return b, sb
    from ._stream_cache import stream_weight

    return stream_weight(b, sb, n, k, config.kc, config.order, config.major), sb


def _launcher(p: Problem, device: torch.device, plan_obj, expected_m, epilogue="none", norm=False, rope=None):
    """(compiled launcher, its config) for this problem; rope: the RopeLayout of "rope_append"."""
    if plan_obj is not None and plan_obj.caps.epilogue != epilogue:
        raise ValueError(f"epilogue={epilogue!r} does not match the plan's query.epilogue={plan_obj.caps.epilogue!r}")
    if plan_obj is not None and plan_obj.caps.rope != rope:
        raise ValueError(f"the rope tensors give {rope}, the plan's query.rope is {plan_obj.caps.rope}")
    if plan_obj is not None and plan_obj.caps.norm != norm:
        raise ValueError(f"norm_weight (given: {norm}) must match the plan's query.norm={plan_obj.caps.norm}")
    if plan_obj is not None:  # (mm checked its type and that it is prepared)
        state = plan_obj.state
        q = plan_obj.caps
        got = (p.a.fmt, p.b.fmt, p.n, p.k, p.out_dtype)
        if got != (q.a_format, q.b_format, q.n, q.k, q.out_dtype):
            raise ValueError(f"the operands {got} do not match the plan's query {q}")
        if p.m > q.max_m:
            raise ValueError(f"M = {p.m} is above the plan's capacity max_m={q.max_m}")
        if state.device != device:
            raise ValueError(f"the plan was prepared on {state.device}, the operands are on {device}")
        launchers = state.extra["launchers"]
        start = L.BUCKETS.index(L.bucket_for(p.m))
        for b in L.BUCKETS[start:]:  # a larger prepared bucket serves a smaller M without compiling
            if b in launchers:
                return launchers[b]
        raise ValueError(f"M = {p.m} needs bucket {L.bucket_for(p.m)}; the plan prepared {sorted(launchers)}")
    bucket = L.bucket_for(max(p.m, int(expected_m or 0)))
    fused = EP.fused(epilogue, "off", norm)
    arch = _arch(device)
    if fused:
        cfg = L.fused_config(bucket, p.n, p.k, p.b.fmt, p.a.fmt, epilogue, norm=norm, rope=rope, arch=arch)
    else:
        cfg = L.default_config(bucket, b_fmt=p.b.fmt, a_fmt=p.a.fmt, arch=arch)  # shape-blind, as a key
    return L.make_launcher(p.a.fmt, p.b.fmt, p.out_dtype, bucket, arch, cfg), cfg


def _check_alpha(alpha, device):
    if alpha is None:
        return 1.0
    if isinstance(alpha, torch.Tensor):
        if alpha.dtype != torch.float32 or alpha.numel() != 1 or alpha.device != device:
            raise ValueError(
                f"alpha must be a float or a float32 tensor of 1 element on {device}, got {describe(alpha)}"
            )
        return alpha
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(float(alpha)):
        raise ValueError(f"alpha must be a finite float or a 1-element float32 tensor, got {alpha!r}")
    return float(alpha)


def _execute(
    p: Problem, out: torch.Tensor, alpha, plan_obj, expected_m, epilogue="none", residual=None, norm=None, rope=None
):
    """norm: None, or (norm_weight, eps); rope: None, or (RopeAppend, RopeLayout) for "rope_append",
    whose out is q [M, Hq, D] (the kernel's C is its [M, Hq D] view)."""
    tensors, layout = rope if rope is not None else (None, None)
    device = out.device
    if device.type != "cuda":
        check_layout(p)
        for li in range(max(p.batch, 1)):
            a, sa = p.slice(p.a, li)
            b, sb = p.slice(p.b, li)
            scale = alpha if p.a.alpha is None else alpha * p.a.alpha.float().reshape(())
            scale = scale if p.b.alpha is None else scale * p.b.alpha.float().reshape(())
            if norm is not None:
                a = reference.rms_norm(a, norm[0], norm[1])
            if epilogue == "none":
                c = reference.mm(p.a.fmt, a, sa, p.b.fmt, b, sb, scale, p.out_dtype)
            elif epilogue == "rope_append":
                reference.rope_append(reference.mm(p.a.fmt, a, sa, p.b.fmt, b, sb, scale, "float32"), out, tensors)
                continue
            else:
                c = reference.apply_epilogue(
                    reference.mm(p.a.fmt, a, sa, p.b.fmt, b, sb, scale, "float32"), epilogue, residual
                )
            (out if p.batch == 0 else out[..., li]).copy_(c)
        return
    if tensors is not None:
        out = out.view(p.m, -1)  # q [M, Hq, D] as the kernel's C [M, Hq D]
    check_device_operands(p, out)  # (device, layout and alignment: out's shape was checked by mm)
    launch, config = _launcher(p, device, plan_obj, expected_m, epilogue, norm is not None, layout)
    if p.batch and L.is_stream(config):
        raise ValueError(f"the stream decode kernel ({config}) takes 2-D weights [N, K], got a batch of {p.batch}")
    for li in range(max(p.batch, 1)):
        a, sa = p.slice(p.a, li)
        b, sb = _device_b(config, p.b.fmt, *p.slice(p.b, li), p.n, p.k)
        c = out if p.batch == 0 else out[..., li]
        args, alpha_f = L.launch_args(p.a.fmt, a, sa, p.a.alpha, p.b.fmt, b, sb, p.b.alpha, alpha, c)
        if L.is_fused(config):
            launch(*L.fused_args(args, alpha_f, c, residual, *(norm or (None, 1e-6)), rope=tensors))
        else:
            launch(*args, alpha_f)


def _allocate_out(p: Problem, device, epilogue="none", rope=None) -> torch.Tensor:
    """rope: the RopeLayout of "rope_append" (out is q [M, Hq, D])."""
    dt = TORCH_OUT[p.out_dtype]
    if rope is not None:
        return torch.empty(p.m, rope.q_heads, rope.head_dim, dtype=dt, device=device)
    if p.batch == 0:
        return torch.empty(p.m, EP.out_cols(p.n, epilogue), dtype=dt, device=device)
    # [M, N, L] whose [:, :, l] slices are contiguous (an (L, M, N) buffer, permuted)
    return torch.empty(p.batch, p.m, p.n, dtype=dt, device=device).permute(1, 2, 0)


def mm(
    lhs,
    rhs,
    out=None,
    *,
    plan=None,
    expected_m=None,
    ab_dtype=None,
    sf_dtype=None,
    c_dtype=None,
    sf_vec_size=None,
    alpha=None,
    stream=None,
    epilogue=None,
    residual=None,
    norm_weight=None,
    norm_eps=1e-6,
    rope=None,
):
    """C = alpha * deq(lhs) @ deq(rhs)^T, or a fused epilogue of it.

    lhs: (values, scales) [M, K(bytes)] or [M, K(bytes), L], or bf16/fp16 activations [M, K]
    (weight-only product). rhs: (values, scales) [N, K(bytes)(, L)] or a packed `Weight`.
    Scales: swizzled 128x4 storage (NVFP4 E4M3 per 16, MX UE8M0 per 32), fp32 [M, K/128] / [N/128,
    K/128] (block-FP8) or an fp32 scalar (tensor-FP8). The recipe comes from (ab_dtype, sf_dtype,
    sf_vec_size), a Weight, or the dtypes. c_dtype: bf16 (default) / fp16 / fp32, or out's dtype.
    alpha: float or 1-element fp32 tensor on the device; None is 1 (a packed Weight's own alpha, e.g. NVFP4's
    1 / global scale, applies either way). expected_m: the M a variant is picked for
    when it is larger than the live M (one variant for a range of M). stream: run on this stream.
    epilogue: None / "none", "silu_mul" (rhs a [2I, K] gate_up weight, gate rows first: C = silu(gate)
    * up, [M, I]) or "residual" (C = product + residual, residual [M, N] in C's dtype), each in fp32
    before the one rounding; 2-D operands, M <= 64 on CUDA (the fused decode kernel; `_epilogue`).
    A plan's query.epilogue must match. norm_weight (16-bit lhs, [K] in its dtype): lhs replaced by
    lhs * rsqrt(mean(lhs^2) + norm_eps) * norm_weight, in the same kernel (a plan needs query.norm).
    epilogue="rope_append" (rhs a qkv weight [(Hq + 2 Hkv) D, K]; rope=RopeAppend(cos, sin, k_cache,
    v_cache, slot_page, slot_off)): out = the q heads rotated ([M, Hq, D]; [M, Hq D] accepted), the
    k heads rotated and the v heads written to each token's cache row (`_epilogue`; a plan needs
    query.rope = the RopeLayout the shapes give).
    Returns out ([M, N] or [M, I] or [M, Hq, D], or [M, N, L] for 3-D operands).
    """
    epilogue = EP.normalize(epilogue)
    if plan is not None:  # on every device, eager or traced: a plan must be this op's and prepared
        if not isinstance(plan, GemmPlan):
            raise ValueError(f"plan must come from b12x.gemm.blockscaled.plan(query), got {type(plan).__name__}")
        plan.state  # noqa: B018 - raises PlanNotPreparedError naming PreparationSession
    own_out = epilogue in ("silu_mul", "rope_append")  # out is not [M, N]: checked here, not by resolve
    if own_out and out is not None and c_dtype is None:
        c_dtype = out.dtype
    p = resolve(lhs, rhs, None if own_out else out, ab_dtype=ab_dtype, sf_dtype=sf_dtype, c_dtype=c_dtype,
                sf_vec_size=sf_vec_size)  # fmt: skip
    device = p.b.values.device
    alpha = _check_alpha(alpha, device)
    EP.check_call(p, epilogue, residual, p.out_dtype, device)
    eps = EP.check_norm(p, norm_weight, norm_eps, device)
    norm = None if norm_weight is None else (norm_weight, eps)
    if epilogue == "silu_mul":
        EP.check_out(out, p.m, p.n // 2, p.out_dtype)
    rope_args = None
    if epilogue == "rope_append":
        rope_args = (rope, EP.check_rope(p, rope, out, p.out_dtype, device))
    elif rope is not None:
        raise ValueError(f"rope is only read with epilogue='rope_append', got epilogue={epilogue!r}")
    if out is None:
        out = _allocate_out(p, device, epilogue, None if rope_args is None else rope_args[1])
    if p.m == 0:
        return out
    if torch.compiler.is_compiling():  # one opaque node (`_ops.py`): torch.compile cannot trace a launch
        if stream is not None:
            raise ValueError("stream= is not supported under torch.compile: the op runs on the current stream")
        _ops.call(lhs, rhs, out, plan=plan, expected_m=expected_m, ab_dtype=ab_dtype, sf_dtype=sf_dtype,
                  c_dtype=p.out_dtype, sf_vec_size=sf_vec_size, alpha=alpha, epilogue=epilogue, residual=residual,
                  norm_weight=norm_weight, norm_eps=norm_eps, rope=rope)  # fmt: skip
        return out
    if stream is not None and device.type == "cuda":
        with torch.cuda.stream(stream):
            _execute(p, out, alpha, plan, expected_m, epilogue, residual, norm, rope_args)
    else:
        _execute(p, out, alpha, plan, expected_m, epilogue, residual, norm, rope_args)
    return out


def mm_nvfp4(
    lhs_values,
    lhs_scale_storage,
    rhs_values,
    rhs_scale_storage,
    alpha,
    *,
    plan=None,
    out_dtype=torch.bfloat16,
    stream=None,
):
    """NVFP4 x NVFP4 (E2M1 values two per byte, E4M3 scales per 16 in swizzled storage) -> [M, N]."""
    return mm(
        (lhs_values, lhs_scale_storage),
        (rhs_values, rhs_scale_storage),
        plan=plan,
        ab_dtype="float4_e2m1fn",
        sf_dtype="float8_e4m3fn",
        sf_vec_size=16,
        c_dtype=out_dtype,
        alpha=alpha,
        stream=stream,
    )


def mm_mxfp4(
    lhs_values,
    lhs_scale_storage,
    rhs_values,
    rhs_scale_storage,
    *,
    alpha=1.0,
    plan=None,
    out_dtype=torch.bfloat16,
    stream=None,
):
    """MXFP4 x MXFP4 (E2M1 values, UE8M0 scales per 32 in swizzled storage) -> [M, N]. alpha (keyword-only, beyond
    the issue's signature, whose positional parameters are the four operands): a scale on the product."""
    return mm(
        (lhs_values, lhs_scale_storage),
        (rhs_values, rhs_scale_storage),
        plan=plan,
        ab_dtype="float4_e2m1fn",
        sf_dtype="float8_e8m0fnu",
        sf_vec_size=32,
        c_dtype=out_dtype,
        alpha=alpha,
        stream=stream,
    )


def mm_block_fp8(lhs_values, lhs_scale, rhs_values, rhs_scale, *, plan=None, out_dtype=torch.bfloat16, stream=None):
    """Block-FP8: E4M3 A [M, K] with fp32 per-token scales [M, K/128], E4M3 B [N, K] with fp32 128x128
    block scales [ceil(N/128), K/128] -> [M, N]."""
    return mm(
        (lhs_values, lhs_scale),
        (rhs_values, rhs_scale),
        plan=plan,
        ab_dtype="float8_e4m3fn",
        sf_dtype="float32",
        sf_vec_size=128,
        c_dtype=out_dtype,
        stream=stream,
    )


def w4a16(
    source,
    weight,
    block_scale=None,
    global_scale=None,
    *,
    out=None,
    workspace=None,
    global_scale_kind="multiplier",
    stream=None,
    plan=None,
):
    """Weight-only GEMM: source bf16/fp16 [M, K] times FP4 (W4A16) or FP8 (W8A16) weights -> [M, N] in
    source's dtype (or out's).

    weight: a packed `Weight` (block_scale and global_scale None), or checkpoint tensors for
    `pack_weight(weight, block_scale, global_scale=..., global_scale_kind=...)`, which then runs on
    every call (allocates; pack once for the capture-safe path). workspace: accepted for interface
    compatibility and unused (the kernels need none).
    """
    if isinstance(weight, Weight):
        if block_scale is not None or global_scale is not None:
            raise ValueError("block_scale and global_scale must be None when weight is a packed Weight")
        packed = weight
    else:
        packed = pack_weight(weight, block_scale, global_scale=global_scale, global_scale_kind=global_scale_kind)
    c_dtype = None if out is not None else source.dtype
    return mm(source, packed, out, plan=plan, c_dtype=c_dtype, stream=stream)


# ---- warming ------------------------------------------------------------------------------------
def synthetic_lhs(a_fmt: str, m: int, k: int, device):
    """A valid (all-zero) activation operand of m rows: what prewarm and plan priming launch with."""
    if FORMAT[a_fmt].family == "raw16":
        return torch.zeros(m, k, dtype=TORCH_OUT[a_fmt], device=device)
    spec = FORMAT[a_fmt]
    values = torch.zeros(m, spec.row_bytes(k), dtype=torch.uint8, device=device)
    if spec.family == "fp8":
        values = values.view(torch.float8_e4m3fn)
    if spec.swizzled:
        pad = 0 if a_fmt == "nvfp4" else UE8M0_ONE_BYTE
        scales = torch.full((swizzled_size(m, k // spec.sf_vec),), pad, dtype=torch.uint8, device=device)
        if a_fmt == "nvfp4":
            scales = scales.view(torch.float8_e4m3fn)
    elif spec.scale == "fp32_block":
        scales = torch.ones(m, k // 128, dtype=torch.float32, device=device)
    else:
        scales = torch.ones(1, dtype=torch.float32, device=device)
    return (values, scales)


def _synthetic_rhs(b_fmt: str, n: int, k: int, device) -> Weight:
    """A valid all-zero weight built in place (no quantization pass over N x K on the host)."""
    values, scales = synthetic_lhs(b_fmt, n, k, device)
    if b_fmt == "fp8_block":
        scales = torch.ones(-(-n // 128), k // 128, dtype=torch.float32, device=device)
    return Weight(b_fmt, values, scales, torch.ones(1, dtype=torch.float32, device=device), n, k)


def _run_synthetic(a_fmt, b_fmt, n, k, m, out_dtype, device, launcher, config, weight=None) -> None:
    synthetic_call(a_fmt, b_fmt, n, k, m, out_dtype, device, launcher, config, weight)()


def synthetic_call(a_fmt, b_fmt, n, k, m, out_dtype, device, launcher, config, weight=None):
    """A callable that launches `launcher` (a variant of `config`) once on synthetic operands of M = m, made here
    once (prime runs it, autotune times it)."""
    rhs = weight if weight is not None else _synthetic_rhs(b_fmt, n, k, device)
    p = resolve(synthetic_lhs(a_fmt, m, k, device), rhs, None, c_dtype=out_dtype)
    epilogue = config.epilogue if L.is_fused(config) else "none"
    rope = config.rope if epilogue == "rope_append" else None
    out = _allocate_out(p, device, epilogue, rope)
    if rope is not None:
        out = out.view(m, -1)
    check_device_operands(p, out)  # (device, layout and alignment: out's shape was checked by mm)
    b, sb = _device_b(config, p.b.fmt, p.b.values, p.b.scales, n, k)
    args, alpha_f = L.launch_args(p.a.fmt, p.a.values, p.a.scales, None, p.b.fmt, b, sb, p.b.alpha, 1.0, out)
    if L.is_fused(config):  # R: zeros for the residual epilogue, else C itself; G: A flattened
        res = torch.zeros_like(out) if epilogue == "residual" else None
        full = L.fused_args(args, alpha_f, out, res, rope=None if rope is None else _synthetic_rope(rope, m, out))
    else:
        full = (*args, alpha_f)
    return lambda: launcher(*full)


def _synthetic_rope(layout: RopeLayout, m: int, out: torch.Tensor) -> RopeAppend:
    """Zero tables and a one-page cache (every token writes page 0, row 0) for priming a rope plan."""
    kw = {"device": out.device}
    cache = torch.zeros(1, layout.page_size, layout.kv_heads, layout.head_dim, dtype=out.dtype, **kw)
    table = torch.zeros(m, layout.head_dim // 2, dtype=torch.float32, **kw)
    slots = torch.zeros(m, dtype=torch.int64, **kw)
    return RopeAppend(table, table, cache, torch.zeros_like(cache), slots, slots)


def prewarm(weight: Weight, token_counts, *, out_dtype=torch.bfloat16, stream=None, activation=None) -> None:
    """Compile (or load) and run once every variant mm(lhs, weight) needs for the listed M values, so
    a later `freeze_kernel_resolution` holds for them (and for every M in the same buckets).

    activation: which lhs to warm for: None warms both quantized activations in the weight's recipe
    and bf16 activations (weight-only); a recipe name or torch.bfloat16 / float16 warms just that.
    A no-op on CPU (the reference compiles nothing).
    """
    if not isinstance(weight, Weight):
        raise ValueError(f"weight must be a packed Weight (pack_weight), got {type(weight).__name__}")
    counts = sorted({int(m) for m in token_counts})
    if not counts or counts[0] < 1:
        raise ValueError(f"token_counts must be positive ints, got {list(token_counts)}")
    a_fmts = (weight.recipe, "bfloat16") if activation is None else (dtype_key(activation),)
    for a_fmt in a_fmts:
        if a_fmt not in FORMATS or not pair_ok(a_fmt, weight.recipe):
            raise ValueError(f"activation {a_fmt} does not pair with a {weight.recipe} weight")
    device = weight.device
    if device.type != "cuda":
        return
    out_name = dtype_key(out_dtype)
    check_shape(OP, weight.n, weight.k)
    ctx = torch.cuda.stream(stream) if stream is not None else _nullcontext()
    with ctx:
        L.device_constants(device)
        for a_fmt in a_fmts:
            for bucket in dict.fromkeys(L.bucket_for(m) for m in counts):
                arch = _arch(device)
                cfg = L.default_config(bucket, b_fmt=weight.recipe, a_fmt=a_fmt, arch=arch)  # as mm's
                launch = L.make_launcher(a_fmt, weight.recipe, out_name, bucket, arch, cfg)
                m = max(c for c in counts if L.bucket_for(c) == bucket)
                for mp in L.prime_ms(cfg, m):
                    _run_synthetic(a_fmt, weight.recipe, weight.n, weight.k, mp, out_name, device, launch, cfg, weight)
        torch.cuda.synchronize(device)


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


from . import _ops  # noqa: E402 - registers torch.ops.b12x.gemm_mm_ (it imports this module lazily)
