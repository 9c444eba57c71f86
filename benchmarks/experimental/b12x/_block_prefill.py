"""bench_block's prefill step: the demo block over one request of N new tokens (empty cache).

gemm.blockscaled W4A16 at M = N (the tiled kernels), attention.paged in extend mode over the pages the
step itself appends, the demo's glue (RoPE + KV append, RMSNorm, SiLU * up; torch.compile'd on CUDA).
All plans are prepared in one PreparationSession; a call is one eager step.
"""

from __future__ import annotations

import tempfile

import torch

from flashinfer.experimental.b12x._demo import block as B
from flashinfer.experimental.b12x._demo import run as R


class PrefillStep:
    def __init__(self, spec, n: int, device: torch.device, seed: int = 0):
        from flashinfer.experimental.b12x.attention import paged
        from flashinfer.experimental.b12x.gemm import blockscaled as G
        from flashinfer.experimental.b12x.preparation.session import PreparationSession

        self.spec, self.n, self.dev, self.G, self.paged = spec, n, device, G, paged
        with tempfile.TemporaryDirectory(prefix="b12x-bench-prefill-") as tmp:
            built = R.build(spec, 1, device, seed, tmp, lens=[0])
        self.ref, self.weights, self.norms = built["ref"], built["weights"], built["norms"]
        ps, hq, hkv, d = spec.page_size, spec.q_heads, spec.kv_heads, spec.head_dim
        pages = -(-n // ps)
        perm = torch.randperm(pages, generator=torch.Generator().manual_seed(seed)).to(torch.int32)
        self.page_table = perm.reshape(1, pages).to(device)
        self.k_cache = torch.zeros(pages, ps, hkv, d, dtype=torch.bfloat16, device=device)
        self.v_cache = torch.zeros_like(self.k_cache)
        pos = torch.arange(n, device=device)
        self.slot_page = self.page_table[0, pos // ps].long()
        self.slot_off = pos % ps
        self.cos, self.sin = B.rope_tables(spec, pos)
        self.seqlens = torch.tensor([n], dtype=torch.int32, device=device)
        self.cu = torch.tensor([0, n], dtype=torch.int32, device=device)
        items = paged.default_max_work_items(1, hkv)
        caps = paged.Caps(
            device=str(device), mode="extend", dtype="bfloat16", kv_dtype="bfloat16", num_q_heads=hq,
            num_kv_heads=hkv, head_dim_qk=d, head_dim_vo=d, page_size=ps, max_total_q=n, max_batch=1,
            max_page_table_width=pages, max_work_items=items,
            max_partial_rows=paged.default_max_partial_rows(items, hq), num_cache_pages=pages,
        )  # fmt: skip
        self.plans = {"attention": paged.plan(caps)}
        for name, w in self.weights.items():
            self.plans[name] = G.plan(G.GemmQuery("bfloat16", w.recipe, w.n, w.k, max_m=n, m_values=(n,)))
        with PreparationSession(device) as session:
            session.prepare([p.request(name=f"prefill.{k}") for k, p in self.plans.items()])
        new = lambda *shape: torch.empty(*shape, dtype=torch.bfloat16, device=device)  # noqa: E731
        gen = torch.Generator().manual_seed(seed + 3)
        self.x = torch.randn(n, spec.hidden, generator=gen).to(torch.bfloat16).to(device)
        self.buf = {
            "h": new(n, spec.hidden), "qkv": new(n, (hq + 2 * hkv) * d), "q": new(n, hq, d),
            "attn": new(n, hq, d), "o": new(n, spec.hidden), "x1": new(n, spec.hidden), "h2": new(n, spec.hidden),
            "gu": new(n, 2 * spec.intermediate), "act": new(n, spec.intermediate), "down": new(n, spec.hidden),
            "out": new(n, spec.hidden),
        }  # fmt: skip
        self.binding = paged.bind(
            self.plans["attention"], q=self.buf["q"], k_cache=self.k_cache, v_cache=self.v_cache,
            page_table=self.page_table, cache_seqlens=self.seqlens, cu_seqlens_q=self.cu, output=self.buf["attn"],
        )  # fmt: skip
        wrap = (lambda f: torch.compile(f, dynamic=False)) if device.type == "cuda" else (lambda f: f)
        self.norm = wrap(R._rmsnorm_into)
        self.rope = wrap(R._rope_append_into)
        self.act = wrap(R._silu_mul_into)

    def _mm(self, name, lhs, dst):
        self.G.mm(lhs, self.weights[name], self.buf[dst], plan=self.plans[name])

    def __call__(self):
        s, b, n = self.spec, self.buf, self.n
        self.norm(self.x, self.norms["input_layernorm"], s.eps, b["h"])
        self._mm("qkv", b["h"], "qkv")
        self.rope(b["qkv"], self.cos, self.sin, b["q"], self.k_cache, self.v_cache, self.slot_page, self.slot_off,
                  s.q_heads, s.kv_heads, s.head_dim)  # fmt: skip
        self.paged.run(binding=self.binding)
        self._mm("o", b["attn"].view(n, -1), "o")
        self.norm(self.x, self.norms["post_attention_layernorm"], s.eps, b["h2"], b["o"], b["x1"])
        self._mm("gate_up", b["h2"], "gu")
        self.act(b["gu"], b["act"])
        self._mm("down", b["act"], "down")
        torch.add(b["x1"], b["down"], out=b["out"])

    def check(self, rows=(0, 1, None)) -> str:
        """Rows of one fresh step against the fp32 reference block (row i = a decode of token i over
        the reference's own K/V of tokens < i); returns a note, raises when a row disagrees."""
        for t in self.buf.values():
            t.fill_(float("nan"))
        self()
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)
        s, ref, n = self.spec, self.ref, self.n
        hq, hkv, d = s.q_heads, s.kv_heads, s.head_dim
        x = self.x.float().cpu()
        h = B.rms_norm(x, ref["input_layernorm"], s.eps)
        _, k, v = (h @ ref["qkv"].t()).split([hq * d, hkv * d, hkv * d], dim=-1)
        pos = torch.arange(n)
        cos, sin = B.rope_tables(s, pos)
        k = B.apply_rope(k.reshape(n, hkv, d), cos, sin)
        v = v.reshape(n, hkv, d)
        worst = 1.0
        for i in (r if r is not None else n - 1 for r in rows):
            want = B.reference_step(s, ref, x[i : i + 1], [k[:i]], [v[:i]], pos[i : i + 1])[0]
            got = self.buf["out"][i].float().cpu()
            cos_i = torch.nn.functional.cosine_similarity(got.double(), want.double(), dim=0).item()
            if not cos_i >= 0.999:
                raise AssertionError(f"prefill row {i}: cosine {cos_i:.6f} vs the fp32 reference block (< 0.999)")
            worst = min(worst, cos_i)
        return f"rows {list(rows)} vs fp32 reference: min cosine {worst:.6f}"
