"""The staged device jobs parse: every line of scripts/jobs/next_session.txt (`NAME SUFFIX ARGS...`,
run as `python -m benchmarks.experimental.b12x.bench_SUFFIX ARGS`), and of every job file it names
(`sNN_x.txt`, which the staged scripts run), is accepted by its benchmark's argument parser, so a typo
cannot cost a device session. argparse consumes the arguments in order and `--help` appended last exits
0 only when every argument before it was valid."""

import importlib
import re
import shlex
from pathlib import Path

import pytest

JOBS = Path(__file__).resolve().parents[4] / "scripts" / "jobs" / "next_session.txt"


def _named_files():
    """next_session.txt and the job files its text names that exist (a missing one fails the test above)."""
    named = sorted(set(re.findall(r"\bs\d+_[a-z]+\.txt\b", JOBS.read_text())))
    return [JOBS] + [JOBS.with_name(n) for n in named if JOBS.with_name(n).is_file()]


def _jobs():
    out = []
    for path in _named_files():
        for line in path.read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                name, suffix, *args = shlex.split(line)
                out.append(pytest.param(suffix, args, id=f"{path.stem}:{name}"))
    return out


def test_the_staged_job_files_are_checked():
    """next_session.txt names at least one job file to run next, and every job file it names is parsed here."""
    named = set(re.findall(r"\bs\d+_[a-z]+\.txt\b", JOBS.read_text()))
    parsed = {p.name for p in _named_files()[1:]}
    assert named and parsed == named, (sorted(named), sorted(parsed))


def test_the_file_has_jobs():
    assert _jobs(), f"{JOBS} lists no job"


@pytest.mark.parametrize("suffix, args", _jobs())
def test_job_arguments_parse(suffix, args, capsys):
    pytest.importorskip("triton")
    module = importlib.import_module(f"benchmarks.experimental.b12x.bench_{suffix}")
    with pytest.raises(SystemExit) as done:
        module.main([*args, "--help"])
    assert done.value.code == 0, capsys.readouterr().err


def test_staged_selections_name_existing_test_files():
    sel = JOBS.with_name("next_session_sel.txt")
    root = JOBS.parents[2]
    text = sel.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    # nothing staged is a valid state, said in a comment (an empty file would read as a lost list)
    assert lines or text.lstrip().startswith("#"), f"{sel.name}: no selection and no comment saying why"
    for line in lines:
        path = shlex.split(line)[0]
        assert (root / path).is_file(), f"{sel.name}: {path} does not exist"
        assert "-k" in shlex.split(line) or len(shlex.split(line)) == 1, line
