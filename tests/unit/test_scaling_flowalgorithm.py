"""The registered ``flow`` algorithm (``escaler.scaling.flowalgorithm``): stateless flow sizing on an
ElasticScaler MetricsTrigger's metrics — work and backlog over the utilisation, both directions at
once (the pipeline's windows do the rest), ``ValueError`` naming the key or the metric for a bad
spec, ``NoDecision`` naming the metric for a missing one."""

from __future__ import annotations

import pytest

from escaler.scaling.algorithm import AlgorithmContext, MetricValue, NoDecision
from escaler.scaling.flowalgorithm import FLOW, flow
from escaler.scaling.registry import get_algorithm, is_known_algorithm

CAP = {"prefillTokensPerSecond": "8000", "decodeTokensPerSecond": "1500"}


def m(name: str, value: float | None, target_type: str = "Value") -> MetricValue:
    return MetricValue(name, "External", value, target_type, 1.0)


def ctx(current: int = 3, *metrics: MetricValue, **config: str) -> AlgorithmContext:
    cfg = {**CAP, **config}
    default = (m("promptTokensRate", 16000), m("generationTokensRate", 3000))
    return AlgorithmContext(current, metrics or default, {k: v for k, v in cfg.items() if v != ""})


def test_registered_at_import() -> None:
    assert is_known_algorithm(FLOW) and get_algorithm(FLOW) is flow


@pytest.mark.parametrize(("context", "want"), [
    # 16000 / 8000 + 3000 / 1500 = 4 replicas at 100 %; / 0.85 = 4.7
    (ctx(3), 5),
    (ctx(3, utilization="0.8"), 5),
    (ctx(3, utilization="1"), 4),
    # down at once: the pipeline's scale-down window is the down delay
    (ctx(12), 5),
    # 40 waiting x (4 replica-s / 20 req/s = 0.2 replica-s each) / 60 s = 0.133 extra
    (ctx(3, m("promptTokensRate", 16000), m("generationTokensRate", 3000), m("waiting", 40),
         m("requestsRate", 20)), 5),
    (ctx(3, m("promptTokensRate", 16000), m("generationTokensRate", 3000), m("waiting", 400),
         m("requestsRate", 20)), 7),
    (ctx(3, m("promptTokensRate", 16000), m("generationTokensRate", 3000), m("waiting", 400),
         m("requestsRate", 20), drainSeconds="10"), 13),
    # waiting alone has no work per request: not acted on
    (ctx(3, m("promptTokensRate", 16000), m("generationTokensRate", 3000), m("waiting", 400)), 5),
    # AverageValue: a per-replica average, times the current count
    (ctx(4, m("promptTokensRate", 4000, "AverageValue"), m("generationTokensRate", 750, "AverageValue")), 5),
    (ctx(3, m("promptTokensRate", 0), m("generationTokensRate", 0)), 0),
], ids=["work", "utilization", "full", "down-at-once", "backlog-small", "backlog", "drain", "waiting-alone",
        "average-value", "idle"])
def test_recommendation(context: AlgorithmContext, want: int) -> None:
    assert flow(context) == want


@pytest.mark.parametrize(("config", "key"), [
    ({"prefillTokensPerSecond": ""}, "prefillTokensPerSecond"),
    ({"decodeTokensPerSecond": "0"}, "decodeTokensPerSecond"),
    ({"prefillTokensPerSecond": "fast"}, "prefillTokensPerSecond"),
    ({"utilization": "1.5"}, "utilization"),
    ({"utilization": "0"}, "utilization"),
    ({"drainSeconds": "-1"}, "drainSeconds"),
    ({"tolerance": "0.1"}, "tolerance"),
], ids=["missing-prefill", "zero-decode", "not-a-number", "utilization-above-1", "utilization-0",
        "negative-drain", "unknown-key"])
def test_bad_config_names_the_key(config: dict[str, str], key: str) -> None:
    with pytest.raises(ValueError, match=rf"^algorithmConfig\[{key}\]: "):
        flow(ctx(3, **config))


@pytest.mark.parametrize(("metrics", "name"), [
    ((m("generationTokensRate", 3000),), "promptTokensRate"),
    ((m("promptTokensRate", 16000),), "generationTokensRate"),
    ((m("promptTokensRate", None), m("generationTokensRate", 3000)), "promptTokensRate"),
    ((m("promptTokensRate", 16000), m("generationTokensRate", float("nan"))), "generationTokensRate"),
    ((m("promptTokensRate", -1), m("generationTokensRate", 3000)), "promptTokensRate"),
    ((m("promptTokensRate", 16000), m("generationTokensRate", 3000), m("waiting", None)), "waiting"),
], ids=["no-prompt", "no-generation", "no-sample", "nan", "negative", "optional-without-sample"])
def test_a_missing_metric_is_no_decision_naming_it(metrics: tuple[MetricValue, ...], name: str) -> None:
    with pytest.raises(NoDecision, match=name):
        flow(ctx(3, *metrics))


def test_a_utilization_target_is_a_spec_error_naming_the_metric() -> None:
    with pytest.raises(ValueError, match="promptTokensRate"):
        flow(ctx(3, m("promptTokensRate", 50, "Utilization"), m("generationTokensRate", 3000)))
