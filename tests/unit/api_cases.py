"""Shared fixtures of the escaler.api tests: the samples, and tables of objects the API must refuse.

``REFUSED_BY_RULE`` lists objects that break one CEL rule (``x-kubernetes-validations`` on the CRD,
and ``escaler.api.validate(..., admission=True)`` in Python) with the exact errors expected;
``REFUSED_BY_SCHEMA`` lists objects that break a single-field constraint (enum, minimum, pattern)
that both the CRD schema and parsing refuse. Together they are the malformed objects a default
install (no webhook, docs/install.md#the-admission-webhook) must refuse with the API server alone:
``MALFORMED`` (at least 40, across all six kinds). They are replayed by the unit suite
(``test_api_validation``: the Python twins; ``test_api_cel_server``: the committed CRDs' schema and CEL,
evaluated with cel-python) and against a real API server (server-side dry run, ``server_disagreements`` below,
from ``tests/e2e/test_api.py``), which must refuse each naming the same field path (and, for a rule,
with the same message).
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SAMPLES_DIR = ROOT / "manifests" / "samples"
CRDS_DIR = ROOT / "manifests" / "crds"

DELETE = object()


def load_samples() -> dict[str, dict[str, Any]]:
    """``<Kind>/<name>`` → object, for every document in manifests/samples (fresh copies: a caller
    may change them)."""
    return copy.deepcopy(_parsed_samples())


@functools.cache
def _parsed_samples() -> dict[str, dict[str, Any]]:
    # parsed once per process: every Refusal.obj() and Malformed.obj() starts from the samples,
    # and re-reading the YAML for each (~5,000 times a unit run) was seconds of CPU
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(SAMPLES_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


def mutate(obj: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``obj`` with dotted paths (``spec.rules[0].name``) set, or removed with DELETE."""
    out = copy.deepcopy(obj)
    for path, value in changes.items():
        parts: list[str | int] = []
        for token in path.split("."):
            m = re.fullmatch(r"([^\[]+)((?:\[\d+\])*)", token)
            assert m, path
            parts.append(m.group(1))
            parts.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
        node: Any = out
        for key in parts[:-1]:
            node = node[key]
        if value is DELETE:
            del node[parts[-1]]
        else:
            node[parts[-1]] = copy.deepcopy(value)
    return out


@dataclass(frozen=True)
class Refusal:
    id: str
    sample: str  # key into load_samples()
    changes: dict[str, Any]
    # (field path, message) pairs expected from escaler.api.validate, in any order
    errors: tuple[tuple[str, str], ...] = field(default=())

    def obj(self) -> dict[str, Any]:
        return mutate(_parsed_samples()[self.sample], self.changes)  # mutate() deep-copies


_ES_M, _ES_S, _ES_SIG = "ElasticScaler/llama-decode", "ElasticScaler/llama-es", "ElasticScaler/llama-batch"
_LLMS, _LLMSLO, _JOB = "LLMScaler/chat-llama", "LLMSLORequirement/chat-llama", "JobSLORequirement/batch-embed"
_RSG, _TIDAL = "ResourceScalingGroup/llama-pd", "Tidal/llama-office-hours"
_FLOW, _FS = "LLMScaler/chat-llama-flow", "spec.flow.selector"
_SLOFLOW = "LLMSLORequirement/chat-llama-flow"
_SELECTOR_REQUIRED = (
    "selector is required with a preset engine (vllm, sglang, tgi): without it the presets would sum every "
    "server Prometheus holds"
)
_SELECTOR_GENERIC = "selector is not used with engine generic (its queries are given whole): remove it"
_SELECTOR_GRAMMAR = (
    'selector must be a PromQL label-matcher list: name op "value" pairs separated by commas, op one of = '
    '!= =~ !~, values without ", \\, {, }, commas or control characters, and no label names starting with '
    "__ or named le"
)
_GENERIC = {"promptTokensRate": "sum(rate(p[1m]))", "generationTokensRate": "sum(rate(g[1m]))",
            "ttftMissShare": "t", "tpotMissShare": "o"}
# selectors the grammar refuses: injections (closing the braces or the string, a second selector, a
# function, a comment), an escape, a reserved or bucket label, a missing quote or operator, a comma inside
FLOW_BAD_SELECTORS = (
    'model_name="x"}) or vector(100',
    'model_name="x"} or up{a="b"',
    'model_name="x\\"} or vector(1) #"',
    'model_name="x" # comment',
    '__name__="up"',
    '__name__=~".+"',
    'le="+Inf"',
    "model_name=x",
    "model_name='x'",
    'model_name~"x"',
    'model_name="a,b"',
    'model_name="x",',
    'model_name="{x}"',
    "",
    'model_name="x"\n',
    'model-name="x"',
)
_MT = "metricsTrigger is required when type is MetricsTrigger, and not allowed otherwise"
_MIN_MAX = "minReplicas must be less than or equal to maxReplicas"
_MTR = "spec.trigger.metricsTrigger"
_M = f"{_MTR}.metrics"
_TOLERANCE = (
    'algorithmConfig[tolerance] of apa must be a decimal number >= 0 and < 1 (the no-change band around '
    'the target, e.g. "0.1")'
)
_UP_RATE = (
    'algorithmConfig[scaleUpRate] of apa must be a decimal number > 1 (the most one step may multiply '
    'replicas by, e.g. "2.0")'
)
_DOWN_RATE = (
    'algorithmConfig[scaleDownRate] of apa must be a decimal number > 1 (the most one step may divide '
    'replicas by, e.g. "2.0")'
)
_HPA_EXTERNAL_SERVER = (
    "metrics of type ExternalServer are not supported with scalingAlgorithm HPA (the companion HPA reads "
    "only the metrics APIs: UnsupportedMetric); use apa or another registered algorithm"
)
_FALLBACK = (
    "fallback is only allowed with trigger.type MetricsTrigger and a scalingAlgorithm other than HPA (a "
    "State or Signal trigger has no metrics to lose; the companion HPA scales on its own)"
)
_DELETION_COST = (
    "scaleDown.podDeletionCost needs a targetRef of kind Deployment (apiVersion apps/v1) and a "
    "scalingAlgorithm other than HPA: the ReplicaSet controller is what reads the annotation, and escaler "
    "must be the one writing the replicas"
)
_PDC = "spec.scaleDown.podDeletionCost"
_PDC_PROM = {"endpoint": "http://prometheus:9090", "query": "sum by (pod) (running)"}


