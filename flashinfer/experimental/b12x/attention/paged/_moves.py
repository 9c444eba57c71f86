"""fp8 fragment plumbing of the paged decode kernel, shared by the kernel and its CPU emulation tests
(`test_paged_fragments.py`, `test_paged_n8_fragments.py`): which e4m3 bytes, moved through 16-bit
ldmatrix as fake fp16 pairs, go to which real fp16 mma register, the k-slot order Q is staged in, and
the head dim each O accumulator column (m16 tile) or row (`DecodeConfig.heads_n8`) ends up holding.
Plain Python, no CuTe."""

from __future__ import annotations

PRMT_EVEN_DIM, PRMT_ODD_DIM = 0x6420, 0x7531


def k_expand_moves(fake_kblocks: int) -> tuple[tuple[int, int, int], ...]:
    """(fake k-block, fake register, real k-block): fake register h of fake k-block kb (4 e4m3 of
    one key) becomes real k-block 2kb + h (bytes 0-1 -> register 0, bytes 2-3 -> register 1)."""
    return tuple((kb, h, 2 * kb + h) for kb in range(fake_kblocks) for h in range(2))


def v_expand_moves(fake_nblocks: int) -> tuple[tuple[int, int, int], ...]:
    """(fake n-block, prmt selector, real n-block): prmt(reg0, reg1, selector) of fake n-block nb
    gathers 4 keys of one head dim; it becomes real n-block 2nb (even dims) or 2nb + 1 (odd)."""
    return tuple((nb, PRMT_ODD_DIM if e else PRMT_EVEN_DIM, 2 * nb + e) for nb in range(fake_nblocks) for e in range(2))


def n8_k_expand_moves(fake_kblocks: int) -> tuple[tuple[int, int, int, int], ...]:
    """heads_n8, fp8 K as the A operand: (fake k-block, fake register, real k-block, real register of
    the low pair). Fake register i of fake k-block kb holds 4 e4m3 of key row r + 8 (i % 2), dims
    32 kb + 16 (i // 2) + 4j .. +3; its bytes 0-1 become real register i % 2 of real k-block
    2 kb + i // 2 (k-slots 2j, 2j + 1) and bytes 2-3 real register i % 2 + 2 (slots 2j + 8, 2j + 9):
    the k-slot order of `q_slot_dim`, so Q's staging is the one the m16 tile uses."""
    return tuple((kb, i, 2 * kb + i // 2, i % 2) for kb in range(fake_kblocks) for i in range(4))


def n8_v_expand_moves(fake_mtiles: int) -> tuple[tuple[int, int, int, int, int], ...]:
    """heads_n8, fp8 V^T as the A operand (through ldmatrix.trans): (fake m-tile, first fake register,
    second fake register, prmt selector, real m-tile). Fake register i holds keys 2j, 2j + 1 (+ 8 when
    i >= 2) x dims 2g, 2g + 1 (+ 16 when i is odd) of fake m-tile mt; prmt(reg a, reg a + 2) with
    PRMT_EVEN_DIM gathers the even dim's 4 keys, PRMT_ODD_DIM the odd one's: real m-tile 2 mt (even) or
    2 mt + 1 (odd), row slot g + 8 (a % 2), low pair -> register a, high pair -> register a + 2. The
    accumulator's row m then holds dim `n8_o_row_dim(m)`."""
    return tuple(
        (mt, a, a + 2, PRMT_ODD_DIM if e else PRMT_EVEN_DIM, 2 * mt + e)
        for mt in range(fake_mtiles)
        for e in range(2)
        for a in range(2)
    )


def n8_o_row_dim(m: int) -> int:
    """heads_n8, fp8 path: the head dim that row m of the O^T accumulator holds (row slot s = m % 16 of
    real m-tile t = m // 16 holds dim 32 (t // 2) + 2 s + t % 2)."""
    return 32 * (m // 32) + 2 * (m % 16) + (m // 16) % 2


def q_dim_slot(d16: int) -> int:
    """Inverse of `q_slot_dim`: the mma k-slot that head dim d16 (within a 16-block) goes to."""
    return 2 * (d16 // 4) + d16 % 2 + 8 * ((d16 // 2) % 2)


def q_slot_dim(slot: int) -> int:
    """fp8 path: head dim (within a 16-block) the mma k-slot `slot` multiplies (see docstring)."""
    return 4 * ((slot % 8) // 2) + (slot % 2) + 2 * (slot // 8)


def o_col_dim(n: int) -> int:
    """fp8 path: head dim that column n of the O accumulator holds (see docstring)."""
    return 16 * (n // 16) + 2 * (n % 8) + (n // 8) % 2
