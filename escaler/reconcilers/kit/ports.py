"""The ports a scaler reconciler talks through: one module, real types, shared by every scaler kind.

A reconciler never reaches for a global or a concrete client: it is given these at construction
(``setup_*`` wires the manager's real ones; tests pass fakes that satisfy the same Protocols).

* ``ObjectStore`` — an informer cache: ``get_by_key("ns/name")`` and ``list()``; objects are
  read-only (``FrozenDict``).
* ``KubeClient`` — the writes (and the rare reads that no cache can answer) a reconciler makes,
  as ``escaler.kube.DynamicClient`` offers them. ``Resource`` is a ``ResourceMapping`` or an
  ``(apiVersion, kind)`` pair the client resolves.
* ``Mapper`` — kind → resource (``escaler.kube.RESTMapper``): ``ValueError`` for a malformed
  apiVersion, ``StatusError`` 404 for a kind the API server does not serve.
* ``HandlerLookup`` — the ``ResourceHandler`` of a target kind, and why a kind cannot be a target
  (``HandlerRegistry``).
* ``EventSink`` — records an ``events.k8s.io/v1`` Event about an object (``escaler.kube.events.Recorder``,
  re-exported under the name of its role).
* ``DecisionLookup`` — the SLO decision engine's decision for ``(namespace, serviceId)``, read
  in-process (an LLMScaler's ``customProvider.serviceId``; ``escaler.cli.manager`` wires the SLO
  engine's ``Decisions`` to it, so no scaler kind imports another): the decision body
  (``{"replicas": n, ...}``) or a string saying why there is none.
* ``ObjectRef`` — the one reference type for an object in a scaler's namespace (a target, a
  state source, a chain hop): apiVersion, kind, name. ``escaler.api.TargetRef`` converts with
  ``ObjectRef.of``; it satisfies ``escaler.targets.TargetRefLike``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from escaler.kube.discovery import ResourceMapping, parse_api_version
from escaler.kube.events import Recorder as EventSink
from escaler.targets.handler import ResourceHandler
from escaler.targets.snapshot import TargetRefLike

__all__ = ["EventSink", "HandlerLookup", "KubeClient", "Mapper", "ObjectRef", "ObjectStore", "Resource",
           "TargetRefLike"]

Resource = ResourceMapping | tuple[str, str]
PropagationPolicy = Literal["Foreground", "Background", "Orphan"]


class ObjectStore(Protocol):
    """An informer cache (``SharedInformer.store``)."""

    def get_by_key(self, key: str) -> Mapping[str, Any] | None: ...

    def list(self) -> list[Any]: ...


class KubeClient(Protocol):
    """The API calls a reconciler makes (``escaler.kube.DynamicClient`` satisfies it)."""

    def get(self, m: Resource, name: str, namespace: str | None = None) -> dict[str, Any]: ...

    def create(self, m: Resource, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]: ...

    def update(self, m: Resource, obj: dict[str, Any]) -> dict[str, Any]: ...

    def delete(self, m: Resource, name: str, namespace: str | None = None,
               propagation_policy: PropagationPolicy | None = None,
               preconditions_uid: str | None = None) -> dict[str, Any]: ...

    def patch_status(self, m: Resource, name: str, patch: Any, namespace: str | None = None,
                     patch_type: Any = "merge") -> dict[str, Any]: ...


class Mapper(Protocol):
    """Kind → resource (``RESTMapper``)."""

    def mapping_for(self, api_version: str, kind: str) -> ResourceMapping: ...


class HandlerLookup(Protocol):
    """``HandlerRegistry``: the ResourceHandler of a target kind (ValueError: bad apiVersion)."""

    def handler_for(self, api_version: str, kind: str) -> ResourceHandler: ...

    def target_problem(self, mapping: ResourceMapping) -> str | None: ...


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """An object in the scaler's namespace, by apiVersion, kind and name."""

    api_version: str
    kind: str
    name: str

    @property
    def group(self) -> str:
        return parse_api_version(self.api_version)[0]

    @property
    def identity(self) -> tuple[str, str, str]:
        """Group, kind, name: what makes two references the same object (version does not)."""
        return (self.group, self.kind, self.name)

    def describe(self) -> str:
        return f"{self.kind} {self.name}"

    @classmethod
    def of(cls, ref: TargetRefLike) -> ObjectRef:
        return cls(ref.api_version, ref.kind, ref.name)

    @classmethod
    def from_mapping(cls, ref: Mapping[str, Any]) -> ObjectRef:
        api_version, kind, name = ref.get("apiVersion"), ref.get("kind"), ref.get("name")
        if not all(isinstance(v, str) and v for v in (api_version, kind, name)):
            raise ValueError("needs apiVersion, kind and name")
        parse_api_version(str(api_version))
        return cls(str(api_version), str(kind), str(name))


class DecisionLookup(Protocol):
    def __call__(self, namespace: str, service_id: str) -> Mapping[str, Any] | str: ...
