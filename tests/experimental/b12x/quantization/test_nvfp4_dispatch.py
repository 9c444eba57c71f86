"""Contract tier (CPU): the NVFP4 live-M dispatch (`nvfp4/_dispatch.py`). Which selection a plan
gets, what it compiles and primes, and which tile `run` launches for a live M, with the launchers
replaced by recorders (the tiles themselves are the interpret and gpu tiers' configs; the gpu tier's
`test_gpu_nvfp4.py` checks the dispatch bit for bit on the device)."""

import dataclasses

import pytest
import torch

import b12x
from flashinfer.experimental.b12x.preparation.plan import PlanState
from flashinfer.experimental.b12x.quantization.nvfp4 import _dispatch, _kernel, api

pytestmark = pytest.mark.contract

nvfp4 = b12x.quantization.nvfp4
ARCH = "sm_90a"


@pytest.fixture
def triton_only(monkeypatch):
    """The Triton dispatch alone: `CUTE_ABOVE_SMALL` off (the default since session 46; the switch's rows are the
    last tests')."""
    monkeypatch.setattr(_dispatch, "CUTE_ABOVE_SMALL", None)


@pytest.fixture
def cute_on(monkeypatch):
    """The CuTe switch on: `CUTE_TILE` from CUTE_FROM_M rows (the default of sessions 44-45)."""
    monkeypatch.setattr(_dispatch, "CUTE_ABOVE_SMALL", _dispatch.CUTE_TILE)


def test_the_cute_switch_is_off_by_default():
    # session 46: on the H200 the Triton dispatch beat CuteTile(4, 2) by 5-10% at every shape from 3072 rows
    from flashinfer.experimental.b12x.quantization.nvfp4._kernel_cute import CuteTile

    assert _dispatch.CUTE_ABOVE_SMALL is None and _dispatch.CUTE_TILE == CuteTile(4, 2)
    d = nvfp4.plan(16384, 7168).heuristic(ARCH)
    assert not any(isinstance(c, CuteTile) for c in d.configs())
    assert d.mid.preload and d.mid_until == (1 << 26) // 7168 + 1 and d.large == _dispatch._triton_large(7168)


@pytest.mark.usefixtures("triton_only")
def test_heuristic_dispatches_only_from_the_threshold():
    below = nvfp4.plan(_dispatch.LARGE_FROM_M - 1, 7168).heuristic(ARCH)
    assert below == _kernel.default_config(7168)
    d = nvfp4.plan(_dispatch.LARGE_FROM_M, 7168).heuristic(ARCH)
    assert isinstance(d, _dispatch.NvFp4Dispatch)
    assert d.small == _kernel.default_config(7168) and d.small.encode == "search" and d.small.skip_dead
    assert d.large == _dispatch.large_config(7168) == _kernel.NvFp4Config(*_dispatch.LARGE_M_S7)
    assert d.large_from == _dispatch.LARGE_FROM_M
    # session 27: the preload tile between large_from and 2^26 elements (9362 rows at K = 7168)
    assert d.mid == _dispatch.mid_config(7168) == _kernel.NvFp4Config(*_dispatch.MID_PRELOAD) and d.mid.preload
    assert d.mid_until == (1 << 26) // 7168 + 1 and d.tile(9362) == 1 and d.tile(9363) == 2
    assert nvfp4.plan(1 << 30, 7168).heuristic(ARCH) == d  # quantize()'s one-shot capacity
    assert nvfp4.plan(4096, 7168).heuristic(None) is None  # the CPU reference backend
    # session 31: up to 4096 columns the mid tile's programs run K-major (one grid axis), above it as before
    d4 = nvfp4.plan(_dispatch.LARGE_FROM_M, 4096).heuristic(ARCH)
    assert d4.mid == dataclasses.replace(_kernel.NvFp4Config(*_dispatch.MID_PRELOAD), k_major=True)
    assert not d.mid.k_major and not d4.large.k_major and not d4.small.k_major
    assert _kernel.grid(4096, 4096, d4.mid) == (512 * 4, 1, 1) and _kernel.grid(4096, 4096, d.mid) == (512, 4, 1)


