"""InplaceScaling (docs/guide/resourcescalinggroup.md): every member's replicas = ``spec.replicas x
replicasPerGroup``.

One sync reads each member from its cache (through its ``ResourceHandler``: 0 GETs), computes the
writes (``escaler.scaling.rsg.inplace_writes``: growing members in list order, shrinking members in
reverse order) and performs them through ``/scale`` (``ResourceHandler.write_replicas``,
conditional on the cached resourceVersion), one after the other:

* A write refused or failed (403, a webhook's denial, 5xx, connection failure) **stops the
  sequence**: the members after it in write order are not written (so a scale-up never runs ahead
  of the member that failed — prefill before decode stays true), the failure is recorded in
  ``status.members[].message`` naming the member, the object and the API error, the others
  say which member they wait for, ``Ready=False/MemberWriteFailed`` says the same, a Warning event
  is recorded, and the sync is retried after ``WriteBackoff``. Each retry recomputes from the
  members as they are, so the group converges to a consistent ratio once the refusal is lifted.
* A 409 (the member moved since the cache showed it) re-runs the sync at once.
* Without the write fence (the manager may not write), nothing is written, not even status.

Status: ``replicas`` = whole groups the members' spec replicas hold, ``readyReplicas`` = whole
groups their ready replicas hold (a member kind without a ready count uses its status replicas);
``selector`` = the first member's pod selector (the members' pods share no selector; the first
member — e.g. prefill — is what a Resource metric of the RSG is computed over); ``members`` = one row
per member; ``groups`` stays empty (in place, groups have no identity).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from escaler.errors import ConnectionFailure, StatusError, is_conflict
from escaler.reconcilers.rsg.backoff import WriteBackoff
from escaler.reconcilers.rsg.context import READY, CondSpec, EventSpec, Outcome, RSGSync
from escaler.reconcilers.rsg.members import Member
from escaler.scaling.rsg import MemberCount, MemberWrite, complete_groups, inplace_writes, member_replicas
from escaler.targets.snapshot import TargetSnapshot, TargetUnreadable

__all__ = ["MEMBER_UNREADABLE", "MEMBER_WRITE_FAILED", "InplaceSync"]

MEMBER_WRITE_FAILED = "MemberWriteFailed"
MEMBER_UNREADABLE = "MemberUnreadable"
ALL_READY = "AllGroupsReady"
NOT_READY = "GroupsNotReady"
UNREADABLE_RETRY_SECONDS = 5.0

_log = logging.getLogger(__name__)


@dataclass
class _Written:
    """What the write sequence did."""

    # member name → its snapshot after the sync (written or as read)
    snaps: dict[str, TargetSnapshot]
    # member name → why its write failed, or why it was not attempted
    messages: dict[str, str]
    events: list[EventSpec]
    failed: str | None = None
    conflict: bool = False


def _ready_of(snap: TargetSnapshot) -> int:
    return snap.ready_replicas if snap.ready_replicas is not None else snap.status_replicas


class InplaceSync:
    """See the module docstring."""

    def __init__(self, may_write: Callable[[], bool], backoff: WriteBackoff) -> None:
        # the manager's write fence, asked right before a sync's first write; fixed
        self._may_write = may_write
        # consecutive failed syncs per RSG (shared with the reconciler); fixed
        self._backoff = backoff

    def sync(self, s: RSGSync, members: list[Member]) -> Outcome:
        snaps: dict[str, TargetSnapshot] = {}
        for m in members:
            try:
                snaps[m.name] = m.handler.read(s.rsg.namespace, m.ref)
            except (TargetUnreadable, StatusError) as err:
                return Outcome.hold(MEMBER_UNREADABLE, f"{m.field()}: {err}", UNREADABLE_RETRY_SECONDS)
        counts = [MemberCount(m.name, m.per_group, snaps[m.name].spec_replicas) for m in members]
        writes = inplace_writes(counts, s.rsg.spec.replicas)
        if writes and not self._may_write():
            return Outcome.quiet()
        done = self._write(s, members, writes, snaps)
        if done.conflict:
            return Outcome.quiet(requeue=True)
        return self._outcome(s, members, done)

    def _write(self, s: RSGSync, members: list[Member], writes: list[MemberWrite],
               snaps: dict[str, TargetSnapshot]) -> _Written:
        by_name = {m.name: m for m in members}
        done = _Written(dict(snaps), {}, [])
        for w in writes:
            m, snap = by_name[w.name], done.snaps[w.name]
            if done.failed is not None:
                done.messages[w.name] = (f"not written yet ({w.current} -> {w.desired} replicas): waits for "
                                         f"member {done.failed}, written before it")
                continue
            try:
                done.snaps[w.name] = m.handler.write_replicas(snap, w.desired)
            except StatusError as err:
                if is_conflict(err):
                    done.conflict = True
                    return done
                self._failed(s, m, w, err, done)
                continue
            except (ConnectionFailure, OSError, ValueError) as err:
                self._failed(s, m, w, err, done)
                continue
            _log.info("ResourceScalingGroup %s: member %s %d -> %d replicas", s.req, w.name, w.current,
                      w.desired)
            done.events.append(EventSpec("Normal", "ScaledMember", "ScaleMember",
                                         f"member {w.name} ({m.describe(s.rsg.namespace)}): {w.current} -> "
                                         f"{w.desired} replicas ({s.rsg.spec.replicas} groups)"))
        return done

    @staticmethod
    def _failed(s: RSGSync, m: Member, w: MemberWrite, err: Exception, done: _Written) -> None:
        done.failed = w.name
        done.messages[w.name] = (f"member {w.name} ({m.describe(s.rsg.namespace)}): writing {w.desired} "
                                 f"replicas (from {w.current}) failed: {err}")
        done.events.append(EventSpec("Warning", MEMBER_WRITE_FAILED, "ScaleMember", done.messages[w.name]))

    def _outcome(self, s: RSGSync, members: list[Member], done: _Written) -> Outcome:
        groups = s.rsg.spec.replicas
        rows = []
        for m in members:
            snap = done.snaps[m.name]
            row = {"name": m.name, "desiredReplicas": member_replicas(groups, m.per_group),
                   "replicas": snap.spec_replicas, "readyReplicas": _ready_of(snap)}
            if m.name in done.messages:
                row["message"] = done.messages[m.name][:1024]
            rows.append(row)
        have = complete_groups([MemberCount(m.name, m.per_group, done.snaps[m.name].spec_replicas)
                                for m in members])
        ready = min(have, complete_groups([MemberCount(m.name, m.per_group, _ready_of(done.snaps[m.name]))
                                           for m in members]))
        out = Outcome(replicas=have, ready_replicas=ready, selector=done.snaps[members[0].name].selector,
                      members=rows, groups=[], events=done.events)
        if done.failed is not None:
            out.requeue_after = delay = self._backoff.failed(s.req)
            out.conditions.append(CondSpec(READY, "False", MEMBER_WRITE_FAILED,
                                           f"{done.messages[done.failed]}; retrying in {delay:g}s"))
            return out
        self._backoff.succeeded(s.req)
        out.conditions.append(_ready(groups, have, ready, rows))
        return out


def _ready(groups: int, have: int, ready: int, rows: list[dict[str, object]]) -> CondSpec:
    if have == groups and ready >= groups:
        return CondSpec(READY, "True", ALL_READY, f"{ready} of {groups} groups ready")
    behind = [f"member {r['name']} has {r['readyReplicas']} of {r['desiredReplicas']} replicas ready"
              for r in rows if r["desiredReplicas"] not in (r["readyReplicas"], r["replicas"])
              or r["readyReplicas"] != r["replicas"]]
    return CondSpec(READY, "False", NOT_READY, f"{ready} of {groups} groups ready: {'; '.join(behind)}")
