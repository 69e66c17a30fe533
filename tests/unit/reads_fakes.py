"""Fakes for the read-path tests and the requests benchmark (no tests here).

* ``SCALABLES``: a CRD kind that serves only ``/scale`` (no escaler handler), whose CRD (``crd()``)
  declares non-default scale paths (``.spec.size``, ``.status.size``, ``.status.selector``).
* ``ScaleClient``: ``es_fakes.FakeClient`` plus ``rest.request`` serving ``GET``/``PUT .../scale`` of
  Scalables as the API server does (resourceVersion precondition), counted as
  ``(verb, "scalables/scale")``; ``gets()`` is every GET by resource.
* ``production_harness()``: an ``es_fakes.Harness`` whose reconciler uses the production handler
  registry — reads through the reconciler's own ``WatchIndex`` caches (``cache_reader``) and the
  CRD's scale paths (``CrdScalePaths``; absent on fec3229, where the registry GETs ``/scale``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from typing import Any

from es_fakes import MAPPINGS, NS, Cluster, FakeClient, Harness

from escaler.errors import StatusError
from escaler.kube.discovery import ResourceMapping
from escaler.reconcilers.kit.setup import cache_reader
from escaler.targets.registry import default_registry

try:  # after the change: the CRD's scale paths stand in for GET .../scale
    from escaler.kube.scalepaths import CrdScalePaths
except ImportError:  # fec3229
    CrdScalePaths = None  # type: ignore[assignment,misc]

SCALABLES = ResourceMapping("example.com", "v1", "scalables", "Scalable", True,
                            frozenset({"scale", "status"}))
CRDS = ResourceMapping("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
                       False, frozenset())
SECRETS = ResourceMapping("", "v1", "secrets", "Secret", True, frozenset())
SCALABLE_REF = {"apiVersion": "example.com/v1", "kind": "Scalable", "name": "pool"}


def crd() -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "scalables.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Scalable", "plural": "scalables"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "subresources": {"status": {}, "scale": {
                                       "specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size",
                                       "labelSelectorPath": ".status.selector"}}}]}}


def scalable(size: int = 2) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Scalable",
            "metadata": {"name": "pool", "namespace": NS, "generation": 1},
            "spec": {"size": size}, "status": {"size": size, "selector": "app=pool"}}


class _Rest:
    """``/scale`` of Scalables over the FakeAPI, as the API server serves it (counted)."""

    def __init__(self, client: ScaleClient) -> None:
        self._client = client

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        parts = path.strip("/").split("/")
        assert parts[-1] == "scale" and parts[-3] == "scalables", path
        name = parts[-2]
        self._client.calls[(method.lower(), "scalables/scale")] += 1
        api = self._client.cluster.apis["scalables"]
        obj = api.get(f"{NS}/{name}")
        if obj is None:
            raise StatusError(404, "NotFound", f"scalables {name} not found")
        if method == "PUT":
            rv = body["metadata"].get("resourceVersion")
            if rv and rv != obj["metadata"]["resourceVersion"]:
                raise StatusError(409, "Conflict", "the object has been modified")
            obj = copy.deepcopy(obj)
            obj["spec"]["size"] = body["spec"]["replicas"]
            obj = api.update(obj)
        return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": name, "namespace": NS,
                             "resourceVersion": obj["metadata"]["resourceVersion"]},
                "spec": {"replicas": obj["spec"]["size"]},
                "status": {"replicas": obj["status"]["size"], "selector": obj["status"]["selector"]}}


class ScaleClient(FakeClient):
    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster)
        self.cluster = cluster
        self.rest = _Rest(self)

    def gets(self) -> Counter[str]:
        return Counter({what: n for (verb, what), n in self.calls.items() if verb == "get" and n})


class LateHandlers:
    """The production registry (cache reads through the reconciler's own WatchIndex), bound once
    the harness has built that index."""

    registry: Any = None

    def handler_for(self, api_version: str, kind: str) -> Any:
        return self.registry.handler_for(api_version, kind)

    def target_problem(self, mapping: ResourceMapping) -> str | None:
        return self.registry.target_problem(mapping)  # type: ignore[no-any-return]


def production_harness(poll_interval: float = 0.0, *, scale_paths: bool = True) -> Harness:
    cluster = Cluster((*MAPPINGS, SCALABLES, CRDS, SECRETS))
    client = ScaleClient(cluster)
    cluster.client = client
    h = Harness(cluster=cluster, poll_interval=poll_interval)
    late = LateHandlers()
    kwargs: dict[str, Any] = {"cache_get": cache_reader(h.mgr.mapper, h.es.watches)}
    if CrdScalePaths is not None and scale_paths:
        kwargs["scale_paths"] = CrdScalePaths(client, clock=h.clock)  # type: ignore[arg-type]
    late.registry = default_registry(client, **kwargs)  # type: ignore[arg-type]
    h.reconciler._d = dataclasses.replace(h.reconciler._d, handlers=late)  # type: ignore[misc]
    return h
