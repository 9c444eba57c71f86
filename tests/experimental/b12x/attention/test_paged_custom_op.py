"""attention.paged's torch custom op (`torch.ops.b12x.attention_paged_run_`): under torch.compile(fullgraph=True)
`run(binding=bind(...))` traces to one op node with no graph break and writes what the eager call writes, bit for
bit, on the CPU's reference backend, in decode and extend, with fp8 KV and its descales, sinks, a window and the
caller's output buffers; aot_eager (AOTAutograd's functionalization) keeps those writes. Checks that need a tensor's
values or address run when the op runs, so a bad page id still raises, from inside the compiled call."""

import re

import pytest
import torch

import b12x
from tests.experimental.b12x.conftest import _compile_recording

from . import test_paged_contract as decode_contract
from . import test_paged_extend_contract as extend_contract
from .paged_cases import make_case

pytestmark = [pytest.mark.contract, pytest.mark.usefixtures("quiet_cpu_reference")]

paged = b12x.attention.paged
OP = "b12x.attention_paged_run_.default"


def _compiled(plan, kw, backend):
    """(eager (out, lse), compiled (out, lse), the compiled graph's call targets) for bind(plan, **kw) + run; q is
    the compiled function's argument, the rest come in through kw as the traced closure's constants."""
    want = tuple(t.clone() for t in paged.run(binding=paged.bind(plan, **kw)))

    def step(q):
        out, lse = paged.run(binding=paged.bind(plan, **{**kw, "q": q}))
        return out.clone(), lse.clone()

    got, ops = _compiled_step(step, kw["q"], backend)
    return want, got, ops


def _compiled_step(step, q, backend):
    got, ops = _compile_recording(step, q, backend=backend)
    assert ops.count(OP) == 1, ops
    return got, ops


def _equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_decode_compiles_to_its_op(backend, kv_dtype):
    p = decode_contract.prepared(decode_contract.caps(kv_dtype=kv_dtype))
    case = make_case([5, 60, 17], kv_dtype=kv_dtype, width=16, seed=1)
    kw = decode_contract._bind_kwargs(case, attention_sink_bias=torch.randn(8), window_left=20)
    if case.k_descale is not None:
        kw.update(k_descale=case.k_descale, v_descale=case.v_descale)
    want, got, _ = _compiled(p, kw, backend)
    assert _equal(got, want)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("mode", ["extend", "verify"])
def test_extend_compiles_to_its_op(backend, mode):
    p = extend_contract.prepared(extend_contract.caps(mode=mode))
    q_lens = [3, 3, 3] if mode == "verify" else [0, 5, 17, 1]
    case = make_case([9, 40, 17, 70][: len(q_lens)], q_lens, width=8, seed=2)
    want, got, _ = _compiled(p, extend_contract._kwargs(case), backend)
    assert _equal(got, want)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_the_caller_s_output_buffers_are_written(backend):
    p = decode_contract.prepared()
    case = make_case([5, 60], seed=3)
    out = torch.full((2, 8, 64), float("nan"), dtype=torch.bfloat16)
    lse = torch.full((2, 8), float("nan"))
    kw = decode_contract._bind_kwargs(case)
    want = tuple(t.clone() for t in paged.run(binding=paged.bind(p, **kw)))

    def step(q):
        paged.run(binding=paged.bind(p, **{**kw, "q": q}, output=out, lse=lse))
        return out.sum()

    _compiled_step(step, case.q, backend)
    assert _equal((out, lse), want)


def test_values_are_checked_when_the_op_runs():
    """Traced, bind cannot read page ids; the op binds again when it runs, so the eager error still comes (and
    check_values=False still skips it)."""
    p = decode_contract.prepared()
    case = make_case([5, 60], seed=4)
    table = case.page_table.clone()
    table[1, 3] = 64  # past the cache's 8 pages
    kw = decode_contract._bind_kwargs(case, page_table=table)

    def step(q):
        return paged.run(binding=paged.bind(p, **{**kw, "q": q}))[1].sum()

    message = "page_table[1, 3] = 64 is not a page of the cache"
    with pytest.raises(Exception, match=re.escape(message)):
        _compile_recording(step, case.q)


def test_a_caller_s_scratch_is_refused_under_compile():
    p = decode_contract.prepared()
    case = make_case([5, 60], seed=5)
    kw = decode_contract._bind_kwargs(case, scratch=dict(p.state.scratch))

    def step(q):
        return paged.run(binding=paged.bind(p, **{**kw, "q": q}))[0].sum()

    with pytest.raises(Exception, match=re.escape("(under torch.compile: None)")):
        _compile_recording(step, case.q)


def test_compiling_keeps_nothing_in_the_plan_s_views():
    """Traced slices must never land in the plan's kept views (`_bind_views.kept`): they are not real tensors."""
    p = decode_contract.prepared()
    case = make_case([5, 60], seed=6)
    kept = decode_contract._bind_views.kept(p.state)
    kept.clear()
    _compiled(p, decode_contract._bind_kwargs(case), "eager")
    assert list(kept) == [(2, 2)]  # only the eager bind's, from the real scratch
    assert all(
        isinstance(t, torch.Tensor) and not isinstance(t, torch._subclasses.FakeTensor) for t in kept[(2, 2)][:3]
    )


def test_a_binding_made_eagerly_cannot_run_compiled():
    p = decode_contract.prepared()
    case = make_case([5, 60], seed=7)
    binding = paged.bind(p, **decode_contract._bind_kwargs(case))

    def step(q):
        return paged.run(binding=binding)[0].sum() + q.sum()

    with pytest.raises(Exception, match=re.escape("a binding made outside torch.compile cannot run inside it")):
        _compile_recording(step, case.q)
