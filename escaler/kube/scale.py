"""Read and write a workload's replica count, through ``/scale`` when the resource serves it.

Contract:

* With a ``scale`` subresource (Deployments, StatefulSets, ReplicaSets, CRDs that declare one):
  ``get_scale`` GETs ``.../<name>/scale`` (an ``autoscaling/v1`` Scale) and ``update_scale`` PUTs a
  Scale carrying ``metadata.resourceVersion``, so a write based on a stale read fails with a 409
  ``StatusError`` instead of overwriting someone else's change.
* Without one, the object itself is read (``spec.replicas``, ``status.replicas``, the selector from
  ``status.selector`` or ``spec.selector``) and written with a JSON merge patch that carries
  ``metadata.resourceVersion``; the API server checks a resourceVersion present in a patch exactly
  as it does for an update, so the optimistic-concurrency guarantee is the same.
* A reader that already holds the object (an informer cache) needs no ``get_scale`` for a custom
  resource: ``escaler.kube.scalepaths`` computes the same Scale from the object at the paths its
  CRD declares; the write still goes through ``update_scale`` with the object's resourceVersion.
* An empty ``resource_version`` makes the write unconditional (last writer wins). Use it only when
  the caller has no read to be stale against.
* Limitation of the fallback: an object without ``spec.replicas`` reads as 1 replica, the default
  every built-in workload applies; a kind whose default differs must serve ``/scale``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from escaler.kube.discovery import ResourceMapping
from escaler.kube.dynamic import DynamicClient, MappingRef, resource_path

__all__ = ["DEFAULT_REPLICAS", "Scale", "ScaleClient", "selector_string"]

# spec.replicas when a workload omits it (the built-in workloads' default)
DEFAULT_REPLICAS = 1


@dataclass(frozen=True)
class Scale:
    # desired replicas (spec.replicas)
    spec_replicas: int
    # observed replicas (status.replicas); 0 when not reported yet
    status_replicas: int
    # label selector of the pods, in string form ("app=x,tier in (a,b)"); "" when unknown
    selector: str
    # resourceVersion of the object the numbers came from; pass it back to update_scale
    resource_version: str


class ScaleClient:
    """Replica reads and conditional writes; thread-safe."""

    def __init__(self, dynamic: DynamicClient) -> None:
        # performs the requests and resolves (api_version, kind) references
        self._dynamic = dynamic

    def get_scale(self, m: MappingRef, name: str, namespace: str | None) -> Scale:
        rm = self._dynamic.resolve(m)
        if "scale" in rm.subresources:
            return _from_scale(self._dynamic.rest.request("GET", resource_path(rm, namespace, name, "scale")))
        return _from_object(self._dynamic.get(rm, name, namespace), rm, name)

    def update_scale(
        self,
        m: MappingRef,
        name: str,
        namespace: str | None,
        replicas: int,
        resource_version: str,
    ) -> Scale:
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ValueError(f"update_scale {name}: replicas must be an integer >= 0, got {replicas!r}")
        rm = self._dynamic.resolve(m)
        metadata: dict[str, Any] = {"name": name}
        if namespace:
            metadata["namespace"] = namespace
        if resource_version:
            metadata["resourceVersion"] = resource_version
        if "scale" in rm.subresources:
            body = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": metadata,
                    "spec": {"replicas": replicas}}
            out = self._dynamic.rest.request("PUT", resource_path(rm, namespace, name, "scale"), body=body)
            return _from_scale(out)
        patch: dict[str, Any] = {"spec": {"replicas": replicas}}
        if resource_version:
            patch["metadata"] = {"resourceVersion": resource_version}
        return _from_object(self._dynamic.patch(rm, name, patch, namespace, patch_type="merge"), rm, name)


def _int(value: object, default: int, what: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} is not an integer: {value!r}")
    return value


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _from_scale(obj: dict[str, Any]) -> Scale:
    spec, status, md = _dict(obj.get("spec")), _dict(obj.get("status")), _dict(obj.get("metadata"))
    sel = status.get("selector")
    return Scale(
        spec_replicas=_int(spec.get("replicas"), 0, "Scale spec.replicas"),
        status_replicas=_int(status.get("replicas"), 0, "Scale status.replicas"),
        selector=sel if isinstance(sel, str) else "",
        resource_version=str(md.get("resourceVersion") or ""),
    )


def _from_object(obj: dict[str, Any], rm: ResourceMapping, name: str) -> Scale:
    spec, status, md = _dict(obj.get("spec")), _dict(obj.get("status")), _dict(obj.get("metadata"))
    where = f"{rm.kind} {name}"
    sel = status.get("selector")
    if not isinstance(sel, str) or not sel:
        spec_sel = spec.get("selector")
        sel = selector_string(spec_sel) if isinstance(spec_sel, dict) else ""
    return Scale(
        spec_replicas=_int(spec.get("replicas"), DEFAULT_REPLICAS, f"{where}: spec.replicas"),
        status_replicas=_int(status.get("replicas"), 0, f"{where}: status.replicas"),
        selector=sel,
        resource_version=str(md.get("resourceVersion") or ""),
    )


def selector_string(selector: dict[str, Any]) -> str:
    """A ``metav1.LabelSelector`` (matchLabels/matchExpressions) in the string form of labelSelector."""
    terms: list[str] = []
    labels = _dict(selector.get("matchLabels"))
    for k in sorted(labels):
        terms.append(f"{k}={labels[k]}")
    exprs = selector.get("matchExpressions")
    for e in exprs if isinstance(exprs, list) else []:
        if not isinstance(e, dict):
            continue
        key, op = str(e.get("key") or ""), str(e.get("operator") or "")
        values = sorted(str(v) for v in (e.get("values") or []))
        if op == "In":
            terms.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            terms.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            terms.append(key)
        elif op == "DoesNotExist":
            terms.append(f"!{key}")
        else:
            raise ValueError(f"label selector: unknown operator {op!r} for key {key!r}")
    return ",".join(terms)
