"""LLMScaler providers (docs/llmscaler.md), pure parts: the custom provider's ``{"replicas": n}`` contract,
the Prometheus rule (every metric evaluated, ceil(value / targetPerReplica), the max of the usable
ones), error bodies never echoed past 1 KiB, and the recommender's cadence on the outbound
executor (pending writes nothing; a result is consumed only by the spec it was read for)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from executor_fakes import ManualExecutor
from prometheus_client import CollectorRegistry

from escaler.api.llmscaler import LLMScaler, PrometheusMetric
from escaler.clock import FakeClock
from escaler.reconcilers.kit.poller import phase
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics
from escaler.reconcilers.llmscaler.provider import (
    CUSTOM_SOURCE,
    CustomReading,
    custom_result,
    parse_decision,
    prometheus_result,
)
from escaler.reconcilers.llmscaler.recommend import LLMRecommender, read_key
from escaler.runtime.types import Request
from escaler.scaling.pipeline import FROM_DECISION, FROM_METRICS
from escaler.scaling.text import MAX_ERROR_BYTES
from escaler.signals.prometheus import parse_query_response
from escaler.signals.sample import Sample

# ------------------------------------------------------------------ custom provider

DECISIONS = [
    ("replicas-3", b'{"replicas": 3}', 3, None),
    ("zero", b'{"replicas": 0}', 0, None),
    ("extra-fields-ignored", b'{"replicas": 2, "reason": "ttft high", "signals": {"ttft": 900}}', 2, None),
    ("not-json", b"<html>oops</html>", None, "the body is not JSON"),
    ("array", b"[1]", None, "not a JSON object"),
    ("missing", b'{"replica": 3}', None, 'no "replicas" field'),
    ("float", b'{"replicas": 2.0}', None, "got a number that is not an integer"),
    ("string", b'{"replicas": "2"}', None, "got a string"),
    ("bool", b'{"replicas": true}', None, "got a boolean"),
    ("null", b'{"replicas": null}', None, "got null"),
    ("negative", b'{"replicas": -1}', None, "got a negative integer"),
]


@pytest.mark.parametrize(
    ("body", "replicas", "error"), [d[1:] for d in DECISIONS], ids=[d[0] for d in DECISIONS]
)
def test_custom_provider_contract(body: bytes, replicas: int | None, error: str | None) -> None:
    got = parse_decision(body)
    assert got.replicas == replicas
    if error is None:
        assert got.error is None
    else:
        assert got.error is not None and error in got.error


def test_custom_provider_errors_never_echo_the_body() -> None:
    secret = "s3cr3t-token-in-a-page"
    got = parse_decision(f'{{"replicas": "{secret}"}}'.encode())
    assert got.error is not None and secret not in got.error


def test_custom_no_decision_message_starts_as_the_spec_says() -> None:
    rr = custom_result("http://slo.example:8082/decisions/chat", CustomReading(None, "HTTP 503, 12 bytes"))
    assert rr.unavailable is not None
    assert rr.unavailable.startswith(f"{CUSTOM_SOURCE}: http://slo.example:8082/decisions/chat: HTTP 503")
    assert rr.kind == FROM_DECISION


def test_a_custom_providers_error_is_capped_at_1_kib_on_its_own() -> None:
    """The custom provider's own cap (seed 000: 1 KiB), not only the status message's: a 6 KiB
    error (a long transport error, a provider's message) keeps at most 1 KiB, cut at a character."""
    long = "é" * 3000 + "TAIL"
    reading = CustomReading(None, long)
    assert reading.error is not None and reading.error.endswith("…") and "TAIL" not in reading.error
    assert len(reading.error.encode()) <= 1024 + len("…".encode())
    rr = custom_result("http://slo.example/d", reading)
    assert rr.unavailable is not None and "TAIL" not in rr.unavailable


def test_custom_decision_received() -> None:
    rr = custom_result("http://slo.example/d", CustomReading(4))
    assert (rr.replicas, rr.kind) == (4, FROM_DECISION)
    assert rr.summary() == "received a decision from custom provider http://slo.example/d: 4 replicas"


# ------------------------------------------------------------------ Prometheus

RUNNING = PrometheusMetric(name="running", query="sum(running)", target_per_replica=8)
WAITING = PrometheusMetric(name="waiting", query="sum(waiting)", target_per_replica=2.5)

E2, E1 = "evaluated 2 of 2 metrics; recommends", "evaluated 1 of 2 metrics; recommends"
PROM_CASES: list[tuple[str, list[Sample], int | None, int, str]] = [
    ("both-usable-max-wins", [Sample(40.0), Sample(9.0)], 5, 2, f"{E2} 5 replicas"),
    ("second-wins", [Sample(8.0), Sample(11.0)], 5, 2, f"{E2} 5 replicas"),
    ("exact-multiple", [Sample(16.0), Sample(0.0)], 2, 2, f"{E2} 2 replicas"),
    ("zero-load", [Sample(0.0), Sample(0.0)], 0, 2, f"{E2} 0 replicas"),
    ("negative-is-zero", [Sample(-5.0), Sample(0.0)], 0, 2, f"{E2} 0 replicas"),
    # far below zero (a counter reset, a bad query): -40 / 8 would be -5 replicas, not a count
    ("far-negative-is-zero", [Sample(-40.0), Sample(0.0)], 0, 2, f"{E2} 0 replicas"),
    ("one-failing", [Sample.fail("HTTP 500, 20 bytes"), Sample(9.0)], 4, 1, f"{E1} 4 replicas"),
    (
        "none-usable",
        [Sample.fail("connection refused"), Sample.fail("query returned no series")],
        None,
        0,
        "Prometheus http://prom:9090: running: connection refused; waiting: query returned no series",
    ),
]


@pytest.mark.parametrize(
    ("samples", "replicas", "evaluated", "summary"),
    [c[1:] for c in PROM_CASES],
    ids=[c[0] for c in PROM_CASES],
)
def test_prometheus_every_metric_evaluated_max_of_usable(
    samples: list[Sample], replicas: int | None, evaluated: int, summary: str
) -> None:
    rr, rows = prometheus_result("http://prom:9090", [RUNNING, WAITING], samples)
    assert rr.replicas == replicas
    assert rr.kind == FROM_METRICS
    assert rr.evaluated == evaluated and rr.total == 2
    assert rr.summary() == summary
    assert [r.name for r in rows] == ["running", "waiting"]
    for row, sample in zip(rows, samples, strict=True):
        assert row.type == "Prometheus" and row.target_type == "AverageValue"
        assert (row.value is None) == (sample.value is None)
        assert (row.error is None) == (sample.error is None)


def test_a_value_far_below_zero_gives_a_clean_status_row() -> None:
    # the row keeps the value read and recommends 0 (a status row never carries a negative count)
    _, rows = prometheus_result("http://prom:9090", [RUNNING, WAITING], [Sample(-40.0), Sample(0.0)])
    assert [(r.value, r.target, r.recommended_replicas, r.error) for r in rows] == [
        (-40.0, 8.0, 0, None), (0.0, 2.5, 0, None)]


def test_prometheus_rows_carry_each_metrics_recommendation() -> None:
    _, rows = prometheus_result("http://prom:9090", [RUNNING, WAITING], [Sample(40.0), Sample(9.0)])
    assert [(r.value, r.target, r.recommended_replicas) for r in rows] == [(40.0, 8.0, 5), (9.0, 2.5, 4)]


def test_a_prometheus_error_body_over_1kib_never_reaches_a_message() -> None:
    body = ("<html>" + "x" * 4096 + "</html>").encode()
    sample = parse_query_response(502, body, where="http://prom:9090")
    assert sample.error is not None
    assert "xxxx" not in sample.error and len(sample.error.encode()) <= MAX_ERROR_BYTES
    assert "HTTP 502" in sample.error and f"{len(body)} bytes" in sample.error
    # a Prometheus error object: its error text is quoted, capped well under 1 KiB
    long_err = b'{"status": "error", "errorType": "bad_data", "error": "' + b"e" * 5000 + b'"}'
    sample = parse_query_response(400, long_err, where="http://prom:9090")
    assert sample.error is not None and len(sample.error.encode()) <= MAX_ERROR_BYTES
    rr, _ = prometheus_result("http://prom:9090", [RUNNING], [sample])
    assert rr.unavailable is not None and len(rr.unavailable.encode()) <= 2 * MAX_ERROR_BYTES


# ------------------------------------------------------------------ the recommender's cadence


class Reader:
    def __init__(self) -> None:
        self.values: dict[str, float | str] = {}
        self.decision: CustomReading = CustomReading(3)
        self.calls = 0

    def prometheus(self, endpoint: str, query: str, timeout: float) -> Sample:
        self.calls += 1
        v = self.values.get(query, "no value scripted")
        return Sample.fail(v) if isinstance(v, str) else Sample(float(v))

    def custom(self, url: str, timeout: float) -> CustomReading:
        self.calls += 1
        return self.decision


def _llm(generation: int = 1, provider: str = "Prometheus", **spec: Any) -> LLMScaler:
    return LLMScaler.parse(
        {
            "apiVersion": "llm.escaler.io/v1alpha1",
            "kind": "LLMScaler",
            "metadata": {"name": "chat", "namespace": "team", "uid": "u1", "generation": generation},
            "spec": {
                "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "metricProvider": provider,
                "prometheus": {
                    "endpoint": "http://prom.example:9090",
                    "metrics": [{"name": "running", "query": "sum(running)", "targetPerReplica": 8}],
                },
                "customProvider": {"url": "http://slo.example:8082/decisions/chat"},
                **spec,
            },
        }
    )


def _rec(
    reader: Reader | None, executor: Any = None, poll: float = 30.0, allowed: tuple[str, ...] = ()
) -> tuple[LLMRecommender, FakeClock]:
    clock = FakeClock()
    return LLMRecommender(reader, clock, ScalerMetrics(CollectorRegistry()), allowed, poll, executor), clock


def test_a_read_in_flight_is_pending_and_its_result_is_consumed_once() -> None:
    reader, mx = Reader(), ManualExecutor()
    reader.values["sum(running)"] = 40.0
    rec, _ = _rec(reader, mx)
    first = rec.recommend(_llm(), None)
    assert first.pending and reader.calls == 0
    again = rec.recommend(_llm(), first.memory)
    assert again.pending and len(mx.submitted) == 1  # one read per scaler at a time
    mx.complete(read_key("team", "chat"))
    done = rec.recommend(_llm(), again.memory)
    assert not done.pending and done.recommend.replicas == 5 and reader.calls == 1


def _to_due(clock: FakeClock, late: float = 0.0, interval: float = 30.0) -> float:
    """Step ``clock`` to the scaler team/chat's next due poll (plus ``late``); returns the due time."""
    p = phase(Request("team", "chat"), interval)
    due = (math.floor((clock.monotonic() + 1e-6 - p) / interval) + 1) * interval + p  # strictly after now
    clock.step(due + late - clock.monotonic())
    return due


def test_a_reading_is_reused_until_the_next_poll_and_a_spec_change_reads_afresh() -> None:
    reader = Reader()
    reader.values["sum(running)"] = 16.0
    rec, clock = _rec(reader)
    _to_due(clock)
    out = rec.recommend(_llm(), None)
    assert out.recommend.replicas == 2 and reader.calls == 1
    clock.step(10)
    out = rec.recommend(_llm(), out.memory)
    assert reader.calls == 1 and out.recommend.replicas == 2
    clock.step(18)  # two seconds before the next due poll: an event's sync still reuses it
    out = rec.recommend(_llm(), out.memory)
    assert reader.calls == 1
    out = rec.recommend(_llm(generation=2), out.memory)
    assert reader.calls == 2
    _to_due(clock)  # two seconds after the spec change's read: not read again so soon
    out = rec.recommend(_llm(generation=2), out.memory)
    assert reader.calls == 2
    _to_due(clock)
    rec.recommend(_llm(generation=2), out.memory)
    assert reader.calls == 3


def test_a_read_that_ran_late_does_not_make_the_next_poll_reuse_it() -> None:
    """A read submitted 8 s after its due time (a backlog in the queue) was reused by the next due
    poll under the old 80 %-of-the-interval rule (22 s < 24 s): that scaler read every 60 s."""
    reader = Reader()
    reader.values["sum(running)"] = 16.0
    rec, clock = _rec(reader)
    _to_due(clock, late=8.0)
    out = rec.recommend(_llm(), None)
    assert reader.calls == 1
    clock.step(5)  # an event's sync before the next due time reuses the late reading
    out = rec.recommend(_llm(), out.memory)
    assert reader.calls == 1
    _to_due(clock)
    rec.recommend(_llm(), out.memory)
    assert reader.calls == 2


def test_a_result_read_for_another_generation_is_dropped() -> None:
    reader, mx = Reader(), ManualExecutor()
    reader.values["sum(running)"] = 40.0
    rec, _ = _rec(reader, mx)
    rec.recommend(_llm(), None)
    mx.complete(read_key("team", "chat"))
    out = rec.recommend(_llm(generation=2), None)
    assert out.pending  # the old result is not consumed: a new read is submitted
    assert len(mx.submitted) == 2


REFUSED = [
    (
        "custom-missing",
        dict(provider="Custom", customProvider=None),
        "InvalidSpec",
        "spec.customProvider: required when metricProvider is Custom",
    ),
    (
        "prometheus-host-refused",
        {},
        "InvalidSpec",
        "spec.prometheus.endpoint: host prom.example is not in --allowed-endpoint-hosts",
    ),
    (
        "custom-host-refused",
        dict(provider="Custom"),
        "InvalidSpec",
        "spec.customProvider.url: host slo.example is not in --allowed-endpoint-hosts",
    ),
]


@pytest.mark.parametrize(
    ("spec", "_reason", "message"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_preflight_refusals_name_the_field_and_make_no_request(
    spec: dict[str, Any], _reason: str, message: str
) -> None:
    reader = Reader()
    rec, _ = _rec(reader, allowed=("*.allowed.example",))
    provider = spec.pop("provider", "Prometheus")
    out = rec.recommend(_llm(provider=provider, **spec), None)
    assert out.recommend.invalid_spec == message
    assert reader.calls == 0


def test_no_reader_is_decision_unavailable() -> None:
    rec, _ = _rec(None)
    out = rec.recommend(_llm(provider="Custom"), None)
    assert out.recommend.unavailable == f"{CUSTOM_SOURCE}: no HTTP client configured"


def test_a_full_namespace_queue_is_decision_unavailable() -> None:
    mx = ManualExecutor()
    mx.full = True
    rec, _ = _rec(Reader(), mx)
    out = rec.recommend(_llm(), None)
    assert not out.pending
    assert out.recommend.unavailable is not None
    assert "too many provider reads are queued" in out.recommend.unavailable


def test_a_failed_job_is_decision_unavailable_for_every_metric() -> None:
    class Boom(Reader):
        def prometheus(self, endpoint: str, query: str, timeout: float) -> Sample:
            raise RuntimeError("boom")

    mx = ManualExecutor()
    rec, _ = _rec(Boom(), mx)
    rec.recommend(_llm(), None)
    mx.complete(read_key("team", "chat"))
    out = rec.recommend(_llm(), None)
    assert out.recommend.unavailable is not None and "the query failed: boom" in out.recommend.unavailable


class Lookup:
    """A ``DecisionLookup``: decisions by (namespace, serviceId); records every lookup."""

    def __init__(self, answers: dict[tuple[str, str], Any]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, str]] = []

    def __call__(self, namespace: str, service_id: str) -> Any:
        self.asked.append((namespace, service_id))
        return self.answers.get((namespace, service_id),
                                f"no requirement in {namespace} defines {service_id}")


def _by_id(lookup: Lookup | None, reader: Reader | None = None,
           allowed: tuple[str, ...] = ()) -> tuple[LLMRecommender, FakeClock]:
    clock = FakeClock()
    return LLMRecommender(reader, clock, ScalerMetrics(CollectorRegistry()), allowed, 30.0,
                          decisions=lookup), clock


SERVED = [
    ("decision", {"replicas": 5, "reason": "scale up"}, 5, None),
    ("zero", {"replicas": 0}, 0, None),
    ("no-decision-yet", "serviceId chat has no decision yet", None,
     "custom provider returned no decision: serviceId chat: serviceId chat has no decision yet"),
    ("bool-replicas", {"replicas": True}, None, '"replicas" must be an integer >= 0, got a boolean'),
]


@pytest.mark.parametrize(("answer", "replicas", "error"), [s[1:] for s in SERVED], ids=[s[0] for s in SERVED])
def test_a_service_id_is_read_in_process_from_the_scalers_own_namespace(
        answer: Any, replicas: int | None, error: str | None) -> None:
    """Issue 27 item 5: customProvider.serviceId reads (scaler namespace, serviceId) and nothing else —
    no HTTP, no URL check (no --allowed-endpoint-hosts entry needed)."""
    lookup, reader = Lookup({("team", "chat"): answer, ("other", "chat"): {"replicas": 99}}), Reader()
    rec, _ = _by_id(lookup, reader, allowed=("*.allowed.example",))
    out = rec.recommend(_llm(provider="Custom", customProvider={"serviceId": "chat"}), None)
    assert lookup.asked == [("team", "chat")] and reader.calls == 0
    assert out.recommend.replicas == replicas
    if error is not None:
        assert error in (out.recommend.unavailable or "")


def test_a_service_id_without_a_decision_engine_is_unavailable_not_a_request() -> None:
    reader = Reader()
    rec, _ = _by_id(None, reader)
    out = rec.recommend(_llm(provider="Custom", customProvider={"serviceId": "chat"}), None)
    assert out.recommend.replicas is None and reader.calls == 0
    assert "spec.customProvider.serviceId: this manager has no SLO decision engine" in (
        out.recommend.unavailable or "")
