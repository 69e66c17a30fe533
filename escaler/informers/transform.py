"""Transforms: what an informer keeps of each object, decided before the object is cached.

client-go's ``SharedIndexInformer.SetTransform`` and controller-runtime's
``cache.TransformStripManagedFields``: a function applied to every object the reflector lists or
watches, *before* it is frozen into the cache and handed to handlers. Its result is what every
lister and handler of that informer sees.

Contract of a ``Transform``:

* It takes a decoded object (a ``Mapping``; plain ``dict``s from the reflector, possibly a frozen
  one from a test) and returns the mapping to cache. It never mutates its argument: it returns
  shallow copies of what it changes and shares the rest.
* It is pure and cheap (it runs on the reflector thread for every event of the resource), and
  idempotent: ``t(t(obj)) == t(obj)`` (a listed object passes through it twice: once as its
  page arrives in the reflector, once in the store).
* It keeps ``metadata.name``, ``namespace``, ``uid`` and ``resourceVersion`` (the store key and the
  relist comparison read them).

``strip_managed_fields`` is the default of every ``SharedInformer``: ``metadata.managedFields``
(server-side apply's field ownership, often larger than the spec it describes) is read by no
controller here — the CLI's ``escaler explain`` GETs the object itself — and would otherwise be
held in memory for every cached object (see docs/performance.md, memory per scaler).
``identity`` keeps objects as they come; ``chain(a, b)`` applies ``a`` then ``b``.

**What each kind's cache keeps** (``transform_for(group, resource)``, which ``InformerFactory``
and ``DynamicInformers`` give every informer they create; one place for all of them). A field is
dropped only when no consumer of the kind reads it: ``KIND_CUTS`` declares, per kind, each
consumer and the paths it reads, and ``check_cut`` (run at import) refuses a dropped path that any
of them reads — the cache keeps the union of the reads. The audit (issue 30, third memory pass):

* **ElasticScaler** — drops ``metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]``
  (kubectl's copy of the whole object, read by nothing); nothing else, because every part is read:
  the parse (ParseCache, the LLMScaler's claims) reads spec, metadata and the ``elasticscaler.io/``
  annotations; the StatusWriter, the Reporter and drift read all of status (it is compared whole,
  rebuilt from, and patched against: a dropped status field would be a write every poll, or a
  field never nulled); bindings and claims read creationTimestamp, targetRef, resolvedTargetRef.
  Equal parts are *shared* instead (below).
* **Deployment, StatefulSet** (apps/v1) — drop the last-applied annotation and ``status.conditions``
  (rollout messages and times, read by no handler). Kept: what the target handlers read
  (spec.replicas, selector, paused / updateStrategy, generation, uid, resourceVersion, the status
  counts and revisions), what the RSG reads — a member is the template of its clones, so all of its
  spec (the pod template), labels and every other annotation; of clones, owners, labels and
  readyReplicas — and a StateTrigger's chain (a hop's targetRef, a source's
  ``status.desiredReplicas`` and labels).
* **HorizontalPodAutoscaler** — nothing: ``hpasync`` PUTs a thawed cached copy, so a dropped field
  would be erased on the server.
* **Every other kind** — nothing: a generic ``/scale`` target, a hop or a source is read at paths
  its CRD or the user's spec names; pods are read for labels, phase, conditions and times.

What is *shared* instead of dropped, in the ElasticScaler cache (every field every reader sees is
what the API server sent; only ``is`` between two scalers' values changes):

* ``spec.trigger``, ``spec.fallback``, ``spec.floorFrom`` and ``spec.scaleDown`` (``SubtreeSharer``):
  the parts a fleet made from one template has in common are cached once, not once per scaler;
* the rows of ``status.conditions`` and ``status.recentDecisions``, and each whole list when equal
  (``RowSharer``): a fleet's conditions come from a handful of reasons and messages, their times
  are whole seconds, so most scalers hold the very rows of others;
* ``status.resolvedTargetRef`` is the ``spec.targetRef`` object itself when equal
  (``alias_resolved_target``).

``SubtreeSharer(paths)`` replaces the mapping at each path by the one frozen instance kept for an
equal value (the key is its canonical JSON, keys sorted: ``1`` and ``1.0``, ``true`` and ``1`` stay
apart), in a bounded LRU (``max_entries`` values; an evicted value only costs its object its own
copy). It costs one ``json.dumps`` of each subtree present per event of the kind (tens of
microseconds for a trigger), and is thread-safe. ``RowSharer(paths)`` does the same for each row
of the lists at ``paths`` (lists of mappings only), and for the list (a ``FrozenList``) as a whole,
keyed by its shared rows' identities (no second copy of their text); two LRUs of
``DEFAULT_SHARED_ROWS`` entries each. What stays in these tables after the objects moved on is
bounded by their sizes (a constant, not per object). The shared values are frozen (``freeze``):
readers already may not mutate cached objects. ``drop_paths(*paths)`` removes the key at the end
of each path.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from cachetools import LRUCache

from escaler.informers.frozen import FrozenDict, FrozenList, freeze

__all__ = ["DEFAULT_SHARED_ENTRIES", "DEFAULT_SHARED_ROWS", "ELASTICSCALER_SHARED_PATHS",
           "ELASTICSCALER_SHARED_ROWS", "KIND_CUTS", "LAST_APPLIED", "LAST_APPLIED_PATH", "Cut", "RowSharer",
           "SubtreeSharer", "Transform", "alias_resolved_target", "chain", "check_cut", "drop_paths",
           "elasticscaler_transform", "identity", "strip_managed_fields", "transform_for"]

Transform = Callable[[Mapping[str, Any]], Mapping[str, Any]]

_MANAGED_FIELDS = "managedFields"


def identity(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The object as it came."""
    return obj


