"""``ObjectMeta`` passthrough and ``KubeObject``, the base of every top-level kind.

* ``ObjectMeta`` types the handful of metadata fields escaler reads (name, namespace, uid,
  resourceVersion, generation, creationTimestamp, labels, annotations); everything else
  (ownerReferences, finalizers, managedFields, ...) is kept verbatim as unknown fields, so a
  read-modify-write never drops it.
* ``KubeObject`` carries apiVersion/kind/metadata. A subclass names its kind in ``API_VERSION``
  and ``KIND``: parsing fills them in when absent and refuses an object of another kind, so
  ``ElasticScaler.parse(obj)`` can be trusted to hold an ElasticScaler.
* ``parse(obj)`` = ``model_validate``; ``to_object()`` (see ``escaler.api.common``) is the
  inverse, for create/update/update_status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import Field, model_validator

from escaler.api.common import KubeModel, Time

__all__ = ["KubeObject", "ObjectMeta"]


class ObjectMeta(KubeModel):
    """Standard object metadata; fields escaler does not read are kept as they are."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class KubeObject(KubeModel):
    """A top-level object of one kind; see the module docstring."""

    # "group/version" of the kind a subclass models ("" on this base)
    API_VERSION: ClassVar[str] = ""
    # the kind a subclass models ("" on this base)
    KIND: ClassVar[str] = ""

    api_version: str = Field(description="APIVersion of this object.")
    kind: str = Field(description="Kind of this object.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Standard object metadata.")

    @model_validator(mode="before")
    @classmethod
    def _type_meta(cls, data: Any) -> Any:
        if not cls.KIND or not isinstance(data, Mapping):
            return data
        data = dict(data)
        for wire, attr, want in (("apiVersion", "api_version", cls.API_VERSION), ("kind", "kind", cls.KIND)):
            got = data.pop(attr, None) if wire not in data else data[wire]
            if got is None:
                got = want
            if got != want:
                raise ValueError(f"{wire} is {got!r}; a {cls.KIND} has {wire} {want!r}")
            data[wire] = got
        return data

    @classmethod
    def parse(cls, obj: Mapping[str, Any]) -> Self:
        """The typed object for ``obj`` (a dict read from the API server or a manifest).

        Raises ``pydantic.ValidationError`` when ``obj`` is not a well-formed object of this kind.
        """
        return cls.model_validate(obj)

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or ""
