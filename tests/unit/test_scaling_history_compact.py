"""The algorithm's history kept as numbers, not objects (issue 30, third memory pass).

``decide_metrics`` appends each recommendation to the history it returns and keeps the newest
``ALGORITHM_HISTORY`` (64): the reconciler holds that history per scaler between polls, so once a
scaler has been polled 64 times it held 64 ``Recommendation`` objects (each with its own float) in
a tuple, ~10 KB per scaler. It is now a ``RecommendationHistory``: two arrays, 16 bytes an entry,
that reads, slices, adds, hashes and compares like the tuple it replaces (an algorithm sees the same
values). What is decided is unchanged (``test_es_poll_replay.py`` replays recorded polls against its
golden file).

``apa`` and ``flow`` read no history and are registered saying so (``history=0``): a scaler using
them keeps none. The history tests below run ``apa`` registered again under a name that reads the
default ``ALGORITHM_HISTORY``, as a plug-in is.
"""

from __future__ import annotations

import gc
import random
import sys
from typing import Any

import pytest

from escaler.scaling import AlgorithmContext, MetricValue
from escaler.scaling.algorithm import Recommendation, RecommendationHistory, as_result
from escaler.scaling.metricdecision import ALGORITHM_HISTORY, WindowedValue, decide_metrics
from escaler.scaling.registry import get_algorithm, register_algorithm, unregister_algorithm

# apa, registered as a plug-in is (the default history): the history these tests keep
APA_WITH_HISTORY = "apa-with-history"


@pytest.fixture(autouse=True)
def _apa_with_history() -> Any:
    register_algorithm(APA_WITH_HISTORY, get_algorithm("apa"))
    yield
    unregister_algorithm(APA_WITH_HISTORY)


def _value(v: float) -> MetricValue:
    return MetricValue(name="queue", type="External", value=v, target_type="Value", target_value=10.0)


def _deep_bytes(obj: Any) -> int:
    """``sys.getsizeof`` of everything reachable from ``obj`` (types and modules left out; an
    instance dict is counted only if it exists: it is then a referent)."""
    seen: set[int] = set()
    stack, total = [obj], 0
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, type):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        stack.extend(gc.get_referents(o))
    return total


def _polls(n: int) -> list[tuple[float, int]]:
    """``n`` decisions in a row (a load that moves), each fed the history the previous returned."""
    history: Any = ()
    seen: list[tuple[float, int]] = []
    for poll in range(n):
        now = 1_000.0 + 30.0 * poll
        d = decide_metrics(APA_WITH_HISTORY, {}, 4, now, [WindowedValue(_value(40.0 + poll % 7))], (),
                           history)
        seen.append((now, d.recommend.replicas))
        history = d.history
    return seen


def test_a_full_history_holds_no_object_per_entry() -> None:
    history: Any = ()
    for poll in range(ALGORITHM_HISTORY + 6):
        history = decide_metrics(APA_WITH_HISTORY, {}, 4, 1_000.0 + 30.0 * poll,
                                 [WindowedValue(_value(40.0 + poll % 7))], (), history).history
    assert len(history) == ALGORITHM_HISTORY
    per_entry = _deep_bytes(history) / ALGORITHM_HISTORY
    # a tuple of Recommendation objects: ~150 bytes an entry; two arrays of numbers: ~16
    assert per_entry <= 24, f"{per_entry:.0f} bytes per history entry"


