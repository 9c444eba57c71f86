"""`python -m b12x demo`: a small but real decoder block through the whole b12x lifecycle.

Random weights -> ModelOpt-style NVFP4 safetensors checkpoint (temp dir) -> DirectWeightSession ->
gemm.blockscaled.pack_weight -> every planned op prepared in one PreparationSession -> freeze ->
(CUDA) one decode step captured in a CUDA graph and replayed -> per-op and total times -> agreement
with a plain-torch fp32 reference of the whole block built from the dequantized checkpoint. On a
CPU-only machine the same lifecycle runs the ops' reference backends and says so.

Models: "llama-small" (one dense Llama-style block), "qwen3-moe-small" (one Qwen3-30B-A3B-shaped
block: attention + a 128-expert top-8 `moe.fused_moe` layer behind a bf16 router).
Importing this package loads no torch: `_cli` builds its parser from `add_parser` on every command.
"""

from __future__ import annotations

MODEL_NAMES = ("llama-small", "qwen3-moe-small")  # keep in sync with block.MODELS (a contract test checks)
GLUE_CHOICES = (
    "triton",
    "torch.compile",
    "torch",
    "triton-pdl",
)  # keep in sync with glue.GLUE_CHOICES (a contract test checks)
PDL_CHOICES = ("off", "wait", "prefetch")  # gemm.blockscaled GemmQuery.pdl
L2_PREFETCH_CHOICES = ("weights", "weights+kv", "mlp")  # keep in sync with run.L2_PREFETCH_CHOICES (a test checks)
MAX_TOKENS = 64
# --step presets (the options a flag does not set). "fast", the default: the fastest decode step measured
# on the H200 (docs/performance.md, session 9: llama-small T = 1 40.3 µs vs 47.9 for "base"; 37.2 in session 10
# with the attention plan's small-batch defaults): gate_up +
# SiLU * up and down + residual as one GEMM launch each, RoPE + KV append in qkv's epilogue, every GEMM a
# programmatic dependent prefetching its weights, attention a programmatic dependent with 128-key
# minimum split chunks, the Triton glue launched the same way (seven launches); since session 12 down's
# weight loads of its first 4 K chunks issue before their math (gemm_opts, DecodeConfig.upfront: T = 1
# 36.85 -> 36.24 µs in one job). "base": the plain ten-launch step. On CPU the glue is torch and the
# rest runs the reference backends either way. gemm_opts apply where the GEMM runs the fused kernel
# (an epilogue or pdl on: `step_options`).
STEPS = {
    "fast": dict(
        fused=True,
        rope=True,
        gemm_pdl="prefetch",
        attention_pdl="wait",
        attention_min_chunk=128,
        glue="triton-pdl",
        gemm_opts={"down": "upfront=4"},
    ),  # fmt: skip
    "base": dict(
        fused=False,
        rope=False,
        gemm_pdl="off",
        attention_pdl="off",
        attention_min_chunk=None,
        glue="triton",
        gemm_opts=None,
    ),  # fmt: skip
}


def _tokens(text: str) -> int:
    import argparse

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tokens must be an int, got {text!r}") from None
    if not 1 <= n <= MAX_TOKENS:
        raise argparse.ArgumentTypeError(f"--tokens must be in [1, {MAX_TOKENS}], got {n}")
    return n


