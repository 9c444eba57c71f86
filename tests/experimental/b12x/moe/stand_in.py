"""Plain-torch stand-ins for moe.fused_moe's pipeline: the expert GEMM launchers (the oracle the
pipeline tests run the Triton steps around), a vectorized fp32 reference of the whole layer, a torch
bf16 computation of it (the tolerance rule's "same computation by torch in the same precision"),
and the checks every numeric test applies.

`fc1_stand_in(a_fmt, b_fmt, activation, grid)` / `fc2_stand_in(a_fmt, b_fmt, grid)` return callables
with exactly the launcher signatures of `_kernel_experts.compile_fc1` / `compile_fc2`:

    fc1(A, SFA, B, SFB, C, expert_start, w_alpha, a_alpha, act_params, active)  C bf16 [R_cap, I]
    fc2(A2, SFA2, B2, SFB2, C2, expert_start, w_alpha, a_alpha, active)         C2 fp32 [R_cap, H]

Like the kernels' grid variants, they visit every expert (grid "identity"; `active` is not read) or
only the experts listed in `active` (grid "list"; entries >= E: none). Expert
e's rows [start[e], start[e + 1]) are dequantized from A (bf16, or NVFP4 / MXFP8 bytes with
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


def _grid_experts(grid: str, num_experts: int, active: torch.Tensor) -> list:
    if grid == "identity":
        return list(range(num_experts))
    assert grid == "list", grid
    return [x for x in active.tolist() if x < num_experts]


def _expert_gemm(grid, a_fmt, b_fmt, A, SFA, B, SFB, C, expert_start, w_alpha, a_alpha, active, epilogue):
    num_experts, n, k = B.shape[0], B.shape[1], B.shape[2] * 2
    start = expert_start.tolist()
    for e in _grid_experts(grid, num_experts, active):
        lo, hi = start[e], start[e + 1]
        if hi <= lo:
            continue
        w = R.expert_matrix(B[e], SFB[e], w_alpha[e], b_fmt, n, k)
        x = dequantize_rows(a_fmt, A, SFA, lo, hi, k) * a_alpha[e].float()
        C[lo:hi] = epilogue(x @ w.t()).to(C.dtype)


def fc1_stand_in(a_fmt: str, b_fmt: str, activation: str, grid: str = "list"):
    def fc1(A, SFA, B, SFB, C, expert_start, w_alpha, a_alpha, act_params, active):
        limit, alpha, beta = act_params.tolist()
        i = C.shape[1]
        act = lambda h: R.activation(h, activation, i, limit, alpha, beta)  # noqa: E731
        _expert_gemm(grid, a_fmt, b_fmt, A, SFA, B, SFB, C, expert_start, w_alpha, a_alpha, active, act)

    return fc1


def fc2_stand_in(a_fmt: str, b_fmt: str, grid: str = "list"):
    def fc2(A2, SFA2, B2, SFB2, C2, expert_start, w_alpha, a_alpha, active):
        args = (A2, SFA2, B2, SFB2, C2, expert_start, w_alpha, a_alpha, active)
        _expert_gemm(grid, a_fmt, b_fmt, *args, lambda y: y)

    return fc2


# ---- whole-layer computations (vectorized over each expert's routes) ------------------------------
def _matrices(experts, e):
    """fp32 (W1_e [N1, H], W2_e [H, I]) with alpha, as reference.py dequantizes them."""
    p = experts.plan
    v, s, al = experts.w1_values[e], experts.w1_scales[e], experts.w1_alpha[e]
    w1 = R.expert_matrix(v, s, al, p.weight_format, p.fc1_rows, p.hidden_size)
    v, s, al = experts.w2_values[e], experts.w2_scales[e], experts.w2_alpha[e]
    return w1, R.expert_matrix(v, s, al, p.weight_format, p.hidden_size, p.intermediate_size)


def _by_expert(experts, topk_ids):
    """(e, tok, slot) for each hit expert: the routes (tok[i], slot[i]) that go to e."""
    ids = topk_ids.long()
    valid = (ids >= 0) & (ids < experts.plan.num_experts)
    for e in torch.unique(ids[valid]).tolist():
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        yield e, tok, slot


def _fc1_input(a, experts, topk_weights, e, tok, slot, quant_mode, on_input):
    x = a[tok].float()
    if on_input:
        x = x * topk_weights[tok, slot].float()[:, None]
    g1 = None if experts.a1_gscale is None else experts.a1_gscale[e]
    return R.quantize_activation(x, quant_mode, g1)


def fc1_routes(
    a, experts, topk_weights, topk_ids, *, quant_mode, on_input=False, limit=7.0, alpha=1.702, beta=1.0, fc1=None
):
    """(g, spread), fp32 [T, k, I] each: g = act(FC1) of every valid route before any rounding
    (reference.py's steps; 0 for ignored routes), and spread = how far act(FC1) can move when
    FC1's fp32 sums are taken in another order: act evaluated at h +- B (each corner of gate/up
    for gated activations) with B = 4 K 2^-24 (|x| @ |W1|^T), the deterministic summation bound
    (AGENTS.md) of two fp32 sums (the kernel's and this one). fc1: None (x @ W1^T in fp32) or a
    callable (x, W1) -> h (another summation order; tests). FC1 starts from its operand as the
    pipeline stores it (check_operands holds those bytes to the oracles): in w4a16 with the router
    weight on the input that is bf16(a * w), where reference.py keeps a * w in fp32."""
    p = experts.plan
    t_count, k = topk_ids.shape
    i = p.intermediate_size
    g = torch.zeros(t_count, k, i, dtype=torch.float32, device=a.device)
    spread = torch.zeros_like(g)
    act = lambda h: R.activation(h, p.activation, i, limit, alpha, beta)  # noqa: E731
    for e, tok, slot in _by_expert(experts, topk_ids):
        w1, _ = _matrices(experts, e)
        x = _fc1_input(a, experts, topk_weights, e, tok, slot, quant_mode, on_input)
        if quant_mode == "w4a16":  # FC1's operand is a's dtype (the gather rounds a * w to it)
            x = x.to(a.dtype).float()
        h = x @ w1.t() if fc1 is None else fc1(x, w1)
        bound = (x.abs() @ w1.abs().t()) * (4 * p.hidden_size * 2.0**-24)
        g_e = act(h)
        if p.gated:
            corners = [torch.cat([sg * bound[:, :i], su * bound[:, i:]], -1) for sg in (-1, 1) for su in (-1, 1)]
        else:
            corners = [-bound, bound]
        s_e = torch.stack([(act(h + c) - g_e).abs() for c in corners]).amax(0)
        g[tok, slot], spread[tok, slot] = g_e, s_e
    return g, spread


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
    intermediate=None,
):
    """fp32 [T, H]: reference.fused_moe's math with one matmul per hit expert instead of one per
    route (same quantization steps, same route order in the final sum). bf16=True runs both
    matmuls in bf16 on bf16-rounded operands (torch's "same precision" computation).
    act(FC1) is rounded to a's dtype before FC2's quantization in every recipe, as in reference.py
    and the device pipeline (FC1 stores bf16 C). intermediate: None, or [T, k, I] values of that
    bf16 intermediate to take instead of computing FC1 (the kernel's own, read back from its
    workspace: FC2 + combine are then checked from where the kernel's FC1 left off)."""
    p = experts.plan
    t_count, k = topk_ids.shape
    y_all = torch.zeros(t_count, k, p.hidden_size, dtype=torch.float32, device=a.device)
    for e, tok, slot in _by_expert(experts, topk_ids):
        w1, w2 = _matrices(experts, e)
        w = topk_weights[tok, slot].float()
        if intermediate is None:
            x = _fc1_input(a, experts, topk_weights, e, tok, slot, quant_mode, on_input)
            h = (x.bfloat16() @ w1.bfloat16().t()).float() if bf16 else x @ w1.t()
            g = R.activation(h, p.activation, p.intermediate_size, limit, alpha, beta)
        else:
            g = intermediate[tok, slot].float()
        g = g.to(a.dtype).float()
        g2 = None if experts.a2_gscale is None else experts.a2_gscale[e]
        g = R.quantize_activation(g, quant_mode, g2)
        y = (g.bfloat16() @ w2.bfloat16().t()).float() if bf16 else g @ w2.t()
        y_all[tok, slot] = y if on_input else w[:, None] * y
    out = torch.zeros(t_count, p.hidden_size, dtype=torch.float32, device=a.device)
    for j in range(k):  # reference order: out = ((0 + y_0) + y_1) + ...
        out = out + y_all[:, j]
    return out


# ---- reading the device pipeline's workspace back (api.py's scratch names) -------------------------
def kernel_intermediate(s, ids, e):
    """fp32 [T, k, I]: FC1's bf16 intermediate of route (t, j), read from workspace `s` through
    route_row (NaN for ignored routes). e: num_experts."""
    t, k = ids.shape
    rr = s["route_row"][: t * k].view(t, k).long()
    assert torch.equal(rr >= 0, (ids >= 0) & (ids < e)), "route_row disagrees with the valid routes"
    c1 = s["c1"][rr.clamp_min(0)].float()
    return torch.where((rr >= 0)[..., None], c1, float("nan"))


def nvfp4_deq(x: torch.Tensor, gs) -> torch.Tensor:
    """bf16 deq(quant(x)) without the global scale: e2m1(q) * e4m3(sf) of quantize_nvfp4(x, gs)
    (exact in bf16), what the "nvfp4_deq" gather and requantize write."""
    q, sf = Q.quantize_nvfp4(x, gs)
    return Q.dequantize_nvfp4(q, sf, 1.0).bfloat16()


def assert_same_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """bf16 tensors bit for bit, except that any NaN matches any NaN (a NaN input's block)."""
    both_nan = got.isnan() & want.isnan()
    same = got.view(torch.int16) == want.view(torch.int16)
    bad = ~(same | both_nan)
    assert not bool(bad.any()), f"{what}: {int(bad.sum())} elements differ, first at {bad.nonzero()[0].tolist()}"


def check_operands(s, formats, on_input, experts, a, ids, w):
    """The FC1 operand (gather) and the FC2 operand (requantize) bytes in workspace `s` are the
    `_lib.quant` oracles' on the kernel's own inputs (a's rows; FC1's bf16 intermediate), bit for
    bit, expert by expert. formats: the binding's operand formats as the gather and requantize
    write them (A1, A2 or None; "nvfp4_deq": bf16 `nvfp4_deq` values in a1_deq / a2_deq)."""
    a1_fmt, a2_fmt = formats
    start = s["expert_start"].tolist()
    n = start[-1]
    rows = torch.nonzero(s["route_row"][: ids.numel()] >= 0).flatten()  # routes in sorted-row order
    order = torch.empty(n, dtype=torch.long, device=a.device)
    order[s["route_row"][rows].long()] = rows
    x = a[order // ids.shape[1]].float()
    if on_input:
        x = x * w.reshape(-1)[order][:, None]
    todo = [("a1", a1_fmt, x, experts.a1_gscale)]
    if a2_fmt is not None:
        todo.append(("a2", a2_fmt, s["c1"][:n].float(), experts.a2_gscale))
    for name, fmt, vals, gs in todo:
        if fmt == "nvfp4_deq":
            for e in range(len(start) - 1):
                lo, hi = start[e], start[e + 1]
                if hi > lo:
                    assert_same_bits(
                        s[f"{name}_deq"][lo:hi], nvfp4_deq(vals[lo:hi], gs[e]), f"{name} values of expert {e}"
                    )
            continue
        if fmt == "bfloat16":
            assert torch.equal(s[name][:n].view(torch.int16), vals.bfloat16().view(torch.int16)), f"{name} bytes"
            continue
        block = 16 if fmt == "nvfp4" else 32
        grid = Q.unswizzle_scales(s[f"{name}_scales"], s[name].shape[0], vals.shape[1] // block)
        for e in range(len(start) - 1):
            lo, hi = start[e], start[e + 1]
            if hi == lo:
                continue
            if fmt == "nvfp4":
                q, sf = Q.quantize_nvfp4(vals[lo:hi], gs[e])
            else:
                q, sf = Q.quantize_mxfp8(vals[lo:hi])
            assert torch.equal(s[name][lo:hi], q.view(torch.uint8)), f"{name} values of expert {e} differ"
            assert torch.equal(grid[lo:hi], sf.view(torch.uint8)), f"{name} scales of expert {e} differ"


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


def check_intermediate(got, g, spread, valid, *, what="", max_mismatch=0.01):
    """FC1 + activation, element by element: `got` [T, k, I] (the kernel's bf16 intermediate per
    route) against `g`, `spread` from fc1_routes, on the valid routes [T, k]. Each element is within
    bf16 round-to-nearest of a value act(FC1) can take under any fp32 summation order
    (|got - g| <= 2^-8 |g| + 2 spread + 2^-18 |g|, the last term the activation's own fp32 ops and
    ex2.approx), and at most `max_mismatch` of the elements differ from bf16(g) at all (a summation
    order flips ~1e-4 of them; a wrong rounding mode or activation flips most)."""
    got, ref, spread = got[valid].float(), g[valid], spread[valid]
    assert torch.isfinite(got).all(), f"{what}: intermediate not finite (an unwritten row keeps its NaN poison)"
    err = (got - ref).abs()
    over = err - ((2.0**-8 + 2.0**-18) * ref.abs() + 2 * spread)
    worst = int(over.argmax())
    assert float(over.max()) <= 0, (
        f"{what}: intermediate element {worst} is {float(got.flatten()[worst]):.6g}, act(FC1) "
        f"{float(ref.flatten()[worst]):.6g} +- {float(spread.flatten()[worst]):.3g} (outside bf16 rounding)"
    )
    mismatch = float((got != ref.bfloat16().float()).float().mean()) if got.numel() else 0.0
    assert mismatch <= max_mismatch, f"{what}: {mismatch:.2%} of the intermediate differs from bf16(act(FC1))"


def check_end_to_end(got, ref32, *, what="", min_cos=0.9999, floor=0.999, per_rows=1000):
    """The whole layer against the fully independent reference (its own FC1): every row's cosine >=
    floor, and at most 1 + T // per_rows rows below min_cos. Only this much room: when FC1's fp32
    summation order differs, one bf16 element of the intermediate can land on the other side of an
    NVFP4/MXFP8 rounding boundary (an E2M1 code or a block scale moves), and with relu2's squared,
    heavy-tailed values a row's cosine drops to ~0.9998 (measured on the CPU at E=128, H=2048,
    I=768: 1 row in 8192; docs/moe.md). The strict bar is on the stages: check_intermediate, then
    check_layer against dense_layer(intermediate=the kernel's own)."""
    cos = row_cosine(got.float(), ref32)
    low = int((cos < min_cos).sum())
    worst = int(cos.argmin())
    assert float(cos[worst]) >= floor, f"{what}: row {worst} cosine {float(cos[worst]):.6f} < {floor} (end to end)"
    allowed = 1 + cos.numel() // per_rows
    assert low <= allowed, f"{what}: {low} rows below cosine {min_cos} end to end (at most {allowed})"


def check_staged(out, intermediate, a, experts, topk_weights, topk_ids, *, what="", **kw):
    """The gpu tier's numeric bar of one call (docs/moe.md), in three stages:
    1. check_intermediate: the kernel's bf16 intermediate [T, k, I] (read back from its workspace)
       against act(FC1) of the reference's steps, element by element;
    2. check_layer (the issue's bar: every row's cosine >= 0.9999, max error <= 2x torch bf16's)
       against dense_layer taking that intermediate, i.e. quantizing it exactly where the kernel did;
    3. check_end_to_end against the fully independent dense_layer (its own FC1).
    kw: dense_layer's (quant_mode, on_input, limit, alpha, beta)."""
    ids = topk_ids.long()
    valid = (ids >= 0) & (ids < experts.plan.num_experts)
    g, spread = fc1_routes(a, experts, topk_weights, topk_ids, **kw)
    check_intermediate(intermediate, g, spread, valid, what=what)
    inter = torch.where(valid[..., None], intermediate.float(), 0.0)
    ref = dense_layer(a, experts, topk_weights, topk_ids, intermediate=inter, **kw)
    peer = dense_layer(a, experts, topk_weights, topk_ids, intermediate=inter, bf16=True, **kw)
    check_layer(out, ref, peer, what=what)
    check_end_to_end(out, dense_layer(a, experts, topk_weights, topk_ids, **kw), what=what)


def assert_bf16_close(x32: torch.Tensor, ref: torch.Tensor) -> None:
    """x32 rounds to ref in bf16 up to one ulp where fp32 summation order (~2^-20 of the row's
    largest value) decides the rounding: the vectorized reference against reference.py."""
    diff = (x32.bfloat16().float() - ref.float()).abs()
    ulp = ref.float().abs() * 2.0**-7 + ref.float().abs().amax(-1, keepdim=True) * 2.0**-20
    assert bool((diff <= ulp).all()), f"max diff {float(diff.max())}"
