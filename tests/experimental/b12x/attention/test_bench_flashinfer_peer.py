"""bench_attention's FlashInfer peer on the CPU: the option, the case file, the layout, the child's skips.

The child (``_flashinfer_peer``) runs FlashInfer's wheel from a folder put first on sys.path; here no
wheel exists, so the child must say why it skips and exit 0; its check-then-time step runs against a
stand-in wrapper that reads the record's page layout. Timing and FlashInfer's own numerics run on the
device only (see bench_attention's docstring).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.experimental.b12x import _flashinfer_peer as fipeer
from benchmarks.experimental.b12x import bench_attention

pytestmark = pytest.mark.contract
ROOT = Path(__file__).resolve().parents[4]


# Option parsing ------------------------------------------------------------------------------------
def test_option_absent_keeps_the_skip_note(monkeypatch):
    monkeypatch.delenv("B12X_FLASHINFER_SITE", raising=False)
    args = bench_attention.parse_args([])
    assert args.flashinfer_site is None and args.flashinfer_variants == "tc"
    note = bench_attention.flashinfer_skip_note(args.flashinfer_site)
    assert "has no kernels" in note and "--flashinfer-site" in note and "B12X_FLASHINFER_SITE" in note


def test_option_from_flag_and_env(monkeypatch, tmp_path):
    monkeypatch.delenv("B12X_FLASHINFER_SITE", raising=False)
    assert bench_attention.parse_args(["--flashinfer-site", str(tmp_path)]).flashinfer_site == str(tmp_path)
    monkeypatch.setenv("B12X_FLASHINFER_SITE", str(tmp_path))
    args = bench_attention.parse_args([])
    assert args.flashinfer_site == str(tmp_path)
    assert bench_attention.flashinfer_skip_note(args.flashinfer_site) is None
    other = tmp_path / "other"
    other.mkdir()
    assert bench_attention.parse_args(["--flashinfer-site", str(other)]).flashinfer_site == str(other)  # flag wins


def test_option_rejects_bad_values(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench_attention.parse_args(["--flashinfer-site", str(tmp_path / "missing")])
    assert "must be a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_attention.parse_args(["--flashinfer-variants", "tc,fa9"])
    assert "--flashinfer-variants must name" in capsys.readouterr().err
    assert bench_attention.parse_args(["--flashinfer-variants", "tc,cuda"]).flashinfer_variants == "tc,cuda"


def test_peer_command_carries_the_clock(tmp_path):
    argv = ["--flashinfer-site", str(tmp_path), "--timer", "graph", "--iters", "7", "--warmup", "2", "--quick"]
    args = bench_attention.parse_args(argv + ["--calls-per-graph", "8"])
    cmd = bench_attention.peer_command(args.flashinfer_site, tmp_path / "c.pt", args)
    assert cmd[:3] == [sys.executable, "-m", "benchmarks.experimental.b12x._flashinfer_peer"]
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert flags["--site"] == str(tmp_path) and flags["--cases"] == str(tmp_path / "c.pt")
    assert (flags["--timer"], flags["--iters"], flags["--warmup"], flags["--variants"]) == ("graph", "7", "2", "tc")
    assert "--quick" in cmd and cmd[-2:] == ["--calls-per-graph", "8"]
    child = fipeer.build_parser().parse_args(cmd[3:])  # the child accepts exactly what the parent sends
    assert (child.timer, child.iters, child.warmup, child.quick, child.calls_per_graph) == ("graph", 7, 2, True, 8)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--calls-per-graph", "0"], "--calls-per-graph must be >= 1, got 0"),
        (["--calls-per-graph", "4"], "--calls-per-graph 4 needs --timer graph, got --timer events"),
    ],
)
def test_calls_per_graph_is_checked(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench_attention.parse_args(argv)
    assert message in capsys.readouterr().err


# FlashInfer layout ---------------------------------------------------------------------------------
def test_flashinfer_layout_hand_example():
    # page 16; request 0: 35 keys -> pages 3, 1, 4 (3 rows in the last); request 1: 16 keys -> page 0
    # (full last page; 2 and 5 unused); request 2: empty.
    page_table = torch.tensor([[3, 1, 4], [0, 2, 5], [7, 6, 8]], dtype=torch.int32)
    lens = torch.tensor([35, 16, 0], dtype=torch.int32)
    indptr, indices, last = fipeer.flashinfer_layout(page_table, lens, 16)
    assert indptr.tolist() == [0, 3, 4, 4]
    assert indices.tolist() == [3, 1, 4, 0]
    assert last.tolist() == [3, 16, 0]
    assert indptr.dtype == indices.dtype == last.dtype == torch.int32


def test_flashinfer_layout_of_the_bench_case():
    case = fipeer.make_case(3, 64, False, "cpu")
    indptr, indices, last = fipeer.flashinfer_layout(case["page_table"], case["lens"])
    assert indptr.tolist() == [0, 4, 8, 12]
    assert torch.equal(indices, case["page_table"].flatten())
    assert last.tolist() == [16, 16, 16]


def test_flashinfer_layout_rejects_lens_past_the_table():
    with pytest.raises(ValueError, match="lens must be in"):
        fipeer.flashinfer_layout(torch.zeros(1, 2, dtype=torch.int32), torch.tensor([33]), 16)


# Case file -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_case_file_round_trip(tmp_path, fp8):
    case = fipeer.make_case(2, 48, fp8, "cpu")
    assert case["k_cache"].shape == (6, fipeer.PAGE, fipeer.HKV, fipeer.D)
    assert not bool((case["k_cache"].float() == 0).all()) and not torch.equal(case["k_cache"], case["v_cache"])
    out = torch.randn(2, fipeer.HQ, fipeer.D).to(torch.bfloat16)
    want = torch.randn(2, fipeer.HQ, fipeer.D).to(torch.bfloat16)
    record = fipeer.case_record(2, 48, fp8, case, out, want, 0.05)
    path = tmp_path / "cases.pt"
    fipeer.save_cases(path, [record])
    (back,) = fipeer.load_cases(path)
    assert set(back) == set(record)
    for key, value in record.items():
        assert torch.equal(back[key], value) if isinstance(value, torch.Tensor) else back[key] == value, key
    assert back["kv_scale"] == (fipeer.FP8_SCALE if fp8 else None)
    assert back["kv_indptr"].tolist() == [0, 3, 6] and back["kv_last_page_len"].tolist() == [16, 16]

    again, why = fipeer.redraw(back, torch.device("cpu"))  # the child's path: same seed, same bits
    assert why is None
    for key in ("q", "k_cache", "v_cache", "page_table", "lens"):
        assert torch.equal(again[key].view(torch.uint8), case[key].view(torch.uint8)), key

    _, why = fipeer.redraw(dict(back, v_fingerprint=back["v_fingerprint"] + 1), torch.device("cpu"))
    assert "v_cache fingerprint differs" in why
    _, why = fipeer.redraw(dict(back, q=back["q"] + 1), torch.device("cpu"))
    assert "redrawn q differs" in why
    _, why = fipeer.redraw(dict(back, device_type="cuda"), torch.device("cpu"))
    assert "the parent drew on cuda" in why


def test_case_seed_is_per_shape_and_fingerprint_sees_page_order():
    seeds = {fipeer.case_seed(b, n, f) for b in (1, 8, 32, 128) for n in (1024, 8192, 32768) for f in (False, True)}
    assert len(seeds) == 24
    cache = fipeer.make_case(1, 64, False, "cpu")["k_cache"]
    assert fipeer.fingerprint(cache) == fipeer.fingerprint(cache.clone())
    assert fipeer.fingerprint(cache) != fipeer.fingerprint(cache[[1, 0, 2, 3]])


def test_load_rejects_another_version(tmp_path):
    torch.save({"version": 99, "cases": []}, tmp_path / "c.pt")
    with pytest.raises(ValueError, match="version must be 1, got 99"):
        fipeer.load_cases(tmp_path / "c.pt")


def test_parse_result_skips_logging_lines():
    stdout = "JIT: compiling\n" + fipeer.RESULT_MARKER + '{"status": "ok", "results": []}\nbye\n'
    assert fipeer.parse_result(stdout) == {"status": "ok", "results": []}
    assert fipeer.parse_result("no marker\n") is None


# The child process ---------------------------------------------------------------------------------
def _child(site: Path, cases: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "benchmarks.experimental.b12x._flashinfer_peer", "--site", str(site)]
    return subprocess.run(cmd + ["--cases", str(cases)], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def case_file(tmp_path):
    case = fipeer.make_case(1, 32, False, "cpu")
    out = torch.zeros(1, fipeer.HQ, fipeer.D, dtype=torch.bfloat16)
    path = tmp_path / "cases.pt"
    fipeer.save_cases(path, [fipeer.case_record(1, 32, False, case, out, out, 0.02)])
    return path


def test_child_skips_a_folder_without_flashinfer(tmp_path, case_file):
    site = tmp_path / "empty_site"
    site.mkdir()
    proc = _child(site, case_file)
    assert proc.returncode == 0, proc.stderr
    result = fipeer.parse_result(proc.stdout)
    assert result["status"] == "skipped", result
    assert "not the real flashinfer" in result["reason"] and str(site.resolve()) in result["reason"]
    assert str(ROOT / "flashinfer") in result["reason"]  # it found this tree's package, and said so


def test_child_skips_a_flashinfer_without_the_wrapper_then_without_cuda(tmp_path, case_file):
    site = tmp_path / "fake_site"
    (site / "flashinfer").mkdir(parents=True)
    (site / "flashinfer" / "__init__.py").write_text("__version__ = '0.0.fake'\n")
    result = fipeer.parse_result(_child(site, case_file).stdout)
    assert result["status"] == "skipped" and "has no BatchDecodeWithPagedKVCacheWrapper" in result["reason"]
    assert str(site.resolve()) in result["reason"]  # the site's package was imported, not this tree's

    (site / "flashinfer" / "__init__.py").write_text("class BatchDecodeWithPagedKVCacheWrapper:\n    pass\n")
    proc = _child(site, case_file)
    assert proc.returncode == 0, proc.stderr
    result = fipeer.parse_result(proc.stdout)
    assert result == {"status": "skipped", "reason": result["reason"]} and "no CUDA device" in result["reason"]


def test_peer_module_does_not_import_this_trees_flashinfer(run_python):
    code = (
        "import sys; import benchmarks.experimental.b12x._flashinfer_peer\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('flashinfer', 'b12x'))\n"
        "assert not bad, bad"
    )
    proc = run_python(code, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


# The child's decode step (check, then time) against a stand-in wrapper ----------------------------------------------
class _Decode:
    """A stand-in for FlashInfer's BatchDecodeWithPagedKVCacheWrapper: fp32 attention of each request's one query over
    the pages its plan's indptr / indices / last_page_len name; `drop` > 0 leaves that many keys out (a wrong layout)."""

    drop = 0

    def __init__(self, workspace, layout, *, use_tensor_cores, **graph_buffers):
        assert layout == "NHD" and workspace.dtype == torch.uint8

    def plan(self, indptr, indices, last, hq, hkv, d, page, *, q_data_type, kv_data_type):
        assert (hq, hkv, d, page, q_data_type) == (fipeer.HQ, fipeer.HKV, fipeer.D, fipeer.PAGE, torch.bfloat16)
        self.layout = (indptr, indices, last)

    def run(self, q, kv, *, out, k_scale=None, v_scale=None):
        indptr, indices, last = self.layout
        g = fipeer.HQ // fipeer.HKV
        for r in range(len(indptr) - 1):
            pages = indices[indptr[r] : indptr[r + 1]].long()
            n = (len(pages) - 1) * fipeer.PAGE + int(last[r]) - self.drop
            k = kv[0][pages].reshape(-1, fipeer.HKV, fipeer.D)[:n].float().repeat_interleave(g, 1) * (k_scale or 1.0)
            v = kv[1][pages].reshape(-1, fipeer.HKV, fipeer.D)[:n].float().repeat_interleave(g, 1) * (v_scale or 1.0)
            p = torch.softmax(torch.einsum("hd,khd->hk", q[r].float(), k) / fipeer.D**0.5, -1)
            out[r] = torch.einsum("hk,khd->hd", p, v).to(out.dtype)


