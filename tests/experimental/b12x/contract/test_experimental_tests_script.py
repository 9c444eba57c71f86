"""scripts/experimental_tests.py: the PR-body fence parser and validator."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.contract

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = ROOT / "scripts" / "experimental_tests.py"
_spec = importlib.util.spec_from_file_location("experimental_tests", SCRIPT)
et = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(et)


def _body(*lines):
    return "intro\n\n```experimental-tests\n" + "\n".join(lines) + "\n```\n\nmore\n"


def test_parse_and_validate_ok():
    body = _body("tests/experimental/b12x/contract", "# comment", "", "tests/experimental/b12x/conftest.py")
    targets = et.validate_targets(et.parse_targets(body), ROOT)
    assert targets == ["tests/experimental/b12x/contract", "tests/experimental/b12x/conftest.py"]


@pytest.mark.parametrize(
    "body, message",
    [
        ("no fence here", "no ```experimental-tests fenced block found in the PR body"),
        (
            _body("tests/experimental/b12x") + _body("tests/experimental/b12x"),
            "expected one ```experimental-tests block, found 2",
        ),
        (_body("# only a comment"), "the ```experimental-tests block lists no targets"),
        (
            _body("tests/experimental/b12x/contract/test_cli.py::test_ops_lists_registry"),
            "target 'tests/experimental/b12x/contract/test_cli.py::test_ops_lists_registry': '::' selectors are not allowed; list a file or folder",
        ),
        (
            _body("tests/test_core_import.py"),
            "target 'tests/test_core_import.py' is not under tests/experimental/",
        ),
        (_body("tests/experimental/b12x/nope"), "target 'tests/experimental/b12x/nope' does not exist"),
        (
            _body("tests/experimental/b12x/contract", "tests/experimental/b12x/contract/"),
            "target 'tests/experimental/b12x/contract/' is listed twice",
        ),
    ],
)
def test_fence_errors_exact(body, message):
    with pytest.raises(et.FenceError) as info:
        et.validate_targets(et.parse_targets(body), ROOT)
    assert str(info.value) == message


def test_cli_dry_run_and_error_exit(tmp_path):
    good = tmp_path / "pr.md"
    good.write_text(_body("tests/experimental/b12x/contract/test_cli.py"))
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", str(good)], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("-m pytest tests/experimental/b12x/contract/test_cli.py")
    out = subprocess.run([sys.executable, str(SCRIPT), "-"], input="nothing", capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and "no ```experimental-tests fenced block" in out.stderr


def test_template_fence_is_valid():
    body = (ROOT / ".github" / "pull_request_template.md").read_text()
    assert "## Experimental Track" in body
    assert et.validate_targets(et.parse_targets(body), ROOT)
