"""PreparationSession and Plan on the CPU (reference backend) and, marked gpu, on CUDA."""

import warnings
from dataclasses import dataclass

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib.scratch import ALIGN, ScratchBufferSpec
from flashinfer.experimental.b12x.preparation import session as session_mod
from flashinfer.experimental.b12x.preparation.plan import Plan, PlanNotPreparedError, plan_from_handle


@dataclass(frozen=True)
class Caps:
    max_tokens: int
    hidden: int


PRIMED: list = []


class ToyPlan(Plan):
    """A plan with two scratch buffers and a priming run that records its order."""

    def heuristic(self, arch):
        return ("tile", 64 if self.caps.hidden >= 4096 else 32)

    def candidates(self, arch):
        return (("tile", 32), ("tile", 64), ("tile", 128))

    def scratch_specs(self, config=None, device="cuda"):
        return (
            ScratchBufferSpec("partials", (self.caps.max_tokens, self.caps.hidden), torch.float32, device),
            ScratchBufferSpec("counts", (self.caps.max_tokens,), torch.int32, device),
        )

    def prime(self, state):
        PRIMED.append(self.caps)
        state.scratch["counts"].fill_(1)


def toy(max_tokens=8, hidden=256, **kw):
    return ToyPlan(op="norm.toy", caps=Caps(max_tokens, hidden), **kw)


@pytest.fixture(autouse=True)
def _reset():
    PRIMED.clear()
    session_mod._warned_reference = False


@pytest.mark.contract
def test_plan_is_pure_value():
    a, b = toy(), toy()
    assert a == b and hash(a) == hash(b)
    assert toy(hidden=512) != a
    assert not a.prepared and a.handle is None and a.selection is None
    with pytest.raises(PlanNotPreparedError, match="PreparationSession"):
        a.state
    assert a.memory_requirements() == 8 * 256 * 4 + ALIGN  # partials, then counts at the next 1 KiB


@pytest.mark.contract
def test_prepare_on_cpu_runs_reference_in_request_order():
    plans = [toy(hidden=h) for h in (128, 4096, 256)]
    with pytest.warns(UserWarning, match="reference backend"):
        with b12x.PreparationSession("cpu") as session:
            result = session.prepare([plans[0], plans[1].request(name="second"), plans[2].request(name="third")])
    assert PRIMED == [p.caps for p in plans]
    assert list(result.selections) == ["norm.toy", "second", "third"]
    assert result.sources == {"norm.toy": "reference", "second": "reference", "third": "reference"}
    assert result.selections["second"] == ("tile", 64)
    for plan in plans:
        assert plan.prepared and plan_from_handle(plan.handle) is plan
        scratch = plan.state.scratch
        assert scratch["partials"].data_ptr() % ALIGN == 0 and scratch["counts"].data_ptr() % ALIGN == 0
        assert torch.equal(scratch["counts"], torch.ones(plan.caps.max_tokens, dtype=torch.int32))
    assert len({p.handle for p in plans}) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        b12x.PreparationSession("cpu").prepare([toy(hidden=64)])


@pytest.mark.contract
def test_workspace_address_stable_and_release():
    plan = toy()
    session = b12x.PreparationSession("cpu")
    session.prepare([plan])
    ptr = plan.state.scratch["partials"].data_ptr()
    for _ in range(3):
        assert plan.state.scratch["partials"].data_ptr() == ptr
    handle = plan.handle
    with pytest.raises(ValueError, match="already prepared"):
        session.prepare([plan])
    session.release(plan)
    assert not plan.prepared
    with pytest.raises(KeyError, match=f"handle {handle}"):
        plan_from_handle(handle)
    session.prepare([plan])  # the same object prepared again answers to its number (a traced graph holds it)
    assert plan.handle == handle and plan_from_handle(handle) is plan
    twin = toy()
    session.prepare([twin])  # an equal plan is another object with its own workspace: its own number
    assert twin == plan and twin.handle != handle and plan_from_handle(twin.handle) is twin


@pytest.mark.contract
def test_bare_plans_of_one_op_get_numbered_names():
    with pytest.warns(UserWarning):
        result = b12x.PreparationSession("cpu").prepare([toy(hidden=h) for h in (32, 64, 96)])
    assert list(result.selections) == ["norm.toy", "norm.toy#2", "norm.toy#3"]


@pytest.mark.contract
def test_prepare_call_replaces_prime():
    calls = []
    plan = toy()
    b12x.PreparationSession("cpu").prepare([plan.request(name="x", prepare_call=lambda p: calls.append(p.handle))])
    assert calls == [plan.handle] and PRIMED == []