def _pdc(**prometheus: Any) -> dict[str, Any]:
    """``spec.scaleDown`` with a podDeletionCost query (the sample's fields, changed by ``prometheus``)."""
    return {"podDeletionCost": {"prometheus": {k: v for k, v in {**_PDC_PROM, **prometheus}.items()
                                                if v is not DELETE}}}
_POLL_INTERVAL = (
    "pollIntervalSeconds is only allowed with trigger.type MetricsTrigger (only metrics are polled; a "
    "SignalTrigger's pull interval is trigger.signalTrigger.pollIntervalSeconds)"
)
_FLOOR_FROM = ("floorFrom is only allowed with trigger.type MetricsTrigger and a scalingAlgorithm other than "
               "HPA (a StateTrigger follows a Tidal already; the companion HPA scales on its own)")
_EXCLUDE_DATES = ("excludeDates entries must be calendar dates written YYYY-MM-DD (e.g. 2026-12-25; years "
                  "1000-9999, a day that exists in its month: no 2026-02-30, 02-29 only in leap years)")
_MIN_ZERO = ("minReplicas may be 0 (scale to zero) only with trigger.type SignalTrigger or StateTrigger, or "
             "MetricsTrigger with trigger.metricsTrigger.activation set")
_ACTIVATION_HPA = ("activation is not allowed with scalingAlgorithm HPA (the companion HPA scales on its "
                   "own); use apa or another registered algorithm")
_ACTIVATION_WAKE = ("activation needs at least one metric of type External or ExternalServer: a Resource or "
                    "Custom metric is read from the target's pods, and there are none at 0 replicas")
_HPA_CONFIG = (
    "algorithmConfig is not allowed with scalingAlgorithm HPA: the companion HPA ignores it (HPA mode "
    "takes its behavior from the elasticscaler.io/behavior.* annotations only)"
)
_FORM = "'CRON_TZ=<zone> <minute> <hour> <day-of-month> <month> <day-of-week>'"


def _url(field: str) -> str:
    return (
        f"{field} must be an http(s) URL naming a host (a DNS name or an IP address), with an optional "
        "port in 1..65535 and no user:password@"
    )


def _prefix(field: str) -> str:
    return (
        f"{field} must begin with CRON_TZ=<zone> and a space, the zone a tz database name such as "
        f"Asia/Shanghai, America/Argentina/Buenos_Aires, Etc/GMT+8 or UTC (the form is {_FORM})"
    )


def _count(field: str) -> str:
    return (
        f"{field} must have exactly 5 space-separated cron fields after the zone: <minute> <hour> "
        "<day-of-month> <month> <day-of-week>"
    )


def _range(field: str) -> str:
    return (
        f"{field} has a cron field out of range or malformed: minute 0-59, hour 0-23, day-of-month 1-31, "
        "month 1-12 or JAN-DEC, day-of-week 0-7 or SUN-SAT; each field is *, ?, a value, a range a-b, a "
        "step /n, or a comma list of those"
    )


