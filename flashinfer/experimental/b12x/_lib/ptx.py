"""`DEVICE`: the instruction set the CuTe DSL kernels of gemm, moe and the quantizers are written against, as
inline PTX (in `_lib` because three groups share it).

The kernels' per-thread logic (gemm's `dequant.py`, the `_logic` helpers of each kernel) calls these through
an `ops` object, so the same straight-line code also runs on numpy arrays in the tests' CPU emulator
(tests/experimental/b12x/gemm/emulator.py implements the same names with the PTX semantics).

Every instruction here exists on sm_89+ (so sm_90a and sm_120a): 128-bit global/shared accesses,
cp.async, ldmatrix, mma.sync m16n8k16 (bf16/f16 -> f32), fma.rn.{bf16x2,f16x2}, cvt e4m3x2 <-> f16x2/f32,
prmt, lop3; the packed bf16x2 compares (`h2_ge` / `h2_le`) and the bulk copies need sm_90. Predicated loads
return zeros when the predicate is off and touch no memory. Shared-memory
instructions are marked as having side effects so LLVM keeps them ordered with the CTA barriers.
"""

from __future__ import annotations

import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32, Int64, Uint32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

_MMA_TYPE = {"bfloat16": "bf16", "float16": "f16"}


def _iv(x, cls, loc, ip):
    return cls(x).ir_value(loc=loc, ip=ip)


def _asm(res, ins, text, cons, *, effects=False, loc=None, ip=None):
    return llvm.inline_asm(res, ins, text, cons, has_side_effects=effects, is_align_stack=False, loc=loc, ip=ip)


def _unpack(res, n, cls, ty, loc, ip):
    return tuple(cls(llvm.extractvalue(ty, res, [i], loc=loc, ip=ip)) for i in range(n))


def _asm_n(n, cls, ins, text, cons, *, effects=False, loc=None, ip=None):
    """Inline asm with n outputs of one register class (Uint32 in "r", Float32 in "f"), as a tuple of n values."""
    ty = T.f32() if cls is Float32 else T.i32()
    res = _asm(llvm.StructType.get_literal([ty] * n), ins, text, cons, effects=effects, loc=loc, ip=ip)
    return _unpack(res, n, cls, ty, loc, ip)


# Cache-hinted 128-bit loads (DecodeConfig.wcache / acache): the PTX of `ld.global.nc` with the hint.
LDG_HINTS = {
    "nc": "ld.global.nc.v4.u32",  # what ldg_v4 issues
    "na": "ld.global.nc.L1::no_allocate.v4.u32",  # streamed once: keep it out of L1
    "na256": "ld.global.nc.L1::no_allocate.L2::256B.v4.u32",  # + the L2 fetches the 256-byte block
    "el": "ld.global.nc.L1::evict_last.v4.u32",  # re-read by other CTAs of the SM: keep it in L1
    "ef": "ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32",  # + L2 evict-first policy (createpolicy)
}


@dsl_user_op
def _ldg_v4_hint(addr, pred, hint: str, *, loc=None, ip=None):
    op = LDG_HINTS[hint]
    if hint == "ef":
        pre = ".reg .b64 pol;\n\tcreatepolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
        load = f"@p {op} {{$0, $1, $2, $3}}, [$4], pol;"
    else:
        pre, load = "", f"@p {op} {{$0, $1, $2, $3}}, [$4];"
    text = (
        "{\n\t.reg .pred p;\n\t" + pre + "setp.ne.b32 p, $5, 0;\n\tmov.b32 $0, 0;\n\tmov.b32 $1, 0;\n\t"
        "mov.b32 $2, 0;\n\tmov.b32 $3, 0;\n\t" + load + "\n\t}"
    )
    ins = [_iv(addr, Int64, loc, ip), _iv(pred, Int32, loc, ip)]
    return _asm_n(4, Uint32, ins, text, "=r,=r,=r,=r,l,r", loc=loc, ip=ip)


@dsl_user_op
def _ldg_scalar(addr, pred, kind: str, *, loc=None, ip=None):
    ty, reg, cls = {
        "u8": (T.i32(), "r", Uint32),
        "u16": (T.i32(), "r", Uint32),
        "u32": (T.i32(), "r", Uint32),
        "f32": (T.f32(), "f", Float32),
    }[kind]
    zero = "0f00000000" if kind == "f32" else "0"
    res = _asm(
        ty,
        [_iv(addr, Int64, loc, ip), _iv(pred, Int32, loc, ip)],
        f"{{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $2, 0;\n\tmov.b32 $0, {zero};\n\t@p ld.global.nc.{kind} $0, [$1];\n\t}}",
        f"={reg},l,r",
        loc=loc,
        ip=ip,
    )
    return cls(res)


@dsl_user_op
def _stg(addr, value, pred, kind: str, *, loc=None, ip=None):
    reg, cls = {"u8": ("r", Uint32), "u16": ("r", Uint32), "u32": ("r", Uint32), "f32": ("f", Float32)}[kind]
    _asm(
        None,
        [_iv(addr, Int64, loc, ip), _iv(value, cls, loc, ip), _iv(pred, Int32, loc, ip)],
        f"{{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $2, 0;\n\t@p st.global.{kind} [$0], $1;\n\t}}",
        f"l,{reg},r",
        effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def _sts_v4(saddr, a, b, c, d, *, loc=None, ip=None):
    _asm(
        None,
        [_iv(saddr, Int32, loc, ip)] + [_iv(v, Uint32, loc, ip) for v in (a, b, c, d)],
        "st.shared.v4.u32 [$0], {$1, $2, $3, $4};",
        "r,r,r,r,r",
        effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def _lds_v4(saddr, *, loc=None, ip=None):
    text = "ld.shared.v4.u32 {$0, $1, $2, $3}, [$4];"
    return _asm_n(4, Uint32, [_iv(saddr, Int32, loc, ip)], text, "=r,=r,=r,=r,r", effects=True, loc=loc, ip=ip)


@dsl_user_op
def _stg_v4(addr, a, b, c, d, pred, *, loc=None, ip=None):
    _asm(
        None,
        [_iv(addr, Int64, loc, ip)] + [_iv(v, Uint32, loc, ip) for v in (a, b, c, d)] + [_iv(pred, Int32, loc, ip)],
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $5, 0;\n\t@p st.global.v4.u32 [$0], {$1, $2, $3, $4};\n\t}",
        "l,r,r,r,r,r",
        effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def _cp_async16(saddr, gaddr, pred, *, loc=None, ip=None):
    """16 bytes global -> shared without registers (sm_80+); pred off: the 16 bytes are zero-filled
    (src-size 0) and nothing is read."""
    _asm(
        None,
        [_iv(saddr, Int32, loc, ip), _iv(gaddr, Int64, loc, ip), _iv(pred, Int32, loc, ip)],
        "{\n\t.reg .pred p;\n\t.reg .b32 n;\n\tsetp.ne.b32 p, $2, 0;\n\tselp.b32 n, 16, 0, p;\n\t"
        "cp.async.cg.shared.global [$0], [$1], 16, n;\n\t}",
        "r,l,r",
        effects=True,
        loc=loc,
        ip=ip,
    )


# Bulk copies (sm_90+, so sm_90a and sm_120a): one instruction moves a contiguous global span into
# shared memory and signals an mbarrier with the bytes (the stream decode kernel's slab loads).
@dsl_user_op
def _mbar_init(saddr, pred, count: int, *, loc=None, ip=None):
    _asm(
        None,
        [_iv(saddr, Int32, loc, ip), _iv(pred, Int32, loc, ip)],
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $1, 0;\n\t"
        f"@p mbarrier.init.shared::cta.b64 [$0], {count};\n\t"
        "fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;\n\t}",
        "r,r",
        effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def _bulk_g2s(sdst, gsrc, nbytes: int, smbar, pred, *, loc=None, ip=None):
    _asm(
        None,
        [_iv(sdst, Int32, loc, ip), _iv(gsrc, Int64, loc, ip), _iv(smbar, Int32, loc, ip), _iv(pred, Int32, loc, ip)],
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $3, 0;\n\t"
        f"@p mbarrier.arrive.expect_tx.shared::cta.b64 _, [$2], {nbytes};\n\t"
        f"@p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], {nbytes}, [$2];\n\t}}",
        "r,l,r,r",
        effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def _mbar_wait(smbar, parity, *, loc=None, ip=None):
    _asm(
        None,
        [_iv(smbar, Int32, loc, ip), _iv(parity, Int32, loc, ip)],
        "{\n\t.reg .pred done;\n\tWAIT:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n\t@!done bra WAIT;\n\t}",
        "r,r",
        effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def _sync_warp(*, loc=None, ip=None):
    _asm(None, [_iv(0, Int32, loc, ip)], "bar.warp.sync -1; // $0", "r", effects=True, loc=loc, ip=ip)


@dsl_user_op
def _sts_f32(saddr, value, *, loc=None, ip=None):
    _asm(
        None,
        [_iv(saddr, Int32, loc, ip), _iv(value, Float32, loc, ip)],
        "st.shared.f32 [$0], $1;",
        "r,f",
        effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def _lds_f32(saddr, *, loc=None, ip=None):
    res = _asm(T.f32(), [_iv(saddr, Int32, loc, ip)], "ld.shared.f32 $0, [$1];", "=f,r", effects=True, loc=loc, ip=ip)
    return Float32(res)


@dsl_user_op
def _lds_f32_peer(saddr, rank, *, loc=None, ip=None):
    """The fp32 at shared::cta address `saddr`'s counterpart in cluster CTA `rank` (mapa, ld.shared::cluster)."""
    text = "{\n\t.reg .b32 ra;\n\tmapa.shared::cluster.u32 ra, $1, $2;\n\tld.shared::cluster.f32 $0, [ra];\n\t}"
    ins = [_iv(saddr, Int32, loc, ip), _iv(rank, Int32, loc, ip)]
    return Float32(_asm(T.f32(), ins, text, "=f,r,r", effects=True, loc=loc, ip=ip))


@dsl_user_op
def _ldmatrix_x4(saddr, *, loc=None, ip=None):
    text = "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {$0, $1, $2, $3}, [$4];"
    return _asm_n(4, Uint32, [_iv(saddr, Int32, loc, ip)], text, "=r,=r,=r,=r,r", effects=True, loc=loc, ip=ip)


def _mma_shape(shape: str, a, b, c, loc, ip):
    """One warp's mma.sync with fp32 accumulators: shape the PTX after `mma.sync.aligned.` up to the operands
    (A's four and B's two 32-bit registers, C's four floats; D's four floats back)."""
    ins = [_iv(x, Uint32, loc, ip) for x in (*a, *b)] + [_iv(x, Float32, loc, ip) for x in c]
    text = f"mma.sync.aligned.{shape} {{$0, $1, $2, $3}}, {{$4, $5, $6, $7}}, {{$8, $9}}, {{$10, $11, $12, $13}};"
    return _asm_n(4, Float32, ins, text, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", loc=loc, ip=ip)


@dsl_user_op
def _mma(dtype: str, a, b, c, *, loc=None, ip=None):
    t = _MMA_TYPE[dtype]
    return _mma_shape(f"m16n8k16.row.col.f32.{t}.{t}.f32", a, b, c, loc, ip)


@dsl_user_op
def _mma_fp8(a, b, c, *, loc=None, ip=None):
    return _mma_shape("m16n8k32.row.col.f32.e4m3.e4m3.f32", a, b, c, loc, ip)


@dsl_user_op
def _u32_op(text: str, *args, loc=None, ip=None):
    cons = "=r," + ",".join("r" for _ in args)
    return Uint32(_asm(T.i32(), [_iv(a, Uint32, loc, ip) for a in args], text, cons, loc=loc, ip=ip))


@dsl_user_op
def _f32_pair_from_u32(u, kind: str, *, loc=None, ip=None):
    if kind == "f16":
        text = "{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, $2;\n\tcvt.f32.f16 $0, lo;\n\tcvt.f32.f16 $1, hi;\n\t}"
    else:  # bf16: the 16 bits are the top of an fp32
        text = "{\n\t.reg .b32 t;\n\tshl.b32 t, $2, 16;\n\tmov.b32 $0, t;\n\tand.b32 t, $2, 0xffff0000;\n\tmov.b32 $1, t;\n\t}"
    return _asm_n(2, Float32, [_iv(u, Uint32, loc, ip)], text, "=f,=f,r", loc=loc, ip=ip)


@dsl_user_op
def _f32_pair_to_u32(lo, hi, kind: str, *, loc=None, ip=None):
    # cvt.rn.{bf16x2,f16x2}.f32 d, a, b puts a in the upper half and b in the lower half.
    text = f"cvt.rn.{kind}x2.f32 $0, $2, $1;"
    return Uint32(_asm(T.i32(), [_iv(lo, Float32, loc, ip), _iv(hi, Float32, loc, ip)], text, "=r,f,f", loc=loc, ip=ip))


@dsl_user_op
def _f32_pair_to_e4m3x2(lo, hi, *, loc=None, ip=None):
    text = "{\n\t.reg .b16 t;\n\tcvt.rn.satfinite.e4m3x2.f32 t, $2, $1;\n\tcvt.u32.u16 $0, t;\n\t}"
    return Uint32(_asm(T.i32(), [_iv(lo, Float32, loc, ip), _iv(hi, Float32, loc, ip)], text, "=r,f,f", loc=loc, ip=ip))


@dsl_user_op
def _f32_binop(text: str, a, b, *, loc=None, ip=None):
    return Float32(_asm(T.f32(), [_iv(a, Float32, loc, ip), _iv(b, Float32, loc, ip)], text, "=f,f,f", loc=loc, ip=ip))


@dsl_user_op
def _selp_f32(pred, a, b, *, loc=None, ip=None):
    return Float32(
        _asm(
            T.f32(),
            [_iv(a, Float32, loc, ip), _iv(b, Float32, loc, ip), _iv(pred, Int32, loc, ip)],
            "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $3, 0;\n\tselp.f32 $0, $1, $2, p;\n\t}",
            "=f,f,f,r",
            loc=loc,
            ip=ip,
        )
    )


@dsl_user_op
def _selp_u32(pred, a, b, *, loc=None, ip=None):
    ins = [_iv(a, Uint32, loc, ip), _iv(b, Uint32, loc, ip), _iv(pred, Int32, loc, ip)]
    text = "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $3, 0;\n\tselp.b32 $0, $1, $2, p;\n\t}"
    return Uint32(_asm(T.i32(), ins, text, "=r,r,r,r", loc=loc, ip=ip))


@dsl_user_op
def _i32_binop(text: str, a, b, *, loc=None, ip=None):
    return Int32(_asm(T.i32(), [_iv(a, Int32, loc, ip), _iv(b, Int32, loc, ip)], text, "=r,r,r", loc=loc, ip=ip))


@dsl_user_op
def _bits_f32(u, *, loc=None, ip=None):
    return Float32(llvm.bitcast(T.f32(), _iv(u, Uint32, loc, ip), loc=loc, ip=ip))


@dsl_user_op
def _f32_bits(x, *, loc=None, ip=None):
    return Uint32(llvm.bitcast(T.i32(), _iv(x, Float32, loc, ip), loc=loc, ip=ip))


@dsl_user_op
def _h2_op(text: str, *args, loc=None, ip=None):
    """A packed-half instruction `text` ($0 out, $1.. the words) on 32-bit registers."""
    return _u32_op(text, *args, loc=loc, ip=ip)


@dsl_user_op
def _f32_cmp_sel(op: str, a, b, x, y, *, loc=None, ip=None):
    ins = [_iv(a, Float32, loc, ip), _iv(b, Float32, loc, ip), _iv(x, Uint32, loc, ip), _iv(y, Uint32, loc, ip)]
    text = f"{{\n\t.reg .pred p;\n\tsetp.{op}.f32 p, $1, $2;\n\tselp.b32 $0, $3, $4, p;\n\t}}"
    return Uint32(_asm(T.i32(), ins, text, "=r,f,f,r,r", loc=loc, ip=ip))


@dsl_user_op
def _f32_to_half_rz(x, kind: str, *, loc=None, ip=None):
    text = f"{{\n\t.reg .b16 h;\n\tcvt.rz.{kind}.f32 h, $1;\n\tcvt.u32.u16 $0, h;\n\t}}"
    return Uint32(_asm(T.i32(), [_iv(x, Float32, loc, ip)], text, "=r,f", loc=loc, ip=ip))


@dsl_user_op
def _stg_v2(addr, a, b, pred, *, loc=None, ip=None):
    _asm(
        None,
        [_iv(addr, Int64, loc, ip), _iv(a, Uint32, loc, ip), _iv(b, Uint32, loc, ip), _iv(pred, Int32, loc, ip)],
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $3, 0;\n\t@p st.global.v2.u32 [$0], {$1, $2};\n\t}",
        "l,r,r,r",
        effects=True,
        loc=loc,
        ip=ip,
    )


class DeviceOps:
    """The PTX backend of the kernels' `ops` interface (the emulator mirrors every method)."""

    # conversions of index and register values
    u32 = staticmethod(lambda x: Uint32(x))
    i32 = staticmethod(lambda x: Int32(x))
    i64 = staticmethod(lambda x: Int64(x))
    f32 = staticmethod(lambda x: Float32(x))
    boolean = staticmethod(lambda x: Boolean(x))

    @staticmethod
    def f32_zero():
        return Float32(0.0)

    # global memory (read-only inputs: the non-coherent path)
    @staticmethod
    def ldg_v4(addr, pred):
        """Four 32-bit words at addr (16-byte aligned) through the non-coherent path; zeros where pred is off."""
        return _ldg_v4_hint(addr, pred, "nc")

    @staticmethod
    def ldg_v4_hint(addr, pred, hint: str):
        """ldg_v4 with a cache hint, one of LDG_HINTS ("nc" is ldg_v4's own load)."""
        return _ldg_v4_hint(addr, pred, hint)

    @staticmethod
    def ldg_u8(addr, pred):
        return _ldg_scalar(addr, pred, "u8")

    @staticmethod
    def ldg_u16(addr, pred):
        return _ldg_scalar(addr, pred, "u16")

    @staticmethod
    def ldg_u32(addr, pred):
        return _ldg_scalar(addr, pred, "u32")

    @staticmethod
    def ldg_f32(addr, pred):
        return _ldg_scalar(addr, pred, "f32")

    @staticmethod
    def stg_u8(addr, value, pred):
        _stg(addr, value, pred, "u8")

    @staticmethod
    def stg_u16(addr, value, pred):
        _stg(addr, value, pred, "u16")

    @staticmethod
    def stg_u32(addr, value, pred):
        _stg(addr, value, pred, "u32")

    @staticmethod
    def stg_f32(addr, value, pred):
        _stg(addr, value, pred, "f32")

    stg_v4 = staticmethod(_stg_v4)

    # asynchronous copies: cp_async16(saddr, gaddr, pred) (zero-fill when pred is off), then one
    # commit per group; cp_async_wait(n) waits until at most n of this thread's groups are in flight
    cp_async16 = staticmethod(_cp_async16)

    @staticmethod
    def cp_async_commit():
        cute.arch.cp_async_commit_group()

    @staticmethod
    def cp_async_wait(n: int):
        cute.arch.cp_async_wait_group(n)

    # shared memory
    sts_v4 = staticmethod(_sts_v4)
    lds_v4 = staticmethod(_lds_v4)
    sts_f32 = staticmethod(_sts_f32)
    lds_f32 = staticmethod(_lds_f32)
    # clusters (sm_90+): lds_f32_peer(saddr, rank) reads cluster CTA `rank`'s shared memory at the same offset;
    # cluster_sync() is barrier.cluster.arrive (release) + wait (acquire) over every thread of the cluster
    lds_f32_peer = staticmethod(_lds_f32_peer)

    @staticmethod
    def cluster_sync():
        cute.arch.cluster_arrive()
        cute.arch.cluster_wait()

    ldmatrix_x4 = staticmethod(_ldmatrix_x4)
    # bulk copies: mbar_init(saddr, pred, count) (lanes with pred init; then the init fences);
    # bulk_g2s(sdst, gsrc, nbytes, smbar, pred): expect nbytes on the mbarrier and start the copy;
    # mbar_wait(smbar, parity) spins until the phase of that parity completed; sync_warp() orders the
    # warp's shared reads before a lane's next copy into the same buffer
    mbar_init = staticmethod(_mbar_init)
    bulk_g2s = staticmethod(_bulk_g2s)
    mbar_wait = staticmethod(_mbar_wait)
    sync_warp = staticmethod(_sync_warp)

    # tensor cores: (a0..a3), (b0, b1), (c0..c3) -> (d0..d3); fragments as in the PTX ISA
    mma = staticmethod(_mma)
    # m16n8k32 e4m3: A register r = 4 bytes of row g (+8 for r odd), k 4t.. (+16 for r >= 2);
    # B register r = 4 bytes k 4t.. (+16 for r = 1) of column g
    mma_fp8 = staticmethod(_mma_fp8)

    # bit and packed-float work
    @staticmethod
    def prmt(a, b, selector: int):
        return _u32_op(f"prmt.b32 $0, $1, $2, {selector:#x};", a, b)

    @staticmethod
    def prmt_r(a, b, selector):
        """prmt with the selector in a register (its four nibbles 0..7: plain byte selects)."""
        return _u32_op("prmt.b32 $0, $1, $2, $3;", a, b, selector)

    @staticmethod
    def mul_lo(a, k: int):
        """The low 32 bits of a * k (k a constant): one IMAD, opaque to LLVM (no rewrite into shifts)."""
        return _u32_op(f"mul.lo.u32 $0, $1, {k:#x};", a)

    @staticmethod
    def hmul2(dtype: str, a, b):
        """Packed multiply, exact when the product is representable: fma(a, b, -0) keeps -0 too."""
        t = _MMA_TYPE[dtype]
        text = f"{{\n\t.reg .b32 z;\n\tmov.b32 z, 0x80008000;\n\tfma.rn.{t}x2 $0, $1, $2, z;\n\t}}"
        return _u32_op(text, a, b)

    @staticmethod
    def e4m3x2_to_f16x2(u):
        """Bytes 0-1 of u (two E4M3) -> f16x2 (byte 0 in the low half), exact."""
        text = "{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, $1;\n\tcvt.rn.f16x2.e4m3x2 $0, lo;\n\t}"
        return _u32_op(text, u)

    @staticmethod
    def half2_to_f32(kind: str, u):
        """(lo, hi) fp32 of a bf16x2 / f16x2 register; kind "bfloat16" or "float16"."""
        return _f32_pair_from_u32(u, _MMA_TYPE[kind])

    @staticmethod
    def f32_to_half2(kind: str, lo, hi):
        """Round two fp32 to a bf16x2 / f16x2 register (lo in the low half)."""
        return _f32_pair_to_u32(lo, hi, _MMA_TYPE[kind])

    f32_to_e4m3x2 = staticmethod(_f32_pair_to_e4m3x2)
    bits_f32 = staticmethod(_bits_f32)
    f32_bits = staticmethod(_f32_bits)

    # packed halves (kind "bfloat16" / "float16"; sm_90+ for the bf16x2 compares): abs, max (a NaN half
    # loses to a number), and compares giving 0xFFFF / 0 per half (false for NaN)
    @staticmethod
    def h2_abs(kind: str, u):
        return _h2_op(f"abs.{_MMA_TYPE[kind]}x2 $0, $1;", u)

    @staticmethod
    def h2_max(kind: str, a, b):
        return _h2_op(f"max.{_MMA_TYPE[kind]}x2 $0, $1, $2;", a, b)

    @staticmethod
    def h2_ge(kind: str, a, b):
        return _h2_op(f"set.ge.u32.{_MMA_TYPE[kind]}x2 $0, $1, $2;", a, b)

    @staticmethod
    def h2_le(kind: str, a, b):
        return _h2_op(f"set.le.u32.{_MMA_TYPE[kind]}x2 $0, $1, $2;", a, b)

    @staticmethod
    def bitsel(m, a, b):
        """Bits of a where m is set, of b elsewhere (one lop3)."""
        return _u32_op("lop3.b32 $0, $1, $2, $3, 0xCA;", m, a, b)

    @staticmethod
    def half_rz(kind: str, x):
        """fp32 x rounded toward zero to a half (its bits in the low 16; overflow gives the largest finite)."""
        return _f32_to_half_rz(x, _MMA_TYPE[kind])

    @staticmethod
    def fmul(a, b):
        """IEEE fp32 product (mul.rn: never contracted into an fma, no flush of subnormals)."""
        return _f32_binop("mul.rn.f32 $0, $1, $2;", a, b)

    @staticmethod
    def fmin(a, b):
        return _f32_binop("min.f32 $0, $1, $2;", a, b)

    @staticmethod
    def select_u32(pred, a, b):
        """pred ? a : b for 32-bit a, b, without a branch."""
        return _selp_u32(pred, a, b)

    @staticmethod
    def cmp_sel(op: str, a, b, x, y):
        """(fp32 a `op` b) ? x : y for 32-bit x, y; op "gt" / "ge" / "eq" (false for NaN)."""
        return _f32_cmp_sel(op, a, b, x, y)

    stg_v2 = staticmethod(_stg_v2)

    @staticmethod
    def div_rn(a, b):
        """IEEE fp32 division (never the approximate one fast-math would emit)."""
        return _f32_binop("div.rn.f32 $0, $1, $2;", a, b)

    @staticmethod
    def fmax(a, b):
        return _f32_binop("max.f32 $0, $1, $2;", a, b)

    @staticmethod
    def select_f32(pred, a, b):
        """pred ? a : b, without a branch."""
        return _selp_f32(pred, a, b)

    @staticmethod
    def imin(a, b):
        return _i32_binop("min.s32 $0, $1, $2;", a, b)

    @staticmethod
    def imax(a, b):
        return _i32_binop("max.s32 $0, $1, $2;", a, b)

    @staticmethod
    def shfl_xor(x, mask: int):
        return cute.arch.shuffle_sync_bfly(x, offset=mask)

    @staticmethod
    def barrier():
        cute.arch.sync_threads()

    @staticmethod
    def bar_sync(barrier_id, threads: int):
        """Named barrier `barrier_id` (1..15; 0 is barrier()) over `threads` threads (whole warps)."""
        cute.arch.barrier(barrier_id=barrier_id, number_of_threads=threads)

    # programmatic dependent launch (a kernel launched with use_pdl): griddepcontrol.wait returns once
    # the stream's previous kernel has completed and its writes are visible; launch_dependents lets the
    # next PDL kernel launch its CTAs (which wait likewise)
    @staticmethod
    def gdc_wait():
        cute.arch.griddepcontrol_wait()

    @staticmethod
    def gdc_launch_dependents():
        cute.arch.griddepcontrol_launch_dependents()

    def gdc_enter(self):
        """The wait, then the release: for a PDL kernel before its first global access (the CuTe twin
        of `_lib.triton_pdl.gdc_enter`)."""
        self.gdc_wait()
        self.gdc_launch_dependents()


DEVICE = DeviceOps()

__all__ = ["DEVICE", "LDG_HINTS", "DeviceOps"]
