"""Every `from .module import name` in the test tree names something the module defines. GPU tests import their
helpers inside the test function, so on a CPU machine (the GPU tier skipped) a renamed helper would only fail on the
device: session 53's gemm tier lost five tests that way (`_cpu` moved to helpers.on_cpu)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parent


def _top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def test_relative_imports_resolve():
    missing = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 1 and node.module):
                continue
            source = path.parent / (node.module.replace(".", "/") + ".py")
            if not source.exists():  # a package or a module outside the tree: Python's own import checks it
                continue
            defined = _top_level_names(source)
            missing += [f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{a.name}" for a in node.names
                        if a.name != "*" and a.name not in defined]  # fmt: skip
    assert not missing, "relative imports of names their module does not define:\n" + "\n".join(missing)
