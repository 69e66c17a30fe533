"""Where a custom resource keeps what its ``/scale`` subresource shows: learnt once per kind from its CRD.

A CRD that declares ``subresources.scale`` names three JSON paths (``specReplicasPath``,
``statusReplicasPath``, ``labelSelectorPath``); the API server's ``/scale`` is nothing but those
fields of the object plus its ``resourceVersion``. So a reconciler that already holds the object
in an informer cache can compute the Scale itself and skip a ``GET .../scale`` per reconcile; the
write still goes through ``PUT .../scale`` with the object's resourceVersion (a Scale's
resourceVersion *is* the object's, so the precondition is the same).

Contract:

* ``ScalePaths.scale_of(obj)`` is what the API server's ``/scale`` would answer for ``obj``
  (apiextensions-apiserver ``scaleFromCustomResource``): a missing replicas field reads as 0, a
  present one that is not an integer is a ``ValueError`` naming the path; a missing selector is
  ``""``, a present one that is not a string a ``ValueError``.
* ``parse_scale_paths(crd, version)`` reads ``spec.versions[name=version].subresources.scale``
  of an ``apiextensions.k8s.io/v1`` CustomResourceDefinition; None when that version declares no
  scale subresource or a path is not a simple ``.a.b`` field path (the caller then GETs
  ``/scale``, which is always right).
* ``CrdScalePaths.paths_for(mapping)`` returns the paths of a CRD kind, or None for a built-in
  kind (a group without a dot is never a CRD) and whenever the CRD cannot be read (403 with an
  older RBAC without ``get`` on customresourcedefinitions, 404, a connection failure). Answers
  are cached per (group, resource, version): a found one for ``ttl`` seconds (a CRD changing its
  scale paths is picked up within that), a miss for ``miss_ttl`` seconds, so the steady state
  does one CRD GET per kind per ``ttl``, never one per reconcile. Thread-safe; the GET is not
  made under the lock.

RBAC: ``get`` on ``apiextensions.k8s.io/customresourcedefinitions`` (``manifests/rbac/manager.yaml``);
without it every ``/scale``-only target costs one ``GET .../scale`` per reconcile, as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from escaler.clock import Clock, RealClock
from escaler.kube.discovery import ResourceMapping
from escaler.kube.scale import Scale

__all__ = ["CRD_API_VERSION", "CRD_KIND", "DEFAULT_MISS_TTL_SECONDS", "DEFAULT_TTL_SECONDS",
           "CrdScalePaths", "ScalePathSource", "ScalePaths", "parse_scale_paths"]

CRD_API_VERSION = "apiextensions.k8s.io/v1"
CRD_KIND = "CustomResourceDefinition"
# how long a CRD's scale paths are trusted before they are read again
DEFAULT_TTL_SECONDS = 300.0
# how long "no usable paths" (unreadable CRD, no scale subresource) is remembered
DEFAULT_MISS_TTL_SECONDS = 60.0

_log = logging.getLogger(__name__)
_Obj = Mapping[str, Any]


class _Getter(Protocol):
    def get(self, m: Any, name: str, namespace: str | None = None) -> dict[str, Any]: ...


class ScalePathSource(Protocol):
    """What a ResourceHandler asks: the scale paths of a kind, or None (GET ``/scale`` instead)."""

    def paths_for(self, mapping: ResourceMapping) -> ScalePaths | None: ...


def _parse_path(path: object) -> tuple[str, ...] | None:
    """``.spec.replicas`` → ("spec", "replicas"); None for anything but a simple field path."""
    if not isinstance(path, str) or not path.startswith(".") or "[" in path or "]" in path:
        return None
    parts = tuple(path[1:].split("."))
    return parts if all(parts) else None


def _at(obj: _Obj, parts: tuple[str, ...]) -> object:
    node: object = obj
    for part in parts:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


@dataclass(frozen=True)
class ScalePaths:
    # field path of the desired replicas (under .spec)
    spec_replicas: tuple[str, ...]
    # field path of the observed replicas (under .status)
    status_replicas: tuple[str, ...]
    # field path of the serialized label selector; None when the CRD declares none
    label_selector: tuple[str, ...] | None

    def _count(self, obj: _Obj, parts: tuple[str, ...]) -> int:
        value = _at(obj, parts)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f".{'.'.join(parts)} is not an integer: {value!r}")
        return value

    def scale_of(self, obj: _Obj) -> Scale:
        """What ``GET .../scale`` would answer for ``obj`` (see the module docstring)."""
        selector = _at(obj, self.label_selector) if self.label_selector is not None else None
        if selector is not None and not isinstance(selector, str):
            raise ValueError(f".{'.'.join(self.label_selector or ())} is not a string: {selector!r}")
        md = obj.get("metadata")
        rv = md.get("resourceVersion") if isinstance(md, Mapping) else None
        return Scale(self._count(obj, self.spec_replicas), self._count(obj, self.status_replicas),
                     selector or "", str(rv or ""))


def parse_scale_paths(crd: _Obj, version: str) -> ScalePaths | None:
    """The scale paths ``version`` of ``crd`` declares (see the module docstring)."""
    spec = crd.get("spec")
    versions = spec.get("versions") if isinstance(spec, Mapping) else None
    for v in versions if isinstance(versions, list) else ():
        if not isinstance(v, Mapping) or v.get("name") != version:
            continue
        sub = v.get("subresources")
        scale = sub.get("scale") if isinstance(sub, Mapping) else None
        if not isinstance(scale, Mapping):
            return None
        spec_path = _parse_path(scale.get("specReplicasPath"))
        status_path = _parse_path(scale.get("statusReplicasPath"))
        raw_selector = scale.get("labelSelectorPath")
        selector_path = _parse_path(raw_selector) if raw_selector else None
        if spec_path is None or status_path is None or (raw_selector and selector_path is None):
            return None
        return ScalePaths(spec_path, status_path, selector_path)
    return None


class CrdScalePaths:
    """Scale paths per CRD kind, read from the CRD and cached (see the module docstring)."""

    def __init__(self, client: _Getter, *, clock: Clock | None = None, ttl: float = DEFAULT_TTL_SECONDS,
                 miss_ttl: float = DEFAULT_MISS_TTL_SECONDS) -> None:
        if ttl <= 0 or miss_ttl <= 0:
            raise ValueError(f"CrdScalePaths: ttl and miss_ttl must be > 0, got {ttl}, {miss_ttl}")
        # GETs CustomResourceDefinitions (a DynamicClient)
        self._client = client
        # times the cache entries (monotonic)
        self._clock: Clock = clock or RealClock()
        # seconds a found / a missing answer is kept
        self._ttl = ttl
        self._miss_ttl = miss_ttl
        # guards _cache
        self._mu = threading.Lock()
        # (group, resource, version) → (paths or None, monotonic expiry)
        self._cache: dict[tuple[str, str, str], tuple[ScalePaths | None, float]] = {}
        # CRDs whose read failed already (logged at info once, then at debug)
        self._warned: set[str] = set()
        # CRD reads made (for tests and the requests benchmark)
        self.reads = 0

    def paths_for(self, mapping: ResourceMapping) -> ScalePaths | None:
        if "." not in mapping.group or "scale" not in mapping.subresources:
            return None  # a built-in kind (no CRD), or no /scale to stand in for
        key = (mapping.group, mapping.resource, mapping.version)
        now = self._clock.monotonic()
        with self._mu:
            hit = self._cache.get(key)
        if hit is not None and now < hit[1]:
            return hit[0]
        paths = self._read(mapping)
        with self._mu:
            self._cache[key] = (paths, now + (self._ttl if paths is not None else self._miss_ttl))
        return paths

    def _read(self, mapping: ResourceMapping) -> ScalePaths | None:
        name = f"{mapping.resource}.{mapping.group}"
        with self._mu:
            self.reads += 1
        try:
            crd = self._client.get((CRD_API_VERSION, CRD_KIND), name)
        except Exception as err:  # any failure: GET /scale instead, which is always right
            with self._mu:
                first = name not in self._warned
                self._warned.add(name)
            _log.log(logging.INFO if first else logging.DEBUG,
                     "cannot read CustomResourceDefinition %s (%s): its /scale-only targets are read "
                     "with a GET of /scale per reconcile; grant get on customresourcedefinitions "
                     "(manifests/rbac/manager.yaml) to read them from the cache", name, err)
            return None
        return parse_scale_paths(crd, mapping.version)
