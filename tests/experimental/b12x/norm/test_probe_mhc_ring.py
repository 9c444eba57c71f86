"""`scripts/probe_mhc_ring.py` (session 35): the cooperative pre's memory program through a shared-memory ring. Its
rows compile for sm_90a and sm_120a without local memory (the barrier rows, waiting at once or some rounds after
their arrival, with a release arrival and acquire polls, the others with none; the exchange rows with their float
reductions, the mixes rows with their mma.sync), a ring that does not fit shared memory or a hidden size whose rows are not
16-byte runs is refused with the reason (its arguments: ../test_probe_arguments.py)."""

import importlib.util
import re
from pathlib import Path

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
    assert "mixes needs sync_warp" in probe.why_not(probe.Row(64, 64, 3, barrier=True, lag=1, mixes=True), 7168)
    big = probe.Row(64, 64, 4, barrier=True, lag=1, sync_warp=True, mixes=True)  # 4 x 57 KB + 43 KB
    assert "fn's 43008-byte slice exceed" in probe.why_not(big, 7168)
    assert "hoist and vec need a mixes row" in probe.why_not(probe.Row(64, 32, 3, barrier=True, hoist=True), 7168)
    assert "split_roles needs a mixes row" in probe.why_not(
        probe.Row(64, 32, 4, barrier=True, lag=1, split_roles=True), 7168
    )
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


