"""The decisions of the SLO decision engine, by ``(namespace, serviceId)``, and the route serving them.

A ``serviceId`` names a route **within its namespace**: two namespaces may both say
``serviceId: chat`` and never see each other (docs/slo.md, issue 27 item 5). Nothing here answers one
namespace's caller with anything of another namespace — not a decision, not a conflict, not a name.

``DecisionBook`` answers "what is the decision for this route?" in O(1) of the fleet:

* **Who defines a serviceId** is read from the informer caches of both kinds, through an index on
  ``namespace/spec.serviceId`` (``SERVICE_ID_INDEX``, added by ``setup_slo`` to each kind's informer):
  level based, so a requirement that was just created, renamed or deleted counts at once, whether or
  not its reconcile has run. ``owners(namespace, serviceId)`` lists them (kind, namespace, name, uid):
  only requirements of that namespace, so a serviceId is a conflict only when two requirements of
  **one** namespace define it.
* **What was decided** is kept in memory per requirement (``put``): the decision of its last
  reconcile, with the requirement's uid (a recreated requirement never serves its predecessor's
  decision), or why there is none (``put_problem``: an invalid spec, a target not found before
  any decision). ``forget`` drops a deleted requirement's entry. One entry per live requirement.
* The book is per process, like every controller's memory: a standby that takes over serves
  decisions once its reconciles have run (the first poll after it leads).

``Decisions.answer(namespace, serviceId)`` is the one lookup, used by the route, and in-process
(``Decisions.lookup``) by an LLMScaler whose ``customProvider.serviceId`` names a route of its own
namespace (wired by the manager; the LLMScaler's namespace is the only one it can ask for; on a
sharded manager whose other replica leads the requirement, ``lookup`` answers the decision the
requirement's cached status holds). It returns the decision body or raises
``Unavailable(status, message)``:

* ``{"replicas": n, "reason": "...", "signals": {...}, "time": "<RFC 3339>"}`` — the contract an
  LLMScaler Custom provider reads (``{"replicas": n}``; the other fields say why). A decision held
  because signals are missing is still an answer: the reason says it is held;
* 404 when no requirement of either kind in the namespace defines the serviceId;
* 409 when more than one in the namespace does ("serviceId X is defined by more than one SLO
  requirement CRs in namespace N" — the same rule and wording as the SLO API; no object is named);
* 503 while the one requirement has no decision yet (its first poll is in flight, or it cannot be
  sized: the message says why), and on a sharded manager when another replica leads the
  requirement's shard (the message names the Lease to ask).

``DecisionsAPI`` serves ``GET /decisions/v1/namespaces/{namespace}/{serviceId}`` (``DECISIONS_ROUTE``,
shaped like the signal push route) on the manager's API server. **Authenticated and authorized**:
the server's filter reviews the bearer token (TokenReview, ``escaler`` audience: 401 without a valid
one, 429 past the client's failed-authentication budget); then the handler asks a
SubjectAccessReview for ``get`` on the requirement that defines the route (``llmslorequirements`` or
``jobslorequirements`` of ``llm.escaler.io``, in that namespace, by name). A route the user may not
``get`` and a route nobody defines get **the same 404** ("... or user U may not get it"), and both
charge the user's denial budget (``RequestAuth``: past it, 429 without a review) — so the answers
tell a caller nothing about routes it may not read. A 409 comes only after the user was allowed
``get`` on every requirement defining the route. Errors use the API server's envelope
``{"error": {"code", "message"}}``.

``LEGACY_DECISIONS_ROUTE`` (``GET /decisions/{serviceId}``, the unscoped route of 0.1) answers
**410 Gone** naming the new route and the in-process ``customProvider.serviceId``, for every
serviceId, without credentials and without a lookup: it tells nothing about any route
(docs/slo.md, "Migration").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escaler.reconcilers.slo.kinds import service_id_of
from escaler.reconcilers.slo.report import INVALID_SPEC, READY, held_replicas
from escaler.runtime.apiserver import ApiError, ApiRequest, ApiResponse
from escaler.runtime.authfilter import RequestAuth
from escaler.runtime.authn import ResourceAttributes
from escaler.runtime.httpbase import HttpError
from escaler.runtime.types import Request

__all__ = ["DECISIONS_ROUTE", "LEGACY_DECISIONS_ROUTE", "SERVICE_ID_INDEX", "DecisionBook", "Decisions",
           "DecisionsAPI", "KindResource", "Owner", "Served", "Unavailable", "conflict_message",
           "gone", "route_key", "service_id_index"]

DECISIONS_ROUTE = "/decisions/v1/namespaces/{namespace}/{serviceId}"
# the unscoped route of 0.1: answers 410 naming DECISIONS_ROUTE
LEGACY_DECISIONS_ROUTE = "/decisions/{serviceId}"
# indexer on each SLO kind's informer: "namespace/spec.serviceId" → the requirements naming it
SERVICE_ID_INDEX = "escaler.io/slo-service-id"
GONE_MESSAGE = ("GET /decisions/{serviceId} is gone: a serviceId is scoped by namespace. Read "
                "GET /decisions/v1/namespaces/<namespace>/<serviceId> with a bearer token for the escaler "
                "audience allowed to get the SLO requirement, or point an LLMScaler at the route with "
                "spec.customProvider.serviceId (read in-process, no URL) — docs/slo.md, Migration")


def route_key(namespace: str, service_id: str) -> str:
    """The ``SERVICE_ID_INDEX`` value of a route: a serviceId is unique within its namespace only."""
    return f"{namespace}/{service_id}"


def service_id_index(obj: Mapping[str, Any]) -> list[str]:
    sid = service_id_of(obj)
    meta = obj.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return [route_key(ns if isinstance(ns, str) else "", sid)] if sid is not None else []


@dataclass(frozen=True, order=True)
class Owner:
    """A requirement defining a serviceId."""

    kind: str
    namespace: str
    name: str
    uid: str = field(default="", compare=False)
    # the decision its cached status holds (written by whichever replica leads it); None when none, or
    # when its Ready condition is InvalidSpec
    held: Mapping[str, Any] | None = field(default=None, compare=False)

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class Served:
    """What the route answers for one requirement."""

    # metadata.uid of the requirement the entry was computed for
    uid: str
    # the decision (``{"replicas", "reason", "signals", "time"}``); None when there is none
    body: Mapping[str, Any] | None
    # why there is no decision (body None); "" otherwise
    problem: str = ""


@dataclass(frozen=True)
class KindResource:
    """What a SubjectAccessReview names for one SLO kind."""

    group: str
    resource: str


class DecisionBook:
    """See the module docstring. Thread-safe."""

    def __init__(self) -> None:
        # guards _kinds and _entries
        self._mu = threading.Lock()
        # kind → its informer's indexer (with SERVICE_ID_INDEX); fixed after setup
        self._kinds: dict[str, Any] = {}
        # (kind, namespace, name) → the requirement's last decision or problem; dropped on delete
        self._entries: dict[tuple[str, str, str], Served] = {}

    def add_kind(self, kind: str, indexer: Any) -> None:
        with self._mu:
            self._kinds[kind] = indexer

    def owners(self, namespace: str, service_id: str) -> list[Owner]:
        """Every requirement (of every kind) in ``namespace`` whose ``spec.serviceId`` is
        ``service_id``, sorted."""
        with self._mu:
            kinds = list(self._kinds.items())
        out: list[Owner] = []
        for kind, indexer in kinds:
            for obj in indexer.by_index(SERVICE_ID_INDEX, route_key(namespace, service_id)):
                meta = obj.get("metadata") or {}
                out.append(Owner(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                                 str(meta.get("uid") or ""), _held(obj)))
        return sorted(o for o in out if o.namespace == namespace)

    def put(self, kind: str, req: Request, uid: str, body: Mapping[str, Any]) -> None:
        with self._mu:
            self._entries[(kind, req.namespace, req.name)] = Served(uid, dict(body))

    def put_problem(self, kind: str, req: Request, uid: str, problem: str) -> None:
        with self._mu:
            self._entries[(kind, req.namespace, req.name)] = Served(uid, None, problem)

    def forget(self, kind: str, req: Request) -> None:
        with self._mu:
            self._entries.pop((kind, req.namespace, req.name), None)

    def served(self, owner: Owner) -> Served | None:
        with self._mu:
            entry = self._entries.get((owner.kind, owner.namespace, owner.name))
        return entry if entry is not None and entry.uid == owner.uid else None

    def __len__(self) -> int:
        with self._mu:
            return len(self._entries)


def _held(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    status = obj.get("status")
    if not isinstance(status, Mapping) or held_replicas(status) is None:
        return None
    conditions = status.get("conditions")
    for c in conditions if isinstance(conditions, list | tuple) else ():
        if isinstance(c, Mapping) and c.get("type") == READY and c.get("reason") == INVALID_SPEC:
            return None
    decision = status.get("decision")
    return dict(decision) if isinstance(decision, Mapping) else None


def conflict_message(service_id: str, namespace: str) -> str:
    """The conflict, in the SLO API's words; it names no object (status conditions name them)."""
    return (f"serviceId {service_id} is defined by more than one SLO requirement CRs "
            f"in namespace {namespace}")


