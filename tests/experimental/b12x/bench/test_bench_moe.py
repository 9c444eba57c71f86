"""bench_moe.py on the CPU: it imports, --help works, its argument parsing, byte/FLOP accounting,
routing and synthetic experts hold (the synthetic layer's output is O(1) and finite)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from b12x.moe import fused_moe as fm
from benchmarks.experimental.b12x import bench_moe as B
from flashinfer.experimental.b12x.moe.fused_moe import reference as R

pytestmark = pytest.mark.contract
ROOT = Path(__file__).resolve().parents[4]


def test_help_runs_without_cuda():
    out = subprocess.run([sys.executable, "-m", B.MODULE, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    for flag in ("--quick", "--json", "--timer", "--tokens", "--shapes", "--recipes", "--activation", "--no-peers"):
        assert flag in out.stdout


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--shapes", "128x8x2048"],
            "shape must be ExkxHxI with positive ints (e.g. 128x8x2048x768), got '128x8x2048'",
        ),
        (["--shapes", "4x8x64x32"], "shape '4x8x64x32': k = 8 routes per token exceed E = 4 experts"),
        (["--tokens", "0", "4"], "--tokens must be >= 1, got [0, 4]"),
        (["--pdl", "prefetch"], "argument --pdl: invalid choice: 'prefetch'"),  # api.PDL_MODES only
        (["--pdl", "wait:8"], "argument --pdl: invalid choice: 'wait:8'"),
        (["--combine-tile", "4x500"], "--combine-tile values must be powers of two, got '4x500'"),
        (["--combine-tile", "512"], "--combine-tile must look like 4x512 (tokens x columns), got '512'"),
    ],
)
def test_bad_arguments_exit_with_the_reason(argv, message):
    out = subprocess.run([sys.executable, "-m", B.MODULE, *argv], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_parse_shape_and_recipes():
    assert B.parse_shape("512X10x4096x1024") == (512, 10, 4096, 1024)
    assert [B.parse_shape(f"{e}x{k}x{h}x{i}") for e, k, h, i in B.SHAPES] == list(B.SHAPES)
    assert B.recipe_source("w4a16") == ("w4a16", "modelopt_nvfp4")
    assert B.recipe_source("w4a16_mxfp4") == ("w4a16", "fp4_e8m0_k32")
    assert B.recipe_source("w4a8_mx") == ("w4a8_mx", "fp4_e8m0_k32")
    with pytest.raises(ValueError, match="recipe must be one of"):
        B.recipe_source("fp8")


def test_bytes_and_flops():
    k, h, i = 8, 2048, 768
    # NVFP4: FC1 [1536, 2048] + FC2 [2048, 768], half a byte per value + one scale byte per 16
    per_expert = 1536 * 2048 // 2 + 1536 * 2048 // 16 + 2048 * 768 // 2 + 2048 * 768 // 16
    assert B.expert_bytes("nvfp4", h, i, "silu") == per_expert
    assert B.expert_bytes("mxfp4", h, i, "relu2") == 768 * 2048 * (1 / 2 + 1 / 32) + 2048 * 768 * (1 / 2 + 1 / 32)
    assert B.layer_bytes("nvfp4", 1, k, h, i, "silu", 8) == 8 * per_expert + 2 * 2048 * 2 + 8 * 8
    assert B.layer_flops(8, h, i, "silu") == 2 * 8 * (1536 * 2048 + 2048 * 768)
    assert B.layer_flops(8, h, i, "relu2") == 2 * 8 * (768 * 2048 + 2048 * 768)


def test_routing_is_distinct_and_counts_hit_experts():
    g = torch.Generator().manual_seed(0)
    ids, w = B.routing(64, 8, 128, g, "cpu")
    assert ids.dtype == torch.int32 and ids.shape == (64, 8) and w.dtype == torch.float32
    assert all(len(set(row.tolist())) == 8 for row in ids)
    torch.testing.assert_close(w.sum(-1), torch.ones(64))
    assert B.experts_hit(ids, 128) == len(set(ids.reshape(-1).tolist()))
    assert B.experts_hit(torch.tensor([[3, -1], [3, 200]]), 128) == 1


@pytest.mark.parametrize("recipe", ["nvfp4", "w4a16_mxfp4", "w4a8_nvfp4"])
def test_synthetic_experts_make_an_order_one_layer(recipe):
    mode, source = B.recipe_source(recipe)
    wplan = fm.plan_weights(
        quant_modes=mode, source_format=source, activation="silu", num_experts=4, hidden_size=256, intermediate_size=128
    )
    experts = fm.prepare_weights(plan=wplan, **B.synthetic_checkpoint(wplan, "cpu", torch.Generator().manual_seed(1)))
    g = torch.Generator().manual_seed(2)
    ids, w = B.routing(6, 2, 4, g, "cpu")
    a = torch.randn(6, 256, generator=g).bfloat16()
    out = R.fused_moe(a, experts, w, ids, quant_mode=mode).float()
    assert torch.isfinite(out).all() and 0.05 < out.std().item() < 20, out.std()


def test_grouped_mm_peer_computes_the_layer():
    """The bf16 peer (torch._grouped_mm, which torch also runs on the CPU) against a per-route loop."""
    wplan = fm.plan_weights(
        quant_modes="w4a16", source_format="modelopt_nvfp4", activation="silu", num_experts=8, hidden_size=64,
        intermediate_size=32,
    )  # fmt: skip
    g = torch.Generator().manual_seed(0)
    ids, w = B.routing(5, 2, 8, g, "cpu")
    a = torch.randn(5, 64, generator=g).bfloat16()
    layer = B.TorchLayer("bf16", wplan, ids, w, a, g)
    out = layer()
    ref = torch.zeros(5, 64)
    for t in range(5):
        for j in range(2):
            e = int(ids[t, j])
            h = (a[t].float() @ layer.w1t[e].float()).bfloat16().float()
            act = (torch.nn.functional.silu(h[:32]) * h[32:]).bfloat16().float()
            ref[t] += w[t, j] * (act @ layer.w2t[e].float()).bfloat16().float()
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)


def test_routing_sets_use_disjoint_experts():
    g = torch.Generator().manual_seed(3)
    sets = B.routing_sets(4, 8, 128, 5, g, "cpu")
    assert len(sets) == 5
    seen = [set(ids.reshape(-1).tolist()) for ids, _ in sets]
    for x in range(5):
        assert all(len(set(row.tolist())) == 8 for row in sets[x][0])
        for y in range(x + 1, 5):
            assert not seen[x] & seen[y]
    assert len(B.routing_sets(1, 8, 16, 9, g, "cpu")) == 2  # at most E // k groups


def test_rotation_sets_exceed_three_l2():
    per = B.expert_bytes("nvfp4", 2048, 768, "silu")
    n = B.rotation_sets("nvfp4", 1, 8, 128, 2048, 768, "silu")
    assert n * 8 * per >= 3 * 60 * 2**20 > (n - 1) * 8 * per  # T = 1 hits k experts per set
    assert B.rotation_sets("nvfp4", 4096, 8, 128, 2048, 768, "silu") == 1  # one call streams all weights


@pytest.mark.parametrize("timer", ["events", "graph"])
def test_run_shape_end_to_end_on_the_cpu(monkeypatch, capsys, timer):
    """The bench loop on a tiny shape with the CPU reference backend and CPU clocks: rows for ours
    and the peers that run here, ratios, routing-set rotation under the graph timer."""
    import argparse
    import warnings

    from benchmarks.experimental.b12x import common

    def cpu_measure(fn, args, **kwargs):
        return common.time_cpu(fn, warmup=0, iters=max(1, kwargs.get("calls_per_graph", 1)))

    monkeypatch.setattr(common, "measure", cpu_measure)
    monkeypatch.setattr(B, "rotation_sets", lambda *a, **k: 3)
    args = argparse.Namespace(activation="silu", timer=timer, no_peers=False)
    table = common.Table("cpu smoke", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        B.run_shape(table, args, (16, 2, 64, 32), (1, 3), ("nvfp4", "w4a16"), "cpu", torch.Generator().manual_seed(0))
    ours = [r for r in table.rows if not r.peer]
    assert [(r.impl, r.case.shape["T"]) for r in ours] == [
        ("b12x nvfp4", 1), ("b12x w4a16", 1), ("b12x nvfp4", 3), ("b12x w4a16", 3),
    ]  # fmt: skip
    assert all(r.case.shape["sets"] == (3 if timer == "graph" else 1) for r in ours)
    assert all("min row cos 1.000000" in r.note for r in ours)  # CPU: the op is the reference
    assert "grouped_mm bf16" in table.peers() and all(table.ratios(r) for r in ours)


@pytest.mark.parametrize("recipe", ["w4a16", "nvfp4"])
def test_sweep_rows_plan_their_buckets(recipe):
    """Every --expert-sweep row becomes a plan whose override carries that row's buckets (the 10:48
    H200 run crashed here: the prepared ExpertWeights had replaced the buckets argument), and the
    heuristic row stays the plain plan."""
    import argparse

    mode, source = B.recipe_source(recipe)
    wplan = fm.plan_weights(
        quant_modes=mode,
        source_format=source,
        activation="silu",
        num_experts=16,
        hidden_size=256,
        intermediate_size=128,
    )
    p = fm.plan(fm.Caps(max_tokens=64, num_topk=4, device="cpu", weight_plan=wplan, quant_mode=mode))
    from flashinfer.experimental.b12x.moe.fused_moe import api

    rows = B.expert_variants(argparse.Namespace(expert_sweep=[]), 16, 64)
    assert rows[0] == ("", None) and len(rows) > 2
    assert B.with_override(p, "sm_90a") is p
    for _, buckets in rows[1:]:
        planned = B.with_override(p, "sm_90a", None, buckets).override
        assert api.with_pdl(planned, "off").experts == buckets  # the row's tilings ...
        assert planned == api.with_pdl(planned, api.PDL)  # ... launched as the heuristic launches
    # --pdl: a twin of each row, planned with that mode
    twins = B.pdl_variants(argparse.Namespace(pdl=["off", "wait"]), rows[:2])
    assert [(label, b is buckets, m) for (label, b, m), (_, buckets) in zip(twins[::3], rows[:2])] == [
        ("", True, None),
        (rows[1][0], True, None),
    ]
    assert [label for label, _, _ in twins[:3]] == ["", " pdl-off", " pdl-wait"]
    wait = B.with_override(p, "sm_90a", pdl="wait").override
    assert wait.routing.pdl and wait.combine.pdl and all(b.tiled or b.fc2.pdl == "wait" for b in wait.experts)
    off = B.with_override(p, "sm_90a", pdl="off").override
    assert not off.routing.pdl and off == api.with_pdl(p.heuristic("sm_90a"), "off")
    for bad in ("prefetch", "prefetch:660", "wait:8", "on"):
        with pytest.raises(ValueError, match=r"pdl must be one of \('off', 'wait'\), got"):
            B.with_override(p, "sm_90a", pdl=bad)
    assert B.with_override(p, "sm_90a", compact_grid=False).override.routing.compact_grid is False
    searched = B.with_override(p, "sm_90a", gather_encode="search").override.routing
    assert searched.nvfp4_encode == "search" and p.heuristic("sm_90a").routing.nvfp4_encode == "pairs"


def test_combine_tile_reaches_the_plan():
    """--combine-tile BTxBH: parsed to (block_t, block_h) and planned as the combine's tile, the rest
    of the heuristic's config (and its PDL launches) unchanged."""
    import dataclasses

    from flashinfer.experimental.b12x.moe.fused_moe import api

    assert B.parse_combine_tile("1X128") == (1, 128)
    wplan = fm.plan_weights(
        quant_modes="w4a16", source_format="modelopt_nvfp4", activation="silu",
        num_experts=16, hidden_size=256, intermediate_size=128,
    )  # fmt: skip
    p = fm.plan(fm.Caps(max_tokens=64, num_topk=4, device="cpu", weight_plan=wplan, quant_mode="w4a16"))
    planned = B.with_override(p, "sm_90a", combine_tile=(1, 128)).override
    base = p.heuristic("sm_90a")
    assert (planned.combine.block_t, planned.combine.block_h) == (1, 128)
    assert dataclasses.replace(planned, combine=base.combine) == base and planned == api.with_pdl(planned, api.PDL)