def strip_managed_fields(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj`` without ``metadata.managedFields`` (a shallow copy when there was one)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or _MANAGED_FIELDS not in meta:
        return obj
    stripped = {k: v for k, v in meta.items() if k != _MANAGED_FIELDS}
    return {**obj, "metadata": stripped}


def chain(first: Transform, then: Transform) -> Transform:
    """``then(first(obj))``: both transforms, in order (idempotent when both are)."""

    def both(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        return then(first(obj))

    return both


# distinct subtree values one SubtreeSharer remembers (a few hundred bytes of key text and one
# frozen value each)
DEFAULT_SHARED_ENTRIES = 1024


def _check_sharer(owner: str, paths: tuple[tuple[str, ...], ...], max_entries: int) -> None:
    """``ValueError`` naming ``owner``'s field and the rule for a sharer's bad arguments."""
    if max_entries < 1:
        raise ValueError(f"{owner}.max_entries: must be >= 1, got {max_entries}")
    if not paths or any(not path for path in paths):
        raise ValueError(f"{owner}.paths: every path needs at least one key, got {paths!r}")


class SubtreeSharer:
    """A transform sharing equal subtrees across objects; see the module docstring."""

    def __init__(self, paths: tuple[tuple[str, ...], ...], max_entries: int = DEFAULT_SHARED_ENTRIES) -> None:
        _check_sharer("SubtreeSharer", paths, max_entries)
        # the subtrees to share, each a path of keys from the object's root; fixed
        self._paths = paths
        # guards _values (LRUCache is not thread-safe, and get() reorders it)
        self._mu = threading.Lock()
        # (path, canonical JSON) → the one frozen value shared by every object holding it
        self._values: LRUCache[tuple[tuple[str, ...], str], FrozenDict] = LRUCache(maxsize=max_entries)

    def _shared(self, path: tuple[str, ...], sub: Mapping[str, Any]) -> FrozenDict | None:
        text = _canonical(sub)
        if text is None:
            return None  # not JSON (a test's object): left as it is
        key = (path, text)
        with self._mu:
            shared = self._values.get(key)
            if shared is None:
                shared = self._values[key] = freeze(sub)
            return shared

    def __call__(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        out = obj
        for path in self._paths:
            out = self._share(out, path)
        return out

    def _share(self, obj: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any]:
        """``obj`` with the mapping at ``path`` replaced by its shared instance (``_replace_at``)."""
        return _replace_at(obj, path,
                           lambda sub: self._shared(path, sub) if isinstance(sub, Mapping) else None)

    def __len__(self) -> int:
        with self._mu:
            return len(self._values)


# the parts of an ElasticScaler's spec a fleet made from one template has in common
ELASTICSCALER_SHARED_PATHS: tuple[tuple[str, ...], ...] = (
    ("spec", "trigger"), ("spec", "fallback"), ("spec", "floorFrom"), ("spec", "scaleDown"))
# the lists of an ElasticScaler's status whose rows are shared across the fleet (each row, and the
# whole list when equal): the rows the reconciler writes from a handful of reasons and messages
ELASTICSCALER_SHARED_ROWS: tuple[tuple[str, ...], ...] = (
    ("status", "conditions"), ("status", "recentDecisions"))
# distinct rows, and distinct lists, one RowSharer remembers (a fleet has a few per reason, message
# and second; each entry is a few hundred bytes: its key text and the frozen row, or the list)
DEFAULT_SHARED_ROWS = 1024

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# kubectl's copy of the object as last applied: read by nothing in the manager (see the table)
LAST_APPLIED_PATH: tuple[str, ...] = ("metadata", "annotations", LAST_APPLIED)


class RowSharer:
    """A transform sharing equal rows of lists across objects; see the module docstring."""

    def __init__(self, paths: tuple[tuple[str, ...], ...], max_entries: int = DEFAULT_SHARED_ROWS) -> None:
        _check_sharer("RowSharer", paths, max_entries)
        # the lists whose rows to share, each a path of keys from the object's root; fixed
        self._paths = paths
        # guards _rows and _lists (LRUCache is not thread-safe, and get() reorders it)
        self._mu = threading.Lock()
        # (path, the row's canonical JSON) → the one frozen row shared by every object holding it
        self._rows: LRUCache[tuple[tuple[str, ...], str], FrozenDict] = LRUCache(maxsize=max_entries)
        # (path, the ids of its shared rows) → the one list of them. Sound: the list holds its rows,
        # so no other object can have one of those ids while the entry lives.
        self._lists: LRUCache[tuple[tuple[str, ...], tuple[int, ...]], FrozenList] = LRUCache(
            maxsize=max_entries)

    def _shared_list(self, path: tuple[str, ...], rows: Any) -> FrozenList | None:
        if not isinstance(rows, list | tuple) or not all(isinstance(row, Mapping) for row in rows):
            return None
        keys = []
        for row in rows:
            text = _canonical(row)
            if text is None:
                return None  # not JSON (a test's object): left as it is
            keys.append((path, text))
        shared_rows: list[FrozenDict] = []
        with self._mu:
            for key in keys:
                row = self._rows.get(key)
                if row is None:
                    row = self._rows[key] = freeze(rows[len(shared_rows)])
                shared_rows.append(row)
            list_key = (path, tuple(id(row) for row in shared_rows))
            shared = self._lists.get(list_key)
            if shared is None:
                shared = self._lists[list_key] = FrozenList(shared_rows)
            return shared

    def __call__(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        out = obj
        for path in self._paths:
            out = _replace_at(out, path, partial(self._shared_list, path))
        return out

    def __len__(self) -> int:
        """Rows and lists remembered."""
        with self._mu:
            return len(self._rows) + len(self._lists)


def _canonical(value: Any) -> str | None:
    """The key under which equal values are shared: canonical JSON (keys sorted, so ``1`` and
    ``1.0``, ``true`` and ``1`` stay apart); None for a value JSON cannot encode."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return None


def _replace_at(obj: Mapping[str, Any], path: tuple[str, ...],
                replace: Callable[[Any], Any]) -> Mapping[str, Any]:
    """``obj`` with the value at ``path`` replaced by ``replace(value)``, shallow-copying the
    mappings along the path and sharing the rest; ``obj`` itself when the path is absent or
    ``replace`` returns None or the very value (never mutates ``obj``)."""
    parents = [obj]
    for key in path[:-1]:
        child = parents[-1].get(key)
        if not isinstance(child, Mapping):
            return obj
        parents.append(child)
    if path[-1] not in parents[-1]:
        return obj
    sub = parents[-1][path[-1]]
    new = replace(sub)
    if new is None or new is sub:
        return obj
    value: Any = new
    for parent, key in zip(reversed(parents), reversed(path), strict=True):
        value = {**parent, key: value}
    out: Mapping[str, Any] = value
    return out


def drop_paths(*paths: tuple[str, ...]) -> Transform:
    """A transform removing the key at the end of each path (shallow copies along it; an absent
    path leaves the object as it is)."""
    for path in paths:
        if not path:
            raise ValueError("drop_paths: every path needs at least one key")

    def drop(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        out = obj
        for path in paths:
            parents = [out]
            for key in path[:-1]:
                child = parents[-1].get(key)
                if not isinstance(child, Mapping):
                    break
                parents.append(child)
            else:
                if path[-1] not in parents[-1]:
                    continue
                value: Any = {k: v for k, v in parents[-1].items() if k != path[-1]}
                for parent, key in zip(reversed(parents[:-1]), reversed(path[:-1]), strict=True):
                    value = {**parent, key: value}
                out = value
        return out

    return drop


def alias_resolved_target(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``status.resolvedTargetRef`` as the very (frozen) object ``spec.targetRef`` is when the two are
    equal (a MetricsTrigger scaler records the target it names): one mapping cached, not two."""
    spec, status = obj.get("spec"), obj.get("status")
    ref = spec.get("targetRef") if isinstance(spec, Mapping) else None
    resolved = status.get("resolvedTargetRef") if isinstance(status, Mapping) else None
    if not isinstance(ref, Mapping) or not isinstance(resolved, Mapping) or resolved is ref:
        return obj
    if resolved != ref:
        return obj
    frozen = freeze(ref)
    out = _replace_at(obj, ("spec", "targetRef"), lambda _: frozen)
    return _replace_at(out, ("status", "resolvedTargetRef"), lambda _: frozen)


Path = tuple[str, ...]


@dataclass(frozen=True)
class Cut:
    """What one kind's cache drops, and who reads that kind (``KIND_CUTS``; see the module docstring).

    ``reads`` names each consumer of the kind's caches and the paths it reads (a path of keys from
    the object's root; ``()`` is the whole object, ``("spec",)`` all of ``spec``, a last key ending
    in ``*`` every key with that prefix). ``check_cut`` refuses a cut whose dropped path is,
    contains or lies inside a path some consumer reads: the cache keeps the union of the reads."""

    # paths removed from every cached object of the kind
    drops: tuple[Path, ...]
    # consumer (module) → the paths it reads of the kind
    reads: Mapping[str, tuple[Path, ...]] = field(default_factory=dict)


def _key_matches(pattern: str, key: str) -> bool:
    if pattern.startswith("!"):
        return key != pattern[1:]  # every key but that one
    return key.startswith(pattern[:-1]) if pattern.endswith("*") else key == pattern


def _overlaps(dropped: Path, read: Path) -> bool:
    n = min(len(dropped), len(read))
    return all(_key_matches(r, d) for d, r in zip(dropped[:n], read[:n], strict=True))


def check_cut(kind: str, cut: Cut) -> None:
    """Raises ``ValueError`` naming the kind, the path and the reader when a dropped path is read."""
    for path in cut.drops:
        for reader, reads in cut.reads.items():
            for read in reads:
                if _overlaps(path, read):
                    raise ValueError(f"{kind}: the cache may not drop {'.'.join(path)}: {reader} reads "
                                     f"{'.'.join(read) or 'the whole object'}")


def _paths(*dotted: str) -> tuple[Path, ...]:
    """Dotted paths (no key of them contains a dot) as key tuples."""
    return tuple(tuple(p.split(".")) for p in dotted)


_META = _paths("metadata.name", "metadata.namespace", "metadata.uid", "metadata.resourceVersion",
               "metadata.generation")
_WORKLOAD_STATUS = _paths("status.observedGeneration", "status.replicas", "status.readyReplicas",
                          "status.updatedReplicas")
# a member is the template of its GroupReplication clones: all of it but the server's fields, its
# status and the two annotations rsg.clones drops (last-applied among them)
_RSG_MEMBER = (*_paths("spec", "metadata.name", "metadata.namespace", "metadata.labels"),
               ("metadata", "annotations", "!" + LAST_APPLIED))
# a StateTrigger's chain: a hop's targetRef; its source's desired count and binding labels
_CHAIN = _paths("spec.targetRef", "status.desiredReplicas", "metadata.labels")

# every kind whose caches drop more than managedFields (both informer factories: the controllers'
# shared caches and the namespace-wide dynamic ones of targets, members, hops and pods)
KIND_CUTS: dict[tuple[str, str], Cut] = {
    ("elasticscaler.io", "elasticscalers"): Cut(drops=(LAST_APPLIED_PATH,), reads={
        "elasticscaler.parsecache, llmscaler (the parse: spec, metadata, annotations)": (
            ("spec",), *_META, *_paths("metadata.labels", "metadata.ownerReferences",
                                       "metadata.creationTimestamp"),
            ("metadata", "annotations", "elasticscaler.io/*")),
        "kit.status StatusWriter, kit.report, kit.drift (compare and rebuild the status)": (("status",),),
        "kit.bindings, kit.claims (who holds a target)": _paths(
            "metadata.creationTimestamp", "metadata.namespace", "metadata.name", "kind", "spec.targetRef",
            "spec.trigger", "status.resolvedTargetRef"),
        "runtime.predicates (generation and annotations changed)": _paths("metadata.generation"),
    }),
    ("apps", "deployments"): Cut(drops=(LAST_APPLIED_PATH, ("status", "conditions")), reads={
        "targets.workloads DeploymentHandler (the target snapshot)": (
            *_paths("spec.replicas", "spec.selector", "spec.paused"), *_META, *_WORKLOAD_STATUS),
        "rsg.clones (a member is the template of its clones)": _RSG_MEMBER,
        "rsg.replication, rsg.ledger (clones counted and ranked)": _paths(
            "metadata.ownerReferences", "metadata.labels", "spec.replicas", "status.readyReplicas"),
        "elasticscaler.statesync (a StateTrigger's source or chain hop)": _CHAIN,
    }),
    ("apps", "statefulsets"): Cut(drops=(LAST_APPLIED_PATH, ("status", "conditions")), reads={
        "targets.workloads StatefulSetHandler (the target snapshot)": (
            *_paths("spec.replicas", "spec.selector", "spec.updateStrategy", "status.currentRevision",
                    "status.updateRevision"), *_META, *_WORKLOAD_STATUS),
        "rsg.clones (a member is the template of its clones)": _RSG_MEMBER,
        "rsg.replication, rsg.ledger (clones counted and ranked)": _paths(
            "metadata.ownerReferences", "metadata.labels", "spec.replicas", "status.readyReplicas"),
        "elasticscaler.statesync (a StateTrigger's source or chain hop)": _CHAIN,
    }),
}
for _kind, _cut in KIND_CUTS.items():
    check_cut("/".join(_kind), _cut)



def elasticscaler_transform(subtrees: SubtreeSharer, rows: RowSharer) -> Transform:
    """The ElasticScaler caches' transform with these tables (``transform_for`` builds it with the
    manager's one pair; a benchmark with its own, to measure them)."""
    dropped = drop_paths(*KIND_CUTS[("elasticscaler.io", "elasticscalers")].drops)
    return chain(chain(strip_managed_fields, dropped), chain(chain(subtrees, rows), alias_resolved_target))


_TRANSFORMS: dict[tuple[str, str], Transform] = {
    ("elasticscaler.io", "elasticscalers"): elasticscaler_transform(
        SubtreeSharer(ELASTICSCALER_SHARED_PATHS), RowSharer(ELASTICSCALER_SHARED_ROWS)),
    **{kind: chain(strip_managed_fields, drop_paths(*cut.drops))
       for kind, cut in KIND_CUTS.items() if kind != ("elasticscaler.io", "elasticscalers")},
}


def transform_for(group: str, resource: str) -> Transform:
    """What an informer of ``group``/``resource`` caches of each object (see the module docstring)."""
    return _TRANSFORMS.get((group, resource), strip_managed_fields)
