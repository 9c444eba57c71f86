"""The "last" one-launch kernel (_kernel_last.py) compiles on the CPU for sm_90a and sm_120a:
mma.sync mixes (never wgmma), no register spills, at the hidden sizes the op is built for."""

import re

import pytest

from flashinfer.experimental.b12x._lib import cuda_binary as CB
from flashinfer.experimental.b12x.norm.mhc import _config, _kernel, _kernel_last

from .test_mhc_compile import _check, _compile

pytestmark = pytest.mark.compile

LAST_SIG = dict(res_ptr="*bf16", x_ptr="*bf16", pin_ptr="*fp32", cin_ptr="*fp32", out_ptr="*bf16", fn_ptr="*fp32")
LAST_SIG |= dict(part_ptr="*fp32", cnt_ptr="*i32", scale_ptr="*fp32", base_ptr="*fp32", w_ptr="*bf16")
LAST_SIG |= dict(y_ptr="*bf16", post_ptr="*fp32", comb_ptr="*fp32", T="i32", cps="i32", fn_blocks="i32")
LAST_SIG |= dict(sinkhorn_iters="i32", has_norm="i32", rms_eps="fp32", hc_eps="fp32", norm_eps="fp32")

# The default tile (bench_norm --sweep "last"; sm_90a: 145 registers for pre, 218 for post_pre).
# Not here: 16 warps (ptxas caps at 128 registers: 104-632 bytes of spills), block_h 64 (post_pre
# 255 registers + 48 bytes of stack), H = 16384 (the finisher's two [4, 16384] rows).


def _cases():
    tile = _config.LastConfig()
    for cc, arch in ((90, "sm_90a"), (120, "sm_120a")):
        for form in ("pre", "post_pre", "bcast"):
            yield pytest.param(form, tile, 7168, cc, id=f"{form}-7168-{arch}")
    yield pytest.param("post_pre", tile, 4096, 90, id="post_pre-4096-sm_90a")
    pf = _config.LastConfig(max_tokens=8, prefetch=True)  # sweep "last8_pf"
    for form in ("pre", "post_pre"):
        yield pytest.param(form, pf, 7168, 90, id=f"prefetch-{form}-7168-sm_90a")


@pytest.mark.parametrize("form, tile, hidden, cc", list(_cases()))
def test_last_kernel(form, tile, hidden, cc):
    consts = _kernel_last.last_constexprs(hidden, _kernel.MODES[form], tile)
    compiled = _compile(_kernel_last._mhc_last_kernel, LAST_SIG, consts, tile.num_warps, 1, cc)
    _check(compiled, f"last {form}", mma=True)


@pytest.mark.parametrize("form", ["pre", "post_pre"])
def test_last_kernel_register_cap(form):
    """LastConfig(maxnreg=128) (sweep "last_r128"): ptxas keeps to 128 registers on sm_90a (two
    programs of 8 warps per SM); the finish may spill, so only the cap and the mma.sync are checked."""
    tile = _config.LastConfig(maxnreg=128)
    consts = _kernel_last.last_constexprs(7168, _kernel.MODES[form], tile)
    compiled = _compile(_kernel_last._mhc_last_kernel, LAST_SIG, consts, 8, 1, 90, maxnreg=128)
    ptx = compiled.asm["ptx"]
    assert "wgmma" not in ptx and re.search(r"\bmma\.sync\.aligned\.m16n8k16\b", ptx)
    usage = CB.resources(compiled.asm["cubin"])
    assert usage["REG"] <= 128, usage
