"""escaler.api models: defaults, parse/to_object round trips, unknown-field preservation, wire types."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any, get_args

import pytest
from api_cases import apply_defaults, crd_schema, load_samples, mutate
from pydantic import ValidationError

from escaler.api import (
    KINDS,
    Condition,
    ConditionStatus,
    ElasticScaler,
    ElasticScalerStatus,
    JobSLORequirement,
    LLMScaler,
    LLMSLORequirement,
    RecentDecision,
    ResourceScalingGroup,
    Tidal,
    UnknownKind,
    lookup,
    parse,
    parse_quantity,
)
from escaler.api.elasticscaler import RESOURCE_NAMES, ResourceMetricSource
from escaler.api.scaler import MAX_RECENT_DECISIONS, BoundBy

SAMPLES = load_samples()
NOW = datetime(2026, 3, 1, 9, 0, 0, tzinfo=UTC)
TS = "2026-03-01T09:00:00Z"

_TARGET = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"}
_ES_MIN = {
    "apiVersion": "elasticscaler.io/v1alpha1",
    "kind": "ElasticScaler",
    "metadata": {"name": "x"},
    "spec": {
        "targetRef": _TARGET,
        "trigger": {
            "type": "MetricsTrigger",
            "metricsTrigger": {
                "metrics": [
                    {
                        "type": "ExternalServer",
                        "externalServer": {
                            "endpoint": "http://p:9090",
                            "query": "up",
                            "target": {"type": "Value", "value": 1},
                        },
                    }
                ]
            },
        },
    },
}
_ES_SIGNAL_MIN = mutate(_ES_MIN, {"spec.trigger": {"type": "SignalTrigger", "signalTrigger": {}}})
_LLMS_MIN = {
    "apiVersion": "llm.escaler.io/v1alpha1",
    "kind": "LLMScaler",
    "metadata": {"name": "x"},
    "spec": {
        "targetRef": _TARGET,
        "prometheus": {
            "endpoint": "http://p:9090",
            "metrics": [{"name": "m", "query": "q", "targetPerReplica": 4}],
        },
        "customProvider": {"url": "http://slo:8080/decisions/x"},
    },
}
_RSG_MIN = {
    "apiVersion": "autoscaling.openfuyao.com/v1alpha1",
    "kind": "ResourceScalingGroup",
    "metadata": {"name": "x"},
    "spec": {"members": [{"name": "a", "targetRef": _TARGET}]},
}
_TIDAL_MIN = {
    "apiVersion": "tidal.io/v1alpha1",
    "kind": "Tidal",
    "metadata": {"name": "x"},
    "spec": {"targetRef": _TARGET},
}
_LLMSLO_MIN = {
    "apiVersion": "llm.escaler.io/v1alpha1",
    "kind": "LLMSLORequirement",
    "metadata": {"name": "x"},
    "spec": {"serviceId": "x", "targetRef": _TARGET, "ttft": {"targetMs": 500, "promql": "q"}},
}
_JOB_MIN = {
    "apiVersion": "llm.escaler.io/v1alpha1",
    "kind": "JobSLORequirement",
    "metadata": {"name": "x"},
    "spec": {"serviceId": "x", "queue": {"maxDepth": 10, "promql": "q"}},
}


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


_DEFAULTS = [
    (_ES_MIN, "spec.min_replicas", 1),
    (_ES_MIN, "spec.max_replicas", 10),
    (_ES_MIN, "spec.defer_timeout_seconds", 600),
    (_ES_MIN, "spec.mode", "Active"),
    (_ES_MIN, "spec.trigger.metrics_trigger.scaling_algorithm", "apa"),
    (_ES_MIN, "spec.trigger.metrics_trigger.algorithm_config", None),
    (_ES_MIN, "spec.trigger.metrics_trigger.metrics.0.external_server.timeout_seconds", 5),
    (_ES_SIGNAL_MIN, "spec.trigger.signal_trigger.poll_interval_seconds", 10),
    (_ES_SIGNAL_MIN, "spec.trigger.signal_trigger.idle_timeout_seconds", 600),
    (_ES_SIGNAL_MIN, "spec.trigger.signal_trigger.activation_replicas", 1),
    (_ES_SIGNAL_MIN, "spec.trigger.signal_trigger.endpoint", None),
    (_LLMS_MIN, "spec.min_replicas", 1),
    (_LLMS_MIN, "spec.max_replicas", 10),
    (_LLMS_MIN, "spec.defer_timeout_seconds", 600),
    (_LLMS_MIN, "spec.mode", "Active"),
    (_LLMS_MIN, "spec.metric_provider", "Prometheus"),
    (_LLMS_MIN, "spec.prometheus.timeout_seconds", 5),
    (_LLMS_MIN, "spec.custom_provider.timeout_seconds", 5),
    (_LLMS_MIN, "spec.scale_down.stabilization_window_seconds", 300),
    (_LLMS_MIN, "spec.scale_down.max_step_replicas", None),
    (_RSG_MIN, "spec.strategy", "InplaceScaling"),
    (_RSG_MIN, "spec.replicas", 1),
    (_RSG_MIN, "spec.members.0.replicas_per_group", 1),
    (_RSG_MIN, "spec.scale_down", None),
    (_TIDAL_MIN, "spec.rules", []),
    (_TIDAL_MIN, "spec.default_replicas", None),
    (_LLMSLO_MIN, "spec.high_priority", False),
    (_LLMSLO_MIN, "spec.deploy_type", "aggregated"),
    (_LLMSLO_MIN, "spec.concurrency_per_replica", 1),
    (_LLMSLO_MIN, "spec.ttft.percentile", 90.0),
    (_LLMSLO_MIN, "spec.bounds", None),
    (_JOB_MIN, "spec.high_priority", False),
    (_JOB_MIN, "spec.target_ref", None),
    (_JOB_MIN, "status", None),
]


@pytest.mark.parametrize(
    ("obj", "path", "expected"),
    [pytest.param(o, p, e, id=f"{o['kind']}.{p}={e!r}") for o, p, e in _DEFAULTS],
)
def test_defaults(obj: dict[str, Any], path: str, expected: Any) -> None:
    assert _get(parse(obj), path) == expected


@pytest.mark.parametrize(
    ("obj", "kind"),
    [
        pytest.param(o, o["kind"], id=i)
        for i, o in {
            "ElasticScaler-metrics": _ES_MIN,
            "ElasticScaler-signal": _ES_SIGNAL_MIN,
            "LLMScaler": _LLMS_MIN,
            "ResourceScalingGroup": _RSG_MIN,
            "Tidal": _TIDAL_MIN,
            "LLMSLORequirement": _LLMSLO_MIN,
            "JobSLORequirement": _JOB_MIN,
        }.items()
    ],
)
def test_model_defaults_are_the_crd_defaults(obj: dict[str, Any], kind: str) -> None:
    """What the API server would store (CRD defaulting) is exactly what ``to_object`` writes."""
    assert parse(obj).to_object() == apply_defaults(crd_schema(kind), obj)


@pytest.mark.parametrize("key", sorted(SAMPLES), ids=sorted(SAMPLES))
def test_sample_round_trip(key: str) -> None:
    sample = SAMPLES[key]
    model = parse(sample)
    assert type(model) is KINDS[sample["kind"]].model
    assert model.to_object() == apply_defaults(crd_schema(sample["kind"]), sample)
    # and the round trip is stable
    assert parse(model.to_object()).to_object() == model.to_object()


_CONDITION = {
    "type": "Ready",
    "status": "True",
    "reason": "Ready",
    "message": "",
    "lastTransitionTime": TS,
    "observedGeneration": 3,
}
_SCALER_STATUS = {
    "observedGeneration": 3,
    "currentReplicas": 2,
    "desiredReplicas": 4,
    "lastScaleTime": TS,
    "deferredSince": TS,
    "currentMetrics": [
        {
            "name": "cpu",
            "type": "Resource",
            "value": 140.0,
            "target": 70.0,
            "targetType": "Utilization",
            "recommendedReplicas": 4,
        },
        {"name": "queue", "type": "External", "error": "no samples in window"},
    ],
    "recentDecisions": [
        {"time": TS, "from": 2, "to": 4, "reason": "cpu 140% of 70%", "boundBy": "Stabilize"}
    ],
    "conditions": [
        {**_CONDITION, "type": "ScalingActive", "reason": "MetricsAvailable", "message": "evaluated 1 of 2"},
        {**_CONDITION, "type": "AbleToScale", "reason": "Synced"},
        {**_CONDITION, "type": "ScalingLimited", "status": "False", "reason": "DesiredWithinRange"},
    ],
}
STATUSES: dict[str, dict[str, Any]] = {
    "ElasticScaler/llama-decode": {
        **_SCALER_STATUS,
        "hpaName": "llama-decode-hpa",
        "resolvedTargetRef": _TARGET,
    },
    "LLMScaler/chat-llama": _SCALER_STATUS,
    "Tidal/llama-office-hours": {
        "observedGeneration": 1,
        "desiredReplicas": 8,
        "activeRules": ["weekday-peak"],
        "nextTransitionTime": TS,
        "conditions": [_CONDITION],
    },
    "ResourceScalingGroup/llama-pd": {
        "observedGeneration": 1,
        "replicas": 2,
        "readyReplicas": 1,
        "selector": "autoscaling.openfuyao.com/rsg=llama-pd",
        "members": [{"name": "prefill", "desiredReplicas": 4, "replicas": 4, "readyReplicas": 3}],
        "groups": [
            {
                "index": 0,
                "ready": True,
                "members": [
                    {
                        "name": "prefill",
                        "workload": "prefill-g0",
                        "replicas": 2,
                        "readyReplicas": 2,
                        "ready": True,
                    }
                ],
            },
            {"index": 1, "ready": False, "members": []},
        ],
        "conditions": [
            {**_CONDITION, "status": "False", "reason": "GroupsNotReady", "message": "1 of 2 ready"}
        ],
    },
    "LLMSLORequirement/chat-llama": {
        "observedGeneration": 2,
        "decision": {
            "replicas": 3,
            "reason": "ttft p90 950ms > 800ms",
            "time": TS,
            "signals": {"ttftMs": 950.5, "otps": None, "window": {"seconds": 60}},
        },
        "conditions": [_CONDITION],
    },
    "JobSLORequirement/batch-embed": {"decision": {"replicas": 0, "reason": "queue empty", "time": TS}},
}


@pytest.mark.parametrize("key", sorted(STATUSES), ids=sorted(STATUSES))
def test_status_round_trip(key: str) -> None:
    obj = {**SAMPLES[key], "status": STATUSES[key]}
    model = parse(obj)
    assert model.to_object() == apply_defaults(crd_schema(obj["kind"]), obj)


_FUTURE = {"futureField": {"nested": [1, "two", None], "flag": True}}


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("ElasticScaler/llama-decode", "futureTopLevel"),
        ("ElasticScaler/llama-decode", "metadata.managedFields"),
        ("ElasticScaler/llama-decode", "metadata.ownerReferences"),
        ("ElasticScaler/llama-decode", "spec.futureField"),
        ("ElasticScaler/llama-decode", "spec.targetRef.futureField"),
        ("ElasticScaler/llama-decode", "spec.trigger.metricsTrigger.futureField"),
        ("ElasticScaler/llama-decode", "spec.trigger.metricsTrigger.metrics[0].resource.target.futureField"),
        (
            "ElasticScaler/llama-decode",
            "spec.trigger.metricsTrigger.metrics[2].external.metric.selector.futureField",
        ),
        ("ElasticScaler/llama-decode", "status.futureField"),
        ("ElasticScaler/llama-decode", "status.conditions[0].futureField"),
        ("ElasticScaler/llama-decode", "status.currentMetrics[0].futureField"),
        ("ElasticScaler/llama-decode", "status.recentDecisions[0].futureField"),
        ("ElasticScaler/llama-es", "spec.trigger.stateTrigger"),
        ("LLMScaler/chat-llama", "spec.scaleDown.futureField"),
        ("LLMScaler/chat-llama", "spec.prometheus.metrics[1].futureField"),
        ("LLMScaler/chat-llama", "status.futureField"),
        ("Tidal/llama-office-hours", "spec.rules[0].futureField"),
        ("Tidal/llama-office-hours", "status.futureField"),
        ("ResourceScalingGroup/llama-pd", "spec.members[1].futureField"),
        ("ResourceScalingGroup/llama-pd", "spec.scaleDown.prometheus.futureField"),
        ("ResourceScalingGroup/llama-pd", "status.groups[0].members[0].futureField"),
        ("LLMSLORequirement/chat-llama", "spec.bounds.min.futureField"),
        ("LLMSLORequirement/chat-llama", "status.decision.futureField"),
        ("JobSLORequirement/batch-embed", "spec.queue.futureField"),
    ],
    ids=lambda v: v if "/" not in v else v.split("/")[0],
)
def test_unknown_fields_are_kept(key: str, path: str) -> None:
    base = {**SAMPLES[key], "status": STATUSES.get(key, {})}
    base["metadata"] = {**base["metadata"], "ownerReferences": [], "managedFields": []}
    obj = mutate(base, {path: _FUTURE})
    out = parse(obj).to_object()
    node: Any = out
    for part in path.replace("]", "").replace("[", ".").split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    assert node == _FUTURE


def test_unknown_fields_survive_an_attribute_write() -> None:
    es = ElasticScaler.parse(mutate(SAMPLES["ElasticScaler/llama-decode"], {"status": {"futureField": 1}}))
    assert es.status is not None
    es.status.desired_replicas = 5
    assert es.to_object()["status"] == {
        "futureField": 1,
        "desiredReplicas": 5,
        "currentMetrics": [],
        "recentDecisions": [],
        "conditions": [],
    }


def test_to_object_drops_none_so_setting_none_clears_a_field() -> None:
    es = ElasticScaler.parse(
        {**SAMPLES["ElasticScaler/llama-decode"], "status": STATUSES["ElasticScaler/llama-decode"]}
    )
    assert es.status is not None
    es.status.deferred_since = None
    assert "deferredSince" not in es.to_object()["status"]


@pytest.mark.parametrize(
    ("model", "obj", "needle"),
    [
        (
            ElasticScaler,
            {**_ES_MIN, "kind": "Tidal"},
            "kind is 'Tidal'; a ElasticScaler has kind 'ElasticScaler'",
        ),
        (
            ElasticScaler,
            {**_ES_MIN, "apiVersion": "elasticscaler.io/v1"},
            "apiVersion is 'elasticscaler.io/v1'",
        ),
        (Tidal, {**_TIDAL_MIN, "spec": {}}, "targetRef"),
        (LLMScaler, mutate(_LLMS_MIN, {"spec.metricProvider": "Other"}), "metricProvider"),
    ],
    ids=["wrong-kind", "wrong-version", "missing-required", "bad-enum"],
)
def test_parse_refuses(model: Any, obj: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        model.parse(obj)


def test_parse_fills_type_meta_and_accepts_python_names() -> None:
    obj = {k: v for k, v in _JOB_MIN.items() if k not in ("apiVersion", "kind")}
    job = JobSLORequirement.parse(obj)
    assert (job.api_version, job.kind) == ("llm.escaler.io/v1alpha1", "JobSLORequirement")
    assert job.to_object()["apiVersion"] == "llm.escaler.io/v1alpha1"
    by_name = LLMSLORequirement.parse(
        {
            "metadata": {"name": "x"},
            "spec": {"service_id": "x", "target_ref": {"api_version": "v1", "kind": "K", "name": "n"}},
        }
    )
    assert by_name.to_object()["spec"]["serviceId"] == "x"
    assert by_name.to_object()["spec"]["targetRef"]["apiVersion"] == "v1"


def test_registry_parse_dispatches_on_kind() -> None:
    for key, sample in SAMPLES.items():
        assert isinstance(parse(sample), KINDS[sample["kind"]].model), key
    with pytest.raises(UnknownKind):
        parse({"apiVersion": "apps/v1", "kind": "Deployment"})
    with pytest.raises(UnknownKind):
        parse({**_ES_MIN, "apiVersion": "elasticscaler.io/v2"})
    assert lookup("tidal.io/v1alpha1", "Tidal") is KINDS["Tidal"]
    assert lookup("tidal.io/v1", "Tidal") is None


def test_metadata_accessors() -> None:
    rsg = ResourceScalingGroup.parse(
        {**_RSG_MIN, "metadata": {"name": "g", "namespace": "ns", "generation": 4}}
    )
    assert (rsg.name, rsg.namespace, rsg.metadata.generation) == ("g", "ns", 4)


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (NOW, TS),
        (NOW + timedelta(microseconds=999_999), TS),
        (datetime(2026, 3, 1, 17, 0, 0, tzinfo=timezone(timedelta(hours=8))), TS),
        ("2026-03-01T09:00:00Z", TS),
        ("2026-03-01T09:00:00.123456Z", TS),
        ("2026-03-01T10:00:00+01:00", TS),
    ],
    ids=["utc", "microseconds-dropped", "offset-to-utc", "string", "string-fraction", "string-offset"],
)
def test_times_are_rfc3339_utc_seconds(value: Any, wire: str) -> None:
    c = Condition(
        type="Ready", status=ConditionStatus.TRUE, reason="Ready", message="", last_transition_time=value
    )
    assert c.to_object()["lastTransitionTime"] == wire
    assert c.last_transition_time.tzinfo is not None


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValidationError):
        Condition(
            type="R",
            status=ConditionStatus.TRUE,
            reason="R",
            message="",
            last_transition_time=datetime(2026, 1, 1),
        )


@pytest.mark.parametrize(
    ("q", "value"),
    [
        (4, 4.0),
        ("4", 4.0),
        ("500m", 0.5),
        ("1.5", 1.5),
        ("2k", 2000.0),
        ("2Ki", 2048.0),
        ("1Gi", 2.0**30),
        ("1e3", 1000.0),
        ("1.5E-1", 0.15),
        ("+3", 3.0),
        ("-2", -2.0),
        (".5", 0.5),
        ("100n", 1e-7),
    ],
    ids=str,
)
def test_parse_quantity_of_spec_values(q: int | str, value: float) -> None:
    assert parse_quantity(q) == pytest.approx(value)


@pytest.mark.parametrize("q", ["", "four", "4 ", "1.2.3", "5Mb", "1e"], ids=repr)
def test_bad_quantities_are_refused(q: str) -> None:
    with pytest.raises(ValueError, match=r"not a (Kubernetes )?quantity"):
        parse_quantity(q)
    with pytest.raises(ValidationError):
        ElasticScaler.parse(
            mutate(_ES_MIN, {"spec.trigger.metricsTrigger.metrics[0].externalServer.target.value": q})
        )


def test_quantities_keep_their_wire_type() -> None:
    out = ElasticScaler.parse(SAMPLES["ElasticScaler/llama-decode"]).to_object()
    metrics = out["spec"]["trigger"]["metricsTrigger"]["metrics"]
    assert metrics[1]["custom"]["target"]["averageValue"] == "4"
    assert (
        ElasticScaler.parse(_ES_MIN).to_object()["spec"]["trigger"]["metricsTrigger"]["metrics"][0][
            "externalServer"
        ]["target"]["value"]
        == 1
    )


def test_record_keeps_the_last_ten_decisions_oldest_first() -> None:
    status = ElasticScalerStatus()
    for i in range(MAX_RECENT_DECISIONS + 3):
        status.record(RecentDecision(time=NOW + timedelta(seconds=i), from_=i, to=i + 1, reason=f"d{i}"))
    assert [d.from_ for d in status.recent_decisions] == list(range(3, MAX_RECENT_DECISIONS + 3))
    assert status.to_object()["recentDecisions"][0]["from"] == 3
    assert "from_" not in status.to_object()["recentDecisions"][0]


def test_llmscaler_status_has_the_scaler_status_fields() -> None:
    obj = {**SAMPLES["LLMScaler/chat-llama"], "status": _SCALER_STATUS}
    llms = LLMScaler.parse(obj)
    assert llms.status is not None
    assert llms.status.conditions[0].type == "ScalingActive"
    assert llms.status.current_metrics[1].error == "no samples in window"


@pytest.mark.parametrize("value", [b.value for b in BoundBy], ids=str)
def test_bound_by_takes_every_pipeline_step(value: str) -> None:
    raw = {"time": TS, "from": 1, "to": 2, "reason": "r", "boundBy": value}
    decision = RecentDecision.model_validate(raw)
    assert decision.bound_by is BoundBy(value)
    assert decision.to_object()["boundBy"] == value


@pytest.mark.parametrize("value", ["Recommend", "stabilize", "scaleUpLimit", "minReplicas"], ids=str)
def test_bound_by_refuses_what_is_not_a_pipeline_step(value: str) -> None:
    """Issue 8 item 9: the values the code used to write (and the docs' Recommend) are not steps."""
    with pytest.raises(ValidationError, match="boundBy"):
        RecentDecision.model_validate({"time": TS, "from": 1, "to": 2, "reason": "r", "boundBy": value})


def test_resource_metric_names_are_cpu_and_memory() -> None:
    assert get_args(ResourceMetricSource.model_fields["name"].annotation) == RESOURCE_NAMES
