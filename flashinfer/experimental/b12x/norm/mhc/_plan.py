"""norm.mhc plan: Caps (static geometry), MhcPlan (the compile jobs, workspace and priming of a
selection) and plan(); synthetic_inputs for priming, tests and benchmarks. Pure: nothing here
allocates or compiles until a PreparationSession prepares the plan."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..._lib.arch import resolve_device
from ...preparation.plan import Plan
from ._config import MhcConfig, RowConfig, default_config, workspace_rows
from .reference import MIXES, MULT

OP = "norm.mhc"
FORMS = ("pre", "post", "post_pre", "bcast")  # bcast: run_pre on x [T, H] (the first layer)
_DTYPES = (torch.bfloat16, torch.float16)
HIDDEN_MULTIPLE, MIN_HIDDEN, MAX_HIDDEN = 128, 256, 16384
DEFAULT_SM_COUNT = 132  # an H200; used only to size workspace without a CUDA device at hand


@dataclass(frozen=True, kw_only=True)
class Caps:
    """Static geometry and capacity of one mHC instance (every layer of a model can share it).

    split_k: splits of the 4H reduction in pass 1 for every T; None picks them per live T to fill
    the GPU (more splits at small T). The workspace is sized for the largest case either way.
    """

    device: torch.device | str
    max_tokens: int
    hidden_size: int
    dtype: torch.dtype = torch.bfloat16
    split_k: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", resolve_device(self.device))
        if not _is_int(self.max_tokens) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if not _hidden_ok(self.hidden_size):
            raise ValueError(
                f"hidden_size {self.hidden_size!r} is not supported by {OP}: it must be a multiple of "
                f"{HIDDEN_MULTIPLE} in [{MIN_HIDDEN}, {MAX_HIDDEN}] (e.g. 2048, 4096, 5120, 7168)"
            )
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be torch.bfloat16 or torch.float16, got {self.dtype}")
        if self.split_k is not None and (not _is_int(self.split_k) or self.split_k < 1):
            raise ValueError(f"split_k must be None or an int >= 1, got {self.split_k!r}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _hidden_ok(h) -> bool:
    return _is_int(h) and h % HIDDEN_MULTIPLE == 0 and MIN_HIDDEN <= h <= MAX_HIDDEN


def _sm_count(device) -> int:
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(dev).multi_processor_count
    return DEFAULT_SM_COUNT


@dataclass(frozen=True)
class MhcPlan(Plan):
    """Plan of norm.mhc; `invocation` is the tuple of forms to prepare (default: all of FORMS)."""

    def forms(self) -> tuple[str, ...]:
        return FORMS if self.invocation is None else self.invocation

    def heuristic(self, arch):
        """The default tiles (an override stands in, so memory_requirements sizes what runs)."""
        return self.override if self.override is not None else default_config(arch)

    def kernels(self, config, arch):
        from ._kernel import compile_apply, compile_split_fn, compile_stream
        from ._kernel_fused import compile_fused
        from ._kernel_last import compile_last
        from ._kernel_row import compile_row
        from ._kernel_small import compile_small
        from ._kernel_tiny import compile_tiny
        from ._kernel_walk import compile_walk
        from ._kernel_wide import compile_wide

        caps, dt = self.caps, _dname(self.caps.dtype)
        dev = caps.device.index or 0
        jobs = []
        for form in config.forms_needed(self.forms(), caps.max_tokens):
            for cfg in config.pass1_tiles(form, self.forms(), caps.max_tokens):
                jobs.append((compile_stream, (form, dt, caps.hidden_size, cfg, dev, arch)))
            if form not in self.forms():
                continue  # a pass 1 that post_pre_split borrows: no pass 2 / small jobs of its own
            if form != "post" and config.small is not None:
                for wdt in dict.fromkeys((dt, "float32")):
                    jobs.append((compile_small, (form, dt, caps.hidden_size, wdt, config.small, dev, arch)))
            if form != "post" and config.tiny is not None:
                tile = config.stream(form, 1)
                jobs.append((compile_tiny, (form, dt, caps.hidden_size, tile, config.tiny, dev, arch)))
            if form != "post" and config.last is not None:
                for wdt in dict.fromkeys((dt, "float32")):
                    jobs.append((compile_last, (form, dt, caps.hidden_size, wdt, config.last, dev, arch)))
            if form != "post":
                for wide in config.wides(caps.max_tokens, self.forms()):
                    jobs.append((compile_wide, (dt, caps.hidden_size, wide, dev, arch)))
            if form != "post":  # pass 2 serves pre, post_pre and bcast alike
                for tile in config.pass2_tiles(caps.max_tokens, self.forms(), caps.hidden_size):
                    if isinstance(tile, RowConfig) and tile.walk:  # no norm weight: one job
                        jobs.append((compile_walk, (dt, caps.hidden_size, tile, dev, arch)))
                        continue
                    k = compile_row if isinstance(tile, RowConfig) else compile_apply
                    for wdt in dict.fromkeys((dt, "float32")):
                        jobs.append((k, (dt, caps.hidden_size, wdt, tile, dev, arch)))
        if config.fn_split_needed(self.forms(), caps.max_tokens):
            jobs.append((compile_split_fn, (dt, caps.hidden_size, dev, arch)))
        for form in config.fused_forms(self.forms(), caps.max_tokens):
            for wdt in dict.fromkeys((dt, "float32")):
                jobs.append((compile_fused, (form, dt, caps.hidden_size, wdt, config.fused_tile(form), dev, arch)))
        return tuple(dict.fromkeys(jobs))

    def workspace_rows(self, config, device) -> int:
        caps, sms = self.caps, _sm_count(device)
        return workspace_rows(config, self.forms(), caps.hidden_size, caps.max_tokens, config.ctas_per_sm * sms,
                              caps.split_k, sms=sms)  # fmt: skip

    def scratch_specs(self, config=None, device="cuda"):
        from ..._lib.scratch import ScratchBufferSpec

        if torch.device(device).type != "cuda":
            return ()  # the reference backend needs no workspace
        config = config or self.heuristic(None)
        rows = self.workspace_rows(config, device)
        specs = (
            ScratchBufferSpec("partials", (max(rows, 1), 32), torch.float32, device),
            # the one-launch paths' ticket counters, one per token block (0 between calls; prime
            # zeroes them, and each call's finishers reset theirs)
            ScratchBufferSpec("counter", (config.counters(self.forms(), self.caps.max_tokens),), torch.int32, device),
        )
        if config.fn_split_needed(self.forms(), self.caps.max_tokens):  # fn as hi, lo (fn_split="pre"/"hi")
            shape = (2, MIXES, MULT * self.caps.hidden_size)
            specs += (ScratchBufferSpec("fn_split", shape, self.caps.dtype, device),)
        return specs

    def prime(self, state) -> None:
        """Run every prepared form once at a small and (when it fits) a large T on random inputs."""
        from .api import run_post, run_post_pre, run_pre

        caps = self.caps
        if "counter" in state.scratch:
            state.scratch["counter"].zero_()
        gen = torch.Generator(device=caps.device).manual_seed(0)
        sel = state.selection
        sizes = {1, min(caps.max_tokens, sel.fused_min_tokens), min(caps.max_tokens, sel.small_max_tokens + 1)}
        if sel.pre_mid is not None or sel.row_mid is not None:  # the mid tiles and the large ones
            sizes.add(min(caps.max_tokens, sel.mid_max_tokens + 1))
        sizes = sorted(sizes)
        for t in sizes:
            ins = synthetic_inputs(t, caps.hidden_size, dtype=caps.dtype, device=caps.device, generator=gen)
            kw = dict(rms_eps=1e-6, hc_eps=1e-6, sinkhorn_iters=2, plan=self)
            for w in (ins["w_act"], ins["w_f32"]):
                if "pre" in self.forms():
                    run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], norm_weight=w, **kw)
                if "bcast" in self.forms():
                    run_pre(ins["x"], ins["fn"], ins["hc_scale"], ins["hc_base"], norm_weight=w, **kw)
                if "post_pre" in self.forms():
                    args = (ins["x"], ins["residual"], ins["post"], ins["comb"], ins["fn"], ins["hc_scale"])
                    run_post_pre(*args, ins["hc_base"], norm_weight=w, **kw)
            if "post" in self.forms():
                run_post(ins["x"], ins["residual"], ins["post"], ins["comb"], plan=self)


def synthetic_inputs(tokens: int, hidden: int, *, dtype=torch.bfloat16, device="cpu", generator=None) -> dict:
    """Random inputs of one call (priming, tests, benchmarks), never zeros: residual, x, fn,
    hc_scale, hc_base, post, comb (a softmax), and norm weights w_act (dtype) and w_f32."""
    dt, h = dtype, hidden
    g = dict(device=device, generator=generator)
    comb = torch.softmax(torch.randn(tokens, MULT, MULT, **g), -1)
    return dict(
        residual=torch.randn(tokens, MULT, h, **g).to(dt),
        x=torch.randn(tokens, h, **g).to(dt),
        fn=torch.randn(MIXES, MULT * h, **g) / math.sqrt(MULT * h),
        hc_scale=torch.rand(3, **g) + 0.5,
        hc_base=torch.randn(MIXES, **g) * 0.5,
        post=2 * torch.rand(tokens, MULT, **g),
        comb=comb,
        w_act=(1 + 0.1 * torch.randn(h, **g)).to(dt),
        w_f32=1 + 0.1 * torch.randn(h, **g),
    )


def plan(caps: Caps, *, invocation=None, override=None) -> MhcPlan:
    """A pure, hashable plan (allocates and compiles nothing).

    invocation: None (prepare every form) or a tuple of forms from FORMS ("pre", "post",
    "post_pre", "bcast") to prepare only those. override: an MhcConfig to use instead of the
    heuristic (and of any cached autotune selection).
    """
    if not isinstance(caps, Caps):
        raise TypeError(f"caps must be a norm.mhc Caps, got {type(caps).__name__}")
    if invocation is not None:
        invocation = tuple(invocation) if not isinstance(invocation, str) else (invocation,)
        bad = [f for f in invocation if f not in FORMS]
        if bad or not invocation:
            raise ValueError(f"invocation must be None or a non-empty tuple of {FORMS}, got {invocation!r}")
        invocation = tuple(f for f in FORMS if f in invocation)
    if override is not None:
        if not isinstance(override, MhcConfig):
            raise TypeError(f"override must be an MhcConfig, got {type(override).__name__}")
        for form in FORMS:
            for cfg in override.streams(form) + (override.fused_tile(form),) * (form != "post"):
                if cfg is None:
                    continue
                if caps.hidden_size % cfg.block_h:
                    raise ValueError(
                        f"override: {form} tile block_h={cfg.block_h} must divide hidden_size={caps.hidden_size}"
                    )
        if override.last is not None and caps.hidden_size % override.last.block_h:
            raise ValueError(
                f"override: last.block_h={override.last.block_h} must divide hidden_size={caps.hidden_size}"
            )
    return MhcPlan(op=OP, caps=caps, invocation=invocation, override=override)


def _dname(dtype) -> str:
    return str(dtype).removeprefix("torch.")
