"""The built-in ``ResourceHandler``s: Deployment, StatefulSet, LeaderWorkerSet, ResourceScalingGroup.

Each reads the object (one GET, or an informer-cache hit) and writes through ``/scale`` (see
``escaler.targets.handler``). What differs per kind is which status fields exist, what a finished
rollout looks like, and where the pod selector lives:

========================  ==================  =========================  ==============================
kind                      observedGeneration  rollout complete when      pod selector
========================  ==================  =========================  ==============================
Deployment (apps/v1)      yes                 updated = spec             ``spec.selector``
StatefulSet (apps/v1)     yes                 updateRevision ==          ``spec.selector``
                                              currentRevision, or
                                              updated = spec - partition
                                              (not checked with OnDelete)
LeaderWorkerSet           no                  updated = spec             ``status.hpaPodSelector``
(leaderworkerset.x-k8s.io                     (counted in groups)        (leader pods), else
/v1)                                                                     ``leaderworkerset.sigs.k8s.io/
                                                                         name=<name>,...worker-index=0``
ResourceScalingGroup      yes                 observedGeneration only    ``status.selector``
(autoscaling.openfuyao                        (an RSG has no updated
                                              count)
.com/v1alpha1)
========================  ==================  =========================  ==============================

Limitations, on purpose:

* Only a *template* rollout counts (docs/concepts.md#the-decision-pipeline step 5, corrected): replicas that
  are not Ready yet are capacity on the way, never a reason to hold a write.
* A paused Deployment (``spec.paused``) skips the updated-replicas check: its rollout will not
  progress until someone resumes it, and holding every scale write until ``deferTimeoutSeconds``
  for that would only delay scaling. Its observedGeneration check still applies.
* A StatefulSet with ``updateStrategy: OnDelete`` skips the updated-replicas check for the same
  reason (pods are only replaced when someone deletes them); with ``RollingUpdate`` and a
  ``partition``, only the ordinals at or above the partition are expected to update.
* LeaderWorkerSet counts replicas as groups; its resource metrics, like the HPA's, come from the
  leader pods (``hpaPodSelector``). A partitioned LWS rollout is not modelled: a rollout held at a
  partition looks in progress until the deferral times out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from escaler.kube.scale import selector_string
from escaler.targets.handler import WorkloadHandler

__all__ = [
    "DEPLOYMENT",
    "LEADER_WORKER_SET",
    "LWS_NAME_LABEL",
    "LWS_WORKER_INDEX_LABEL",
    "RESOURCE_SCALING_GROUP",
    "STATEFUL_SET",
    "DeploymentHandler",
    "LeaderWorkerSetHandler",
    "ResourceScalingGroupHandler",
    "StatefulSetHandler",
]

# (group, kind) of each built-in handler
DEPLOYMENT = ("apps", "Deployment")
STATEFUL_SET = ("apps", "StatefulSet")
LEADER_WORKER_SET = ("leaderworkerset.x-k8s.io", "LeaderWorkerSet")
RESOURCE_SCALING_GROUP = ("autoscaling.openfuyao.com", "ResourceScalingGroup")

# labels the LWS controller puts on every pod of a LeaderWorkerSet; worker-index 0 is the leader
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"

_Obj = Mapping[str, Any]


def _dict(value: object) -> _Obj:
    return value if isinstance(value, Mapping) else {}


def _spec_selector(obj: _Obj) -> str:
    sel = _dict(obj.get("spec")).get("selector")
    return selector_string(dict(sel)) if isinstance(sel, Mapping) else ""


class DeploymentHandler(WorkloadHandler):
    """apps/v1 Deployment."""

    def expected_updated(self, obj: _Obj, spec_replicas: int) -> int | None:
        if _dict(obj.get("spec")).get("paused") is True:
            return None
        return spec_replicas

    def selector_of(self, obj: _Obj) -> str:
        return _spec_selector(obj)


class StatefulSetHandler(WorkloadHandler):
    """apps/v1 StatefulSet."""

    def expected_updated(self, obj: _Obj, spec_replicas: int) -> int | None:
        strategy = _dict(_dict(obj.get("spec")).get("updateStrategy"))
        if strategy.get("type") == "OnDelete":
            return None
        status = _dict(obj.get("status"))
        current, update = status.get("currentRevision"), status.get("updateRevision")
        if current and update and current == update:
            # every pod runs the latest template: no template rollout. (A scale-up with OrderedReady
            # pod management creates pods one at a time and counts them as updated only once they
            # exist; that is capacity on the way, not a rollout.)
            return None
        return self._partitioned(strategy, spec_replicas)

    @staticmethod
    def _partitioned(strategy: _Obj, spec_replicas: int) -> int:
        partition = _dict(strategy.get("rollingUpdate")).get("partition")
        if isinstance(partition, bool) or not isinstance(partition, int) or partition <= 0:
            return spec_replicas
        return max(0, spec_replicas - partition)

    def selector_of(self, obj: _Obj) -> str:
        return _spec_selector(obj)


class LeaderWorkerSetHandler(WorkloadHandler):
    """leaderworkerset.x-k8s.io/v1 LeaderWorkerSet: replicas are groups (a leader and its workers)."""

    HAS_OBSERVED_GENERATION = False

    def selector_of(self, obj: _Obj) -> str:
        sel = _dict(obj.get("status")).get("hpaPodSelector")
        if isinstance(sel, str) and sel:
            return sel
        name = _dict(obj.get("metadata")).get("name")
        return f"{LWS_NAME_LABEL}={name},{LWS_WORKER_INDEX_LABEL}=0" if name else ""


class ResourceScalingGroupHandler(WorkloadHandler):
    """autoscaling.openfuyao.com/v1alpha1 ResourceScalingGroup: replicas are groups
    (docs/guide/resourcescalinggroup.md)."""

    HAS_UPDATED_REPLICAS = False

    def selector_of(self, obj: _Obj) -> str:
        sel = _dict(obj.get("status")).get("selector")
        return sel if isinstance(sel, str) else ""
