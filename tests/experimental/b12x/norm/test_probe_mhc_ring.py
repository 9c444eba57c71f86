"""`scripts/probe_mhc_ring.py` (session 35): the cooperative pre's memory program through a shared-memory ring. Its
rows compile for sm_90a and sm_120a without local memory (the barrier rows, waiting at once or some rounds after
their arrival, with a release arrival and acquire polls, the others with none; the exchange rows with their float
reductions), a ring that does not fit shared memory or a hidden size whose rows are not
16-byte runs is refused with the reason, and bad arguments stop before anything needs a GPU."""

import pytest

PROBE = "probe_mhc_ring"
SMEM_SM120 = 99 * 1024


@pytest.mark.contract
def test_why_not_names_the_limit(load_script):
    probe = load_script(PROBE)
    assert probe.why_not(probe.Row(64, 32, 4), 7168) is None
    assert "multiple of 8 x group (512)" in probe.why_not(probe.Row(64, 32, 4), 7000)
    assert "stages must be >= 2 + lag (2)" in probe.why_not(probe.Row(64, 32, 1), 7168)
    assert "stages must be >= 2 + lag (4)" in probe.why_not(probe.Row(64, 32, 3, barrier=True, lag=2), 7168)
    assert "lag >= 1" in probe.why_not(probe.Row(64, 32, 4, barrier=True, poll="early"), 7168)
    assert "needs a barrier row" in probe.why_not(probe.Row(64, 32, 2, exchange=True), 7168)
    assert "got 28" in probe.why_not(probe.Row(32, 32, 3, barrier=True, lag=1, exchange=True), 7168)
    assert "exceed" in probe.why_not(probe.Row(32, 32, 5), 7168)  # 5 x 57344 bytes
    assert probe.why_not(probe.Row(64, 32, 4), 7168, SMEM_SM120) is not None
    assert probe.Row(64, 32, 4).stage_bytes(7168) == 32 * 4 * 112 * 2


@pytest.mark.reference
def test_exchange_reference_by_hand(load_script):
    import torch

    probe = load_script(PROBE)
    x = torch.randn(3, 4, 128, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    got = probe.reference_y(x, 2).float()
    for t in range(3):
        ysum = x[t].float().sum(dim=0)  # [128]
        s = sum(x[t, :, p * 64 + c * 8 : p * 64 + c * 8 + 8].float().sum() for p in range(2) for c in range(5))
        want = (ysum * (1.0 / (1.0 + abs(float(s))))).to(torch.bfloat16).float()
        torch.testing.assert_close(got[t], want, rtol=2**-7, atol=1e-6)
    assert torch.equal(probe.reference_y(x), x.float().sum(dim=1).to(torch.bfloat16))


@pytest.mark.contract
def test_probe_arguments(capsys, load_script):
    probe = load_script(PROBE)
    with pytest.raises(SystemExit) as done:
        probe.main(["--help"])
    assert done.value.code == 0 and "usage" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        probe.main(["--hidden", "7000"])
    assert done.value.code == 2 and "--hidden 7000" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        probe.main(["--reps", "2"])
    assert done.value.code == 2 and "--reps >= 3" in capsys.readouterr().err


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
def test_rows_compile(arch, load_script):
    pytest.importorskip("cutlass")
    from flashinfer.experimental.b12x._lib import cuda_binary as CB

    probe = load_script(PROBE)
    budget = SMEM_SM120 if arch == "sm_120a" else probe.SMEM_BUDGET
    rows = [r for r in probe.ROWS if probe.why_not(r, 7168, budget) is None]
    if arch == "sm_120a":  # its 99 KB hold few of the H200 rows: a barrier ring that fits, too
        rows += [
            probe.Row(64, 16, 3, barrier=True),
            probe.Row(64, 16, 4, barrier=True, lag=1, poll="early", sync_warp=True, exchange=True),
        ]
    assert len(rows) >= 2 and any(r.lag for r in rows) and any(r.exchange for r in rows)
    for row in rows:
        ck = probe.compiled(row, 7168, arch)
        usage = CB.resources(ck.artifacts.CUBIN)
        assert usage["LOCAL"] == 0, (row.label, usage)
        ptx = ck.artifacts.PTX
        assert ptx.count("cp.async.cg.shared.global") >= row.stages, row.label
        assert (".acquire" in ptx and ".release" in ptx) == row.barrier, row.label
        assert ("red.relaxed.gpu.global.add.f32" in ptx) == row.exchange, row.label
