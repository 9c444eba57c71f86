"""gemm.block_fp8_linear: y = x W^T (+ bias) for DeepSeek block-FP8 weights, with x requantized inline.

    caps = Caps("cuda:0", max_tokens=4096, in_features=7168, out_features=2048)
    p = plan(caps)
    with b12x.PreparationSession("cuda:0") as s:
        s.prepare([p])                     # compiles the quantizer and the GEMM buckets, allocates scratch
    w = pack_weight(weight, weight_scale_inv)
    y = run(x, w, plan=p, bias=b)          # or: run(binding=bind(p, source=x, packed_weight=w))

Per run: the bf16/fp16 input [T, K] is quantized per token per 128 to E4M3 + fp32 scales
(`_kernel_quant.py`, bit-exact with `_lib.quant.quantize_block_fp8_act`) into the plan's scratch,
then the block-FP8 GEMM (gemm.blockscaled kernels) writes y in the input dtype (or `output_dtype`);
bias is added in place. Scratch buffers come from the plan's ScratchBufferSpecs: the session's
arena, or the caller's tensors passed as `workspace={name: tensor}`. run never compiles, never
allocates (output_mode "scratch") and never syncs: CUDA-graph safe. CPU plans run the reference.

Under torch.compile, bind checks shapes and dtypes (traced) and allocates a new output in either output mode;
run is one custom op (`_ops.py`, `torch.ops.b12x.block_fp8_linear_run_`) that binds again (every eager check)
and runs when the graph runs; `workspace` and `stream` must be None there.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..._lib.quant import quantize_block_fp8_act
from ..._lib.scratch import ScratchBufferSpec, check_buffer, dtype_name
from ...preparation.plan import Plan, PlanState
from .._shared import launch as L
from .._shared.formats import check_shape
from .._shared.operands import TORCH_OUT, describe
from .._shared.weight import Weight
from .._shared.weight import pack_weight as _pack
from ..blockscaled import reference as R

OP = "gemm.block_fp8_linear"
DTYPES = ("bfloat16", "float16")
OUTPUT_MODES = ("scratch", "new")
BLOCK = (128, 128)


@dataclass(frozen=True)
class Caps:
    """Static facts: device, capacity of T (max_tokens), K (in_features), N (out_features), the input
    dtype, the output dtype (None: the input's), output_mode ("scratch": y lives in the plan's
    scratch, stable across runs; "new": a fresh tensor per run) and the weight block size."""

    device: str
    max_tokens: int
    in_features: int
    out_features: int
    source_dtype: str = "bfloat16"
    output_dtype: str | None = None
    output_mode: str = "scratch"
    block_size: tuple = BLOCK

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", str(torch.device(self.device)))
        object.__setattr__(self, "source_dtype", dtype_name(self.source_dtype))
        if self.output_dtype is not None:
            object.__setattr__(self, "output_dtype", dtype_name(self.output_dtype))
        object.__setattr__(self, "block_size", tuple(self.block_size))
        if self.source_dtype not in DTYPES:
            raise ValueError(f"caps.source_dtype must be one of {DTYPES}, got {self.source_dtype!r}")
        if self.output_dtype not in (None, "bfloat16", "float16", "float32"):
            raise ValueError(f"caps.output_dtype must be None, bfloat16, float16 or float32, got {self.output_dtype!r}")
        if self.output_mode not in OUTPUT_MODES:
            raise ValueError(f"caps.output_mode must be one of {OUTPUT_MODES}, got {self.output_mode!r}")
        if self.block_size != BLOCK:
            raise ValueError(f"caps.block_size must be (128, 128) (DeepSeek block-FP8), got {self.block_size}")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"caps.max_tokens must be an int >= 1, got {self.max_tokens!r}")
        check_shape(OP, self.out_features, self.in_features)

    @property
    def out_dtype(self) -> str:
        return self.output_dtype or self.source_dtype


class BlockFp8LinearPlan(Plan):
    """selection = (quantizer config, ((bucket, gemm config), ...)); override: {bucket: config}."""

    def heuristic(self, arch):
        if arch is None:
            return None
        from ._kernel_quant import QuantConfig

        chosen = dict(self.override or ())
        c = self.caps
        cfgs = tuple(
            (b, chosen.get(b, L.default_config(b, c.out_features, c.in_features, "fp8_block"))) for b in self._buckets()
        )
        return (QuantConfig(), cfgs)

    def _buckets(self) -> tuple:
        out = []
        for b in L.BUCKETS:
            out.append(b)
            if self.caps.max_tokens <= L.BUCKET_MAX_M[b]:
                break
        return tuple(out)

    def kernels(self, config, arch: str) -> tuple:
        from ._kernel_quant import compile_quant

        quant_cfg, gemms = config
        c = self.caps
        out = [(compile_quant, (c.source_dtype, quant_cfg, arch))]
        out += [L.kernel_key("fp8_block", "fp8_block", c.out_dtype, b, arch, cfg) for b, cfg in gemms]
        return tuple(out)

    def scratch_specs(self, config=None, device="cuda") -> tuple[ScratchBufferSpec, ...]:
        c = self.caps
        specs = [
            ScratchBufferSpec("act_values", (c.max_tokens, c.in_features), "uint8", device),
            ScratchBufferSpec("act_scales", (c.max_tokens, c.in_features // 128), "float32", device),
        ]
        if c.output_mode == "scratch":
            specs.append(ScratchBufferSpec("output", (c.max_tokens, c.out_features), c.out_dtype, device))
        return tuple(specs)

    def prime(self, state: PlanState) -> None:
        if state.arch is None:
            return
        c = self.caps
        launchers = [fn(*args) for fn, args in state.kernels]
        state.extra["quant"] = launchers[0]
        state.extra["gemm"] = {b: f for (b, _), f in zip(state.selection[1], launchers[1:])}
        w = _pack(torch.zeros(c.out_features, c.in_features, device=state.device), recipe="fp8_block")
        for b in state.extra["gemm"]:
            t = int(min(L.BUCKET_MAX_M[b], c.max_tokens))
            x = torch.zeros(t, c.in_features, dtype=TORCH_OUT[c.source_dtype], device=state.device)
            run(x, w, plan=self)
        torch.cuda.synchronize(state.device)


def plan(caps: Caps, *, invocation=None, override=None) -> BlockFp8LinearPlan:
    """A pure, hashable plan. invocation: reserved (None). override: {bucket: gemm config}."""
    if not isinstance(caps, Caps):
        raise ValueError(f"caps must be block_fp8_linear.Caps, got {type(caps).__name__}")
    if invocation is not None:
        raise ValueError(f"invocation must be None for {OP}, got {invocation!r}")
    pairs = None
    if override is not None:
        if not isinstance(override, dict):
            raise ValueError(f"override must be a dict {{bucket: config}}, got {type(override).__name__}")
        for b, cfg in override.items():
            reason = L.why_not("fp8_block", "fp8_block", caps.out_dtype, b, cfg) if b in L.BUCKETS else "unknown"
            if reason is not None:
                raise ValueError(f"override for {b!r}: {reason}")
        pairs = tuple(sorted(override.items()))
    return BlockFp8LinearPlan(op=OP, caps=caps, invocation=None, override=pairs)


def pack_weight(weight, weight_scale=None, *, block_size=BLOCK) -> Weight:
    """E4M3 [N, K] + fp32 weight_scale_inv [ceil(N/128), ceil(K/128)] (or a bf16/fp32 weight, quantized
    here) -> the block-FP8 Weight the GEMM takes."""
    if tuple(block_size) != BLOCK:
        raise ValueError(f"block_size must be (128, 128), got {tuple(block_size)}")
    if weight_scale is None:
        return _pack(weight, recipe="fp8_block")
    return _pack(weight, weight_scale, recipe="fp8_block")


@dataclass(frozen=True)
class Binding:
    """Views for one run: the live source [T, K], the weight, bias, and the scratch slices (values and
    scales None in a binding made under torch.compile, whose output is a new tensor: `_ops.py`)."""

    plan: BlockFp8LinearPlan
    source: torch.Tensor
    weight: Weight
    bias: torch.Tensor | None
    values: torch.Tensor | None
    scales: torch.Tensor | None
    output: torch.Tensor | None
    tokens: int


def _scratch(plan_obj: BlockFp8LinearPlan, state: PlanState, workspace) -> dict:
    specs = plan_obj.scratch_specs(None, state.device)
    if workspace is None:
        return state.scratch
    if not isinstance(workspace, dict):
        raise ValueError(
            f"workspace must be a dict {{name: tensor}} from the plan's scratch specs, got {type(workspace).__name__}"
        )
    for spec in specs:
        if spec.name not in workspace:
            raise ValueError(f"workspace lacks buffer {spec.name!r} ({list(spec.shape)} {dtype_name(spec.dtype)})")
        check_buffer(
            f"workspace[{spec.name!r}]", workspace[spec.name], shape=spec.shape, dtype=spec.dtype, device=state.device
        )
    return workspace


def bind(plan: BlockFp8LinearPlan, *, source, packed_weight, bias=None, workspace=None) -> Binding:
    """Validate and slice (views only: no allocation, no device work). Under torch.compile: checks shapes
    and dtypes, allocates the output, and leaves the scratch to the op (`_ops.py`)."""
    return _bind(plan, source, packed_weight, bias, workspace, torch.compiler.is_compiling())


def _bind(plan, source, packed_weight, bias, workspace, traced: bool) -> Binding:
    if not isinstance(plan, BlockFp8LinearPlan):
        raise ValueError(f"plan must come from b12x.gemm.block_fp8_linear.plan(caps), got {type(plan).__name__}")
    state = plan.state
    c = plan.caps
    t = _check_source("source", source, c, state.device)
    if (
        not isinstance(packed_weight, Weight)
        or packed_weight.recipe != "fp8_block"
        or packed_weight.shape
        != (
            c.out_features,
            c.in_features,
        )
    ):
        raise ValueError(
            f"packed_weight must be a block-FP8 Weight [{c.out_features}, {c.in_features}] (pack_weight), got "
            f"{packed_weight!r}"
        )
    if packed_weight.device != state.device:
        raise ValueError(f"packed_weight must be on {state.device}, got {packed_weight.device}")
    if bias is not None and (
        not isinstance(bias, torch.Tensor)
        or list(bias.shape) != [c.out_features]
        or dtype_name(bias.dtype) != c.out_dtype
        or bias.device != state.device
    ):
        raise ValueError(
            f"bias must be {c.out_dtype} [{c.out_features}] on {state.device} or None, got {describe(bias)}"
        )
    if traced:  # the op binds again when it runs; the plan's scratch stays out of the graph (`_ops.py`)
        return _ops.traced_binding(plan, source, packed_weight, bias, workspace, t)
    scratch = _scratch(plan, state, workspace)
    output = scratch["output"][:t] if c.output_mode == "scratch" else None
    return Binding(plan, source, packed_weight, bias, scratch["act_values"][:t], scratch["act_scales"][:t], output, t)


def _check_source(name: str, source, c, device) -> int:
    """source [T, in_features] in the plan's source dtype, contiguous on its device, T <= max_tokens: T."""
    if (
        not isinstance(source, torch.Tensor)
        or source.dim() != 2
        or source.shape[1] != c.in_features
        or dtype_name(source.dtype) != c.source_dtype
        or source.device != device
        or not source.is_contiguous()
    ):
        raise ValueError(
            f"{name} must be {c.source_dtype} [T, {c.in_features}] contiguous on {device}, got {describe(source)}"
        )
    if source.shape[0] > c.max_tokens:
        raise ValueError(f"{name} has {source.shape[0]} tokens, above the plan's capacity max_tokens={c.max_tokens}")
    return source.shape[0]


