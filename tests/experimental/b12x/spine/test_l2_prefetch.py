"""_lib.l2_prefetch on the CPU: the range table, argument errors, the grid choice, the kernel's item
arithmetic (emulated: every widened line once, in table order across the grid) and the CuTe kernel
compiled for sm_90a and sm_120a (one prefetch instruction in its loop, no stores, no spills)."""

import random
import re

import pytest
import torch

from flashinfer.experimental.b12x._lib import l2_prefetch as P

ARCHS = ("sm_90a", "sm_120a")
CONFIGS = {"line": P.PrefetchConfig(), "bulk": P.BULK}


def _weights(gen):
    """Tensors shaped like a block's weights (uint8 values, fp8 scales) plus a row slice and a bf16."""
    big = torch.randint(0, 256, (96, 64), dtype=torch.uint8, generator=gen)
    return [
        torch.randint(0, 256, (48, 64), dtype=torch.uint8, generator=gen),
        torch.randn(48, 8, generator=gen).to(torch.float8_e4m3fn),
        big[17:40],  # contiguous rows of a bigger tensor: its own data_ptr, not the base's
        torch.randn(3, 5, generator=gen).to(torch.bfloat16),
    ]


# ---- host record (CPU) ----------------------------------------------------------------------------


@pytest.mark.contract
def test_table_is_each_tensors_pointer_and_bytes_in_order():
    ts = _weights(torch.Generator().manual_seed(torch.seed()))
    pf = P.L2Prefetch.from_tensors(ts)
    want = [[t.data_ptr(), t.numel() * t.element_size()] for t in ts]
    assert pf.table.dtype == torch.int64 and pf.table.device.type == "cpu"
    assert pf.table.tolist() == want
    assert [list(r) for r in pf.ranges] == want
    assert want[2][0] == ts[2].untyped_storage().data_ptr() + 17 * 64  # the slice's own span
    assert pf.nbytes == sum(n for _, n in want) == 48 * 64 + 48 * 8 + 23 * 64 + 30
    reversed_pf = P.L2Prefetch.from_tensors(ts[::-1])  # nothing sorted or merged
    assert all(a is b for a, b in zip(reversed_pf._tensors, ts[::-1]))  # kept alive with the record
    assert reversed_pf.table.tolist() == want[::-1]


@pytest.mark.contract
def test_cpu_record_launches_nothing_and_side_branch_only_runs_the_body():
    pf = P.L2Prefetch.from_tensors([torch.ones(300, dtype=torch.uint8)])
    assert pf.ctas == 0 and pf.launch() is None
    ran = []
    with pf.side_branch(None):
        ran.append(1)
    assert ran == [1]
    assert "1 ranges, 300 bytes, line" in repr(pf)


@pytest.mark.contract
def test_bad_arguments_name_the_argument():
    t = torch.zeros(8, 8, dtype=torch.uint8)
    cases = [
        ([], r"tensors must be a non-empty list of tensors, got list"),
        (t, r"tensors must be a non-empty list of tensors, got Tensor"),
        ([t, 3], r"tensors\[1\] must be a torch.Tensor, got int"),
        ([t, t.t()], r"tensors\[1\] must be a contiguous non-empty tensor \(one byte span\), got uint8 \[8, 8\] "
                     r"on cpu \(non-contiguous\)"),
        ([torch.empty(0)], r"tensors\[0\] must be a contiguous non-empty tensor .* got float32 \[0\]"),
        ([torch.empty(4, device="meta")], r"tensors\[0\] must be on a CUDA device \(or CPU: a no-op\), got float32 \[4\] on meta"),
    ]  # fmt: skip
    for tensors, match in cases:
        with pytest.raises(ValueError, match=match):
            P.L2Prefetch.from_tensors(tensors)
    with pytest.raises(ValueError, match=r"tensors\[0\] must be on cuda like the others, got uint8 \[8, 8\] on cpu"):
        P.L2Prefetch.from_tensors([t], device="cuda")
    bad = {
        P.PrefetchConfig(mode="lines"): r"config.mode must be one of \('line', 'bulk'\), got 'lines'",
        P.PrefetchConfig(threads=48): r"config.threads must be a multiple of 32 in \[32, 1024\], got 48",
        P.PrefetchConfig("bulk", bulk_bytes=100): r"config.bulk_bytes must be a multiple of 128 .* got 100",
    }
    for config, match in bad.items():
        with pytest.raises(ValueError, match=match):
            P.L2Prefetch.from_tensors([t], config=config)
    assert P.why_not(P.PrefetchConfig(bulk_bytes=100)) is None  # bulk_bytes is unused by "line"
    with pytest.raises(ValueError, match="must be >= 1, got 0, 2, 132"):
        P.grid_ctas(100, 256, 132, 0)


