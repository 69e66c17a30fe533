"""What the manager caches of a GroupReplication clone: ``slim_clone``, an informer transform.

A clone is a full copy of its member's template, and a template may be large (a pod spec with
long args, big annotations: the API server accepts objects up to ~1.5 MiB). Every clone is cached
twice — by its namespace's clone cache (label-selected on ``autoscaling.openfuyao.com/rsg``) and
by the namespace-wide cache of its kind that members and ElasticScaler targets are read from — so
1,024 clones of a 1.18 MiB template cost about a GiB per cache. Nothing in the manager reads a
clone's template: the RSG reads its labels, ownerReferences, ``spec.replicas`` and status; the
target handlers (``escaler.targets``) read ``spec.replicas``, ``spec.selector``, ``spec.paused``,
``spec.updateStrategy``, generation and status (a clone is never an ElasticScaler's target: the
RSG claims every clone name). Clones are never updated from the cache (a clone is a copy of its
template at creation, docs/guide/resourcescalinggroup.md), so no template comparison needs the cached copy
either.

``slim_clone(obj)`` is applied by every dynamic informer of the manager (``DynamicInformers.
add_transform``, wired by ``setup_rsg``) before an object is cached. For an object that
``clones.is_clone`` (rsg and group labels, controller ownerReference to a ResourceScalingGroup) it
returns a shallow copy without:

* ``spec.template``, ``spec.volumeClaimTemplates``, and the ``leaderTemplate``/``workerTemplate``
  of ``spec.leaderWorkerTemplate`` (its ``size`` and other fields stay);
* every annotation longer than ``KEPT_ANNOTATION_BYTES`` (key plus value), e.g.
  ``kubectl.kubernetes.io/last-applied-configuration`` copied from a template.

It marks what it dropped with the annotation ``STRIPPED_ANNOTATION`` (so a reader can tell a slim
copy from a template-less object). Any other object is returned as it came, so a member template
keeps its template. A member that is itself a clone is refused by the RSG (its cached copy has no
template to clone). Pure, never mutates its argument (``escaler.informers.transform``'s contract).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from escaler.reconcilers.rsg.clones import is_clone

__all__ = ["KEPT_ANNOTATION_BYTES", "STRIPPED_ANNOTATION", "slim_clone"]

# annotations up to this size (key + value, in characters) stay in the cached copy of a clone
KEPT_ANNOTATION_BYTES = 256
# set on a cached clone that lost fields here; its value lists them
STRIPPED_ANNOTATION = "autoscaling.openfuyao.com/cache-stripped"

_SPEC_FIELDS = ("template", "volumeClaimTemplates")
_LWS_FIELDS = ("leaderTemplate", "workerTemplate")


def slim_clone(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj`` without its templates and large annotations when it is a clone (module docstring)."""
    if not is_clone(obj):
        return obj
    dropped: list[str] = []
    out = dict(obj)
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        slim = {k: v for k, v in spec.items() if k not in _SPEC_FIELDS}
        dropped += [f"spec.{k}" for k in _SPEC_FIELDS if k in spec]
        lwt = spec.get("leaderWorkerTemplate")
        if isinstance(lwt, Mapping) and any(k in lwt for k in _LWS_FIELDS):
            slim["leaderWorkerTemplate"] = {k: v for k, v in lwt.items() if k not in _LWS_FIELDS}
            dropped.append("spec.leaderWorkerTemplate templates")
        out["spec"] = slim
    meta = dict(obj.get("metadata") or {})
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        kept = {k: v for k, v in annotations.items()
                if len(k) + len(v if isinstance(v, str) else str(v)) <= KEPT_ANNOTATION_BYTES}
        if len(kept) < len(annotations):
            dropped.append(f"{len(annotations) - len(kept)} annotations")
        annotations = kept
    else:
        annotations = {}
    if dropped:
        meta["annotations"] = {**annotations, STRIPPED_ANNOTATION: ", ".join(dropped)}
        out["metadata"] = meta
        return out
    return obj
