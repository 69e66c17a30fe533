"""Members of a ResourceScalingGroup: resolve each ``targetRef``, watch it, read it from the cache.

``MemberReader.resolve(sync)`` turns ``spec.members`` into ``Member``s (kind → resource mapping,
``ResourceHandler``, watch key) or an ``Outcome`` hold:

* an unparsable ``apiVersion`` → ``InvalidSpec`` naming ``spec.members[i].targetRef``;
* a kind the API server does not serve → ``MemberNotFound`` (looked at again every
  ``KIND_RETRY_SECONDS``: a CRD may be installed later);
* a kind that cannot be a target (cluster-scoped, no handler and no ``scale`` subresource;
  ``HandlerRegistry.target_problem``, decided from discovery alone before anything is watched) →
  ``InvalidSpec``;
* a member cache not listed yet → quiet (its initial list wakes the RSG);
* a member object absent from its listed cache → ``MemberNotFound`` naming the member and the
  object (its creation event wakes the RSG).

Members are read from informer caches only: each member object is watched through the shared
``WatchIndex`` (one handler per watched resource and an index from object to RSGs, never a handler
per RSG), under the role ``member/<name>``; GroupReplication adds the clone caches (``clones.py``).
``Interests`` keeps, per RSG, the roles it holds, and drops those a sync no longer asked for (a
member removed from the spec, a group deleted): O(the RSG's roles), never O(fleet).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from escaler.api.rsg import RSGMember
from escaler.errors import StatusError, is_not_found
from escaler.informers.factory import ResourceKey
from escaler.informers.frozen import FrozenDict
from escaler.kube.discovery import ResourceMapping
from escaler.reconcilers.kit.ports import HandlerLookup, Mapper, ObjectRef
from escaler.reconcilers.kit.watchindex import WatchIndex
from escaler.reconcilers.rsg.context import Outcome, RSGSync
from escaler.runtime.types import Request
from escaler.targets.handler import ResourceHandler

__all__ = ["INVALID_SPEC", "KIND_RETRY_SECONDS", "MEMBER_NOT_FOUND", "NOT_SYNCED_RETRY_SECONDS", "Interests",
           "Member", "MemberReader"]

INVALID_SPEC = "InvalidSpec"
MEMBER_NOT_FOUND = "MemberNotFound"
# a member kind that is not served is looked up again this often
KIND_RETRY_SECONDS = 30.0
# backstop while a cache lists (its initial list wakes the RSG anyway)
NOT_SYNCED_RETRY_SECONDS = 5.0


@dataclass(frozen=True)
class Member:
    """One resolved member."""

    # position in spec.members (messages name spec.members[i])
    index: int
    spec: RSGMember
    ref: ObjectRef
    mapping: ResourceMapping
    handler: ResourceHandler
    # the member kind's watch key in the RSG's namespace (no label selector)
    key: ResourceKey

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def per_group(self) -> int:
        return self.spec.replicas_per_group

    def field(self) -> str:
        return f"spec.members[{self.index}] ({self.name})"

    def describe(self, namespace: str, name: str | None = None) -> str:
        return f"{self.ref.kind} {namespace}/{name or self.ref.name}"


class Interests:
    """The watch roles each RSG holds (see the module docstring). Thread-safe."""

    def __init__(self, watches: WatchIndex) -> None:
        # the controller's WatchIndex (one handler per watched resource); fixed
        self.watches = watches
        # guards _held
        self._mu = threading.Lock()
        # RSG → the roles it holds in the WatchIndex
        self._held: dict[Request, set[str]] = {}

    def want(self, sync: RSGSync, role: str, key: ResourceKey, name: str | None) -> None:
        self.watches.want(sync.req, role, key, sync.rsg.namespace, name)
        sync.roles.add(role)

    def settle(self, sync: RSGSync) -> None:
        """Drop the roles an earlier sync held that this one did not ask for."""
        with self._mu:
            stale = self._held.get(sync.req, set()) - sync.roles
            self._held[sync.req] = set(sync.roles)
        for role in stale:
            self.watches.drop(sync.req, role)

    def release(self, req: Request) -> None:
        with self._mu:
            self._held.pop(req, None)
        self.watches.release(req)


class MemberReader:
    """Resolves and reads members (see the module docstring)."""

    def __init__(self, mapper: Mapper, handlers: HandlerLookup, interests: Interests) -> None:
        # kind → resource (discovery, cached); fixed
        self._mapper = mapper
        # the ResourceHandler of each member kind, and whether a kind may be a target; fixed
        self._handlers = handlers
        # the watch roles of each RSG, over the shared WatchIndex; fixed
        self._interests = interests

    def resolve(self, sync: RSGSync) -> list[Member] | Outcome:
        members: list[Member] = []
        for i, spec in enumerate(sync.rsg.spec.members):
            got = self._one(sync, i, spec)
            if isinstance(got, Outcome):
                return got
            members.append(got)
        watches = self._interests.watches
        for m in members:
            if not watches.synced(m.key):
                return Outcome.quiet(NOT_SYNCED_RETRY_SECONDS)
        for m in members:
            if watches.cached(m.key, sync.rsg.namespace, m.ref.name) is None:
                return Outcome.hold(MEMBER_NOT_FOUND,
                                    f"{m.field()}: {m.describe(sync.rsg.namespace)} not found")
        return members

    def _one(self, sync: RSGSync, i: int, spec: RSGMember) -> Member | Outcome:
        ref, where = ObjectRef.of(spec.target_ref), f"spec.members[{i}].targetRef"
        try:
            mapping = self._mapper.mapping_for(ref.api_version, ref.kind)
            handler = self._handlers.handler_for(ref.api_version, ref.kind)
        except ValueError as err:
            return Outcome.hold(INVALID_SPEC, f"{where}: {err}")
        except StatusError as err:
            if not is_not_found(err):
                raise
            return Outcome.hold(MEMBER_NOT_FOUND, f"{where}: the API server does not serve kind {ref.kind} "
                                                  f"in {ref.api_version}", KIND_RETRY_SECONDS)
        problem = self._handlers.target_problem(mapping)
        if problem is not None:
            return Outcome.hold(INVALID_SPEC, f"{where}: {problem}", KIND_RETRY_SECONDS)
        key = ResourceKey(mapping.group, mapping.version, mapping.resource, namespace=sync.rsg.namespace)
        self._interests.want(sync, f"member/{spec.name}", key, ref.name)
        return Member(i, spec, ref, mapping, handler, key)

    def template(self, sync: RSGSync, m: Member) -> FrozenDict | None:
        """The member object from its cache (the template of its GroupReplication clones)."""
        return self._interests.watches.cached(m.key, sync.rsg.namespace, m.ref.name)
