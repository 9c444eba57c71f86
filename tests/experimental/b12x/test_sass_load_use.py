"""`scripts/sass_load_use.py` (session 47) on hand-written SASS: loops are backward branches, a load read inside
its loop within the window is found (with its distance and first reader), a read past the window, outside the
loop or of another register is not, and wide loads cover all the registers they write. Its arguments:
test_probe_arguments.py."""

import pytest

NAME = "sass_load_use"

SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   LDG.E R4, desc[UR4][R2.64] ;
        /*0020*/                   IADD3 R9, R9, 0x1, RZ ;
        /*0030*/                   VIMNMX.U32 R6, R7, R4, PT ;
        /*0040*/              @!P3 LDG.E.128.CONSTANT R20, desc[UR4][R10.64] ;
        /*0050*/                   IADD3 R9, R9, 0x1, RZ ;
        /*0060*/                   IADD3 R9, R9, 0x1, RZ ;
        /*0070*/                   PRMT R2, R23, 0x5410, R8 ;
        /*0080*/                   LDG.E R30, desc[UR4][R12.64] ;
        /*0090*/                   MOV R30, RZ ;
        /*00a0*/                   STG.E desc[UR4][R14.64], R9 ;
        /*00b0*/                   ISETP.NE.AND P0, PT, R9, 0x10, PT ;
        /*00c0*/               @P0 BRA `(.L_x_0) ;
        /*00d0*/                   LDG.E R40, desc[UR4][R2.64] ;
        /*00e0*/                   FMUL R41, R40, R40 ;
        /*00f0*/                   EXIT ;
"""


@pytest.mark.reference
def test_loads_read_inside_their_loop_are_found(load_script):
    s = load_script(NAME)
    hits = s.load_uses(SASS, window=8)
    assert [(h.loop, h.distance, h.use.split()[0]) for h in hits] == [
        (".L_x_0", 2, "VIMNMX.U32"),
        (".L_x_0", 3, "PRMT"),
    ]
    assert "R23" in hits[1].use  # the fourth register of a 128-bit load counts as the load's


@pytest.mark.reference
def test_the_window_bounds_the_search(load_script):
    s = load_script(NAME)
    assert [h.distance for h in s.load_uses(SASS, window=2)] == [2]
    assert s.load_uses(SASS, window=1) == []


@pytest.mark.reference
def test_loops_are_backward_branches_and_stores_read_their_first_operand(load_script):
    s = load_script(NAME)
    ins, labels = s.parse(SASS)
    assert labels == {".L_x_0": 1} and s.loops(ins, labels) == [(".L_x_0", 1, 12)]
    assert s._reads("STG.E desc[UR4][R14.64], R9") == {14, 15, 9}
    assert s._reads("MOV R30, RZ") == set()  # an overwrite is not a read (R30's load above is not reported)
    assert s._reads("@!P3 VIMNMX.U32 R6, R7.reuse, R4, PT") == {7, 4}
