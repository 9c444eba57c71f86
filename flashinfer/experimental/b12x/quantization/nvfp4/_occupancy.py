"""How many programs of a persistent NVFP4 grid one device holds at once (`NvFp4Config.persistent`).

A persistent program loops over a range of tiles (`_kernel_pairs.persistent_range`); one that is not
resident starts only when another has finished its whole range, so the grid must not exceed what the
SMs hold at once: the config's request, capped by threads, registers (allocated per warp in units of
256, i.e. per thread in multiples of 8) and shared memory of the compiled kernel.
"""

from __future__ import annotations


def programs_per_sm(
    requested: int,
    num_warps: int,
    n_regs: int,
    shared_bytes: int = 0,
    *,
    max_threads: int = 2048,
    regs_per_sm: int = 65536,
    shared_per_sm: int = 233472,
    max_blocks: int = 32,
) -> int:
    """min(requested, what fits on one SM), at least 1. Defaults: sm_90 (H100/H200)."""
    if requested < 1 or num_warps < 1:
        raise ValueError(f"requested={requested} and num_warps={num_warps} must be >= 1")
    threads = 32 * num_warps
    regs = (max(n_regs, 1) + 7) // 8 * 8
    fit = [requested, max_blocks, max_threads // threads, regs_per_sm // (regs * threads)]
    if shared_bytes:
        fit.append(shared_per_sm // (shared_bytes + 1024))  # 1 KB reserved per block
    return max(1, min(fit))


def resident_programs(config, fn, props, sms: int | None = None) -> int:
    """Programs of `config`'s persistent grid on a device with CUDA properties `props` (torch's), for the
    loaded CompiledKernel `fn` (its n_regs and metadata.shared); `sms` overrides the SM count."""
    per_sm = programs_per_sm(
        config.persistent,
        config.num_warps,
        int(getattr(fn, "n_regs", 0) or 0),
        int(getattr(getattr(fn, "metadata", None), "shared", 0) or 0),
        max_threads=getattr(props, "max_threads_per_multi_processor", 2048),
        regs_per_sm=getattr(props, "regs_per_multiprocessor", 65536),
        shared_per_sm=getattr(props, "shared_memory_per_multiprocessor", 233472),
    )
    return per_sm * (props.multi_processor_count if sms is None else sms)
