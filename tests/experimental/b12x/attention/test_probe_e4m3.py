"""`scripts/probe_e4m3_convert.py` (session 34): its integer-pipe e4m3 -> fp16 rewrite is exact (every non-NaN
code, in each byte of a word, is its fp16 image at 2^-8 of the value), its loop compiles for sm_90a and sm_120a
with the conversion it names (and only that one) (its arguments: ../test_probe_arguments.py)."""

import numpy as np
import pytest
import torch

PROBE = "probe_e4m3_convert"


@pytest.mark.reference
@pytest.mark.parametrize("byte", [0, 1, 2, 3])
def test_integer_rewrite_is_exact(byte, load_script):
    probe = load_script(PROBE)
    codes = [c for c in range(256) if c & 0x7F != 0x7F]  # e4m3fn's two NaN codes aside
    want = torch.tensor(codes, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    reg, half = (1 if byte % 2 else 0), byte // 2  # bytes 0, 2 -> the first register, 1, 3 -> the second
    got = []
    for c in codes:
        bits = probe.int_convert_reference(c << (8 * byte))[reg] >> (16 * half) & 0xFFFF
        got.append(np.array([bits], np.uint16).view(np.float16)[0].astype(np.float32) * 256.0)
    np.testing.assert_array_equal(np.array(got), want)


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
def test_loop_compiles_with_its_conversion(arch, load_script):
    pytest.importorskip("triton")
    probe = load_script(PROBE)
    for mode in probe.MODES:
        ck, consts = probe._compiled(mode, 64, 4, 8, arch=arch)
        assert consts[:2] == (64, 4)
        ptx = ck.asm["ptx"]
        assert ("cvt.rn.f16x2.e4m3x2" in ptx) == (mode == "f2fp"), mode
