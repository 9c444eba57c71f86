"""Compile progress lines (B12X_PRINT_COMPILE_PROGRESS) and the prepare progress bar."""

import io
import re

import pytest

from flashinfer.experimental.b12x._lib import progress

from .fake_kernels import compile_square

pytestmark = pytest.mark.contract

LINE = re.compile(r"^\[b12x\] (compile|load) (\S+) (.*) \((sm_\w+)\) (\d+\.\d\d)s \(total (\d+\.\d\d)s\)$")


def test_one_line_per_compile_and_per_load(monkeypatch, capsys):
    monkeypatch.setenv("B12X_PRINT_COMPILE_PROGRESS", "1")
    compile_square(31, "sm_120a")
    compile_square(31, "sm_120a")  # memory hit: silent
    compile_square.cache_clear()
    compile_square(31, "sm_120a")  # disk load
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2, lines
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    assert [m.group(1) for m in parsed] == ["compile", "load"]
    for m in parsed:
        assert m.group(2) == "spine.square"
        assert m.group(3) == "n=31 dtype=bfloat16 tile=Tile(m=64,n=128) mode=FAST"
        assert m.group(4) == "sm_120a"
        assert float(m.group(6)) >= float(m.group(5))


def test_totals_accumulate_per_event(monkeypatch, capsys):
    monkeypatch.setenv("B12X_PRINT_COMPILE_PROGRESS", "1")
    start = progress.totals().get("compile", 0.0)
    compile_square(32, "sm_90a")
    compile_square(33, "sm_90a")
    totals = [float(LINE.match(line).group(6)) for line in capsys.readouterr().err.strip().splitlines()]
    assert totals[0] >= round(start, 2) - 0.01 and totals[1] >= totals[0]  # printed to 0.01 s


def test_silent_when_off(capsys):
    compile_square(34, "sm_90a")
    progress.note("nothing to see")
    assert capsys.readouterr().err == ""


def test_progress_bar_plain_lines_off_a_terminal():
    stream = io.StringIO()
    with progress.progress_bar(3, "b12x prepare (1 plans)", stream=stream) as bar:
        bar.advance(1, "compiled gemm.x")
        bar.advance(2)
    assert stream.getvalue().splitlines() == [
        "[b12x] b12x prepare (1 plans) 1/3 compiled gemm.x",
        "[b12x] b12x prepare (1 plans) 3/3",
    ]


def test_progress_bar_uses_rich_on_a_terminal():
    pytest.importorskip("rich")

    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    with progress.progress_bar(2, "compiling", stream=stream) as bar:
        bar.advance(1, "one")
        bar.advance(1)
    assert "compiling" in stream.getvalue()
    assert "2/2" in stream.getvalue()
