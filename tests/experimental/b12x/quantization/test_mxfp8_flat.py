"""MXFP8 layout "flat" (session 15): the "quarters" kernel through flat [rows, 8 values a block] pointers.

Why it exists: the H200 runs Triton 3.6, which lays the quarters' [rows, blocks, 8] pointers' lanes
down the rows and converts the tile through shared memory (1 barrier, STS + LDS a tile); flat pointers
build what Triton 3.9 builds from either (docs/predictions/quantization.md, session 15). CPU checks:
the config rules, that the candidates are offered only as unvalidated until the H200 passes them
(test_gpu_candidates), and that each compiles for sm_90a and sm_120a with 2-D input loads and no
local memory. Bits: test_interpret (`_interpret_run.MXFP8_VARIANTS`' "flat" rows).
"""

import re

import pytest

from flashinfer.experimental.b12x.quantization.mxfp8 import _kernel as mx

FLAT = [mx.MxFp8Config(*c) for c in mx._UNVALIDATED if c[4:] == ("flat",)]


def test_flat_rules_and_offer(monkeypatch):
    ok = lambda **kw: mx.can_implement(7168, mx.MxFp8Config(**{"lean": True, "layout": "flat", **kw}))
    assert ok() and ok(block_m=1, block_k=1024, num_warps=1)
    assert not ok(lean=False)  # the lean kernel's quarters only
    assert not mx.can_implement(7168, mx.MxFp8Config(layout="columns"))
    # (QUARTERS, FLAT), then K_MAJOR, HW_NAN and PDL
    assert mx.constexprs(7168, mx.MxFp8Config(4, 512, 2, True, "flat"))[-5:-3] == (True, True)
    assert mx.constexprs(7168, mx.MxFp8Config(4, 512, 2, True, "quarters"))[-5:-3] == (True, False)
    assert mx.constexprs(7168, mx.MxFp8Config(4, 512, 2, True, "rows"))[-5:-3] == (False, False)
    monkeypatch.delenv(mx.UNVALIDATED_ENV, raising=False)
    assert FLAT and not set(FLAT) & set(mx.candidate_configs(7168))
    assert set(FLAT) <= set(mx.candidate_configs(7168, unvalidated=True))
    assert mx.default_config(7168).layout == "quarters"  # the default moves only after the H200


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize("idx", range(len(FLAT)))
def test_flat_compiles_with_2d_loads(arch, idx, cuda_binary):
    cfg = FLAT[idx]
    compiled = mx.compile_for_target("bfloat16", 7168, cfg, arch)
    loads = re.findall(r"tt\.load %\w+, %\w+, %\w+ : tensor<([0-9x]+)x!tt\.ptr<bf16>", compiled.asm["ttgir"])
    assert len(loads) == 4 and all(s.count("x") == 1 for s in loads), loads  # four quarters, each 2-D
    usage = cuda_binary.resources(compiled.asm["cubin"])
    assert usage["LOCAL"] == 0 and usage["STACK"] == 0, usage