def test_k_major_grids_stop_below_two_to_the_31_programs():
    # both quantizers' one-axis grids (`_lib/triton_quant.grid_axes`): rows x column units programs, refused
    # from 2^31 on (the two-axis grids hold the same work in two axes)
    from flashinfer.experimental.b12x.quantization.mxfp8 import _kernel as mx

    nv_cfg = dataclasses.replace(_kernel.NvFp4Config(*_dispatch.MID_PRELOAD), k_major=True)
    assert _kernel.grid(1 << 20, 4096, nv_cfg) == ((1 << 17) * 4, 1, 1)
    with pytest.raises(ValueError, match=r"a k_major grid needs < 2\^31"):
        _kernel.grid(1 << 30, 1 << 20, nv_cfg)
    mx_cfg = mx.default_config(4096)
    assert mx_cfg.k_major and mx.grid(4097, 4096, mx_cfg) == (1025 * 8, 1, 1)
    assert mx.grid(4097, 4096, dataclasses.replace(mx_cfg, k_major=False)) == (1025, 8, 1)
    with pytest.raises(ValueError, match=r"quantization.mxfp8: .* a k_major grid needs < 2\^31"):
        mx.grid(1 << 30, 1 << 20, mx_cfg)


def test_k_major_mid_tile_follows_its_switch(monkeypatch):
    monkeypatch.setattr(_kernel, "ORDER_GPU_VALIDATED", False)
    assert not _dispatch.mid_config(4096).k_major
    monkeypatch.setattr(_kernel, "ORDER_GPU_VALIDATED", True)
    monkeypatch.setattr(_dispatch, "MID_K_MAJOR_MAX_K", 2048)
    assert not _dispatch.mid_config(4096).k_major and _dispatch.mid_config(2048).k_major


@pytest.mark.usefixtures("triton_only")
def test_pairs_switch_makes_the_pairs_tile_large(monkeypatch):
    # The switch the H200 run of 14:02 turned on: the dispatch's large tile is LARGE_M_PAIRS (a config
    # test_gpu_candidates checks, being one of the pairs candidates) and pairs are offered; off, the
    # validated "steps" tile is the large one again. (Session 15's LARGE_M_S7 switch set aside.)
    monkeypatch.setattr(_dispatch, "LARGE_M_S7", None)
    assert _kernel.LARGE_M_PAIRS in _kernel._UNVALIDATED_PAIRS and _kernel.PAIRS_GPU_VALIDATED
    d = nvfp4.plan(4096, 7168).heuristic(ARCH)
    assert d.large == _kernel.NvFp4Config(*_kernel.LARGE_M_PAIRS) and d.large in _kernel.candidate_configs(7168)
    assert d.small == _kernel.default_config(7168)
    monkeypatch.setattr(_kernel, "PAIRS_GPU_VALIDATED", False)
    assert _dispatch.large_config(7168).encode == "steps"
    assert _kernel.NvFp4Config(*_kernel.LARGE_M_PAIRS) not in _kernel.candidate_configs(7168)


@pytest.mark.usefixtures("triton_only")
def test_s7_switch_is_on_and_replaces_the_large_tile(monkeypatch):
    # On since session 15 (the unrolled lane-table tile); None gives LARGE_M_PAIRS back. Set to a
    # session-7 tuple, the dispatch's large tile is that config (capped to the row), the small one unchanged.
    assert _dispatch.LARGE_M_S7 in _kernel._UNVALIDATED_PAIRS_S7 and _kernel.S7_PAIRS_GPU_VALIDATED
    assert _dispatch.large_config(7168) == _kernel.NvFp4Config(*_dispatch.LARGE_M_S7)
    assert _dispatch.large_config(7168).lut and _dispatch.large_config(7168).unroll
    monkeypatch.setattr(_dispatch, "LARGE_M_S7", None)
    assert _dispatch.large_config(7168) == _kernel.NvFp4Config(*_kernel.LARGE_M_PAIRS)
    for tup in _kernel._UNVALIDATED_PAIRS_S7:
        monkeypatch.setattr(_dispatch, "LARGE_M_S7", tup)
        assert _dispatch.large_config(7168) == _kernel.NvFp4Config(*tup)
        capped = _dispatch.large_config(48)
        assert capped.block_k == 64 and dataclasses.replace(capped, block_k=tup[1]) == _kernel.NvFp4Config(*tup)
        d = nvfp4.plan(4096, 7168).heuristic(ARCH)
        assert d.large == _kernel.NvFp4Config(*tup) and d.small == _kernel.default_config(7168)
        assert _dispatch.can_select(7168, d)


