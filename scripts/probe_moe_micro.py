"""Can a decode MoE layer stream its hit experts' weights in one launch? A memory skeleton of a fused micro path.

    python3 scripts/probe_moe_micro.py [--shape 128x8x2048x768] [--tokens 1 4] [--json out.json]
    TRITON_INTERPRET=1 python3 scripts/probe_moe_micro.py --check   # the skeleton's indexing against torch, CPU

Issue #7's E = 128 T = 1 layer takes ~18 µs for ~20 MB of FP4 experts (four launches: route + gather, FC1, FC2,
combine), where a copy of those bytes takes ~5 µs on the H200. The design this probes puts FC1, the activation and
FC2 in ONE kernel with no grid-wide dependency: program (s, r) owns intermediate columns [s * BI, (s + 1) * BI) of
route r (token r // k, expert topk_ids[r]): it reads those BI gate rows and BI up rows of FC1 (the whole K = H), forms
its BI activations, and multiplies them into the matching BI columns of FC2 (all H rows, BI / 2 bytes each): a
partial [H] of the route's output, written to fp32 scratch [routes * S, H]. A second launch sums each token's k * S
partials times the route weights. Each program's weight bytes do not depend on anything it computes, so all of them
can be in flight at once.

The skeleton keeps that memory program (the same grid, loads, partial stores and reduction launch) and replaces the
FP4 math with stand-ins: FC1's words as floats times an fp32 activation vector, the "activation" their product, FC2's
words as floats times its sum. Its output is not the layer: it is timed by CUDA graph replays that rotate routing
sets over disjoint experts (past L2, as bench_moe does), beside the same-size copy. `--check` compares the
skeleton's stand-in output with the same stand-in in torch (the indexing, nothing else).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import triton
import triton.language as tl


@triton.jit
def _fused(
    ids_ptr,  # int32 [routes]: the expert of each route (token r // k)
    w1_ptr,  # int32 words [E, 2I, H / 8]: FC1 (gate rows [0, I), up rows [I, 2I)), 8 FP4 values a word
    w2_ptr,  # int32 words [E, H, I / 8]: FC2
    a_ptr,  # fp32 [T, H / 8]: the activation stand-in (one value a weight word)
    part_ptr,  # fp32 [routes * S, H]: the partial outputs
    K_TOP: tl.constexpr,
    H: tl.constexpr,
    INTER: tl.constexpr,
    BI: tl.constexpr,  # intermediate columns a program (a multiple of 8)
    BK: tl.constexpr,  # FC1 words a step along K (divides H / 8)
    BN: tl.constexpr,  # FC2 rows a step (divides H)
    FC2: tl.constexpr,  # 0: FC1 only (its partial is the activations, BI values)
):
    W1: tl.constexpr = H // 8
    W2: tl.constexpr = INTER // 8
    S: tl.constexpr = INTER // BI
    s = tl.program_id(0)
    r = tl.program_id(1)
    e = tl.load(ids_ptr + r).to(tl.int64)
    t = r // K_TOP
    rows = s * BI + tl.arange(0, BI)
    gate = w1_ptr + e * (2 * INTER * W1) + rows.to(tl.int64)[:, None] * W1
    up = gate + INTER * W1
    acc_g = tl.zeros([BI], dtype=tl.float32)
    acc_u = tl.zeros([BI], dtype=tl.float32)
    for k0 in tl.static_range(0, W1, BK):
        cols = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + t * W1 + cols)
        acc_g += tl.sum(tl.load(gate + cols[None, :]).to(tl.float32) * a[None, :], axis=1)
        acc_u += tl.sum(tl.load(up + cols[None, :]).to(tl.float32) * a[None, :], axis=1)
    act = acc_g * acc_u  # [BI]: the stand-in of act(gate) * up
    out = part_ptr + (r * S + s).to(tl.int64) * H
    if FC2 == 0:
        tl.store(out + tl.arange(0, BI), act)
    else:
        # FC2's columns [s * BI, (s + 1) * BI) are words [s * BI / 8, ...) of every row: BI / 8 words a row
        words = s * (BI // 8) + tl.arange(0, BI // 8)
        hsum = tl.sum(act, axis=0)
        w2 = w2_ptr + e * (H * W2)
        for n0 in tl.static_range(0, H, BN):
            n = n0 + tl.arange(0, BN)
            w = tl.load(w2 + n.to(tl.int64)[:, None] * W2 + words[None, :]).to(tl.float32)
            tl.store(out + n, tl.sum(w, axis=1) * hsum)


@triton.jit
def _reduce(
    part_ptr,  # fp32 [T * K_TOP * S, H]
    wt_ptr,  # fp32 [T * K_TOP]: route weights
    out_ptr,  # bf16 [T, H]
    K_TOP: tl.constexpr,
    S: tl.constexpr,
    H: tl.constexpr,
    BH: tl.constexpr,
):
    """out[t, c] = sum over the token's routes j of weight * (sum over the S partials): program (c block, t) loads a
    route's S partials of its BH columns at once ([S, BH], S padded to a power of two)."""
    SP: tl.constexpr = triton.next_power_of_2(S)
    c = tl.program_id(0) * BH + tl.arange(0, BH)
    t = tl.program_id(1)
    s = tl.arange(0, SP)
    acc = tl.zeros([BH], dtype=tl.float32)
    for j in tl.static_range(K_TOP):
        rows = (t * K_TOP + j) * S + s
        tile = tl.load(part_ptr + rows.to(tl.int64)[:, None] * H + c[None, :], mask=(s < S)[:, None], other=0.0)
        acc += tl.load(wt_ptr + t * K_TOP + j) * tl.sum(tile, axis=0)
    tl.store(out_ptr + t * H + c, acc.to(tl.bfloat16))