class _FakeDecodeFlashInfer:
    BatchDecodeWithPagedKVCacheWrapper = _Decode


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_child_checks_then_times_the_decode(monkeypatch, fp8):
    """run_one: a stand-in that reads the record's layout agrees with SDPA on the contiguous copy and is timed (the
    note names both errors); one that drops a key disagrees and is not timed."""
    import argparse

    from benchmarks.experimental.b12x import _flashinfer_extend as fiext
    from benchmarks.experimental.b12x.common import Timing

    case = fipeer.make_case(2, 48, fp8, "cpu")
    kc, vc = (fiext.contiguous_bf16(case[k], case["page_table"], case["descale"]) for k in ("k_cache", "v_cache"))
    q4 = case["q"][:, :, None, :]  # [B, HQ, 1, D]
    want = torch.nn.functional.scaled_dot_product_attention(q4, kc, vc, enable_gqa=True)[:, :, 0].float()
    record = fipeer.case_record(2, 48, fp8, case, want.to(torch.bfloat16), want, 0.05 if fp8 else 0.02)
    monkeypatch.setattr(fipeer, "measure", lambda call, args: Timing(1.0, 1.0, 1.0, 1, "fake"))
    args, dev = argparse.Namespace(timer="events"), torch.device("cpu")
    res = fipeer.run_one(_FakeDecodeFlashInfer(), record, "tc", args, dev)
    assert res["timing"] is not None and "|flashinfer - b12x|" in res["note"], res["note"]
    assert res["impl"] == "flashinfer decode" and res["max_err_vs_b12x"] <= record["tol"]
    monkeypatch.setattr(_Decode, "drop", 1)
    res = fipeer.run_one(_FakeDecodeFlashInfer(), record, "tc", args, dev)
    assert res["timing"] is None and res["note"].startswith("not timed: disagrees with the reference")
