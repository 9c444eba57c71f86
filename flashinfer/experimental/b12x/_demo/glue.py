"""The decode step's glue: RMSNorm, residual + RMSNorm, RoPE + KV append + q write, SiLU * up and the
final residual add, as plain torch (the CPU path and the tests' oracle) and as one Triton launch each.

Every Triton kernel reproduces the torch function's fp32 math on bf16 inputs, step for step:
- rmsnorm: x.float() * rsqrt(mean(x^2) + eps) * w.float() -> bf16. With a residual, x1 = bf16(x + r)
  is written first and normalized as stored (torch.add on bf16 rounds the sum). The sum of squares
  is reduced in another order than torch's: a bf16 output can differ by one ulp on rare elements.
- rope + kv append: NeoX rotate-half, x1 * c - x2 * s and x2 * c + x1 * s, products rounded before
  the add (FMA contraction off, as torch's separate elementwise kernels round them) -> bf16 q, K
  page rows; V copied. Bitwise equal to torch.
- silu * up: silu(g) = g / (1 + exp(-g)) (division rounded, tl.div_rn; exp is Triton's ex2-based
  exp, a few fp32 ulps from expf) times up -> bf16: one bf16 ulp off torch on rare elements.
- add: bf16(a + b), bitwise equal to torch.add.

Launch shapes (T tokens; llama-small H = 2048, Hq/Hkv = 16/4 x 128, I = 5632): rmsnorm one program
per token (the row in one tile); rope grid (T, Hq + 2 Hkv), one head each; silu and add
1024-element tiles. Bytes moved are tiny (T x 4-22 KB per kernel): each launch is latency-bound, so
the point is one launch per op, not bandwidth.

On CUDA the kernels are resolved through `_lib.compile` (`demo.glue`, Triton backend: the disk cache
is Triton's own under the b12x cache dir; resolution obeys freeze): build `TritonGlue` before
freezing, or after an earlier `TritonGlue` of the same shapes put them in memory. T is a runtime
argument (never specialized), so one compile serves every decode batch.

Glue "triton-pdl" (`TritonGlue(pdl=True)`): the same kernels launched as programmatic dependents
(Triton's launch_pdl): each program first waits for the kernel before it (griddepcontrol.wait: its
writes visible) and then lets the next kernel launch (launch_dependents), so a GEMM launched with
gemm.blockscaled's pdl="prefetch" after a glue kernel gets its CTAs resident and its weights on the
way to L2 while the glue runs. Bits unchanged (the PDL constexpr only adds the two instructions).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from .._lib.compile import kernel
from .._lib.triton_build import interpreting, jit_options, pdl_constexpr
from .._lib.triton_pdl import gdc_enter
from . import GLUE_CHOICES
from .block import apply_rope, rms_norm


# ---- torch (the CPU path and the oracle) ---------------------------------------------------------
def rmsnorm_into(x, weight, eps: float, out, residual=None, residual_out=None):
    """out = rmsnorm(x + residual) (fp32 math); residual_out receives x + residual when given."""
    if residual is not None:
        torch.add(x, residual, out=residual_out)
        x = residual_out
    out.copy_(rms_norm(x, weight, eps))


def rope_append_into(qkv, cos, sin, q_out, k_cache, v_cache, slot_page, slot_off, hq: int, hkv: int, d: int):
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    t = q.shape[0]
    q_out.copy_(apply_rope(q.reshape(t, hq, d), cos, sin))
    k_cache[slot_page, slot_off] = apply_rope(k.reshape(t, hkv, d), cos, sin).to(k_cache.dtype)
    v_cache[slot_page, slot_off] = v.reshape(t, hkv, d)


def silu_mul_into(gu, out):
    gate, up = gu.chunk(2, dim=-1)
    out.copy_(torch.nn.functional.silu(gate.float()) * up.float())


def add_into(a, b, out):
    torch.add(a, b, out=out)


TORCH_GLUE = {"rmsnorm": rmsnorm_into, "rope_append": rope_append_into, "silu_mul": silu_mul_into, "add": add_into}


# ---- Triton kernels ------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["eps"])
def _rmsnorm_kernel(
    x_ptr,  # x [T, H] bf16
    r_ptr,  # residual [T, H] (read when RESIDUAL)
    w_ptr,  # norm weight [H]
    x1_ptr,  # x + residual [T, H] (written when RESIDUAL)
    out_ptr,  # rmsnorm [T, H]
    eps,
    H: tl.constexpr,
    BLOCK_H: tl.constexpr,  # next power of two >= H: the row in one tile
    RESIDUAL: tl.constexpr,
    PDL: tl.constexpr,  # 1: launched as a programmatic dependent (gdc_enter)
):
    gdc_enter(PDL)
    row = tl.program_id(0).to(tl.int64) * H
    cols = tl.arange(0, BLOCK_H)
    m = cols < H
    x = tl.load(x_ptr + row + cols, mask=m, other=0.0).to(tl.float32)
    if RESIDUAL:  # torch.add on bf16: the sum rounded to bf16, then normalized as stored
        s = (x + tl.load(r_ptr + row + cols, mask=m, other=0.0).to(tl.float32)).to(x1_ptr.dtype.element_ty)
        tl.store(x1_ptr + row + cols, s, mask=m)
        x = s.to(tl.float32)
    inv = tl.math.rsqrt(tl.sum(x * x, axis=0) / H + eps)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + row + cols, (x * inv * w).to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def _rope_append_kernel(
    qkv_ptr,  # qkv GEMM output [T, (HQ + 2 HKV) D]: q heads, k heads, v heads
    cos_ptr,  # fp32 [T, D/2]
    sin_ptr,  # fp32 [T, D/2]
    q_ptr,  # rotated q [T, HQ, D]
    k_cache_ptr,  # [pages, PAGE, HKV, D]: row (slot_page * PAGE + slot_off) receives rotated k
    v_cache_ptr,  # same layout: receives v
    slot_page_ptr,  # int64 [T]
    slot_off_ptr,  # int64 [T]
    HQ: tl.constexpr,
    HKV: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    PDL: tl.constexpr,
):
    gdc_enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)  # one head of the HQ + 2 HKV in the qkv row
    HALF: tl.constexpr = D // 2
    i = tl.arange(0, HALF)
    src = qkv_ptr + t * ((HQ + 2 * HKV) * D) + h * D
    x1 = tl.load(src + i)
    x2 = tl.load(src + HALF + i)
    if h < HQ + HKV:
        c = tl.load(cos_ptr + t * HALF + i)
        s = tl.load(sin_ptr + t * HALF + i)
        a, b = x1.to(tl.float32), x2.to(tl.float32)
        if h < HQ:
            dst = q_ptr + (t * HQ + h) * D
        else:
            slot = tl.load(slot_page_ptr + t) * PAGE + tl.load(slot_off_ptr + t)
            dst = k_cache_ptr + (slot * HKV + (h - HQ)) * D
        tl.store(dst + i, (a * c - b * s).to(dst.dtype.element_ty))
        tl.store(dst + HALF + i, (b * c + a * s).to(dst.dtype.element_ty))
    else:
        slot = tl.load(slot_page_ptr + t) * PAGE + tl.load(slot_off_ptr + t)
        dst = v_cache_ptr + (slot * HKV + (h - HQ - HKV)) * D
        tl.store(dst + i, x1.to(dst.dtype.element_ty))
        tl.store(dst + HALF + i, x2.to(dst.dtype.element_ty))


@triton.jit
def _silu_mul_kernel(
    gu_ptr,  # gate_up GEMM output [T, 2 INTER]: gate columns, then up columns
    out_ptr,  # [T, INTER]
    INTER: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    gdc_enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < INTER
    g = tl.load(gu_ptr + t * (2 * INTER) + cols, mask=m, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + t * (2 * INTER) + INTER + cols, mask=m, other=0.0).to(tl.float32)
    act = tl.div_rn(g, 1.0 + tl.exp(-g))
    tl.store(out_ptr + t * INTER + cols, (act * u).to(out_ptr.dtype.element_ty), mask=m)


@triton.jit(do_not_specialize=["n"])
def _add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr, PDL: tl.constexpr):  # out = a + b, flat [n]
    gdc_enter(PDL)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(a_ptr + offs, mask=m, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (a + b).to(out_ptr.dtype.element_ty), mask=m)


# ---- launchers (the interpret tier calls these on CPU tensors) and compile functions -------------
# No FMA contraction: torch's eager glue rounds each product before the add (rope's a*c - b*s).
FP_FUSION = False
ELEMENT_BLOCK = 1024  # silu / add tiles: 8 bf16 (16 B) per thread at 4 warps
NORM_WARPS = 8  # H = 2048: 8 values per thread


def _opts(pdl: bool = False) -> dict:
    """Launch / warmup options (no FMA contraction) and the PDL constexpr: `_lib.triton_build`."""
    return jit_options(pdl, fp_fusion=FP_FUSION) | {"PDL": pdl_constexpr(pdl)}


def launch_rmsnorm(hidden: int, residual: bool, x, weight, eps, out, r=None, x1=None, *, pdl=False):
    t = x.shape[0]
    if t == 0:
        return
    _rmsnorm_kernel[(t,)](
        x, r if residual else x, weight, x1 if residual else out, out, float(eps),
        H=hidden, BLOCK_H=triton.next_power_of_2(hidden), RESIDUAL=residual, num_warps=NORM_WARPS, **_opts(pdl),
    )  # fmt: skip


def launch_rope_append(
    hq: int, hkv: int, d: int, page: int, qkv, cos, sin, q, k_cache, v_cache, slot_page, slot_off, *, pdl=False
):
    t = qkv.shape[0]
    if t == 0:
        return
    _rope_append_kernel[(t, hq + 2 * hkv)](
        qkv, cos, sin, q, k_cache, v_cache, slot_page, slot_off, HQ=hq, HKV=hkv, D=d, PAGE=page, num_warps=1,
        **_opts(pdl),
    )  # fmt: skip


def launch_silu_mul(inter: int, gu, out, *, pdl=False):
    t = gu.shape[0]
    if t == 0:
        return
    _silu_mul_kernel[(t, triton.cdiv(inter, ELEMENT_BLOCK))](
        gu, out, INTER=inter, BLOCK=ELEMENT_BLOCK, num_warps=4, **_opts(pdl)
    )


def launch_add(a, b, out, *, pdl=False):
    n = out.numel()
    if n == 0:
        return
    _add_kernel[(triton.cdiv(n, ELEMENT_BLOCK),)](a, b, out, n, BLOCK=ELEMENT_BLOCK, num_warps=4, **_opts(pdl))


_TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _fake(dtype: str | torch.dtype):
    return triton.runtime.jit.MockTensor(_TORCH_DTYPES.get(dtype, dtype))


@kernel("demo.glue", backend="triton")
def compile_rmsnorm(
    dtype: str, weight_dtype: str, hidden: int, residual: bool, device_index: int, arch: str, pdl: bool = False
):
    """rmsnorm (residual=False) or residual add + rmsnorm over a [T, hidden] row block (pdl: launched
    as a programmatic dependent, module docstring)."""
    a = _fake(dtype)
    with torch.cuda.device(device_index):
        _rmsnorm_kernel.warmup(
            a, a, _fake(weight_dtype), a, a, 1e-5, H=hidden, BLOCK_H=triton.next_power_of_2(hidden),
            RESIDUAL=residual, num_warps=NORM_WARPS, grid=(1,), **_opts(pdl),
        )  # fmt: skip
    return functools.partial(launch_rmsnorm, hidden, residual, pdl=pdl)


@kernel("demo.glue", backend="triton")
def compile_rope_append(
    dtype: str, hq: int, hkv: int, d: int, page: int, device_index: int, arch: str, pdl: bool = False
):
    """RoPE of q and k, q written, k and v appended to the paged cache (of `dtype` too) at (slot_page, slot_off)."""
    a, f32, i64 = _fake(dtype), _fake(torch.float32), _fake(torch.int64)
    with torch.cuda.device(device_index):
        _rope_append_kernel.warmup(
            a, f32, f32, a, a, a, i64, i64, HQ=hq, HKV=hkv, D=d, PAGE=page, num_warps=1, grid=(1,), **_opts(pdl)
        )
    return functools.partial(launch_rope_append, hq, hkv, d, page, pdl=pdl)


@kernel("demo.glue", backend="triton")
def compile_silu_mul(dtype: str, inter: int, device_index: int, arch: str, pdl: bool = False):
    """silu(gate) * up from the gate_up GEMM's [T, 2 inter] output."""
    a = _fake(dtype)
    with torch.cuda.device(device_index):
        _silu_mul_kernel.warmup(a, a, INTER=inter, BLOCK=ELEMENT_BLOCK, num_warps=4, grid=(1,), **_opts(pdl))
    return functools.partial(launch_silu_mul, inter, pdl=pdl)