REFUSED_BY_RULE: tuple[Refusal, ...] = (
    Refusal(
        "llms/customProvider-url-and-serviceId",
        _LLMS,
        {"spec.customProvider.url": "http://slo.example:8082/decisions"},
        (("spec.customProvider", "customProvider needs exactly one of url and serviceId"),),
    ),
    Refusal(
        "llms/customProvider-neither-url-nor-serviceId",
        _LLMS,
        {"spec.customProvider.serviceId": DELETE},
        (("spec.customProvider", "customProvider needs exactly one of url and serviceId"),),
    ),
    Refusal(
        "es/metrics-type-without-metricsTrigger",
        _ES_S,
        {"spec.trigger.type": "MetricsTrigger"},
        (("spec.trigger.metricsTrigger", _MT),),
    ),
    Refusal(
        "es/state-type-with-metricsTrigger",
        _ES_M,
        {"spec.trigger.type": "StateTrigger"},
        (("spec.trigger.metricsTrigger", _MT),),
    ),
    Refusal(
        "es/stateTrigger-beside-metrics",
        _ES_M,
        {"spec.trigger.stateTrigger": {}},
        (("spec.trigger.stateTrigger", "stateTrigger is only allowed when type is StateTrigger"),),
    ),
    Refusal(
        "es/signalTrigger-beside-state",
        _ES_S,
        {"spec.trigger.signalTrigger": {"idleTimeoutSeconds": 60}},
        (("spec.trigger.signalTrigger", "signalTrigger is only allowed when type is SignalTrigger"),),
    ),
    Refusal("es/min-above-max", _ES_M, {"spec.minReplicas": 11}, (("spec.minReplicas", _MIN_MAX),)),
    Refusal(
        "es/min-zero-without-signal",
        _ES_M,
        {"spec.minReplicas": 0},
        (("spec.minReplicas", _MIN_ZERO),),
    ),
    Refusal(
        "es/activation-with-hpa",
        _ES_M,
        {f"{_MTR}.scalingAlgorithm": "HPA", f"{_MTR}.algorithmConfig": DELETE, f"{_M}[3]": DELETE,
         f"{_MTR}.activation": {"value": "1"}},
        ((f"{_MTR}.activation", _ACTIVATION_HPA),),
    ),
    Refusal(
        "es/activation-without-external-metric",
        _ES_M,
        {f"{_M}[3]": DELETE, f"{_M}[2]": DELETE, f"{_MTR}.activation": {"value": "1"}},
        ((f"{_MTR}.activation", _ACTIVATION_WAKE),),
    ),
    Refusal(
        "es/metric-type-and-subconfig-differ",
        _ES_M,
        {f"{_M}[0].type": "Custom"},
        (
            (f"{_M}[0].resource", "resource is required when type is Resource, and not allowed otherwise"),
            (f"{_M}[0].custom", "custom is required when type is Custom, and not allowed otherwise"),
        ),
    ),
    Refusal(
        "es/externalServer-missing",
        _ES_M,
        {f"{_M}[3].externalServer": DELETE},
        (
            (
                f"{_M}[3].externalServer",
                "externalServer is required when type is ExternalServer, and not allowed otherwise",
            ),
        ),
    ),
    Refusal(
        "es/external-missing",
        _ES_M,
        {f"{_M}[2].external": DELETE},
        ((f"{_M}[2].external", "external is required when type is External, and not allowed otherwise"),),
    ),
    Refusal(
        "es/value-target-without-value",
        _ES_M,
        {f"{_M}[2].external.target.value": DELETE},
        (
            (
                f"{_M}[2].external.target.value",
                "value is required when type is Value, and not allowed otherwise",
            ),
        ),
    ),
    Refusal(
        "es/target-without-its-value",
        _ES_M,
        {f"{_M}[0].resource.target": {"type": "Utilization"}},
        (
            (
                f"{_M}[0].resource.target.averageUtilization",
                "averageUtilization is required when type is Utilization, and not allowed otherwise",
            ),
        ),
    ),
    Refusal(
        "es/target-with-two-values",
        _ES_M,
        {f"{_M}[2].external.target": {"type": "Value", "value": "100", "averageValue": "3"}},
        (
            (
                f"{_M}[2].external.target.averageValue",
                "averageValue is required when type is AverageValue, and not allowed otherwise",
            ),
        ),
    ),
    Refusal(
        "es/resource-with-value-target",
        _ES_M,
        {f"{_M}[0].resource.target": {"type": "Value", "value": "2"}},
        (
            (
                f"{_M}[0].resource.target.type",
                "target.type of a Resource metric is Utilization or AverageValue",
            ),
        ),
    ),
    Refusal(
        "es/custom-with-value-target",
        _ES_M,
        {f"{_M}[1].custom.target": {"type": "Value", "value": "2"}},
        (
            (
                f"{_M}[1].custom.target.type",
                "target.type of a Custom metric must be AverageValue (it is a per-pod average)",
            ),
        ),
    ),
    Refusal(
        "es/external-with-utilization",
        _ES_M,
        {f"{_M}[2].external.target": {"type": "Utilization", "averageUtilization": 50}},
        ((f"{_M}[2].external.target.type", "target.type of an External metric is Value or AverageValue"),),
    ),
    Refusal(
        "es/externalServer-with-utilization",
        _ES_M,
        {f"{_M}[3].externalServer.target": {"type": "Utilization", "averageUtilization": 50}},
        (
            (
                f"{_M}[3].externalServer.target.type",
                "target.type of an ExternalServer metric is Value or AverageValue",
            ),
        ),
    ),
    Refusal(
        "llms/custom-without-customProvider",
        _LLMS,
        {"spec.metricProvider": "Custom", "spec.customProvider": DELETE},
        (("spec.customProvider", "customProvider is required when metricProvider is Custom"),),
    ),
    Refusal(
        "llms/prometheus-without-prometheus",
        _LLMS,
        {"spec.prometheus": DELETE},
        (("spec.prometheus", "prometheus is required when metricProvider is Prometheus"),),
    ),
    Refusal("llms/min-above-max", _LLMS, {"spec.minReplicas": 17}, (("spec.minReplicas", _MIN_MAX),)),
    Refusal(
        "llmslo/bound-types-differ",
        _LLMSLO,
        {"spec.bounds.min": {"type": "concurrency", "value": 1}},
        (("spec.bounds.max.type", "bounds.min.type and bounds.max.type must be the same"),),
    ),
    Refusal(
        "llmslo/pdengine-max-one",
        _LLMSLO,
        {
            "spec.deployType": "pd",
            "spec.bounds": {"min": {"type": "pdengine", "value": 0}, "max": {"type": "pdengine", "value": 1}},
        },
        (("spec.bounds.max.value", "bounds.max.value of type pdengine must not be 1"),),
    ),
    Refusal(
        "llmslo/pdengine-without-pd",
        _LLMSLO,
        {"spec.bounds": {"min": {"type": "pdengine", "value": 0}, "max": {"type": "pdengine", "value": 2}}},
        (("spec.bounds", "bounds of type pdengine require deployType pd"),),
    ),
    Refusal(
        "llmslo/min-above-max",
        _LLMSLO,
        {"spec.bounds.min.value": 9},
        (("spec.bounds.min.value", "bounds.min.value must be less than or equal to bounds.max.value"),),
    ),
    Refusal(
        "jobslo/max-concurrency",
        _JOB,
        {"spec.bounds.max": {"type": "concurrency", "value": 64}},
        (("spec.bounds.max.type", "bounds.max.type must be replica"),),
    ),
    Refusal(
        "jobslo/min-pdengine",
        _JOB,
        {"spec.bounds.min": {"type": "pdengine", "value": 0}},
        (("spec.bounds.min.type", "bounds.min.type must be replica or concurrency"),),
    ),
    Refusal(
        "jobslo/min-above-max",
        _JOB,
        {"spec.bounds.min": {"type": "replica", "value": 5}},
        (("spec.bounds.min.value", "bounds.min.value must be less than or equal to bounds.max.value"),),
    ),
    Refusal(
        "rsg/duplicate-member",
        _RSG,
        {"spec.members[1].name": "prefill"},
        (("spec.members", "members[].name must be unique"),),
    ),
    Refusal(
        "rsg/too-many-groups",
        _RSG,
        {"spec.strategy": "GroupReplication", "spec.replicas": 1025},
        (("spec.replicas", "replicas must be at most 1024 with strategy GroupReplication (each group is "
                           "a set of workloads the controller creates)"),),
    ),
    Refusal(
        "tidal/duplicate-rule",
        _TIDAL,
        {"spec.rules[2].name": "weekday-peak"},
        (("spec.rules", "rules[].name must be unique"),),
    ),
    # ---- issue 8, item 11: what the API server alone accepted before
    Refusal(
        "es/apa-tolerance-2",
        _ES_M,
        {f"{_MTR}.algorithmConfig.tolerance": "2"},
        ((f"{_MTR}.algorithmConfig[tolerance]", _TOLERANCE),),
    ),
    Refusal(
        "es/apa-tolerance-not-a-number",
        _ES_M,
        {f"{_MTR}.algorithmConfig.tolerance": "lots"},
        ((f"{_MTR}.algorithmConfig[tolerance]", _TOLERANCE),),
    ),
    Refusal(
        "es/apa-tolerance-negative",
        _ES_M,
        {f"{_MTR}.algorithmConfig.tolerance": "-0.1"},
        ((f"{_MTR}.algorithmConfig[tolerance]", _TOLERANCE),),
    ),
    Refusal(
        "es/apa-scaleUpRate-1",
        _ES_M,
        {f"{_MTR}.algorithmConfig.scaleUpRate": "1"},
        ((f"{_MTR}.algorithmConfig[scaleUpRate]", _UP_RATE),),
    ),
    Refusal(
        "es/apa-scaleDownRate-half",
        _ES_M,
        {f"{_MTR}.algorithmConfig.scaleDownRate": "0.5"},
        ((f"{_MTR}.algorithmConfig[scaleDownRate]", _DOWN_RATE),),
    ),
    Refusal(
        "es/apa-config-unknown-key",
        _ES_M,
        {f"{_MTR}.algorithmConfig.scaleUpRatio": "3"},
        (
            (
                f"{_MTR}.algorithmConfig",
                "algorithmConfig of apa takes only tolerance, scaleUpRate and scaleDownRate",
            ),
        ),
    ),
    Refusal(
        "es/hpa-with-externalServer",
        _ES_M,
        {f"{_MTR}.scalingAlgorithm": "HPA", f"{_MTR}.algorithmConfig": DELETE},
        ((_M, _HPA_EXTERNAL_SERVER),),
    ),
    Refusal(
        "es/hpa-with-algorithmConfig",
        _ES_M,
        {f"{_MTR}.scalingAlgorithm": "HPA", f"{_M}[3]": DELETE},
        ((f"{_MTR}.algorithmConfig", _HPA_CONFIG),),
    ),
    Refusal(
        "es/value-target-negative",
        _ES_M,
        {f"{_M}[2].external.target.value": "-5"},
        ((f"{_M}[2].external.target.value", "value must be a quantity greater than 0"),),
    ),
    Refusal(
        "es/value-target-zero-int",
        _ES_M,
        {f"{_M}[2].external.target.value": 0},
        ((f"{_M}[2].external.target.value", "value must be a quantity greater than 0"),),
    ),
    Refusal(
        "es/averageValue-zero",
        _ES_M,
        {f"{_M}[1].custom.target.averageValue": "0"},
        ((f"{_M}[1].custom.target.averageValue", "averageValue must be a quantity greater than 0"),),
    ),
    Refusal(
        "es/averageValue-negative-milli",
        _ES_M,
        {f"{_M}[3].externalServer.target.averageValue": "-500m"},
        ((f"{_M}[3].externalServer.target.averageValue", "averageValue must be a quantity greater than 0"),),
    ),
    Refusal(
        "es/externalServer-endpoint-credentials",
        _ES_M,
        {f"{_M}[3].externalServer.endpoint": "http://admin:secret@prometheus:9090"},
        ((f"{_M}[3].externalServer.endpoint", _url("endpoint")),),
    ),
    Refusal(
        "es/externalServer-endpoint-no-host",
        _ES_M,
        {f"{_M}[3].externalServer.endpoint": "http://:9090/x"},
        ((f"{_M}[3].externalServer.endpoint", _url("endpoint")),),
    ),
    Refusal(
        "es/externalServer-endpoint-port",
        _ES_M,
        {f"{_M}[3].externalServer.endpoint": "http://prometheus:99999"},
        ((f"{_M}[3].externalServer.endpoint", _url("endpoint")),),
    ),
    Refusal(
        "es/externalServer-endpoint-query",
        _ES_M,
        {f"{_M}[3].externalServer.endpoint": "http://prometheus:9090/?x=1#f"},
        ((f"{_M}[3].externalServer.endpoint",
          "endpoint must be a base URL without '?' or '#': escaler appends /api/v1/query and the query "
          "(put the PromQL in query)"),),
    ),
    Refusal(
        "es/fallback-on-state-trigger",
        _ES_S,
        {"spec.fallback": {"failureThreshold": 3, "replicas": 2}},
        (("spec.fallback", _FALLBACK),),
    ),
    Refusal(
        "es/fallback-on-signal-trigger",
        _ES_SIG,
        {"spec.fallback": {"failureThreshold": 3, "replicas": 2}},
        (("spec.fallback", _FALLBACK),),
    ),
    Refusal(
        "es/pollIntervalSeconds-on-state-trigger",
        _ES_S,
        {"spec.pollIntervalSeconds": 10},
        (("spec.pollIntervalSeconds", _POLL_INTERVAL),),
    ),
    Refusal(
        "es/floorFrom-on-state-trigger",
        _ES_S,
        {"spec.floorFrom": {"name": "office-hours"}},
        (("spec.floorFrom", _FLOOR_FROM),),
    ),
    Refusal(
        "es/floorFrom-with-hpa",
        _ES_M,
        {f"{_MTR}.scalingAlgorithm": "HPA", f"{_MTR}.algorithmConfig": DELETE, f"{_M}[3]": DELETE,
         "spec.floorFrom": {"name": "office-hours"}},
        (("spec.floorFrom", _FLOOR_FROM),),
    ),
    Refusal(
        "tidal/exclude-date-february-30",
        _TIDAL,
        {"spec.rules[0].excludeDates": ["2026-12-25", "2026-02-30"]},
        (("spec.rules[0].excludeDates", _EXCLUDE_DATES),),
    ),
    Refusal(
        "tidal/exclude-date-not-iso",
        _TIDAL,
        {"spec.rules[0].excludeDates": ["25/12/2026"]},
        (("spec.rules[0].excludeDates", _EXCLUDE_DATES),),
    ),
    Refusal(
        "tidal/exclude-date-2100-02-29",
        _TIDAL,
        {"spec.rules[0].excludeDates": ["2100-02-29"]},
        (("spec.rules[0].excludeDates", _EXCLUDE_DATES),),
    ),
    Refusal(
        "es/fallback-with-hpa",
        _ES_M,
        {f"{_MTR}.scalingAlgorithm": "HPA", f"{_MTR}.algorithmConfig": DELETE, f"{_M}[3]": DELETE,
         "spec.fallback": {"failureThreshold": 3, "replicas": 2}},
        (("spec.fallback", _FALLBACK),),
    ),
    Refusal(
        "es/podDeletionCost-on-statefulset",
        _ES_SIG,
        {"spec.targetRef.kind": "StatefulSet", "spec.scaleDown": _pdc()},
        ((_PDC, _DELETION_COST),),
    ),
    Refusal(
        "es/podDeletionCost-on-state-trigger",
        _ES_S,
        {"spec.scaleDown": _pdc()},
        ((_PDC, _DELETION_COST),),
    ),
    Refusal(
        "es/podDeletionCost-with-hpa",
        _ES_M,
        {f"{_MTR}.scalingAlgorithm": "HPA", f"{_MTR}.algorithmConfig": DELETE, f"{_M}[3]": DELETE,
         "spec.scaleDown": _pdc()},
        ((_PDC, _DELETION_COST),),
    ),
    Refusal(
        "es/podDeletionCost-endpoint-query",
        _ES_M,
        {"spec.scaleDown": _pdc(endpoint="http://prometheus:9090/?x=1")},
        ((f"{_PDC}.prometheus.endpoint",
          "endpoint must be a base URL without '?' or '#': escaler appends /api/v1/query and the query "
          "(put the PromQL in query)"),),
    ),
    Refusal(
        "es/podDeletionCost-endpoint-credentials",
        _ES_M,
        {"spec.scaleDown": _pdc(endpoint="http://admin:pw@prometheus:9090")},
        ((f"{_PDC}.prometheus.endpoint", _url("endpoint")),),
    ),
    Refusal(
        "es/signal-endpoint-credentials",
        _ES_SIG,
        {"spec.trigger.signalTrigger.endpoint": "http://token@gateway.llm:8080/activity"},
        (("spec.trigger.signalTrigger.endpoint", _url("endpoint")),),
    ),
    Refusal(
        "llms/prometheus-endpoint-no-host",
        _LLMS,
        {"spec.prometheus.endpoint": "http://:9090"},
        (("spec.prometheus.endpoint", _url("endpoint")),),
    ),
    Refusal(
        "llms/customProvider-url-credentials",
        _LLMS,
        {"spec.customProvider.url": "http://user:secret@slo:8080/decisions/x",
         "spec.customProvider.serviceId": DELETE},
        (("spec.customProvider.url", _url("url")),),
    ),
    Refusal(
        "rsg/scaleDown-endpoint-port-0",
        _RSG,
        {"spec.scaleDown.prometheus.endpoint": "http://prometheus:0"},
        (("spec.scaleDown.prometheus.endpoint", _url("endpoint")),),
    ),
    Refusal(
        "tidal/start-without-cron-tz",
        _TIDAL,
        {"spec.rules[0].start": "0 9 * * 1-5"},
        (("spec.rules[0].start", _prefix("start")),),
    ),
    Refusal(
        "tidal/end-zone-lower-case",
        _TIDAL,
        {"spec.rules[0].end": "CRON_TZ=asia/shanghai 0 19 * * 1-5"},
        (("spec.rules[0].end", _prefix("end")),),
    ),
    Refusal(
        "tidal/end-zone-path",
        _TIDAL,
        {"spec.rules[1].end": "CRON_TZ=../../etc/passwd 0 14 * * 1-5"},
        (("spec.rules[1].end", _prefix("end")),),
    ),
    Refusal(
        "tidal/start-six-fields",
        _TIDAL,
        {"spec.rules[1].start": "CRON_TZ=Asia/Shanghai 0 30 11 * * 1-5"},
        (("spec.rules[1].start", _count("start")),),
    ),
    Refusal(
        "tidal/end-four-fields",
        _TIDAL,
        {"spec.rules[2].end": "CRON_TZ=Asia/Shanghai 0 6 * *"},
        (("spec.rules[2].end", _count("end")),),
    ),
    Refusal(
        "tidal/start-hour-25",
        _TIDAL,
        {"spec.rules[2].start": "CRON_TZ=Asia/Shanghai 0 25 * * *"},
        (("spec.rules[2].start", _range("start")),),
    ),
    Refusal(
        "tidal/end-minute-61",
        _TIDAL,
        {"spec.rules[1].end": "CRON_TZ=Asia/Shanghai 61 13 * * 1-5"},
        (("spec.rules[1].end", _range("end")),),
    ),
    Refusal(
        "tidal/start-month-13",
        _TIDAL,
        {"spec.rules[0].start": "CRON_TZ=Asia/Shanghai 0 9 1 13 *"},
        (("spec.rules[0].start", _range("start")),),
    ),
    Refusal(
        "tidal/start-day-of-week-8",
        _TIDAL,
        {"spec.rules[0].start": "CRON_TZ=Asia/Shanghai 0 9 * * 1-8"},
        (("spec.rules[0].start", _range("start")),),
    ),
    Refusal(
        "tidal/end-day-of-month-0",
        _TIDAL,
        {"spec.rules[2].end": "CRON_TZ=Asia/Shanghai 0 6 0 * *"},
        (("spec.rules[2].end", _range("end")),),
    ),
    Refusal(
        "tidal/end-equals-start",
        _TIDAL,
        {"spec.rules[0].end": "CRON_TZ=Asia/Shanghai 0 9 * * 1-5"},
        (
            (
                "spec.rules[0].end",
                "end must differ from start (a rule that ends when it starts is never active)",
            ),
        ),
    ),
    # ---- LLMScaler metricProvider: Flow (escaler.api.llmflow)
    Refusal("llms/flow-without-flow", _FLOW, {"spec.flow": DELETE},
            (("spec.flow", "flow is required when metricProvider is Flow"),)),
    Refusal("llms/flow-endpoint-credentials", _FLOW, {"spec.flow.endpoint": "http://u:p@prometheus:9090"},
            (("spec.flow.endpoint", _url("endpoint")),)),
    Refusal("llms/flow-preset-without-selector", _FLOW, {"spec.flow.selector": DELETE},
            ((_FS, _SELECTOR_REQUIRED),)),
    Refusal("llms/flow-generic-with-selector", _FLOW,
            {"spec.flow.engine": "generic", "spec.flow.queries": _GENERIC}, ((_FS, _SELECTOR_GENERIC),)),
    *(Refusal(f"llms/flow-selector-{i}", _FLOW, {"spec.flow.selector": bad}, ((_FS, _SELECTOR_GRAMMAR),))
      for i, bad in enumerate(FLOW_BAD_SELECTORS)),
    Refusal(
        "llms/flow-generic-without-token-queries",
        _FLOW,
        {"spec.flow.engine": "generic", "spec.flow.selector": DELETE,
         "spec.flow.queries": {"ttftMissShare": "x", "tpotMissShare": "y"}},
        (("spec.flow.queries.promptTokensRate",
          "queries.promptTokensRate is required with engine generic (no preset writes it)"),
         ("spec.flow.queries.generationTokensRate",
          "queries.generationTokensRate is required with engine generic (no preset writes it)")),
    ),
    *(Refusal(f"llms/flow-{signal}-without-{objective}", _FLOW,
              {f"spec.flow.{objective}": DELETE, "spec.flow.queries": {signal: "sum(x)"}},
              ((f"spec.flow.queries.{signal}",
                f"queries.{signal} needs {objective}: the latency signals are read only with their "
                "objective"),))
      for objective, signal in (("ttftSeconds", "ttftP90"), ("ttftSeconds", "ttftMissShare"),
                                ("ttftSeconds", "ttftMissShareLong"), ("tpotSeconds", "tpotMissShare"),
                                ("tpotSeconds", "tpotMissShareLong"))),
    Refusal(
        "llms/flow-tgi-objectives-without-shares",
        _FLOW,
        {"spec.flow.engine": "tgi"},
        (("spec.flow.queries.ttftMissShare", "ttftSeconds needs queries.ttftMissShare with engine tgi or "
          "generic (no preset reads it: tgi has no TTFT histogram)"),
         ("spec.flow.queries.tpotMissShare", "tpotSeconds needs queries.tpotMissShare with engine tgi or "
          "generic (no preset reads it: tgi's TPOT buckets are not round numbers)")),
    ),
    # ---- LLMSLORequirement spec.flow (escaler.api.slo, escaler.api.llmflow.objective_rules)
    Refusal("llmslo/flow-with-pd", _SLOFLOW, {"spec.deployType": "pd"},
            (("spec.flow", "flow is not supported with deployType pd: flow sizing adds a replica's prefill "
              "and decode time on one GPU, which the members of a PD engine group do not share"),)),
    Refusal("llmslo/flow-with-inflight", _SLOFLOW, {"spec.inflight": {"promql": "sum(x)"}},
            (("spec.inflight", "inflight is not used with flow (flow sizing reads its own load: the token "
              "rates and the waiting backlog): remove one"),)),
    Refusal("llmslo/flow-ttftSeconds-with-ttft", _SLOFLOW, {"spec.flow.ttftSeconds": 2.5},
            (("spec.flow.ttftSeconds", "flow.ttftSeconds is not used with ttft: the flow's TTFT objective is "
              "ttft.targetMs (one objective per requirement): remove flow.ttftSeconds"),)),
    Refusal("llmslo/flow-tpotSeconds-with-otps", _SLOFLOW, {"spec.otps": {"target": 10, "promql": "sum(o)"}},
            (("spec.flow.tpotSeconds", "flow.tpotSeconds is not used with otps: the flow's TPOT objective is "
              "1 / otps.target (one objective per requirement): remove flow.tpotSeconds"),)),
    Refusal("llmslo/flow-selector-grammar", _SLOFLOW, {"spec.flow.selector": FLOW_BAD_SELECTORS[0]},
            ((_FS, _SELECTOR_GRAMMAR),)),
    Refusal("llmslo/flow-generic-with-selector", _SLOFLOW,
            {"spec.flow.engine": "generic", "spec.flow.queries": _GENERIC}, ((_FS, _SELECTOR_GENERIC),)),
    *(Refusal(f"llmslo/flow-{signal}-without-{objective}", _SLOFLOW,
              {"spec.ttft": DELETE, "spec.flow.tpotSeconds": DELETE, "spec.flow.queries": {signal: "sum(x)"}},
              ((f"spec.flow.queries.{signal}",
                f"flow.queries.{signal} needs a {objective[:4].upper()} objective (flow.{objective} or "
                f"{slo}): the latency signals are read only with their objective"),))
      for objective, slo, signal in (("ttftSeconds", "ttft", "ttftP90"),
                                     ("ttftSeconds", "ttft", "ttftMissShare"),
                                     ("ttftSeconds", "ttft", "ttftMissShareLong"),
                                     ("tpotSeconds", "otps", "tpotMissShare"),
                                     ("tpotSeconds", "otps", "tpotMissShareLong"))),
    Refusal(
        "llmslo/flow-tgi-objectives-without-shares",
        _SLOFLOW,
        {"spec.flow.engine": "tgi"},
        (("spec.flow.queries.ttftMissShare", "a TTFT objective (flow.ttftSeconds or ttft) needs "
          "flow.queries.ttftMissShare with engine tgi or generic (no preset reads it: tgi has no TTFT "
          "histogram)"),
         ("spec.flow.queries.tpotMissShare", "a TPOT objective (flow.tpotSeconds or otps) needs "
          "flow.queries.tpotMissShare with engine tgi or generic (no preset reads it: tgi's TPOT buckets are "
          "not round numbers)")),
    ),
)

