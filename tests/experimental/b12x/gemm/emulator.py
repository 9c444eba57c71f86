"""A CPU emulator of the PTX the GEMM kernels use, so their per-thread logic runs in the tests.

`EmuOps` implements the `ops` interface of `_lib/ptx.py` on numpy arrays holding one value per
lane of a warp (shape [32]); the kernels' shared logic (`dequant.py`, each kernel's `_logic` helpers)
runs on it unchanged. Semantics follow the PTX ISA: mma.sync m16n8k16 fragments, ldmatrix x4,
prmt, fma.rn on packed halves, cvt with round-to-nearest-even. Memory accesses of active lanes are
bounds- and alignment-checked (a kernel reading outside its tensors fails here); predicated-off
lanes touch nothing and read zeros.
"""

from __future__ import annotations

import numpy as np
import torch

from flashinfer.experimental.b12x._lib.quant import e4m3_encode

LANES = 32
_BYTE16 = np.arange(16)
_T = np.arange(LANES)
_G, _Q = _T // 4, _T % 4
# mma.m16n8k16 fragments (PTX ISA): A register r holds (row, col) and (row, col + 1)
_A_ROW = (_G, _G + 8, _G, _G + 8)
_A_COL = (2 * _Q, 2 * _Q, 2 * _Q + 8, 2 * _Q + 8)
_B_K = (2 * _Q, 2 * _Q + 8)  # B register r holds (k, n = g) and (k + 1, g)
_C_ROW = (_G, _G, _G + 8, _G + 8)
_C_COL = (2 * _Q, 2 * _Q + 1, 2 * _Q, 2 * _Q + 1)


def _u32(x):
    return (np.asarray(x).astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)


class GlobalMemory:
    """Tensors placed at fake device addresses (4 KiB apart); loads and stores are checked."""

    def __init__(self) -> None:
        self.buffers: list[tuple[int, np.ndarray]] = []
        self.next = 1 << 20

    def put(self, t: torch.Tensor) -> int:
        data = t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().copy()
        base = self.next
        self.buffers.append((base, data))
        self.next = base + ((data.size + 4095) // 4096 + 1) * 4096
        return base

    def get(self, base: int) -> np.ndarray:
        for b, data in self.buffers:
            if b == base:
                return data
        raise KeyError(base)

    def _find(self, addr: int, size: int) -> tuple[np.ndarray, int]:
        for b, data in self.buffers:
            if b <= addr and addr + size <= b + data.size:
                return data, addr - b
        raise AssertionError(f"global access of {size} bytes at {addr:#x} is outside every tensor")

    def read(self, addr: int, size: int) -> bytes:
        assert addr % size == 0, f"misaligned {size}-byte global load at {addr:#x}"
        data, off = self._find(addr, size)
        return data[off : off + size].tobytes()

    def write(self, addr: int, raw: bytes) -> None:
        assert addr % len(raw) == 0, f"misaligned {len(raw)}-byte global store at {addr:#x}"
        data, off = self._find(addr, len(raw))
        data[off : off + len(raw)] = np.frombuffer(raw, dtype=np.uint8)


def _bf16_to_f32(bits):
    return (_u32(bits) << np.uint32(16)).view(np.float32)


def _f32_to_bf16(x):
    t = torch.from_numpy(np.asarray(x, dtype=np.float32).copy()).to(torch.bfloat16)
    return t.view(torch.int16).numpy().astype(np.int64) & 0xFFFF


def _f16_to_f32(bits):
    return (np.asarray(bits).astype(np.uint16)).view(np.float16).astype(np.float32)


def _f32_to_f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16).astype(np.int64)


def half_to_f32(kind: str, bits):
    return _bf16_to_f32(bits) if kind == "bfloat16" else _f16_to_f32(bits)


def f32_to_half(kind: str, x):
    return _f32_to_bf16(x) if kind == "bfloat16" else _f32_to_f16(x)


