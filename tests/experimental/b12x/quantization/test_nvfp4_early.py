"""NVFP4 `early` (session 32): a preload group's loads issued before the global scale's load and the prologue.

Why it exists: the preload tile's programs started with the global scale's load, RD(1/gs) in float64 and the
lane table, and only then issued their group's loads, so every program's first DRAM round trip waited behind an
L2 round trip and ~100 dependent instructions. CPU checks: the config rules, that the candidates stay
unvalidated until the H200 passes them (test_gpu_candidates), and that the machine code has the order the
variant is for (every 16-byte load of the group before the float64 reciprocal), with nothing spilled and the
instruction count unchanged. Bits: the interpreter cases of `_interpret_run.NVFP4_VARIANTS` (K-major,
two-axis, a group of 2) and its fp16 list.
"""

import dataclasses
import re

import pytest

from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv

EARLY = [nv.NvFp4Config(*c) for c in nv._UNVALIDATED_EARLY]


def test_early_rules_and_offer(monkeypatch):
    assert EARLY and all(c.early and c.preload for c in EARLY)
    base = dataclasses.replace(EARLY[0], early=False)
    ok = lambda **kw: nv.can_implement(4096, dataclasses.replace(base, **kw))
    assert ok(early=True) and ok(early=True, k_major=False) and ok(early=True, k_iters=2)
    assert not ok(early=1)
    assert not ok(early=True, preload=False)  # the group's loads it moves are the preload tile's
    assert not ok(early=True, k_major=False, persistent=16)  # a persistent grid loads inside its loop
    assert nv.constexprs(4096, EARLY[0])[-2] is True and nv.constexprs(4096, base)[-2] is False
    monkeypatch.delenv(nv.UNVALIDATED_ENV, raising=False)
    assert nv.EARLY_GPU_VALIDATED or not set(EARLY) & set(nv.candidate_configs(4096))
    assert set(EARLY) <= set(nv.candidate_configs(4096, unvalidated=True))


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize("idx", range(len(EARLY)))
def test_early_loads_precede_the_prologue(arch, idx, cuda_binary):
    cfg = EARLY[idx]
    ops = {}
    for early in (False, True):
        cubin = nv.compile_for_target("bfloat16", 4096, dataclasses.replace(cfg, early=early), arch).asm["cubin"]
        sass = cuda_binary.run("cuobjdump", cubin, "-sass")
        assert not re.search(r"\b(STL|LDL)\b", sass), f"{cfg} spills on {arch}"
        ops[early] = re.findall(r"\b(LDG\.E\.128|MUFU\.RCP64H|STG)\b", sass)
    for early, seq in ops.items():
        loads = [i for i, o in enumerate(seq) if o == "LDG.E.128"]
        assert len(loads) == 2 * cfg.k_iters, (cfg, seq)
        rcp = seq.index("MUFU.RCP64H")  # RD(1/gs)'s float64 reciprocal: the prologue
        assert (loads[-1] < rcp) if early else (loads[0] > rcp), (early, cfg, arch, seq)
    assert len(cuda_binary.instructions(cubin)) == len(
        cuda_binary.instructions(
            nv.compile_for_target("bfloat16", 4096, dataclasses.replace(cfg, early=False), arch).asm["cubin"]
        )
    )