# (id, sample, changes, field path the API server names)
REFUSED_BY_SCHEMA: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("llms/flow-unknown-engine", _FLOW, {"spec.flow.engine": "triton"}, "spec.flow.engine"),
    ("llms/flow-zero-prefill", _FLOW, {"spec.flow.capacity.prefillTokensPerSecond": 0},
     "spec.flow.capacity.prefillTokensPerSecond"),
    ("llms/flow-no-capacity", _FLOW, {"spec.flow.capacity": DELETE}, "spec.flow.capacity"),
    ("llms/flow-utilization-above-1", _FLOW, {"spec.flow.utilization": 1.5}, "spec.flow.utilization"),
    ("llms/flow-selector-too-long", _FLOW, {"spec.flow.selector": 'a="' + "x" * 600 + '"'},
     "spec.flow.selector"),
    ("llms/unknown-provider", _FLOW, {"spec.metricProvider": "Flows"}, "spec.metricProvider"),
    ("llmslo/flow-zero-decode", _SLOFLOW, {"spec.flow.capacity.decodeTokensPerSecond": 0},
     "spec.flow.capacity.decodeTokensPerSecond"),
    ("llmslo/flow-unknown-engine", _SLOFLOW, {"spec.flow.engine": "triton"}, "spec.flow.engine"),
    ("es/unknown-trigger-type", _ES_M, {"spec.trigger.type": "CronTrigger"}, "spec.trigger.type"),
    ("es/unknown-mode", _ES_M, {"spec.mode": "Passive"}, "spec.mode"),
    ("es/negative-min", _ES_SIG, {"spec.minReplicas": -1}, "spec.minReplicas"),
    ("es/pollIntervalSeconds-zero", _ES_M, {"spec.pollIntervalSeconds": 0}, "spec.pollIntervalSeconds"),
    ("es/pollIntervalSeconds-over-an-hour", _ES_M, {"spec.pollIntervalSeconds": 3601},
     "spec.pollIntervalSeconds"),
    ("es/fallback-threshold-zero", _ES_M, {"spec.fallback": {"failureThreshold": 0, "replicas": 2}},
     "spec.fallback.failureThreshold"),
    ("es/fallback-negative-replicas", _ES_M, {"spec.fallback": {"failureThreshold": 3, "replicas": -1}},
     "spec.fallback.replicas"),
    ("es/podDeletionCost-bad-pod-label", _ES_M,
     {"spec.scaleDown": _pdc(podLabel="pod-name")}, f"{_PDC}.prometheus.podLabel"),
    ("es/podDeletionCost-timeout-zero", _ES_M,
     {"spec.scaleDown": _pdc(timeoutSeconds=0)}, f"{_PDC}.prometheus.timeoutSeconds"),
    ("es/podDeletionCost-no-query", _ES_M,
     {"spec.scaleDown": _pdc(query=DELETE)}, f"{_PDC}.prometheus.query"),
    ("llms/fallback-threshold-zero", _LLMS, {"spec.fallback": {"failureThreshold": 0, "replicas": 2}},
     "spec.fallback.failureThreshold"),
    (
        "es/bad-quantity",
        _ES_M,
        {f"{_M}[1].custom.target.averageValue": "four"},
        f"{_M}[1].custom.target.averageValue",
    ),
    ("es/no-metrics", _ES_M, {f"{_M}": []}, _M),
    (
        "es/bad-endpoint",
        _ES_M,
        {f"{_M}[3].externalServer.endpoint": "prometheus:9090"},
        f"{_M}[3].externalServer.endpoint",
    ),
    ("es/missing-targetRef", _ES_M, {"spec.targetRef": DELETE}, "spec.targetRef"),
    ("tidal/negative-replicas", _TIDAL, {"spec.rules[0].replicas": -1}, "spec.rules[0].replicas"),
    ("tidal/too-many-exclude-dates", _TIDAL,
     {"spec.rules[0].excludeDates": [f"2026-01-{d:02d}" for d in range(1, 32)] * 12},
     "spec.rules[0].excludeDates"),
    ("es/floorFrom-bad-name", _ES_M, {"spec.floorFrom": {"name": "Office_Hours"}}, "spec.floorFrom.name"),
    ("es/floorFrom-other-kind", _ES_M, {"spec.floorFrom": {"kind": "CronJob", "name": "x"}},
     "spec.floorFrom.kind"),
    ("llms/floorFrom-missing-name", _LLMS, {"spec.floorFrom": {}}, "spec.floorFrom.name"),
    ("rsg/zero-per-group", _RSG, {"spec.members[0].replicasPerGroup": 0}, "spec.members[0].replicasPerGroup"),
    ("rsg/bad-strategy", _RSG, {"spec.strategy": "Cloning"}, "spec.strategy"),
    (
        "llms/zero-targetPerReplica",
        _LLMS,
        {"spec.prometheus.metrics[0].targetPerReplica": 0},
        "spec.prometheus.metrics[0].targetPerReplica",
    ),
    ("llmslo/negative-bound", _LLMSLO, {"spec.bounds.min.value": -1}, "spec.bounds.min.value"),
    ("llmslo/bad-deployType", _LLMSLO, {"spec.deployType": "disaggregated"}, "spec.deployType"),
    ("jobslo/missing-queue", _JOB, {"spec.queue": DELETE}, "spec.queue"),
    # ---- issue 8, item 11
    ("es/resource-gpu", _ES_M, {f"{_M}[0].resource.name": "gpu"}, f"{_M}[0].resource.name"),
    (
        "es/averageUtilization-0",
        _ES_M,
        {f"{_M}[0].resource.target.averageUtilization": 0},
        f"{_M}[0].resource.target.averageUtilization",
    ),
    (
        "tidal/schedule-too-long",
        _TIDAL,
        {"spec.rules[0].start": "CRON_TZ=UTC " + "0," * 200 + "0 9 * * *"},
        "spec.rules[0].start",
    ),
)


