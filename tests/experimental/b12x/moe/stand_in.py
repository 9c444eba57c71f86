"""Plain-torch stand-ins for moe.fused_moe's pipeline: the expert GEMM launchers (the oracle the
pipeline tests run the Triton steps around), a vectorized fp32 reference of the whole layer, a torch
bf16 computation of it (the tolerance rule's "same computation by torch in the same precision"),
and the checks every numeric test applies.

`fc1_stand_in(a_fmt, b_fmt, activation)` / `fc2_stand_in(a_fmt, b_fmt)` return callables with exactly
the launcher signatures of `_kernel_experts.compile_fc1` / `compile_fc2`:

    fc1(A, SFA, B, SFB, C, expert_start, w_alpha, a_alpha, act_params)     C bf16 [R_cap, I]
    fc2(A2, SFA2, B2, SFB2, C2, expert_start, w_alpha, a_alpha)            C2 fp32 [R_cap, H]

Expert e's rows [start[e], start[e + 1]) are dequantized from A (bf16, or NVFP4 / MXFP8 bytes with
swizzled scales over all R_cap rows), times a_alpha[e], multiplied by expert e's dequantized weight
(reference.expert_matrix, w_alpha included) in fp32; FC1 applies reference.activation and rounds to
bf16. Rows past start[E] are never touched. They read expert_start on the host: not graph-safe.
"""

from __future__ import annotations

import torch

from flashinfer.experimental.b12x._lib import quant as Q
from flashinfer.experimental.b12x.moe.fused_moe import reference as R

SF_BLOCK = {"nvfp4": 16, "mxfp8": 32}


