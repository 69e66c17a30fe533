"""The admission checks CEL cannot express (docs/install.md#the-admission-webhook), over the raw object.

The CRD's schema and CEL rules (``escaler.api``) cover types, enums, bounds and cross-field
rules — ``apa``'s ``algorithmConfig``, ``scalingAlgorithm: HPA`` with ``algorithmConfig`` or an
ExternalServer metric, target values > 0, the form of URLs and of Tidal schedules included — and
the webhook re-runs those through the models (``validation.py``), so a default install (no
webhook) refuses them too. What needs code lives here:

* ``spec.trigger.metricsTrigger.scalingAlgorithm`` names ``HPA`` or a registered algorithm
  (``escaler.scaling.is_known_algorithm`` — the registry of *this* process, the manager, which
  is the one that will run it);
* every endpoint URL: the full syntax (``escaler.scaling.endpoints``: DNS labels, IP literals;
  an ExternalServer or podDeletionCost endpoint is a base URL, without ``?`` or ``#``) and, when
  ``--allowed-endpoint-hosts`` is set, its host;
* Tidal schedules: the zone exists in the tz database and croniter accepts the fields and they
  fire (``escaler.scaling.schedule``), and ``end`` is not the same schedule as ``start`` once
  parsed (CEL only compares the strings);
* tenant PromQL (``escaler.signals.promqlscope``, with the manager's ``--promql-namespace-label``):
  every query field (ExternalServer and pod-deletion-cost queries, LLMScaler metrics and flow
  selector or queries, RSG ranking, SLO requirements' promql and flow) must read only the object's
  namespace — denied naming the field and the rule, as the reconciler would refuse it;
* annotations (CEL cannot see them): ``elasticscaler.io/paused``/``paused-replicas`` on every
  kind, the metric and behavior annotations on ElasticScaler
  (``escaler.scaling.annotations``; ``docs/reference/annotations.md`` lists them).

**Annotations: warn when the reconciler falls back, deny what can never work.** The rule, per
annotation and kind:

* **warning** (allowed; ``response.warnings``, which kubectl prints as ``Warning: ...``) — a value
  the reconciler replaces by its default, on a kind whose reconciler reads that annotation
  (``READERS``: the pause annotations on ElasticScaler and LLMScaler, ``metrics.*`` and
  ``behavior.*`` on ElasticScaler), and an unknown key under ``elasticscaler.io/metrics.`` or
  ``behavior.`` on an ElasticScaler, which the reconciler ignores. The object works, with the
  default (seed 003's fallback), and the warning says exactly what the reconciler's Warning event
  ``InvalidAnnotation`` will say: the key as ``metadata.annotations[<key>]``, the rule, the value
  and the default used (``AnnotationProblem.fallback_message``);
* **denial** (422 naming ``metadata.annotations[<key>]`` and the rule) — what no default makes work:

  - any ``elasticscaler.io/metrics.*`` annotation with ``scalingAlgorithm: HPA``: it contradicts the
    spec (the companion HPA collects and aggregates metrics itself and would silently ignore it;
    behavior annotations are applied, and warned about like any other ElasticScaler's);
  - an invalid pause annotation on a kind whose reconciler never reads it (Tidal,
    ResourceScalingGroup, LLMSLORequirement, JobSLORequirement): nothing falls back from it and no
    event would ever report it, so the webhook is the only one to tell;
  - annotations that are not a map of strings to strings (no reconciler can read them; the API
    server never sends such an object).

Every function takes the raw object (``request.object`` of an AdmissionReview) and returns
``FieldError``s. They never raise: a value of the wrong type is skipped here (the schema check
reports it), so these checks add to the structural ones instead of duplicating them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from escaler.api.rules import FieldError
from escaler.scaling.annotations import (
    ANNOTATION_PREFIX,
    DEFAULTS,
    PAUSE_READERS,
    ScalerAnnotations,
    annotation_path,
    defaults_for_trigger,
    parse_annotations,
)
from escaler.scaling.endpoints import check_endpoint_url, host_allowed
from escaler.scaling.registry import DEFAULT_ALGORITHM, HPA, is_known_algorithm, registered_algorithms
from escaler.scaling.schedule import parse_schedule
from escaler.signals.promqlscope import PromQLScope

__all__ = ["EXTRA_CHECKS", "Check", "CheckContext", "Checks", "check_common"]

# annotations the companion HPA of scalingAlgorithm HPA never reads (docs/guide/elasticscaler.md#the-triggers,
# docs/reference/annotations.md)
METRICS_ANNOTATION_PREFIX = f"{ANNOTATION_PREFIX}metrics."


class CheckContext:
    """What a check may know besides the object: the manager's policy flags (no cluster reads)."""

    def __init__(self, allowed_endpoint_hosts: Sequence[str] = (), promql_scope: PromQLScope | None = None,
                 slo_prometheus_endpoint: str = "") -> None:
        # --allowed-endpoint-hosts, normalised (escaler.scaling.endpoints.parse_host_patterns); () = any
        self.allowed_endpoint_hosts = tuple(allowed_endpoint_hosts)
        # tenant PromQL confinement (--promql-namespace-label); None = not checked
        self.promql_scope = promql_scope
        # where SLO requirements' PromQL runs (--slo-prometheus-endpoint; --promql-unconfined-hosts)
        self.slo_prometheus_endpoint = slo_prometheus_endpoint


