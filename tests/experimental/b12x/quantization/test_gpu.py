"""GPU tier: both quantizers bitwise equal to the oracles on the device, plus the serving contract.

Fresh random inputs every case, outputs poisoned with 0xFF bytes first (a byte the kernels never
leave behind: 0xFF is an E4M3 NaN and a UE8M0 NaN, and two -6 codes), extreme inputs (zero, NaN,
Inf, huge, subnormal blocks; tiny and huge global scales), live M below capacity, CUDA-graph
capture and replay, a side stream, freeze (a new K raises, a new M does not), alignment errors.
The oracles run on the same device (`_lib/quant` is device-independent by construction).
"""

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib.freeze import KernelResolutionFrozenError
from flashinfer.experimental.b12x._lib.quant import (
    nvfp4_global_scale,
    quantize_mxfp8,
    quantize_nvfp4,
    swizzle_scales,
    swizzled_size,
)
from flashinfer.experimental.b12x.quantization.mxfp8 import _kernel as mx_kernel
from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv_kernel

pytestmark = pytest.mark.gpu

nvfp4 = b12x.quantization.nvfp4
mxfp8 = b12x.quantization.mxfp8
MS = [1, 7, 128, 4097]
KS = [32, 64, 4096, 7168, 16384]
POISON = 0xFF


def _prepare(session, p):
    session.prepare([p])
    return p


def _random(m, k, dtype, seed):
    """randn with a log-uniform magnitude per 16 elements (10 decades for bf16, 6 for fp16, whose
    range is narrower: no overflow to Inf) and some all-zero blocks."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g)
    decades = 10 if dtype == torch.bfloat16 else 6
    scale = 10 ** ((torch.rand(m, k // 16, 1, device="cuda", generator=g) - 0.5) * decades)
    keep = (torch.rand(m, k // 16, 1, device="cuda", generator=g) > 0.02).float()
    return (x.view(m, k // 16, 16) * scale * keep).view(m, k).to(dtype)


def _extreme(m, k, dtype, seed, block):
    """Blocks of one kind each: zero (with a -0), one NaN, all NaN, one +-Inf, up to the dtype's
    max, subnormals of the dtype, all negative, plain."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    finfo = torch.finfo(dtype)
    x = torch.randn(m, k, device="cuda", generator=g)
    blocks = x.view(-1, block)
    n = blocks.shape[0]
    kind = torch.randint(0, 8, (n, 1), device="cuda", generator=g)
    one = torch.zeros_like(blocks, dtype=torch.bool)
    one.scatter_(1, torch.randint(0, block, (n, 1), device="cuda", generator=g), True)
    amax = blocks.abs().amax(dim=1, keepdim=True)
    inf = torch.where(torch.rand(n, 1, device="cuda", generator=g) < 0.5, float("inf"), float("-inf"))
    out = torch.where(kind == 0, torch.where(one, -0.0, 0.0), blocks)
    out = torch.where((kind == 1) & one, float("nan"), out)
    out = torch.where(kind == 2, float("nan"), out)
    out = torch.where((kind == 3) & one, inf, out)
    out = torch.where(kind == 4, out * (finfo.max / amax), out)
    out = torch.where(kind == 5, out * (finfo.smallest_normal / 8), out)
    out = torch.where(kind == 6, -out.abs(), out)
    return out.view(m, k).to(dtype)


def _poison_nvfp4(out):
    out.packed.fill_(POISON)
    out.scales.view(torch.uint8).fill_(POISON)


def _check_nvfp4(out, x, gs):
    m, k = x.shape
    ref_packed, ref_scales = quantize_nvfp4(x, gs)
    packed, scales = out.view(m)
    torch.cuda.synchronize()
    assert torch.equal(packed, ref_packed), _first_diff(packed, ref_packed)
    want = swizzle_scales(ref_scales, 0).view(torch.uint8)
    assert torch.equal(scales.view(torch.uint8), want), _first_diff(scales.view(torch.uint8), want)
    assert (out.packed[m:] == POISON).all() and (out.scales.view(torch.uint8)[want.numel() :] == POISON).all()


