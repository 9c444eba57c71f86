"""scripts/moe_waves.py (moe.fused_moe's decode expert GEMMs in waves, from ptxas): its argument checks, the hit-expert
count, and one shape end to end (compiled on the CPU), whose T = 1 grids are the ones `_buckets.t1_dequant` counts."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "moe_waves.py"
spec = importlib.util.spec_from_file_location("moe_waves", SCRIPT)
MW = importlib.util.module_from_spec(spec)
spec.loader.exec_module(MW)


def test_shapes_and_hit_experts():
    assert MW.shape("512x10x4096x1024") == (512, 10, 4096, 1024)
    for bad in ("512x10x4096", "0x8x2048x768", "ax8x2048x768"):
        with pytest.raises(Exception, match="ExKxHxI"):
            MW.shape(bad)
    assert MW.hit_experts(128, 8, 1) == 8
    assert MW.hit_experts(128, 8, 4) == pytest.approx(128 * (1 - (120 / 128) ** 4))  # 29.3
    assert MW.hit_experts(128, 8, 4096) == pytest.approx(128)
    with pytest.raises(SystemExit):
        MW.main(["--tokens", "0"])
    with pytest.raises(SystemExit):
        MW.main(["--tokens", "1", "64", "--max-tokens", "16"])


@pytest.mark.compile
def test_one_shape_end_to_end(capsys):
    pytest.importorskip("cutlass")
    args = ["--shapes", "512x10x4096x1024", "--recipes", "nvfp4", "--tokens", "1", "--max-tokens", "64"]
    assert MW.main(args) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [r[:6] for r in rows] == [["512", "10", "4096", "1024", "nvfp4", "1"]] * 2
    from flashinfer.experimental.b12x.moe.fused_moe import _buckets

    # FC1 640 CTAs (k = 10 experts x 1024 / 16 columns), FC2 1280 (x 4096 / 32): session 64's count; T1_DEQUANT (on)
    # serves this T = 1 bucket on bf16 A, whose kernels hold 6 / 5 CTAs an SM (T1_CTAS_PER_SM)
    fc1, fc2 = rows
    assert (fc1[-2], fc2[-2]) == ("640", "1280")
    a = "bfloat16" if _buckets.T1_DEQUANT else "nvfp4"
    assert fc1[-5] == fc2[-5] == a
    per_sm = _buckets.T1_CTAS_PER_SM["bf16" if _buckets.T1_DEQUANT else "packed"]
    assert (int(fc1[-3]), int(fc2[-3])) == per_sm
    assert float(fc1[-1].rstrip("*")) == pytest.approx(640 / (per_sm[0] * 132), abs=0.005)
