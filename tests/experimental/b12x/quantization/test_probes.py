"""The NVFP4 timing probes of session 33 still build: `scripts/probe_nvfp4_skeleton.py`'s skeleton (the plan's
memory program without the encode) compiles for sm_90a and sm_120a, and its occupancy hold raises the dynamic
shared memory to what leaves the requested programs an SM (its arguments: ../test_probe_arguments.py).
(`scripts/probe_nvfp4_ws.py`'s Gluon kernel is written to the device's Triton 3.6 and is not built here.)"""

import re

import pytest

from flashinfer.experimental.b12x.quantization.nvfp4._occupancy import programs_per_sm

pytest.importorskip("triton")


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
def test_skeleton_compiles_and_holds_occupancy(arch, load_script):
    probe = load_script("probe_nvfp4_skeleton")
    ck, consts = probe._compiled(4096, 8, 1024, True, 4, 0, arch=arch)
    assert consts == (4096, 8, 1024, True)
    ptx = ck.asm["ptx"]
    assert len(re.findall(r"ld\.global(?:\.\w+)*\.v4\.b32", ptx)) == 8  # the group's 16 KB: 8 x 16 bytes a thread
    held, _ = probe._compiled(4096, 8, 1024, True, 4, 7, arch=arch)
    # the quantizer's own occupancy model (sm_90 defaults), by shared memory alone (registers: 1)
    fits = lambda kernel: programs_per_sm(32, 4, 1, kernel.metadata.shared)  # noqa: E731
    assert fits(held) == 7 and fits(ck) > 7