def test_the_history_holds_what_the_tuple_held() -> None:
    seen = _polls(ALGORITHM_HISTORY + 6)
    history: Any = ()
    for now, _ in seen:
        history = decide_metrics(APA_WITH_HISTORY, {}, 4, now, [WindowedValue(_value(45.0))], (),
                                 history).history
    expected = tuple(Recommendation(now, 5) for now, _ in seen)[-ALGORITHM_HISTORY:]
    assert history == expected and expected == tuple(history)
    assert hash(history) == hash(expected)
    assert history[-1] == Recommendation(seen[-1][0], 5) and history[0] == expected[0]
    assert history[3:9] == expected[3:9] and history[::-1] == expected[::-1]
    # the operator itself is what is tested here (a plug-in may concatenate the tuple it was given)
    assert history + (Recommendation(1.0, 1),) == (*expected, Recommendation(1.0, 1))  # noqa: RUF005
    assert (Recommendation(1.0, 1),) + history == (Recommendation(1.0, 1), *expected)  # noqa: RUF005
    assert expected[5] in history and Recommendation(0.5, 9) not in history
    assert all(type(r.time) is float and type(r.replicas) is int for r in history)


def test_appended_keeps_the_newest_and_reads_like_the_tuple() -> None:
    rng = random.Random(7)
    history: Any = ()
    plain: tuple[Recommendation, ...] = ()
    for _ in range(200):
        rec = Recommendation(rng.uniform(0, 1e9), rng.randrange(0, 10_000))
        keep = rng.randrange(1, 10)
        history = RecommendationHistory.appended(history, rec, keep)
        plain = (*plain, rec)[-keep:]
        assert isinstance(history, RecommendationHistory)
        assert history == plain and list(history) == list(plain) and len(history) == len(plain)
        assert all(history[i] == plain[i] for i in range(-len(plain), len(plain)))
    assert history != (*plain, plain[0]) and history != plain[1:]
    with pytest.raises(IndexError):
        history[len(plain)]


@pytest.mark.parametrize("rec", [
    Recommendation(10.0, 2**70),  # a count no int64 holds
    Recommendation(10.0, True),  # not an int (kept as given, never converted)
    Recommendation(10.0, 2.5),  # type: ignore[arg-type]
])
def test_an_entry_the_arrays_cannot_hold_keeps_the_plain_tuple(rec: Recommendation) -> None:
    compact = RecommendationHistory([Recommendation(1.0, 1)])
    for history in (compact, (Recommendation(1.0, 1),)):
        out = RecommendationHistory.appended(history, rec, 4)
        assert type(out) is tuple and out == (Recommendation(1.0, 1), rec)
        assert out[-1].replicas is rec.replicas


def test_building_one_from_entries_that_do_not_fit_names_the_rule() -> None:
    with pytest.raises(ValueError, match=r"does not fit \(the time must be a float or an int equal to one"):
        RecommendationHistory([Recommendation(1.0, 2**64)])


def test_an_int_time_reads_back_as_the_equal_float() -> None:
    out = RecommendationHistory.appended((), Recommendation(30, 2), 4)  # type: ignore[arg-type]
    assert isinstance(out, RecommendationHistory) and out == (Recommendation(30.0, 2),)


def test_an_algorithm_sees_the_history_as_before() -> None:
    seen: list[tuple[int, tuple[Recommendation, ...]]] = []

    def spy(ctx: AlgorithmContext) -> int:
        seen.append((len(ctx.history), tuple(ctx.history[-3:])))
        return ctx.current_replicas

    register_algorithm("history-spy", spy)
    try:
        history: Any = ()
        for poll in range(5):
            history = decide_metrics("history-spy", {}, 3, 100.0 + poll, [WindowedValue(_value(30.0))],
                                     (), history).history
    finally:
        unregister_algorithm("history-spy")
    assert sorted({n for n, _ in seen}) == [0, 1, 2, 3, 4]
    assert [t for n, t in seen if n == 4][-1] == (
        Recommendation(101.0, 3), Recommendation(102.0, 3), Recommendation(103.0, 3))
    assert history == tuple(Recommendation(100.0 + poll, 3) for poll in range(5))
    ctx = AlgorithmContext(current_replicas=1, history=history)
    assert ctx.history is history, "an immutable history is not copied into a tuple"
    assert as_result(get_algorithm("apa")(ctx.with_metrics((_value(10.0),))), "apa").replicas == 1
