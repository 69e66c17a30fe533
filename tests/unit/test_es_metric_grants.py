"""A companion HPA reads no metric the manager's own account may not read (issue 27, item 10):
``escaler.reconcilers.elasticscaler.grants``."""

from __future__ import annotations

from typing import Any

import pytest
from es_fakes import cpu_metric, external_metric

from escaler.api.elasticscaler import MetricSpec
from escaler.clock import FakeClock
from escaler.errors import ConnectionFailure, StatusError
from escaler.reconcilers.elasticscaler.grants import (
    GRANTED_TTL_S,
    REFUSED_TTL_S,
    MetricGrants,
    MetricRead,
    ReviewFailed,
    kube_review,
)


def custom(name: str) -> dict[str, Any]:
    return {"type": "Custom", "custom": {"metric": {"name": name},
                                         "target": {"type": "AverageValue", "averageValue": "5"}}}


def specs(*ms: dict[str, Any]) -> list[MetricSpec]:
    return [MetricSpec.model_validate(m) for m in ms]


class Reviews:
    """The review port: records each read asked, answers from ``allowed``."""

    def __init__(self, allowed: set[str], fail: bool = False) -> None:
        self.allowed, self.fail, self.asked = allowed, fail, list[MetricRead]()

    def __call__(self, read: MetricRead) -> bool:
        self.asked.append(read)
        if self.fail:
            raise ReviewFailed("SelfSubjectAccessReview: connection refused")
        return (read.subresource or read.resource) in self.allowed


def test_resource_metrics_need_no_review() -> None:
    reviews = Reviews(set())
    assert MetricGrants(reviews, FakeClock()).refusal("ns", specs(cpu_metric())) is None
    assert reviews.asked == []


def test_each_read_is_reviewed_as_the_api_server_sees_the_managers_own() -> None:
    reviews = Reviews({"waiting", "queue"})
    grants = MetricGrants(reviews, FakeClock())
    assert grants.refusal("team-a", specs(custom("waiting"), external_metric("queue"))) is None
    assert [r.attributes() for r in reviews.asked] == [
        {"namespace": "team-a", "group": "custom.metrics.k8s.io", "resource": "pods",
         "subresource": "waiting", "verb": "get"},
        {"namespace": "team-a", "group": "external.metrics.k8s.io", "resource": "queue", "verb": "list"},
    ]


def test_a_refused_metric_is_named_with_its_field_and_where_to_grant_it() -> None:
    grants = MetricGrants(Reviews({"queue"}), FakeClock())
    message = grants.refusal("team-a", specs(external_metric("queue"), external_metric("secret")))
    assert message is not None
    assert message.startswith("spec.trigger.metricsTrigger.metrics[1].external.metric.name: ")
    assert "'secret'" in message and "namespace team-a" in message
    assert "list on secret in external.metrics.k8s.io" in message
    assert "escaler-manager-metrics" in message


def test_answers_are_cached_per_namespace_for_their_ttl() -> None:
    clock = FakeClock()
    reviews = Reviews({"queue"})
    grants = MetricGrants(reviews, clock)
    for _ in range(100):  # a fleet of scalers on the same metrics: one review each
        grants.refusal("a", specs(external_metric("queue")))
        grants.refusal("a", specs(external_metric("secret")))
    assert len(reviews.asked) == 2
    grants.refusal("b", specs(external_metric("queue")))  # another namespace is another question
    assert len(reviews.asked) == 3
    # a grant added is seen once the refusal expires; a grant revoked once the grant expires
    reviews.allowed = {"secret"}
    clock.step(REFUSED_TTL_S + 1)
    assert grants.refusal("a", specs(external_metric("secret"))) is None
    assert grants.refusal("a", specs(external_metric("queue"))) is None  # still cached as granted
    clock.step(GRANTED_TTL_S)
    assert grants.refusal("a", specs(external_metric("queue"))) is not None


def test_a_review_that_fails_refuses_and_is_not_cached() -> None:
    reviews = Reviews({"queue"}, fail=True)
    grants = MetricGrants(reviews, FakeClock())
    message = grants.refusal("a", specs(external_metric("queue")))
    assert message is not None and "could not check" in message and "connection refused" in message
    reviews.fail = False
    assert grants.refusal("a", specs(external_metric("queue"))) is None
    assert len(reviews.asked) == 2


class Rest:
    def __init__(self, answer: Any) -> None:
        self.answer, self.calls = answer, list[tuple[str, str, Any]]()

    def request(self, method: str, path: str, **kw: Any) -> Any:
        self.calls.append((method, path, kw.get("body")))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(("status", "allowed"), [
    ({"allowed": True}, True), ({"allowed": False}, False), ({"allowed": True, "denied": True}, False),
    ({}, False),
])
def test_kube_review_posts_a_self_subject_access_review(status: dict[str, Any], allowed: bool) -> None:
    rest = Rest({"status": status})
    read = MetricRead("a", "external.metrics.k8s.io", "queue", "", "list")
    assert kube_review(rest)(read) is allowed  # type: ignore[arg-type]
    method, path, body = rest.calls[0]
    assert (method, path) == ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
    assert body == {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": read.attributes()}}


@pytest.mark.parametrize("error", [StatusError(500, "boom"), ConnectionFailure("refused")])
def test_kube_review_failures_are_review_failed(error: Exception) -> None:
    with pytest.raises(ReviewFailed):
        kube_review(Rest(error))(MetricRead("a", "external.metrics.k8s.io", "q", "", "list"))  # type: ignore[arg-type]


def test_a_namespace_naming_thousands_of_metrics_does_not_evict_anothers_answers() -> None:
    """Namespace A's scalers name ten times the cache's size of distinct metrics (granted and refused);
    namespace B's answers stay cached (no second review), and the caches stay bounded."""
    reviews = Reviews({"queue"} | {f"m{i}" for i in range(0, 640, 2)})
    grants = MetricGrants(reviews, FakeClock(), size=64)
    assert grants.refusal("b", specs(external_metric("queue"))) is None
    assert grants.refusal("b", specs(external_metric("secret"))) is not None
    for i in range(10 * 64):
        grants.refusal("a", specs(external_metric(f"m{i}")))
    reviews.asked.clear()
    assert grants.refusal("b", specs(external_metric("queue"))) is None
    assert grants.refusal("b", specs(external_metric("secret"))) is not None
    assert reviews.asked == [], f"namespace A evicted {len(reviews.asked)} of namespace B's 2 answers"
    assert all(cache.weight <= 64 for cache in grants._answers.values())
