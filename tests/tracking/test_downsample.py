import math

from hypothesis import given
from hypothesis import strategies as st

from smrweb.core.downsample import lttb


def test_short_series_are_returned_whole():
    pts = [(i, i * 2) for i in range(10)]
    assert lttb(pts, 100) == pts
    assert lttb(pts, 10) == pts


def test_long_series_keep_first_last_and_the_peak():
    pts = [(i, math.sin(i / 50)) for i in range(10_000)]
    pts[5000] = (5000, 50.0)  # a spike must survive
    out = lttb(pts, 500)
    assert len(out) == 500
    assert out[0] == pts[0] and out[-1] == pts[-1]
    assert (5000, 50.0) in out
    assert [p[0] for p in out] == sorted(p[0] for p in out)


def test_extra_fields_ride_along():
    pts = [(i, (i * 7919) % 13, f"id{i}") for i in range(1000)]
    out = lttb(pts, 50)
    assert all(p == pts[p[0]] for p in out)


@given(st.lists(st.floats(-1e6, 1e6), min_size=0, max_size=400), st.integers(3, 120))
def test_never_more_than_asked_and_a_subsequence(ys, threshold):
    pts = [(i, y) for i, y in enumerate(ys)]
    out = lttb(pts, threshold)
    assert len(out) == min(len(pts), threshold)
    xs = [p[0] for p in out]
    assert xs == sorted(set(xs))
    assert all(pts[x] == p for x, p in zip(xs, out))
