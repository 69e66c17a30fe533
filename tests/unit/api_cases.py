"""Shared fixtures of the escaler.api tests: the samples, and tables of objects the API must refuse.

``REFUSED_BY_RULE`` lists objects that break one cross-field rule (CEL on the CRD, and
``escaler.api.validate`` in Python) with the exact errors expected; ``REFUSED_BY_SCHEMA`` lists
objects that break a single-field constraint (enum, minimum, pattern) that both the CRD schema
and parsing refuse. The same tables can be replayed against a real API server (server-side dry
run) to prove the CEL text and the Python checks agree; see ``server_disagreements`` below.
"""

from __future__ import annotations

import copy
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
    """``<Kind>/<name>`` → object, for every document in manifests/samples."""
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
        return mutate(load_samples()[self.sample], self.changes)


_ES_M, _ES_S, _ES_SIG = "ElasticScaler/llama-decode", "ElasticScaler/llama-es", "ElasticScaler/llama-batch"
_LLMS, _LLMSLO, _JOB = "LLMScaler/chat-llama", "LLMSLORequirement/chat-llama", "JobSLORequirement/batch-embed"
_RSG, _TIDAL = "ResourceScalingGroup/llama-pd", "Tidal/llama-office-hours"
_MT = "metricsTrigger is required when type is MetricsTrigger, and not allowed otherwise"
_MIN_MAX = "minReplicas must be less than or equal to maxReplicas"
_M = "spec.trigger.metricsTrigger.metrics"

REFUSED_BY_RULE: tuple[Refusal, ...] = (
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
        (("spec.minReplicas", "minReplicas may be 0 (scale to zero) only with trigger.type SignalTrigger"),),
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
        "tidal/duplicate-rule",
        _TIDAL,
        {"spec.rules[2].name": "weekday-peak"},
        (("spec.rules", "rules[].name must be unique"),),
    ),
)

# (id, sample, changes, field path the API server names)
REFUSED_BY_SCHEMA: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("es/unknown-trigger-type", _ES_M, {"spec.trigger.type": "CronTrigger"}, "spec.trigger.type"),
    ("es/unknown-mode", _ES_M, {"spec.mode": "Passive"}, "spec.mode"),
    ("es/negative-min", _ES_SIG, {"spec.minReplicas": -1}, "spec.minReplicas"),
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
)


def server_disagreements(dry_run_create: Any) -> list[str]:
    """Replay every sample and both refusal tables against a real API server.

    ``dry_run_create(obj) -> (accepted: bool, error_text: str)`` creates ``obj`` with a
    server-side dry run (e.g. ``kubectl create --dry-run=server -f -``). Returns one line per
    disagreement: a sample refused, a refusal accepted, or an error text that lacks the expected
    field path and message. Used by hand and by e2e; the unit tests check the Python side.
    """
    problems: list[str] = []
    for key, obj in load_samples().items():
        ok, err = dry_run_create(obj)
        if not ok:
            problems.append(f"sample {key} refused: {err.strip()}")
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
