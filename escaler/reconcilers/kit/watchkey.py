"""Which informer watches a kind a scaler names, and how often to look again when none can wake it.

``watch_key(mapper, namespace, ref)`` is the informer key (``escaler.informers.factory.ResourceKey``)
of ``ref``'s kind in the scaler's own namespace — the key every kind's reconciler watches its
targets, sources and hops under (``watchindex.WatchIndex``) and reads them from (``setup.cache_reader``).
It refuses what no scaler may make the manager watch or read on a namespace user's say-so: a
cluster-scoped kind (its watch would be cluster-wide) and core Secrets.

The retry intervals are the backstops every kind shares: ``NOT_SYNCED_RETRY_SECONDS`` while an
informer has not listed yet (its initial list wakes the scaler first), ``CHAIN_RETRY_SECONDS`` when
nothing can wake the scaler (an unserved kind, a StateTrigger source without its binding labels).
"""

from __future__ import annotations

from escaler.informers.factory import ResourceKey
from escaler.reconcilers.kit.ports import Mapper, ObjectRef

__all__ = ["CHAIN_RETRY_SECONDS", "NOT_SYNCED_RETRY_SECONDS", "watch_key"]

# retry interval when nothing can wake the scaler (an unserved kind, a source without labels)
CHAIN_RETRY_SECONDS = 60.0
# backstop requeue while an informer has not listed yet (its initial list wakes the scaler first)
NOT_SYNCED_RETRY_SECONDS = 1.0
# core kinds a scaler may never make the manager read or watch (as a source, a hop or a target)
_NEVER_WATCHED = frozenset({"Secret"})


def watch_key(mapper: Mapper, namespace: str, ref: ObjectRef, label_selector: str = "") -> ResourceKey:
    """The informer key of ``ref``'s kind in ``namespace``; raises what ``mapping_for`` raises, and
    ``ValueError`` for a kind no scaler may make the manager watch or read: a cluster-scoped kind
    (its watch would be cluster-wide, on the say-so of a namespace user) or core Secrets."""
    m = mapper.mapping_for(ref.api_version, ref.kind)
    if not m.namespaced:
        raise ValueError(f"kind {ref.kind} ({m.group_resource}) is cluster-scoped: a scaler reads only "
                         "namespaced objects, in its own namespace")
    if m.group == "" and m.kind in _NEVER_WATCHED:
        raise ValueError(f"kind {ref.kind} is never read or watched on a scaler's behalf")
    return ResourceKey(m.group, m.version, m.resource, namespace=namespace, label_selector=label_selector)
