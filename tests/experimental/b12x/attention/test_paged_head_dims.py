"""attention.paged with Dqk != Dv (the issue's "and Dqk != Dv where cheap"): each of head_dim_qk and head_dim_vo in
{64, 128, 256}. The plan takes the default tiles of the larger dim (`_config.tile_head_dim`); K and V rows are
copied by copies of their own widths (`_fragments.row_copy`). CPU: the heuristic's choices fit every arch and batch,
the reference lifecycle agrees with an independent dense attention, and both kernels compile for both archs at
Dqk != Dv while the Dqk = Dv default kernels keep their code (the V copy is the K copy there).
GPU numerics: test_paged_gpu.py / test_paged_extend_gpu.py `test_dqk_differs_from_dv`."""

import pytest
import torch

import b12x
from flashinfer.experimental.b12x.attention.paged._config import (
    default_config,
    default_extend_config,
    tile_head_dim,
    why_not,
    why_not_extend,
)

from .paged_cases import dense_attention, make_case

pytestmark = pytest.mark.usefixtures("quiet_cpu_reference")

paged = b12x.attention.paged
PAIRS = [(128, 64), (64, 128), (256, 128), (64, 256)]
ARCHS = ("sm_90a", "sm_120a")


def caps(dims, *, mode="decode", batch=8, kv_dtype="bfloat16", **kw):
    work = paged.default_max_work_items(batch, 8)
    base = dict(
        device="cpu", mode=mode, dtype="bfloat16", kv_dtype=kv_dtype, num_q_heads=32, num_kv_heads=8,
        head_dim_qk=dims[0], head_dim_vo=dims[1], page_size=16, max_total_q=batch * (64 if mode != "decode" else 1),
        max_batch=batch, max_page_table_width=64, max_work_items=work,
        max_partial_rows=paged.default_max_partial_rows(work, 32), num_cache_pages=4096,
    )  # fmt: skip
    base.update(kw)
    return paged.Caps(**base)


def test_tile_head_dim_is_the_larger():
    assert [tile_head_dim(*p) for p in PAIRS] == [128, 128, 256, 256]
    assert tile_head_dim(128, 128) == 128


@pytest.mark.contract
@pytest.mark.parametrize("dims", PAIRS, ids=lambda d: f"qk{d[0]}vo{d[1]}")
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_the_heuristic_fits_every_arch_and_batch(dims, kv_dtype):
    """Each choice is the larger dim's (whose shared memory bounds both) and the kernels implement it."""
    big = (tile_head_dim(*dims),) * 2
    for arch in ARCHS:
        for batch in (1, 4, 16, 40, 200):
            sel = paged.plan(caps(dims, batch=batch, kv_dtype=kv_dtype)).heuristic(arch)
            same = paged.plan(caps(big, batch=batch, kv_dtype=kv_dtype)).heuristic(arch)
            assert sel == same, (arch, batch)
            for s in (sel, sel.small) if sel.small is not None else (sel,):
                assert why_not("bfloat16", kv_dtype, 32, 8, *dims, 16, s.decode, arch) is None, (arch, batch, s)
        for mode in ("extend", "verify"):
            ext = paged.plan(caps(dims, mode=mode, kv_dtype=kv_dtype)).heuristic(arch).extend
            assert ext == default_extend_config(kv_dtype, big[0], arch, mode)
            assert why_not_extend("bfloat16", kv_dtype, 32, 8, *dims, 16, ext, arch) is None, (arch, mode)


@pytest.mark.contract
def test_other_head_dims_are_still_rejected():
    for dims in ((192, 128), (128, 96), (64, 32)):
        with pytest.raises(NotImplementedError, match=f"got {dims[0]}/{dims[1]}"):
            paged.plan(caps(dims))


