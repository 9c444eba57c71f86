"""Plan: the pure, hashable description of one op instance, and its prepared state.

A plan is made by an op's `plan(caps)`: it holds static facts only (op, caps, invocation,
override), allocates nothing and compiles nothing, and two equal plans hash equal. Preparing it in a
`PreparationSession` attaches a `PlanState` (selection, compiled kernels, workspace, handle) that is
not part of the plan's identity.

Ops subclass `Plan` and override the hooks below; the session calls them in this order:
`candidates`/`heuristic` (select) -> `kernels` (compile) -> `scratch_specs` (allocate) -> `prime`.

A plan whose run is a sum of independent parts (a gemm's M buckets: each M runs one bucket's kernel) can offer
`candidate_parts` and `measure_parts` instead of a whole-selection list: autotune then times every alternative of
every part once, over `rounds(parts)` selections, and keeps each part's fastest.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from .._lib.scratch import ScratchBufferSpec, layout

_handle_lock = threading.Lock()
_next_handle = itertools.count(1)
_plans_by_handle: weakref.WeakValueDictionary[int, Plan] = weakref.WeakValueDictionary()


@dataclass
class PlanState:
    """What preparation attached to a plan (mutable; never part of the plan's hash)."""

    handle: int | None = None
    device: Any = None
    arch: str | None = None  # None: the reference backend (CPU tensors)
    selection: Any = None
    selection_source: str = ""  # "heuristic", "override", "measured", "cached", "reference"
    kernels: tuple = ()
    arena: Any = None
    scratch: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # op-private prepared objects (e.g. packed constants)


def rounds(parts) -> tuple:
    """The selections that time every alternative of every part once: round r takes each part's r-th alternative
    (a shorter part repeats its last), so there are as many rounds as the longest part has alternatives and round
    0 is the heuristic selection."""
    width = max(len(p) for p in parts)
    return tuple(tuple(p[min(r, len(p) - 1)] for p in parts) for r in range(width))


class PlanNotPreparedError(RuntimeError):
    pass


@dataclass(frozen=True)
class Plan:
    """Base of every op's plan. Subclasses are frozen dataclasses too (identity = fields)."""

    op: str
    caps: Any
    invocation: Any = None
    override: Any = None
    _state: PlanState = field(default=None, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_state", PlanState())

    # ---- hooks an op overrides -------------------------------------------------------------
    def heuristic(self, arch: str | None):
        """The config chosen without measuring (None for ops with a single variant)."""
        return None

    def candidates(self, arch: str | None) -> tuple:
        """Every legal config, for autotune (default: the heuristic one only)."""
        return (self.heuristic(arch),)

    def candidate_parts(self, arch: str | None) -> tuple | None:
        """Separable tuning: per part, its legal alternatives with the heuristic's first; a selection is the tuple
        of one alternative per part. None (the default): `candidates` are timed whole."""
        return None

    def measure_parts(self, state: PlanState) -> tuple[float, ...]:
        """Seconds per run of each part of the selected config, in part order (with `candidate_parts`)."""
        raise NotImplementedError

    def tuning_key(self) -> tuple:
        """Static facts a measured selection depends on (caps + invocation by default)."""
        return (self.op, repr(self.caps), repr(self.invocation))

    def kernels(self, config, arch: str) -> tuple:
        """(compiled-kernel object, args) pairs this config needs; resolved through `_lib.compile`."""
        return ()

    def scratch_specs(self, config=None, device="cuda") -> tuple[ScratchBufferSpec, ...]:
        """Workspace at fixed capacity (sized from caps, never from live sizes)."""
        return ()

    def prime(self, state: PlanState) -> None:
        """One run on synthetic inputs so lazy initialisation happens before graph capture."""

    def measure(self, state: PlanState) -> float:
        """Seconds per run of the selected config (autotune); default: not tunable."""
        raise NotImplementedError

    # ---- public surface ----------------------------------------------------------------------
    @property
    def handle(self) -> int | None:
        return self._state.handle

    @property
    def prepared(self) -> bool:
        return self._state.handle is not None

    @property
    def selection(self):
        return self._state.selection

    @property
    def state(self) -> PlanState:
        """The prepared state; raises PlanNotPreparedError (naming PreparationSession) if none."""
        if self._state.handle is None:
            raise PlanNotPreparedError(
                f"{self.op}: this plan is not prepared. Prepare it first: "
                "`with b12x.PreparationSession(device) as session: session.prepare([plan])` "
                "(that selects, compiles, allocates and primes it, outside any CUDA graph capture)."
            )
        return self._state

    def memory_requirements(self, device="cuda") -> int:
        """Bytes of workspace this plan allocates when prepared (at its heuristic config)."""
        config = self._state.selection if self.prepared else self.heuristic(None)
        return layout(self.scratch_specs(config, device)).total

    def request(self, name: str | None = None, prepare_call=None) -> PreparationRequest:
        return PreparationRequest(plan=self, name=name or self.op, prepare_call=prepare_call)

    def _assign_handle(self) -> int:
        """Register the plan under its handle. A plan object keeps one number for its lifetime: prepared again after
        a release it gets the same one, so a torch.compile graph that captured the number (custom ops take the plan
        as its handle) still finds it. Between the release and the new prepare the number resolves to nothing."""
        with _handle_lock:
            handle = self.__dict__.get("_handle_number")
            if handle is None:
                handle = next(_next_handle)
                object.__setattr__(self, "_handle_number", handle)  # not a field: identity and hash unchanged
            _plans_by_handle[handle] = self
        self._state.handle = handle
        return handle

    def _release(self) -> None:
        with _handle_lock:
            if self._state.handle is not None:
                _plans_by_handle.pop(self._state.handle, None)
        object.__setattr__(self, "_state", PlanState())


@dataclass(frozen=True)
class PreparationRequest:
    """A plan plus how to prepare it: `name` labels it in results and progress; `prepare_call`, if
    given, replaces the plan's default priming: it is called as `prepare_call(plan)` once the plan is
    compiled and its workspace allocated (e.g. to run the op once on the caller's real tensors)."""

    plan: Plan
    name: str
    prepare_call: Any = None


def plan_from_handle(handle: int) -> Plan:
    """The prepared plan behind an integer handle (what custom ops receive)."""
    try:
        return _plans_by_handle[handle]
    except KeyError:
        raise KeyError(f"no prepared b12x plan has handle {handle} (released or never prepared)") from None
