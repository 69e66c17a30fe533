"""``ResourceHandler``: how a scaler reads and writes the replica count of one kind of target.

The protocol (docs/design.md#architecture, docs/concepts.md#the-decision-pipeline steps 5-6)::

    read(namespace, ref) -> TargetSnapshot
    write_replicas(snapshot, replicas) -> TargetSnapshot
    pod_selector(snapshot) -> str

``read`` raises:

* ``ValueError`` when ``ref.api_version`` cannot be parsed (the reconciler's ``InvalidSpec``);
* ``StatusError`` with code 404, unchanged, when the object does not exist *or* its kind is not
  served (the CRD is not installed): the reconciler's ``TargetNotFound``;
* ``TargetUnreadable`` for everything else: another error status (403, 5xx...), a connection
  failure, or an object whose fields are malformed (e.g. ``spec.replicas: "3"``). The message
  names the object and, for a malformed one, the field path.

``write_replicas`` is conditional on ``snapshot.resource_version`` (``""`` makes it
unconditional): it goes through the ``/scale`` subresource when the kind serves one and patches
``spec.replicas`` otherwise (``escaler.kube.ScaleClient``). A stale snapshot fails with
``StatusError`` 409 (``escaler.errors.is_conflict``); any other ``StatusError`` or
``ConnectionFailure`` propagates unchanged (the reconciler's ``TargetWriteFailed``), and
``ValueError`` refuses a replica count that is not an integer >= 0. The snapshot it returns is
*not* a re-read: ``spec_replicas``, ``status_replicas`` and ``resource_version`` come from the
write's answer, everything else (generation, ready/updated counts) from the snapshot that was
written, and the guard flags are recomputed from those (so a scale-up from 2 to 4 of a Deployment
whose status still says 2 updated replicas returns ``rollout_in_progress=True`` until re-read).

``WorkloadHandler`` is the implementation every built-in handler derives from: it reads the object
(from ``cache_get`` when the reconciler provides an informer-cache lookup and the cache has the
object, else with a GET) and takes the counts from ``spec.replicas`` and ``status``. Subclasses say
which status fields their kind has (``HAS_*``), how a finished rollout looks
(``expected_updated``) and where the pod selector lives (``selector_of``). ``GenericScaleHandler``
serves any other kind: with a ``/scale`` subresource it takes the counts and selector from a GET of
``/scale`` (the kind's replicas path may not be ``spec.replicas``), otherwise from the object, as
``ScaleClient`` does; it uses ``status.observedGeneration``/``readyReplicas``/``updatedReplicas``
only when the object reports them. For a custom resource whose CRD declares its scale paths
(``escaler.kube.scalepaths``; given as ``scale_paths``), the counts, the selector and the
resourceVersion are taken from the object itself — the cached one in the steady state — at those
paths, exactly as the API server computes ``/scale``, so a reconcile makes no GET; only a kind
whose paths are unknown (a built-in kind without its own handler, an unreadable CRD) still GETs
``/scale``. Writes always go through ``/scale``.

Thread-safe: handlers hold no mutable state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

from escaler.errors import ConnectionFailure, StatusError, is_not_found
from escaler.kube.discovery import ResourceMapping, parse_api_version
from escaler.kube.dynamic import DynamicClient
from escaler.kube.scale import DEFAULT_REPLICAS, Scale, ScaleClient, selector_string
from escaler.kube.scalepaths import ScalePathSource
from escaler.targets.snapshot import TargetRefLike, TargetSnapshot, TargetUnreadable

__all__ = [
    "CacheGet",
    "GenericScaleHandler",
    "ResourceHandler",
    "WorkloadHandler",
    "rollout_message",
]

# An informer-cache lookup: (api_version, kind, namespace, name) -> the object, or None when the
# cache does not hold it (the handler then GETs it, so a cache miss never reads as NotFound).
CacheGet = Callable[[str, str, str, str], Mapping[str, Any] | None]

_Obj = Mapping[str, Any]


class ResourceHandler(Protocol):
    """Reads and writes the replicas of one kind of target (see the module docstring)."""

    def read(self, namespace: str, ref: TargetRefLike) -> TargetSnapshot: ...

    def write_replicas(self, snapshot: TargetSnapshot, replicas: int) -> TargetSnapshot: ...

    def pod_selector(self, snapshot: TargetSnapshot) -> str: ...


def _dict(value: object) -> _Obj:
    return value if isinstance(value, Mapping) else {}


def _at(obj: _Obj, path: str) -> object:
    node: object = obj
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _count(obj: _Obj, path: str, default: int | None) -> int | None:
    """The non-negative integer at ``path``; ``default`` when absent; ValueError when malformed."""
    value = _at(obj, path)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{path} is not a non-negative integer: {value!r}")
    return value


def _field(obj: _Obj, path: str, has: bool | None) -> int | None:
    """A status count of a kind that has it (absent = 0), has not (None) or may have it (if present)."""
    if has is False:
        return None
    return _count(obj, path, 0 if has else None)


def rollout_message(
    generation: int,
    observed_generation: int | None,
    spec_replicas: int,
    ready_replicas: int | None,
    updated_replicas: int | None,
    expected_updated: int | None,
) -> str:
    """Why a rollout is in progress (docs/concepts.md#the-decision-pipeline step 5), or ``""`` when it
    is not."""
    if observed_generation is not None and observed_generation < generation:
        return (f"status.observedGeneration {observed_generation} < metadata.generation {generation}: "
                "the workload controller has not acted on the latest spec yet")
    if updated_replicas is not None and expected_updated is not None and updated_replicas < expected_updated:
        return (f"status.updatedReplicas {updated_replicas} < {expected_updated} expected: "
                "not every replica runs the latest template yet")
    # Replicas that are merely not Ready yet are not a rollout (docs/concepts.md#the-decision-pipeline step
    # 5): after a scale-up they are capacity on the way (LLM servers load weights for minutes), and holding
    # the next write until they are Ready would freeze a scaler in the middle of a surge.
    return ""


class WorkloadHandler:
    """A ``ResourceHandler`` for a kind that keeps its replicas in ``spec.replicas``."""

    # Which status fields the kind has. True: the kind has it and an absent value reads as 0 (the
    # API server omits zero counts). False: the kind has no such field (the snapshot says None).
    # None: unknown kind; the field is used when the object reports it.
    HAS_OBSERVED_GENERATION: ClassVar[bool | None] = True
    HAS_READY_REPLICAS: ClassVar[bool | None] = True
    HAS_UPDATED_REPLICAS: ClassVar[bool | None] = True

    def __init__(self, dynamic: DynamicClient, *, cache_get: CacheGet | None = None) -> None:
        # GETs objects and resolves (api_version, kind) to a mapping (cached discovery)
        self._dynamic = dynamic
        # /scale reads and conditional writes (spec.replicas patch when there is no /scale)
        self._scales = ScaleClient(dynamic)
        # optional informer-cache lookup tried before a GET
        self._cache_get = cache_get

    # ---- ResourceHandler -----------------------------------------------------------------

    def read(self, namespace: str, ref: TargetRefLike) -> TargetSnapshot:
        parse_api_version(ref.api_version)  # ValueError: the spec is invalid, not the target
        what = f"{ref.kind} {namespace}/{ref.name}"
        try:
            mapping = self._dynamic.resolve((ref.api_version, ref.kind))
            obj = self._get_object(mapping, namespace, ref)
            return self._snapshot(mapping, namespace, ref, obj)
        except StatusError as err:
            if is_not_found(err):
                raise
            raise TargetUnreadable(f"reading {what}: {err}", cause=err) from err
        except ConnectionFailure as err:
            raise TargetUnreadable(f"reading {what}: {err}", cause=err) from err
        except ValueError as err:
            raise TargetUnreadable(f"reading {what}: {err}") from err

    def write_replicas(self, snapshot: TargetSnapshot, replicas: int) -> TargetSnapshot:
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ValueError(f"write_replicas {snapshot.describe()}: replicas must be an integer >= 0, "
                             f"got {replicas!r}")
        mapping = self._dynamic.resolve((snapshot.api_version, snapshot.kind))
        scale = self._scales.update_scale(mapping, snapshot.name, snapshot.namespace, replicas,
                                          snapshot.resource_version)
        return self._after_write(snapshot, scale)

    def pod_selector(self, snapshot: TargetSnapshot) -> str:
        return snapshot.selector

    # ---- what subclasses describe ----------------------------------------------------------

    def expected_updated(self, obj: _Obj, spec_replicas: int) -> int | None:
        """Updated replicas a finished rollout has; None skips the updated-replicas check."""
        return spec_replicas

    def selector_of(self, obj: _Obj) -> str:
        """The pods' label selector in string form: ``status.selector``, else ``spec.selector``."""
        status_sel = _at(obj, "status.selector")
        if isinstance(status_sel, str) and status_sel:
            return status_sel
        spec_sel = _at(obj, "spec.selector")
        if isinstance(spec_sel, Mapping):
            return selector_string(dict(spec_sel))
        return spec_sel if isinstance(spec_sel, str) else ""

    def counts(self, mapping: ResourceMapping, namespace: str, ref: TargetRefLike,
               obj: _Obj) -> Scale:
        """spec/status replicas, selector and resourceVersion of the target (from the object)."""
        spec = _count(obj, "spec.replicas", DEFAULT_REPLICAS)
        status = _count(obj, "status.replicas", 0)
        assert spec is not None and status is not None
        return Scale(spec, status, self.selector_of(obj), str(_at(obj, "metadata.resourceVersion") or ""))

    # ---- internals ---------------------------------------------------------------------------

    def _get_object(self, mapping: ResourceMapping, namespace: str, ref: TargetRefLike) -> _Obj:
        if self._cache_get is not None:
            cached = self._cache_get(ref.api_version, ref.kind, namespace, ref.name)
            if cached is not None:
                return cached
        return self._dynamic.get(mapping, ref.name, namespace)

    def _snapshot(self, mapping: ResourceMapping, namespace: str, ref: TargetRefLike,
                  obj: _Obj) -> TargetSnapshot:
        scale = self.counts(mapping, namespace, ref, obj)
        md = _dict(obj.get("metadata"))
        generation = _count(obj, "metadata.generation", 0)
        assert generation is not None
        snap = TargetSnapshot(
            api_version=ref.api_version,
            kind=ref.kind,
            namespace=namespace,
            name=ref.name,
            uid=str(md.get("uid") or ""),
            generation=generation,
            observed_generation=_field(obj, "status.observedGeneration", self.HAS_OBSERVED_GENERATION),
            spec_replicas=scale.spec_replicas,
            status_replicas=scale.status_replicas,
            ready_replicas=_field(obj, "status.readyReplicas", self.HAS_READY_REPLICAS),
            updated_replicas=_field(obj, "status.updatedReplicas", self.HAS_UPDATED_REPLICAS),
            selector=scale.selector,
            resource_version=scale.resource_version,
            rollout_in_progress=False,
            settling_scale_down=False,
            raw=obj,
        )
        return self._with_flags(snap)

    def _with_flags(self, snap: TargetSnapshot) -> TargetSnapshot:
        expected = self.expected_updated(snap.raw, snap.spec_replicas)
        message = rollout_message(snap.generation, snap.observed_generation, snap.spec_replicas,
                                  snap.ready_replicas, snap.updated_replicas, expected)
        return dataclasses.replace(
            snap,
            rollout_in_progress=bool(message),
            rollout_message=message,
            settling_scale_down=snap.status_replicas > snap.spec_replicas,
        )

    def _after_write(self, snap: TargetSnapshot, scale: Scale) -> TargetSnapshot:
        return self._with_flags(dataclasses.replace(
            snap,
            spec_replicas=scale.spec_replicas,
            status_replicas=scale.status_replicas,
            selector=snap.selector or scale.selector,
            resource_version=scale.resource_version,
        ))


class GenericScaleHandler(WorkloadHandler):
    """Any kind: counts from ``/scale`` when served, else from ``spec.replicas`` (see module doc)."""

    HAS_OBSERVED_GENERATION = None
    HAS_READY_REPLICAS = None
    HAS_UPDATED_REPLICAS = None

    def __init__(self, dynamic: DynamicClient, *, cache_get: CacheGet | None = None,
                 scale_paths: ScalePathSource | None = None) -> None:
        super().__init__(dynamic, cache_get=cache_get)
        # the CRD-declared scale paths of a kind (None: always GET /scale)
        self._scale_paths = scale_paths

    def counts(self, mapping: ResourceMapping, namespace: str, ref: TargetRefLike,
               obj: _Obj) -> Scale:
        if "scale" not in mapping.subresources:
            return super().counts(mapping, namespace, ref, obj)
        paths = self._scale_paths.paths_for(mapping) if self._scale_paths is not None else None
        if paths is not None:
            # /scale is these fields of the object and its resourceVersion: no GET (a stale cache
            # makes the conditional write fail with 409, and the requeue reads afresh)
            scale = paths.scale_of(obj)
        else:
            scale = self._scales.get_scale(mapping, ref.name, namespace)
        return dataclasses.replace(scale, selector=scale.selector or self.selector_of(obj))
