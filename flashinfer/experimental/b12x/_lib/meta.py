"""Op metadata: the record every op's `__init__` exposes as `META` (stdlib only)."""

from __future__ import annotations

from dataclasses import dataclass

API_STYLES = ("planned", "oneshot", "stateful")
GROUPS = ("gemm", "attention", "moe", "norm", "sequence", "quantization", "comm")


@dataclass(frozen=True)
class OpMeta:
    """What an op is, without importing it.

    name: the op's folder name (`blockscaled`); group: its group folder (`gemm`).
    api_style: "planned" (Caps -> plan -> prepare -> bind -> run), "oneshot" (plain functions that
    compile on first use) or "stateful" (classes, e.g. collectives).
    entry_points: the public names the op exports besides META.
    archs: CuTe/PTX targets the kernels really compile and run for (e.g. ("sm_90a", "sm_120a")).
    dtypes: activation/value dtypes it accepts, as strings ("bfloat16", "float16", ...).
    requires: toolchain pieces it needs at run time ("cutlass-dsl", "tvm-ffi", "triton", "cuda").
    """

    name: str
    group: str
    api_style: str
    entry_points: tuple[str, ...]
    archs: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    status: str = "experimental"
    notes: str = ""

    def __post_init__(self) -> None:
        if self.api_style not in API_STYLES:
            raise ValueError(f"api_style must be one of {API_STYLES}, got {self.api_style!r}")
        if self.group not in GROUPS:
            raise ValueError(f"group must be one of {GROUPS}, got {self.group!r}")
        if "is_supported" not in self.entry_points:
            raise ValueError(f"{self.group}.{self.name}: entry_points must include 'is_supported'")
        for field in ("entry_points", "archs", "dtypes", "requires"):
            if not isinstance(getattr(self, field), tuple):
                raise TypeError(f"OpMeta.{field} must be a tuple, got {type(getattr(self, field))}")

    @property
    def qualname(self) -> str:
        return f"{self.group}.{self.name}"
