"""Where b12x keeps files: the compile/selection cache directory."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """`override`, else `$B12X_CACHE_DIR`, else `~/.cache/flashinfer/b12x`."""
    if override is not None:
        return Path(override)
    env = os.environ.get("B12X_CACHE_DIR")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "flashinfer" / "b12x"


def disk_cache_enabled() -> bool:
    return os.environ.get("B12X_DISK_CACHE", "1") not in ("0", "false", "no", "off")
