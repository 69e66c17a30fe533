"""``escaler explain -n NS NAME``: one ElasticScaler's last decision, step by step
(docs/operations.md#the-commands); ``--kind LLMScaler`` explains an LLMScaler the same way (same status model
and pipeline).

Reads the scaler (its status is the record: ``currentMetrics``, ``recentDecisions``, the
conditions) and its recent Events (``events.k8s.io/v1``, ``fieldSelector regarding.name=NAME``),
and prints:

1. **Inputs** — every metric's value, target and the replicas it alone recommends (or its error),
   or the State/Signal decision read. The values are the status's, *as of* the last status write
   (the newest ``metadata.managedFields`` entry for the ``status`` subresource, the API server's own
   time of that write): the controller rewrites a value only when it moves beyond the algorithm's
   tolerance (``escaler.reconcilers.kit.drift``; or at the opt-in
   ``--status-refresh-seconds``), so explain says so and names the live series on the manager's
   ``/metrics``
   (``escaler_scaler_metric_value{namespace,name}``, see ``escaler.reconcilers.kit.scalermetrics``);
1b. **Flow sizing** (LLMScaler ``metricProvider: Flow``) — the figures of the flow's last decision,
   in the order of its steps (``status.currentMetrics`` rows of type ``FlowDecision``: work,
   backlog, planned, utilization, headroom, need), what each means, and where its steps in words
   are (the last decision's reason, step 8);
2. **Recommendation** — ``ScalingActive`` (what was evaluated, what it recommends before any cap);
2b. **Fallback** (LLMScaler, ElasticScaler MetricsTrigger) — ``spec.fallback`` and
   ``status.fallback``: not set, not engaged, counting (k of failureThreshold polls without a
   usable signal, since when), or engaged (fallback.replicas is the recommendation the next steps
   work on);
2c. **Activation** (ElasticScaler MetricsTrigger with ``metricsTrigger.activation``) — the value
   and this sync's verdict from the ScalingActive message: below activation (the target goes, or
   stays, at 0 — through the scale-down window), above it (active: at least 1, a wake from 0 is
   immediate), or unknown (no External/ExternalServer reading: never to 0);
2d. **Floor** (LLMScaler, ElasticScaler MetricsTrigger) — ``spec.floorFrom`` and the
   ``ScheduleFloor`` condition: not set, the floor in force (replicas, the Tidal's active rules: the
   recommendation is raised to it before stabilization), no active rule, or the Tidal missing or
   invalid (no floor);
3. **Stabilization** — whether the window held the count (``AbleToScale=ScaleDownStabilized``);
4. **Rate limit** — the algorithm's own rate cap (apa ``scaleUpRate``/``scaleDownRate``), applied
   after stabilization as the HPA applies its rate policies, its own step: ``ScalingLimited``
   ScaleUpLimit/ScaleDownLimit saying the algorithm's rate bound the count;
5. **Step limits** and 6. **Clamp** — ``ScalingLimited`` (the last step that changed the count);
7. **Guard** — a held write (``RolloutInProgress``/``ScaleDownSettling``/``InsufficientCapacity``,
   ``deferredSince``), a forced one (``DeferralTimedOut``), or Unschedulable pods reported
   (``InsufficientCapacity`` with the scheduler's message);
8. **Write** — current → desired, ``lastScaleTime``, and the last recorded decision (its
   ``boundBy``: the ``BoundBy`` value of the step that bound it) with the pipeline trail the
   controller stored in its reason;
8b. **Pod deletion cost** (ElasticScaler with ``scaleDown.podDeletionCost``) — the last
   ``DeletionCostSet`` event (the pods given the lowest cost before the last scale-down, with their
   values and costs) or ``DeletionCostSkipped`` (why none was set; the scale-down went ahead);

then the last decisions, the recent events, and the health verdict of docs/concepts.md#conditions-and-health
(``escaler.scaling.conditions.health``): *failing* when AbleToScale, ScalingActive or Validated
is False, *waiting* when AbleToScale is True with a guard, capacity or stabilization reason, else
*ok*.
Exit code 0, 1 when the scaler cannot be read, 2 for usage.

``render(obj, events)`` is pure (the tests call it directly).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from escaler.errors import ConnectionFailure, StatusError, is_not_found
from escaler.kube.config import ConfigError, load_config, new_api_client
from escaler.kube.discovery import RESTMapper
from escaler.kube.dynamic import DynamicClient
from escaler.kube.events import EVENTS_MAPPING
from escaler.kube.rest import RestClient
from escaler.scaling.conditions import (
    DEFERRAL_TIMED_OUT,
    SCALE_DOWN_LIMIT,
    SCALE_DOWN_STABILIZED,
    SCALE_UP_LIMIT,
    TOO_FEW_REPLICAS,
    TOO_MANY_REPLICAS,
    limited_by_algorithm_rate,
)
from escaler.scaling.conditions import health as rule
from escaler.scaling.deletioncost import EVENT_DELETION_COST_SET, EVENT_DELETION_COST_SKIPPED
from escaler.scaling.guards import GUARD_REASONS as _GUARDS

__all__ = ["GUARD_REASONS", "STABILIZATION_REASONS", "add_parser", "health", "render", "run", "status_time"]

SCALER_REF = ("elasticscaler.io/v1alpha1", "ElasticScaler")
# the scaler kinds explain reads (--kind), by kind
SCALER_REFS = {"ElasticScaler": SCALER_REF, "LLMScaler": ("llm.escaler.io/v1alpha1", "LLMScaler")}
# AbleToScale reasons shown under "Guard": the guards (holding, or InsufficientCapacity reported) and
# a forced write
GUARD_REASONS = frozenset({*_GUARDS, DEFERRAL_TIMED_OUT})
STABILIZATION_REASONS = frozenset({SCALE_DOWN_STABILIZED})
# how many events are shown (newest last)
MAX_EVENTS = 15


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> Callable[[argparse.Namespace], int]:
    p = sub.add_parser(
        "explain",
        help="explain a scaler's last decision step by step (ElasticScaler; --kind LLMScaler)",
        description="Print one ElasticScaler's last decision pipeline (inputs, recommendation, "
        "stabilization, limits, clamp, guard, write) from its status and recent Events.",
    )
    p.add_argument("-n", "--namespace", default="default", help="namespace of the scaler (default: default)")
    p.add_argument("name", help="name of the ElasticScaler (or of the --kind given)")
    p.add_argument("--kind", choices=sorted(SCALER_REFS), default="ElasticScaler",
                   help="kind of the scaler (default: ElasticScaler)")
    p.add_argument("--kubeconfig", metavar="PATH", default=None,
                   help="kubeconfig file (default: $KUBECONFIG, then in-cluster, then ~/.kube/config)")
    p.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    return run


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    status = obj.get("status") or {}
    return {str(c.get("type")): c for c in status.get("conditions") or () if isinstance(c, Mapping)}


@dataclass(frozen=True)
class _Cond:
    type: str
    status: str
    reason: str


def health(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(verdict, why): failing / waiting / ok, per the health rule (``escaler.scaling.conditions.health``)."""
    conds = _conditions(obj)
    if not conds:
        return "waiting", "no conditions yet: the controller has not synced this scaler"
    verdict = rule([_Cond(t, str(c.get("status")), str(c.get("reason"))) for t, c in conds.items()])
    if verdict == "failing":
        for t in ("AbleToScale", "ScalingActive", "Validated"):
            c = conds.get(t)
            if c is not None and c.get("status") == "False":
                return verdict, f"{t}=False/{c.get('reason')}: {c.get('message', '')}"
    able = conds.get("AbleToScale") or {}
    if verdict == "waiting":
        return verdict, f"AbleToScale=True/{able.get('reason')}: {able.get('message', '')}"
    return verdict, "AbleToScale, ScalingActive and Validated are not False; no guard or window holds"


def _cond_line(conds: Mapping[str, Mapping[str, Any]], t: str) -> str:
    c = conds.get(t)
    if c is None:
        return f"{t}: (not reported)"
    return f"{t}={c.get('status')}/{c.get('reason')}: {c.get('message', '')}"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return "-" if v is None else str(v)


def _trigger(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec") or {}
    return spec.get("trigger") or {}


def status_time(obj: Mapping[str, Any]) -> str | None:
    """When the status was last written: the newest ``managedFields`` time of the status subresource."""
    meta = obj.get("metadata") or {}
    times = [str(e.get("time")) for e in meta.get("managedFields") or ()
             if isinstance(e, Mapping) and e.get("subresource") == "status" and e.get("time")]
    return max(times) if times else None


def _inputs_head(obj: Mapping[str, Any]) -> list[str]:
    """The as-of line of the metric values, and where the live ones are."""
    meta = obj.get("metadata") or {}
    when = status_time(obj)
    series = f'escaler_scaler_metric_value{{namespace="{meta.get("namespace")}",name="{meta.get("name")}"}}'
    return [f"   values as of {when or 'the last status write'} (a value is rewritten when it moves beyond "
            f"the algorithm's tolerance); live: {series} on the manager's /metrics"]


def _fallback_lines(policy: Any, count: Any) -> list[str]:
    """Step 2b: the fallback (``spec.fallback``) and the running count (``status.fallback``)."""
    head = "2b. Fallback (spec.fallback)"
    if not isinstance(policy, Mapping):
        return [head, "   not set: while every metric fails, the current count is held"]
    n, r = policy.get("failureThreshold"), policy.get("replicas")
    head += f": {r} replicas after {n} consecutive metric polls without a usable signal"
    if not isinstance(count, Mapping):
        return [head, "   not engaged: the last metric poll had a usable signal"]
    k, since = count.get("failures"), count.get("since", "-")
    if isinstance(k, int) and isinstance(n, int) and k >= n:
        return [head, f"   ENGAGED: {k} consecutive metric polls without a usable signal since {since}: "
                      f"{r} replicas is the recommendation; stabilization, step limits, the clamp and the "
                      f"guards below apply"]
    return [head, f"   counting: {k} of {n} consecutive metric polls without a usable signal since {since}; "
                  f"the current count is held until {n}"]


_ACTIVATION_VERDICTS = ("below activation", "above activation", "activation unknown")


def _activation_lines(activation: Any, active: Mapping[str, Any]) -> list[str]:
    """Step 2c: ``metricsTrigger.activation`` and the verdict the ScalingActive message carries."""
    head = "2c. Activation (metricsTrigger.activation)"
    if not isinstance(activation, Mapping):
        return [head, "   not set: the target is never scaled up from 0 replicas by this trigger"]
    head += f": value {activation.get('value')}"
    message = str(active.get("message", ""))
    at = min((i for i in (message.find(v) for v in _ACTIVATION_VERDICTS) if i >= 0), default=-1)
    if active.get("status") != "True" or at < 0:
        return [head, "   no verdict this sync (no usable metric: the count is held, or the fallback "
                      "applies)"]
    return [head, f"   {message[at:]}"]


def _floor_lines(floor_from: Any, condition: Mapping[str, Any] | None) -> list[str]:
    """Step 2d: ``spec.floorFrom`` and the ``ScheduleFloor`` condition of the last sync."""
    head = "2d. Floor (spec.floorFrom)"
    if not isinstance(floor_from, Mapping):
        return [head, "   not set: no schedule floor under the recommendation"]
    head += f": Tidal {floor_from.get('name')}"
    if not condition:
        return [head, "   not evaluated yet (no ScheduleFloor condition)"]
    state = "IN FORCE" if condition.get("status") == "True" else "no floor"
    tail = "; the recommendation is raised to it before stabilization" if state == "IN FORCE" else ""
    return [head, f"   {state}: ScheduleFloor={condition.get('status')}/{condition.get('reason')}: "
                  f"{condition.get('message', '')}{tail}"]


def _deletion_cost_lines(policy: Any, events: Sequence[Mapping[str, Any]]) -> list[str]:
    """Step 8b: ``scaleDown.podDeletionCost`` and its last event (nothing when the policy is not set)."""
    if not policy:
        return []
    head = "8b. Pod deletion cost (scaleDown.podDeletionCost)"
    reasons = (EVENT_DELETION_COST_SET, EVENT_DELETION_COST_SKIPPED)
    last = next((ev for ev in reversed(list(events)) if ev.get("reason") in reasons), None)
    if last is None:
        return [head, "   no scale-down written with it in the recent events (the per-pod query runs only "
                      "right before one)"]
    return [head, f"   {last.get('reason')}: {last.get('note', '')}"]


# the flow's figures (status.currentMetrics rows of type FlowDecision, escaler.reconcilers.llmscaler.flow)
# in the order of its steps, with what each means
_FLOW_FIGURES = (
    ("work", "replicas at 100 % busy: prompt tok/s / prefill capacity + generated tok/s / decode capacity"),
    ("backlog", "extra replicas draining the waiting requests"),
    ("planned", "the work planned for: the trend one cold start ahead when it rises, else the work"),
    ("utilization", "the utilisation target after the queueing-delay trim"),
    ("headroom", "burst headroom replicas, learned from latency misses (seeded from the running fleet)"),
    ("need", "ceil(planned / utilization + backlog), the burst floor, + headroom"),
)
_FLOW_TYPE, _FLOW_DECISION_TYPE = "Flow", "FlowDecision"


def _flow_lines(flow: Any, metrics: Sequence[Mapping[str, Any]]) -> list[str]:
    """Step 1b: the flow's figures, from its FlowDecision rows."""
    flow = flow if isinstance(flow, Mapping) else {}
    cap = flow.get("capacity") or {}
    head = (f"1b. Flow sizing (spec.flow: engine {flow.get('engine', '-')}, one replica "
            f"{_fmt(cap.get('prefillTokensPerSecond'))} prompt tok/s prefilled, "
            f"{_fmt(cap.get('decodeTokensPerSecond'))} tok/s decoded)")
    figures = {str(m.get("name")): m for m in metrics if m.get("type") == _FLOW_DECISION_TYPE}
    if not figures:
        return [head, "   no flow decision yet (every configured signal must be read: see 1. Inputs)"]
    lines = [head]
    for name, meaning in _FLOW_FIGURES:
        m = figures.get(name)
        if m is not None:
            lines.append(f"   {name} {_fmt(m.get('value'))}: {meaning}")
    lines.append("   the flow's steps in words: the last decision's reason (8. Write); then the pipeline "
                 "below (stabilization, step limit, clamp, guards)")
    return lines


def render(obj: Mapping[str, Any], events: Sequence[Mapping[str, Any]] = ()) -> str:
    """The explanation of one scaler (see the module docstring)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    conds = _conditions(obj)
    trig = _trigger(obj)
    ref = spec.get("targetRef") or {}
    resolved = status.get("resolvedTargetRef") or ref
    lines: list[str] = []
    add = lines.append
    kind = str(obj.get("kind") or SCALER_REF[1])
    add(f"{kind} {meta.get('namespace')}/{meta.get('name')} "
        f"(generation {meta.get('generation')}, observed {status.get('observedGeneration', '-')})")
    algo = ""
    if trig.get("type") == "MetricsTrigger":
        algo = f", algorithm {(trig.get('metricsTrigger') or {}).get('scalingAlgorithm', 'apa')}"
    source = f"trigger {trig.get('type')}{algo}" if kind == SCALER_REF[1] else \
        f"provider {spec.get('metricProvider', 'Prometheus')}"
    add(f"  {source}; mode {spec.get('mode', 'Active')}; "
        f"bounds [{spec.get('minReplicas', 1)}, {spec.get('maxReplicas', 10)}]")
    add(f"  target {resolved.get('kind')} {resolved.get('name')}"
        + (f" (via {ref.get('kind')} {ref.get('name')})" if resolved is not ref and resolved != ref else ""))
    if status.get("hpaName"):
        add(f"  companion HPA {status['hpaName']} does the scaling; this status mirrors it")
    annotations = meta.get("annotations") or {}
    if annotations.get("elasticscaler.io/paused") == "true":
        add("  PAUSED (elasticscaler.io/paused): no writes")
    if "elasticscaler.io/paused-replicas" in annotations:
        pin = annotations["elasticscaler.io/paused-replicas"]
        add(f"  PINNED to {pin} (elasticscaler.io/paused-replicas)")
    add("")
    add("1. Inputs")
    metrics = status.get("currentMetrics") or []
    if not metrics:
        from_source = trig.get("type") != "MetricsTrigger" if kind == SCALER_REF[1] else \
            spec.get("metricProvider") == "Custom"
        add("   (no metric read: " + ("the decision comes from the trigger's source)"
                                      if from_source else "none recorded yet)"))
    if metrics:
        lines.extend(_inputs_head(obj))
    for m in metrics:
        if m.get("type") == _FLOW_DECISION_TYPE:
            continue  # the flow's figures: 1b
        head = f"   - {m.get('type', '')} {m.get('name')}: "
        if m.get("error"):
            add(head + f"ERROR {m['error']}")
        elif m.get("type") == _FLOW_TYPE:
            per = " per replica" if m.get("targetType") == "AverageValue" else ""
            vs = f" (vs {_fmt(m.get('target'))}{per})" if m.get("target") is not None else ""
            add(head + f"value {_fmt(m.get('value'))}{vs}")
        else:
            add(head + f"value {_fmt(m.get('value'))} vs target {_fmt(m.get('target'))} "
                f"({m.get('targetType', '-')}) -> recommends {_fmt(m.get('recommendedReplicas'))}")
    if "MetricsPipeline" in conds:
        add(f"   {_cond_line(conds, 'MetricsPipeline')}")
    if kind != SCALER_REF[1] and spec.get("metricProvider") == "Flow":
        lines.extend(_flow_lines(spec.get("flow"), metrics))
    add("2. Recommendation")
    add(f"   {_cond_line(conds, 'ScalingActive')}")
    if kind != SCALER_REF[1] or (trig.get("type") == "MetricsTrigger" and not status.get("hpaName")):
        lines.extend(_fallback_lines(spec.get("fallback"), status.get("fallback")))
    if kind == SCALER_REF[1] and trig.get("type") == "MetricsTrigger" and not status.get("hpaName"):
        lines.extend(_activation_lines((trig.get("metricsTrigger") or {}).get("activation"),
                                       conds.get("ScalingActive") or {}))
    if kind != SCALER_REF[1] or (trig.get("type") == "MetricsTrigger" and not status.get("hpaName")):
        lines.extend(_floor_lines(spec.get("floorFrom"), conds.get("ScheduleFloor")))
    limited = conds.get("ScalingLimited") or {}
    limited_reason, limited_message = str(limited.get("reason", "")), str(limited.get("message", ""))
    by_rate = limited_by_algorithm_rate(limited_reason, limited_message)
    add("3. Stabilization")
    able = conds.get("AbleToScale") or {}
    if able.get("reason") in STABILIZATION_REASONS:
        add(f"   held by the stabilization window: {able.get('message', '')}")
    else:
        add("   no hold (the count was not kept above this sync's recommendation)")
    add("4. Rate limit (the algorithm's own)")
    if by_rate:
        add(f"   {limited_reason}: {limited_message}")
    else:
        add("   the algorithm's rate cap did not bind the count")
    add("5. Step limits")
    if limited_reason in (SCALE_UP_LIMIT, SCALE_DOWN_LIMIT) and not by_rate:
        add(f"   {limited_reason}: {limited_message}")
    else:
        add("   no step limit bound the count")
    add("6. Clamp to [min, max]")
    if limited_reason in (TOO_FEW_REPLICAS, TOO_MANY_REPLICAS):
        add(f"   {limited_reason}: {limited_message}")
    else:
        add("   within bounds" + (f" ({_cond_line(conds, 'ScalingLimited')})" if limited else ""))
    add("7. Guard")
    if able.get("reason") in GUARD_REASONS:
        add(f"   {able.get('reason')}: {able.get('message', '')}")
        if status.get("deferredSince"):
            add(f"   deferred since {status['deferredSince']}")
    else:
        add("   no guard held the write")
    add("8. Write")
    add(f"   current {_fmt(status.get('currentReplicas'))} -> desired {_fmt(status.get('desiredReplicas'))}; "
        f"last scale {status.get('lastScaleTime', 'never')}")
    add(f"   {_cond_line(conds, 'AbleToScale')}")
    decisions = status.get("recentDecisions") or []
    if decisions:
        last = decisions[-1]
        add(f"   last decision {last.get('time')}: {last.get('from')} -> {last.get('to')} "
            f"(bound by {last.get('boundBy') or '-'})")
        for part in str(last.get("reason", "")).split("; "):
            add(f"     {part}")
    if kind == SCALER_REF[1]:
        lines.extend(_deletion_cost_lines((spec.get("scaleDown") or {}).get("podDeletionCost"), events))
    if "Validated" in conds:
        add("")
        add(_cond_line(conds, "Validated"))
    if decisions:
        add("")
        add(f"Recent decisions ({len(decisions)}):")
        for d in decisions:
            add(f"  {d.get('time')}  {d.get('from')} -> {d.get('to')}  [{d.get('boundBy') or '-'}]  "
                f"{str(d.get('reason', ''))[:160]}")
    add("")
    add(f"Events ({min(len(events), MAX_EVENTS)} most recent):" if events else "Events: none")
    for ev in list(events)[-MAX_EVENTS:]:
        series = ev.get("series") or {}
        count = f" x{series.get('count')}" if series.get("count") else ""
        when = series.get("lastObservedTime") or ev.get("eventTime") or \
            (ev.get("metadata") or {}).get("creationTimestamp")
        add(f"  {when}  {ev.get('type')}  {ev.get('reason')}{count}: {ev.get('note', '')}")
    verdict, why = health(obj)
    add("")
    add(f"Health: {verdict} ({why})")
    return "\n".join(lines) + "\n"


def _event_time(ev: Mapping[str, Any]) -> str:
    series = ev.get("series") or {}
    return str(series.get("lastObservedTime") or ev.get("eventTime")
               or (ev.get("metadata") or {}).get("creationTimestamp") or "")


def fetch_events(client: DynamicClient, namespace: str, name: str,
                 kind: str = SCALER_REF[1]) -> list[Mapping[str, Any]]:
    """The scaler's Events, oldest first (field selector, else a filtered list)."""
    try:
        body = client.list(EVENTS_MAPPING, namespace, field_selector=f"regarding.name={name}")
    except StatusError as err:
        if err.code != 400:
            raise
        body = client.list(EVENTS_MAPPING, namespace)
    items = [i for i in body.get("items") or () if isinstance(i, Mapping)]
    mine = [i for i in items if (i.get("regarding") or {}).get("name") == name
            and (i.get("regarding") or {}).get("kind") == kind]
    return sorted(mine, key=_event_time)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.kubeconfig, args.context)
    except ConfigError as err:
        print(f"escaler explain: {err}", file=sys.stderr)
        return 1
    rest = RestClient(new_api_client(cfg, pool_size=2))
    client = DynamicClient(rest, RESTMapper(rest))
    ref = SCALER_REFS[getattr(args, "kind", None) or SCALER_REF[1]]
    try:
        obj = client.get(ref, args.name, args.namespace)
    except StatusError as err:
        what = "not found" if is_not_found(err) else str(err)
        print(f"escaler explain: {ref[1]} {args.namespace}/{args.name}: {what}", file=sys.stderr)
        return 1
    except ConnectionFailure as err:
        print(f"escaler explain: {err}", file=sys.stderr)
        return 1
    try:
        events = fetch_events(client, args.namespace, args.name, ref[1])
    except (StatusError, ConnectionFailure) as err:
        print(f"escaler explain: cannot list events: {err}", file=sys.stderr)
        events = []
    sys.stdout.write(render(obj, events))
    return 0