def run_nvfp4_config(session, cfg, m, k, gs_values, seed):
    """A plan of M x K with the NVFP4 config `cfg` (block_k capped to K) through `session`, run on one
    random bf16 input at each global scale, outputs poisoned before each run and checked bitwise
    against the reference (the candidate files' loop: test_gpu_nvfp4_s7)."""
    p = nvfp4.plan(m, k, override=nv_kernel.capped_config(k, cfg))
    session.prepare([p])
    out = nvfp4.allocate_outputs(p)
    x = _random(m, k, torch.bfloat16, seed)
    for gs in gs_values:
        g = torch.tensor([gs], device="cuda", dtype=torch.float32)
        _poison_nvfp4(out)
        nvfp4.run(plan=p, x=x, global_scale=g, outputs=out)
        _check_nvfp4(out, x, g[0])
    session.release([p])


def _first_diff(got, want):
    idx = (got != want).nonzero()
    first = tuple(idx[0].tolist())
    return f"{idx.shape[0]} bytes differ, first at {first}: got {int(got[first])}, want {int(want[first])}"


# -- NVFP4 ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("m", MS)
def test_nvfp4_random_bitwise(session, m, k):
    p = _prepare(session, nvfp4.plan(m, k))
    out = nvfp4.allocate_outputs(p)
    for seed, as_tensor in ((m * 7 + k, True), (m * 7 + k + 1, False)):
        x = _random(m, k, torch.bfloat16, seed)
        gs = nvfp4_global_scale(x)
        _poison_nvfp4(out)
        nvfp4.run(plan=p, x=x, global_scale=gs.reshape(1) if as_tensor else float(gs), outputs=out)
        _check_nvfp4(out, x, gs)


@pytest.mark.parametrize("m, k", [(7, 64), (4097, 7168), (128, 16384)])
def test_nvfp4_float16_bitwise(session, m, k):
    p = _prepare(session, nvfp4.plan(m, k, invocation=torch.float16))
    out = nvfp4.allocate_outputs(p)
    x = _random(m, k, torch.float16, 11)
    gs = nvfp4_global_scale(x)
    _poison_nvfp4(out)
    nvfp4.run(plan=p, x=x, global_scale=gs.reshape(1), outputs=out)
    _check_nvfp4(out, x, gs)