def quantize_input(source_tk, *, plan, out=None):
    """source [T, K] -> (E4M3 values [T, K] as uint8, fp32 scales [T, K/128]) per token per 128,
    bit-exact with `_lib.quant.quantize_block_fp8_act`; into `out` = (values, scales) when given. Under
    torch.compile the launch is one custom op (`torch.ops.b12x.block_fp8_linear_quantize_input_`)."""
    if not isinstance(plan, BlockFp8LinearPlan):
        raise ValueError(f"plan must come from b12x.gemm.block_fp8_linear.plan(caps), got {type(plan).__name__}")
    state = plan.state
    c = plan.caps
    t = _check_source("source_tk", source_tk, c, state.device)
    if out is None:
        out = (
            torch.empty(t, c.in_features, dtype=torch.uint8, device=source_tk.device),
            torch.empty(t, c.in_features // 128, dtype=torch.float32, device=source_tk.device),
        )
    values, scales = out
    check_buffer("out[0]", values, shape=(t, c.in_features), dtype="uint8", device=state.device)
    check_buffer("out[1]", scales, shape=(t, c.in_features // 128), dtype="float32", device=state.device)
    if t == 0:
        return values, scales
    if torch.compiler.is_compiling():  # one opaque node (`_ops.py`): torch.compile cannot trace a launch
        _ops.QUANT_OP(state.handle, source_tk, values, scales)
        return values, scales
    if state.arch is None:
        q, s = quantize_block_fp8_act(source_tk)
        values.copy_(q.view(torch.uint8))
        scales.copy_(s)
    else:
        state.extra["quant"](source_tk, values, scales)
    return values, scales


def run(source=None, packed_weight=None, *, plan=None, bias=None, workspace=None, binding=None, stream=None):
    """y [T, N] = x W^T (+ bias) in the output dtype; returns the output (a scratch view in mode
    "scratch"). Pass either (source, packed_weight, plan) or a `binding` from bind(). Under torch.compile
    the call is one custom op (`_ops.py`) writing a new output; a binding must then be made there too."""
    traced = torch.compiler.is_compiling()
    if binding is None:
        binding = _bind(plan, source, packed_weight, bias, workspace, traced)
    elif source is not None or packed_weight is not None or plan is not None:
        raise ValueError("pass either a binding or (source, packed_weight, plan), not both")
    if traced:  # one opaque node (`_ops.py`): torch.compile cannot trace a launch
        return _ops.call(binding, stream)
    b = binding
    c = b.plan.caps
    state = b.plan.state
    out = b.output
    if out is None:
        out = torch.empty(b.tokens, c.out_features, dtype=TORCH_OUT[c.out_dtype], device=state.device)
    if b.tokens == 0:
        return out
    if stream is not None and state.device.type == "cuda":
        with torch.cuda.stream(stream):
            _launch(b, state, out)
    else:
        _launch(b, state, out)
    return out


def _launch(b: Binding, state: PlanState, out: torch.Tensor) -> None:
    quantize_input(b.source, plan=b.plan, out=(b.values, b.scales))
    w = b.weight
    vals = b.values.view(torch.float8_e4m3fn)
    if state.arch is None:
        y = R.mm("fp8_block", vals, b.scales, "fp8_block", w.values, w.scales, 1.0, "float32")
        if b.bias is not None:
            y = y + b.bias.float()
        out.copy_(y.to(out.dtype))
        return
    gemms = state.extra["gemm"]
    start = L.BUCKETS.index(L.bucket_for(b.tokens))
    launch = next(gemms[k] for k in L.BUCKETS[start:] if k in gemms)
    args, alpha = L.launch_args("fp8_block", vals, b.scales, None, "fp8_block", w.values, w.scales, w.alpha, 1.0, out)
    launch(*args, alpha)
    if b.bias is not None:
        out.add_(b.bias)  # in place, in the output dtype: no allocation


from . import _ops  # noqa: E402 - registers torch.ops.b12x.block_fp8_linear_run_ (it imports this module lazily)