class Checks:
    """Accumulates FieldErrors and warnings for one object."""

    def __init__(self, ctx: CheckContext) -> None:
        # the policy flags
        self.ctx = ctx
        # the denials, in check order
        self.errors: list[FieldError] = []
        # admission warnings (shown by kubectl, never a denial)
        self.warnings: list[str] = []

    def fail(self, path: str, rule: str) -> None:
        self.errors.append(FieldError(path, rule))

    def endpoint(self, path: str, url: Any, *, base: bool = False) -> None:
        """Syntax, scheme and allowed host of one endpoint URL (absent = not checked); ``base``: no
        ``?`` or ``#`` (a URL escaler appends a path to)."""
        if url is None:
            return
        try:
            host = check_endpoint_url(url, base=base)
        except ValueError as exc:
            self.fail(path, f"invalid endpoint URL {_show(url)}: {exc}")
            return
        patterns = self.ctx.allowed_endpoint_hosts
        if not host_allowed(host, patterns):
            self.fail(path, f"host {host!r} is not allowed by the manager's --allowed-endpoint-hosts "
                            f"({','.join(patterns)})")


    def promql(self, obj: Mapping[str, Any], path: str, query: Any, endpoint: Any) -> None:
        """``query`` (a string; else the schema reports it) reads only ``obj``'s namespace."""
        scope = self.ctx.promql_scope
        namespace = _map(obj.get("metadata")).get("namespace")
        if scope is None or not isinstance(query, str) or not isinstance(namespace, str) or not namespace:
            return
        why = scope.refusal(query, namespace, endpoint if isinstance(endpoint, str) else "")
        if why is not None:
            self.fail(path, why)

    def flow(self, obj: Mapping[str, Any], path: str, flow: Any, endpoint: Any) -> None:
        """A flow's selector (spliced into every preset query) and its own queries."""
        flow = _map(flow)
        selector = flow.get("selector")
        if isinstance(selector, str):
            self.promql(obj, f"{path}.selector", f"x{{{selector}}}", endpoint)
        for signal, query in _map(flow.get("queries")).items():
            self.promql(obj, f"{path}.queries.{signal}", query, endpoint)


