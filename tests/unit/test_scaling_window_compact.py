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


@pytest.mark.parametrize("seed", range(4))
def test_metric_windows_answer_as_a_dict_of_windows_and_make_no_dict_for_one_metric(seed: int) -> None:
    """Issue 30: the first metric's window is kept inline (a dict of one entry was ~180 bytes a
    scaler); under random adds, gcs, retains and copies over up to four keys, every answer equals
    that of a plain dict of windows."""
    rng = random.Random(seed)
    ws = MetricWindows()
    ref: dict[str, SampleWindow] = {}
    keys = ["a", "b", "c", "d"]
    now = 0.0
    for _ in range(400):
        now += rng.uniform(0, 40)
        op = rng.random()
        if op < 0.6:
            key = rng.choice(keys)
            value = rng.uniform(0, 100)
            ws.add(key, now, value)
            ref.setdefault(key, SampleWindow()).add(now, value)
        elif op < 0.75:
            ws.gc(now)
            for key in list(ref):
                ref[key].gc(now, ws.policy.window_seconds, ws.policy.gc_factor)
                if not ref[key]:
                    del ref[key]
        elif op < 0.85:
            keep = rng.sample(keys, rng.randint(0, 4))
            ws.retain(keep)
            ref = {k: w for k, w in ref.items() if k in keep}
        elif op < 0.9:
            ws = ws.copy()
        assert ws.names() == sorted(ref) and len(ws) == len(ref)
        for key in keys:
            assert (key in ws) == (key in ref)
            if key in ref:
                p = ws.policy
                assert ws.window(key).samples() == ref[key].samples()
                assert ws.aggregate(key, now) == ref[key].aggregate(
                    now, p.window_seconds, p.aggregation, p.missing_policy, p.outlier_filter,
                    p.outlier_threshold, metric=key)
        if len(ref) <= 1:
            assert ws._more is None, "no dict while one metric (or none) has a window"


def test_one_metric_windows_hold_no_dict() -> None:
    ws = MetricWindows()
    ws.add("m", 1.0, 5.0)
    assert ws._more is None and ws._key == "m"
    ws.add("n", 1.0, 6.0)
    assert ws._more is not None and set(ws.names()) == {"m", "n"}
    ws.retain(["n"])
    assert ws._more is None and ws.names() == ["n"] and ws.window("n").samples() == ((1.0, 6.0),)