def dequantize_rows(a_fmt: str, A: torch.Tensor, SFA: torch.Tensor, lo: int, hi: int, k: int) -> torch.Tensor:
    """fp32 [hi - lo, k] of rows lo..hi of a GEMM operand (scales unswizzled over all rows of A)."""
    if a_fmt == "bfloat16":
        return A[lo:hi].float()
    grid = Q.unswizzle_scales(SFA.reshape(-1), A.shape[0], k // SF_BLOCK[a_fmt])[lo:hi]
    if a_fmt == "nvfp4":
        return Q.dequantize_nvfp4(A[lo:hi], grid.view(torch.float8_e4m3fn), 1.0)
    return Q.dequantize_mxfp8(A[lo:hi].view(torch.float8_e4m3fn), grid.view(torch.uint8))


def _expert_gemm(a_fmt, b_fmt, A, SFA, B, SFB, C, expert_start, w_alpha, a_alpha, epilogue):
    num_experts, n, k = B.shape[0], B.shape[1], B.shape[2] * 2
    start = expert_start.tolist()
    for e in range(num_experts):
        lo, hi = start[e], start[e + 1]
        if hi <= lo:
            continue
        w = R.expert_matrix(B[e], SFB[e], w_alpha[e], b_fmt, n, k)
        x = dequantize_rows(a_fmt, A, SFA, lo, hi, k) * a_alpha[e].float()
        C[lo:hi] = epilogue(x @ w.t()).to(C.dtype)


def fc1_stand_in(a_fmt: str, b_fmt: str, activation: str):
    def fc1(A, SFA, B, SFB, C, expert_start, w_alpha, a_alpha, act_params):
        limit, alpha, beta = act_params.tolist()
        i = C.shape[1]
        act = lambda h: R.activation(h, activation, i, limit, alpha, beta)  # noqa: E731
        _expert_gemm(a_fmt, b_fmt, A, SFA, B, SFB, C, expert_start, w_alpha, a_alpha, act)

    return fc1


def fc2_stand_in(a_fmt: str, b_fmt: str):
    def fc2(A2, SFA2, B2, SFB2, C2, expert_start, w_alpha, a_alpha):
        _expert_gemm(a_fmt, b_fmt, A2, SFA2, B2, SFB2, C2, expert_start, w_alpha, a_alpha, lambda y: y)

    return fc2


# ---- whole-layer computations (vectorized over each expert's routes) ------------------------------
def dense_layer(
    a,
    experts,
    topk_weights,
    topk_ids,
    *,
    quant_mode,
    on_input=False,
    limit=7.0,
    alpha=1.702,
    beta=1.0,
    bf16=False,
):
    """fp32 [T, H]: reference.fused_moe's math with one matmul per hit expert instead of one per
    route (same quantization steps, same route order in the final sum). bf16=True runs both
    matmuls in bf16 on bf16-rounded operands (torch's "same precision" computation).
    act(FC1) is rounded to a's dtype before FC2's quantization in every recipe, as in reference.py
    and the device pipeline (FC1 stores bf16 C)."""
    p = experts.plan
    t_count, k = topk_ids.shape
    ids = topk_ids.long()
    valid = (ids >= 0) & (ids < p.num_experts)
    y_all = torch.zeros(t_count, k, p.hidden_size, dtype=torch.float32, device=a.device)
    for e in torch.unique(ids[valid]).tolist():
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        w1 = R.expert_matrix(
            experts.w1_values[e], experts.w1_scales[e], experts.w1_alpha[e], p.weight_format, p.fc1_rows, p.hidden_size
        )
        w2 = R.expert_matrix(
            experts.w2_values[e],
            experts.w2_scales[e],
            experts.w2_alpha[e],
            p.weight_format,
            p.hidden_size,
            p.intermediate_size,
        )
        w = topk_weights[tok, slot].float()
        x = a[tok].float()
        if on_input:
            x = x * w[:, None]
        g1 = None if experts.a1_gscale is None else experts.a1_gscale[e]
        g2 = None if experts.a2_gscale is None else experts.a2_gscale[e]
        x = R.quantize_activation(x, quant_mode, g1)
        h = (x.bfloat16() @ w1.bfloat16().t()).float() if bf16 else x @ w1.t()
        g = R.activation(h, p.activation, p.intermediate_size, limit, alpha, beta)
        g = g.to(a.dtype).float()
        g = R.quantize_activation(g, quant_mode, g2)
        y = (g.bfloat16() @ w2.bfloat16().t()).float() if bf16 else g @ w2.t()
        y_all[tok, slot] = y if on_input else w[:, None] * y
    out = torch.zeros(t_count, p.hidden_size, dtype=torch.float32, device=a.device)
    for j in range(k):  # reference order: out = ((0 + y_0) + y_1) + ...
        out = out + y_all[:, j]
    return out


def row_cosine(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-row cosine similarity in fp64 (rows that are zero in both count as 1)."""
    x, y = x.double(), y.double()
    num = (x * y).sum(-1)
    den = x.norm(dim=-1) * y.norm(dim=-1)
    both_zero = (x.abs().sum(-1) == 0) & (y.abs().sum(-1) == 0)
    return torch.where(both_zero, torch.ones_like(num), num / den.clamp_min(1e-300))


def check_layer(got: torch.Tensor, ref32: torch.Tensor, peer: torch.Tensor, *, min_cos=0.9999, what=""):
    """The numeric bar of the op (DESIGN.md tolerance rule): finite output, every row's cosine to the
    fp32 reference >= min_cos, and the max error at most 2x that of torch's same computation in bf16
    (`peer`, rounded to bf16 as the op's output is)."""
    got32 = got.float()
    assert torch.isfinite(got32).all(), f"{what}: non-finite output"
    cos = row_cosine(got32, ref32)
    worst = int(cos.argmin())
    assert float(cos.min()) >= min_cos, f"{what}: row {worst} cosine {float(cos[worst]):.6f} < {min_cos}"
    err = (got32 - ref32).abs().max().item()
    peer_err = (peer.to(got.dtype).float() - ref32).abs().max().item()
    assert err <= 2 * peer_err, f"{what}: max error {err:.3g} > 2 x torch bf16's {peer_err:.3g}"
    return err, peer_err


def assert_bf16_close(x32: torch.Tensor, ref: torch.Tensor) -> None:
    """x32 rounds to ref in bf16 up to one ulp where fp32 summation order (~2^-20 of the row's
    largest value) decides the rounding: the vectorized reference against reference.py."""
    diff = (x32.bfloat16().float() - ref.float()).abs()
    ulp = ref.float().abs() * 2.0**-7 + ref.float().abs().amax(-1, keepdim=True) * 2.0**-20
    assert bool((diff <= ulp).all()), f"max diff {float(diff.max())}"
