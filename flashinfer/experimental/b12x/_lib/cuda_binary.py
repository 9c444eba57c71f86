"""What ptxas made of a kernel: the CUDA binary tools (nvdisasm, cuobjdump) on a compiled cubin.

The compile-tier tests read a kernel's SASS (instruction order, opcodes, spills) and its resource
usage (registers, stack, local memory) on a CPU-only machine; this is the one place that finds the
tools and runs them. A tool is taken from PATH first, then from the copy Triton's wheel ships
(`triton/backends/nvidia/bin`), so a plain `pip install` of the test extras is enough.

    from flashinfer.experimental.b12x._lib import cuda_binary as CB
    text = CB.sass(fn.artifacts.CUBIN)            # nvdisasm -c
    CB.instructions(fn.artifacts.CUBIN)           # its instructions, predicates kept, in order
    CB.resources(fn.artifacts.CUBIN)["REG"]       # cuobjdump -res-usage, the last kernel's line
    CB.ptx_fingerprint(fn.artifacts.PTX)          # a hash of the PTX without line info, debug sections, comment lines
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

TOOLS = ("nvdisasm", "cuobjdump")
RES_USAGE = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


class MissingTool(LookupError):
    """A CUDA binary tool is neither on PATH nor in Triton's wheel."""


def tool(name: str) -> str | None:
    """The path of CUDA binary tool `name` (PATH, then Triton's bundled copy), or None."""
    if name not in TOOLS:
        raise ValueError(f"tool must be one of {TOOLS}, got {name!r}")
    found = shutil.which(name)
    if found is not None:
        return found
    try:
        import triton
    except ImportError:
        return None
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    return str(bundled) if bundled.exists() else None


def run(name: str, cubin: bytes, *flags: str) -> str:
    """stdout of `name *flags file.cubin` on the bytes of a cubin (raises MissingTool without it)."""
    path = tool(name)
    if path is None:
        raise MissingTool(f"{name} is neither on PATH nor in Triton's wheel")
    if not cubin[:4] == b"\x7fELF":
        raise ValueError(f"cubin must be the bytes of an ELF cubin, got {bytes(cubin[:4])!r}...")
    with tempfile.TemporaryDirectory(prefix="b12x-cubin-") as tmp:
        file = Path(tmp) / "k.cubin"
        file.write_bytes(cubin)
        return subprocess.run([path, *flags, str(file)], capture_output=True, text=True, check=True).stdout


def sass(cubin: bytes) -> str:
    """The SASS text of a cubin (`nvdisasm -c`: one instruction a line)."""
    return run("nvdisasm", cubin, "-c")


def instructions(cubin: bytes) -> list[str]:
    """The SASS instructions in order, without addresses, encodings or the trailing ';' (a predicate
    such as '@!P0' stays in front of its opcode)."""
    return [line.split("*/", 1)[-1].split(";")[0].strip() for line in sass(cubin).splitlines() if "*/" in line]


def opcodes(cubin: bytes) -> list[str]:
    """The opcode (with its modifiers, e.g. 'LDG.E.128') of every SASS instruction, predicates dropped."""
    ops = [text.split() for text in instructions(cubin)]
    return [(op[1] if op[0].startswith("@") else op[0]) for op in ops if op]


def resources(cubin: bytes) -> dict[str, int]:
    """{"REG", "STACK", "SHARED", "LOCAL"} of the cubin's last kernel (`cuobjdump -res-usage`)."""
    out = run("cuobjdump", cubin, "-res-usage")
    found = RES_USAGE.findall(out)
    if not found:
        raise ValueError(f"cuobjdump -res-usage printed no REG/STACK/SHARED/LOCAL line:\n{out}")
    return dict(zip(("REG", "STACK", "SHARED", "LOCAL"), map(int, found[-1])))


def ptx_fingerprint(ptx: str) -> str:
    """A 16-hex-digit hash of a kernel's PTX with its debug sections, `.loc` / `.file` lines and comment lines dropped:
    equal before and after a refactor that must not change the kernel (scripts/*_ptx_fingerprints.py)."""
    body = ptx.split("\t.section\t.debug", 1)[0]
    lines = [line for line in body.splitlines() if not re.match(r"\s*(\.loc|\.file|//)", line)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
