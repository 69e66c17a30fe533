"""Whether the manager's own account may read the metrics a companion HPA would read (issue 27, item 10).

A companion HPA (``scalingAlgorithm: HPA``) is read by the kube-controller-manager, whose account
may read every Custom and External metric; the manager's own account reads only the metrics the
``escaler-manager-metrics`` ClusterRole names (docs/security.md). Unchecked, a tenant could name
any metric in an HPA-mode scaler and read its value in the scaler's status (the HPA's
``currentMetrics`` are mirrored there): the HPA would launder the metric grants. So before the HPA
path creates or keeps a companion, it asks whether the manager itself may read each of its Custom
and External metrics in the scaler's namespace — the same metrics its own pipeline could read:

* ``MetricGrants.refusal(namespace, metrics)``: None when every Custom and External metric is
  granted, else a message naming the first one refused (its field, the rule that would grant it
  and where to add it). Resource metrics need no review (the manager's role grants
  ``metrics.k8s.io`` pods, and the HPA reads the target's own pods' CPU and memory);
* one SelfSubjectAccessReview per (namespace, group, resource, subresource, verb), shaped as the
  API server sees the manager's own read: a Custom metric ``M`` of pods is ``get`` on ``pods/M`` in
  ``custom.metrics.k8s.io`` (``.../namespaces/<ns>/pods/*/M``), an External metric ``M`` is
  ``list`` on ``M`` in ``external.metrics.k8s.io`` (``.../namespaces/<ns>/M``);
* answers cached, timed by the injected clock: a grant for ``GRANTED_TTL_S``, a refusal for
  ``REFUSED_TTL_S`` (so a grant added, or revoked, is seen within that; the HPA path requeues a
  refused scaler after ``REFUSED_TTL_S``), at most ``CACHE_SIZE`` grants and as many refusals —
  with 10,000 scalers reading the same metric the API server sees one review per namespace and TTL,
  not per sync. Each namespace holds at most its share of each (``escaler.tenantcache.TenantLRU``,
  at least ``CACHE_FLOOR``): a namespace naming thousands of distinct metrics evicts its own
  answers, never another namespace's;
* a review that cannot be made (API server unreachable, the review refused) refuses, saying so:
  the check fails closed, and is not cached.

``kube_review(rest)`` is the review port on the manager's REST client: a SelfSubjectAccessReview
needs no RBAC rule (every authenticated account may create one), and it is not a write, so it does
not go through the manager's write fence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from escaler.api.elasticscaler import MetricSourceType, MetricSpec
from escaler.clock import Clock
from escaler.errors import ConnectionFailure, StatusError
from escaler.kube.rest import RestClient
from escaler.signals.metricsapi import METRICS_CLUSTER_ROLE
from escaler.tenantcache import TenantLRU

__all__ = ["CACHE_FLOOR", "CACHE_SIZE", "GRANTED_TTL_S", "REFUSED_TTL_S", "MetricGrants", "MetricRead",
           "Review", "ReviewFailed", "kube_review", "metric_reads"]

# how long an answer is kept (seconds): a grant, a refusal
GRANTED_TTL_S = 300.0
REFUSED_TTL_S = 60.0
# answers kept at most (namespaces x distinct metrics), grants and refusals each
CACHE_SIZE = 4096
# the answers a namespace keeps however many namespaces are active
CACHE_FLOOR = 64
SELF_SUBJECT_ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
_REVIEW_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class MetricRead:
    """How the API server authorizes the manager's read of one metric in one namespace."""

    namespace: str
    group: str
    resource: str
    subresource: str
    verb: str

    def attributes(self) -> dict[str, str]:
        """The review's ``resourceAttributes``."""
        out = {"namespace": self.namespace, "group": self.group, "resource": self.resource,
               "verb": self.verb}
        if self.subresource:
            out["subresource"] = self.subresource
        return out

    def rule(self) -> str:
        """The RBAC rule that grants this read, in words."""
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} on {what} in {self.group}"


