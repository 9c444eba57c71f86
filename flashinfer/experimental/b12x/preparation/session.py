"""PreparationSession: select, compile, allocate and prime every planned op before serving.

    with b12x.PreparationSession("cuda:0") as session:
        result = session.prepare([plan_a, plan_b.request(name="layer0.mhc")])
        session.freeze()                # from now on nothing compiles in this process
    ... bind / run / capture CUDA graphs ...

Per plan, in request order (collective plans must be prepared in the same order on every rank):
1. select: the override if the plan has one; else a measured selection (autotune=True measures
   every candidate on the device, or for a plan of separable parts every part's alternatives once
   (`Plan.candidate_parts`), and caches the winner on disk, keyed by the plan's tuning key, the
   device's compute capability and SM count; autotune=False still uses a cached measurement when
   there is one: fast startup by default); else the plan's heuristic.
2. compile: every kernel the selection needs, through `_lib.compile` (memory, then disk, then
   compile). With compile_workers > 1 and at least two CuTe kernels in neither memory nor the disk
   cache, worker processes (spawned, no CUDA) compile the cold keys into the disk cache in parallel
   and this process then loads them; a warm start (everything on disk) spawns no worker.
3. allocate: the plan's scratch specs in one aligned arena at fixed capacity (stable addresses).
4. prime: one run on synthetic inputs (or the request's prepare_call), so lazy initialisation
   happens before graph capture.
5. handle: a stable integer, resolvable back with `plan_from_handle`.

On a CPU device the reference backend is selected: nothing compiles, scratch lives on the CPU, and
one warning per process says so.

Leaving the `with` block ends the preparation phase (worker processes stop); prepared plans stay
valid until `release(plans)`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from .._lib import freeze as _freeze
from .._lib.arch import resolve_device
from .._lib.paths import cache_dir as _cache_dir
from .._lib.scratch import allocate_arena, carve
from .plan import Plan, PreparationRequest, rounds

_warned_reference = False


@dataclass
class PreparationResult:
    """What `prepare` did: per request name, the selection and where it came from, and timings."""

    selections: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)
    handles: dict = field(default_factory=dict)
    compiled: int = 0  # kernels compiled or loaded from disk (none in memory before), each counted once
    seconds: dict = field(default_factory=dict)


def _as_requests(items) -> list[PreparationRequest]:
    """Requests in order; a bare Plan is named after its op, numbered when the op repeats."""
    requests, seen = [], {}
    for item in items:
        if isinstance(item, PreparationRequest):
            requests.append(item)
        elif isinstance(item, Plan):
            seen[item.op] = seen.get(item.op, 0) + 1
            name = item.op if seen[item.op] == 1 else f"{item.op}#{seen[item.op]}"
            requests.append(item.request(name=name))
        else:
            raise TypeError(f"prepare() takes Plans or PreparationRequests, got {type(item).__name__}")
    return requests


def worker_jobs(missing: list, workers: int) -> list:
    """The (kernel, args) of `missing` worth compiling in worker processes: none unless at least two
    keys outside Triton would really compile (not in the disk cache); a warm start never spawns
    workers, since spawning one (a fresh interpreter importing the DSL) costs seconds."""
    cold = [(k, args) for k, args in missing if k.needs_compile(*args)]
    if workers <= 1 or sum(k.backend != "triton" for k, _ in cold) < 2:
        return []
    return cold


class PreparationSession:
    """See the module docstring. `device`: "cuda", "cuda:N", a torch.device, or "cpu"."""

    def __init__(self, device="cuda", *, autotune=False, cache_dir=None, namespace=None, compile_workers=None):

        self.device = resolve_device(device)
        if compile_workers is not None and (not isinstance(compile_workers, int) or compile_workers < 1):
            raise ValueError(f"compile_workers must be an int >= 1 or None, got {compile_workers!r}")
        self.autotune = bool(autotune)
        self.namespace = namespace or "default"
        self.compile_workers = compile_workers or 1
        self._cache_dir = _cache_dir(cache_dir)
        self._plans: list[Plan] = []
        self._pool: ProcessPoolExecutor | None = None
        self._arch = self._device_arch()

    # ---- context manager ----------------------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        """End the preparation phase: stop compile workers. Prepared plans stay valid."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # ---- the phases ---------------------------------------------------------------------------
    def _device_arch(self) -> str | None:
        if self.device.type != "cuda":
            return None
        from .._lib.arch import target_arch

        return target_arch(self.device)

    def prepare(self, requests) -> PreparationResult:
        if isinstance(requests, (Plan, PreparationRequest)):
            requests = [requests]
        requests = _as_requests(requests)
        names = [r.name for r in requests]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"request names must be unique, got duplicates {dup}; pass plan.request(name=...)")
        if _freeze.kernel_resolution_frozen():
            raise _freeze.KernelResolutionFrozenError(
                "PreparationSession", ", ".join(names), _freeze.frozen_reason() or "frozen"
            )
        result = PreparationResult()
        timer = _PhaseTimer(result.seconds)
        from .._lib.progress import progress_bar

        with progress_bar(len(requests) * 3, f"b12x prepare ({len(requests)} plans)") as bar:
            with timer("select"):
                for req in requests:
                    self._select(req.plan)
            with timer("compile"):
                result.compiled = self._compile([r.plan for r in requests], bar)
            with timer("allocate+prime"):
                for req in requests:
                    self._allocate(req.plan)
                    bar.advance(1, f"prime {req.name}")
                    (req.prepare_call or (lambda p: p.prime(p.state)))(req.plan)
                    bar.advance(1, f"ready {req.name}")
        for req in requests:
            st = req.plan._state
            result.selections[req.name] = st.selection
            result.sources[req.name] = st.selection_source
            result.handles[req.name] = st.handle
            self._plans.append(req.plan)
        return result

    def _select(self, plan: Plan) -> None:
        st = plan._state
        if st.handle is not None:
            raise ValueError(f"{plan.op}: plan is already prepared (handle {st.handle}); release it first")
        st.device, st.arch = self.device, self._arch
        if self._arch is None:
            _warn_reference_once(self.device)
            st.selection, st.selection_source = plan.heuristic(None), "reference"
            return
        if plan.override is not None:
            st.selection, st.selection_source = plan.override, "override"
            return
        if self.autotune:
            st.selection, st.selection_source = self._measure(plan), "measured"
        elif (cached := self._cached_selection(plan)) is not None:
            st.selection, st.selection_source = cached, "cached"
        else:
            st.selection, st.selection_source = plan.heuristic(self._arch), "heuristic"

    def _jobs(self, plans) -> list:
        jobs = []
        for plan in plans:
            st = plan._state
            if st.arch is None:
                continue
            st.kernels = tuple(plan.kernels(st.selection, st.arch))
            jobs.extend(st.kernels)
        return jobs

    def _compile(self, plans, bar) -> int:
        jobs = self._jobs(plans)
        missing = [(k, args) for k, args in jobs if not k.resolved(*args)]
        parallel = worker_jobs(missing, self.compile_workers)
        if parallel:
            from .._lib import compile as _compile

            if self._pool is None:
                import multiprocessing

                self._pool = ProcessPoolExecutor(
                    max_workers=min(self.compile_workers, len(parallel)),
                    mp_context=multiprocessing.get_context("spawn"),
                )
            futures = [self._pool.submit(_compile.run_job, k.job(*args)) for k, args in parallel]
            for f in futures:
                f.result()  # re-raises a worker's compile error here
        count = 0
        for plan in plans:  # plan by plan, so the bar moves as each plan's kernels become ready
            st = plan._state
            if st.arch is None:
                bar.advance(1, f"reference {plan.op}")
                continue
            todo = [(k, args) for k, args in st.kernels if not k.resolved(*args)]  # a kernel shared with an
            for k, args in todo:  # earlier plan is resolved by now: counted once
                k(*args)  # memory miss -> disk (just filled by the workers) or compile
            count += len(todo)
            bar.advance(1, f"{'compiled' if todo else 'in memory'} {plan.op}")
        return count

    def _allocate(self, plan: Plan) -> None:
        self._attach_workspace(plan)
        plan._assign_handle()

    def _attach_workspace(self, plan: Plan) -> None:
        """One arena for the scratch specs of the plan's current selection, carved into its views."""
        st = plan._state
        specs = plan.scratch_specs(st.selection, self.device)
        st.arena, st.scratch = None, {}
        if specs:
            st.arena, lay = allocate_arena(specs, self.device)
            st.scratch = carve(st.arena, specs, lay)

    # ---- autotune -----------------------------------------------------------------------------
    def _selection_file(self, plan: Plan):
        import torch

        props = torch.cuda.get_device_properties(self.device)
        tag = f"cc{props.major}{props.minor}_sm{props.multi_processor_count}"
        return self._cache_dir / "selections" / self.namespace / f"{plan.op}.{tag}.json"

    def _cached_selection(self, plan: Plan):
        path = self._selection_file(plan)
        if not path.exists():
            return None
        try:
            table = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        entry = table.get(repr(plan.tuning_key()))
        if entry is None:
            return None
        parts = plan.candidate_parts(self._arch)
        if parts is not None:  # stored part by part: each must still be one of its part's alternatives
            if not isinstance(entry, list) or len(entry) != len(parts):
                return None
            chosen = [next((a for a in alts if repr(a) == e), None) for alts, e in zip(parts, entry)]
            return None if any(c is None for c in chosen) else tuple(chosen)
        for candidate in plan.candidates(self._arch):
            if repr(candidate) == entry:
                return candidate
        return None  # the cached winner is no longer a legal candidate: fall back to the heuristic

    def _measure(self, plan: Plan):
        parts = plan.candidate_parts(self._arch)
        if parts is not None:
            return self._measure_parts(plan, parts)
        candidates = list(plan.candidates(self._arch))
        if len(candidates) == 1:
            return candidates[0]
        timings = [(self._time(plan, c, plan.measure), c) for c in candidates]
        best = min(timings, key=lambda t: t[0])[1]
        self._store_selection(plan, repr(best))
        return best

    def _measure_parts(self, plan: Plan, parts):
        """Each part's fastest alternative, every alternative timed once (`plan.rounds`)."""
        if max(len(alts) for alts in parts) == 1:  # nothing to choose: as `_measure` with one candidate
            return tuple(alts[0] for alts in parts)
        best = [(float("inf"), alts[0]) for alts in parts]
        for r, selection in enumerate(rounds(parts)):
            times = self._time(plan, selection, plan.measure_parts)
            for i, (t, choice) in enumerate(zip(times, selection)):
                if r < len(parts[i]) and t < best[i][0]:  # a shorter part's repeated last entry counts once
                    best[i] = (t, choice)
        chosen = tuple(choice for _, choice in best)
        self._store_selection(plan, [repr(c) for c in chosen])
        return chosen

    def _time(self, plan: Plan, selection, clock):
        """Prepare `selection` as the plan's (kernels, workspace, prime) and read `clock(state)`."""
        st = plan._state
        st.selection = selection
        st.kernels = tuple(plan.kernels(selection, self._arch))
        for k, args in st.kernels:
            k(*args)
        self._attach_workspace(plan)
        plan.prime(st)
        try:
            return clock(st)
        finally:
            st.arena, st.scratch = None, {}

    def _store_selection(self, plan: Plan, entry) -> None:
        path = self._selection_file(plan)
        path.parent.mkdir(parents=True, exist_ok=True)
        table = {}
        if path.exists():
            with contextlib.suppress(OSError, ValueError):
                table = json.loads(path.read_text())
        table[repr(plan.tuning_key())] = entry
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
        os.replace(tmp, path)

    # ---- serving ------------------------------------------------------------------------------
    def freeze(self, reason: str | None = None) -> None:
        """Freeze kernel resolution process-wide: from now on any unresolved kernel raises."""
        _freeze.freeze_kernel_resolution(reason or f"PreparationSession({self.namespace}) frozen")

    @contextlib.contextmanager
    def capture(self):
        """Freeze resolution for the duration of a CUDA graph capture (restores the previous state)."""
        previous = _freeze.frozen_reason()
        _freeze.freeze_kernel_resolution(previous or "CUDA graph capture")
        try:
            yield self
        finally:
            if previous is None:
                _freeze.unfreeze_kernel_resolution()

    def release(self, plans) -> None:
        """Free the plans' workspaces and handles; they must be prepared again before use."""
        if isinstance(plans, Plan):
            plans = [plans]
        for plan in plans:
            plan._release()
            if plan in self._plans:
                self._plans = [p for p in self._plans if p is not plan]

    @property
    def plans(self) -> tuple[Plan, ...]:
        return tuple(self._plans)


class _PhaseTimer:
    def __init__(self, sink: dict) -> None:
        self.sink = sink

    @contextlib.contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.sink[name] = self.sink.get(name, 0.0) + time.perf_counter() - start


def _warn_reference_once(device) -> None:
    global _warned_reference
    if not _warned_reference:
        _warned_reference = True
        warnings.warn(
            f"b12x: preparing on {device}: the plain-torch reference backend runs (no kernels compile); "
            "use a CUDA device for the real kernels",
            stacklevel=3,
        )


_default_sessions: dict = {}


def ensure_prepared(plan: Plan, device) -> Plan:
    """Prepare `plan` in a per-device default session if it is not prepared yet.

    For one-shot entry points (`quantize(x, ...)`, `quantize_rows(..., plan=None)`): they compile
    on first use, and the freeze rule still holds (prepare raises while resolution is frozen).
    """
    if plan.prepared:
        return plan
    dev = resolve_device(device)
    session = _default_sessions.get(str(dev))
    if session is None:
        session = _default_sessions[str(dev)] = PreparationSession(dev, namespace="default")
    session.prepare([plan])
    return plan
