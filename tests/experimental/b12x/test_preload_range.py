"""`scripts/preload_range.py` (session 47): the preload tile's range moves only to shapes where it is >= 1% faster
than the large tile in every report and at every measured shape between today's bound and there; a shape a report
lacks, or one where it is not faster, stops it. Its arguments: test_probe_arguments.py."""

import pytest

NAME = "preload_range"
BOUND = 1 << 26


def _impl_of(k):
    return f"mid{k}", f"large{k}"


def _report(times):
    """times: {(M, K): (mid µs, large µs)} -> a report's nvfp4 rows (a copy row and a peer row beside them)."""
    rows = []
    for (m, k), (mid, large) in times.items():
        shape = {"M": m, "K": k, "dtype": "bfloat16"}
        rows += [dict(case="nvfp4", shape=shape, impl="copy", peer=False, time_us=1.0)]
        rows += [dict(case="nvfp4", shape=shape, impl=f"mid{k}", peer=False, time_us=mid)]
        rows += [dict(case="nvfp4", shape=shape, impl=f"large{k}", peer=False, time_us=large)]
        rows += [dict(case="nvfp4", shape=shape, impl=f"mid{k}", peer=True, time_us=0.1)]
    return {"rows": rows}


@pytest.mark.reference
def test_the_bound_moves_to_the_last_shape_of_an_unbroken_run(load_script):
    s = load_script(NAME)
    a = _report({(8192, 7168): (40.0, 41.0), (12288, 7168): (60.0, 62.0), (16384, 7168): (82.6, 85.7),
                 (32768, 4096): (100.0, 100.5)})  # fmt: skip
    b = _report({(12288, 7168): (60.2, 61.9), (16384, 7168): (82.9, 85.5), (32768, 4096): (99.0, 99.2)})
    new, lines = s.decide([a, b], _impl_of, BOUND)
    assert new == 16384 * 7168  # 32768 x 4096 gains under 1%: it stops there
    assert len(lines) == 3 and lines[-1].endswith("not")  # 8192 x 7168 is inside today's bound: not listed


@pytest.mark.reference
def test_one_slower_report_or_a_missing_row_keeps_the_bound(load_script):
    s = load_script(NAME)
    a = _report({(12288, 7168): (60.0, 62.0), (16384, 7168): (80.0, 85.0)})
    slower = _report({(12288, 7168): (62.5, 62.0), (16384, 7168): (80.0, 85.0)})
    assert s.decide([a, slower], _impl_of, BOUND)[0] == BOUND  # 12288 x 7168 fails, so 16384 x 7168 cannot pass
    missing = _report({(16384, 7168): (80.0, 85.0)})
    new, lines = s.decide([a, missing], _impl_of, BOUND)
    assert new == BOUND and "lacks" in lines[0]


@pytest.mark.reference
def test_the_impl_names_are_the_bench_rows(load_script):
    s = load_script(NAME)
    mid, large = s._impl_of(7168)
    assert mid.startswith("b12x ") and large.startswith("b12x ") and mid != large
