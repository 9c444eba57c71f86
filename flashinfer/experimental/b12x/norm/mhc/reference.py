"""Plain-torch oracle of norm.mhc: hyper-connection mixing with multiplicity 4 (DeepSeek mHC).

This file defines the op's math (FORMATS.md "norm.mhc"); the kernels match it and the tests pin it.
Every intermediate is float32 unless `compute_dtype` says otherwise (the tests run it in bfloat16
to measure what plain torch loses in that precision: the tolerance rule of DESIGN.md §6).

Shapes: residual [T, 4, H] (4 streams per token), fn fp32 [24, 4H], hc_scale fp32 [3],
hc_base fp32 [24]; post fp32 [T, 4], comb fp32 [T, 4, 4]; y [T, H] in the residual's dtype.

pre (`mhc_pre`):
    flat   = residual.view(T, 4H)
    mixes  = (flat @ fn^T) * rsqrt(mean(flat^2) + rms_eps)                     [T, 24]
    pre    = sigmoid(mixes[:, 0:4] * hc_scale[0] + hc_base[0:4]) + hc_eps       [T, 4]
    post   = 2 * sigmoid(mixes[:, 4:8] * hc_scale[1] + hc_base[4:8])            [T, 4]
    comb   = softmax_j(mixes[:, 8:24].view(T, 4, 4) * hc_scale[2] + hc_base[8:24]) + hc_eps
             then `sinkhorn_iters` rounds of: rows /= (row sum + hc_eps), then columns /= (column
             sum + hc_eps)                                                      [T, 4, 4] = [i, j]
    y      = sum_i pre[:, i] * residual[:, i]                                    [T, H]
             optionally y = y * rsqrt(mean(y^2) + norm_eps) * norm_weight (RMS norm, one rounding)
post (`mhc_post`): residual'[:, j] = post[:, j] * x + sum_i comb[:, i, j] * residual[:, i]
post_pre (`mhc_post_pre`): post, rounded to the storage dtype, then pre on that residual.

The role of hc_eps: a floor on every stream weight (`pre` never reaches 0, so no stream is dropped)
and on every entry of `comb` before Sinkhorn (the matrix stays strictly positive, so the
normalisation is defined and converges); it also guards the Sinkhorn denominators. With it, rows and
columns sum to s / (s + hc_eps) ~ 1 rather than exactly 1. The last normalisation of a round is by
columns, so `sum_i comb[i, j]` (the weights `post` mixes residual streams with) is the tightest.

Broadcast first layer: `residual` may be x [T, H]: the 4 streams are x repeated (the returned
residual is that repeat). fn is then the layer's [24, 4H], or [24, H] already folded (the sum of
its 4 column blocks, equal math since every stream is x).
"""

from __future__ import annotations

import torch

MULT = 4  # streams per token (hyper-connection multiplicity)
MIXES = 2 * MULT + MULT * MULT  # pre (4) + post (4) + comb (16)


def split_fn(fn: torch.Tensor, dtype=torch.bfloat16) -> torch.Tensor:
    """fn as the kernels' tensor-core mixes see it: hi + lo in fp32, hi = dtype(fn), lo = dtype(fn - hi).

    The CUDA kernels compute flat @ hi^T + flat @ lo^T (operands in the activation dtype, fp32
    accumulation); the rest of fn that neither holds is below ~2^-16 of |fn| for bf16. Tests use
    this to compare the kernels at fp32 tolerances; the op's accuracy contract is still the fp32
    reference with `fn` itself (DESIGN.md §6 rule).
    """
    hi = fn.float().to(dtype)
    lo = (fn.float() - hi.float()).to(dtype)
    return hi.float() + lo.float()


def sinkhorn(comb: torch.Tensor, *, hc_eps: float, iters: int) -> torch.Tensor:
    """`iters` rounds of row then column normalisation of [..., 4, 4] (sums guarded by hc_eps)."""
    for _ in range(iters):
        comb = comb / (comb.sum(-1, keepdim=True) + hc_eps)
        comb = comb / (comb.sum(-2, keepdim=True) + hc_eps)
    return comb


