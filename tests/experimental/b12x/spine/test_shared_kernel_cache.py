"""The gpu tier's shared kernel store (`conftest.share_kernel_dirs`, on with $B12X_TEST_KERNEL_CACHE): a test's own
cache dir keeps its selection files, while its compiled kernels land in, and load from, the shared directory."""

from __future__ import annotations

import pytest

from tests.experimental.b12x.conftest import SHARED_SUBDIRS, share_kernel_dirs
from tests.experimental.b12x.spine.fake_kernels import compile_square

pytestmark = pytest.mark.contract


def test_kernels_compiled_under_one_root_load_under_another(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    first, second = tmp_path / "a" / "b12x-cache", tmp_path / "b" / "b12x-cache"
    share_kernel_dirs(first, shared)
    share_kernel_dirs(second, shared)
    assert all((first / sub).is_symlink() and (shared / sub).is_dir() for sub in SHARED_SUBDIRS)

    monkeypatch.setenv("B12X_CACHE_DIR", str(first))
    compile_square.cache_clear()
    compiles, loads = compile_square.compile_count, compile_square.load_count
    assert compile_square(40, "sm_90a")["square"] == 1600
    assert compile_square.compile_count == compiles + 1
    stored = list((shared / "kernels").rglob("*"))
    assert any(p.is_file() and not p.name.endswith(".lock") for p in stored), stored

    monkeypatch.setenv("B12X_CACHE_DIR", str(second))  # another test (or process) of the tier
    compile_square.cache_clear()
    assert compile_square(40, "sm_90a")["square"] == 1600
    assert (compile_square.compile_count, compile_square.load_count) == (compiles + 1, loads + 1)
    (first / "selections.json").write_text("{}")  # anything else stays in the test's own dir
    assert not (shared / "selections.json").exists() and not (second / "selections.json").exists()


def test_only_gpu_tests_share(request, tmp_path):
    """This contract test ran with its own store even if the variable is set: nothing here is a link."""
    import os

    own = os.environ["B12X_CACHE_DIR"]
    assert own.startswith(str(tmp_path))
    assert not any(os.path.islink(os.path.join(own, sub)) for sub in SHARED_SUBDIRS)
    assert request.node.get_closest_marker("gpu") is None