@pytest.mark.usefixtures("triton_only")
def test_large_tile_is_capped_to_the_row():
    d = nvfp4.plan(4096, 32).heuristic(ARCH)
    assert d.large.block_k == 64 and _kernel.can_implement(32, d.large) and _dispatch.can_select(32, d)


@pytest.mark.parametrize("m, tile", [(0, 0), (1, 0), (1023, 0), (1024, 1), (1025, 1), (16384, 1)])
def test_tile_by_live_rows(m, tile):
    d = _dispatch.NvFp4Dispatch(_kernel.default_config(4096), _dispatch.large_config(4096), 1024)
    assert d.tile(m) == tile
    same = _dispatch.NvFp4Dispatch(d.small, d.small, 1)
    assert same.configs() == (d.small,) and same.tile(m) == 0


@pytest.mark.usefixtures("triton_only")
def test_mid_tile_needs_its_gpu_flag_and_room(monkeypatch):
    assert _kernel.PRELOAD_GPU_VALIDATED and _kernel.NvFp4Config(*_dispatch.MID_PRELOAD) in _kernel.candidate_configs(
        7168
    )
    assert nvfp4.plan(4096, 4096).heuristic(ARCH).mid_until == 16385  # 16384 x 4096 runs the mid tile
    # K past 2^26 / large_from: no row count would run it
    assert nvfp4.plan(4096, 1 << 17).heuristic(ARCH).mid is None
    monkeypatch.setattr(_kernel, "PRELOAD_GPU_VALIDATED", False)
    d = nvfp4.plan(4096, 7168).heuristic(ARCH)
    assert d.mid is None and d.mid_until == 0 and d.configs() == (d.small, d.large)
    monkeypatch.setattr(_kernel, "PRELOAD_GPU_VALIDATED", True)
    monkeypatch.setattr(_dispatch, "MID_PRELOAD", None)
    assert nvfp4.plan(4096, 7168).heuristic(ARCH).mid is None


@pytest.mark.parametrize("m, tile", [(1, 0), (1023, 0), (1024, 1), (8191, 1), (8192, 2), (16384, 2)])
def test_tile_by_live_rows_with_a_mid_tile(m, tile):
    small, large = _kernel.default_config(4096), _dispatch.large_config(4096)
    mid = _dispatch.mid_config(4096)
    d = _dispatch.NvFp4Dispatch(small, large, 1024, mid, 8192)
    assert d.configs() == (small, mid, large) and d.tile(m) == tile and _dispatch.can_select(4096, d)
    # a mid tile equal to another compiles once and indexes it
    same = _dispatch.NvFp4Dispatch(small, large, 1024, large, 8192)
    assert same.configs() == (small, large) and same.tile(m) == min(tile, 1)


@pytest.mark.usefixtures("triton_only")
def test_kernels_compile_every_tile_small_first():
    p = nvfp4.plan(4096, 7168)
    d = p.heuristic(ARCH)
    kernels = p.kernels(d, ARCH)
    assert [args for _, args in kernels] == [("bfloat16", 7168, c, ARCH) for c in (d.small, d.mid, d.large)]
    assert all(fn is _kernel.compile_nvfp4 for fn, _ in kernels)
    assert len(p.kernels(d.small, ARCH)) == 1


def test_candidates_vary_the_large_tile():
    p = nvfp4.plan(16384, 7168)
    cands = p.candidates(ARCH)
    assert cands[0] == p.heuristic(ARCH) and len(set(cands)) == len(cands)
    assert all(isinstance(c, _dispatch.NvFp4Dispatch) and _dispatch.can_select(7168, c) for c in cands)
    assert {c.large for c in cands} >= set(_kernel.candidate_configs(7168))
    assert {c.small for c in cands} == {_kernel.default_config(7168)}
    assert nvfp4.plan(64, 7168).candidates(ARCH) == _kernel.candidate_configs(7168)


