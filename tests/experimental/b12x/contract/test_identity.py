"""`import b12x` is flashinfer/experimental/b12x/_api.py, with one identity per submodule."""

import textwrap

import pytest

pytestmark = pytest.mark.contract


def _ok(run_python, code, **kw):
    out = run_python(textwrap.dedent(code), **kw)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_import_b12x_is_light_and_is_api_module(run_python):
    out = _ok(
        run_python,
        """
        import sys, b12x
        assert b12x.__file__.endswith("flashinfer/experimental/b12x/_api.py"), b12x.__file__
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "cutlass", "triton", "tvm_ffi"))
        assert not heavy, heavy
        print("ok")
        """,
    )
    assert "ok" in out


@pytest.mark.parametrize("first", ["b12x", "flashinfer.experimental.b12x"])
@pytest.mark.parametrize("sub", ["gemm", "_lib.freeze", "_lib.meta", "preparation.plan"])
def test_submodule_identity_either_order(first, sub, run_python):
    other = "flashinfer.experimental.b12x" if first == "b12x" else "b12x"
    _ok(
        run_python,
        f"""
        import importlib, sys
        a = importlib.import_module("{first}.{sub}")
        b = importlib.import_module("{other}.{sub}")
        assert a is b, (a, b)
        assert sys.modules["{first}.{sub}"] is sys.modules["{other}.{sub}"]
        import b12x, flashinfer.experimental.b12x as canon
        assert b12x is canon
        """,
    )


def test_one_freeze_flag_across_names(run_python):
    _ok(
        run_python,
        """
        import b12x
        from flashinfer.experimental.b12x._lib import freeze
        b12x.freeze_kernel_resolution("test")
        assert freeze.kernel_resolution_frozen()
        from flashinfer.experimental import b12x as canon
        assert canon.kernel_resolution_frozen()
        b12x.unfreeze_kernel_resolution()
        assert not canon.kernel_resolution_frozen()
        """,
    )


def test_distribution_owns_b12x(run_python):
    out = _ok(run_python, "import importlib.metadata as m; print(m.packages_distributions()['b12x'])")
    assert "flashinfer-python" in out


def test_foreign_b12x_distribution_refused(tmp_path, run_python):
    dist = tmp_path / "b12x-0.7.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: b12x\nVersion: 0.7.0\n")
    out = run_python("import b12x", env={"PYTHONPATH": str(tmp_path)})
    assert out.returncode != 0
    assert "ImportError" in out.stderr
    assert "pip uninstall b12x" in out.stderr
    assert "flashinfer-python" in out.stderr


def test_root_names_resolve_to_real_objects():
    import b12x
    from flashinfer.experimental.b12x._lib import freeze, scratch
    from flashinfer.experimental.b12x.preparation import plan, session

    assert b12x.PreparationSession is session.PreparationSession
    assert b12x.PreparationRequest is plan.PreparationRequest
    assert b12x.Plan is plan.Plan
    assert b12x.ScratchBufferSpec is scratch.ScratchBufferSpec
    assert b12x.KernelResolutionFrozenError is freeze.KernelResolutionFrozenError
    for name in b12x.__all__:
        assert getattr(b12x, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        b12x.nope


def test_python_dash_m_both_names(run_python):
    for mod in ("b12x", "flashinfer.experimental.b12x"):
        out = run_python(f"import runpy; runpy.run_module('{mod}', run_name='__main__', alter_sys=True)")
        # argparse: a missing subcommand exits 2 with usage naming the program
        assert out.returncode == 2 and "python -m b12x" in out.stderr, out.stderr
