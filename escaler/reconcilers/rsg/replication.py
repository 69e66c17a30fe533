"""GroupReplication (docs/guide/resourcescalinggroup.md): group *i* is one clone of each member's template,
``{member}-g{i}``.

One sync:

1. lists this RSG's clones from the clone caches — per member kind, one informer per namespace
   selecting ``autoscaling.openfuyao.com/rsg`` (every RSG of the namespace shares it), held in the
   ``WatchIndex`` under ``clones/<member>``, and each clone watched by name under
   ``clone/<member>/<i>`` so its changes (readiness, deletion) wake this RSG only. A clone is this
   RSG's when its rsg and member labels say so and it is controlled by this RSG's uid; a clone being
   deleted is not counted;
2. the present groups are the indices with at least one clone. More than ``spec.replicas``: the
   groups to delete are ranked (``escaler.scaling.rsg.groups_to_remove``) by the loads of
   ``scaleDown.prometheus`` (``ranking.GroupRanker``, off the reconcile worker: while the query is in
   flight the sync writes nothing) or, without a query or when it fails, highest index first; the
   ``ScaleDownRanking`` condition says which (True/LeastLoaded with the loads, True/HighestIndexFirst
   without a query, False/QueryFailed with the error);
3. waits (writes nothing) while a clone it created is not in the caches yet (``ledger.CloneLedger``
   expectations: the clone's watch event wakes it), so a lagging cache never makes it create twice;
4. writes, in order, at most ``ReplicationLimits.writes_per_sync`` clone creates plus deletes
   (``limits``): delete every clone of each removed group (background propagation, with the clone's
   uid as precondition); bring a clone of a kept group whose replicas drifted back to
   ``replicasPerGroup`` (through ``/scale``); create the missing member clones of kept groups, then
   the missing groups, lowest free index first, each member in list order (a new group is never
   split across passes). What the bound leaves is done by the next pass, requeued within
   ``PROGRESS_REQUEUE_SECONDS``: ``Ready=False/Progressing`` says how far it got ("created 16 of
   1024 groups; continuing ..."). Before creating, every member to clone is checked: a clone larger
   than ``template_bytes`` (JSON) is ``Ready=False/TemplateTooLarge`` and a member that is itself a
   clone (its cached copy has no template, ``clonecache``) is ``Ready=False/InvalidSpec``; nothing
   is created then. The creates are reserved in the namespace's ledger: beyond
   ``clones_per_namespace`` clones of every RSG of the namespace, the excess groups are refused,
   ``Ready=False/CloneLimitReached`` naming ``spec.replicas`` and the limit (looked at again every
   ``LIMIT_RECHECK_SECONDS``). The first failed write stops the sequence, is recorded
   (``Ready=False/CloneWriteFailed`` naming the clone and the API error, a Warning event) and retried
   after ``WriteBackoff`` (a 403 on a create says the namespace has not opted in: the manager's
   ClusterRole grants no workload creation, a Role per namespace does); a name taken by an object
   this RSG does not control is ``Ready=False/CloneNameTaken``.

Status: ``replicas`` = groups that exist after the writes, ``readyReplicas`` = groups whose every
member clone exists with ``replicasPerGroup`` replicas all ready, ``selector`` =
``autoscaling.openfuyao.com/rsg=<name>`` (every clone pod of every group), ``groups`` = one row per
group with a row per member clone, ``members`` = one row per member: replicas summed over its clones.

The clone caches hold clones without their templates (``clonecache.slim_clone``): nothing here
reads a clone's template.

Limitation: a clone is a copy of its template at creation. A later change of the template (a new
image) reaches groups created after it, not existing ones.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escaler.api.rsg import ResourceScalingGroup
from escaler.errors import ConnectionFailure, StatusError, is_conflict
from escaler.informers.factory import ResourceKey
from escaler.informers.frozen import FrozenDict, freeze, thaw
from escaler.reconcilers.kit.ports import KubeClient, ObjectRef
from escaler.reconcilers.rsg.backoff import WriteBackoff
from escaler.reconcilers.rsg.clones import (
    MEMBER_LABEL,
    RSG_LABEL,
    clone_name,
    clone_of,
    group_of,
    group_selector,
    is_clone,
    owned_by,
)
from escaler.reconcilers.rsg.context import READY, SCALE_DOWN_RANKING, CondSpec, EventSpec, Outcome, RSGSync
from escaler.reconcilers.rsg.ledger import CloneId, CloneLedger, Reservation
from escaler.reconcilers.rsg.limits import ReplicationLimits
from escaler.reconcilers.rsg.members import INVALID_SPEC, Interests, Member, MemberReader
from escaler.reconcilers.rsg.ranking import PENDING, GroupRanker, Loads
from escaler.scaling.rsg import groups_to_remove, indices_to_create

__all__ = ["CLONE_LIMIT_REACHED", "CLONE_NAME_TAKEN", "CLONE_WRITE_FAILED", "PROGRESSING",
           "TEMPLATE_TOO_LARGE", "ReplicationSync", "clone_key", "clone_observer"]

CLONE_WRITE_FAILED = "CloneWriteFailed"
CLONE_NAME_TAKEN = "CloneNameTaken"
CLONE_LIMIT_REACHED = "CloneLimitReached"
TEMPLATE_TOO_LARGE = "TemplateTooLarge"
PROGRESSING = "Progressing"
# a sync that stopped at the per-sync bound is continued this soon
PROGRESS_REQUEUE_SECONDS = 0.2
# while a created clone is not in the caches yet (its watch event wakes the RSG anyway)
AWAITING_RETRY_SECONDS = 0.3
# an RSG refused by the per-namespace bound looks again this often (another RSG may free clones)
LIMIT_RECHECK_SECONDS = 30.0
ALL_READY = "AllGroupsReady"
NOT_READY = "GroupsNotReady"
# a create that met a clone still being deleted is retried this soon
TERMINATING_RETRY_SECONDS = 1.0
# while a clone cache lists (a namespace's first RSG): its list may be empty, and an empty list
# delivers no event to wake the RSG, so it looks again this soon
CLONES_LISTING_RETRY_SECONDS = 0.5

_log = logging.getLogger(__name__)

_Clones = dict[tuple[str, int], FrozenDict]


def clone_key(m: Member) -> ResourceKey:
    """The clone cache of ``m``'s kind in the RSG's namespace: every RSG's clones of that kind there."""
    return ResourceKey(m.key.group, m.key.version, m.key.resource, namespace=m.key.namespace,
                       label_selector=RSG_LABEL)