@pytest.mark.contract
@pytest.mark.parametrize("dims", [(128, 64), (64, 128)], ids=lambda d: f"qk{d[0]}vo{d[1]}")
@pytest.mark.parametrize("mode", ["decode", "extend"])
def test_cpu_lifecycle_matches_a_dense_attention(dims, mode):
    """The reference backend end to end at Dqk != Dv: out has Dv columns; bind checks v_cache's last dim."""
    kv_lens, q_lens = [9, 40, 17], ([1, 1, 1] if mode == "decode" else [3, 40, 1])
    case = make_case(kv_lens, q_lens, num_q_heads=8, num_kv_heads=2, head_dim=dims[0], head_dim_v=dims[1], seed=7)
    c = caps(dims, mode=mode, batch=3, num_q_heads=8, num_kv_heads=2, max_total_q=64, num_cache_pages=64,
             max_work_items=paged.default_max_work_items(3, 2), max_partial_rows=paged.default_max_partial_rows(
                 paged.default_max_work_items(3, 2), 8))  # fmt: skip
    p = paged.plan(c)
    b12x.PreparationSession("cpu").prepare([p])
    kw = dict(cu_seqlens_q=case.cu_seqlens_q) if mode != "decode" else {}
    out, lse = paged.run(binding=paged.bind(p, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache,
                                            page_table=case.page_table, cache_seqlens=case.cache_seqlens, **kw))  # fmt: skip
    want_out, want_lse = dense_attention(case)
    assert out.shape == (sum(q_lens), 8, dims[1]) and lse.shape == (sum(q_lens), 8)
    torch.testing.assert_close(out.float(), want_out, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, want_lse, atol=1e-4, rtol=1e-4)
    swapped = case.v_cache[..., : dims[1] // 2]  # a V cache of the wrong head dim
    with pytest.raises(ValueError, match="v_cache"):
        paged.bind(p, q=case.q, k_cache=case.k_cache, v_cache=swapped, page_table=case.page_table,
                   cache_seqlens=case.cache_seqlens, **kw)  # fmt: skip


def _kernels():
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    from flashinfer.experimental.b12x.attention.paged import _kernel_decode, _kernel_extend

    return _kernel_decode, _kernel_extend


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dims,kv", [((128, 64), "bfloat16"), ((64, 128), "float8_e4m3fn")], ids=["bf16", "fp8"])
def test_kernels_compile_at_dqk_not_dv(arch, dims, kv):
    """Decode and extend at their default tiles: V's copy has its own thread rows (cp.async count moves with Dv)."""
    kd, ke = _kernels()
    dims7 = ("bfloat16", kv, 32, 8, *dims, 16)
    big = tile_head_dim(*dims)
    dec = kd.compile_decode(*dims7, default_config(kv, big, 16, arch), arch=arch).artifacts.PTX
    same = kd.compile_decode("bfloat16", kv, 32, 8, dims[0], dims[0], 16, default_config(kv, big, 16, arch), arch=arch)
    copies = lambda ptx: ptx.count("cp.async.cg.shared.global")  # noqa: E731
    # fewer V columns: fewer 16-byte copies than the Dqk = Dv kernel; more: more
    assert (copies(dec) < copies(same.artifacts.PTX)) == (dims[1] < dims[0])
    ext = ke.compile_extend(*dims7, default_extend_config(kv, big, arch), arch=arch).artifacts.PTX
    for ptx in (dec, ext):
        assert [ln.split()[1] for ln in ptx.splitlines() if ln.startswith(".target")] == [arch]


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
def test_pdl_prefetch_compiles_at_dqk_not_dv(arch):
    """pdl='prefetch' at Dqk != Dv compiles with its K and V prefetches (each row warms only its own 128-byte lines:
    256 / 64 is 4 lines against 1, so no V prefetch past its row; the addresses themselves need a GPU to see)."""
    import dataclasses

    from flashinfer.experimental.b12x.attention.paged._config import ScheduleConfig

    kd, _ = _kernels()
    base = default_config("bfloat16", 256, 16, arch)
    cfg = dataclasses.replace(base, fused_merge=True, fused_schedule=True, pdl="prefetch", persistent=False)
    sched = ScheduleConfig(cfg.tile_keys, 33, 256)
    for dv in (64, 256):
        assert why_not("bfloat16", "bfloat16", 32, 8, 256, dv, 16, cfg, arch) is None
        ptx = kd.compile_decode(
            "bfloat16", "bfloat16", 32, 8, 256, dv, 16, cfg, arch=arch, schedule=sched
        ).artifacts.PTX
        assert ptx.count("prefetch.global.L2") == 2
