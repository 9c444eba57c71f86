"""attention.paged decode with programmatic dependent launch (Caps.pdl / DecodeConfig.pdl) on the GPU.

The kernel launched just before attention is a Triton kernel that lets its dependents launch at once
(griddepcontrol.launch_dependents as its first instruction), spins for a few microseconds, and only
then writes the query rows and each request's newest K/V row, which the test poisoned (NaN) first.
A decode kernel that read Q or K/V before its griddepcontrol.wait would see the poison or the stale
rows: the output is checked against the fp32 reference of the restored values, eagerly and in CUDA
graph replays (where the launch attribute becomes a programmatic edge).
"""

import pytest
import torch

import b12x

from .paged_cases import make_case
from .test_paged_gpu import DEV, FP8, assert_tickets_reset, caps_for, poison, prepared

pytestmark = pytest.mark.gpu

triton = pytest.importorskip("triton")
tl = triton.language
paged = b12x.attention.paged
SPIN_NS = 20_000  # the writer's head start for a decode kernel that does not wait


@triton.jit
def _late_writer(q_src, q_dst, k_src, v_src, k_dst, v_dst, rows, SPIN: tl.constexpr, QW: tl.constexpr,
                 ROW: tl.constexpr):  # fmt: skip
    """Program b: let the next kernel launch, spin SPIN ns, then write request b's query row (QW
    elements) and its newest K and V rows (ROW bytes each, at byte offset rows[b] of the caches)."""
    tl.extra.cuda.gdc_launch_dependents()
    b = tl.program_id(0)
    t0 = tl.extra.cuda.globaltimer()
    t = t0
    while t - t0 < SPIN:
        t = tl.extra.cuda.globaltimer()
    i = tl.arange(0, QW)
    tl.store(q_dst + b * QW + i, tl.load(q_src + b * QW + i))
    j = tl.arange(0, ROW)
    r = tl.load(rows + b)
    tl.store(k_dst + r + j, tl.load(k_src + b * ROW + j))
    tl.store(v_dst + r + j, tl.load(v_src + b * ROW + j))


class LateWriter:
    """Saves the case's Q and newest K/V rows, poisons them, and restores them from a kernel that
    triggers its dependents before writing."""

    def __init__(self, case):
        self.case = case
        k8, v8 = case.k_cache.view(torch.uint8), case.v_cache.view(torch.uint8)
        page = case.k_cache.shape[1]
        self.row = k8.shape[2] * k8.shape[3]  # bytes of one key's Hkv x D row
        lens = case.cache_seqlens.tolist()
        offs = []
        for b, n in enumerate(lens):
            p = int(case.page_table[b, (n - 1) // page])
            offs.append((p * page + (n - 1) % page) * self.row)
        self.rows = torch.tensor(offs, dtype=torch.int64, device=DEV)
        flat_k, flat_v = k8.reshape(-1), v8.reshape(-1)
        idx = self.rows[:, None] + torch.arange(self.row, device=DEV)
        self.k_rows, self.v_rows = flat_k[idx].clone(), flat_v[idx].clone()
        self.q_saved = case.q.clone()
        self.flat_k, self.flat_v, self.idx = flat_k, flat_v, idx

    def poison(self):
        self.case.q.fill_(float("nan"))
        nan = 0x7F if self.case.k_cache.dtype == FP8 else 0xFF  # e4m3 NaN, or bf16 NaN bytes (0xFFFF)
        self.flat_k[self.idx.reshape(-1)] = nan
        self.flat_v[self.idx.reshape(-1)] = nan

    def launch(self):
        q = self.case.q
        qw = q.shape[1] * q.shape[2]
        _late_writer[(q.shape[0],)](self.q_saved, q, self.k_rows, self.v_rows, self.flat_k, self.flat_v, self.rows,
                                    SPIN=SPIN_NS, QW=qw, ROW=self.row)  # fmt: skip


def _reference(case):
    return paged.paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q,
        k_descale=case.k_descale, v_descale=case.v_descale,
    )  # fmt: skip


@pytest.mark.parametrize("pdl", ["wait", "prefetch"])
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("lens", [[1024], [1, 17, 300, 4097, 16, 65, 1000], [700] * 16], ids=["b1", "b7", "b16"])
def test_pdl_decode_waits_for_the_kernel_before(kv_dtype, pdl, lens):
    kvt = FP8 if kv_dtype == "float8_e4m3fn" else torch.bfloat16
    case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=kvt, device=DEV,
                     seed=len(lens))  # fmt: skip
    plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype, pdl=pdl))
    assert plan.state.selection.decode.pdl == pdl
    writer = LateWriter(case)
    ref_out, ref_lse = _reference(case)
    kw = dict(k_descale=case.k_descale, v_descale=case.v_descale) if kvt == FP8 else {}
    binding = paged.bind(plan, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                         cache_seqlens=case.cache_seqlens, **kw)  # fmt: skip

    def step():
        writer.launch()
        paged.run(binding=binding)

    def check(what):
        torch.cuda.synchronize()
        assert_tickets_reset(plan)
        out, lse = binding.out.float(), binding.lse
        assert not out.isnan().any(), f"{what}: NaN output (Q or K/V read before the wait)"
        torch.testing.assert_close(out, ref_out, rtol=2e-2, atol=2e-2, msg=lambda m: f"{what}: {m}")
        torch.testing.assert_close(lse, ref_lse, rtol=0, atol=2e-3, msg=lambda m: f"{what}: {m}")

    for i in range(2):
        writer.poison()
        poison(plan)
        step()
        check(f"eager {i}")
    graph = torch.cuda.CUDAGraph()
    writer.poison()
    with torch.cuda.graph(graph):
        step()
    for i in range(3):
        writer.poison()
        poison(plan)
        graph.replay()
        check(f"replay {i}")
