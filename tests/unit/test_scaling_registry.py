"""The algorithm registry (docs/guide/elasticscaler.md#the-triggers): names, duplicates, lookups, the
reserved HPA name."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from escaler.scaling import (
    HPA,
    AlgorithmContext,
    AlgorithmNotRegistered,
    MetricValue,
    Recommendation,
    apa,
    get_algorithm,
    is_known_algorithm,
    register_algorithm,
    registered_algorithms,
    unregister_algorithm,
)
from escaler.scaling.algorithm import ALGORITHM_HISTORY, AlgorithmResult, as_result
from escaler.scaling.metricdecision import WindowedValue, decide_metrics
from escaler.scaling.registry import history_length


def keep_current(ctx: AlgorithmContext) -> int:
    return ctx.current_replicas


@pytest.fixture
def registry() -> Iterator[list[str]]:
    """Names registered by a test; removed afterwards so tests do not leak into each other."""
    added: list[str] = []
    yield added
    for name in added:
        if name in registered_algorithms():
            unregister_algorithm(name)


def test_apa_is_built_in() -> None:
    assert "apa" in registered_algorithms()
    assert get_algorithm("apa") is apa


def capped_at_three(ctx: AlgorithmContext) -> AlgorithmResult:
    return AlgorithmResult(replicas=min(3, 2 * ctx.current_replicas), uncapped=2 * ctx.current_replicas)


def test_an_algorithm_may_return_a_count_or_a_capped_result(registry: list[str]) -> None:
    # plug-ins written against the int contract keep working; one with its own cap reports both counts
    register_algorithm("keep", keep_current)
    register_algorithm("capped", capped_at_three)
    registry.extend(["keep", "capped"])
    c = AlgorithmContext(current_replicas=2)
    assert as_result(get_algorithm("keep")(c)) == AlgorithmResult(2, 2)
    assert as_result(get_algorithm("capped")(c)) == AlgorithmResult(3, 4)
    assert is_known_algorithm("apa")


def test_register_and_get(registry: list[str]) -> None:
    register_algorithm("keep-current", keep_current)
    registry.append("keep-current")
    fn = get_algorithm("keep-current")
    assert fn(AlgorithmContext(current_replicas=3)) == 3
    assert is_known_algorithm("keep-current")
    assert registered_algorithms() == sorted(registered_algorithms())


def test_algorithm_sees_read_only_context(registry: list[str]) -> None:
    seen: list[AlgorithmContext] = []

    def spy(ctx: AlgorithmContext) -> int:
        seen.append(ctx)
        return len(ctx.history) + len(ctx.metrics)

    register_algorithm("spy", spy)
    registry.append("spy")
    ctx = AlgorithmContext(
        current_replicas=2,
        metrics=(MetricValue("q", "External", 5.0, "Value", 1.0),),
        config={"k": "v"},
        history=(Recommendation(time=10.0, replicas=2), Recommendation(time=40.0, replicas=3)),
    )
    assert get_algorithm("spy")(ctx) == 3
    assert seen[0].config == {"k": "v"}


def test_duplicate_needs_replace(registry: list[str]) -> None:
    register_algorithm("dup", keep_current)
    registry.append("dup")
    with pytest.raises(ValueError, match="'dup': already registered"):
        register_algorithm("dup", lambda ctx: 1)
    register_algorithm("dup", lambda ctx: 1, replace=True)
    assert get_algorithm("dup")(AlgorithmContext(current_replicas=5)) == 1


BAD_NAMES = [
    ("empty", "", "non-empty"),
    ("not-a-string", 7, "non-empty string"),
    ("uppercase", "MyAlgo", "DNS label"),
    ("underscore", "my_algo", "DNS label"),
    ("leading-dash", "-algo", "DNS label"),
    ("trailing-dash", "algo-", "DNS label"),
    ("dot", "my.algo", "DNS label"),
    ("too-long", "a" * 64, "at most 63"),
    ("reserved-HPA", "HPA", "reserved"),
    ("reserved-hpa-lowercase", "hpa", "reserved"),
]


@pytest.mark.parametrize(("name", "match"), [c[1:] for c in BAD_NAMES], ids=[c[0] for c in BAD_NAMES])
def test_bad_names_refused(name: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        register_algorithm(name, keep_current)


def test_not_callable_refused() -> None:
    with pytest.raises(ValueError, match="must be callable"):
        register_algorithm("not-callable", 42)  # type: ignore[arg-type]


def test_unknown_name_message_lists_registered() -> None:
    with pytest.raises(AlgorithmNotRegistered) as err:
        get_algorithm("nope")
    assert str(err.value).startswith("scaling algorithm 'nope' is not registered (registered: apa")
    assert isinstance(err.value, KeyError)


def test_hpa_is_known_but_not_a_function() -> None:
    assert is_known_algorithm(HPA)
    assert HPA not in registered_algorithms()
    with pytest.raises(AlgorithmNotRegistered, match="delegates to a companion HPA"):
        get_algorithm(HPA)


@pytest.mark.parametrize(
    "name",
    ["nope", "hpa", "", None, 3, ["apa"]],
    ids=["unregistered", "hpa-lowercase", "empty", "none", "int", "list"],
)
def test_is_known_algorithm_false(name: object) -> None:
    assert not is_known_algorithm(name)  # type: ignore[arg-type]


def test_unregister(registry: list[str]) -> None:
    register_algorithm("gone", keep_current)
    unregister_algorithm("gone")
    assert not is_known_algorithm("gone")
    with pytest.raises(AlgorithmNotRegistered):
        unregister_algorithm("gone")


# ---- history=: how many past recommendations an algorithm reads (issue 30: memory per scaler) ----


def test_the_built_in_algorithms_read_no_history() -> None:
    assert history_length("apa") == 0 and history_length("flow") == 0
    assert history_length("not-registered") == ALGORITHM_HISTORY


def test_a_plug_in_reads_the_default_history_unless_it_says_otherwise(registry: list[str]) -> None:
    register_algorithm("plain", keep_current)
    register_algorithm("short", keep_current, history=3)
    registry.extend(["plain", "short"])
    assert history_length("plain") == ALGORITHM_HISTORY and history_length("short") == 3
    unregister_algorithm("short")
    assert history_length("short") == ALGORITHM_HISTORY


@pytest.mark.parametrize("bad", [-1, ALGORITHM_HISTORY + 1, True, 2.0, "3", None])
def test_a_history_out_of_range_is_refused_naming_the_rule(bad: object, registry: list[str]) -> None:
    with pytest.raises(ValueError, match=rf"algorithm 'bad': history must be an integer from 0 to "
                                         rf"{ALGORITHM_HISTORY}"):
        register_algorithm("bad", keep_current, history=bad)  # type: ignore[arg-type]
    assert "bad" not in registered_algorithms()


def _seen_by(name: str, polls: int, history: object = ()) -> tuple[list[int], object]:
    """The history length the algorithm saw on each of ``polls`` decisions, and what was kept."""
    kept: object = history
    for poll in range(polls):
        kept = decide_metrics(name, {}, 2, 100.0 + poll,
                              [WindowedValue(MetricValue("q", "External", 20.0, "Value", 10.0))],
                              (), kept).history  # type: ignore[arg-type]
    return SEEN, kept


SEEN: list[int] = []


def history_spy(ctx: AlgorithmContext) -> int:
    SEEN.append(len(ctx.history))
    return ctx.current_replicas


def test_an_algorithm_sees_and_keeps_at_most_its_history(registry: list[str]) -> None:
    SEEN.clear()
    register_algorithm("spy-three", history_spy, history=3)
    registry.append("spy-three")
    seen, kept = _seen_by("spy-three", 6)
    assert sorted(set(seen)) == [0, 1, 2, 3] and seen[-1] == 3  # one to three runs a poll
    assert kept == tuple(Recommendation(100.0 + p, 2) for p in (3, 4, 5))


def test_an_algorithm_reading_less_is_given_the_newest_of_a_longer_history(registry: list[str]) -> None:
    # a scaler switched from a plug-in reading 64 to one reading 3 (or none) in one process
    SEEN.clear()
    register_algorithm("spy-long", history_spy)
    register_algorithm("spy-two", history_spy, history=2)
    registry.extend(["spy-long", "spy-two"])
    _, long = _seen_by("spy-long", 5)
    SEEN.clear()
    _, kept = _seen_by("spy-two", 1, long)
    assert SEEN[0] == 2
    assert kept == (Recommendation(104.0, 2), Recommendation(100.0, 2))
    _, none = _seen_by("apa", 1, long)
    assert none == ()
