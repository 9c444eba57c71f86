"""moe.fused_moe expert GEMMs launched as programmatic dependents (`ExpertConfig.pdl`, sm_90+).

    "off"   a plain launch (the kernels as before).
    "wait"  launched with the programmatic-stream-serialization attribute (a programmatic edge under
            CUDA graph capture): the CTAs may become resident while the launch before still runs;
            each waits (griddepcontrol.wait: that launch complete, its writes visible) before its
            first read of anything the launches before write (expert_start, active, A, the alphas),
            then lets the next launch start (launch_dependents).

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

Removed in session 20: "ahead", in which an FC2 with weight prefetch stages read its rows (from the
routing, complete before FC1's CTAs passed their own wait) and issued its first weight stages before
its wait. Its bits equalled plain launches on the H200 (test_fused_moe_pdl_gpu, graph replay
included), but against "wait" in the same job (2026-12-02 14:17, f14a185, µs per layer, w4a16 /
nvfp4) it moved E = 128 T = 1 +0.2 / -0.6, T = 2 -1.4 / -1.3, T = 4 -0.6 / -0.3, and lost at T = 16
(+2.7 / +3.1) and T = 64 (+3.4 / +3.6); E = 256 / 512 T = 1 / 4 within +-2%. The rule written with
its prediction (at least 1 µs at E = 128 T = 1) removed it. What it says: an FC2 CTA resident during
FC1's tail gains little from loads issued before FC1 completes (they compete with FC1's own stream),
and with the identity grid the early CTAs' registers held across the wait cost more.
"""

PDL_MODES = ("off", "wait")