class Unavailable(Exception):
    """No decision to answer: ``status`` is the HTTP status the route answers, ``message`` why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Decisions:
    """``answer(namespace, serviceId)``: see the module docstring."""

    def __init__(self, book: DecisionBook,
                 shard_problem: Callable[[Owner], str | None] | None = None) -> None:
        # the decisions and the serviceId index; shared with the reconcilers
        self.book = book
        # on a sharded manager: why this replica does not serve the owner's decision (None = it does)
        self._shard_problem = shard_problem

    def owners(self, namespace: str, service_id: str) -> list[Owner]:
        return self.book.owners(namespace, service_id)

    def answer(self, namespace: str, service_id: str) -> Mapping[str, Any]:
        return self.answer_for(namespace, service_id, self.book.owners(namespace, service_id))

    def lookup(self, namespace: str, service_id: str) -> Mapping[str, Any] | str:
        """``answer`` as a ``DecisionLookup``: the body, or why there is none (the error message).

        In-process only: on a sharded manager, when another replica leads the requirement's shard,
        the decision its status holds (``Owner.held``, from the cache every replica keeps) stands in
        for the live one — written by that replica whenever the replica count changes."""
        owners = self.book.owners(namespace, service_id)
        if len(owners) == 1 and owners[0].held is not None and self._shard_problem is not None \
                and self._shard_problem(owners[0]) is not None:
            return dict(owners[0].held)
        try:
            return self.answer_for(namespace, service_id, owners)
        except Unavailable as exc:
            return exc.message

    def answer_for(self, namespace: str, sid: str, owners: list[Owner]) -> Mapping[str, Any]:
        if not owners:
            raise Unavailable(404, f"no LLMSLORequirement or JobSLORequirement in namespace {namespace} "
                                   f"defines serviceId {sid}")
        if len(owners) > 1:
            raise Unavailable(409, conflict_message(sid, namespace))
        owner = owners[0]
        if self._shard_problem is not None and (problem := self._shard_problem(owner)) is not None:
            raise Unavailable(503, problem)
        served = self.book.served(owner)
        if served is None:
            raise Unavailable(503, f"serviceId {sid} ({owner.describe()}) has no decision yet: its first "
                                   "signals are being read; retry shortly")
        if served.body is None:
            raise Unavailable(503, f"serviceId {sid} ({owner.describe()}) has no decision: {served.problem}")
        return dict(served.body)


class DecisionsAPI:
    """``GET /decisions/v1/namespaces/{namespace}/{serviceId}`` (see the module docstring)."""

    def __init__(self, decisions: Decisions, resources: Mapping[str, KindResource],
                 auth: RequestAuth | None = None) -> None:
        # the lookup shared with in-process readers
        self.decisions = decisions
        # SLO kind → the resource a SubjectAccessReview names; fixed
        self._resources = dict(resources)
        # the API server's filter (reviews and the per-user denial budget); None = authentication off
        self._auth = auth

    def handle(self, request: ApiRequest) -> ApiResponse:
        ns, sid = request.params["namespace"], request.params["serviceId"]
        auth, user = self._auth, request.user
        if auth is None:  # the server authenticates nobody (tests, embedding)
            return self._answer(ns, sid, self.decisions.owners(ns, sid))
        if user is None:  # fail closed: the route was registered without the server's filter
            raise ApiError(401, "a bearer token is required (Authorization: Bearer <token>)")
        hidden = ApiError(404, f"no LLMSLORequirement or JobSLORequirement in namespace {ns} defines "
                               f"serviceId {sid}, or user {user.username!r} may not get it")
        try:
            auth.check_denials(user)
            owners = self.decisions.owners(ns, sid)
            if not owners:
                auth.charge_denial(user)  # a missing route costs what a denied one does
                raise hidden
            for owner in owners:
                auth.authorize(user, self._attributes(owner))
        except HttpError as exc:
            if exc.status == 403:  # denied: answered as a route that does not exist (already charged)
                raise hidden from None
            raise ApiError(exc.status, exc.message, headers=exc.headers) from None
        return self._answer(ns, sid, owners)

    def _attributes(self, owner: Owner) -> ResourceAttributes:
        r = self._resources[owner.kind]
        return ResourceAttributes(verb="get", group=r.group, resource=r.resource,
                                  namespace=owner.namespace, name=owner.name)

    def _answer(self, ns: str, sid: str, owners: list[Owner]) -> ApiResponse:
        try:
            return ApiResponse(200, dict(self.decisions.answer_for(ns, sid, owners)))
        except Unavailable as exc:
            raise ApiError(exc.status, exc.message) from None


def gone(request: ApiRequest) -> ApiResponse:
    """``LEGACY_DECISIONS_ROUTE``: 410 for every serviceId (see the module docstring)."""
    raise ApiError(410, GONE_MESSAGE)
