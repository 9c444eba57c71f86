"""Python-backend kernels for the spine tests: the compile decorator without the CuTe DSL.

`compile_slow` sleeps (so two processes really overlap on one key) and appends one line per compile
to $B12X_TEST_COMPILE_LOG, the only record that survives across processes.
"""

from __future__ import annotations

import enum
import os
import time
from dataclasses import dataclass

from flashinfer.experimental.b12x._lib.compile import kernel


class Mode(enum.Enum):
    FAST = 1
    SAFE = 2


@dataclass(frozen=True)
class Tile:
    m: int = 64
    n: int = 128


@kernel("spine.square", backend="python")
def compile_square(n: int, arch: str, dtype: str = "bfloat16", tile: Tile = Tile(), mode: Mode = Mode.FAST):
    return {"square": n * n, "dtype": dtype, "arch": arch, "tile": tile, "mode": mode}


@kernel("spine.slow", backend="python")
def compile_slow(tag: str, delay: float, arch: str):
    time.sleep(delay)
    log = os.environ.get("B12X_TEST_COMPILE_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {tag}\n")
    return f"slow-{tag}-{arch}"


@kernel("spine.launcher", backend="triton")
def compile_launcher(block: int, arch: str):
    return lambda x: x * block
