"""The ResourceScalingGroup reconciler (docs/guide/resourcescalinggroup.md): level-based, one RSG per
reconcile.

A reconcile reads the RSG from its informer cache and converges, never trusting the event that
woke it::

    load      the cached object → ResourceScalingGroup (pydantic) and its rules
              (``escaler.api.rules.validate``); else Ready=False/InvalidSpec naming the field and rule
    claim     every workload it writes (``claims.rsg_targets``) must be won in the cross-kind binding
              index (oldest claimant wins; an HPA escaler does not own is a conflict too); else
              Ready=False/TargetConflict naming the member, the workload and the winner — nothing is
              written
    members   each member resolved, watched and read from its cache (``members.MemberReader``: 0 GETs)
    strategy  ``inplace.InplaceSync`` or ``replication.ReplicationSync``
    report    ``report.Reporter``: status only when it changed, events

and requeues when its answer can change by itself (a failed write's backoff). Watch roles the sync
no longer asked for are dropped at its end (``members.Interests``); a deleted RSG releases all its
watches, its backoff and its pending ranking query. Its clones go with it through their
ownerReferences (the garbage collector), not through this reconciler.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from escaler.api.meta import ObjectMeta
from escaler.api.rsg import ResourceScalingGroup, Strategy
from escaler.api.rules import validate
from escaler.clock import Clock
from escaler.informers.frozen import FrozenDict, freeze
from escaler.reconcilers.kit.bindings import TargetBindings, claim_of
from escaler.reconcilers.kit.ports import EventSink, HandlerLookup, KubeClient, Mapper, ObjectStore
from escaler.reconcilers.kit.watchindex import WatchIndex
from escaler.reconcilers.rsg.backoff import WriteBackoff
from escaler.reconcilers.rsg.claims import member_targets
from escaler.reconcilers.rsg.context import SCALE_DOWN_RANKING, Outcome, RSGSync
from escaler.reconcilers.rsg.inplace import InplaceSync
from escaler.reconcilers.rsg.ledger import CloneLedger
from escaler.reconcilers.rsg.limits import ReplicationLimits
from escaler.reconcilers.rsg.members import INVALID_SPEC, Interests, MemberReader
from escaler.reconcilers.rsg.ranking import GroupRanker
from escaler.reconcilers.rsg.replication import ReplicationSync
from escaler.reconcilers.rsg.report import Reporter
from escaler.runtime.fence import WriteGate
from escaler.runtime.types import Request, Result

__all__ = ["TARGET_CONFLICT", "RSGDeps", "RSGReconciler"]

TARGET_CONFLICT = "TargetConflict"
# a conflict is looked at again this often (the winner's deletion does not always wake us)
CONFLICT_RECHECK_SECONDS = 30.0

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RSGDeps:
    """Everything the reconciler talks to; ``setup_rsg`` wires the manager's own."""

    # the RSG informer cache
    rsgs: ObjectStore
    client: KubeClient
    mapper: Mapper
    handlers: HandlerLookup
    recorder: EventSink
    clock: Clock
    bindings: TargetBindings
    watches: WatchIndex
    ranker: GroupRanker
    # the manager's write fence (anything with is_set()); None = always allowed
    can_write: WriteGate | None = None
    backoff: WriteBackoff | None = None
    # GroupReplication's bounds (per sync, per namespace, per clone); None = the defaults
    limits: ReplicationLimits | None = None
    # GroupReplication's create expectations and namespace reservations (``watches`` feeds it
    # through ``replication.clone_observer``); None = a new one of ``limits.clones_per_namespace``
    ledger: CloneLedger | None = None


