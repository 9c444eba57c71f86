"""Shared inputs and the tolerance rule for the norm.mhc tests."""

import torch

from flashinfer.experimental.b12x.norm.mhc import _config, api
from flashinfer.experimental.b12x.norm.mhc import reference as R

SCALARS = dict(rms_eps=1e-6, hc_eps=1e-6, sinkhorn_iters=20)


def inputs(tokens, hidden, *, dtype=torch.bfloat16, device="cpu", seed=0):
    """Fresh random inputs of one call (api.synthetic_inputs); never zeros."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return api.synthetic_inputs(tokens, hidden, dtype=dtype, device=device, generator=gen)


def poisoned(like):
    """A NaN-filled buffer shaped like `like` (outputs are poisoned before a run)."""
    return torch.full_like(like, float("nan"))


def max_err(got, ref) -> float:
    return (got.float() - ref.float()).abs().max().item() if got.numel() else 0.0


def check_rule(name, got, ref32, ref_lo, floor=1e-6):
    """DESIGN.md §6: error vs the fp32 reference <= 2x the error of torch doing it in bf16."""
    assert torch.isfinite(got.float()).all(), f"{name}: non-finite values"
    err, budget = max_err(got, ref32), 2 * max_err(ref_lo, ref32)
    assert err <= max(budget, floor), f"{name}: error {err:.3g} above 2x the bf16 torch error {budget / 2:.3g}"
    return err, budget


def pre_refs(residual, fn, hc_scale, hc_base, **kw):
    """(fp32 reference, bf16-torch reference) of mhc_pre."""
    return R.mhc_pre(residual, fn, hc_scale, hc_base, **kw), R.mhc_pre(
        residual, fn, hc_scale, hc_base, compute_dtype=torch.bfloat16, **kw
    )


def assert_ulps(got, want, ulps, *, atol=1e-5, mantissa_bits=7):
    """|got - want| <= ulps units in the last place of a bf16 (7 stored mantissa bits) `want`, plus
    `atol` for the fp32 rounding of sums of O(1) terms that cancel to a tiny result."""
    want = want.double()
    mag = want.abs().clamp_min(2.0**-100)
    ulp = torch.exp2(torch.floor(torch.log2(mag)) - mantissa_bits)
    bad = ~((got.double() - want).abs() <= ulps * ulp + atol)  # NaN (an output left poisoned) is bad too
    assert not bad.any(), f"{int(bad.sum())} values beyond {ulps} ulp, e.g. got {got[bad][:4]} want {want[bad][:4]}"


def sm90_default():
    """sm_90a's default selection with its large and mid tiles plain, as without LARGE_PDL_90 and MID_ROW_PDL_90 (session
    61's rules) and MID_PRE_EXIT_90 (session 62's): the tests that pin other choices of the default compare against
    these; test_large_t_pdl_config and test_default_selection_by_arch pin the flags."""
    tiles = (*_config.LARGE_T_PDL_TILES, *_config.MID_T_PDL_TILES)
    return _config.with_tile_fields(_config.default_config("sm_90a"), tiles, pdl=False, pdl_at_exit=False)