def split_mixes(mixes, hc_scale, hc_base, *, hc_eps: float, sinkhorn_iters: int):
    """(pre [.., 4], post [.., 4], comb [.., 4, 4]) from normalised mixes [.., 24]."""
    s = hc_scale.to(mixes.dtype)
    b = hc_base.to(mixes.dtype)
    pre = torch.sigmoid(mixes[..., 0:MULT] * s[0] + b[0:MULT]) + hc_eps
    post = 2 * torch.sigmoid(mixes[..., MULT : 2 * MULT] * s[1] + b[MULT : 2 * MULT])
    logits = mixes[..., 2 * MULT :] * s[2] + b[2 * MULT :]
    logits = logits.unflatten(-1, (MULT, MULT))
    comb = torch.softmax(logits, dim=-1) + hc_eps
    return pre, post, sinkhorn(comb, hc_eps=hc_eps, iters=sinkhorn_iters)


def _rms_norm(y, weight, eps: float, dtype):
    w = weight.to(dtype)
    return y * torch.rsqrt(y.square().mean(-1, keepdim=True) + eps) * w


def mhc_pre(
    residual,
    fn,
    hc_scale,
    hc_base,
    *,
    rms_eps: float,
    hc_eps: float,
    sinkhorn_iters: int,
    norm_weight=None,
    norm_eps: float = 0.0,
    compute_dtype=torch.float32,
):
    """(residual [T, 4, H], post, comb, y); see the module docstring. Broadcast when residual is 2-D."""
    cd = compute_dtype
    out_dtype = residual.dtype
    if residual.dim() == 2:
        x = residual.to(cd)
        t, h = x.shape
        streams = x.unsqueeze(1).expand(t, MULT, h)
        fn_c = fn.to(cd)
        if fn.shape[1] == h:  # folded: the 4 blocks already summed
            raw = x @ fn_c.T
        else:
            raw = streams.reshape(t, MULT * h) @ fn_c.T
        mean_sq = x.square().mean(-1, keepdim=True)
        residual_out = residual.unsqueeze(1).expand(t, MULT, h).contiguous()
    else:
        t, _, h = residual.shape
        streams = residual.to(cd)
        flat = streams.reshape(t, MULT * h)
        raw = flat @ fn.to(cd).T
        mean_sq = flat.square().mean(-1, keepdim=True)
        residual_out = residual
    mixes = raw * torch.rsqrt(mean_sq + rms_eps)
    pre, post, comb = split_mixes(mixes, hc_scale.to(cd), hc_base.to(cd), hc_eps=hc_eps, sinkhorn_iters=sinkhorn_iters)
    y = (pre.unsqueeze(-1) * streams).sum(1)
    if norm_weight is not None:
        y = _rms_norm(y, norm_weight, norm_eps, cd)
    return residual_out, post.float(), comb.float(), y.to(out_dtype)


def mhc_post(x, residual, post, comb, *, compute_dtype=torch.float32):
    """residual'[:, j] = post[:, j] * x + sum_i comb[:, i, j] * residual[:, i], in residual's dtype."""
    cd = compute_dtype
    mixed = torch.einsum("tij,tih->tjh", comb.to(cd), residual.to(cd))
    out = post.to(cd).unsqueeze(-1) * x.to(cd).unsqueeze(1) + mixed
    return out.to(residual.dtype)


def mhc_post_pre(
    x,
    residual,
    prev_post,
    prev_comb,
    fn,
    hc_scale,
    hc_base,
    *,
    rms_eps: float,
    hc_eps: float,
    sinkhorn_iters: int,
    norm_weight=None,
    norm_eps: float = 0.0,
    compute_dtype=torch.float32,
):
    """`mhc_post` (rounded to the storage dtype) then `mhc_pre` on its result: (residual', post, comb, y)."""
    new_residual = mhc_post(x, residual, prev_post, prev_comb, compute_dtype=compute_dtype)
    _, post, comb, y = mhc_pre(
        new_residual,
        fn,
        hc_scale,
        hc_base,
        rms_eps=rms_eps,
        hc_eps=hc_eps,
        sinkhorn_iters=sinkhorn_iters,
        norm_weight=norm_weight,
        norm_eps=norm_eps,
        compute_dtype=compute_dtype,
    )
    return new_residual, post, comb, y