@kernel("demo.glue", backend="triton")
def compile_add(dtype: str, device_index: int, arch: str, pdl: bool = False):
    """out = a + b (the block's final residual)."""
    a = _fake(dtype)
    with torch.cuda.device(device_index):
        _add_kernel.warmup(a, a, a, 1, BLOCK=ELEMENT_BLOCK, num_warps=4, grid=(1,), **_opts(pdl))
    return functools.partial(launch_add, pdl=pdl)


# ---- host -----------------------------------------------------------------------------------------
def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check(name: str, t, shape: tuple, dtype: torch.dtype, device: torch.device) -> None:
    ok = isinstance(t, torch.Tensor)
    if ok and tuple(t.shape) == tuple(shape) and t.dtype == dtype and t.device == device and t.is_contiguous():
        return
    got = (
        f"{_dtype_name(t.dtype)} {list(t.shape)} on {t.device}{'' if t.is_contiguous() else ' (strided)'}"
        if ok
        else type(t).__name__
    )
    raise ValueError(f"{name} must be a contiguous {_dtype_name(dtype)} {list(shape)} tensor on {device}, got {got}")


class TritonGlue:
    """The glue of one block shape as Triton launches, with the torch functions' signatures.

    spec: a `block.BlockSpec` (its page_size is the paged KV cache's, which holds `dtype` too). On
    CUDA the kernels are compiled (or loaded from Triton's disk cache) here, so constructing this
    before capture and before freeze is the warm-up; on CPU tensors it runs the launchers under the
    Triton interpreter (TRITON_INTERPRET=1, the interpret tier), and refuses otherwise. pdl: every
    kernel launched as a programmatic dependent (glue "triton-pdl", module docstring).
    """

    def __init__(self, spec, device: torch.device, dtype=torch.bfloat16, pdl: bool = False):
        from .._lib.arch import target_arch

        self.spec, self.device, self.dtype = spec, torch.device(device), dtype
        hq, hkv, d, page = spec.q_heads, spec.kv_heads, spec.head_dim, spec.page_size
        if d % 2 or (d // 2) & (d // 2 - 1):
            raise ValueError(f"spec.head_dim must be twice a power of two (one rope half per tile), got {d}")
        if self.device.type == "cuda":
            idx = self.device.index if self.device.index is not None else torch.cuda.current_device()
            self.device = torch.device("cuda", idx)
            arch, act = target_arch(self.device), _dtype_name(dtype)
            wdt = act  # the checkpoint's norm weights are bf16, as the activations
            self._norm = compile_rmsnorm(act, wdt, spec.hidden, False, idx, arch, pdl)
            self._add_norm = compile_rmsnorm(act, wdt, spec.hidden, True, idx, arch, pdl)
            self._rope = compile_rope_append(act, hq, hkv, d, page, idx, arch, pdl)
            self._silu = compile_silu_mul(act, spec.intermediate, idx, arch, pdl) if spec.moe is None else None
            self._add = compile_add(act, idx, arch, pdl)
        elif interpreting():
            self._norm = functools.partial(launch_rmsnorm, spec.hidden, False)
            self._add_norm = functools.partial(launch_rmsnorm, spec.hidden, True)
            self._rope = functools.partial(launch_rope_append, hq, hkv, d, page)
            self._silu = functools.partial(launch_silu_mul, spec.intermediate) if spec.moe is None else None
            self._add = launch_add
        else:
            raise ValueError(f"device must be cuda (or cpu under TRITON_INTERPRET=1), got {device}")

    def rmsnorm(self, x, weight, eps: float, out, residual=None, residual_out=None):
        """out = rmsnorm(x + residual); residual_out receives x + residual when given."""
        h, dev = self.spec.hidden, self.device
        t = x.shape[0]
        for name, v in (("x", x), ("out", out)) + (() if residual is None else (("residual", residual),)):
            _check(name, v, (t, h), self.dtype, dev)
        _check("weight", weight, (h,), self.dtype, dev)
        if residual is None:
            self._norm(x, weight, eps, out)
        else:
            _check("residual_out", residual_out, (t, h), self.dtype, dev)
            self._add_norm(x, weight, eps, out, residual, residual_out)

    def rope_append(self, qkv, cos, sin, q_out, k_cache, v_cache, slot_page, slot_off, hq: int, hkv: int, d: int):
        s, dev = self.spec, self.device
        if (hq, hkv, d) != (s.q_heads, s.kv_heads, s.head_dim):
            raise ValueError(
                f"heads (hq, hkv, d) must be the spec's {(s.q_heads, s.kv_heads, s.head_dim)}, got {(hq, hkv, d)}"
            )
        t = qkv.shape[0]
        _check("qkv", qkv, (t, (hq + 2 * hkv) * d), self.dtype, dev)
        _check("cos", cos, (t, d // 2), torch.float32, dev)
        _check("sin", sin, (t, d // 2), torch.float32, dev)
        _check("q_out", q_out, (t, hq, d), self.dtype, dev)
        pages = k_cache.shape[0]
        _check("k_cache", k_cache, (pages, s.page_size, hkv, d), self.dtype, dev)
        _check("v_cache", v_cache, (pages, s.page_size, hkv, d), self.dtype, dev)
        _check("slot_page", slot_page, (t,), torch.int64, dev)
        _check("slot_off", slot_off, (t,), torch.int64, dev)
        self._rope(qkv, cos, sin, q_out, k_cache, v_cache, slot_page, slot_off)

    def silu_mul(self, gu, out):
        if self._silu is None:
            raise ValueError(f"silu_mul: {self.spec.name} is a MoE block (no dense MLP glue was compiled)")
        t, i = gu.shape[0], self.spec.intermediate
        _check("gu", gu, (t, 2 * i), self.dtype, self.device)
        _check("out", out, (t, i), self.dtype, self.device)
        self._silu(gu, out)

    def add(self, a, b, out):
        for name, v in (("a", a), ("b", b)):
            _check(name, v, tuple(out.shape), self.dtype, self.device)
        _check("out", out, tuple(out.shape), self.dtype, self.device)
        self._add(a, b, out)

    @property
    def kernel_count(self) -> int:
        return sum(f is not None for f in (self._norm, self._add_norm, self._rope, self._silu, self._add))

    def functions(self) -> dict:
        """{glue name: callable} with TORCH_GLUE's names and signatures."""
        return {"rmsnorm": self.rmsnorm, "rope_append": self.rope_append, "silu_mul": self.silu_mul, "add": self.add}


def default_choice(device) -> str:
    return "triton" if torch.device(device).type == "cuda" else "torch"


def warm(choice: str, spec, device) -> int:
    """Compile or load, now, the kernels `choice` would resolve when a step is built (call it before
    freezing): the Triton glue's launchers; "torch.compile" compiles at the first call instead, and
    "torch" has none. Returns how many kernels were resolved."""
    if choice not in GLUE_CHOICES:
        raise ValueError(f"glue must be one of {GLUE_CHOICES}, got {choice!r}")
    if choice.startswith("triton"):
        return TritonGlue(spec, device, pdl=choice == "triton-pdl").kernel_count
    return 0


def make_glue(choice: str, spec, device: torch.device) -> dict:
    """{glue name: callable} for `choice` ("triton" | "triton-pdl" | "torch.compile" | "torch")."""
    if choice in ("triton", "triton-pdl"):
        return TritonGlue(spec, device, pdl=choice == "triton-pdl").functions()
    if choice == "torch.compile":
        return {name: torch.compile(f, dynamic=False) for name, f in TORCH_GLUE.items()}
    if choice == "torch":
        return dict(TORCH_GLUE)
    raise ValueError(f"glue must be one of {GLUE_CHOICES}, got {choice!r}")
