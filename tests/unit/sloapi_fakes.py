"""Fakes of the SLO API unit tests: an in-memory cluster of the two SLO kinds, and an authenticator.

* ``FakeSLOCluster``: one ``FakeAPI`` per plural (so a relist of one kind is that kind's alone),
  a probe answering per kind (present / 404 / an error), and a writer that applies a JSON merge
  patch like the API server: the merged spec is validated with the project's pydantic model and
  its ``RULES`` (what the CRD's schema and CEL say), and a refusal is a ``StatusError(422)``
  whose message names the CR (as the real one does) and whose ``details.causes`` carry the field
  paths. ``fail_next_write`` scripts other failures.
* ``start_service``: index (FakeClock) + service + ``TestClient``, started and synced.
* ``FakeAuthenticator``: tokens → users; ``allow`` holds (user, verb, plural, namespace, name)
  patterns (``"*"`` matches anything).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi.testclient import TestClient
from pydantic import ValidationError

from escaler.api.rules import validate
from escaler.api.slo import JobSLORequirementSpec, LLMSLORequirementSpec
from escaler.clock import FakeClock
from escaler.errors import StatusError
from escaler.informers.shared import SharedInformer
from escaler.runtime.authfilter import FailureLimiter, RequestAuth
from escaler.runtime.authn import AccessDecision, Attributes, ResourceAttributes, UserInfo
from escaler.sloapi.app import create_app
from escaler.sloapi.index import SERVICE_ID_INDEX, SLOIndex, service_id_index
from escaler.sloapi.kinds import GROUP, JOB, KINDS, LLM, VERSION, SLOKind
from escaler.sloapi.service import SLOService
from escaler.sloapi.translate import merge
from tests.unit.fakeapi import FakeAPI, wait_until

PROMQL_TTFT = 'histogram_quantile(0.9, sum by (le) (rate(ttft_bucket{svc="chat"}[1m])))'
PROMQL_OTPS = 'avg(otps{svc="chat"})'
PROMQL_QUEUE = 'sum(queue_depth{svc="batch-embed"})'

_MODELS = {"llm": LLMSLORequirementSpec, "job": JobSLORequirementSpec}


def llm_slo(name: str, sid: str, namespace: str = "team-a", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "serviceId": sid, "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"},
        "ttft": {"targetMs": 800, "percentile": 90, "promql": PROMQL_TTFT},
        "otps": {"target": 20, "promql": PROMQL_OTPS},
        "bounds": {"min": {"type": "replica", "value": 1}, "max": {"type": "replica", "value": 8}},
    }
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": LLM.kind,
            "metadata": {"name": name, "namespace": namespace}, "spec": {k: v for k, v in body.items()
                                                                        if v is not None}}


def job_slo(name: str, sid: str, namespace: str = "team-b", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "serviceId": sid, "queue": {"maxDepth": 200, "promql": PROMQL_QUEUE},
        "bounds": {"min": {"type": "concurrency", "value": 0}, "max": {"type": "replica", "value": 4}},
    }
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": JOB.kind,
            "metadata": {"name": name, "namespace": namespace}, "spec": {k: v for k, v in body.items()
                                                                        if v is not None}}


def _camel_loc(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc)


class FakeSLOCluster:
    """See the module docstring."""

    def __init__(self, objects: Sequence[dict[str, Any]] = (), *,
                 present: Mapping[str, bool] | None = None) -> None:
        self.apis = {k.name: FakeAPI([o for o in objects if o["kind"] == k.kind]) for k in KINDS}
        # kind name → True (served) / False (404) / an exception to raise
        self.present: dict[str, Any] = {k.name: True for k in KINDS} | dict(present or {})
        self.writes: list[tuple[str, str, str, dict[str, Any]]] = []
        self.write_faults: list[BaseException] = []
        self.probes = 0
        self._mu = threading.Lock()

    def informer_for(self, kind: SLOKind, clock: FakeClock) -> SharedInformer:
        return SharedInformer(self.apis[kind.name], name=kind.plural, clock=clock,
                              indexers={SERVICE_ID_INDEX: service_id_index})

    def probe(self, kind: SLOKind) -> bool:
        with self._mu:
            self.probes += 1
            answer = self.present[kind.name]
        if isinstance(answer, BaseException):
            raise answer
        return bool(answer)

    def fail_next_write(self, exc: BaseException) -> None:
        self.write_faults.append(exc)

    def patch(self, kind: SLOKind, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        with self._mu:
            self.writes.append((kind.name, namespace, name, patch))
            if self.write_faults:
                raise self.write_faults.pop(0)
        api = self.apis[kind.name]
        current = api.get(f"{namespace}/{name}")
        if current is None:
            raise StatusError(404, "NotFound", f'{kind.plural}.{GROUP} "{name}" not found')
        merged = merge(current, patch)
        causes = self._causes(kind, merged.get("spec") or {})
        if causes:
            raise StatusError(422, "Invalid", f'{kind.kind}.{GROUP} "{name}" is invalid: '
                              + ", ".join(f"{c['field']}: {c['message']}" for c in causes),
                              {"name": name, "group": GROUP, "kind": kind.kind, "causes": causes})
        return api.update(merged)

    @staticmethod
    def _causes(kind: SLOKind, spec: Mapping[str, Any]) -> list[dict[str, str]]:
        try:
            model = _MODELS[kind.name].model_validate(spec)
        except ValidationError as exc:
            return [{"reason": "FieldValueInvalid", "message": e["msg"],
                     "field": "spec." + _camel_loc(e["loc"])} for e in exc.errors()]
        return [{"reason": "FieldValueInvalid", "message": f"Invalid value: {e.message}",
                 "field": e.path} for e in validate(model, "spec", admission=True)]


@dataclass
class FakeAuthenticator:
    """Tokens → users; ``allow``: (username, verb, plural, namespace, name) with ``*`` wildcards."""

    tokens: dict[str, UserInfo] = field(default_factory=dict)
    allow: set[tuple[str, str, str, str, str]] = field(default_factory=set)
    reviews: list[tuple[str, str]] = field(default_factory=list)

    def authenticate(self, token: str) -> UserInfo | None:
        return self.tokens.get(token)

    def authorize(self, user: UserInfo, attributes: Attributes) -> AccessDecision:
        assert isinstance(attributes, ResourceAttributes)
        assert attributes.group == GROUP
        self.reviews.append((user.username, attributes.describe()))
        want = (user.username, attributes.verb, attributes.resource, attributes.namespace, attributes.name)
        for rule in self.allow:
            if all(r in ("*", w) for r, w in zip(rule, want, strict=True)):
                return AccessDecision(True)
        return AccessDecision(False, "no RBAC rule allows it")


@dataclass
class Running:
    cluster: FakeSLOCluster
    clock: FakeClock
    index: SLOIndex
    service: SLOService
    client: TestClient
    stop: threading.Event


@contextmanager
def start_service(cluster: FakeSLOCluster, *, auth: FakeAuthenticator | None = None,
                  wait_ready: bool = True, max_body_bytes: int = 64 * 1024,
                  trusted_proxies: tuple[Any, ...] = (), peer: str = "testclient") -> Iterator[Running]:
    clock = FakeClock()
    index = SLOIndex(lambda k: cluster.informer_for(k, clock), cluster.probe, clock=clock)
    request_auth = (RequestAuth(auth, FailureLimiter(clock=clock), name="slo-api") if auth is not None
                    else None)
    service = SLOService(index, cluster, request_auth, trusted_proxies)
    stop = threading.Event()
    thread = index.start(stop)
    try:
        if wait_ready:
            wait_until(index.ready, what="SLO index ready")
        client = TestClient(create_app(service, max_body_bytes=max_body_bytes), raise_server_exceptions=False,
                            client=(peer, 50000))
        yield Running(cluster, clock, index, service, client, stop)
    finally:
        stop.set()
        thread.join(5)
