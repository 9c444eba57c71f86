"""`scripts/sweep_summary.py`: a bench_gemm report's sweeps as one line a config, its µs and the named fields only."""

import json

import pytest


@pytest.mark.reference
def test_summary_prints_each_config_with_the_named_fields(load_script, tmp_path):
    script = load_script("sweep_summary")
    report = tmp_path / "gemm_x.json"
    sweeps = {
        "w4a16_nvfp4 M=16 N=4096 K=4096": {
            "DecodeConfig(warps=16, tiles=2, wn=1, probe='', ksplit=1)": 6.7049,
            "DecodeConfig(warps=8, tiles=2, wn=4, probe='', ksplit=4)": 5.5,
        },
        "w4a16_nvfp4+residual M=16 N=28672 K=4096": {
            "FusedConfig(decode=DecodeConfig(wn=2), epilogue='residual')": 34.37
        },
    }
    report.write_text(json.dumps({"extra": {"sweeps": sweeps}}))
    lines = script.summary([str(report)], ["warps", "ksplit", "epilogue"])
    assert lines == [
        "== gemm_x.json w4a16_nvfp4 M=16 N=4096 K=4096",
        "      6.70  DecodeConfig warps=16 ksplit=1",
        "      5.50  DecodeConfig warps=8 ksplit=4",
        "== gemm_x.json w4a16_nvfp4+residual M=16 N=28672 K=4096",
        "     34.37  FusedConfig epilogue='residual'",
    ]
    (tmp_path / "none.json").write_text(json.dumps({"extra": {}}))  # a report without sweeps prints nothing
    assert script.summary([str(tmp_path / "none.json")], ["wn"]) == []