def test_dispatch_override_is_kept_and_checked():
    d = _dispatch.NvFp4Dispatch(_kernel.NvFp4Config(16, 256, 4), _dispatch.large_config(256), 300)
    p = nvfp4.plan(64, 256, override=d)
    assert p.override == d and hash(p) == hash(nvfp4.plan(64, 256, override=d))
    bad = [
        _dispatch.NvFp4Dispatch(d.small, _kernel.NvFp4Config(3, 128, 4)),  # block_m not a power of two
        _dispatch.NvFp4Dispatch(d.small, d.large, 0),
        _dispatch.NvFp4Dispatch(d.small, d.large, True),
        _dispatch.NvFp4Dispatch(d.small, "steps"),
        _dispatch.NvFp4Dispatch(d.small, d.large, 300, d.large, 300),  # mid_until not above large_from
        _dispatch.NvFp4Dispatch(d.small, d.large, 300, None, 500),  # mid_until without a mid tile
        _dispatch.NvFp4Dispatch(d.small, d.large, 300, d.large, True),
        _dispatch.NvFp4Dispatch(d.small, d.large, 300, _kernel.NvFp4Config(3, 128, 4), 500),
    ]
    for override in bad:
        with pytest.raises(
            ValueError, match="override must be an NvFp4Config, CuteTile or NvFp4Dispatch valid for k=256"
        ):
            nvfp4.plan(64, 256, override=override)


class _Recorder:
    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def __call__(self, x, packed, scales, gs_ptr, gs_value, gs_on_device, m):
        self.calls.append((self.name, m, gs_on_device))


def _fake_state(selection, calls):
    """A prepared-looking state whose kernels resolve to recorders (no compile, no GPU)."""
    configs = _dispatch.selection_configs(selection)
    compile_fn = {c: _Recorder(f"tile{i}", calls) for i, c in enumerate(configs)}
    state = PlanState(handle=1, device=torch.device("cpu"), arch=ARCH, selection=selection)
    state.kernels = tuple((lambda *args, c=c: compile_fn[c], ("bfloat16", 64, c, ARCH)) for c in configs)
    state.scratch["global_scale"] = torch.ones(1)
    return state


def test_run_picks_the_tile_by_live_rows_and_prime_loads_both():
    calls = []
    d = _dispatch.NvFp4Dispatch(_kernel.NvFp4Config(16, 64, 4), _dispatch.large_config(64), 5)
    state = _fake_state(d, calls)
    packed, scales = torch.empty(8, 32, dtype=torch.uint8), torch.empty(512, dtype=torch.uint8)
    for m in (1, 4, 5, 8, 0):
        api._execute(state, torch.zeros(m, 64, dtype=torch.bfloat16), None, 2.0, packed, scales)
    assert calls == [("tile0", 1, 0), ("tile0", 4, 0), ("tile1", 5, 0), ("tile1", 8, 0), ("tile0", 0, 0)]
    calls.clear()
    p = nvfp4.plan(8, 64, override=d)
    p.prime(state)  # every tile, with the float and the device-tensor global scale
    assert [(name, gs_on_device) for name, _, gs_on_device in calls] == [
        ("tile0", 0),
        ("tile0", 1),
        ("tile1", 0),
        ("tile1", 1),
    ]


def test_one_tile_selection_never_picks():
    calls = []
    state = _fake_state(_kernel.default_config(64), calls)
    packed, scales = torch.empty(8, 32, dtype=torch.uint8), torch.empty(512, dtype=torch.uint8)
    for m in (1, 8):
        api._execute(state, torch.zeros(m, 64, dtype=torch.bfloat16), torch.ones(1), 0.0, packed, scales)
    assert calls == [("tile0", 1, 1), ("tile0", 8, 1)]


