"""The decisions of the SLO decision engine, by ``serviceId``, and ``GET /decisions/{serviceId}``.

``DecisionBook`` answers "what is the decision for this route?" in O(1) of the fleet:

* **Who defines a serviceId** is read from the informer caches of both kinds, through an index on
  ``spec.serviceId`` (``SERVICE_ID_INDEX``, added by ``setup_slo`` to each kind's informer): level
  based, so a requirement that was just created, renamed or deleted counts at once, whether or not
  its reconcile has run. ``owners(serviceId)`` lists them (kind, namespace, name, uid).
* **What was decided** is kept in memory per requirement (``put``): the decision of its last
  reconcile, with the requirement's uid (a recreated requirement never serves its predecessor's
  decision), or why there is none (``put_problem``: an invalid spec, a target not found before
  any decision). ``forget`` drops a deleted requirement's entry. One entry per live requirement.
* The book is per process, like every controller's memory: a standby that takes over serves
  decisions once its reconciles have run (the first poll after it leads).

``DecisionsAPI.handle`` serves ``GET /decisions/{serviceId}`` on the manager's API server:

* ``200 {"replicas": n, "reason": "...", "signals": {...}, "time": "<RFC 3339>"}`` — the contract
  an LLMScaler Custom provider reads (``{"replicas": n}``; the other fields say why). A decision
  held because signals are missing is still a 200: the reason says it is held;
* ``404 not_found`` when no requirement of either kind defines the serviceId;
* ``409 conflict`` when more than one does ("serviceId X is defined by more than one SLO requirement
  CRs"), naming them — the same rule as the SLO API;
* ``503 unavailable`` while the one requirement has no decision yet (its first poll is in flight, or
  it cannot be sized: the message says why), and on a sharded manager when another replica leads
  the requirement's shard (the message names the Lease to ask).

Errors use the API server's envelope ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escaler.reconcilers.slo.kinds import service_id_of
from escaler.runtime.apiserver import ApiError, ApiRequest, ApiResponse
from escaler.runtime.types import Request

__all__ = ["DECISIONS_ROUTE", "SERVICE_ID_INDEX", "DecisionBook", "DecisionsAPI", "Owner", "Served",
           "service_id_index"]

DECISIONS_ROUTE = "/decisions/{serviceId}"
# indexer on each SLO kind's informer: spec.serviceId → the requirements naming it
SERVICE_ID_INDEX = "escaler.io/slo-service-id"


def service_id_index(obj: Mapping[str, Any]) -> list[str]:
    sid = service_id_of(obj)
    return [sid] if sid is not None else []


@dataclass(frozen=True, order=True)
class Owner:
    """A requirement defining a serviceId."""

    kind: str
    namespace: str
    name: str
    uid: str = field(default="", compare=False)

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class Served:
    """What ``GET /decisions/{serviceId}`` answers for one requirement."""

    # metadata.uid of the requirement the entry was computed for
    uid: str
    # the decision (``{"replicas", "reason", "signals", "time"}``); None when there is none
    body: Mapping[str, Any] | None
    # why there is no decision (body None); "" otherwise
    problem: str = ""


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

    def owners(self, service_id: str) -> list[Owner]:
        """Every requirement (of every kind) whose ``spec.serviceId`` is ``service_id``, sorted."""
        with self._mu:
            kinds = list(self._kinds.items())
        out: list[Owner] = []
        for kind, indexer in kinds:
            for obj in indexer.by_index(SERVICE_ID_INDEX, service_id):
                meta = obj.get("metadata") or {}
                out.append(Owner(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                                 str(meta.get("uid") or "")))
        return sorted(out)

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


def conflict_message(service_id: str, owners: list[Owner]) -> str:
    return (f"serviceId {service_id} is defined by more than one SLO requirement CRs: "
            f"{', '.join(o.describe() for o in owners)}")


class DecisionsAPI:
    """``GET /decisions/{serviceId}`` (see the module docstring)."""

    def __init__(self, book: DecisionBook,
                 shard_problem: Callable[[Owner], str | None] | None = None) -> None:
        # the decisions and the serviceId index; shared with the reconcilers
        self._book = book
        # on a sharded manager: why this replica does not serve the owner's decision (None = it does)
        self._shard_problem = shard_problem

    def handle(self, request: ApiRequest) -> ApiResponse:
        sid = request.params["serviceId"]
        owners = self._book.owners(sid)
        if not owners:
            raise ApiError(404, f"no LLMSLORequirement or JobSLORequirement defines serviceId {sid}")
        if len(owners) > 1:
            raise ApiError(409, conflict_message(sid, owners))
        owner = owners[0]
        if self._shard_problem is not None and (problem := self._shard_problem(owner)) is not None:
            raise ApiError(503, problem)
        served = self._book.served(owner)
        if served is None:
            raise ApiError(503, f"serviceId {sid} ({owner.describe()}) has no decision yet: its first "
                                "signals are being read; retry shortly")
        if served.body is None:
            raise ApiError(503, f"serviceId {sid} ({owner.describe()}) has no decision: {served.problem}")
        return ApiResponse(200, dict(served.body))
