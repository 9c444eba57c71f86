"""Benchmark b12x.gemm (blockscaled decode/tiled kernels and the linear ops) against torch's GEMMs.

    python -m benchmarks.experimental.b12x.bench_gemm [--quick] [--m 1 4 16 32 64 2048 4096]
        [--shapes 4096x4096 28672x4096] [--recipes w4a16_nvfp4 mxfp8 ...] [--decode-kernel cute|triton|stream]
        [--sweep [--sweep-subset prefetch|stream|fp4|probe|probe-step|gemv|layout|layout-probe|twopass|fp8mma|pdl|ksplit]]
        [--timer events|graph [--cold-weights]] [--json PATH]

Problem: y[M, N] = x[M, K] W[N, K]^T, bf16 output. Shapes (N x K) from Llama-class layers:
4096x4096 (attention out), 28672x4096 (gate/up), 4096x14336 (down), 7168x2048 (DeepSeek-style).
Bytes (TB/s, % of the copy ceiling): what OUR op must move once: weight values + their scales,
activations (+ scales), output; peers' own bytes are in their row notes. FLOPs: 2 M N K.
Ours (a packed Weight and a prepared plan for the case's M, i.e. the shape-aware kernel config the
demo block runs; activations pre-quantized unless the name says inline):
  w4a16_nvfp4 / w4a16_mxfp4      bf16 x FP4 weight, weight-only (mm(x, Weight))
  w8a16_mxfp8 / w8a16_fp8_block  bf16 x FP8 weight, weight-only
  nvfp4 / mxfp4 / mxfp8 / fp8_block / fp8_tensor   both operands quantized (blockscaled.mm)
  mxfp8_linear                   activation quantized inline (quantization.mxfp8) + MXFP8 GEMM
Peers, timed once per (M, N, K) and listed in every case of that problem: torch.mm bf16 (cuBLAS),
torch._scaled_mm e4m3 tensorwise and rowwise (cuBLASLt), torch._weight_int4pack_mm (W4A16 tinygemm,
group 128; its int4 weight from torch._convert_weight_to_int4pack). Every case checks ours against
the fp32 reference first (max abs error in the note). --sweep times every candidate kernel config
per case (prepared plans with overrides) and reports the fastest: the tuning input for the heuristics.
--decode-kernel triton runs the weight-only NVFP4 / MXFP4 / MXFP8 cases at M <= 16 on the Triton GEMV
(its heuristic config, `blockscaled/_gemv_config.py`) instead of the CuTe decode kernel;
--decode-kernel stream runs the W4A16 NVFP4 cases at M <= 16 on the stream-layout decode kernel
(`blockscaled/_kernel_stream.py`, weight repacked once outside the timed region; K % 512 shapes);
--sweep-subset layout times the CuTe decode heuristic config and the stream kernel's candidates,
--sweep-subset layout-probe the same baseline, the stream default and its loads-only probe, and both
for register loads (`_kernel_stream.probe_variants`; probes compute garbage);
--sweep-subset gemv times the CuTe heuristic config and the Triton GEMV candidates of each such case;
--sweep-subset stream the decode heuristic config and its streaming variants (cache hints, chunk
groups, warp groups along N: `_decode_sweeps.stream_variants`); --sweep-subset ksplit the heuristic
config, then it and its K splits over a 2- or 4-CTA cluster (`DecodeConfig.ksplit`: the activation traffic / C)
launched plainly and as programmatic dependents (`DecodeConfig.pdl_wait`; `_decode_sweeps.ksplit_sweep`), and
where the heuristic has warp groups the fused kernel under pdl "wait" with one group and with the heuristic's;
--sweep-subset fp4 the heuristic config and the same with its FP4 weights placed by the other methods
(`DecodeConfig.fp4`: shift, left, mul; the same bits; `_decode_sweeps.fp4_variants`);
--sweep-subset probe the heuristic
config, its loads-only and dequant-without-MMA timing probes (garbage outputs, never checked:
`DecodeConfig.probe`) and the same with the L1 hints, to split the time into access pattern,
dequant and MMA; --sweep-subset probe-step the heuristic config and its loads-only probe, then each of
more weight bytes per warp step (kgroup 2 / 4, unroll 4, twice the tiles) with its loads-only probe:
whether the loads are bound by the warp's steps rather than its bytes (`probe_step_variants`).
--sweep-subset twopass times, at M > 256, the tiled kernel's shape-aware config against the two-pass
path (`blockscaled/_twopass.py`: operands dequantized once, then a 16-bit cp.async GEMM) with each of
its GEMM tilings (the plain --sweep adds those to the tiled candidates). B12X_GEMM_TWOPASS=0 makes the
tiled kernel the default again (an A/B of whole runs).
--sweep-subset fp8mma times, at M > 64 and for tensor-, block-FP8 and MXFP8 pairs, the default config
against the tiled kernel's `fp8_mma` variants (raw E4M3 tiles, mma.sync m16n8k32, block scales on the
partial sums).
--cold-weights (graph timer): each case packs enough weight copies (other random weights of the same
shape) for 3x the 60 MB L2 and the graph holds one call per copy, so every call streams its weight from
HBM, as a serving step does (a model's layers do not fit L2); each peer rotates over its own copies
the same way. Without it the graph timer replays one call on one weight: weights under ~60 MB (ours at
4096x4096 / 7168x2048, cuBLAS bf16's 33 MB at 4096x4096) are then read from L2.
--copy-rows adds a row "copy (same bytes)" per case: an SM kernel copying half our byte count from one
of as many rotated sources as ours has weight copies into as many rotated destinations (one fixed destination
kept its writes in L2: session 45), same timer; what any kernel
with our traffic pays at that size (launch and ramp included), so a ratio target above what the copy
reaches is out of reach for a kernel that must move those bytes.
--pdl wait|prefetch adds a row per decode case (M <= 64): the same GEMM planned as a programmatic
dependent (GemmQuery.pdl, the fused decode kernel), which may start while the call before it finishes
("prefetch" reads its weights into L2 before waiting); in a graph of back-to-back calls this is what a
serving step's chain of kernels gets. torch's peers have no such launch mode and run plain. For
mxfp8_linear the pdl row is the planned chain a serving stack would capture: the MXFP8 quantizer
(`MxFp8Query(pdl=True)`) into preallocated buffers, then the GEMM planned with that pdl mode, so the
GEMM launches (and with "prefetch" reads its weights into L2) while the quantizer runs.
--epilogue silu_mul|residual (weight-only recipes, M <= 64, the CuTe decode kernel): every GEMM of ours
with that fused epilogue (GemmQuery.epilogue, the fused decode kernel): silu_mul reads N = 2I weight rows
and writes [M, I], residual adds a [M, N] tensor before the one rounding; the bytes count the residual
and the smaller output. With --sweep-subset ksplit the sweep times the fused kernel launched plainly and
under pdl "wait", with one warp group and, where the plain heuristic has them, with its groups (wn): the
measurement fused_config's groups wait on; with --sweep-subset fp4 it times the fused kernel launched plainly
and under pdl "wait" and "prefetch" with each FP4 placement. torch's peers time the GEMM alone (no epilogue).
Without --json the report goes to $OUT/b12x_gemm.json when $OUT is set.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

import torch

import b12x
from benchmarks.experimental.b12x.common import (
    COPY_IMPL,
    Case,
    Table,
    ceilings,
    measure,
    require_cuda,
    rotate,
    same_size_copy,
    sets_to_exceed_l2,
    standard_parser,
    write_report,
)

MODULE = "benchmarks.experimental.b12x.bench_gemm"
SHAPES = ((4096, 4096), (28672, 4096), (4096, 14336), (7168, 2048))
MS = (1, 4, 16, 2048, 4096)
QUICK_SHAPES, QUICK_MS = ((4096, 4096), (28672, 4096)), (1, 16, 2048)
RECIPES = (
    "w4a16_nvfp4",
    "w4a16_mxfp4",
    "w8a16_mxfp8",
    "w8a16_fp8_block",
    "nvfp4",
    "mxfp4",
    "mxfp8",
    "fp8_block",
    "fp8_tensor",
    "mxfp8_linear",
)
DECODE_MAX_M = 64  # the decode kernel's buckets (gemm/_shared/launch.py: decode8 .. decode64)
QUICK_RECIPES = ("w4a16_nvfp4", "w8a16_mxfp8", "nvfp4", "mxfp8", "fp8_block")
BS = b12x.gemm.blockscaled


def _weight_format(recipe: str) -> str:
    return recipe.split("_", 1)[1] if recipe.startswith(("w4a16", "w8a16")) else recipe.replace("_linear", "")


def _fp4(fmt: str) -> bool:
    """Whether `fmt` is a 4-bit weight format (the FP4 placements' sweeps: `DecodeConfig.fp4`)."""
    from flashinfer.experimental.b12x.gemm._shared.formats import FORMAT

    return fmt in FORMAT and FORMAT[fmt].value_bits == 4


def operand_bytes(fmt: str, rows: int, k: int) -> int:
    """Bytes of a [rows, K] operand in `fmt`, scales included (fp8_block A: per token per 128)."""
    from flashinfer.experimental.b12x.gemm._shared.formats import FORMAT

    spec = FORMAT[fmt]
    values = rows * k * spec.value_bits // 8
    if spec.swizzled:
        return values + rows * (k // spec.sf_vec)
    if spec.scale == "fp32_block":
        return values + 4 * rows * (k // 128)
    return values + (4 if spec.scale == "fp32_scalar" else 0)


@dataclass
class Ours:
    lhs: object  # bf16 activations or a quantized (values, scales) pair
    weight: object
    alpha: float
    a_fmt: str
    out: torch.Tensor
    nbytes: int
    ref: torch.Tensor  # fp32 reference
    weights: tuple  # every weight copy the timed calls rotate over (--cold-weights); weight is the first
    run: object  # run(weight): the timed call on one weight copy
    run_pdl: object = None  # the same through the --pdl plan (decode buckets only), else None
    mm_kw: dict = None  # mm's epilogue keywords of every call (--epilogue), else None

    def fn(self):
        """The timed call on the first weight copy."""
        return self.run(self.weight)

    def timed(self, call_with=None):
        """(fn, calls per graph): `call_with(weight)` (default `run`) over `weights` in turn, one call a copy."""
        return rotating(call_with or self.run, self.weights)

    def error(self, call_with=None) -> float:
        """Max |out - ref| of `call_with(weight)` (default `run`) on the first copy, out poisoned first."""
        self.out.fill_(float("nan"))
        (call_with or self.run)(self.weight)
        if self.out.is_cuda:
            torch.cuda.synchronize(self.out.device)
        return (self.out.float() - self.ref).abs().max().item()


def rotating(call_with, items):
    """(fn, n): fn calls `call_with(item)` for the next of `items` each time; n = len(items), the calls a
    graph must hold so that each replay reads every item once."""
    nxt = rotate(items)
    return (lambda: call_with(nxt())), len(items)


def pdl_applies(pdl: str, m: int, decode_kernel: str = "cute") -> bool:
    """Whether --pdl adds a row for this case: the fused decode kernel takes pdl in the decode
    buckets (M <= 64), on the CuTe decode path."""
    return pdl != "off" and m <= DECODE_MAX_M and decode_kernel == "cute"


EPILOGUES = ("none", "silu_mul", "residual")


def epilogue_applies(epilogue: str, recipe: str, m: int, decode_kernel: str = "cute") -> bool:
    """Whether --epilogue fuses into this case: weight-only recipes (16-bit activations) in the decode buckets on
    the CuTe decode kernel, where the fused decode kernel runs."""
    return (
        epilogue != "none" and recipe.startswith(("w4a16", "w8a16")) and m <= DECODE_MAX_M and decode_kernel == "cute"
    )


def weight_copies(args, nbytes: int) -> int:
    """How many copies of a weight of `nbytes` the timed calls rotate over: enough for 3x L2 with
    --cold-weights (each call then streams its weight from HBM, as in a serving step whose layers'
    weights do not fit L2), else 1."""
    return sets_to_exceed_l2(nbytes) if args.cold_weights else 1


def measure_calls(fn, calls: int, args):
    """`measure` of fn, with `calls` calls per graph under the graph timer (rotated inputs)."""
    return measure(fn, args, calls_per_graph=calls) if args.timer == "graph" else measure(fn, args)


def _decode_override(decode_kernel: str, a_fmt: str, b_fmt: str, m: int, n: int, k: int):
    """The plan override --decode-kernel asks for ({bucket: GemvConfig} for the Triton GEMV, {bucket:
    StreamConfig} for the stream-layout kernel), or None."""
    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled import _gemv_config as GC

    bucket = L.bucket_for(m)
    if decode_kernel == "stream":
        from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_stream as KS

        cfg = KS.default_config(L.BUCKET_MAX_M.get(bucket, m), n, k, a_fmt)
        if cfg is None or L.why_not(a_fmt, b_fmt, "bfloat16", bucket, cfg) is not None:
            return None
        return {bucket: cfg}
    if decode_kernel != "triton" or L.why_not(a_fmt, b_fmt, "bfloat16", bucket, GC.GemvConfig()) is not None:
        return None
    return {bucket: GC.default_config(n, k, b_fmt)}


def _setup(
    recipe, m, n, k, dev, gen, decode_kernel="cute", copies: int = 1, pdl: str = "off", epilogue: str = "none"
) -> Ours:
    from flashinfer.experimental.b12x._lib import quant as Q
    from flashinfer.experimental.b12x.gemm.blockscaled import reference as R

    b_fmt = _weight_format(recipe)
    x = torch.randn(m, k, device=dev, generator=gen).to(torch.bfloat16)
    w = torch.randn(n, k, device=dev, generator=gen) * 0.02
    weight = BS.pack_weight(w, recipe=b_fmt)
    # further copies (--cold-weights): other random weights of the same shape, packed the same way
    weights = (weight,) + tuple(
        BS.pack_weight(torch.randn(n, k, device=dev, generator=gen) * 0.02, recipe=b_fmt) for _ in range(copies - 1)
    )
    alpha = 1.0
    if recipe.startswith(("w4a16", "w8a16")) or recipe == "mxfp8_linear":
        lhs, a_fmt, a_bytes = x, "bfloat16", 2 * m * k
    else:
        a_fmt = b_fmt
        if b_fmt == "nvfp4":
            gs = Q.nvfp4_global_scale(x)
            q, sf = Q.quantize_nvfp4(x, gs)
            lhs, alpha = (q, Q.swizzle_scales(sf, 0)), 1.0 / gs.item()
        elif b_fmt in ("mxfp4", "mxfp8"):
            q, sc = (Q.quantize_mxfp4 if b_fmt == "mxfp4" else Q.quantize_mxfp8)(x)
            lhs = (q, Q.swizzle_scales(sc, 127))
        elif b_fmt == "fp8_block":
            lhs = Q.quantize_block_fp8_act(x)
        else:
            lhs = R.quantize_tensor_fp8(x)
        a_bytes = operand_bytes(a_fmt, m, k)
    if epilogue != "none" and not epilogue_applies(epilogue, recipe, m, decode_kernel):
        raise ValueError(f"epilogue={epilogue!r} needs a weight-only recipe at M <= {DECODE_MAX_M} on the CuTe decode "
                         f"kernel, got {recipe} at M={m} ({decode_kernel})")  # fmt: skip
    residual = torch.randn(m, n, device=dev, generator=gen).to(torch.bfloat16) if epilogue == "residual" else None
    kw = dict(epilogue=epilogue, residual=residual) if epilogue != "none" else {}
    out = torch.empty(m, n // 2 if epilogue == "silu_mul" else n, dtype=torch.bfloat16, device=dev)
    run_pdl = None
    if recipe == "mxfp8_linear":
        run = lambda wt: b12x.gemm.mxfp8_linear.mm(x, wt, out)  # noqa: E731
        q, sc = Q.quantize_mxfp8(x)
        a32 = Q.dequantize_mxfp8(q, sc)
        if pdl_applies(pdl, m, decode_kernel):
            run_pdl = _mxfp8_chain(x, n, out, pdl, dev)
    else:
        # a prepared plan for this M, as serving (the demo block) runs it: the shape-aware config
        override = _decode_override(decode_kernel, a_fmt, b_fmt, m, n, k)
        query = BS.GemmQuery(a_fmt, b_fmt, n, k, max_m=m, m_values=(m,), epilogue=epilogue)
        plan = BS.plan(query, override=override)
        plans = [plan]
        if pdl_applies(pdl, m, decode_kernel):  # the same GEMM as a programmatic dependent (--pdl)
            plans.append(BS.plan(replace(query, pdl=pdl)))
            run_pdl = lambda wt: BS.mm(lhs, wt, out, plan=plans[1], alpha=alpha, **kw)  # noqa: E731
        with b12x.PreparationSession(dev) as session:
            session.prepare(plans)
        run = lambda wt: BS.mm(lhs, wt, out, plan=plan, alpha=alpha, **kw)  # noqa: E731
        a32 = x.float() if a_fmt == "bfloat16" else R.dequantize(a_fmt, lhs[0], lhs[1], m, k, "a")
    ref = R.apply_epilogue((a32 @ R.weight_dequantized(weight).t()) * alpha, epilogue, residual)
    nbytes = operand_bytes(b_fmt, n, k) + a_bytes + 2 * out.numel() + (2 * m * n if residual is not None else 0)
    return Ours(lhs, weight, alpha, a_fmt, out, nbytes, ref, weights, run, run_pdl, kw or None)


def _mxfp8_chain(x, n: int, out, pdl: str, dev):
    """mxfp8_linear as a prepared PDL chain (module docstring, --pdl): run(weight) quantizes x with a PDL
    quantizer plan into buffers made here, then runs the GEMM planned as a programmatic dependent."""
    from flashinfer.experimental.b12x._lib.quant import swizzled_size

    qmx = b12x.quantization.mxfp8
    m, k = x.shape
    qplan = qmx.plan(qmx.MxFp8Query(k, "bfloat16", m, pdl=True))
    gplan = BS.plan(BS.GemmQuery("mxfp8", "mxfp8", n, k, max_m=m, m_values=(m,), pdl=pdl))
    with b12x.PreparationSession(dev) as session:
        session.prepare([qplan, gplan])
    values = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=dev)
    rows = torch.empty(m, k // 32, dtype=torch.uint8, device=dev)
    storage = torch.full((swizzled_size(m, k // 32),), 127, dtype=torch.uint8, device=dev)  # padding: 2^0

    def run(wt):
        qmx.quantize_rows(x, values, rows, storage, plan=qplan)
        BS.mm((values, storage), wt, out, plan=gplan)

    return run


def _peers(m, n, k, dev, gen, args):
    """[(name, Timing, note)] for the torch peers on this problem (skipped ones print why). With
    --cold-weights each peer rotates over its own weight copies (enough for 3x L2 of its bytes)."""
    x = torch.randn(m, k, device=dev, generator=gen).to(torch.bfloat16)
    out = []

    def bf16_weights(nbytes):
        return [
            (torch.randn(n, k, device=dev, generator=gen) * 0.02).to(torch.bfloat16)
            for _ in range(weight_copies(args, nbytes))
        ]

    def add(name, call_with, weights, nbytes):
        try:
            call_with(weights[0])
            fn, calls = rotating(call_with, weights)
            t = measure_calls(fn, calls, args)
            note = f"{nbytes / t.median_us / 1e6:.2f} TB/s on its own {nbytes / 1e6:.1f} MB"
            out.append((name, t, note + (f", {calls} weight copies" if calls > 1 else "")))
        except (RuntimeError, TypeError) as e:
            print(f"peer {name} skipped at M={m} N={n} K={k}: {str(e).splitlines()[0][:160]}", file=sys.stderr)

    bf16_bytes = 2 * (n * k + m * k + m * n)
    add("torch.mm bf16", lambda w: torch.mm(x, w.t()), bf16_weights(2 * n * k), bf16_bytes)
    x8 = x.to(torch.float8_e4m3fn)
    w8s = [w.to(torch.float8_e4m3fn).t() for w in bf16_weights(n * k)]  # cuBLASLt wants B column-major
    one = torch.ones((), device=dev)
    fp8_bytes = n * k + m * k + 2 * m * n
    add(
        "_scaled_mm tensorwise",
        lambda w8: torch._scaled_mm(x8, w8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
        w8s,
        fp8_bytes,
    )
    sa, sb = torch.ones(m, 1, device=dev), torch.ones(1, n, device=dev)
    add(
        "_scaled_mm rowwise",
        lambda w8: torch._scaled_mm(x8, w8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16),
        w8s,
        fp8_bytes,
    )
    del w8s
    if hasattr(torch, "_weight_int4pack_mm") and hasattr(torch, "_convert_weight_to_int4pack"):
        try:
            int4_bytes = n * k // 2 + 4 * n * k // 128
            packs = []
            for _ in range(weight_copies(args, int4_bytes)):
                q = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=dev, generator=gen)
                sz = torch.randn(k // 128, n, 2, device=dev, generator=gen).to(torch.bfloat16)
                packs.append((torch._convert_weight_to_int4pack(q, 8), sz))
            add(
                "_weight_int4pack_mm",
                lambda p: torch._weight_int4pack_mm(x, p[0], 128, p[1]),
                packs,
                int4_bytes + 2 * m * (k + n),
            )
        except RuntimeError as e:
            print(f"peer _weight_int4pack_mm skipped: {str(e).splitlines()[0][:160]}", file=sys.stderr)
    return out


def sweep_configs(
    bucket: str, m: int, n: int, k: int, b_fmt: str, subset: str = "all", a_fmt: str | None = None, epilogue="none"
) -> tuple:
    """The configs --sweep times for a case: every candidate of its bucket ("all"), ("prefetch") the
    decode kernel's weight-prefetch candidates, ("stream") its streaming variants (cache hints, chunk
    groups, warp groups along N), ("pdl") the fused decode kernel as a programmatic dependent
    (`pdl_variants`), or ("gemv") the Triton GEMV's candidates (decode8 / decode16), each after the
    case's CuTe heuristic config as the baseline (for a_fmt's pair: without it, the heuristic of FP4
    / FP8 activations, which takes no cache hints and no two-tile rule; session 24 and 25's stream
    sweeps started from that base). Configs a case's pair cannot run (a GEMV config for quantized
    activations) are skipped by `_sweep`. With an epilogue (--epilogue) only the fused kernel runs it: subset
    ksplit gives `epilogue_groups`, fp4 `epilogue_fp4`, the others nothing."""
    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled import _decode_sweeps as DS
    from flashinfer.experimental.b12x.gemm.blockscaled import _gemv_config as GC
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_tiled as KT

    if epilogue != "none":
        if subset == "fp4":
            return epilogue_fp4(bucket, n, k, b_fmt, a_fmt, epilogue)
        return epilogue_groups(bucket, n, k, b_fmt, a_fmt, epilogue) if subset == "ksplit" else ()
    if subset in ("layout", "layout-probe"):
        from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_stream as KS

        if bucket not in L.STREAM_BUCKETS or b_fmt != "nvfp4" or KS.default_config(m, n, k) is None:
            return ()
        if subset == "layout-probe":
            return (L.default_config(bucket, n, k, b_fmt),) + KS.probe_variants(
                KS.default_config(L.BUCKET_MAX_M[bucket], n, k)
            )
        return (L.default_config(bucket, n, k, b_fmt),) + KS.candidate_configs(L.BUCKET_MAX_M[bucket], n, k)
    if subset == "gemv":
        if bucket not in GC.BUCKETS or b_fmt not in GC.RECIPES:
            return ()
        return (L.default_config(bucket, n, k, b_fmt),) + GC.candidate_configs(n, k, b_fmt)

    if not bucket.startswith("decode"):
        if subset in ("prefetch", "stream", "fp4", "probe", "probe-step", "pdl", "ksplit"):
            return ()
        twopass = twopass_candidates() if bucket == L.TWOPASS_BUCKET else ()
        if subset == "twopass":  # the tiled kernel's shape-aware config against the two-pass tilings
            return (L.default_config(bucket, n, k, b_fmt),) + twopass
        if subset == "fp8mma":  # the default against the tiled kernel's e4m3 MMA variants (FP8 pairs)
            return (L.default_config(bucket, n, k, b_fmt, a_fmt=b_fmt),) + tuple(
                c for c in KT.candidate_configs(m) if c.fp8_mma
            )
        return KT.candidate_configs(m) + twopass
    if subset == "pdl":
        return (L.default_config(bucket, n, k, b_fmt, a_fmt=a_fmt),) + pdl_variants(bucket, n, k, b_fmt, a_fmt)
    cands = DS.candidate_configs(m)
    if subset == "prefetch":
        base = L.default_config(bucket, n, k, b_fmt, a_fmt=a_fmt)
        cands = (base,) + tuple(c for c in cands if c.prefetch and c != base)
    if subset == "stream":
        base = L.default_config(bucket, n, k, b_fmt, a_fmt=a_fmt)
        cands = (base,) + DS.stream_variants(base)
    if subset == "fp4":
        base = L.default_config(bucket, n, k, b_fmt, a_fmt=a_fmt)
        cands = (base,) + DS.fp4_variants(base) if _fp4(b_fmt) else ()
    if subset == "probe":
        base = L.default_config(bucket, n, k, b_fmt, a_fmt=a_fmt)
        cands = (base,) + DS.probe_variants(base)
    if subset == "ksplit":
        base = L.default_config(bucket, n, k, b_fmt, a_fmt=a_fmt)
        cands = (base,) + DS.ksplit_sweep(base, k)
        if base.wn > 1:  # the fused kernel under pdl "wait" with one warp group (today's) and the base's groups
            one = L.fused_config(bucket, n, k, b_fmt, a_fmt, pdl="wait")
            cands += (one, L.fused_config(bucket, n, k, b_fmt, a_fmt, pdl="wait", opts=f"wn={base.wn}"))
    if subset == "probe-step":
        cands = probe_step_variants(L.default_config(bucket, n, k, b_fmt, a_fmt=a_fmt))
    return cands


def epilogue_groups(bucket: str, n: int, k: int, b_fmt: str, a_fmt: str | None, epilogue: str) -> tuple:
    """The fused decode kernel with `epilogue`, launched plainly and under pdl "wait", each with fused_config's
    choice and, where the plain heuristic has groups (wn > 1), with the other one of that wn and one group (no
    ashare either way; `launch.GROUPED_EPILOGUES` says which fused_config takes), then that wn sharing its
    activations as the plain kernel's groups do (ashare, session 53; not for rope_append)."""
    from flashinfer.experimental.b12x.gemm._shared import launch as L

    plain = L.default_config(bucket, n, k, b_fmt, a_fmt=a_fmt)
    wn = plain.wn
    out = []
    for pdl in ("off", "wait"):
        chosen = L.fused_config(bucket, n, k, b_fmt, a_fmt, epilogue, pdl)
        out.append(chosen)
        if wn > 1:
            other = 1 if chosen.decode.wn > 1 else wn
            out.append(L.fused_config(bucket, n, k, b_fmt, a_fmt, epilogue, pdl, f"wn={other}"))
            if plain.ashare and epilogue != "rope_append":
                out.append(L.fused_config(bucket, n, k, b_fmt, a_fmt, epilogue, pdl, f"wn={wn},ashare=true"))
    return tuple(out)


def epilogue_fp4(bucket: str, n: int, k: int, b_fmt: str, a_fmt: str | None, epilogue: str) -> tuple:
    """--sweep-subset fp4 with an epilogue: the fused decode kernel launched plainly, then under pdl "wait" and
    "prefetch" (a serving chain's launches; "prefetch" of a small weight is the demo block's unhinted whole-row form),
    each time with fused_config's FP4 placement first and then each other one (`DecodeConfig.fp4`): the A/B behind
    `decode_rules.FUSED_FP4_MUL` (session 51 timed the plain launches)."""
    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled import _decode_sweeps as DS

    if not _fp4(b_fmt):
        return ()
    out = []
    for pdl in ("off", "wait", "prefetch"):
        base = L.fused_config(bucket, n, k, b_fmt, a_fmt, epilogue, pdl)
        out += [base, *(replace(base, decode=cfg) for cfg in DS.fp4_variants(base.decode))]
    return tuple(out)


def pdl_variants(bucket: str, n: int, k: int, b_fmt: str, a_fmt: str | None) -> tuple:
    """The fused decode kernel (`launch.fused_config`, no epilogue) with the plain loads fused plans
    use and with `decode_config_for`'s cache hints, each launched plainly, as a programmatic
    dependent ("wait"), and with the L2 prefetch of its whole rows or of the first step's K range
    ("prefetch", FusedConfig.span): what a decode GEMM gains from overlapping the call before it, and
    from which prefetch, at weights under and over the L2."""
    from flashinfer.experimental.b12x.gemm._shared import launch as L

    out = []
    for hints in (False, True):
        for pdl, span in (("off", "rows"), ("wait", "rows"), ("prefetch", "rows"), ("prefetch", "step")):
            cfg = L.fused_config(bucket, n, k, b_fmt, a_fmt, pdl=pdl, hints=hints, span=span)
            if cfg not in out:
                out.append(cfg)
    return tuple(out)


def twopass_candidates() -> tuple:
    """The two-pass path (`blockscaled/_twopass.py`) with each of its GEMM's candidate tilings, from
    M = 1 on (min_m 0: the default config's min_m would send small M to the tiled kernel)."""
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_dequant as KD
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_mma16 as KM
    from flashinfer.experimental.b12x.gemm.blockscaled import _twopass as TP

    one_panel = TP.TwoPassConfig(panel_elems=1 << 27, min_m=0)  # 28672 x 4096 in one panel (235 MB)
    half_panel = TP.TwoPassConfig(panel_elems=1 << 26, min_m=0)  # 28672 x 4096 in two panels
    plain = TP.TwoPassConfig(dequant=KD.DequantConfig(staged=False), min_m=0)  # per-thread dequantize stores
    # every launch of the path a programmatic dependent of the one before
    pdl = TP.TwoPassConfig(gemm=KM.Mma16Config(pdl=True), dequant=KD.DequantConfig(pdl=True), min_m=0)
    return tuple(TP.TwoPassConfig(gemm=g, min_m=0) for g in KM.CANDIDATES) + (one_panel, half_panel, plain, pdl)


def probe_step_variants(base) -> tuple:
    """`base`, its loads-only probe, then configs that move more weight bytes per warp step, each
    followed by its loads-only probe: kgroup 2 / 4 (adjacent chunks a step; prefetch off, which
    kgroup excludes), unroll 4, twice the 16-row tiles. If the loads-only time falls with the bytes a
    step at the same total bytes, the per-step latency bounds the stream (issue #6: FP4 weights
    loaded at ~2.7 TB/s where the MXFP8 kernel of the same structure reaches ~3.5). Configs a case
    cannot build are skipped by `_sweep` (L.why_not)."""
    from dataclasses import replace

    flat = replace(base, prefetch=0)
    steps = (
        replace(flat, kgroup=2),
        replace(flat, kgroup=4),
        replace(base, unroll=4),
        replace(base, tiles=2 * base.tiles),
    )
    found = [base, replace(base, probe="loads")]
    for s in steps:
        for c in (s, replace(s, probe="loads")):
            if c not in found:
                found.append(c)
    return tuple(found)


def _sweep(ours: Ours, m, n, k, args) -> dict:
    """Time the --sweep configs of this case (`sweep_configs`): {config repr: median us}."""
    from flashinfer.experimental.b12x.gemm._shared import launch as L

    bucket = L.bucket_for(m)
    kw = ours.mm_kw or {}
    epilogue = kw.get("epilogue", "none")
    cands = sweep_configs(bucket, m, n, k, ours.weight.recipe, args.sweep_subset, ours.a_fmt, epilogue)
    plans = {}
    for cfg in cands:
        if L.why_not(ours.a_fmt, ours.weight.recipe, "bfloat16", bucket, cfg) is not None:
            continue
        query = BS.GemmQuery(ours.a_fmt, ours.weight.recipe, n, k, max_m=m, m_values=(m,), epilogue=epilogue)
        plans[repr(cfg)] = BS.plan(query, override={bucket: cfg})
    # one session for the case's plans: with --sweep-workers > 1 their kernels compile in parallel
    with b12x.PreparationSession(ours.out.device, compile_workers=args.sweep_workers) as s:
        s.prepare(list(plans.values()))
    results = {}
    for name, p in plans.items():
        fn, calls = ours.timed(lambda wt, p=p: BS.mm(ours.lhs, wt, ours.out, plan=p, alpha=ours.alpha, **kw))
        results[name] = measure_calls(fn, calls, args).median_us
    return results


def run_problem(table, args, m, n, k, recipes, dev, gen, sweeps):
    peers = [] if args.no_peers else _peers(m, n, k, dev, gen, args)
    for recipe in recipes:
        if recipe.startswith(("w4a16", "w8a16")) and m > DECODE_MAX_M and recipe != "w4a16_nvfp4":
            continue  # weight-only forms past decode sizes: one representative is enough
        copies = weight_copies(args, operand_bytes(_weight_format(recipe), n, k))
        pdl = args.pdl
        epilogue = args.epilogue if epilogue_applies(args.epilogue, recipe, m, args.decode_kernel) else "none"
        if epilogue != args.epilogue:
            print(f"--epilogue {args.epilogue}: {recipe} M={m} runs without it (weight-only, M <= 64)", file=sys.stderr)
        ours = _setup(recipe, m, n, k, dev, gen, args.decode_kernel, copies, pdl, epilogue)
        label = recipe if epilogue == "none" else f"{recipe}+{epilogue}"
        case = Case(label, {"M": m, "N": n, "K": k}, bytes=ours.nbytes, flops=2 * m * n * k)
        note = f"max |ours - ref| = {ours.error():.2e} (|ref| max {ours.ref.abs().max().item():.2e})"
        if copies > 1:
            note += f", {copies} weight copies"
        table.add(case, "b12x", measure_calls(*ours.timed(), args), note=note)
        if ours.run_pdl is not None:
            pnote = f"max |ours - ref| = {ours.error(ours.run_pdl):.2e}; launched as a programmatic dependent of the call before"
            table.add(case, f"b12x pdl {pdl}", measure_calls(*ours.timed(ours.run_pdl), args), note=pnote)
        if args.copy_rows:  # its own generator: the case's inputs stay those of runs without it
            n_sets = weight_copies(args, ours.nbytes)
            fn = same_size_copy(ours.nbytes, n_sets, dev, torch.Generator(device=dev).manual_seed(1))
            cnote = "reference: a device copy moving our bytes (half read, half written), same timer"
            table.add(case, COPY_IMPL, measure_calls(fn, n_sets, args), peer=True, note=cnote + f", {n_sets} sources")
            del fn
        for name, timing, pnote in peers:
            table.add(case, name, timing, peer=True, note=pnote)
        if args.sweep and recipe != "mxfp8_linear":
            sweeps[f"{label} M={m} N={n} K={k}"] = _sweep(ours, m, n, k, args)
        del ours
    torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = standard_parser(__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, nargs="+", default=None, help=f"token counts M (default {MS})")
    parser.add_argument(
        "--shapes", nargs="+", default=None, help="N x K shapes, e.g. 4096x4096 (default: 4 layer shapes)"
    )
    parser.add_argument("--recipes", nargs="+", choices=RECIPES, default=None, help="our implementations to time")
    parser.add_argument("--sweep", action="store_true", help="also time every candidate kernel config per case")
    parser.add_argument(
        "--sweep-subset",
        choices=(
            "all",
            "prefetch",
            "stream",
            "fp4",
            "probe",
            "probe-step",
            "gemv",
            "layout",
            "layout-probe",
            "twopass",
            "fp8mma",
            "pdl",
            "ksplit",
        ),
        default="all",
        help="with --sweep: every candidate, the decode weight-prefetch candidates, the decode streaming "
        "variants, the decode kernel's FP4 placements (fp4), the decode timing probes (garbage outputs), the probes at more bytes a warp step, the Triton "
        "GEMV candidates, the stream-layout "
        "kernel's candidates (each + the CuTe heuristic config), at M > 256 the two-pass tilings + the tiled "
        "config, the tiled kernel's e4m3 MMA variants (fp8mma), or the fused decode kernel as a programmatic "
        "dependent with and without cache hints and L2 prefetch (pdl), or the decode kernel's K splits over a "
        "cluster of CTAs (ksplit)",
    )
    parser.add_argument(
        "--sweep-workers",
        type=int,
        default=1,
        help="with --sweep: compile processes for each case's sweep configs (1: in this process)",
    )
    parser.add_argument(
        "--decode-kernel",
        choices=("cute", "triton", "stream"),
        default="cute",
        help="weight-only NVFP4/MXFP4/MXFP8 at M <= 16: the CuTe decode kernel, the Triton GEMV, or (W4A16 "
        "NVFP4) the stream-layout decode kernel",
    )
    parser.add_argument(
        "--cold-weights",
        action="store_true",
        help="each timed call reads its own weight copy, enough copies for 3x L2 (graph timer: one call a copy "
        "in each graph), so weights stream from HBM as in a serving step; peers likewise",
    )
    parser.add_argument(
        "--pdl",
        choices=("off", "wait", "prefetch"),
        default="off",
        help="also time each decode case (M <= 64, CuTe decode kernel) planned with this programmatic-dependent-"
        "launch mode (GemmQuery.pdl; prefetch: the weights are prefetched to L2 before waiting on the call before), "
        "as a serving graph runs it; peers run plain launches",
    )
    parser.add_argument(
        "--copy-rows",
        action="store_true",
        help="add a row per case: a device copy moving our bytes (half read, half written; rotated sources with "
        "--cold-weights), same timer: the floor a kernel with our traffic meets at that size",
    )
    parser.add_argument(
        "--epilogue",
        choices=EPILOGUES,
        default="none",
        help="weight-only recipes at M <= 64 on the CuTe decode kernel: our GEMMs with this fused epilogue (silu_mul: "
        "N = 2I rows in, [M, I] out; residual: + a [M, N] tensor); peers time the GEMM alone",
    )
    args = parser.parse_args(argv)
    if args.epilogue != "none" and args.decode_kernel != "cute":
        parser.error(
            f"--epilogue {args.epilogue} runs on the CuTe decode kernel, not --decode-kernel {args.decode_kernel}"
        )
    if args.epilogue != "none" and args.sweep and args.sweep_subset not in ("ksplit", "fp4"):
        parser.error(
            "--epilogue sweeps only with --sweep-subset ksplit (the fused kernel's warp groups) or fp4 (its FP4 "
            f"placements), not {args.sweep_subset}"
        )
    if args.cold_weights and args.timer != "graph":
        parser.error("--cold-weights needs --timer graph (the events timer flushes L2 before every call already)")
    if args.sweep and args.sweep_subset in ("probe", "probe-step", "layout-probe"):  # let the garbage probes build
        from flashinfer.experimental.b12x.gemm.blockscaled._kernel_decode import PROBE_ENV

        os.environ[PROBE_ENV] = "1"
    dev = require_cuda("bench_gemm", args.device)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes] if args.shapes else None
    shapes = shapes or (QUICK_SHAPES if args.quick else SHAPES)
    ms = args.m or (QUICK_MS if args.quick else MS)
    recipes = args.recipes or (QUICK_RECIPES if args.quick else RECIPES)
    ceil = ceilings(dev)
    table = Table(f"b12x gemm on {ceil.device_name} (bf16 out; bytes = ours once)", ceil)
    gen = torch.Generator(device=dev).manual_seed(0)
    sweeps: dict = {}
    for n, k in shapes:
        for m in ms:
            run_problem(table, args, m, n, k, recipes, dev, gen, sweeps)
    table.print()
    for name, res in sweeps.items():
        best = min(res, key=res.get) if res else None
        print(f"sweep {name}: best {best} {res.get(best, float('nan')):.2f} us of {len(res)} configs")
    extra = {"bytes": "weight values+scales + activations(+scales) + bf16 output, once", "sweeps": sweeps}
    write_report(table, args, "b12x_gemm.json", MODULE, argv, dev, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