@pytest.mark.usefixtures("cute_on")
def test_cute_tile_runs_from_cute_from_m_rows():
    # Session 44: on by default (4 x 4 from 4096 rows, H100-timed); session 45: 4 x 2 from 3072 rows; session 46: off
    # (the H200 prefers the Triton dispatch), so this tests the switch turned on. The dispatch
    # keeps its small Triton tile below LARGE_FROM_M and, up to CUTE_FROM_M, the Triton tile those rows ran before
    # (the preload tile where its range spans them); from CUTE_FROM_M rows it runs the CuTe tile, compiled once.
    from flashinfer.experimental.b12x.quantization.nvfp4._kernel_cute import CuteTile, compile_cute

    assert _dispatch.CUTE_ABOVE_SMALL == CuteTile(4, 2) and _dispatch.CUTE_FROM_M == 3072  # (the fixture's)
    p = nvfp4.plan(16384, 7168, pdl=True)
    d = p.heuristic(ARCH)
    assert d.small == dataclasses.replace(_kernel.default_config(7168), pdl=True)
    assert d.mid == dataclasses.replace(_dispatch.mid_config(7168), pdl=True) and d.mid.preload
    assert d.large == CuteTile(4, 2, pdl=True) and _dispatch.can_select(7168, d)
    assert d.mid_until == _dispatch.CUTE_FROM_M
    assert [d.tile(m) for m in (1, _dispatch.LARGE_FROM_M, 3071, 3072, 16384)] == [0, 1, 1, 2, 2]
    kernels = p.kernels(d, ARCH)
    assert len(kernels) == 3 and kernels[2] == (compile_cute, ("bfloat16", 7168, CuteTile(4, 2, pdl=True), ARCH))
    assert nvfp4.plan(1 << 30, 7168).heuristic(ARCH) == _dispatch.with_pdl(d, False)  # quantize()'s capacity
    # a capacity under CUTE_FROM_M rows never reaches the CuTe tile, so it does not compile it
    below = nvfp4.plan(_dispatch.CUTE_FROM_M - 1, 7168).heuristic(ARCH)
    assert not any(isinstance(c, CuteTile) for c in below.configs())
    assert below.mid_until == (1 << 26) // 7168 + 1
    assert nvfp4.plan(512, 7168).heuristic(ARCH) == _kernel.default_config(7168)  # below large_from: unchanged
    # where the preload tile's range ends between LARGE_FROM_M and CUTE_FROM_M rows (K = 32768: 2048 rows), the Triton
    # dispatch stays whole; without a preload tile (K = 131072: 512 rows, under LARGE_FROM_M), the Triton large tile
    # runs below CUTE_FROM_M, as it did
    wide = nvfp4.plan(16384, 32768).heuristic(ARCH)
    assert (
        wide.mid.preload and wide.mid_until == (1 << 26) // 32768 + 1 and wide.large == _dispatch._triton_large(32768)
    )
    widest = nvfp4.plan(16384, 1 << 17).heuristic(ARCH)
    assert (
        widest.mid == _dispatch._triton_large(1 << 17) and widest.mid_until == 3072 and widest.large == CuteTile(4, 2)
    )


@pytest.mark.usefixtures("cute_on")
@pytest.mark.parametrize("k, cute", [(21840, True), (21856, False)])
def test_cute_tile_needs_the_preload_range_to_reach_cute_from_m(k, cute):
    # the preload tile runs up to 2^26 // K rows: at K = 21840 that is 3072 rows (it reaches CUTE_FROM_M, so the CuTe
    # tile takes over there); at K = 21856, 3070 rows end short of it, and the Triton dispatch stays whole
    d = nvfp4.plan(16384, k).heuristic(ARCH)
    assert d.mid.preload  # the preload tile runs below the large tile either way
    if cute:
        assert d.large == _dispatch.CUTE_ABOVE_SMALL and d.mid_until == _dispatch.CUTE_FROM_M == 3072
    else:
        assert d.large == _dispatch._triton_large(k) and d.mid_until == (1 << 26) // k + 1 == 3071


@pytest.mark.usefixtures("triton_only")
def test_cute_switch_off_restores_the_triton_dispatch():
    d = nvfp4.plan(16384, 7168).heuristic(ARCH)
    assert isinstance(d.large, _kernel.NvFp4Config) and d.large == _dispatch.large_config(7168)
    assert d.mid.preload and d.mid_until == (1 << 26) // 7168 + 1
