"""A wheel (non-editable) and an editable install both give a working `import b12x`.

The wheel is built in a temp dir, installed with --target and imported by an interpreter that sees
only it; the editable install goes into an empty venv (`import b12x` needs no torch). This
interpreter's setuptools builds both, so no index is needed (~10 s).
"""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.contract

ROOT = Path(__file__).resolve().parents[4]

CHECK = (
    "import sys, b12x, flashinfer.experimental.b12x as c, importlib.metadata as m; "
    "assert b12x is c and b12x.__file__.endswith('flashinfer/experimental/b12x/_api.py'); "
    "import b12x.gemm; assert b12x.gemm is sys.modules['flashinfer.experimental.b12x.gemm']; "
    "assert 'flashinfer-python' in m.packages_distributions()['b12x']; print(b12x.__file__)"
)


def test_wheel_install(tmp_path):
    wheel_dir = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheel_dir),
            str(ROOT),
        ],
        check=True,
    )
    (wheel,) = wheel_dir.glob("flashinfer_python-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "b12x/__init__.py" in names
    assert "flashinfer/experimental/b12x/_api.py" in names
    assert not any("_compat" in n for n in names), [n for n in names if "_compat" in n]
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"flashinfer", "b12x"}, top
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
    )
    # a clean interpreter that sees only the installed wheel (plus torch etc. from site-packages,
    # which the editable finder of this checkout must not shadow: -S drops site, path set by hand)
    import site

    paths = [str(target)] + [p for p in site.getsitepackages()]
    code = f"import sys; sys.path[:0] = {paths!r}; " + CHECK
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(target)), out.stdout


def test_editable_install(tmp_path):
    import os

    import setuptools

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    py = tmp_path / "venv" / "bin" / "python"
    build_env = dict(os.environ, PYTHONPATH=str(Path(setuptools.__file__).parents[1]))
    pip = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(py),
        "install",
        "-q",
        "--no-deps",
        "--no-build-isolation",
    ]
    subprocess.run([*pip, "-e", str(ROOT)], check=True, env=build_env)
    out = subprocess.run([str(py), "-c", CHECK], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(ROOT / "flashinfer/experimental/b12x/_api.py")
