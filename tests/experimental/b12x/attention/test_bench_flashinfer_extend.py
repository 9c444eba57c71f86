"""bench_attention's FlashInfer prefill peer (benchmarks/experimental/b12x/_flashinfer_extend.py) on the CPU: the
extend case's draws, the record the child gets and its redraw check, and the child's check-then-time step against a
stand-in FlashInfer whose prefill reads the record's indptr / indices layout (a wrong layout or mask is caught)."""

import argparse

import pytest
import torch

from benchmarks.experimental.b12x import _flashinfer_extend as fiext
from benchmarks.experimental.b12x import _flashinfer_peer as fipeer
from benchmarks.experimental.b12x.common import Timing

pytestmark = pytest.mark.contract


def test_extend_case_draws_are_fixed_by_the_shape():
    a, b = fiext.make_extend_case(2, 32, True, "cpu"), fiext.make_extend_case(2, 32, True, "cpu")
    for key in ("q", "k_cache", "v_cache", "page_table"):  # bytes: fp8 has no torch.equal
        assert torch.equal(a[key].view(torch.uint8), b[key].view(torch.uint8)), key
    assert a["q"].shape == (64, fipeer.HQ, fipeer.D) and a["k_cache"].shape == (
        2 * 2 + 8,
        fipeer.PAGE,
        fipeer.HKV,
        fipeer.D,
    )
    assert a["page_table"].unique().numel() == 4 and a["cu"].tolist() == [0, 32, 64] and a["lens"].tolist() == [32, 32]
    assert a["k_cache"].dtype == torch.float8_e4m3fn and torch.equal(a["descale"], torch.full((2, fipeer.HKV), 0.125))
    assert fiext.make_extend_case(2, 32, False, "cpu")["descale"] is None
    with pytest.raises(ValueError, match="multiple of 16"):
        fiext.make_extend_case(2, 40, False, "cpu")


def _record(tmp_path, fp8=False):
    case = fiext.make_extend_case(2, 32, fp8, "cpu")
    record = fiext.extend_record(2, 32, fp8, case, tol=0.05 if fp8 else 0.02)
    fipeer.save_cases(tmp_path / "c.pt", [record])
    return case, fipeer.load_cases(tmp_path / "c.pt")[0]


def test_record_round_trip_and_redraw(tmp_path):
    case, record = _record(tmp_path)
    assert record["kind"] == "extend" and record["kv_len"] == 32 and record["kv_indptr"].tolist() == [0, 2, 4]
    again, why = fiext.redraw_extend(record, torch.device("cpu"))
    assert why is None and torch.equal(again["q"], case["q"]) and torch.equal(again["k_cache"], case["k_cache"])
    for key in ("q_fingerprint", "v_fingerprint"):
        bad = dict(record, **{key: record[key] + 1})
        assert fiext.redraw_extend(bad, torch.device("cpu"))[1].startswith(f"redrawn {key[0]}")
    other = dict(record, device_type="cuda")
    assert "this child runs on cpu" in fiext.redraw_extend(other, torch.device("cpu"))[1]


class _Prefill:
    """A stand-in for FlashInfer's BatchPrefillWithPagedKVCacheWrapper: fp32 attention over the pages the plan's
    indptr / indices / last_page_len name, query rows right-aligned to each request's keys when causal."""

    shift = 0  # > 0: a wrong mask (each query sees `shift` keys too many)

    def __init__(self, workspace, layout, **kw):
        assert layout == "NHD" and workspace.dtype == torch.uint8
        self.graph_buffers = kw

    def plan(self, qo, indptr, indices, last, hq, hkv, d, page, *, causal, q_data_type, kv_data_type):
        assert (hq, hkv, d, page, causal, q_data_type) == (
            fipeer.HQ,
            fipeer.HKV,
            fipeer.D,
            fipeer.PAGE,
            True,
            torch.bfloat16,
        )
        self.layout, self.kv_dtype = (qo, indptr, indices, last), kv_data_type

    def run(self, q, kv, *, out, k_scale=None, v_scale=None):
        qo, indptr, indices, last = self.layout
        assert kv[0].dtype == self.kv_dtype
        for r in range(len(qo) - 1):
            pages = indices[indptr[r] : indptr[r + 1]].long()
            n = (len(pages) - 1) * fipeer.PAGE + int(last[r])
            k = kv[0][pages].reshape(-1, fipeer.HKV, fipeer.D)[:n].float() * (k_scale or 1.0)
            v = kv[1][pages].reshape(-1, fipeer.HKV, fipeer.D)[:n].float() * (v_scale or 1.0)
            rows = q[qo[r] : qo[r + 1]].float()
            g = fipeer.HQ // fipeer.HKV
            s = torch.einsum("thd,khd->htk", rows, k.repeat_interleave(g, 1)) / fipeer.D**0.5
            visible = torch.arange(n)[None, :] <= (n - len(rows) + torch.arange(len(rows)))[:, None] + self.shift
            p = torch.softmax(s.masked_fill(~visible, float("-inf")), -1)
            out[qo[r] : qo[r + 1]] = torch.einsum("htk,khd->thd", p, v.repeat_interleave(g, 1)).to(out.dtype)


class _FakeFlashInfer:
    BatchPrefillWithPagedKVCacheWrapper = _Prefill


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("timer", ["events", "graph"])
def test_child_checks_then_times_the_prefill(tmp_path, monkeypatch, fp8, timer):
    _, record = _record(tmp_path, fp8)
    timed = []
    monkeypatch.setattr(fipeer, "measure", lambda call, args: timed.append(call) or Timing(1.0, 1.0, 1.0, 1, "fake"))
    args = argparse.Namespace(timer=timer)
    res = fiext.run_extend(_FakeFlashInfer(), record, args, torch.device("cpu"))
    assert res["timing"] is not None and len(timed) == 1, res["note"]
    assert res["impl"] == "flashinfer prefill" and res["max_err_vs_ref"] <= record["tol"]
    _Prefill.shift = 1
    try:
        res = fiext.run_extend(_FakeFlashInfer(), record, args, torch.device("cpu"))
    finally:
        _Prefill.shift = 0
    assert res["timing"] is None and res["note"].startswith("not timed: disagrees with the reference")