@dataclass(frozen=True)
class Malformed:
    """One object the API server alone (schema + CEL, no webhook) must refuse."""

    id: str
    sample: str
    changes: dict[str, Any]
    # the field path the refusal names
    path: str
    # the CEL rule's message, for a rule refusal (None for a schema refusal)
    message: str | None

    @property
    def kind(self) -> str:
        return self.sample.split("/")[0]

    def obj(self) -> dict[str, Any]:
        return mutate(_parsed_samples()[self.sample], self.changes)  # mutate() deep-copies


# Objects the rules must accept that no sample shows, (id, sample, changes): minReplicas 0 where the
# trigger can decide 0 (issue 28 item 4) — a StateTrigger (a Tidal at 0), a SignalTrigger, a
# MetricsTrigger with activation (without it: es/min-zero-without-signal)
ACCEPTED: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("es/min-zero-state", "ElasticScaler/llama-es", {"spec.minReplicas": 0}),
    ("es/min-zero-signal", "ElasticScaler/llama-batch", {"spec.minReplicas": 0}),
    ("es/min-zero-metrics-activation", "ElasticScaler/llama-decode",
     {"spec.minReplicas": 0, "spec.trigger.metricsTrigger.activation": {"value": "1"}}),
)


# Every malformed object of both tables (issue 8 item 11: at least 40, all six kinds).
MALFORMED: tuple[Malformed, ...] = tuple(
    Malformed(c.id, c.sample, c.changes, c.errors[0][0], c.errors[0][1]) for c in REFUSED_BY_RULE
) + tuple(Malformed(i, s, c, p, None) for i, s, c, p in REFUSED_BY_SCHEMA)