def clone_observer(ledger: CloneLedger) -> Callable[[ResourceKey, Mapping[str, Any]], None]:
    """The ``WatchIndex`` observer: an event of a clone cache shows a clone, no longer awaited."""

    def observe(key: ResourceKey, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata")
        if key.label_selector == RSG_LABEL and isinstance(meta, Mapping):
            ledger.observe(key.namespace, (_resource_id(key), str(meta.get("name"))))

    return observe


def _count(obj: Mapping[str, Any], *path: str) -> int:
    node: Any = obj
    for p in path:
        node = node.get(p) if isinstance(node, Mapping) else None
    return node if isinstance(node, int) and not isinstance(node, bool) and node >= 0 else 0


@dataclass
class _Plan:
    """What this sync found and did."""

    clones: _Clones
    present: set[int]
    removed: list[int] = field(default_factory=list)
    created: list[int] = field(default_factory=list)
    events: list[EventSpec] = field(default_factory=list)
    ranking: CondSpec | None = None
    # the failure that stopped the writes: (reason, message)
    failure: tuple[str, str] | None = None
    retry_soon: bool = False
    # every clone of every RSG in the namespace the caches show
    seen: frozenset[CloneId] = frozenset()
    # clone creates + deletes this sync may still make
    budget: int = 0
    created_clones: int = 0
    deleted_clones: int = 0
    # the per-sync bound stopped the writes: the next pass continues
    more: bool = False
    # the per-namespace bound refused creates: clones counted in the namespace when refused
    capped: int | None = None


class ReplicationSync:
    """See the module docstring."""

    def __init__(self, client: KubeClient, reader: MemberReader, interests: Interests, ranker: GroupRanker,
                 may_write: Callable[[], bool], backoff: WriteBackoff, limits: ReplicationLimits,
                 ledger: CloneLedger) -> None:
        # creates and deletes clones (fenced by the manager's client); fixed
        self._client = client
        # member templates from their caches; fixed
        self._reader = reader
        # the watch roles of each RSG (clone caches, clones by name); fixed
        self._interests = interests
        # the scale-down queries, off the reconcile workers; fixed
        self._ranker = ranker
        # the manager's write fence, asked before a sync's first write; fixed
        self._may_write = may_write
        # consecutive failed syncs per RSG (shared with the reconciler); fixed
        self._backoff = backoff
        # writes per sync, clones per namespace, bytes per clone; fixed
        self._limits = limits
        # creates not in the caches yet, and the per-namespace reservations; fixed
        self._ledger = ledger

    def sync(self, s: RSGSync, members: list[Member]) -> Outcome:
        clones = self._clones(s, members)
        if clones is None:
            return Outcome.quiet(CLONES_LISTING_RETRY_SECONDS)
        seen = self._namespace_clones(s.rsg.namespace)
        if self._ledger.awaiting(s.rsg.namespace, str(s.req), seen):
            return Outcome.quiet(AWAITING_RETRY_SECONDS)
        plan = _Plan(clones, {i for (_, i) in clones}, seen=seen, budget=self._limits.writes_per_sync)
        desired = s.rsg.spec.replicas
        if len(plan.present) > desired:
            ranked = self._rank(s, plan, desired)
            if ranked is PENDING:
                return Outcome.quiet()
        else:
            self._ranker.forget(s.rsg.namespace, s.rsg.name)
        if self._needs_writes(s, members, plan) and not self._may_write():
            return Outcome.quiet()
        self._write(s, members, plan)
        return self._outcome(s, members, plan)

    # ------------------------------------------------------------------ read

    def _clones(self, s: RSGSync, members: list[Member]) -> _Clones | None:
        """This RSG's live clones by (member, index); None while a clone cache has not listed."""
        watches, uid = self._interests.watches, s.rsg.metadata.uid or ""
        out: _Clones = {}
        for m in members:
            key = clone_key(m)
            self._interests.want(s, f"clones/{m.name}", key, None)
            listed = watches.listed(key)
            if listed is None:
                return None  # an empty initial list wakes nobody: the caller looks again shortly
            for obj in listed:
                labels = (obj.get("metadata") or {}).get("labels") or {}
                i = group_of(obj)
                if (i is None or labels.get(RSG_LABEL) != s.rsg.name or labels.get(MEMBER_LABEL) != m.name
                        or not owned_by(obj, uid) or (obj.get("metadata") or {}).get("deletionTimestamp")):
                    continue
                out[(m.name, i)] = obj
        for i in range(max([s.rsg.spec.replicas - 1, *(i for (_, i) in out)], default=-1) + 1):
            for m in members:  # watched by name: a clone's changes wake this RSG, created or not
                self._interests.want(s, f"clone/{m.name}/{i}", clone_key(m), clone_name(m.name, i))
        return out

    def _namespace_clones(self, namespace: str) -> frozenset[CloneId]:
        """Every clone of every RSG in ``namespace`` in the clone caches held for it (any kind)."""
        watches, out = self._interests.watches, set()
        for key in list(watches.keys()):
            if key.namespace != namespace or key.label_selector != RSG_LABEL:
                continue
            for obj in watches.listed(key) or ():
                if is_clone(obj):
                    out.add((_resource_id(key), str((obj.get("metadata") or {}).get("name"))))
        return frozenset(out)

    def _rank(self, s: RSGSync, plan: _Plan, desired: int) -> object:
        sd = s.rsg.spec.scale_down
        prom = sd.prometheus if sd is not None else None
        if prom is None:
            plan.removed = groups_to_remove(plan.present, desired, None)
            plan.ranking = CondSpec(SCALE_DOWN_RANKING, "True", "HighestIndexFirst",
                                    f"no scaleDown.prometheus: removing the highest-index groups first "
                                    f"(group {_join(plan.removed)})")
            return plan.removed
        loads = self._ranker.loads(s.rsg, prom, plan.present)
        if loads is PENDING:
            return PENDING
        assert isinstance(loads, Loads)
        if loads.error is not None:
            plan.removed = groups_to_remove(plan.present, desired, None)
            plan.ranking = CondSpec(SCALE_DOWN_RANKING, "False", "QueryFailed",
                                    f"scaleDown.prometheus query failed: {loads.error}; removing the "
                                    f"highest-index groups first (group {_join(plan.removed)})")
            return plan.removed
        plan.removed = groups_to_remove(plan.present, desired, loads.values)
        shown = ", ".join(f"{i}={loads.values.get(i, 0.0):g}" for i in sorted(plan.present))
        plan.ranking = CondSpec(SCALE_DOWN_RANKING, "True", "LeastLoaded",
                                f"scaleDown.prometheus loads by group: {shown}; removing the least loaded "
                                f"first (group {_join(plan.removed)})")
        return plan.removed

    def _needs_writes(self, s: RSGSync, members: list[Member], plan: _Plan) -> bool:
        if plan.removed or len(plan.present) < s.rsg.spec.replicas:
            return True
        return any((obj := plan.clones.get((m.name, i))) is None
                   or _count(obj, "spec", "replicas") != m.per_group for i in plan.present for m in members)

    # ------------------------------------------------------------------ write

    def _write(self, s: RSGSync, members: list[Member], plan: _Plan) -> None:
        for i in plan.removed:
            for m in reversed(members):
                obj = plan.clones.get((m.name, i))
                if obj is None:
                    continue
                if plan.budget <= 0:
                    plan.more = True
                    return
                del plan.clones[(m.name, i)]
                plan.budget -= 1
                plan.deleted_clones += 1
                if not self._delete(s, m, obj, plan):
                    return
            plan.present.discard(i)
            plan.events.append(EventSpec("Normal", "DeletedGroup", "DeleteGroup", f"deleted group {i}"))
        for i in sorted(plan.present):
            for m in members:
                if not self._repair(s, m, i, plan):
                    return
        self._create_missing(s, members, plan)

    def _create_missing(self, s: RSGSync, members: list[Member], plan: _Plan) -> None:
        """Missing clones of kept groups, then new groups: within the per-sync and namespace bounds."""
        units: list[list[tuple[Member, int]]] = [[(m, i)] for i in sorted(plan.present) for m in members
                                                 if (m.name, i) not in plan.clones]
        units += [[(m, i) for m in members] for i in indices_to_create(plan.present, s.rsg.spec.replicas)]
        if not units:
            return
        if plan.budget <= 0:
            plan.more = True
            return
        batch = _take(units, plan.budget, at_least_one=True)
        plan.more = len(batch) < len(units)
        if not self._clonable(s, {m.name: m for unit in batch for m, _ in unit}.values(), plan):
            plan.more = False
            return
        ns = s.rsg.namespace
        with self._ledger.reserve(ns, str(s.req), plan.seen, sum(len(u) for u in batch)) as r:
            granted = _take(batch, r.granted, at_least_one=False)
            if len(granted) < len(batch):
                plan.capped, plan.more = r.used, False
            for unit in granted:
                for m, i in unit:
                    if not self._create(s, m, i, plan, r):
                        return
                i = unit[0][1]
                if i not in plan.present:
                    plan.present.add(i)
                    plan.created.append(i)
                    plan.events.append(EventSpec("Normal", "CreatedGroup", "CreateGroup",
                                                 f"created group {i}"))

    def _clonable(self, s: RSGSync, members: Iterable[Member], plan: _Plan) -> bool:
        """Every member to clone has a template that is not a clone and makes a clone within the size."""
        limit = self._limits.template_bytes
        for m in members:
            template = self._reader.template(s, m)
            if template is None:
                continue  # _create reports it
            where = f"{m.field()}: {m.describe(s.rsg.namespace)}"
            if is_clone(template):
                plan.failure = (INVALID_SPEC, f"{where} is itself a clone of a ResourceScalingGroup; "
                                              "name the original workload as the member")
                return False
            size = len(json.dumps(clone_of(thaw(template), s.rsg, m.name, 0, m.per_group),
                                  separators=(",", ":")))
            if size > limit:
                message = (f"{where} makes clones of {size} bytes (JSON), above the {limit} bytes a "
                           "GroupReplication clone may be (the manager's --max-clone-template-bytes); "
                           "no clone is created")
                plan.failure = (TEMPLATE_TOO_LARGE, message)
                plan.events.append(EventSpec("Warning", TEMPLATE_TOO_LARGE, "CreateGroup", message))
                return False
        return True

    def _delete(self, s: RSGSync, m: Member, obj: FrozenDict, plan: _Plan) -> bool:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        try:
            self._client.delete(m.mapping, name, s.rsg.namespace, propagation_policy="Background",
                                preconditions_uid=str(meta.get("uid") or "") or None)
        except StatusError as err:
            if err.code == 404:
                return True
            return self._failed(s, m, f"deleting {m.describe(s.rsg.namespace, name)}", err, plan)
        except (ConnectionFailure, OSError) as err:
            return self._failed(s, m, f"deleting {m.describe(s.rsg.namespace, name)}", err, plan)
        return True

    def _repair(self, s: RSGSync, m: Member, i: int, plan: _Plan) -> bool:
        """A kept clone whose replicas drifted, back to ``replicasPerGroup`` (missing: _create_missing)."""
        obj = plan.clones.get((m.name, i))
        if obj is None:
            return True
        if _count(obj, "spec", "replicas") == m.per_group:
            return True
        name = clone_name(m.name, i)
        what = f"scaling {m.describe(s.rsg.namespace, name)} to {m.per_group} replicas"
        try:
            snap = m.handler.read(s.rsg.namespace, ObjectRef(m.ref.api_version, m.ref.kind, name))
            m.handler.write_replicas(snap, m.per_group)
        except StatusError as err:
            if is_conflict(err):
                plan.retry_soon = True
                return False
            return self._failed(s, m, what, err, plan)
        except Exception as err:  # TargetUnreadable, connection failures
            return self._failed(s, m, what, err, plan)
        return True

    def _create(self, s: RSGSync, m: Member, i: int, plan: _Plan, reservation: Reservation) -> bool:
        template = self._reader.template(s, m)
        name = clone_name(m.name, i)
        if template is None:
            return self._failed(s, m, f"creating {name}: the template is gone", ValueError("not found"), plan)
        obj = clone_of(thaw(template), s.rsg, m.name, i, m.per_group)
        try:
            created = self._client.create(m.mapping, obj, s.rsg.namespace)
        except StatusError as err:
            if err.code == 409:
                return self._taken(s, m, name, plan)
            what = f"creating {m.describe(s.rsg.namespace, name)}"
            if err.code == 403:
                what += (f" (namespace {s.rsg.namespace} has not opted in to GroupReplication: the manager "
                         f"may create {m.mapping.resource} only where a Role grants it, "
                         "manifests/rbac/group-replication.yaml)")
            return self._failed(s, m, what, err, plan)
        except (ConnectionFailure, OSError) as err:
            return self._failed(s, m, f"creating {m.describe(s.rsg.namespace, name)}", err, plan)
        reservation.created((_resource_id(m.key), name))
        plan.created_clones += 1
        plan.clones[(m.name, i)] = freeze(created)
        _log.info("ResourceScalingGroup %s: created %s", s.req, name)
        return True

    def _taken(self, s: RSGSync, m: Member, name: str, plan: _Plan) -> bool:
        """A create met an existing object: ours being deleted (retry soon), or someone else's."""
        mine = self._interests.watches.cached(clone_key(m), s.rsg.namespace, name)
        if mine is not None and owned_by(mine, s.rsg.metadata.uid or ""):
            plan.retry_soon = True
            return False
        plan.failure = (CLONE_NAME_TAKEN, f"{m.field()}: {m.describe(s.rsg.namespace, name)} already "
                                          "exists and is not a clone of this ResourceScalingGroup; rename "
                                          "the member or delete that object")
        return False

    def _failed(self, s: RSGSync, m: Member, what: str, err: Exception, plan: _Plan) -> bool:
        message = f"{m.field()}: {what} failed: {err}"
        plan.failure = (CLONE_WRITE_FAILED, message)
        plan.events.append(EventSpec("Warning", CLONE_WRITE_FAILED, "WriteClone", message))
        return False

    # ------------------------------------------------------------------ report

    def _outcome(self, s: RSGSync, members: list[Member], plan: _Plan) -> Outcome:
        groups, ready_groups = _group_rows(s.rsg, members, plan)
        rows = [_member_row(s.rsg.spec.replicas, m, plan) for m in members]
        out = Outcome(replicas=len(plan.present), ready_replicas=ready_groups,
                      selector=group_selector(s.rsg.name), members=rows, groups=groups, events=plan.events)
        if plan.ranking is not None:
            out.conditions.append(plan.ranking)
        if plan.retry_soon:
            out.requeue_after = TERMINATING_RETRY_SECONDS
        if plan.failure is not None:
            delay = self._backoff.failed(s.req)
            out.requeue_after = out.requeue_after or delay
            out.conditions.append(CondSpec(READY, "False", plan.failure[0], f"{plan.failure[1]}; retrying in "
                                                                            f"{out.requeue_after:g}s"))
            return out
        self._backoff.succeeded(s.req)
        want = s.rsg.spec.replicas
        if plan.capped is not None:
            limit = self._limits.clones_per_namespace
            out.requeue_after = LIMIT_RECHECK_SECONDS
            out.conditions.append(CondSpec(READY, "False", CLONE_LIMIT_REACHED, (
                f"spec.replicas: {want} groups of {len(members)} members need {want * len(members)} clones, "
                f"and namespace {s.rsg.namespace} may hold at most {limit} clones of ResourceScalingGroups "
                f"(the manager's --max-clones-per-namespace; {plan.capped} there now): {len(plan.present)} "
                f"groups exist, the other {max(0, want - len(plan.present))} are refused")))
            return out
        if plan.more:
            out.requeue_after = PROGRESS_REQUEUE_SECONDS
            bound = self._limits.writes_per_sync
            done = (f"created {len(plan.present)} of {want} groups" if len(plan.present) < want else
                    f"deleted {plan.deleted_clones} clones, {len(plan.present)} groups left for {want}")
            out.conditions.append(CondSpec(READY, "False", PROGRESSING,
                                           f"{done}; continuing (at most {bound} clone creates and deletes "
                                           "per sync)"))
            return out
        if len(plan.present) == want and ready_groups >= want:
            out.conditions.append(CondSpec(READY, "True", ALL_READY,
                                           f"{ready_groups} of {want} groups ready"))
        else:
            waiting = [f"group {g['index']}" for g in groups if not g["ready"]]
            out.conditions.append(CondSpec(READY, "False", NOT_READY, f"{ready_groups} of {want} groups ready"
                                           + (f"; not ready: {', '.join(waiting)}" if waiting else "")))
        return out


def _member_row(groups: int, m: Member, plan: _Plan) -> dict[str, Any]:
    """A member's replicas summed over its clones."""
    mine = [o for (n, _), o in plan.clones.items() if n == m.name]
    return {"name": m.name, "desiredReplicas": groups * m.per_group,
            "replicas": sum(_count(o, "spec", "replicas") for o in mine),
            "readyReplicas": sum(_count(o, "status", "readyReplicas") for o in mine)}


def _group_rows(rsg: ResourceScalingGroup, members: list[Member],
                plan: _Plan) -> tuple[list[dict[str, Any]], int]:
    rows, ready_groups = [], 0
    for i in sorted(plan.present):
        mrows = []
        for m in members:
            obj = plan.clones.get((m.name, i))
            replicas = _count(obj, "spec", "replicas") if obj is not None else 0
            ready_n = _count(obj, "status", "readyReplicas") if obj is not None else 0
            mrows.append({"name": m.name, "workload": clone_name(m.name, i), "replicas": replicas,
                          "readyReplicas": ready_n,
                          "ready": obj is not None and replicas == m.per_group and ready_n >= m.per_group})
        ready = all(r["ready"] for r in mrows)
        ready_groups += ready
        rows.append({"index": i, "ready": ready, "members": mrows})
    return rows, ready_groups


def _resource_id(key: ResourceKey) -> str:
    return f"{key.group}/{key.resource}"


def _take(units: list[list[tuple[Member, int]]], limit: int,
          at_least_one: bool) -> list[list[tuple[Member, int]]]:
    """The leading units (a clone, or a whole new group) whose clones add up to at most ``limit``;
    with ``at_least_one`` the first unit even if it alone is larger."""
    out: list[list[tuple[Member, int]]] = []
    total = 0
    for unit in units:
        if total + len(unit) > limit and not (at_least_one and not out):
            break
        out.append(unit)
        total += len(unit)
    return out


def _join(indices: list[int]) -> str:
    return ", ".join(str(i) for i in indices)