class ReviewFailed(Exception):
    """The access review could not be made (its message says why)."""


# the review port: whether the manager may make ``read`` (ReviewFailed: could not ask)
Review = Callable[[MetricRead], bool]


def metric_reads(namespace: str, metrics: Sequence[MetricSpec]) -> list[tuple[str, MetricRead]]:
    """(field path, read) of every Custom and External metric, in spec order."""
    out: list[tuple[str, MetricRead]] = []
    for i, m in enumerate(metrics):
        where = f"spec.trigger.metricsTrigger.metrics[{i}]"
        if m.type == MetricSourceType.CUSTOM and m.custom is not None:
            out.append((f"{where}.custom.metric.name",
                        MetricRead(namespace, "custom.metrics.k8s.io", "pods", m.custom.metric.name, "get")))
        elif m.type == MetricSourceType.EXTERNAL and m.external is not None:
            out.append((f"{where}.external.metric.name",
                        MetricRead(namespace, "external.metrics.k8s.io", m.external.metric.name, "", "list")))
    return out


class MetricGrants:
    """See the module docstring."""

    def __init__(self, review: Review, clock: Clock, *, granted_ttl: float = GRANTED_TTL_S,
                 refused_ttl: float = REFUSED_TTL_S, size: int = CACHE_SIZE) -> None:
        # asks the API server (kube_review)
        self._review = review
        self._clock = clock
        self._ttl = {True: granted_ttl, False: refused_ttl}
        # namespace → read → when the answer expires (clock.monotonic()); one cache per answer, so
        # a flood of refusals never evicts a grant (each TenantLRU is thread-safe)
        floor = min(CACHE_FLOOR, size)
        self._answers: dict[bool, TenantLRU[MetricRead, float]] = {
            True: TenantLRU(size, floor), False: TenantLRU(size, floor)}

    def refusal(self, namespace: str, metrics: Sequence[MetricSpec]) -> str | None:
        """None when the manager may read every Custom and External metric of ``metrics`` in
        ``namespace``; else why not (the first refused one)."""
        for where, read in metric_reads(namespace, metrics):
            try:
                allowed = self._allowed(read)
            except ReviewFailed as err:
                return (f"{where}: could not check that the manager may read this metric ({err}); "
                        "the companion HPA is not created until it can")
            if not allowed:
                return (f"{where}: the manager's account may not read {read.group} metric "
                        f"{_metric_name(read)!r} in namespace {namespace} ({read.rule()}), so a companion "
                        f"HPA may not read it either: grant it in the ClusterRole {METRICS_CLUSTER_ROLE} "
                        "(the chart's rbac.customMetrics / rbac.externalMetrics, docs/install.md)")
        return None

    def _allowed(self, read: MetricRead) -> bool:
        now = self._clock.monotonic()
        for answer in (True, False):
            expires = self._answers[answer].get(read.namespace, read)
            if expires is not None and now < expires:
                return answer
        allowed = self._review(read)  # no lock held: a slow review holds no other worker
        self._answers[allowed].put(read.namespace, read, self._clock.monotonic() + self._ttl[allowed])
        return allowed


def _metric_name(read: MetricRead) -> str:
    return read.subresource if read.group == "custom.metrics.k8s.io" else read.resource


def kube_review(rest: RestClient) -> Review:
    """The review port on the manager's REST client (module docstring)."""

    def review(read: MetricRead) -> bool:
        try:
            doc = rest.request("POST", SELF_SUBJECT_ACCESS_REVIEW_PATH, body={
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": read.attributes()}}, timeout=_REVIEW_TIMEOUT_S,
                retries=False)
        except StatusError as err:
            raise ReviewFailed(f"SelfSubjectAccessReview: {err.code} {err.message}") from err
        except ConnectionFailure as err:
            raise ReviewFailed(f"SelfSubjectAccessReview: {err}") from err
        status = doc.get("status") if isinstance(doc, dict) else None
        status = status if isinstance(status, dict) else {}
        return bool(status.get("allowed")) and not status.get("denied")

    return review
