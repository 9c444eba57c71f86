"""The static registry stays in lockstep with the op folders, and every op keeps the contract."""

import importlib
from pathlib import Path

import pytest

import b12x
from b12x import OpMeta

pytestmark = pytest.mark.contract

PKG = Path(b12x.__file__).parent
GROUPS = ("gemm", "attention", "moe", "norm", "sequence", "quantization", "comm")


def _op_folders():
    found = set()
    for group in GROUPS:
        for child in (PKG / group).iterdir():
            if child.is_dir() and (child / "__init__.py").exists() and not child.name.startswith("_"):
                found.add(f"{group}.{child.name}")
    return found


def test_registry_matches_folders():
    assert set(b12x._OPS) == _op_folders()
    for qualname, rel in b12x._OPS.items():
        assert rel == "." + qualname, (qualname, rel)


OPS = sorted(b12x._OPS)


@pytest.mark.parametrize("qualname", OPS)
def test_op_contract(qualname):
    module = importlib.import_module("b12x." + qualname)
    meta = module.META
    assert isinstance(meta, OpMeta) and meta.qualname == qualname
    assert sorted(module.__all__) == sorted([*meta.entry_points, "META"])
    assert "is_supported" in meta.entry_points
    for name in meta.entry_points:
        assert getattr(module, name) is not None, name
    assert isinstance(module.is_supported(), bool)
    assert b12x.find_op(qualname) is meta
    group, op = qualname.split(".")
    assert getattr(getattr(b12x, group), op) is module


@pytest.mark.parametrize("qualname", OPS)
def test_op_package_import_is_cheap(qualname, run_python):
    out = run_python(
        f"import sys, b12x.{qualname} as m; m.META; "
        "heavy = [k for k in sys.modules if k.split('.')[0] in ('torch', 'cutlass', 'triton')]; "
        "assert not heavy, heavy"
    )
    assert out.returncode == 0, out.stderr


def test_list_ops_sorted_metas():
    ops = b12x.list_ops()
    assert isinstance(ops, tuple)
    assert [m.qualname for m in ops] == OPS
    assert all(isinstance(m, OpMeta) for m in ops)


def test_find_op_unknown_lists_known():
    with pytest.raises(KeyError, match="unknown b12x op 'gemm.nope'; known ops:"):
        b12x.find_op("gemm.nope")


def test_group_unknown_op_message():
    with pytest.raises(AttributeError, match="b12x.comm has no op 'nope'"):
        b12x.comm.nope


def test_clear_all_caches_touches_only_imported(run_python):
    out = run_python(
        "import sys, b12x; b12x.clear_all_caches(); "
        "ops = [k for k in sys.modules if any(k == 'flashinfer.experimental.b12x.' + q for q in b12x._OPS)]; "
        "assert not ops, ops"
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(api_style="batch"), "api_style must be one of"),
        (dict(group="misc"), "group must be one of"),
        (dict(entry_points=("run",)), "must include 'is_supported'"),
        (dict(archs=["sm_90a"]), "OpMeta.archs must be a tuple"),
    ],
)
def test_opmeta_validation(kwargs, message):
    base = dict(name="x", group="norm", api_style="planned", entry_points=("is_supported",))
    base.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=message):
        OpMeta(**base)