@pytest.mark.contract
def test_bad_requests():
    session = b12x.PreparationSession("cpu")
    with pytest.raises(ValueError, match=r"request names must be unique, got duplicates \['a'\]"):
        session.prepare([toy().request(name="a"), toy(hidden=64).request(name="a")])
    with pytest.raises(TypeError, match="takes Plans or PreparationRequests, got int"):
        session.prepare([3])
    with pytest.raises(ValueError, match="compile_workers must be an int >= 1"):
        b12x.PreparationSession("cpu", compile_workers=0)


@pytest.mark.contract
def test_prepare_refused_while_frozen_and_capture_restores():
    session = b12x.PreparationSession("cpu")
    session.freeze()
    assert b12x.kernel_resolution_frozen()
    with pytest.raises(b12x.KernelResolutionFrozenError, match="frozen"):
        session.prepare([toy()])
    b12x.unfreeze_kernel_resolution()
    with session.capture():
        assert b12x.kernel_resolution_frozen()
    assert not b12x.kernel_resolution_frozen()


@pytest.mark.gpu
def test_autotune_measures_caches_and_reuses(tmp_path):
    times = {("tile", 32): 3.0, ("tile", 64): 1.0, ("tile", 128): 2.0}

    class Tunable(ToyPlan):
        def measure(self, state):
            return times[state.selection]

    plan = Tunable(op="norm.toy", caps=Caps(8, 256))
    with b12x.PreparationSession("cuda", autotune=True, cache_dir=tmp_path) as s:
        result = s.prepare([plan])
    assert result.selections["norm.toy"] == ("tile", 64) and result.sources["norm.toy"] == "measured"
    again = Tunable(op="norm.toy", caps=Caps(8, 256))
    result = b12x.PreparationSession("cuda", cache_dir=tmp_path).prepare([again])
    assert result.sources["norm.toy"] == "cached" and result.selections["norm.toy"] == ("tile", 64)
    assert again.state.scratch["partials"].device.type == "cuda"


def test_prepare_progress_says_what_each_plan_needed(monkeypatch, capsys):
    """The bar moves plan by plan: "compiled" when the plan's kernels were not in memory, "in memory"
    when an earlier plan (or process) resolved them, "reference" on the CPU backend; result.compiled
    counts each kernel once."""
    from tests.experimental.b12x.spine.fake_kernels import compile_square

    class KernelPlan(ToyPlan):
        def kernels(self, config, arch):
            return ((compile_square, (self.caps.hidden, arch)),)

    compile_square.cache_clear()
    monkeypatch.setattr(session_mod.PreparationSession, "_device_arch", lambda self: "sm_90a")
    over = ("tile", 32)  # an override: no selection cache (its file is named after a CUDA device)
    plans = [KernelPlan(op="norm.toy", caps=Caps(t, h), override=over) for t, h in ((8, 96), (16, 96), (8, 97))]
    with b12x.PreparationSession("cpu", compile_workers=1) as session:
        result = session.prepare([p.request(name=f"p{i}") for i, p in enumerate(plans)])
    assert result.compiled == 2 and compile_square.resolved(96, "sm_90a") and compile_square.resolved(97, "sm_90a")
    lines = [line for line in capsys.readouterr().err.splitlines() if "b12x prepare (3 plans)" in line]
    assert [line.split("(3 plans) ")[1] for line in lines[:3]] == [
        "1/9 compiled norm.toy",
        "2/9 in memory norm.toy",
        "3/9 compiled norm.toy",
    ]
    monkeypatch.undo()
    with pytest.warns(UserWarning, match="reference backend"):
        b12x.PreparationSession("cpu").prepare([toy(hidden=32)])
    assert "1/3 reference norm.toy" in capsys.readouterr().err


def test_worker_jobs_only_for_two_or_more_cold_non_triton_keys():
    from tests.experimental.b12x.spine.fake_kernels import compile_launcher, compile_square

    cold = [(compile_square, (31, "sm_90a")), (compile_square, (32, "sm_90a"))]
    triton = [(compile_launcher, (5, "sm_90a"))]
    assert session_mod.worker_jobs(cold + triton, 8) == cold + triton
    assert session_mod.worker_jobs(cold, 1) == []  # one worker: compile in-process
    assert session_mod.worker_jobs(cold[:1] + triton, 8) == []  # one cold CuTe-like key: not worth a spawn
    compile_square(31, "sm_90a")
    compile_square.cache_clear()
    compile_square(32, "sm_90a")  # 31 on disk only, 32 in memory and on disk: a warm start
    assert session_mod.worker_jobs(cold + triton, 8) == []