@pytest.mark.reference
@pytest.mark.parametrize("per_row", [56, 32])  # 64 programs at H = 7168 / 4096: 4 streams x 14 / 8 chunks
def test_mix_warp_on_the_emulator(per_row, load_script):
    """`mix_warp` (the mixes rows' per-warp math) on the PTX emulator: its accumulators are the 16 tokens' partial
    mixes x (hi + lo)^T and its sums of squares the tokens', read from the swizzled stage and fn slice the kernel's
    writers lay out (`stage_chunk`, `fn_chunk`); every ldmatrix 8-row phase hits 8 distinct bank groups."""
    import numpy as np
    import torch

    probe = load_script(PROBE)
    emu = _emulator()
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(16, per_row * 8, generator=gen).to(torch.bfloat16)
    fn = torch.randn(24, per_row * 8, generator=gen) * 0.05
    hi = fn.to(torch.bfloat16)
    lo = (fn - hi.float()).to(torch.bfloat16)
    f_base = 16 * per_row * 16
    smem = np.zeros(f_base + 48 * per_row * 16, dtype=np.uint8)

    def put(base, chunk, row):  # 8 bf16 values as one 16-byte chunk
        smem[base + chunk * 16 : base + chunk * 16 + 16] = row.contiguous().view(torch.uint8).numpy()

    for t in range(16):
        for kc in range(per_row):
            put(0, probe.stage_chunk(t, kc, per_row), x[t, kc * 8 : kc * 8 + 8])
    for row in range(48):
        src = (hi if row < 24 else lo)[row % 24]
        for kc in range(per_row):
            put(f_base, probe.fn_chunk(row, kc, per_row), src[kc * 8 : kc * 8 + 8])

    ops = emu.EmuOps(emu.GlobalMemory(), smem)
    seen = []
    plain = ops.ldmatrix_x4
    ops.ldmatrix_x4 = lambda saddr: (seen.append(np.asarray(saddr)), plain(saddr))[1]
    acc, sq = probe.mix_warp(ops, np.arange(32), 0, f_base, per_row)

    want = x.double() @ (hi.double() + lo.double()).T  # [16 tokens, 24 mixes]
    for nt in range(3):
        for r in range(4):
            np.testing.assert_allclose(
                acc[nt][r], want[emu._C_ROW[r], nt * 8 + emu._C_COL[r]].numpy(), rtol=1e-5, atol=1e-5
            )
    want_sq = (x.double() ** 2).sum(dim=1).numpy()
    g = np.arange(32) // 4
    for h in range(2):
        np.testing.assert_allclose(sq[h], want_sq[g + 8 * h], rtol=1e-5)
    assert len(seen) == per_row // 2 * 5  # an A and two B x4 (hi, lo) a k16 step
    for addrs in seen:
        for phase in range(4):
            groups = (addrs[8 * phase : 8 * phase + 8] // 16) % 8
            assert len(set(groups.tolist())) == 8, addrs


def _emulator():
    spec = importlib.util.spec_from_file_location(
        "_b12x_gemm_emulator", Path(__file__).parents[1] / "gemm" / "emulator.py"
    )
    emu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(emu)
    return emu


@pytest.mark.reference
def test_quad_v4_covers_every_mix_once(load_script):
    """`quad_v4` (the vec rows' 16-byte reductions): lane q of quad g holds row g + 8 (q % 2)'s mixes
    nt 8 + 4 (q // 2) .. + 3 in order, so a warp's 3 x 32 vectors cover its 16 x 24 partials exactly once."""
    import numpy as np

    probe = load_script(PROBE)
    emu = _emulator()
    ops = emu.EmuOps(emu.GlobalMemory(), np.zeros(16, dtype=np.uint8))
    lane = np.arange(32)
    g, q = lane // 4, lane % 4
    m = np.random.default_rng(3).standard_normal((16, 24)).astype(np.float32)
    acc = [[m[g + 8 * (r // 2), nt * 8 + 2 * q + r % 2] for r in range(4)] for nt in range(3)]  # the mma C layout
    seen = np.zeros((16, 24), dtype=int)
    for nt, v in enumerate(probe.quad_v4(ops, lane, acc)):
        row, col = g + 8 * (lane % 2), nt * 8 + 4 * (q // 2)
        for k in range(4):
            np.testing.assert_array_equal(v[k], m[row, col + k])
            np.add.at(seen, (row, col + k), 1)
    assert (seen == 1).all()


@pytest.mark.reference
def test_reference_slots_by_hand(load_script):
    import torch

    probe = load_script(PROBE)
    x = torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    fn = torch.randn(24, 64, generator=torch.Generator().manual_seed(10))
    got = probe.reference_slots(x, fn)
    for t in range(2):
        flat = [float(x[t, s, h]) for s in range(4) for h in range(16)]
        for i in (0, 5, 23):
            want = sum(a * float(fn[i, k]) for k, a in enumerate(flat))
            assert abs(float(got[t, i]) - want) < 1e-9
        assert abs(float(got[t, 24]) - sum(a * a for a in flat)) < 1e-9
    info = probe.mismatch(x[:, 0], x[:, 0].clone(), got, got)
    assert info == {
        "bad_values": 0,
        "max_err": 0.0,
        "max_want": float(x[:, 0].float().abs().max()),
        "slots_rel_err": 0.0,
    }
    off = x[:, 0].clone()
    off[1, 3] += 1.0
    assert probe.mismatch(off, x[:, 0])["bad_values"] == 1
    terms = x[:, 0].float().abs() + 1.0
    info = probe.mismatch(off, x[:, 0], terms=terms)
    assert info["bad_tokens"] == 1 and info["bad_err_over_terms"] == float(
        abs(off[1, 3].float() - x[1, 0, 3].float()) / terms[1, 3]
    )
    y, t = probe.reference_pre_y(x, torch.zeros(24, 64), torch.tensor([0.7, 0, 0, 0, 0, 1e-6, 1e-3, 0]), terms=True)
    torch.testing.assert_close(t, (0.501 * x.float()).abs().sum(dim=1))  # fn 0: every pre weight sigmoid(0) + 1e-3


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
            probe.Row(64, 16, 3, barrier=True, lag=1, poll="early", sync_warp=True, mixes=True),
            probe.Row(64, 16, 3, barrier=True, lag=1, poll="early", sync_warp=True, mixes=True, split_roles=True),
            probe.Row(64, 16, 3, barrier=True, lag=1, poll="early", sync_warp=True, mixes=True, hoist=True, vec=True),
        ]
    assert len(rows) >= 2 and any(r.lag for r in rows) and any(r.exchange for r in rows) and any(r.mixes for r in rows)
    for row in rows:
        ck = probe.compiled(row, 7168, arch)
        usage = CB.resources(ck.artifacts.CUBIN)
        assert usage["LOCAL"] == 0, (row.label, usage)
        ptx = ck.artifacts.PTX
        assert ptx.count("cp.async.cg.shared.global") >= row.stages, row.label
        assert (".acquire" in ptx and ".release" in ptx) == row.barrier, row.label
        assert ("red.relaxed.gpu.global.add.f32" in ptx) == (row.exchange or row.mixes), row.label
        assert ("mma.sync.aligned.m16n8k16" in ptx) == row.mixes, row.label
        assert ("add.v4.f32" in ptx) == row.vec, row.label
        assert bool(re.search(r"\bbar\.sync\s+1,", ptx)) == row.split_roles, row.label
