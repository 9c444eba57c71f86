"""Group packages (`b12x.gemm`, ...) expose their ops lazily, from the root registry."""

from __future__ import annotations

import importlib
import sys


def group_attributes(package: str, namespace: dict):
    """(`__getattr__`, `__dir__`) for a group package: its ops resolve on first access."""
    root = package.rsplit(".", 1)[0]
    group = package.rsplit(".", 1)[1]

    def ops() -> dict[str, str]:
        registry = sys.modules[root]._OPS
        return {q.split(".", 1)[1]: rel for q, rel in registry.items() if q.split(".", 1)[0] == group}

    def __getattr__(name: str):
        rel = ops().get(name)
        if rel is None:
            raise AttributeError(f"b12x.{group} has no op {name!r}; it has: {sorted(ops()) or 'none yet'}")
        module = importlib.import_module(rel, root)
        namespace[name] = module
        return module

    def __dir__():
        return sorted(ops())

    return __getattr__, __dir__
