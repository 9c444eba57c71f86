"""moe.fused_moe expert GEMMs launched as programmatic dependents (`ExpertConfig.pdl`, sm_90+).

    "off"   a plain launch (the kernels as before).
    "wait"  launched with the programmatic-stream-serialization attribute (a programmatic edge under
            CUDA graph capture): the CTAs may become resident while the launch before still runs;
            each waits (griddepcontrol.wait: that launch complete, its writes visible) before its
            first read of anything the launches before write (expert_start, active, A, the alphas),
            then lets the next launch start (launch_dependents).
    "ahead" "wait", except that an FC2 with weight prefetch stages (prefetch > 0, span 1) reads its
            expert's rows (expert_start / active, written by the routing two or three launches
            back: complete once FC1's CTAs passed their own wait, which precedes FC2's launch) and
            issues its first group's weight stages (`ExpertConfig.early`) BEFORE the wait, so its
            first weight bytes stream while FC1 (or the requantize) still runs. FC1 is "wait".

Why: at decode sizes a layer is 4-5 dependent launches (docs/moe.md), each with a ramp (CTAs
launched, first loads in flight) and a drain (the last wave's stragglers) in which HBM idles. The
math is the kernel's own: the same bits as "off".

Measured (H200 2026-12-02, E = 128, docs/performance.md "Session 18"): "wait" 0.6-3.2 µs faster than
plain at T = 1..64 (the heuristic's mode, `api.PDL`).

Removed in session 19: a third mode, "prefetch", in which each identity-grid CTA (expert = CTA row,
known without the routing) issued `prefetch.global.L2` for its weight and scale lines before the
wait, every CTA or (`prefetch_ctas`) the first wave only. It lost 18-22 µs (every CTA) and 10-14 µs
(first wave, N = 330 / 660 / 1320) at T = 16 / 64 and gained nothing at T = 1 / 4
(docs/predictions/moe.md). The code is in git history before that session's commit removing it.
"ahead" (session 20) differs from it: FC2 only, the CTA's own rows only (never an expert without
rows), and register stages the K loop consumes, not L2 prefetches.
"""

PDL_MODES = ("off", "wait", "ahead")
