"""Value objects validated once per decision, not on every run of the algorithm (issue 30).

``decide_metrics`` runs the algorithm up to four times per poll (stable, panic, peak, each metric
alone) on one sync's current count, config and history: the ``AlgorithmContext`` is validated once
and each run gets a copy with other metrics (``AlgorithmContext.with_metrics``); apa parses an
``algorithmConfig`` once per distinct config (``apa._parsed_config``), not on each run. The decisions
are the ones the per-run validation gave (the decision tests, and the equality check below).
"""

from __future__ import annotations

import importlib
from types import MappingProxyType

import pytest

from escaler.scaling import AlgorithmContext, MetricValue, apa
from escaler.scaling import algorithm as algorithm_mod
from escaler.scaling.metricdecision import WindowedValue, decide_metrics

apa_mod = importlib.import_module("escaler.scaling.apa")  # the package exports the function as apa


def _value(v: float) -> MetricValue:
    return MetricValue(name="queue", type="External", value=v, target_type="Value", target_value=10.0)


def _count_calls(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[int]:
    calls = [0]
    original = getattr(owner, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return original(*args, **kwargs)
    monkeypatch.setattr(owner, name, counted)
    return calls


def test_one_decision_validates_its_context_once(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = _count_calls(monkeypatch, algorithm_mod.AlgorithmContext, "__post_init__")
    d = decide_metrics("apa", {"tolerance": "0.1"}, 4, 100.0,
                       [WindowedValue(_value(45.0), panic=60.0, peak=70.0)], (), ())
    assert d.recommend.replicas == 6  # the panic value 60 wants 6 (x2 cap: 8): it takes over
    assert checks[0] == 1, "stable, panic, peak and the metric alone: four runs, one validation"


def test_apa_parses_a_config_once_across_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    memo = getattr(apa_mod, "_parsed_config", None)
    if memo is not None:
        memo.cache_clear()
    parses = _count_calls(monkeypatch, apa_mod, "parse_config")
    config = {"tolerance": "0.05", "scaleUpRate": "3"}
    for poll in range(5):
        decide_metrics("apa", config, 4, 30.0 * poll, [WindowedValue(_value(40.0 + poll))], (), ())
    assert parses[0] == 1
    with pytest.raises(apa_mod.ApaConfigError):
        apa(AlgorithmContext(current_replicas=4, metrics=(_value(40.0),), config={"tolerance": "2"}))
    with pytest.raises(apa_mod.ApaConfigError):  # a bad config is refused every time, not cached
        apa(AlgorithmContext(current_replicas=4, metrics=(_value(40.0),), config={"tolerance": "2"}))


def test_with_metrics_is_the_context_a_validated_construction_gives() -> None:
    base = AlgorithmContext(current_replicas=3, config={"tolerance": "0.2"}, history=())
    got = base.with_metrics((_value(1.0), _value(2.0)))
    want = AlgorithmContext(current_replicas=3, metrics=(_value(1.0), _value(2.0)),
                            config={"tolerance": "0.2"}, history=())
    assert got == want
    assert isinstance(got.config, MappingProxyType) and got.config is base.config
    assert apa(got) == apa(want)


def test_a_bad_context_is_still_refused_as_invalid() -> None:
    d = decide_metrics("apa", {"tolerance": 1}, 4, 0.0, [WindowedValue(_value(40.0))], (), ())  # type: ignore[dict-item]
    assert d.recommend.replicas is None and "config" in d.recommend.summary()
