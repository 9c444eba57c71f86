"""The coop one-launch kernel (_kernel_coop.py) compiles on the CPU for sm_90a and sm_120a: mma.sync
mixes, no wgmma, no spills, and its wait as designed (one release add, then acquire polls)."""

import re

import pytest

from flashinfer.experimental.b12x.norm.mhc import _config, _kernel, _kernel_coop

from .test_mhc_compile import _check, _compile

pytestmark = pytest.mark.compile

COOP_SIG = dict(res_ptr="*bf16", x_ptr="*bf16", pin_ptr="*fp32", cin_ptr="*fp32", out_ptr="*bf16", fn_ptr="*fp32")
COOP_SIG |= dict(part_ptr="*fp32", cnt_ptr="*i64", scale_ptr="*fp32", base_ptr="*fp32", y_ptr="*bf16")
COOP_SIG |= dict(post_ptr="*fp32", comb_ptr="*fp32", T="i32", cps="i32", fn_blocks="i32")
COOP_SIG |= dict(sinkhorn_iters="i32", rms_eps="fp32", hc_eps="fp32")
C = _config.CoopConfig


def _cases():
    for cc, arch in ((90, "sm_90a"), (120, "sm_120a")):
        cfg = _config.default_config(arch)
        for form in ("pre", "post_pre", "bcast") if cc == 90 else ("pre", "post_pre"):
            # (at H = 4096, with block_y 256, and bcast on sm_120a, ptxas gives post_pre / bcast an
            # 8-24 byte stack frame, LOCAL 0, at 72-168 registers; not checked here)
            for name, coop in (("default", C()), ("atom", C(poll="atom"))):
                for hidden in (7168,):
                    for phase in (0, 1, 2):
                        if phase and name != "default":
                            continue
                        cid = f"{form}-{name}-{hidden}-p{phase}-{arch}"
                        yield pytest.param(form, cfg.stream(form, 1), coop, hidden, phase, cc, id=cid)


@pytest.mark.parametrize("form, stream, coop, hidden, phase, cc", list(_cases()))
def test_coop_kernel(form, stream, coop, hidden, phase, cc):
    consts = _kernel_coop.coop_constexprs(hidden, _kernel.MODES[form], stream, coop, phase)
    compiled = _compile(_kernel_coop._mhc_coop_kernel, COOP_SIG, consts, stream.num_warps, stream.num_stages, cc)
    _check(compiled, f"coop {form}", mma=phase != 2)
    ptx = compiled.asm["ptx"]
    arrive = [m.start() for m in re.finditer(r"atom\.global\.(gpu\.)?release(\.gpu)?\.add", ptx)]
    arrive += [m.start() for m in re.finditer(r"atom\.release\.gpu\.global\.add", ptx)]
    # poll "ld": every thread's ld.acquire (inline asm); "atom": Triton lowers the acquire add of 0
    # to an acquire load by one thread (ld.global.gpu.acquire), broadcast to the others
    polls = [m.start() for m in re.finditer(r"ld\.global\.acquire\.gpu\.b64", ptx)]
    rmw_polls = [m.start() for m in re.finditer(r"ld\.global\.gpu\.acquire\.b64|atom\.(global\.)?(gpu\.)?acquire", ptx)]
    if phase:
        assert not arrive and not polls and not rmw_polls, f"the emulation (PHASE {phase}) must not count or wait"
        return
    assert len(arrive) == 1, f"one release add per program expected:\n{_atoms(ptx)}"
    waits = polls if coop.poll == "ld" else rmw_polls
    assert waits and min(waits) > arrive[0], f"the polls must follow the arrival:\n{_atoms(ptx)}"
    if coop.poll == "ld":
        assert not rmw_polls, "poll='ld' must not poll with atomics"


def _atoms(ptx):
    return "\n".join(line for line in ptx.splitlines() if "atom" in line or "acquire" in line)


def test_coop_tile():
    """56 programs of 128 columns at H = 7168 (4 pass-1 steps of 32); block_y clipped to divide H."""
    tile = _config.default_config("sm_90a").stream("post_pre", 1)
    assert _kernel_coop.coop_tile(7168, tile, C()) == (128, 56)
    assert _kernel_coop.coop_tile(7168, tile, C(block_y=2048)) == (1024, 7)
    assert _kernel_coop.coop_tile(4096, tile, C(block_y=64)) == (64, 64)