REDUCE_BH = 32  # columns a reduction program (H / 32 = 64 programs a token at H = 2048)

# (BI, BK, BN, warps): intermediate columns a program, FC1 words a step, FC2 rows a step, warps
VARIANTS = (
    (16, 256, 1024, 4),
    (32, 128, 1024, 4),
    (32, 256, 512, 8),
    (64, 64, 512, 8),
    (64, 128, 256, 8),
)


class Layer:
    """The skeleton's buffers for one shape: w1 / w2 words for E experts, routing sets over disjoint experts."""

    def __init__(self, e, k, h, i, tokens, dev, gen, n_sets):
        import torch

        self.e, self.k, self.h, self.i, self.t = e, k, h, i, tokens
        rnd = dict(device=dev, dtype=torch.int32)
        self.w1 = torch.randint(-(2**31), 2**31 - 1, (e, 2 * i, h // 8), generator=gen, **rnd)
        self.w2 = torch.randint(-(2**31), 2**31 - 1, (e, h, i // 8), generator=gen, **rnd)
        self.a = torch.randn(tokens, h // 8, generator=gen, device=dev) * 1e-9
        routes = tokens * k
        perm = torch.randperm(e, generator=gen, device=dev).to(torch.int32)
        # set j: routes j*routes .. (j+1)*routes - 1 of a permutation, wrapping: disjoint while routes * n_sets <= E
        self.ids = [perm[(torch.arange(routes, device=dev) + j * routes) % e].contiguous() for j in range(n_sets)]
        self.wt = torch.rand(routes, generator=gen, device=dev)
        self.out = torch.empty(tokens, h, dtype=torch.bfloat16, device=dev)

    def hit_bytes(self) -> int:
        """FP4 bytes of the routes' experts (each route's expert once; the sets' experts are distinct)."""
        return self.t * self.k * (2 * self.i * self.h // 2 + self.h * self.i // 2)

    def call(self, bi, bk, bn, warps, fc2=True, reduce=True):
        """A call of the skeleton (fused launch, then the reduction) on the next routing set."""
        import torch

        from benchmarks.experimental.b12x.common import rotate

        s_count = self.i // bi
        part = torch.empty(self.t * self.k * s_count, self.h, dtype=torch.float32, device=self.w1.device)
        nxt = rotate(self.ids)
        consts = dict(K_TOP=self.k, H=self.h, INTER=self.i, BI=bi, BK=bk, BN=bn, FC2=int(fc2))

        def run(ids=None):
            _fused[(s_count, self.t * self.k)](
                nxt() if ids is None else ids, self.w1, self.w2, self.a, part, **consts, num_warps=warps
            )
            if reduce and fc2:
                bh = min(REDUCE_BH, self.h)
                _reduce[(self.h // bh, self.t)](part, self.wt, self.out, K_TOP=self.k, S=s_count, H=self.h, BH=bh)
            return part

        return run

    def reference(self, ids, bi):
        """The skeleton's stand-in output in torch (fp32 partials summed per token), for --check."""
        import torch

        s_count, h = self.i // bi, self.h
        e = ids.long()
        g = self.w1[e, : self.i].float()  # [routes, I, H/8]
        u = self.w1[e, self.i :].float()
        tok = torch.arange(len(e), device=e.device) // self.k
        a = self.a[tok][:, None, :]
        act = (g * a).sum(-1) * (u * a).sum(-1)  # [routes, I]
        hsum = act.view(len(e), s_count, bi).sum(-1)  # [routes, S]
        w2 = self.w2[e].float().view(len(e), h, s_count, bi // 8).sum(-1)  # [routes, H, S]
        part = w2 * hsum[:, None, :]  # [routes, H, S]
        routed = part.sum(-1) * self.wt[:, None]
        return routed.view(self.t, self.k, h).sum(1)


def _rel_err(out, want) -> float:
    """Largest |out - want| / max(|want|, 1) (NaN counts as failing: poisoned outputs are NaN)."""
    err = ((out.float() - want).abs() / want.abs().clamp_min(1.0)).max()
    return float("inf") if err.isnan() else err.item()


def check() -> int:
    """The skeleton against its torch stand-in on small shapes (CPU under TRITON_INTERPRET=1, or a GPU)."""
    import torch

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator(device=dev).manual_seed(0)
    bad = 0
    for tokens, (bi, bk, bn, warps) in ((1, (16, 32, 64, 4)), (2, (32, 16, 128, 4)), (1, (64, 8, 32, 8))):
        layer = Layer(16, 4, 256, 128, tokens, dev, gen, n_sets=2)
        layer.a = torch.randn(tokens, 256 // 8, generator=gen, device=dev)
        layer.w1 = torch.randint(-8, 8, layer.w1.shape, generator=gen, device=dev, dtype=torch.int32)
        layer.w2 = torch.randint(-8, 8, layer.w2.shape, generator=gen, device=dev, dtype=torch.int32)
        layer.out.fill_(float("nan"))
        layer.call(bi, bk, bn, warps)(ids=layer.ids[1])
        err, other = (_rel_err(layer.out, layer.reference(layer.ids[j], bi)) for j in (1, 0))
        ok = err < 1e-2 and other > 1e-2  # and the other routing set's answer must not pass
        bad += not ok
        print(f"check T={tokens} BI={bi} BK={bk} BN={bn}: max rel err {err:.2e} (other set {other:.1e}) "
              f"{'ok' if ok else 'FAILED'}")  # fmt: skip
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="128x8x2048x768", help="ExkxHxI (bench_moe's shape)")
    p.add_argument("--tokens", nargs="+", type=int, default=[1, 4])
    p.add_argument("--json", default=None, help="also write the rows here")
    p.add_argument("--check", action="store_true", help="only check the skeleton's indexing against torch")
    args = p.parse_args(argv)
    dims = args.shape.split("x")
    if len(dims) != 4 or not all(d.isdigit() and int(d) > 0 for d in dims):
        p.error(f"--shape takes ExkxHxI (four positive integers), got {args.shape!r}")
    e, k, h, i = (int(d) for d in dims)
    if h % 2048 or i % 64:
        p.error(f"--shape needs H a multiple of 2048 and I a multiple of 64 (the variants' tiles), got H={h}, I={i}")
    if min(args.tokens) < 1 or max(args.tokens) * k > e:
        p.error(
            f"--tokens takes 1 <= T <= E / k = {e // k} (each call's routes on distinct experts), got {args.tokens}"
        )
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `benchmarks`
    if args.check:
        return check()
    import torch

    from benchmarks.experimental.b12x.common import COPY_IMPL, same_size_copy
    from scripts.probe_nvfp4_skeleton import time_rows, write_rows

    if not torch.cuda.is_available():
        p.error("needs a CUDA device (--check runs on the CPU under TRITON_INTERPRET=1)")
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    rows = []
    for tokens in args.tokens:
        n_sets = max(2, e // (tokens * k))  # disjoint expert sets: every call reads its experts from HBM
        layer = Layer(e, k, h, i, tokens, dev, gen, n_sets)
        nbytes = layer.hit_bytes()
        print(f"T={tokens}: {tokens * k} routes, {nbytes / 1e6:.1f} MB of FP4 a call, {n_sets} routing sets")
        timed = [(COPY_IMPL, same_size_copy(nbytes, n_sets, dev, gen))]
        for bi, bk, bn, warps in VARIANTS:
            tag = f"BI={bi} BK={bk} BN={bn} {warps}w"
            timed.append((f"fused+reduce {tag}", layer.call(bi, bk, bn, warps)))
            timed.append((f"fused only {tag}", layer.call(bi, bk, bn, warps, reduce=False)))
        timed.append(("FC1 only BI=32 BK=128 4w", layer.call(32, 128, 1024, 4, fc2=False)))
        rows += time_rows(timed, n_sets, T=tokens, MB=round(nbytes / 1e6, 1))
    write_rows(args.json, rows, torch.cuda.get_device_name(dev))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