def server_disagreements(dry_run_create: Any) -> list[str]:
    """Replay every sample and both refusal tables against a real API server.

    ``dry_run_create(obj) -> (accepted: bool, error_text: str)`` creates ``obj`` with a
    server-side dry run (e.g. ``kubectl create --dry-run=server -f -``). Returns one line per
    disagreement: a sample or an ``ACCEPTED`` object refused, a refusal accepted, or an error text
    that lacks the expected field path and message. Used by hand and by e2e; the unit tests check
    the Python side.
    """
    problems: list[str] = []
    for key, obj in load_samples().items():
        ok, err = dry_run_create(obj)
        if not ok:
            problems.append(f"sample {key} refused: {err.strip()}")
    for case_id, sample, changes in ACCEPTED:
        ok, err = dry_run_create(mutate(load_samples()[sample], changes))
        if not ok:
            problems.append(f"{case_id} refused: {err.strip()}")
    for case in REFUSED_BY_RULE:
        ok, err = dry_run_create(case.obj())
        if ok:
            problems.append(f"{case.id}: accepted")
        for path, message in case.errors:
            if path not in err or message not in err:
                problems.append(f"{case.id}: expected {path}: {message!r} in {err.strip()!r}")
    for case_id, sample, changes, path in REFUSED_BY_SCHEMA:
        ok, err = dry_run_create(mutate(load_samples()[sample], changes))
        if ok:
            problems.append(f"{case_id}: accepted")
        elif path not in err:
            problems.append(f"{case_id}: expected {path} in {err.strip()!r}")
    return problems


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting as the API server does it: a missing property with a ``default`` is
    set (and then defaulted itself), top-down, through objects, maps and lists."""
    value = copy.deepcopy(value)
    if isinstance(value, dict) and "properties" in schema:
        for key, sub in schema["properties"].items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(sub, value[key])
    elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        value = {k: apply_defaults(schema["additionalProperties"], v) for k, v in value.items()}
    elif isinstance(value, list) and "items" in schema:
        value = [apply_defaults(schema["items"], v) for v in value]
    return value


def crd_schema(kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of ``kind`` as generated."""
    from escaler.api.crdgen import generate_crd
    from escaler.api.registry import KINDS

    schema: dict[str, Any] = generate_crd(KINDS[kind])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema
