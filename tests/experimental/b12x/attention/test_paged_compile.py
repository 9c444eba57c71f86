"""attention.paged kernels compile on the CPU for sm_90a and sm_120a (fake tensors, symbolic sizes).

Default tier: the decode kernel at its default config for bf16 and fp8 KV, the schedule and the
merge kernel, for both archs. `slow`: every head dim / page size / group size / KV dtype / config
the caps accept.
"""

import itertools

import pytest
import torch

from flashinfer.experimental.b12x.attention.paged._config import (
    DecodeConfig,
    ScheduleConfig,
    default_config,
    why_not,
)

pytestmark = pytest.mark.compile

ARCHS = ("sm_90a", "sm_120a")


def _modules():
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    from flashinfer.experimental.b12x.attention.paged import _kernel_decode, _kernel_split

    return _kernel_decode, _kernel_split


def _targets(ptx: str) -> list[str]:
    return [line.split()[1] for line in ptx.splitlines() if line.startswith(".target")]


def _check_binary(fn, arch):
    ptx = fn.artifacts.PTX
    assert _targets(ptx) == [arch]
    assert fn.artifacts.CUBIN[:4] == b"\x7fELF"
    assert "wgmma" not in ptx and "tcgen05" not in ptx  # portable warp-level MMA only
    return ptx


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_decode_default_config_compiles(arch, kv_dtype):
    kd, _ = _modules()
    cfg = default_config(kv_dtype, 128, 16, arch)
    fn = kd.compile_decode("bfloat16", kv_dtype, 32, 8, 128, 128, 16, cfg, arch=arch)
    ptx = _check_binary(fn, arch)
    mma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" if kv_dtype == "float8_e4m3fn" else "bf16.bf16.f32"
    assert mma in ptx and "ldmatrix.sync.aligned.m8n8.x4.trans" in ptx and "cp.async.cg.shared.global" in ptx
    if kv_dtype == "float8_e4m3fn":
        # e4m3 -> fp16 in registers: 2 cvt per 4 bytes of K and V, 2 prmt per 8 bytes of V
        assert ptx.count("cvt.rn.f16x2.e4m3x2") == 64 and ptx.count("prmt.b32") == 16
    # 64-bit cache offsets: page * page_stride is a 64-bit multiply
    assert "mul.lo.s64" in ptx or "mad.lo.s64" in ptx or "mul.wide.s32" in ptx


@pytest.mark.parametrize("arch", ARCHS)
def test_schedule_and_merge_compile(arch):
    _, ks = _modules()
    _check_binary(ks.compile_schedule(ScheduleConfig(), arch=arch), arch)
    _check_binary(ks.compile_merge("bfloat16", 32, 8, 128, arch=arch), arch)


def test_launcher_signature_and_symbolic_sizes():
    """The disk-loaded launcher names its contract: sizes shared across tensors are one symbol."""
    kd, _ = _modules()
    key = ("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16, default_config("float8_e4m3fn", 128, 16, "sm_90a"))
    kd.compile_decode.precompile(*key, arch="sm_90a")  # into this test's disk cache
    kd.compile_decode.cache_clear()
    fn = kd.compile_decode(*key, arch="sm_90a")  # the tvm-ffi function loaded from disk
    with pytest.raises(TypeError) as info:
        fn(torch.zeros(1))
    sig = str(info.value)
    for part in (
        "mQ: Tensor([n0, 32, 128], bfloat16)",
        "mK: Tensor([n1, 16, 8, 64], float16)",  # fp8 cache as an fp16 view: two e4m3 per element
        "mOut: Tensor([n0, 32, 128], bfloat16), mLse: Tensor([n0, 32], float32)",
        "mWork: Tensor([n4, 4], int32)",
        "mPartO: Tensor([n4, 32, 128], float32)",
        "mKDesc: Tensor([n2, 8], float32)",
        "scale_log2: float32, has_sink: int32",
    ):
        assert part in sig, sig


def test_config_predicate():
    assert why_not("bfloat16", "bfloat16", 32, 8, 128, 128, 16, DecodeConfig(keys_per_warp=32), "sm_90a") == (
        "keys_per_warp 32 > page_size 16: a warp's sub-tile must lie in one page"
    )
    big = DecodeConfig(warps=8, keys_per_warp=32, stages=4)
    assert "bytes of shared memory, sm_120a has" in why_not("bfloat16", "bfloat16", 32, 8, 256, 256, 64, big, "sm_120a")
    for arch, kv in itertools.product(ARCHS, ("bfloat16", "float8_e4m3fn")):
        for d in (64, 128, 256):
            assert why_not("bfloat16", kv, 32, 8, d, d, 16, default_config(kv, d, 16, arch), arch) is None


def _sweep():
    for arch, kv, d, page, (hq, hkv) in itertools.product(
        ARCHS, ("bfloat16", "float16", "float8_e4m3fn"), (64, 128, 256), (16, 64), ((8, 8), (32, 8), (64, 4))
    ):
        q = "float16" if kv == "float16" else "bfloat16"
        yield arch, q, kv, d, page, hq, hkv, default_config(kv, d, page, arch)
    for arch, cfg in itertools.product(
        ARCHS, (DecodeConfig(4, 32, 2), DecodeConfig(8, 16, 2), DecodeConfig(2, 16, 4), DecodeConfig(4, 16, 3))
    ):
        yield arch, "bfloat16", "float8_e4m3fn", 128, 64, 32, 8, cfg


@pytest.mark.slow
@pytest.mark.parametrize("arch,q,kv,d,page,hq,hkv,cfg", list(_sweep()))
def test_decode_sweep_compiles(arch, q, kv, d, page, hq, hkv, cfg):
    kd, ks = _modules()
    if why_not(q, kv, hq, hkv, d, d, page, cfg, arch) is not None:
        pytest.skip(why_not(q, kv, hq, hkv, d, d, page, cfg, arch))
    _check_binary(kd.compile_decode(q, kv, hq, hkv, d, d, page, cfg, arch=arch), arch)
    _check_binary(ks.compile_merge(q, hq, hkv, d, arch=arch), arch)