class RSGReconciler:
    """See the module docstring. Thread-safe: the workqueue never runs one key twice at once."""

    def __init__(self, deps: RSGDeps) -> None:
        # collaborators; fixed
        self._d = deps
        # the watch roles each RSG holds (members, clone caches, clones by name)
        self.interests = Interests(deps.watches)
        # status (only when changed) and events
        self.reporter = Reporter(deps.client, deps.mapper, deps.recorder)
        # resolves and reads members from their caches
        self._reader = MemberReader(deps.mapper, deps.handlers, self.interests)
        # consecutive failed syncs per RSG → retry delay
        self.backoff = deps.backoff if deps.backoff is not None else WriteBackoff()
        # one helper per strategy (each module's docstring states its contract)
        self._inplace = InplaceSync(self._may_write, self.backoff)
        limits = deps.limits if deps.limits is not None else ReplicationLimits()
        # GroupReplication creates not in the caches yet, and the per-namespace bound (every RSG shares it)
        self.ledger = deps.ledger if deps.ledger is not None else CloneLedger(limits.clones_per_namespace,
                                                                              deps.clock)
        self._replication = ReplicationSync(deps.client, self._reader, self.interests, deps.ranker,
                                            self._may_write, self.backoff, limits, self.ledger)

    def reconcile(self, req: Request) -> Result:
        obj = self._d.rsgs.get_by_key(str(req))
        meta = obj.get("metadata") if obj is not None else None
        if obj is None or not isinstance(meta, Mapping) or meta.get("deletionTimestamp"):
            self.forget(req, str(meta.get("uid") or "") if isinstance(meta, Mapping) else "")
            return Result()
        loaded = self._load(req, obj)
        if isinstance(loaded, Outcome):
            return self._bare_hold(req, obj, loaded)
        sync = RSGSync(req, obj if isinstance(obj, FrozenDict) else freeze(obj), loaded,
                       self._d.clock.now())
        out = self._sync(sync)
        if out.report:  # a quiet sync stopped early: it keeps what it held, plus what it asked for
            self.interests.settle(sync)
        return self.reporter.report(sync, out)

    def forget(self, req: Request, uid: str = "") -> None:
        self.interests.release(req)
        self.backoff.forget(req)
        self._d.ranker.forget(req.namespace, req.name)
        if uid:
            self.reporter.forget(uid)

    def _sync(self, sync: RSGSync) -> Outcome:
        conflict = self._conflict(sync)
        if conflict is not None:
            return Outcome.hold(TARGET_CONFLICT, conflict, CONFLICT_RECHECK_SECONDS)
        members = self._reader.resolve(sync)
        if isinstance(members, Outcome):
            return members
        if sync.rsg.spec.strategy == Strategy.GROUP_REPLICATION:
            return self._replication.sync(sync, members)
        out = self._inplace.sync(sync, members)
        out.removed = (SCALE_DOWN_RANKING,)  # left over from a GroupReplication spec
        return out

    def _load(self, req: Request, obj: Mapping[str, Any]) -> ResourceScalingGroup | Outcome:
        try:
            rsg = ResourceScalingGroup.model_validate(obj)
        except ValidationError as err:
            details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:5])
            return Outcome.hold(INVALID_SPEC, f"the object does not parse: {details}")
        problems = [str(e) for e in validate(rsg)]
        if problems:
            return Outcome.hold(INVALID_SPEC, "; ".join(problems))
        return rsg

    def _bare_hold(self, req: Request, obj: Mapping[str, Any], out: Outcome) -> Result:
        """A spec that does not parse or breaks a rule: Ready=False naming it, nothing else read."""
        try:
            meta = ObjectMeta.model_validate(obj.get("metadata") or {})
        except ValidationError:
            _log.warning("ResourceScalingGroup %s: metadata does not parse", req)
            return Result()
        rsg = ResourceScalingGroup.model_construct(api_version=ResourceScalingGroup.API_VERSION,
                                                   kind=ResourceScalingGroup.KIND, metadata=meta)
        sync = RSGSync(req, obj if isinstance(obj, FrozenDict) else freeze(obj), rsg, self._d.clock.now())
        self.interests.release(req)
        return self.reporter.report(sync, out)

    def _conflict(self, sync: RSGSync) -> str | None:
        """Why this RSG may not write one of its workloads, or None."""
        me = claim_of(ResourceScalingGroup.KIND, sync.obj)
        for member, target in member_targets(sync.obj):
            winner = self._d.bindings.winner(target, me)
            if winner != me:
                return (f"member {member}: {target.describe()} is already managed by {winner.describe()} "
                        f"(created {winner.created or 'earlier'}); the older scaler wins, this "
                        "ResourceScalingGroup writes nothing")
            foreign = self._d.bindings.foreign_hpas(target)
            if foreign:
                return (f"member {member}: {target.describe()} is also scaled by HorizontalPodAutoscaler "
                        f"{', '.join(foreign)}, which escaler does not own; holding rather than fighting it")
        return None

    def _may_write(self) -> bool:
        return self._d.can_write is None or self._d.can_write.is_set()