Check = Callable[[Mapping[str, Any], Checks], None]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _map(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (wrong types are the schema's to report)."""
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _annotations(obj: Mapping[str, Any], checks: Checks, *, policies: bool, read: bool,
                 hpa: bool = False, defaults: ScalerAnnotations = DEFAULTS) -> None:
    """The annotation values (see the module docstring): with ``read`` (the kind's reconciler reads
    them and falls back to ``defaults``), an unusable value is a warning, else a denial; with
    ``hpa``, each ``metrics.*`` key is refused instead, whatever its value."""
    raw = _map(obj.get("metadata")).get("annotations")
    if raw is None:
        return
    ignored = sorted(k for k in _map(raw) if isinstance(k, str) and k.startswith(METRICS_ANNOTATION_PREFIX))
    _, problems = parse_annotations(raw, policies=policies, defaults=defaults)
    for p in problems:
        if hpa and p.key in ignored:
            continue
        if read and p.key and isinstance(p.value, str):
            checks.warnings.append(p.fallback_message())
        else:
            checks.fail(p.path, f"{p.rule}, got {_show(p.value)}" if p.key else p.rule)
    if hpa:
        for key in ignored:
            checks.fail(annotation_path(key),
                        f"{METRICS_ANNOTATION_PREFIX}* annotations have no effect with scalingAlgorithm "
                        f"{HPA}: the companion HPA collects and aggregates metrics itself; remove it "
                        f"(HPA mode reads only the {ANNOTATION_PREFIX}behavior.* and pause annotations)")


def _pause_annotations(kind: str, obj: Mapping[str, Any], checks: Checks) -> None:
    _annotations(obj, checks, policies=False, read=kind in PAUSE_READERS)


# ---------------------------------------------------------------- per kind


def check_elasticscaler(obj: Mapping[str, Any], checks: Checks) -> None:
    trigger = _map(_map(obj.get("spec")).get("trigger"))
    mt_path = "spec.trigger.metricsTrigger"
    mt = trigger.get("metricsTrigger")
    algorithm = _map(mt).get("scalingAlgorithm")
    if algorithm is None:
        algorithm = DEFAULT_ALGORITHM
    hpa = isinstance(mt, Mapping) and trigger.get("type") == "MetricsTrigger" and algorithm == HPA
    _annotations(obj, checks, policies=True, read=True, hpa=hpa,
                 defaults=defaults_for_trigger(trigger.get("type")))
    if isinstance(mt, Mapping):
        if isinstance(algorithm, str) and not is_known_algorithm(algorithm):
            registered = ", ".join(registered_algorithms()) or "none"
            checks.fail(f"{mt_path}.scalingAlgorithm",
                        f"scaling algorithm {algorithm!r} is not registered in this manager "
                        f"(AlgorithmNotRegistered; registered: {registered}; or {HPA})")
        for i, metric in enumerate(_list(mt.get("metrics"))):
            server = _map(_map(metric).get("externalServer"))
            checks.endpoint(f"{mt_path}.metrics[{i}].externalServer.endpoint", server.get("endpoint"),
                            base=True)
            checks.promql(obj, f"{mt_path}.metrics[{i}].externalServer.query", server.get("query"),
                          server.get("endpoint"))
    signal = trigger.get("signalTrigger")
    checks.endpoint("spec.trigger.signalTrigger.endpoint", _map(signal).get("endpoint"))
    cost = _map(_map(_map(obj.get("spec")).get("scaleDown")).get("podDeletionCost")).get("prometheus")
    checks.endpoint("spec.scaleDown.podDeletionCost.prometheus.endpoint", _map(cost).get("endpoint"),
                    base=True)
    checks.promql(obj, "spec.scaleDown.podDeletionCost.prometheus.query", _map(cost).get("query"),
                  _map(cost).get("endpoint"))


def check_llmscaler(obj: Mapping[str, Any], checks: Checks) -> None:
    _pause_annotations("LLMScaler", obj, checks)
    spec = _map(obj.get("spec"))
    prometheus, flow = _map(spec.get("prometheus")), _map(spec.get("flow"))
    checks.endpoint("spec.prometheus.endpoint", prometheus.get("endpoint"))
    checks.endpoint("spec.flow.endpoint", flow.get("endpoint"))
    for i, metric in enumerate(_list(prometheus.get("metrics"))):
        checks.promql(obj, f"spec.prometheus.metrics[{i}].query", _map(metric).get("query"),
                      prometheus.get("endpoint"))
    if spec.get("metricProvider") == "Flow":
        checks.flow(obj, "spec.flow", flow, flow.get("endpoint"))
    checks.endpoint("spec.customProvider.url", _map(spec.get("customProvider")).get("url"))


def check_rsg(obj: Mapping[str, Any], checks: Checks) -> None:
    _pause_annotations("ResourceScalingGroup", obj, checks)
    prometheus = _map(_map(_map(obj.get("spec")).get("scaleDown")).get("prometheus"))
    checks.endpoint("spec.scaleDown.prometheus.endpoint", prometheus.get("endpoint"))
    checks.promql(obj, "spec.scaleDown.prometheus.query", prometheus.get("query"), prometheus.get("endpoint"))


def check_tidal(obj: Mapping[str, Any], checks: Checks) -> None:
    _pause_annotations("Tidal", obj, checks)
    for i, rule in enumerate(_list(_map(obj.get("spec")).get("rules"))):
        rule = _map(rule)
        name = rule.get("name")
        label = f"rule {name!r}" if isinstance(name, str) and name else f"rule #{i}"
        parsed = {}
        for field in ("start", "end"):
            value = rule.get(field)
            if value is None:
                continue  # required: the schema reports it
            try:
                parsed[field] = parse_schedule(value)
            except ValueError as exc:
                checks.fail(f"spec.rules[{i}].{field}", f"{label}: {exc}")
        # identical strings are CEL's to refuse (escaler.api.tidal); this catches "0 9 * * *" vs "0  9 * * *"
        if len(parsed) == 2 and parsed["start"] == parsed["end"] and rule.get("start") != rule.get("end"):
            checks.fail(f"spec.rules[{i}].end", f"{label}: end is the same schedule as start, so the rule "
                                                "could never be active")
    labels = _map(_map(obj.get("metadata")).get("labels"))
    missing = [k for k in ("elasticscaler.io/name", "elasticscaler.io/namespace") if not labels.get(k)]
    if missing:
        checks.warnings.append(
            f"metadata.labels: {' and '.join(missing)} missing: no ElasticScaler will be told when this "
            "Tidal's desiredReplicas changes (Ready=False/MissingRequiredLabels)")


def check_slo(obj: Mapping[str, Any], checks: Checks) -> None:
    """An SLO requirement: the pause annotations (never read: denied), and its PromQL confined."""
    check_common(obj, checks)
    spec, endpoint = _map(obj.get("spec")), checks.ctx.slo_prometheus_endpoint
    if spec.get("flow") is not None:  # sized by the flow: the ttft/otps promql are not read
        checks.flow(obj, "spec.flow", spec.get("flow"), endpoint)
        return
    for section in ("ttft", "otps", "inflight", "queue"):
        checks.promql(obj, f"spec.{section}.promql", _map(spec.get(section)).get("promql"), endpoint)


def check_common(obj: Mapping[str, Any], checks: Checks) -> None:
    """What every other kind gets: the pause annotations, which it never reads (a bad value is denied)."""
    _annotations(obj, checks, policies=False, read=False)


# kind → its extra checks
EXTRA_CHECKS: dict[str, Check] = {
    "ElasticScaler": check_elasticscaler,
    "Tidal": check_tidal,
    "ResourceScalingGroup": check_rsg,
    "LLMScaler": check_llmscaler,
    "LLMSLORequirement": check_slo,
    "JobSLORequirement": check_slo,
}
