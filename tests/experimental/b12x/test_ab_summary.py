"""scripts/ab_summary.py (the same-device A/B table of scripts/device_ab_run.sh): medians over rounds, the change
against the noise, and rows missing on one side."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "ab_summary.py"
spec = importlib.util.spec_from_file_location("ab_summary", SCRIPT)
AB = importlib.util.module_from_spec(spec)
spec.loader.exec_module(AB)


def _write(d: Path, job: str, side: str, r: int, rows):
    body = {
        "rows": [
            {"label": lab, "impl": impl, "time_us": t, "p10_us": t * 0.995, "p90_us": t * 1.005}
            for lab, impl, t in rows
        ]
    }
    (d / f"{job}.{side}.r{r}.json").write_text(json.dumps(body))


def test_medians_changes_and_verdicts(tmp_path):
    for r, (a, b) in enumerate([(10.0, 9.0), (10.2, 9.1), (10.1, 9.05)], start=1):
        _write(tmp_path, "grid", "a", r, [("B=1 L=1k", "b12x", a), ("B=8 L=8k", "b12x", 50.0), ("only a", "x", 1.0)])
        _write(tmp_path, "grid", "b", r, [("B=1 L=1k", "b12x", b), ("B=8 L=8k", "b12x", 50.1)])
    (tmp_path / "grid.a.r1.log").write_text("not a report")
    rows = AB.load(tmp_path)["grid"]
    a, b, change, noise, verdict = AB.compare(rows[("B=1 L=1k", "b12x")])
    assert (a, b) == (10.1, 9.05) and change == pytest.approx(100 * (9.05 / 10.1 - 1))
    assert noise == pytest.approx(100 * 0.2 / 10.1) and verdict == "B-"
    assert AB.compare(rows[("B=8 L=8k", "b12x")])[-1] == "tie"  # +0.2% inside the 1% p10-p90 spread
    assert AB.compare(rows[("only a", "x")]) is None
    text = AB.report(tmp_path)
    assert "== grid" in text and "missing on one side (have: A)" in text and "B-" in text


def test_slower_side_and_cli(tmp_path, capsys):
    _write(tmp_path, "q", "a", 1, [("M=4096", "b12x", 10.0)])
    _write(tmp_path, "q", "b", 1, [("M=4096", "b12x", 11.0)])
    assert AB.compare(AB.load(tmp_path)["q"][("M=4096", "b12x")])[-1] == "B+"
    assert AB.main([str(tmp_path)]) == 0 and "+10.00%" in capsys.readouterr().out
    assert AB.main([str(tmp_path / "nope")]) == 2 and "must be a directory" in capsys.readouterr().err
    assert AB.main([]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no NAME" in AB.report(empty)


def test_two_reports_compare_as_a_and_b(tmp_path, capsys):
    _write(tmp_path, "q_fixed", "a", 1, [("M=4096", "copy (same bytes)", 13.9), ("M=4096", "b12x", 17.7)])
    _write(tmp_path, "q_rotated", "b", 1, [("M=4096", "copy (same bytes)", 14.8), ("M=4096", "b12x", 17.8)])
    a, b = tmp_path / "q_fixed.a.r1.json", tmp_path / "q_rotated.b.r1.json"
    rows = next(iter(AB.load_pair(a, b).values()))
    assert AB.compare(rows[("M=4096", "copy (same bytes)")])[-1] == "B+"
    assert AB.compare(rows[("M=4096", "b12x")])[-1] == "tie"  # +0.6% inside the 1% p10-p90 spread
    assert AB.main([str(a), str(b)]) == 0 and "(A) /" in capsys.readouterr().out
    assert AB.main([str(a), str(tmp_path / "missing.json")]) == 2 and "missing" in capsys.readouterr().err


def test_rule_passes_only_when_every_selected_row_wins_in_every_pair(tmp_path, capsys):
    rows_a = [("M=1 N=4096", "b12x", 10.0), ("M=16 N=28672", "b12x", 10.0), ("M=8 N=4096", "b12x", 10.0)]
    _write(tmp_path, "r1", "a", 1, rows_a)
    _write(tmp_path, "r1", "b", 1, [("M=1 N=4096", "b12x", 9.0), ("M=16 N=28672", "b12x", 12.0)])
    _write(tmp_path, "r2", "a", 1, rows_a)
    _write(tmp_path, "r2", "b", 1, [("M=1 N=4096", "b12x", 9.5), ("M=16 N=28672", "b12x", 9.0)])
    r1 = [tmp_path / "r1.a.r1.json", tmp_path / "r1.b.r1.json"]
    r2 = [tmp_path / "r2.a.r1.json", tmp_path / "r2.b.r1.json"]
    assert AB.rule([tuple(r1)], only="M=1 ")[0]
    ok, text = AB.rule([tuple(r1), tuple(r2)], exclude="M=8")
    assert not ok and "r1.a.r1 / r1.b.r1: M=16 N=28672 b12x: B+ (+20.00%" in text and "r2." not in text
    assert not AB.rule([tuple(r1)], only="M=8")[0]  # missing on B's side
    assert not AB.rule([tuple(r1)], only="nothing")[0]  # selects no row
    assert AB.main(["--rule", "--except", "M=(8|16) ", *map(str, r1 + r2)]) == 0
    assert "rule passed: 2 rows over 2 pairs" in capsys.readouterr().out
    assert AB.main(["--rule", *map(str, r1 + r2)]) == 1
    with pytest.raises(SystemExit) as bad:
        AB.main(["--rule", str(r1[0])])
    assert bad.value.code == 2 and "pairs, got 1 paths" in capsys.readouterr().err
