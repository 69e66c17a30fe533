"""A sample window keeps its samples in two arrays of doubles (issue 30, memory per scaler: 16 bytes a
sample instead of a ``(time, value)`` tuple and two floats, ~110 bytes), and answers exactly as the
list of pairs it replaced: every add (in order or not), gc, window read and aggregate is checked
against a plain sorted list of pairs after each of 2,000 random steps."""

from __future__ import annotations

import bisect
import random
from array import array

import pytest

from escaler.scaling.annotations import AGGREGATION_TYPES
from escaler.scaling.window import MAX_SAMPLES, MetricWindows, SampleWindow, _reduce, filter_outliers


def test_the_samples_are_two_arrays_of_doubles() -> None:
    w = SampleWindow()
    for i in range(5):
        w.add(float(i), 10.0 + i)
    assert not hasattr(w, "__dict__")
    assert type(w._t) is array and w._t.typecode == "d"
    assert type(w._v) is array and w._v.typecode == "d"
    assert w.samples() == tuple((float(i), 10.0 + i) for i in range(5))


def test_copy_is_independent() -> None:
    ws = MetricWindows()
    ws.add("m", 1.0, 5.0)
    other = ws.copy()
    other.add("m", 2.0, 7.0)
    assert ws.window("m").samples() == ((1.0, 5.0),)
    assert other.window("m").samples() == ((1.0, 5.0), (2.0, 7.0))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_window_answers_as_a_sorted_list_of_pairs(seed: int) -> None:
    rng = random.Random(seed)
    w = SampleWindow()
    model: list[tuple[float, float]] = []
    now = 0.0
    for step in range(2000):
        op = rng.random()
        if op < 0.7:
            t = now - rng.choice([0.0, 0.0, 0.0, 1.5, 7.0, 30.0]) if rng.random() < 0.2 else now
            v = rng.choice([rng.uniform(-5, 50), 3.0, 0.1 + 0.2])
            w.add(t, v)
            bisect.insort_right(model, (t, v), key=lambda s: s[0])
            del model[: max(0, len(model) - MAX_SAMPLES)]
            now += rng.choice([0.0, 0.5, 2.0, 15.0])
        elif op < 0.8:
            window, factor = rng.choice([(60.0, 2.0), (30.0, 1.0), (10.0, 3.0)])
            cutoff = now - window * factor
            keep = bisect.bisect_right(model, cutoff, key=lambda s: s[0])
            assert w.gc(now, window, factor) == keep, step
            del model[:keep]
        else:
            seconds = rng.choice([6.0, 60.0, 300.0])
            want = [(t, v) for t, v in model if now - seconds < t <= now]
            assert w.in_window(now, seconds) == want, step
            for aggregation in AGGREGATION_TYPES:
                outliers = rng.random() < 0.5
                got = w.aggregate(now, seconds, aggregation, "Ignore", outliers, 3.0)
                assert got == reference(want, aggregation, outliers), (step, aggregation)
        assert w.samples() == tuple(model), step
        assert len(w) == len(model)


def reference(pairs: list[tuple[float, float]], aggregation: str, outliers: bool) -> float | None:
    """The aggregate of ``pairs`` through the module's own reducers (the reduction is not under
    test here, only which values reach it and in what order)."""
    values = [v for _, v in pairs]
    if not values:
        return None
    return _reduce(filter_outliers(values, 3.0) if outliers else values, aggregation)
