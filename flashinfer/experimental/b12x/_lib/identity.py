"""One module identity for `b12x` and `flashinfer.experimental.b12x`.

The implementation root is `flashinfer/experimental/b12x/_api.py`; both `b12x` and
`flashinfer.experimental.b12x` name that one module object. Submodules get one identity too: a
meta-path finder maps `b12x.<rest>` to `flashinfer.experimental.b12x.<rest>`, imports the canonical
module and hands back the same object, whichever name is imported first. So there is one registry,
one compile cache and one freeze flag per process.

Stdlib only: this runs on `import b12x`, which must not import torch.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.metadata
import importlib.util
import sys

ALIAS = "b12x"
CANONICAL = "flashinfer.experimental.b12x"
FOREIGN_DISTRIBUTION = "b12x"


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, canonical: str) -> None:
        self.canonical = canonical

    def create_module(self, spec):
        # The import system keeps attributes already set on the returned module (override=False),
        # so `__name__`, `__spec__` and `__file__` stay the canonical module's.
        return importlib.import_module(self.canonical)

    def exec_module(self, module) -> None:
        pass


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Resolves `b12x.X` to the module object of `flashinfer.experimental.b12x.X`."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(ALIAS + "."):
            return None
        # `python -m b12x` runs `b12x.__main__` through runpy, which needs a real source loader; the
        # path finder finds it in the canonical folder (the alias root's __path__).
        if fullname.rsplit(".", 1)[-1] == "__main__":
            return None
        canonical = CANONICAL + fullname[len(ALIAS) :]
        spec = importlib.util.find_spec(canonical)
        if spec is None:
            return None
        return importlib.util.spec_from_loader(
            fullname, _AliasLoader(canonical), is_package=spec.submodule_search_locations is not None
        )


def install_alias(root_module) -> None:
    """Make the canonical name resolve to `root_module` and `b12x.X` to the canonical submodules.

    `sys.modules["b12x"]` itself is set by the shim package, after its own checks pass.
    """
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
    sys.modules[CANONICAL] = root_module


def check_no_foreign_b12x() -> None:
    """Refuse to run beside the archived standalone `b12x` distribution.

    Two distributions owning the top-level package `b12x` overwrite each other's files; whichever was
    installed last wins silently. Fail loudly instead.
    """
    try:
        dist = importlib.metadata.distribution(FOREIGN_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return
    where = getattr(dist, "_path", None)
    raise ImportError(
        f"A distribution named 'b12x' (version {dist.version}, at {where}) is installed beside "
        "flashinfer-python. Both provide the top-level package 'b12x', so one overwrites the other. "
        "b12x now ships inside FlashInfer: run `pip uninstall b12x` and then reinstall "
        "`pip install --force-reinstall 'flashinfer-python[b12x]'`."
    )
