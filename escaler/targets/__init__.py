"""escaler.targets: ResourceHandlers — reading and writing the replica count of a scale target.

Layering (docs/toolkit.md#the-packages): above ``escaler.kube``, below ``escaler.runtime``; independent of
``escaler.signals``. Each module's docstring states its contract:

* ``snapshot`` — ``TargetSnapshot`` (counts, selector, resourceVersion and the
  docs/concepts.md#the-decision-pipeline guard inputs ``rollout_in_progress`` / ``settling_scale_down``),
  ``TargetUnreadable``, ``TargetRefLike``;
* ``handler`` — the ``ResourceHandler`` protocol, ``WorkloadHandler`` (the base of every built-in)
  and ``GenericScaleHandler`` (any kind with ``/scale``, else ``spec.replicas``);
* ``workloads`` — Deployment, StatefulSet, LeaderWorkerSet and ResourceScalingGroup handlers;
* ``registry`` — ``HandlerRegistry`` and ``default_registry``.

Typical use in a reconciler::

    handlers = default_registry(dynamic, cache_get=cache_lookup)   # once per manager
    handler = handlers.handler_for(ref.api_version, ref.kind)      # ValueError → InvalidSpec
    try:
        snap = handler.read(namespace, ref)       # StatusError 404 → TargetNotFound
    except TargetUnreadable: ...                  # → TargetUnreadable
    if snap.rollout_in_progress: ...              # guard (docs/concepts.md#the-decision-pipeline step 5)
    snap = handler.write_replicas(snap, desired)  # StatusError 409 → requeue and re-read
"""

from escaler.targets.handler import (
    CacheGet,
    GenericScaleHandler,
    ResourceHandler,
    WorkloadHandler,
    rollout_message,
)
from escaler.targets.registry import HandlerRegistry, default_registry
from escaler.targets.snapshot import TargetRefLike, TargetSnapshot, TargetUnreadable
from escaler.targets.workloads import (
    DeploymentHandler,
    LeaderWorkerSetHandler,
    ResourceScalingGroupHandler,
    StatefulSetHandler,
)

__all__ = [
    "CacheGet",
    "DeploymentHandler",
    "GenericScaleHandler",
    "HandlerRegistry",
    "LeaderWorkerSetHandler",
    "ResourceHandler",
    "ResourceScalingGroupHandler",
    "StatefulSetHandler",
    "TargetRefLike",
    "TargetSnapshot",
    "TargetUnreadable",
    "WorkloadHandler",
    "default_registry",
    "rollout_message",
]
