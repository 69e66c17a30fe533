"""``Reporter``: the one place a ResourceScalingGroup sync (an ``Outcome``) becomes status and events.

The status is built on the status the cluster holds (``StatusWriter.base_status``: the cached one,
or the one we last wrote while the cache lags it): the fields an outcome sets replace theirs,
``None`` keeps what is there (a hold keeps the last counts, members and groups), conditions are set
per type with ``lastTransitionTime`` kept while their status does not change
(``escaler.scaling.conditions.set_condition``), and ``observedGeneration`` is the generation the
sync saw. The status is written through the status subresource **only when it changed**
(``escaler.reconcilers.kit.status.StatusWriter``: a merge patch, no write for an equal
status). Events: the outcome's own (writes done, writes failed) and one per condition whose
status or reason changed (a steady state records nothing); the recorder aggregates repeats.
"""

from __future__ import annotations

import logging
from typing import Any

from escaler.api.rsg import ResourceScalingGroup
from escaler.errors import StatusError, is_not_found
from escaler.reconcilers.kit.ports import EventSink, KubeClient, Mapper
from escaler.reconcilers.kit.status import StatusWriter
from escaler.reconcilers.rsg.context import Outcome, RSGSync
from escaler.runtime.types import Result
from escaler.scaling.conditions import ConditionValue, changed_types, remove_condition, set_condition

__all__ = ["Reporter"]

_log = logging.getLogger(__name__)

_FIELDS = (("replicas", "replicas"), ("ready_replicas", "readyReplicas"), ("selector", "selector"),
           ("members", "members"), ("groups", "groups"))


def _regarding(sync: RSGSync) -> dict[str, Any]:
    meta = sync.rsg.metadata
    return {"apiVersion": ResourceScalingGroup.API_VERSION, "kind": ResourceScalingGroup.KIND,
            "metadata": {k: v for k, v in (
                ("name", meta.name), ("namespace", meta.namespace), ("uid", meta.uid),
                ("resourceVersion", meta.resource_version)) if v}}


class Reporter:
    """See the module docstring. Thread-safe."""

    def __init__(self, client: KubeClient, mapper: Mapper, recorder: EventSink) -> None:
        # status patches, only when changed
        self.writer = StatusWriter(client)
        # resolves the RSG resource; fixed
        self._mapper = mapper
        # events.k8s.io/v1 Events, aggregated; fixed
        self._recorder = recorder

    def status_of(self, sync: RSGSync, out: Outcome) -> dict[str, Any]:
        """The status ``out`` makes of the one the cluster holds (plain JSON)."""
        status = self.writer.base_status(sync.obj)
        for attr, key in _FIELDS:
            value = getattr(out, attr)
            if value is not None:
                status[key] = value
        old = [c for c in (ConditionValue.from_wire(x) for x in status.get("conditions") or []
                           if isinstance(x, dict)) if c is not None]
        conds = list(old)
        for t in out.removed:
            conds = remove_condition(conds, t)
        for spec in out.conditions:
            conds = set_condition(conds, spec.type, spec.status, spec.reason, spec.message,
                                  generation=sync.generation, now_iso=sync.now_iso)
        status["conditions"] = [c.to_wire() for c in conds]
        status["observedGeneration"] = sync.generation
        for t in changed_types(old, conds):
            c = next(x for x in conds if x.type == t)
            if c.status != "True" or any(o.type == t for o in old):
                self._event(sync, "Normal" if c.status == "True" else "Warning", c.reason, t, c.message)
        return status

    def report(self, sync: RSGSync, out: Outcome) -> Result:
        if not out.report:
            return Result(requeue=out.requeue, requeue_after=out.requeue_after)
        status = self.status_of(sync, out)
        for ev in out.events:
            self._event(sync, ev.type, ev.reason, ev.action, ev.note)
        mapping = self._mapper.mapping_for(ResourceScalingGroup.API_VERSION, ResourceScalingGroup.KIND)
        try:
            self.writer.write(mapping, sync.obj, status)
        except StatusError as err:
            if not is_not_found(err):
                raise  # the controller retries with backoff
        return Result(requeue=out.requeue, requeue_after=out.requeue_after)

    def _event(self, sync: RSGSync, type_: str, reason: str, action: str, note: str) -> None:
        try:
            self._recorder.event(_regarding(sync), "Warning" if type_ == "Warning" else "Normal", reason,
                                 action, note)
        except ValueError:
            _log.exception("cannot record event %s", reason)

    def forget(self, uid: str) -> None:
        self.writer.forget(uid)