class EmuOps:
    """One warp's view of the machine. `pred` arguments are per-lane booleans."""

    def __init__(self, gmem: GlobalMemory, smem: np.ndarray | None = None, peers=None) -> None:
        self.g = gmem
        self.smem = smem
        self.peers = peers  # a cluster's shared memories by rank (lds_f32_peer)
        self.lane = np.arange(LANES)

    # conversions
    def u32(self, x):
        return _u32(np.broadcast_to(np.asarray(x), (LANES,)))

    def i32(self, x):
        return np.broadcast_to(np.asarray(x), (LANES,)).astype(np.int32)

    def i64(self, x):
        return np.broadcast_to(np.asarray(x), (LANES,)).astype(np.int64)

    def f32(self, x):
        return np.broadcast_to(np.asarray(x, dtype=np.float32), (LANES,)).copy()

    def boolean(self, x):
        return np.broadcast_to(np.asarray(x, dtype=bool), (LANES,))

    def f32_zero(self):
        return np.zeros(LANES, dtype=np.float32)

    # global memory
    def _lanes(self, pred):
        return np.nonzero(np.broadcast_to(np.asarray(pred, dtype=bool), (LANES,)))[0]

    def ldg_v4(self, addr, pred):
        addr = self.i64(addr)
        out = np.zeros((4, LANES), dtype=np.uint32)
        for ln in self._lanes(pred):
            out[:, ln] = np.frombuffer(self.g.read(int(addr[ln]), 16), dtype=np.uint32)
        return tuple(out)

    def ldg_v4_hint(self, addr, pred, hint: str):
        """ldg_v4 with a cache hint (hints change caching, never the values loaded)."""
        from flashinfer.experimental.b12x._lib.ptx import LDG_HINTS

        assert hint in LDG_HINTS, hint
        return self.ldg_v4(addr, pred)

    def _ldg(self, addr, pred, size, np_dtype):
        addr = self.i64(addr)
        out = np.zeros(LANES, dtype=np_dtype)
        for ln in self._lanes(pred):
            out[ln] = np.frombuffer(self.g.read(int(addr[ln]), size), dtype=np_dtype)[0]
        return out

    def ldg_u8(self, addr, pred):
        return self._ldg(addr, pred, 1, np.uint8).astype(np.uint32)

    def ldg_u16(self, addr, pred):
        return self._ldg(addr, pred, 2, np.uint16).astype(np.uint32)

    def ldg_u32(self, addr, pred):
        return self._ldg(addr, pred, 4, np.uint32)

    def ldg_f32(self, addr, pred):
        return self._ldg(addr, pred, 4, np.float32)

    def _stg(self, addr, raw_per_lane, pred):
        addr = self.i64(addr)
        for ln in self._lanes(pred):
            self.g.write(int(addr[ln]), raw_per_lane[ln])

    def stg_u8(self, addr, value, pred):
        v = self.u32(value).astype(np.uint8)
        self._stg(addr, [x.tobytes() for x in v], pred)

    def stg_u16(self, addr, value, pred):
        v = self.u32(value).astype(np.uint16)
        self._stg(addr, [x.tobytes() for x in v], pred)

    def stg_u32(self, addr, value, pred):
        v = self.u32(value)
        self._stg(addr, [x.tobytes() for x in v], pred)

    def stg_f32(self, addr, value, pred):
        v = self.f32(value)
        self._stg(addr, [x.tobytes() for x in v], pred)

    def stg_v2(self, addr, a, b, pred):
        words = np.stack([self.u32(v) for v in (a, b)], axis=1)  # [lanes, 2]
        self._stg(addr, [w.tobytes() for w in words], pred)

    def stg_v4(self, addr, a, b, c, d, pred):
        words = np.stack([self.u32(v) for v in (a, b, c, d)], axis=1)  # [lanes, 4]
        self._stg(addr, [w.tobytes() for w in words], pred)

    def cp_async16(self, saddr, gaddr, pred):
        """Immediate in the emulator (the drivers run the phases between barriers in order)."""
        saddr, gaddr = self._s(saddr, 16), self.i64(gaddr)
        on = np.broadcast_to(np.asarray(pred, dtype=bool), (LANES,))
        for ln in range(LANES):
            raw = self.g.read(int(gaddr[ln]), 16) if on[ln] else bytes(16)
            self.smem[saddr[ln] + _BYTE16] = np.frombuffer(raw, dtype=np.uint8)

    def cp_async_commit(self):
        pass

    def cp_async_wait(self, n: int):
        pass

    # shared memory
    def _s(self, saddr, size):
        saddr = self.i64(saddr)
        assert (saddr % size == 0).all(), f"misaligned {size}-byte shared access"
        assert (saddr >= 0).all() and (saddr + size <= self.smem.size).all(), "shared access out of bounds"
        return saddr

    def sts_v4(self, saddr, a, b, c, d):
        saddr = self._s(saddr, 16)
        words = np.stack([self.u32(v) for v in (a, b, c, d)], axis=1)  # [lanes, 4]
        self.smem[saddr[:, None] + _BYTE16[None, :]] = words.view(np.uint8).reshape(LANES, 16)

    def lds_v4(self, saddr):
        saddr = self._s(saddr, 16)
        raw = self.smem[saddr[:, None] + _BYTE16[None, :]].copy()
        return tuple(raw.view(np.uint32).T.copy())

    def sts_f32(self, saddr, value):
        saddr = self._s(saddr, 4)
        self.smem[saddr[:, None] + _BYTE16[None, :4]] = self.f32(value).view(np.uint8).reshape(LANES, 4)

    def lds_f32(self, saddr):
        saddr = self._s(saddr, 4)
        return self.smem[saddr[:, None] + _BYTE16[None, :4]].copy().view(np.float32).reshape(LANES)

    def lds_f32_peer(self, saddr, rank: int):
        return EmuOps(self.g, self.peers[int(rank)]).lds_f32(saddr)

    def cluster_sync(self):  # the drivers run every CTA of a cluster up to it before any goes past it
        pass

    def ldmatrix_x4(self, saddr):
        """Lanes 8i..8i+7 give the 16-byte rows of matrix i; lane t gets word t%4 of row t//4."""
        saddr = self._s(saddr, 16)
        out = []
        for i in range(4):
            rows = saddr[8 * i + self.lane // 4] + 4 * (self.lane % 4)
            out.append(self.smem[rows[:, None] + _BYTE16[None, :4]].copy().view(np.uint32).reshape(LANES))
        return tuple(out)

    # tensor cores
    def mma(self, dtype, a, b, c):
        """mma.sync.m16n8k16.row.col f32 <- {bf16,f16} with the PTX ISA fragment layouts."""
        a_vals = [half_to_f32(dtype, self.u32(x) & 0xFFFF) for x in a] + [
            half_to_f32(dtype, self.u32(x) >> 16) for x in a
        ]
        b_vals = [half_to_f32(dtype, self.u32(x) & 0xFFFF) for x in b] + [
            half_to_f32(dtype, self.u32(x) >> 16) for x in b
        ]
        A = np.zeros((16, 16))
        B = np.zeros((16, 8))
        C = np.zeros((16, 8))
        for r in range(4):
            A[_A_ROW[r], _A_COL[r]] = a_vals[r]
            A[_A_ROW[r], _A_COL[r] + 1] = a_vals[4 + r]
        for r in range(2):
            B[_B_K[r], _G] = b_vals[r]
            B[_B_K[r] + 1, _G] = b_vals[2 + r]
        for r in range(4):
            C[_C_ROW[r], _C_COL[r]] = np.asarray(c[r], dtype=np.float64)
        D = (A @ B + C).astype(np.float32)
        return tuple(D[_C_ROW[r], _C_COL[r]].copy() for r in range(4))

    def mma_fp8(self, a, b, c):
        """mma.sync.m16n8k32.row.col f32 <- e4m3 (PTX ISA fragments: 4 bytes per register)."""

        def bytes_of(reg):
            raw = self.u32(reg).view(np.uint8).reshape(LANES, 4)
            return torch.from_numpy(raw.copy()).view(torch.float8_e4m3fn).float().numpy().astype(np.float64)

        A = np.zeros((16, 32))
        B = np.zeros((32, 8))
        C = np.zeros((16, 8))
        for r in range(4):
            vals = bytes_of(a[r])
            row = _G + 8 * (r & 1)
            for j in range(4):
                A[row, 4 * _Q + 16 * (r >> 1) + j] = vals[:, j]
        for r in range(2):
            vals = bytes_of(b[r])
            for j in range(4):
                B[4 * _Q + 16 * r + j, _G] = vals[:, j]
        for r in range(4):
            C[_C_ROW[r], _C_COL[r]] = np.asarray(c[r], dtype=np.float64)
        D = (A @ B + C).astype(np.float32)
        return tuple(D[_C_ROW[r], _C_COL[r]].copy() for r in range(4))

    # bits and packed floats
    def prmt(self, a, b, selector: int):
        a, b = self.u32(a).astype(np.uint64), self.u32(b).astype(np.uint64)
        pool = a | (b << np.uint64(32))
        out = np.zeros(LANES, dtype=np.uint64)
        for i in range(4):
            sel = (selector >> (4 * i)) & 0xF
            assert sel < 8, "sign-replicating prmt modes are not used by the kernels"
            out |= ((pool >> np.uint64(8 * sel)) & np.uint64(0xFF)) << np.uint64(8 * i)
        return out.astype(np.uint32)

    def prmt_r(self, a, b, selector):
        """prmt with a per-lane selector register (nibbles 0..7 only, as the kernels use it)."""
        a, b = self.u32(a).astype(np.uint64), self.u32(b).astype(np.uint64)
        pool, sel = a | (b << np.uint64(32)), self.u32(selector).astype(np.uint64)
        out = np.zeros(LANES, dtype=np.uint64)
        for i in range(4):
            s = (sel >> np.uint64(4 * i)) & np.uint64(0xF)
            assert (s < 8).all(), "sign-replicating prmt modes are not used by the kernels"
            out |= ((pool >> (np.uint64(8) * s)) & np.uint64(0xFF)) << np.uint64(8 * i)
        return out.astype(np.uint32)

    def mul_lo(self, a, k: int):
        return self.u32((self.u32(a).astype(np.uint64) * np.uint64(k)) & np.uint64(0xFFFFFFFF))

    def hmul2(self, dtype, a, b):
        a, b = self.u32(a), self.u32(b)
        halves = []
        for sh in (0, 16):
            x = half_to_f32(dtype, (a >> sh) & 0xFFFF).astype(np.float64)
            y = half_to_f32(dtype, (b >> sh) & 0xFFFF).astype(np.float64)
            p = x * y + (-0.0)
            halves.append(f32_to_half(dtype, p.astype(np.float32)))  # the product is exact in fp32
        return _u32(halves[0] | (halves[1] << 16))

    def e4m3x2_to_f16x2(self, u):
        u = self.u32(u)
        lo = torch.from_numpy((u & 0xFF).astype(np.uint8)).view(torch.float8_e4m3fn).to(torch.float16)
        hi = torch.from_numpy(((u >> 8) & 0xFF).astype(np.uint8)).view(torch.float8_e4m3fn).to(torch.float16)
        lo = lo.view(torch.int16).numpy().astype(np.int64) & 0xFFFF
        hi = hi.view(torch.int16).numpy().astype(np.int64) & 0xFFFF
        return _u32(lo | (hi << 16))

    def half2_to_f32(self, kind, u):
        u = self.u32(u)
        return half_to_f32(kind, u & 0xFFFF), half_to_f32(kind, u >> 16)

    def f32_to_half2(self, kind, lo, hi):
        return _u32(f32_to_half(kind, self.f32(lo)) | (f32_to_half(kind, self.f32(hi)) << 16))

    def f32_to_e4m3x2(self, lo, hi):
        enc = lambda v: e4m3_encode(torch.from_numpy(self.f32(v))).view(torch.uint8).numpy().astype(np.int64)  # noqa: E731
        return _u32(enc(lo) | (enc(hi) << 8))

    def bits_f32(self, u):
        return self.u32(u).view(np.float32)

    def f32_bits(self, x):
        return self.f32(x).view(np.uint32)

    # packed halves (half_to_f32 is exact, so each compare is the halves' own)
    def _half(self, kind, u, shift):
        return half_to_f32(kind, (self.u32(u) >> np.uint32(shift)) & np.uint32(0xFFFF))

    def _h2_mask(self, kind, a, b, cmp):
        out = np.zeros(LANES, dtype=np.uint32)
        for sh in (0, 16):
            out |= np.where(cmp(self._half(kind, a, sh), self._half(kind, b, sh)), 0xFFFF, 0).astype(np.uint32) << sh
        return out

    def h2_abs(self, kind, u):
        return self.u32(u) & np.uint32(0x7FFF7FFF)

    def h2_max(self, kind, a, b):
        """max.{bf16,f16}x2: a NaN half loses to a number; two NaN give the canonical NaN."""
        out = np.zeros(LANES, dtype=np.uint32)
        for sh in (0, 16):
            fa, fb = self._half(kind, a, sh), self._half(kind, b, sh)
            ha, hb = (self.u32(a) >> sh) & 0xFFFF, (self.u32(b) >> sh) & 0xFFFF
            res = np.where(np.isnan(fb) | (fa >= fb), ha, hb)
            out |= np.where(np.isnan(fa) & np.isnan(fb), 0x7FFF, res).astype(np.uint32) << sh
        return out

    def h2_ge(self, kind, a, b):
        return self._h2_mask(kind, a, b, np.greater_equal)

    def h2_le(self, kind, a, b):
        return self._h2_mask(kind, a, b, np.less_equal)

    def bitsel(self, m, a, b):
        m = self.u32(m)
        return (m & self.u32(a)) | (~m & self.u32(b))

    def half_rz(self, kind, x):
        """cvt.rz.{bf16,f16}.f32: toward zero; overflow gives the largest finite, NaN the canonical 0x7FFF."""
        x = self.f32(x)
        if kind == "bfloat16":
            bits = (x.view(np.uint32) >> np.uint32(16)).astype(np.uint32)
        else:
            with np.errstate(over="ignore"):
                h = x.astype(np.float16)
            bits = h.view(np.uint16).astype(np.uint32)
            up = np.abs(h.astype(np.float32)) > np.abs(x)  # rounded away from zero (or to Inf): one step back
            bits = np.where(up, bits - 1, bits).astype(np.uint32)
        return np.where(np.isnan(x), 0x7FFF, bits).astype(np.uint32)

    def fmul(self, a, b):
        return (self.f32(a) * self.f32(b)).astype(np.float32)

    def fmin(self, a, b):
        return np.fmin(self.f32(a), self.f32(b))

    def cmp_sel(self, op, a, b, x, y):
        cmp = {"gt": np.greater, "ge": np.greater_equal, "eq": np.equal}[op]
        return np.where(cmp(self.f32(a), self.f32(b)), self.u32(x), self.u32(y)).astype(np.uint32)

    def div_rn(self, a, b):
        return (self.f32(a) / self.f32(b)).astype(np.float32)

    def fmax(self, a, b):
        return np.fmax(self.f32(a), self.f32(b))

    def select_f32(self, pred, a, b):
        return np.where(np.broadcast_to(np.asarray(pred, dtype=bool), (LANES,)), self.f32(a), self.f32(b))

    def select_u32(self, pred, a, b):
        return np.where(np.broadcast_to(np.asarray(pred, dtype=bool), (LANES,)), self.u32(a), self.u32(b))

    def imin(self, a, b):
        return np.minimum(self.i32(a), self.i32(b)).astype(np.int32)

    def imax(self, a, b):
        return np.maximum(self.i32(a), self.i32(b)).astype(np.int32)

    def shfl_xor(self, x, mask: int):
        x = np.asarray(x)
        return x[self.lane ^ mask]

    def bar_sync(self, barrier_id, threads: int):  # named barriers: the drivers order the phases too
        pass

    def barrier(self):  # the emulator's kernel drivers run the phases between barriers in order
        pass

    # bulk copies on mbarriers (one warp's view; the drivers give each warp its own barriers).
    # A copy poisons its destination (0xA5) when issued and lands when waited for, so reading a
    # buffer before its wait, or refilling it before the reads, shows up as wrong values.
    def _one(self, x, pred):
        lanes = self._lanes(pred)
        return None if len(lanes) == 0 else int(np.broadcast_to(np.asarray(x), (LANES,))[lanes[0]])

    def mbar_init(self, saddr, pred, count: int):
        addr = self._one(saddr, pred)
        if addr is not None:
            assert count == 1 and addr % 8 == 0
            self.mbars = getattr(self, "mbars", {})
            self.mbars[addr] = {"done": 0, "pending": []}

    def bulk_g2s(self, sdst, gsrc, nbytes: int, smbar, pred):
        dst, src, bar = self._one(sdst, pred), self._one(gsrc, pred), self._one(smbar, pred)
        if dst is None:
            return
        assert dst % 16 == 0 and src % 16 == 0 and nbytes % 16 == 0 and 0 <= dst and dst + nbytes <= self.smem.size
        self.smem[dst : dst + nbytes] = 0xA5
        data = b"".join(self.g.read(src + i, 16) for i in range(0, nbytes, 16))  # 16-byte aligned reads
        self.mbars[bar]["pending"].append((dst, np.frombuffer(data, dtype=np.uint8).copy()))

    def mbar_wait(self, smbar, parity):
        bar = self.mbars[int(np.broadcast_to(np.asarray(smbar), (LANES,))[0])]
        assert bar["pending"], "waiting on an mbarrier with no copy in flight (would hang)"
        assert bar["done"] % 2 == int(np.broadcast_to(np.asarray(parity), (LANES,))[0]), "wrong phase parity"
        dst, data = bar["pending"].pop(0)
        self.smem[dst : dst + data.size] = data
        bar["done"] += 1

    def sync_warp(self):
        pass


# ---- drivers shared by several kernels' emulations ------------------------------------------
_LANE = np.arange(LANES, dtype=np.int32)


def k_loop(logic, ops, rt, n0, first: int, step: int, chunks, acc):
    """One warp's K loop over chunks first, first + step, ... < chunks, as the decode kernels run it
    (`DecodeLogic.k_loop`: the plain, fused and moe expert GEMMs) for `logic.cfg` (plain, upfront, kgroup or the
    prefetch pipeline); returns acc. Loaded by path from moe's tests, so it imports nothing of this package."""
    cfg, kg = logic.cfg, logic.cfg.kgroup
    if cfg.upfront:  # every held chunk's loads first, then their math, then the rest
        held = logic.upfront_loads(ops, rt, _LANE, n0, np.int32(first), chunks)
        for j in range(cfg.upfront):
            if first + j * step < chunks:
                ch = np.int32(first + j * step)
                acc = logic.chunk_with(ops, rt, _LANE, n0, ch, logic.unflatten_loads(held[j]), acc)
        for ch in range(first + cfg.upfront * step, chunks, step):
            acc = logic.chunk(ops, rt, _LANE, n0, np.int32(ch), acc)
    elif cfg.prefetch == 0 and kg == 1:
        for ch in range(first, chunks, step):
            acc = logic.chunk(ops, rt, _LANE, n0, np.int32(ch), acc)
    elif kg > 1:  # groups of kg adjacent chunks, then the rest one by one
        for cg in range(first, chunks // kg, step):
            for j in range(kg):
                acc = logic.chunk(ops, rt, _LANE, n0, np.int32(cg * kg + j), acc)
        for ch in range(chunks // kg * kg + first, chunks, step):
            acc = logic.chunk(ops, rt, _LANE, n0, np.int32(ch), acc)
    else:  # the kernel's software pipeline, stage by stage
        stages = logic.prefetch_prologue(ops, rt, _LANE, n0, np.int32(first), chunks)
        for ch in range(first, chunks, step):
            stages, acc = logic.pipelined_chunk(ops, rt, _LANE, n0, np.int32(ch), chunks, stages, acc)
    return acc


def emulate_tile(logic, gmem: GlobalMemory, rt, m0, n0, ops_cls=EmuOps) -> None:
    """One CTA of `TiledGemm.tile` (the K loop and epilogue of tile (m0, n0)) with `ops_cls` warps:
    the first K-tile's loads and stores, then per K-tile the next one's loads, its stores into the
    other buffer before any warp's math (a legal interleaving that exposes a kernel which reads and
    writes the same buffer between two barriers; with `mix` each warp's k_tile does both), the MMAs;
    the epilogue. Shared by gemm's tiled tests and moe's grouped expert kernels (a TiledLogic)."""
    warps, chunks = logic.threads // 32, int(rt.k) // logic.bk
    smem = np.zeros(logic.smem_bytes, dtype=np.uint8)
    ops = [ops_cls(gmem, smem) for _ in range(warps)]
    tid = [w * 32 + np.arange(LANES, dtype=np.int32) for w in range(warps)]
    for w in range(warps):
        logic.store_tile(ops[w], rt, tid[w], logic.load(ops[w], rt, tid[w], m0, n0, np.int32(0)), 0)
    acc = [logic.zero_acc(ops[w]) for w in range(warps)]
    for kc in range(chunks):  # one barrier per iteration, at its end
        nxt = np.int32(min(kc + 1, chunks - 1))
        regs = [logic.load(ops[w], rt, tid[w], m0, n0, nxt) for w in range(warps)]
        if logic.cfg.mix:
            for w in range(warps):
                acc[w] = logic.k_tile(ops[w], rt, tid[w], m0, n0, np.int32(kc), acc[w], regs[w])
            continue
        for w in range(warps):
            logic.store_tile(ops[w], rt, tid[w], regs[w], (kc + 1) & 1)
        for w in range(warps):
            acc[w] = logic.mma_tile(ops[w], rt, tid[w], m0, n0, np.int32(kc), kc & 1, acc[w])
    for w in range(warps):
        logic.epilogue(ops[w], rt, tid[w], m0, n0, acc[w])
