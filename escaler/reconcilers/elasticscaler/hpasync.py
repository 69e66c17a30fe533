"""MetricsTrigger with ``scalingAlgorithm: HPA`` in a sync (docs/guide/elasticscaler.md#the-triggers):
converge the companion HPA.

``HpaSync.sync(...)``:

* builds the desired companion (``hpa.desired_hpa``; an ``ExternalServer`` metric is
  ``Validated=False/UnsupportedMetric``); pausing pins it (``paused``: to the current count;
  ``paused-replicas: N``: to N);
* refuses, with ``Validated=False/MetricNotGranted``, a Custom or External metric the manager's own
  account may not read (``grants.MetricGrants``: the kube-controller-manager that reads the HPA
  may read any, and the HPA's values are mirrored into status) — and deletes its own companion
  then; looks again after ``grants.REFUSED_TTL_S``;
* refuses, with ``Validated=False/TargetConflict``, when another scaler owns the target, an HPA
  escaler does not own targets it, or an HPA with the companion's name exists that this scaler
  does not control — and deletes its own companion then, so two autoscalers never fight;
* creates the companion when missing, and reverts drift (``hpa.spec_drift``: any hand edit of
  the spec; our labels or ownerReference gone) with a conditional update — a 409 means it changed
  meanwhile, and its own update event brings the scaler back;
* mirrors the HPA's status into the scaler's (``_mirror``: replicas, lastScaleTime, metrics,
  the AbleToScale/ScalingActive/ScalingLimited conditions, a recentDecisions entry per HPA
  rescale). The HPA's own events wake the scaler (the controller ``owns`` HPAs).

Advisory mode does not create the companion (it would scale the target): it deletes one that
exists and reports ``ScalingActive=False/Advisory`` (ScalingDisabled is reserved for a target at zero
replicas). Deleting the scaler deletes the
companion through its ownerReference (the garbage collector's job).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from escaler.api.common import Mode, TargetRef
from escaler.api.elasticscaler import ElasticScaler, ElasticScalerStatus
from escaler.api.scaler import RecentDecision
from escaler.errors import StatusError, is_conflict, is_not_found
from escaler.informers.frozen import thaw
from escaler.reconcilers.elasticscaler.grants import REFUSED_TTL_S, MetricGrants
from escaler.reconcilers.elasticscaler.hpa import (
    HPA_MIRRORED_CONDITIONS,
    UnsupportedMetric,
    desired_hpa,
    hpa_name,
    metadata_drift,
    metric_statuses,
    owned_by,
    spec_drift,
)
from escaler.reconcilers.kit.bindings import TargetKey
from escaler.reconcilers.kit.names import HPA_API_VERSION, HPA_KIND
from escaler.reconcilers.kit.ports import KubeClient, ObjectStore
from escaler.reconcilers.kit.report import Reporter
from escaler.reconcilers.kit.sync import Hold, Sync, to_condition, to_value
from escaler.runtime.types import Result
from escaler.scaling.annotations import ScalerAnnotations
from escaler.scaling.conditions import (
    ADVISORY,
    ADVISORY_HPA_MESSAGE,
    METRIC_NOT_GRANTED,
    METRICS_PIPELINE,
    SCALING_ACTIVE,
    TARGET_CONFLICT,
    UNSUPPORTED_METRIC,
    VALIDATED,
    ConditionValue,
    EventValue,
    Validation,
    remove_condition,
    set_condition,
)

__all__ = ["EVENT_HPA", "ConflictCheck", "HpaSync"]

# the reason of the Events about the companion HPA (created, updated, deleted)
EVENT_HPA = "CompanionHPA"
# the autoscaling/v2 HPA resource, resolved by the client
_HPA = (HPA_API_VERSION, HPA_KIND)

_log = logging.getLogger(__name__)

# why a scaler may not write a target (None: it may); the reconciler's ``conflict``
ConflictCheck = Callable[[ElasticScaler, TargetKey, str | None], str | None]


class HpaSync:
    """See the module docstring."""

    def __init__(self, reporter: Reporter[ElasticScalerStatus], hpas: ObjectStore, client: KubeClient,
                 allowed: Callable[[], bool], grants: MetricGrants | None = None) -> None:
        # status and events
        self._reporter = reporter
        # the HPA informer's cache
        self._hpas = hpas
        # creates, updates and deletes companions
        self._client = client
        # the manager's write fence
        self._allowed = allowed
        # whether the manager may itself read the companion's metrics (None: not checked, a manager
        # built on injected fakes)
        self._grants = grants

    def sync(self, sync: Sync, scaler: ElasticScaler, ann: ScalerAnnotations,
             conflict: ConflictCheck) -> Result:
        ns, name = scaler.namespace, hpa_name(scaler.name)
        generation = scaler.metadata.generation or 0
        status = self._reporter.previous_status(sync)
        status.hpa_name = name
        status.resolved_target_ref = TargetRef(api_version=scaler.spec.target_ref.api_version,
                                               kind=scaler.spec.target_ref.kind,
                                               name=scaler.spec.target_ref.name)
        existing = self._hpas.get_by_key(f"{ns}/{name}")
        pinned: int | None = None
        if ann.paused_replicas is not None:
            pinned = ann.paused_replicas
        elif ann.paused:
            pinned = self._current(existing, status)
        try:
            desired = desired_hpa(scaler, ann, pinned_replicas=pinned)
        except UnsupportedMetric as err:
            return self._reporter.hold(sync, Hold(validation=Validation(UNSUPPORTED_METRIC, str(err))))
        if scaler.spec.mode == Mode.ADVISORY:
            self.delete(sync, scaler)
            conds = self._set(sync, [to_value(c) for c in status.conditions], VALIDATED, True, "Valid",
                              "the spec is valid")
            conds = self._set(sync, conds, SCALING_ACTIVE, False, ADVISORY, ADVISORY_HPA_MESSAGE)
            status.conditions = [to_condition(c) for c in conds]
            status.observed_generation = generation
            self._reporter.write_status(sync, status)
            return Result()
        ref = scaler.spec.target_ref
        target = TargetKey.from_ref(ns, ref.api_version, ref.kind, ref.name)
        refusal = conflict(scaler, target, name)
        if existing is not None and not owned_by(existing, scaler.metadata.uid or ""):
            refusal = (f"HorizontalPodAutoscaler {ns}/{name} exists and is not controlled by this "
                       "ElasticScaler; delete or rename it")
        if refusal is not None:
            self.delete(sync, scaler)
            return self._reporter.hold(sync, Hold(validation=Validation(TARGET_CONFLICT, refusal)))
        trigger = scaler.spec.trigger.metrics_trigger
        ungranted = None if self._grants is None or trigger is None else self._grants.refusal(
            ns, trigger.metrics)
        if ungranted is not None:
            self.delete(sync, scaler)
            return self._reporter.hold(sync, Hold(validation=Validation(METRIC_NOT_GRANTED, ungranted),
                                                  requeue=REFUSED_TTL_S))
        hpa = existing
        if self._allowed():
            hpa = self._converge(sync, existing, desired)
        self._mirror(sync, scaler, status, hpa, generation, pinned)
        self._reporter.write_status(sync, status)
        return Result()

    def delete(self, sync: Sync, scaler: ElasticScaler) -> None:
        """Delete our companion HPA if it exists (the scaler left the HPA path, or may not scale)."""
        name = hpa_name(scaler.name)
        existing = self._hpas.get_by_key(f"{scaler.namespace}/{name}")
        if existing is None or not owned_by(existing, scaler.metadata.uid or ""):
            return
        if not self._allowed():
            return
        try:
            self._client.delete(_HPA, name, scaler.namespace,
                                preconditions_uid=str(existing["metadata"].get("uid") or "") or None)
        except StatusError as err:
            if not is_not_found(err):
                raise
        self._reporter.emit(sync, [EventValue("Normal", EVENT_HPA, f"deleted the companion HPA {name}")],
                            action="Delete")
        _log.info("deleted companion HPA %s/%s", scaler.namespace, name)

    def _converge(self, sync: Sync, existing: Mapping[str, Any] | None,
                  desired: dict[str, Any]) -> Mapping[str, Any] | None:
        name = desired["metadata"]["name"]
        if existing is None:
            try:
                created = self._client.create(_HPA, desired)
            except StatusError as err:
                if err.code == 409:  # AlreadyExists: the cache is behind; next sync compares
                    return None
                raise
            self._reporter.emit(sync, [EventValue("Normal", EVENT_HPA, f"created the companion HPA {name}")],
                                action="Create")
            _log.info("created companion HPA %s", name)
            return created
        drift = spec_drift(desired, existing)
        if not drift and not metadata_drift(desired, existing):
            return existing
        obj = thaw(existing)
        obj["spec"] = desired["spec"]
        meta = obj.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **desired["metadata"]["labels"]}
        refs = [r for r in meta.get("ownerReferences") or () if r.get("controller") is not True]
        meta["ownerReferences"] = [*refs, *desired["metadata"]["ownerReferences"]]
        try:
            updated = self._client.update(_HPA, obj)
        except StatusError as err:
            if is_conflict(err):
                return existing  # changed meanwhile: its update event requeues us
            raise
        what = ", ".join(f"spec.{f}" for f in drift) or "metadata"
        note = f"updated the companion HPA {name} ({what})"
        self._reporter.emit(sync, [EventValue("Normal", EVENT_HPA, note)], action="Update")
        _log.info("updated companion HPA %s (%s)", name, what)
        return updated

    def _mirror(self, sync: Sync, scaler: ElasticScaler, status: ElasticScalerStatus,
                hpa: Mapping[str, Any] | None, generation: int, pinned: int | None) -> None:
        ann_pinned = "elasticscaler.io/paused-replicas" in (scaler.metadata.annotations or {})
        conds = self._set(sync, [to_value(c) for c in status.conditions], VALIDATED, True, "Valid",
                          "the spec is valid")
        conds = remove_condition(conds, METRICS_PIPELINE)
        hst = hpa.get("status") if hpa is not None else None
        hst = hst if isinstance(hst, Mapping) else {}
        by_type = {c.get("type"): c for c in hst.get("conditions") or () if isinstance(c, Mapping)}
        hname = hpa_name(scaler.name)
        for t in HPA_MIRRORED_CONDITIONS:
            c = by_type.get(t)
            if c is None:
                if t != "ScalingLimited":
                    conds = self._set(sync, conds, t, "Unknown", "WaitingForHPA",
                                      f"the HorizontalPodAutoscaler {hname} has not reported {t} yet")
                continue
            reason = str(c.get("reason") or "Unknown")
            message = f"HPA {hname}: {c.get('message', '')}"
            if t == "AbleToScale" and pinned is not None:
                key = "paused-replicas" if ann_pinned else "paused"
                reason = "Paused"
                message = (f"the companion HPA is pinned to {max(1, pinned)} replicas by "
                           f"elasticscaler.io/{key}; {message}")
            conds = self._set(sync, conds, t, str(c.get("status") or "Unknown"), reason, message)
        status.conditions = [to_condition(c) for c in conds]
        status.observed_generation = generation
        prev_current = status.current_replicas
        if isinstance(hst.get("currentReplicas"), int):
            status.current_replicas = int(hst["currentReplicas"])
        if isinstance(hst.get("desiredReplicas"), int):
            status.desired_replicas = int(hst["desiredReplicas"])
        last = hst.get("lastScaleTime")
        if isinstance(last, str):
            try:
                new_last = datetime.fromisoformat(last.replace("Z", "+00:00"))
            except ValueError:
                new_last = None
            if new_last is not None and new_last != status.last_scale_time:
                if status.last_scale_time is not None and status.desired_replicas is not None:
                    status.record(RecentDecision(
                        time=new_last, from_=prev_current or 0, to=status.desired_replicas,
                        reason=f"HorizontalPodAutoscaler {hname} rescaled the target", bound_by=None))
                status.last_scale_time = new_last
        status.current_metrics = metric_statuses(scaler, hpa)
        status.deferred_since = None

    @staticmethod
    def _set(sync: Sync, conds: list[ConditionValue], ctype: str, status: bool | str, reason: str,
             message: str) -> list[ConditionValue]:
        return set_condition(conds, ctype, status, reason, message, generation=sync.generation,
                             now_iso=sync.now_iso)

    @staticmethod
    def _current(existing: Mapping[str, Any] | None, status: ElasticScalerStatus) -> int:
        st = existing.get("status") if existing is not None else None
        if isinstance(st, Mapping) and isinstance(st.get("currentReplicas"), int):
            return int(st["currentReplicas"])
        return status.current_replicas or 1
