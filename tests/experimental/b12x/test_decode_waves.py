"""scripts/decode_waves.py (the decode heuristic's grids in waves, from ptxas): CTAs an SM from registers, warps and
shared memory at sm_90a's limits, the N spans it takes, and one row end to end (compiled on the CPU)."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "decode_waves.py"
spec = importlib.util.spec_from_file_location("decode_waves", SCRIPT)
DW = importlib.util.module_from_spec(spec)
spec.loader.exec_module(DW)


@pytest.mark.parametrize(
    "regs, warps, smem, want",
    [
        (118, 16, 0, 1),  # the 16-warp decode grids of session 54: one CTA an SM
        (118, 8, 0, 2),
        (96, 4, 0, 5),  # FUSED_SILU_GROUPS' MXFP4 unroll 1
        (128, 4, 0, 4),
        (130, 4, 0, 3),  # the fused MXFP4 "mul" cliff (session 53)
        (153, 8, 0, 1),
        (64, 8, 0, 4),
        (32, 1, 0, 32),  # the CTA limit
        (80, 8, 100 * 1024, 2),  # shared memory bounds it
    ],
)
def test_ctas_an_sm(regs, warps, smem, want):
    assert DW.ctas_per_sm(regs, warps, smem) == want


def test_spans_and_buckets():
    assert DW.span("4096:8192:2048") == [4096, 6144, 8192] and DW.span("6144") == [6144]
    with pytest.raises(Exception, match="START:STOP:STEP"):
        DW.span("1:2")
    from flashinfer.experimental.b12x.gemm._shared import launch as L  # the script's buckets are launch's

    assert [L.bucket_for(m) for m in (1, 8, 9, 16, 17, 64)] == ["decode8"] * 2 + ["decode16"] * 2 + [
        "decode32",
        "decode64",
    ]
    with pytest.raises(SystemExit):
        DW.main(["--m", "65"])


@pytest.mark.compile
def test_one_row_end_to_end(capsys):
    pytest.importorskip("cutlass")
    assert DW.main(["--fmt", "nvfp4", "--m", "16", "--k", "4096", "--n", "6144"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert len(rows) == 1
    row = rows[0]
    # EIGHT_WARP_WAVE16 (on since session 55) takes this grid from 16 warps (118 registers, 1 CTA an SM, 1.45 waves
    # of 192 CTAs: the "*" mark) to 8 (2 an SM, one wave); the row follows whichever the switch gives
    from flashinfer.experimental.b12x.gemm._shared import decode_rules as R

    assert row[:5] == ["nvfp4", "none", "16", "6144", "4096"]
    want = (["w8", "t2"], ["2", "192", "0.73"]) if R.EIGHT_WARP_WAVE16 else (["w16", "t2"], ["1", "192", "1.45*"])
    assert row[5:7] == want[0] and row[-3:] == want[1]
