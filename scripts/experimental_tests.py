#!/usr/bin/env python3
"""Run the experimental test targets a pull request lists in its `experimental-tests` fence.

    python scripts/experimental_tests.py PR_BODY.md          # or: ... < PR_BODY.md / ... -
    python scripts/experimental_tests.py --dry-run PR_BODY.md

The PR body must contain exactly one fenced block opened with ```experimental-tests, one target per
line: a file or folder under tests/experimental/ that exists, without `::` selectors, no duplicates.
Blank lines and lines starting with `#` are ignored. Exit status: pytest's, or 2 on a bad fence.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```experimental-tests[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


class FenceError(ValueError):
    pass


def parse_targets(body: str) -> list[str]:
    blocks = FENCE.findall(body.replace("\r\n", "\n"))
    if not blocks:
        raise FenceError("no ```experimental-tests fenced block found in the PR body")
    if len(blocks) > 1:
        raise FenceError(f"expected one ```experimental-tests block, found {len(blocks)}")
    targets = [ln.strip() for ln in blocks[0].splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not targets:
        raise FenceError("the ```experimental-tests block lists no targets")
    return targets


def validate_targets(targets: list[str], root: Path = ROOT) -> list[str]:
    base = (root / "tests" / "experimental").resolve()
    seen: set[str] = set()
    for target in targets:
        if "::" in target:
            raise FenceError(f"target {target!r}: '::' selectors are not allowed; list a file or folder")
        path = (root / target).resolve()
        if path != base and base not in path.parents:
            raise FenceError(f"target {target!r} is not under tests/experimental/")
        if not path.exists():
            raise FenceError(f"target {target!r} does not exist")
        key = str(path)
        if key in seen:
            raise FenceError(f"target {target!r} is listed twice")
        seen.add(key)
    return targets


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("body", nargs="?", default="-", help="PR body file, or - for stdin (default)")
    parser.add_argument("--dry-run", action="store_true", help="print the pytest command, run nothing")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="extra pytest arguments after --")
    args = parser.parse_args(argv)
    body = sys.stdin.read() if args.body == "-" else Path(args.body).read_text()
    try:
        targets = validate_targets(parse_targets(body))
    except FenceError as exc:
        print(f"experimental-tests: {exc}", file=sys.stderr)
        return 2
    extra = [a for a in args.pytest_args if a != "--"]
    cmd = [sys.executable, "-m", "pytest", *targets, *extra]
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    return subprocess.call(cmd, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())
