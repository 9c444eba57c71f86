"""The quantizers as programmatic dependents (`nvfp4.plan(..., pdl=True)`, `MxFp8Query(pdl=True)`): the plan
sets `pdl` on every tile it compiles, the compiled kernel waits (griddepcontrol.wait) and releases the next
kernel before its first global access, and the launch carries Triton's `launch_pdl`; a plain plan has none
of it. Under the interpreter PDL is dropped and the bits are the oracle's."""

import dataclasses
import re

import pytest

import b12x
from flashinfer.experimental.b12x.quantization import mxfp8, nvfp4
from flashinfer.experimental.b12x.quantization.mxfp8 import _kernel as mx
from flashinfer.experimental.b12x.quantization.nvfp4 import _dispatch
from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv

ARCHS = b12x.find_op("quantization.nvfp4").archs


def _nvfp4_tiles(p, arch="sm_90a"):
    return [args[2] for _, args in p.kernels(p.heuristic(arch), arch)]


def test_nvfp4_plan_sets_pdl_on_every_tile():
    plain, pdl = nvfp4.plan(16384, 7168), nvfp4.plan(16384, 7168, pdl=True)
    assert plain != pdl and pdl.caps.pdl and not plain.caps.pdl
    tiles = _nvfp4_tiles(pdl)
    assert len(tiles) == 3 and all(c.pdl for c in tiles)  # small, mid (preload), large
    assert not any(c.pdl for c in _nvfp4_tiles(plain))
    assert [dataclasses.replace(c, pdl=False) for c in tiles] == _nvfp4_tiles(plain)
    assert all(c.pdl for s in pdl.candidates("sm_90a") for c in _dispatch.selection_configs(s))
    # an override without pdl still compiles with it: pdl belongs to the plan, not to the tile
    for override in (nv.default_config(4096), _dispatch.default_selection(16384, 4096)):
        p = nvfp4.plan(16384, 4096, override=override, pdl=True)
        assert not any(c.pdl for c in _dispatch.selection_configs(p.override))
        tiles = [args[2] for _, args in p.kernels(p.override, "sm_90a")]
        assert tiles and all(c.pdl for c in tiles)


def test_mxfp8_query_sets_pdl():
    q = mxfp8.MxFp8Query(4096, "bfloat16", 64, pdl=True)
    p = mxfp8.plan(q)
    assert p != mxfp8.plan((4096, "bfloat16", 64))
    ((_, args),) = p.kernels(p.heuristic("sm_120a"), "sm_120a")
    assert args[2] == dataclasses.replace(mx.default_config(4096), pdl=True)
    ((_, args),) = p.kernels(mx.default_config(4096), "sm_120a")  # an override's config too
    assert args[2].pdl
    assert all(c.pdl for c in p.candidates("sm_90a"))


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_bad_pdl_names_the_argument(bad):
    with pytest.raises(ValueError, match=r"pdl must be a bool, got"):
        nvfp4.plan(64, 4096, pdl=bad)
    with pytest.raises(ValueError, match=r"query.pdl must be a bool, got"):
        mxfp8.MxFp8Query(4096, pdl=bad)
    assert not nv.can_implement(4096, nv.NvFp4Config(pdl=bad)) and not mx.can_implement(4096, mx.MxFp8Config(pdl=bad))


def _ptx_order(ptx: str) -> list[str]:
    """griddepcontrol and global memory instructions in program order."""
    return re.findall(r"\b(griddepcontrol\.\w+|ld\.global|st\.global)", ptx)


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("op", ["nvfp4", "mxfp8"])
def test_compiled_pdl_waits_before_any_global_access(op, arch, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    kmod = nv if op == "nvfp4" else mx
    configs = [kmod.default_config(7168)]
    if op == "nvfp4":  # the dispatch's Triton mid and large tiles too (the CuTe tile: the next test)
        configs += [_dispatch.mid_config(7168), _dispatch._triton_large(7168)]
    for cfg in configs:
        on = kmod.compile_for_target("bfloat16", 7168, dataclasses.replace(cfg, pdl=True), arch)
        order = _ptx_order(on.asm["ptx"])
        assert order[:2] == ["griddepcontrol.wait", "griddepcontrol.launch_dependents"], (cfg, order[:4])
        assert order.count("griddepcontrol.wait") == 1 and on.metadata.launch_pdl
        off = kmod.compile_for_target("bfloat16", 7168, dataclasses.replace(cfg, pdl=False), arch)
        assert "griddepcontrol" not in off.asm["ptx"] and not off.metadata.launch_pdl


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
def test_compiled_cute_pdl_waits_before_any_global_access(arch):
    # the CuTe tile the dispatch's switch turns on (from CUTE_FROM_M rows): the wait, then the release, before its
    # first global access
    from flashinfer.experimental.b12x.quantization.nvfp4._kernel_cute import compile_cute

    tile = _dispatch.CUTE_TILE
    on = compile_cute("bfloat16", 7168, dataclasses.replace(tile, pdl=True), arch).artifacts.PTX
    order = _ptx_order(on)
    assert order[:2] == ["griddepcontrol.wait", "griddepcontrol.launch_dependents"], order[:4]
    assert order.count("griddepcontrol.wait") == 1 and "ld.global" in order
    off = compile_cute("bfloat16", 7168, dataclasses.replace(tile, pdl=False), arch).artifacts.PTX
    assert "griddepcontrol" not in off


def test_interpreter_drops_pdl():
    # the interpreter has no griddepcontrol: a PDL tile runs with PDL = 0 there (the interpret tier's
    # PDL variants in _interpret_run.py check their bits), 1 when compiled
    cfg = nv.NvFp4Config(16, 64, 4, encode="search", skip_dead=True, pdl=True)
    assert nv.constexprs(64, cfg, asm=False)[-1] == 0 and nv.constexprs(64, cfg)[-1] == 1
    mcfg = mx.MxFp8Config(4, 64, 2, lean=True, layout="quarters", pdl=True)
    assert mx.constexprs(64, mcfg, compiled=False)[-1] == 0 and mx.constexprs(64, mcfg)[-1] == 1
