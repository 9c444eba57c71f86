"""scripts/triton_audit.py: the comparison of two Triton versions' compile records (CPU, no compile)."""

import importlib.util
import json
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "_b12x_triton_audit", Path(__file__).parents[4] / "scripts" / "triton_audit.py"
)
audit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(audit)


def _row(kernel, key, triton, regs, bar, sts=0, lds=0):
    return {"kernel": kernel, "arch": 90, "num_warps": 4, "key": key, "regs": regs, "sass": 100, "BAR": bar,
            "STS": sts, "LDS": lds, "SHFL": 0, "convert_layout": 1, "triton": triton}  # fmt: skip


def test_compare_lists_what_differs_largest_barrier_gap_first(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(json.dumps(r) for r in [
        _row("k1", "x", "3.6", 62, 4, 2, 2), _row("k2", "y", "3.6", 40, 9), _row("same", "z", "3.6", 30, 0),
        _row("only_a", "w", "3.6", 30, 0),
    ]) + "\n")  # fmt: skip
    b.write_text("\n".join(json.dumps(r) for r in [
        _row("k1", "x", "3.9", 54, 0), _row("k2", "y", "3.9", 40, 8), _row("same", "z", "3.9", 30, 0),
    ]) + "\n")  # fmt: skip
    lines = audit.compare(str(a), str(b))
    assert lines[0] == "3 kernels in both records, 2 differ"
    assert lines[1].startswith("k1 sm_90 w4 [x] triton 3.6: regs 62") and "BAR 4 STS 2 LDS 2" in lines[1]
    assert lines[2].strip().startswith("k1 sm_90 w4 [x] triton 3.9: regs 54") and "BAR 0" in lines[2]
    assert lines[3].startswith("k2 ") and len(lines) == 5  # "same" and "only_a" are not listed


def test_plugin_leaves_triton_alone_without_its_variable(monkeypatch):
    import triton

    monkeypatch.delenv("B12X_TRITON_AUDIT", raising=False)
    before = triton.compile
    audit.pytest_configure(None)
    assert triton.compile is before