@pytest.mark.contract
def test_grid_choice():
    lines = 25_400_000 // 128  # the llama-small block's weights
    assert P.grid_ctas(lines, 256, 132, P.ITEMS_PER_THREAD["line"]) == 97
    assert P.grid_ctas(25_400_000 // 4096, 64, 132, P.ITEMS_PER_THREAD["bulk"]) == 97
    assert P.grid_ctas(10**9, 256, 132, 8) == 2 * 132  # capped at CTAS_PER_SM per SM
    assert P.grid_ctas(10**9, 256, 132, 8, ctas_per_sm=1) == 132
    assert P.grid_ctas(1, 256, 132, 8) == 1


# ---- the kernel's arithmetic (emulated) -------------------------------------------------------------


def _expected_items(ranges, item):
    """Independently: each range's lines [floor(a/128), ceil((a+n)/128)) cut into `item` chunks."""
    out = []
    for a, n in ranges:
        if n <= 0:
            continue
        start, end = a - a % 128, -(-(a + n) // 128) * 128
        out += [(at, min(item, end - at)) for at in range(start, end, item)]
    return out


@pytest.mark.reference
@pytest.mark.parametrize("mode", sorted(CONFIGS))
@pytest.mark.parametrize("ctas", [1, 3, 7])
def test_emulated_kernel_issues_every_line_once_in_table_order(mode, ctas):
    config = P.PrefetchConfig(mode, threads=32, bulk_bytes=512) if mode == "bulk" else P.PrefetchConfig(threads=32)
    rng = random.Random(torch.seed())
    ranges = [(rng.randrange(0, 2**40), rng.choice([1, 2, 127, 128, 129, 1000, 5000, 40000])) for _ in range(9)]
    ranges.insert(3, (rng.randrange(0, 2**40), 0))  # an empty row issues nothing
    ranges.append((256, 128))  # an aligned line: exactly one item
    items = _expected_items(ranges, config.item_bytes)
    issued = P.emulate(ranges, ctas, config)
    g = ctas * config.threads
    assert len(issued) == g
    # item j of the concatenation is thread j % G's (j // G)-th: the grid's first wave asks for the
    # first G items, so the earliest ranges go first
    for j, item in enumerate(items):
        assert issued[j % g][j // g] == item, (j, item)
    assert sum(len(x) for x in issued) == len(items)
    assert sum(P.range_items(a, n, config.item_bytes) for a, n in ranges) == len(items)
    assert all(b % 128 == 0 and 0 < b <= config.item_bytes for x in issued for _, b in x)


# ---- compile (CPU) ---------------------------------------------------------------------------------


def _kernel_module():
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    from flashinfer.experimental.b12x._lib import _l2_prefetch_kernel

    return _l2_prefetch_kernel


PTX_OP = {"line": "prefetch.global.L2 [", "bulk": "cp.async.bulk.prefetch.L2.global ["}
SASS_OP = {"line": "CCTL.E.PF2", "bulk": "UBLKPF.L2"}


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", sorted(CONFIGS))
def test_kernel_compiles_to_one_prefetch_per_item_and_nothing_else(mode, arch, cuda_binary):
    k = _kernel_module()
    fn = k.compile_prefetch(CONFIGS[mode], arch=arch)
    ptx = fn.artifacts.PTX
    assert [line.split()[1] for line in ptx.splitlines() if line.startswith(".target")] == [arch]
    assert fn.artifacts.CUBIN[:4] == b"\x7fELF"
    assert ptx.count(PTX_OP[mode]) == 1 and ptx.count(PTX_OP["bulk" if mode == "line" else "line"]) == 0
    # fire and forget: the table's rows are the only loads, nothing is stored, no shared memory
    assert re.findall(r"\bld\.global\S*", ptx) == ["ld.global.v2.b64"]
    assert "st.global" not in ptx and ".shared" not in ptx
    sass = cuda_binary.sass(fn.artifacts.CUBIN)
    assert sass.count(SASS_OP[mode]) == 1, SASS_OP[mode]
    usage = cuda_binary.resources(fn.artifacts.CUBIN)
    assert usage["REG"] <= 32 and usage["STACK"] == usage["SHARED"] == usage["LOCAL"] == 0, usage


@pytest.mark.compile
def test_range_count_is_symbolic_and_the_key_is_the_config():
    k = _kernel_module()
    cfg = P.PrefetchConfig(threads=128)
    assert k.compile_prefetch.precompile(cfg, arch="sm_90a") == "compiled"
    assert k.compile_prefetch.precompile(cfg, arch="sm_90a") == "cached"
    fn = k.compile_prefetch(cfg, arch="sm_90a")  # the disk-loaded (callable) form
    # tvm-ffi checks the device first: a CPU call shows the signature without launching
    with pytest.raises(ValueError) as info:
        fn(torch.zeros(5, 2, dtype=torch.int64), 1)
    assert "mTable: Tensor([n0, 2], int64)" in str(info.value)
    assert "expected device_type=cuda" in str(info.value)
    with pytest.raises(ValueError, match="config.threads must be a multiple of 32"):
        k.compile_prefetch(P.PrefetchConfig(threads=40), arch="sm_90a")


# ---- the benchmark's CPU side ----------------------------------------------------------------------


@pytest.mark.contract
def test_bench_variants_and_spans():
    bench = pytest.importorskip("benchmarks.experimental.b12x.bench_l2_prefetch")
    assert bench.parse_variant("line:256:8") == (P.PrefetchConfig("line", 256), 8)
    assert bench.parse_variant("bulk:32:1:65536") == (P.PrefetchConfig("bulk", 32, 65536), 1)
    for v in bench.DEFAULT_VARIANTS:
        bench.parse_variant(v)
    with pytest.raises(ValueError, match="mode:threads:items_per_thread"):
        bench.parse_variant("line:256")
    with pytest.raises(ValueError, match="config.threads must be a multiple of 32"):
        bench.parse_variant("line:100:8")
    buf = torch.empty(25_362_432 // 4)  # the block's weight bytes (25.4 MB)
    spans = bench.block_spans(buf)
    assert [n for n, _ in spans][:2] == ["qkv.values", "qkv.scales"] and len(spans) == 8
    assert sum(t.numel() for _, t in spans) == buf.numel()
    for (_, a), (_, b) in zip(spans, spans[1:]):  # contiguous, in step order
        assert b.data_ptr() == a.data_ptr() + a.numel() * 4
