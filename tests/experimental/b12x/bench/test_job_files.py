"""The staged device jobs parse: every line of scripts/jobs/next_session.txt (`NAME SUFFIX ARGS...`,
run as `python -m benchmarks.experimental.b12x.bench_SUFFIX ARGS`) is accepted by its benchmark's
argument parser, so a typo cannot cost a device session. argparse consumes the arguments in order
and `--help` appended last exits 0 only when every argument before it was valid."""

import importlib
import shlex
from pathlib import Path

import pytest

JOBS = Path(__file__).resolve().parents[4] / "scripts" / "jobs" / "next_session.txt"


def _jobs():
    out = []
    for line in JOBS.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, suffix, *args = shlex.split(line)
            out.append(pytest.param(suffix, args, id=name))
    return out


def test_the_file_has_jobs():
    assert _jobs(), f"{JOBS} lists no job"


@pytest.mark.parametrize("suffix, args", _jobs())
def test_job_arguments_parse(suffix, args, capsys):
    pytest.importorskip("triton")
    module = importlib.import_module(f"benchmarks.experimental.b12x.bench_{suffix}")
    with pytest.raises(SystemExit) as done:
        module.main([*args, "--help"])
    assert done.value.code == 0, capsys.readouterr().err