def add_parser(sub) -> None:
    """Register the `demo` subcommand on `_cli`'s subparsers (sets `func`)."""
    import argparse

    p = sub.add_parser(
        "demo",
        help="run a small decoder block through the full lifecycle (reference backends on CPU)",
        description=__doc__.split("\n\n")[1],
    )
    p.add_argument("--model", choices=MODEL_NAMES, default=MODEL_NAMES[0], help="block to build (default %(default)s)")
    p.add_argument(
        "--tokens", type=_tokens, default=1, help=f"decode batch: requests, one new token each (1..{MAX_TOKENS})"
    )
    p.add_argument("--device", default=None, help='"cuda", "cuda:N" or "cpu" (default: cuda if available, else cpu)')
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights, cache and input")
    p.add_argument(
        "--step",
        choices=tuple(STEPS),
        default="fast",
        help="decode step preset (default fast: fused epilogues, RoPE + KV append in qkv, PDL launches, seven "
        "launches; base: the plain ten-launch step); the flags below override single options",
    )
    p.add_argument(
        "--glue",
        choices=GLUE_CHOICES,
        default=None,
        help="RMSNorm / RoPE + KV append / SiLU * up / residual kernels (default: the step's on CUDA, triton-pdl for "
        "fast, triton for base; torch on CPU; triton-pdl: the Triton kernels launched as programmatic dependents)",
    )
    p.add_argument(
        "--fused-epilogues",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="dense FFN: gate_up + SiLU * up and down + residual as one GEMM launch each (default: the step's)",
    )
    p.add_argument(
        "--fused-norms",
        action="store_true",
        help="also the RMSNorms inside the qkv / gate_up GEMMs and the first residual inside o (implies "
        "--fused-epilogues)",
    )
    p.add_argument(
        "--fused-rope",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="RoPE + KV append in the qkv GEMM's epilogue, one launch less (dense blocks; default: the step's)",
    )
    p.add_argument(
        "--gemm-pdl",
        choices=PDL_CHOICES,
        default=None,
        help="launch the GEMMs as programmatic dependents (prefetch: their weights to L2 before the wait; default: "
        "the step's)",
    )
    p.add_argument(
        "--attention-pdl",
        choices=PDL_CHOICES,
        default=None,
        help="launch the decode attention as a programmatic dependent (prefetch: its first keys to L2 before the "
        "wait; default: the step's)",
    )
    p.add_argument(
        "--l2-prefetch",
        choices=("off", *L2_PREFETCH_CHOICES),
        default="off",
        help="a side branch prefetches weights into L2: the linears' (and the KV cache) from the start of each "
        "step, or (mlp) o_proj's and the MLP's from attention's start (whole-step measured slower on the H200: "
        "docs/performance.md)",
    )
    p.set_defaults(func=main)


def main(args) -> int:
    import torch

    from .run import run_demo

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print(f"b12x demo: --device {args.device} asked for CUDA, but torch sees no CUDA device (try --device cpu)")
            return 2
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        print(f"b12x demo: --device must be cuda[:N] or cpu, got {args.device}")
        return 2
    if args.glue in ("triton", "triton-pdl") and device.type != "cuda":
        print(f"b12x demo: --glue {args.glue} needs a CUDA device (use torch or torch.compile on CPU)")
        return 2
    opts = step_options(args, device.type == "cuda")
    return run_demo(args.model, args.tokens, device, seed=args.seed, **opts)


def step_options(args, cuda: bool) -> dict:
    """run_demo's step keywords: the --step preset, overridden by the flags given."""
    preset = STEPS[args.step]
    pick = lambda flag, key: preset[key] if flag is None else flag  # noqa: E731
    rope = pick(args.fused_rope, "rope")
    fused = pick(args.fused_epilogues, "fused") or args.fused_norms
    pdl = pick(args.gemm_pdl, "gemm_pdl")
    return dict(
        glue=pick(args.glue, "glue") if cuda else args.glue,  # None: torch on CPU
        fused=fused,
        pdl=pdl,
        fused_norms=args.fused_norms,
        fused_rope=rope,
        attention_pdl=pick(args.attention_pdl, "attention_pdl"),
        attention_min_chunk=preset["attention_min_chunk"],
        # the preset's GEMM options need the fused kernel: down has it with its residual epilogue or pdl
        gemm_opts=preset["gemm_opts"] if fused or pdl != "off" else None,
        l2_prefetch=None if args.l2_prefetch == "off" else args.l2_prefetch,
    )


__all__ = ["GLUE_CHOICES", "MODEL_NAMES", "PDL_CHOICES", "STEPS", "add_parser", "main", "step_options"]
