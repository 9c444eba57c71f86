"""Session 54's staged switches as exact one-line edits (with the tests that assert their state), so the device job
that ran a switch's A/B can apply it to the snapshot it then tests, and a commit here applies the same edits.

    python3 scripts/jobs/s54_flip.py ROOT NAME [NAME ...]     NAME: fmxmul, mxwide, d16s, w16, fsg, w8p, w8f

Each edit must match exactly once under ROOT (or be applied already), or nothing is written and the exit status is 2."""

from __future__ import annotations

import sys
from pathlib import Path

RULES = "flashinfer/experimental/b12x/gemm/_shared/decode_rules.py"
HEUR = "tests/experimental/b12x/gemm/test_heuristic.py"
FLIPS = {
    "fmxmul": [
        (RULES, "\nFUSED_MXFP4_SILU_MUL = False\n", "\nFUSED_MXFP4_SILU_MUL = True\n"),
        (
            HEUR,
            "    assert not R.FUSED_MXFP4_SILU_MUL  # staged: silu_mul below the wide 9..16-token grids\n",
            "    assert R.FUSED_MXFP4_SILU_MUL  # on: silu_mul below the wide 9..16-token grids\n",
        ),
    ],
    "mxwide": [
        (RULES, "\nMXFP4_WIDE_ONE_WAVE = False\n", "\nMXFP4_WIDE_ONE_WAVE = True\n"),
        (HEUR, "    assert not R.MXFP4_WIDE_ONE_WAVE\n", "    assert R.MXFP4_WIDE_ONE_WAVE\n"),
    ],
    "d16s": [(RULES, "\nDECODE16_SHARED_A = False\n", "\nDECODE16_SHARED_A = True\n")],
    "w16": [(RULES, "\nEIGHT_WARP_WAVE = False\n", "\nEIGHT_WARP_WAVE = True\n")],
    "fsg": [(RULES, "\nFUSED_SILU_GROUPS = False\n", "\nFUSED_SILU_GROUPS = True\n")],
    "w8p": [(RULES, "\nEIGHT_WARP_WAVE16 = False\n", "\nEIGHT_WARP_WAVE16 = True\n")],
    "w8f": [(RULES, "\nFUSED_EIGHT_WARP_WAVE = False\n", "\nFUSED_EIGHT_WARP_WAVE = True\n")],
}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or any(name not in FLIPS for name in argv[1:]):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    root, texts = Path(argv[0]), {}
    for name in argv[1:]:
        for rel, old, new in FLIPS[name]:
            text = texts.get(rel) or (root / rel).read_text()
            if text.count(old) == 0 and text.count(new) == 1:
                print(f"s54_flip: {name}: already applied in {rel}")
                continue
            if text.count(old) != 1:
                print(f"s54_flip: {name}: {old.strip()!r} occurs {text.count(old)} times in {rel}", file=sys.stderr)
                return 2
            texts[rel] = text.replace(old, new)
    for rel, text in texts.items():
        (root / rel).write_text(text)
    print(f"s54_flip: {' '.join(argv[1:])} applied under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
