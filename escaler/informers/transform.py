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
  The spec and the status are kept *packed* instead (below).
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

What is *packed* instead of dropped, in the ElasticScaler cache (every field every reader sees is
what the API server sent): ``spec`` and ``status`` are each a ``PackedMapping``
(``escaler.informers.frozen``), their JSON text deflated against a typical ElasticScaler's
(``ELASTICSCALER_PACKER``, ``escaler.api.typical.ELASTICSCALER_ZDICT``): ~100 and ~250 bytes where
the frozen values took ~1.6 and ~1.5 KB a scaler at 10,000 (issue 30; ``python
bench/cache_cuts.py``). Each read decodes one (tens of microseconds; the last value decoded in the
process is kept), and their readers read them rarely: the parse when the object's resourceVersion
changes (``ParseCache``: the reconcilers read the parsed model, never the cached spec), the claims
index on each event, the status writer when it builds or compares a status to write (a change, not
an idle poll), a restarted scaler's first sync, the SLO engine. An idle poll reads neither
(``tests/unit/test_es_packed_status.py``). Readers test ``Mapping``, never ``dict``: a packed
mapping is not a ``dict``, and ``json.dumps`` of a cached ElasticScaler needs ``thaw`` first.
Metadata stays a plain frozen mapping (every sync reads its uid and resourceVersion). Packing
replaced sharing equal parts across the fleet (until 2026-12-07: the spec's trigger and the
status's condition and decision rows, ``SubtreeSharer`` and ``RowSharer``), which left ~3 KB a
scaler whose queries, times, counts and messages differ; a packed spec (~100 bytes) costs less than
the unshared parts of a template fleet's (targetRef and the spec's own mapping, ~450).

``pack_paths(packer, *paths)`` keeps the mapping at the end of each path packed (~10 microseconds
a status, once per event of the kind); ``drop_paths(*paths)`` removes the key at the end of each
path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escaler.api.typical import ELASTICSCALER_ZDICT
from escaler.informers.frozen import PackedMapping
from escaler.packed import JsonPacker

__all__ = [
    "ELASTICSCALER_PACKER",
    "KIND_CUTS",
    "LAST_APPLIED",
    "LAST_APPLIED_PATH",
    "Cut",
    "Transform",
    "chain",
    "check_cut",
    "drop_paths",
    "identity",
    "pack_paths",
    "strip_managed_fields",
    "transform_for",
]

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


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# kubectl's copy of the object as last applied: read by nothing in the manager (see the table)
LAST_APPLIED_PATH: tuple[str, ...] = ("metadata", "annotations", LAST_APPLIED)


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



def pack_paths(packer: JsonPacker, *paths: Path) -> Transform:
    """A transform keeping the mapping at the end of each path as a ``PackedMapping`` deflated by
    ``packer`` (shallow copies along the path; an absent path, a value that is not a mapping or is
    packed already leave the object as it is)."""
    for path in paths:
        if not path:
            raise ValueError("pack_paths: every path needs at least one key")

    def packed(value: Any) -> PackedMapping | None:
        if isinstance(value, PackedMapping) or not isinstance(value, Mapping):
            return None
        return PackedMapping(packer, value)

    def pack(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        out = obj
        for path in paths:
            out = _replace_at(out, path, packed)
        return out

    return pack


# what an ElasticScaler's cached spec and status are deflated against (a typical spec and status)
ELASTICSCALER_PACKER = JsonPacker(ELASTICSCALER_ZDICT)


_TRANSFORMS: dict[tuple[str, str], Transform] = {
    ("elasticscaler.io", "elasticscalers"): chain(
        chain(strip_managed_fields, drop_paths(*KIND_CUTS[("elasticscaler.io", "elasticscalers")].drops)),
        pack_paths(ELASTICSCALER_PACKER, ("spec",), ("status",))),
    **{kind: chain(strip_managed_fields, drop_paths(*cut.drops))
       for kind, cut in KIND_CUTS.items() if kind != ("elasticscaler.io", "elasticscalers")},
}


def transform_for(group: str, resource: str) -> Transform:
    """What an informer of ``group``/``resource`` caches of each object (see the module docstring)."""
    return _TRANSFORMS.get((group, resource), strip_managed_fields)
