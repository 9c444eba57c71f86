"""Lazy attributes for op and group packages: importing them stays cheap (no torch, no kernels)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_attributes(package: str, table: Mapping[str, str], namespace: dict | None = None) -> tuple[Callable, Callable]:
    """Return (`__getattr__`, `__dir__`) for a module that exposes `table[name]` lazily.

    When `namespace` (the module's `globals()`) is given, a resolved attribute is stored there so the
    next access is a plain global lookup.

    table maps an attribute to the module (relative to `package`) that defines it, e.g.
    {"plan": ".api"}; a value ending in ":" + name reads a differently named attribute
    ({"mm": ".api:matmul"}). A value of "" imports the submodule named like the attribute.
    """

    def __getattr__(name: str):
        try:
            target = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        if target == "":
            value = importlib.import_module(f".{name}", package)
        else:
            module_name, _, attr = target.partition(":")
            value = getattr(importlib.import_module(module_name, package), attr or name)
        if namespace is not None:
            namespace[name] = value
        return value

    def __dir__():
        return sorted(set(table) | {"META"})

    return __getattr__, __dir__
