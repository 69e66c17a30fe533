"""``TidalReconciler``: a Tidal's rules → ``status.desiredReplicas`` (docs/guide/tidal.md). Never writes the
target.

One reconcile, level-based:

1. read the Tidal from the informer cache (gone → nothing to do);
2. parse it and its schedules (``escaler.scaling.tidal.parse_rule_schedules``; once per (uid,
   resourceVersion), ``escaler.reconcilers.kit.tidalevaluations``), check the binding
   labels ``elasticscaler.io/name`` and ``elasticscaler.io/namespace`` (docs/guide/tidal.md: without them
   ``Ready=False/MissingRequiredLabels``, but the status is still computed — no ElasticScaler hears
   of its changes, yet ``kubectl get tidal`` shows what the schedule says), and ask the binding index
   whether another scaler decides the target (``escaler.reconcilers.tidal.conflicts``). A *floor*
   Tidal — the scaler writing its target names it in ``spec.floorFrom`` — needs no labels and is
   no conflict (that scaler watches it by name and lifts its recommendation to it);
3. evaluate the rules at ``clock.now()`` (``escaler.scaling.tidal.evaluate``; no stored "fired"
   flag: a restarted manager computes the same state), once per (uid, resourceVersion, minute)
   shared with every scaler whose ``spec.floorFrom`` names this Tidal; an evaluation that would
   look past more than ``MAX_SKIPPED_FIRES`` excluded start fires is
   ``Ready=False/InvalidSchedule`` naming the rule's ``excludeDates`` (the status held, evaluated
   again after ``EXCLUDED_RETRY_SECONDS``);
4. build the status (``escaler.reconcilers.tidal.report``) and write it through the status
   subresource **only when it differs** from the cached one (``StatusWriter``: a merge patch,
   nothing sent when equal, and a cache that lags our own write is not mistaken for a change);
   events are recorded only with a write;
5. return ``Result(requeue_after = nextTransitionTime - now)``: the controller's delaying queue wakes
   the Tidal exactly at the next fire (no polling). A wake-up a hair early (wall clock and monotonic
   clock drift apart) finds nothing changed and requeues for the remaining milliseconds.

The follower ElasticScaler watches this Tidal (a label-selected informer on its state source), so the
target write follows the status write through one watch event.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from escaler.api.tidal import Tidal
from escaler.clock import Clock
from escaler.reconcilers.kit.bindings import TargetBindings
from escaler.reconcilers.kit.names import LABEL_NAME, LABEL_NAMESPACE
from escaler.reconcilers.kit.ports import EventSink, ObjectStore
from escaler.reconcilers.kit.status import StatusClient, StatusWriter, WriteOutcome
from escaler.reconcilers.kit.tidalevaluations import SHARED, ParsedTidal, TidalEvaluations
from escaler.reconcilers.tidal.conflicts import conflict_of, floor_user, tidal_target
from escaler.reconcilers.tidal.report import Problems, build_status, events_for, rfc3339
from escaler.runtime.types import Request, Result
from escaler.scaling.tidal import Evaluation, ScheduleError, TooManyExcludedFires

__all__ = ["TidalDeps", "TidalReconciler", "label_problem"]

_log = logging.getLogger(__name__)

# a Tidal held for too many excluded fires is evaluated again this often (the count moves with time)
EXCLUDED_RETRY_SECONDS = 600.0


@dataclass(frozen=True)
class TidalDeps:
    """What the reconciler talks to; ``setup_tidal`` wires the manager's, tests pass fakes."""

    # the Tidal informer's cache
    tidals: ObjectStore
    # status patches (``DynamicClient.patch_status``)
    client: StatusClient
    # the Tidal resource (a ResourceMapping, or an (apiVersion, kind) pair the client resolves)
    mapping: Any
    # the shared binding index (claims of every scaler kind)
    bindings: TargetBindings
    recorder: EventSink
    clock: Clock
    # parses once per (uid, resourceVersion), evaluates once per (uid, resourceVersion, minute),
    # shared with every FloorReader (None: the manager's SHARED)
    evaluations: TidalEvaluations | None = None


def label_problem(obj: Mapping[str, Any]) -> str | None:
    """What is missing of the binding labels, or None."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    labels = labels if isinstance(labels, Mapping) else {}
    missing = [k for k in (LABEL_NAME, LABEL_NAMESPACE) if not labels.get(k)]
    if not missing:
        return None
    return (f"metadata.labels: missing {', '.join(missing)}: the labels must name the StateTrigger "
            "ElasticScaler that follows this Tidal, or no ElasticScaler is told when desiredReplicas "
            "changes (the status is still computed)")


def _regarding(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"apiVersion": Tidal.API_VERSION, "kind": Tidal.KIND,
            "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")
                         if meta.get(k)}}


class TidalReconciler:
    """See the module docstring."""

    def __init__(self, deps: TidalDeps) -> None:
        # collaborators; fixed
        self._d = deps
        # the status-write-only-on-change rule (remembers our last write per Tidal, bounded)
        self.writer = StatusWriter(deps.client)
        # the parse and evaluation caches (shared with the floors)
        self._evaluations = deps.evaluations if deps.evaluations is not None else SHARED

    def reconcile(self, request: Request) -> Result:
        obj = self._d.tidals.get_by_key(str(request))
        if obj is None:
            return Result()
        now = self._d.clock.now()
        parsed, problems = self._inspect(obj, request)
        evaluation, problems = self._evaluate(obj, parsed, problems, now)
        meta = obj.get("metadata") or {}
        generation = int(meta.get("generation") or 0)
        base = self.writer.base_status(obj)
        status = build_status(base, generation, evaluation, problems, rfc3339(now))
        if self.writer.write(self._d.mapping, obj, status) is WriteOutcome.WRITTEN:
            self._record(obj, base, status)
        return self._requeue(evaluation, now, problems)

    def _evaluate(self, obj: Mapping[str, Any], parsed: ParsedTidal, problems: Problems,
                  now: datetime) -> tuple[Evaluation | None, Problems]:
        """The evaluation (None when the status is held) and the problems with its own: an
        evaluation that would look past too many excluded fires is a schedule problem."""
        if problems.holds:
            return None, problems
        try:
            return self._evaluations.evaluate(obj, parsed, now), problems
        except TooManyExcludedFires as err:
            error = ScheduleError(err.index, err.name, "excludeDates", err.error)
            return None, replace(problems, schedules=(*problems.schedules, error))

    def _inspect(self, obj: Mapping[str, Any], request: Request) -> tuple[ParsedTidal, Problems]:
        labels = label_problem(obj)
        parsed = self._evaluations.parsed(obj)
        if parsed.invalid:
            why = "; ".join(f"{loc}: {msg}" for loc, msg in parsed.invalid[:5])
            invalid = f"the object does not parse as a Tidal: {why}"
            return parsed, Problems(invalid_spec=invalid, labels=labels)
        target = tidal_target(obj)
        conflict = None
        if target is not None:
            conflict = conflict_of(self._d.bindings, request.namespace, request.name, target)
            if labels is not None and floor_user(self._d.bindings, request.namespace, request.name, target):
                labels = None  # a floor Tidal: its scaler watches it by name (conflicts.floor_user)
        return parsed, Problems(schedules=parsed.errors, labels=labels, conflict=conflict)

    def _record(self, obj: Mapping[str, Any], old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        for ev in events_for(old, new):
            try:
                self._d.recorder.event(_regarding(obj), "Warning" if ev.type == "Warning" else "Normal",
                                       ev.reason, "Evaluate", ev.note)
            except ValueError:  # a bug in the event's arguments must not fail the sync
                _log.exception("Tidal event %s not recorded", ev.reason)

    @staticmethod
    def _requeue(evaluation: Evaluation | None, now: Any, problems: Problems | None = None) -> Result:
        if problems is not None and any(e.field == "excludeDates" for e in problems.schedules):
            # how many fires an evaluation looks past moves with time: look again later
            return Result(requeue_after=EXCLUDED_RETRY_SECONDS)
        if evaluation is None or evaluation.next_transition is None:
            return Result()
        return Result(requeue_after=max(0.0, (evaluation.next_transition - now).total_seconds()))
