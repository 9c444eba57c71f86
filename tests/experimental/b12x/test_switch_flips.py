"""scripts/jobs/s54_flip.py (the device job's switch flips): every staged flip's edits match the tree exactly once or
are applied already, so a refactor cannot leave a device session's passing rule unappliable; a flip applies to a
copy, twice is a no-op, and a stale edit writes nothing."""

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("s54_flip", ROOT / "scripts" / "jobs" / "s54_flip.py")
FLIP = importlib.util.module_from_spec(spec)
spec.loader.exec_module(FLIP)


def _copy(tmp_path: Path) -> Path:
    for rel in {rel for edits in FLIP.FLIPS.values() for rel, _, _ in edits}:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


@pytest.mark.parametrize("name", sorted(FLIP.FLIPS))
def test_each_flip_matches_the_tree(name):
    for rel, old, new in FLIP.FLIPS[name]:
        text = (ROOT / rel).read_text()
        assert (text.count(old), text.count(new)) in ((1, 0), (0, 1)), (name, rel, old)


def test_flips_apply_once_and_stale_ones_write_nothing(tmp_path, capsys):
    root = _copy(tmp_path)
    names = sorted(FLIP.FLIPS)
    assert FLIP.main([str(root), *names]) == 0
    after = {rel: (root / rel).read_text() for edits in FLIP.FLIPS.values() for rel, _, _ in edits}
    for edits in FLIP.FLIPS.values():
        for rel, old, new in edits:
            assert old not in after[rel] and new in after[rel]
    assert FLIP.main([str(root), *names]) == 0 and "already applied" in capsys.readouterr().out
    rel = FLIP.RULES
    (root / rel).write_text(after[rel].replace(FLIP.FLIPS["fsg"][0][2], ""))  # neither form left
    assert FLIP.main([str(root), "fsg"]) == 2 and "occurs 0 times" in capsys.readouterr().err
    assert FLIP.main([str(root), "nope"]) == 2