@pytest.mark.parametrize("gs", [1.0, 2.0**-100, 1e-20, 1e30, 3e38, "amax"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_nvfp4_extreme_inputs(session, dtype, gs):
    m, k = 300, 4096
    p = _prepare(session, nvfp4.plan(m, k, invocation=dtype))
    out = nvfp4.allocate_outputs(p)
    x = _extreme(m, k, dtype, 5, 16)
    if gs == "amax":
        gs = float(nvfp4_global_scale(x))
    _poison_nvfp4(out)
    nvfp4.run(plan=p, x=x, global_scale=gs, outputs=out)
    _check_nvfp4(out, x, gs)


def test_nvfp4_live_rows_below_capacity(session):
    p = _prepare(session, nvfp4.plan(4097, 7168))
    out = nvfp4.allocate_outputs(p)
    for m in (7, 129, 0, 4097, 1):
        x = _random(m, 7168, torch.bfloat16, m)
        _poison_nvfp4(out)
        nvfp4.run(plan=p, x=x, global_scale=torch.tensor([3.0], device="cuda"), outputs=out)
        _check_nvfp4(out, x, 3.0)


def test_nvfp4_graph_replay_equals_eager(session):
    p = _prepare(session, nvfp4.plan(256, 4096))
    out = nvfp4.allocate_outputs(p)
    x = torch.empty(100, 4096, dtype=torch.bfloat16, device="cuda")
    gs = torch.empty(1, device="cuda")
    x.copy_(_random(100, 4096, torch.bfloat16, 1))
    gs.fill_(5.0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        nvfp4.run(plan=p, x=x, global_scale=gs, outputs=out)
    for seed, value in ((2, 0.25), (3, 7000.0)):
        x.copy_(_random(100, 4096, torch.bfloat16, seed))
        gs.fill_(value)
        _poison_nvfp4(out)
        graph.replay()
        _check_nvfp4(out, x, value)
        replayed = [t.clone() for t in out.view(100)]
        _poison_nvfp4(out)
        nvfp4.run(plan=p, x=x, global_scale=gs, outputs=out)
        assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(replayed, out.view(100)))


def test_nvfp4_side_stream(session):
    p = _prepare(session, nvfp4.plan(64, 4096))
    out = nvfp4.allocate_outputs(p)
    x = _random(64, 4096, torch.bfloat16, 9)
    _poison_nvfp4(out)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        nvfp4.run(plan=p, x=x, global_scale=2.0, outputs=out)
    side.synchronize()
    _check_nvfp4(out, x, 2.0)


def test_nvfp4_quantize_one_call(session):
    x = _random(33, 7168, torch.bfloat16, 4)
    gs = nvfp4_global_scale(x)
    packed, scales = nvfp4.quantize(x, gs.reshape(1))
    ref_packed, ref_scales = quantize_nvfp4(x, gs)
    assert torch.equal(packed, ref_packed)
    assert torch.equal(scales.view(torch.uint8), swizzle_scales(ref_scales, 0).view(torch.uint8))


def test_nvfp4_alignment_is_checked(session):
    p = _prepare(session, nvfp4.plan(8, 64))
    out = nvfp4.allocate_outputs(p)
    x = torch.zeros(4 * 64 + 1, dtype=torch.bfloat16, device="cuda")[1:].view(4, 64)
    with pytest.raises(ValueError, match="x must start 16-byte aligned, got address"):
        nvfp4.run(plan=p, x=x, global_scale=1.0, outputs=out)
    with pytest.raises(ValueError, match=r"global_scale must be a float32 tensor of 1 element on cuda:\d"):
        nvfp4.run(plan=p, x=x.clone(), global_scale=torch.ones(1), outputs=out)


# -- MXFP8 ----------------------------------------------------------------------------------------
def _mx_outputs(m, k, capacity=None):
    nb = k // 32
    values = torch.full((m, k), POISON, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    rows = torch.full((m, nb), POISON, dtype=torch.uint8, device="cuda")
    mma = torch.full((swizzled_size(capacity or m, nb),), POISON, dtype=torch.uint8, device="cuda")
    return values, rows, mma


def _check_mxfp8(x, values, rows, mma):
    ref_values, ref_rows = quantize_mxfp8(x)
    torch.cuda.synchronize()
    got, want = values.view(torch.uint8), ref_values.view(torch.uint8)
    assert torch.equal(got, want), _first_diff(got, want)
    assert torch.equal(rows, ref_rows), _first_diff(rows, ref_rows)
    want_mma = swizzle_scales(ref_rows, POISON)  # padding keeps the caller's bytes
    assert torch.equal(mma[: want_mma.numel()], want_mma), _first_diff(mma[: want_mma.numel()], want_mma)
    assert (mma[want_mma.numel() :] == POISON).all()


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("m", MS)
def test_mxfp8_random_bitwise(session, m, k):
    p = _prepare(session, mxfp8.plan((k, "bfloat16", m)))
    x = _random(m, k, torch.bfloat16, m * 13 + k)
    values, rows, mma = _mx_outputs(m, k)
    mxfp8.quantize_rows(x, values, rows, mma, plan=p)
    _check_mxfp8(x, values, rows, mma)


@pytest.mark.parametrize("m, k", [(7, 64), (4097, 7168), (128, 16384)])
def test_mxfp8_float16_bitwise(session, m, k):
    p = _prepare(session, mxfp8.plan((k, torch.float16, m)))
    x = _random(m, k, torch.float16, 12)
    values, rows, mma = _mx_outputs(m, k)
    mxfp8.quantize_rows(x, values, rows, mma, plan=p)
    _check_mxfp8(x, values, rows, mma)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mxfp8_extreme_inputs(session, dtype):
    m, k = 300, 4096
    p = _prepare(session, mxfp8.plan((k, dtype, m)))
    x = _extreme(m, k, dtype, 6, 32)
    values, rows, mma = _mx_outputs(m, k)
    mxfp8.quantize_rows(x, values, rows, mma, plan=p)
    _check_mxfp8(x, values, rows, mma)


def test_mxfp8_live_rows_below_capacity_and_graph(session):
    cap, k = 4097, 7168
    p = _prepare(session, mxfp8.plan((k, "bfloat16", cap)))
    values, rows, mma = _mx_outputs(cap, k)
    for m in (7, 129, 4097, 1):
        x = _random(m, k, torch.bfloat16, m)
        values.view(torch.uint8).fill_(POISON)
        rows.fill_(POISON)
        mma.fill_(POISON)
        mxfp8.quantize_rows(x, values[:m], rows[:m], mma, plan=p)
        _check_mxfp8(x, values[:m], rows[:m], mma)
        assert (values.view(torch.uint8)[m:] == POISON).all() and (rows[m:] == POISON).all()
    x = torch.empty(100, k, dtype=torch.bfloat16, device="cuda")
    x.copy_(_random(100, k, torch.bfloat16, 1))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mxfp8.quantize_rows(x, values[:100], rows[:100], mma, plan=p)
    x.copy_(_random(100, k, torch.bfloat16, 2))
    mma.fill_(POISON)
    graph.replay()
    _check_mxfp8(x, values[:100], rows[:100], mma)


def test_mxfp8_quantize_rows_one_call(session):
    x = _random(33, 4096, torch.bfloat16, 8)
    values, rows, mma = _mx_outputs(33, 4096)
    mxfp8.quantize_rows(x, values, rows, mma)
    _check_mxfp8(x, values, rows, mma)


# -- freeze -----------------------------------------------------------------------------------------
def test_freeze_new_k_raises_new_m_does_not(session):
    p_nv = _prepare(session, nvfp4.plan(512, 2048))
    p_mx = _prepare(session, mxfp8.plan((2048, "bfloat16", 512)))
    nvfp4.quantize(_random(5, 2048, torch.bfloat16, 0), 1.0)  # warms quantize() for K=2048
    out = nvfp4.allocate_outputs(p_nv)
    counts = (nv_kernel.compile_nvfp4.compile_count, mx_kernel.compile_mxfp8.compile_count)
    session.freeze("test")
    for m in (1, 17, 300, 512):
        x = _random(m, 2048, torch.bfloat16, m)
        _poison_nvfp4(out)
        nvfp4.run(plan=p_nv, x=x, global_scale=4.0, outputs=out)
        _check_nvfp4(out, x, 4.0)
        values, rows, mma = _mx_outputs(m, 2048)
        mxfp8.quantize_rows(x, values, rows, mma, plan=p_mx)
        _check_mxfp8(x, values, rows, mma)
        nvfp4.quantize(x, 4.0)
    assert (nv_kernel.compile_nvfp4.compile_count, mx_kernel.compile_mxfp8.compile_count) == counts
    with pytest.raises(KernelResolutionFrozenError):
        session.prepare([nvfp4.plan(512, 1104)])
    with pytest.raises(KernelResolutionFrozenError):
        session.prepare([mxfp8.plan((1120, "bfloat16", 512))])
    with pytest.raises(KernelResolutionFrozenError):
        nvfp4.quantize(_random(3, 1104, torch.bfloat16, 0), 1.0)  # a K quantize() never saw
    with pytest.raises(KernelResolutionFrozenError):
        mxfp8.quantize_rows(_random(3, 1120, torch.bfloat16, 0), *_mx_outputs(3, 1120))
    # The kernels were launched through Triton's compiled objects only: its JIT path never ran.
    for jit_fn in (nv_kernel._nvfp4_quantize_kernel, mx_kernel._mxfp8_quantize_kernel):
        caches = getattr(jit_fn, "device_caches", {})
        assert all(len(entry[0]) == 0 for entry in caches.values())
