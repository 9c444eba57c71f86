"""Test collection policy: tests/experimental/ runs only when selected explicitly.

`pytest tests/` collects the core tests and skips tests/experimental/ entirely; naming a path inside
it (`pytest tests/experimental/b12x`, or a file there) selects it. See flashinfer/experimental/README.md.
"""

from pathlib import Path

EXPERIMENTAL = Path(__file__).resolve().parent / "experimental"


def _selected(config) -> bool:
    for arg in config.args:
        path = Path(str(arg).split("::", 1)[0]).resolve()
        if path == EXPERIMENTAL or EXPERIMENTAL in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path, config):
    path = Path(collection_path).resolve()
    if (path == EXPERIMENTAL or EXPERIMENTAL in path.parents) and not _selected(config):
        return True
    return None
