"""Spec-level validation of every kind (docs/install.md#the-admission-webhook): one mistake per case, denied
with the field path
in the message; the same object with that mistake fixed is allowed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from api_cases import MALFORMED, Malformed
from webhook_samples import DELETE, ELASTICSCALER, SAMPLES, put, sample

from escaler.api.registry import KINDS
from escaler.scaling import register_algorithm, unregister_algorithm
from escaler.scaling.annotations import DEFAULTS, defaults_for_trigger, parse_annotations
from escaler.scaling.endpoints import parse_host_patterns
from escaler.webhook.admission import Outcome, review
from escaler.webhook.checks import CheckContext
from escaler.webhook.validation import ROUTES, validate_object, validators
from escaler.webhook.warnings import MAX_WARNING_BYTES, MAX_WARNINGS

MT = "spec.trigger.metricsTrigger"
ANN = "metadata.annotations"

# (id, sample, the mistake {path: value}, the field path the denial must name, the fix {path: value})
CASES: list[tuple[str, str, dict[str, Any], str, dict[str, Any]]] = [
    # ---- ElasticScaler: what CEL also checks
    (
        "es-trigger-type-mismatch",
        "elasticscaler",
        {"spec.trigger.type": "StateTrigger"},
        "spec.trigger.metricsTrigger",
        {"spec.trigger.type": "MetricsTrigger"},
    ),
    (
        "es-two-trigger-configs",
        "elasticscaler",
        {"spec.trigger.signalTrigger": {}},
        "spec.trigger.signalTrigger",
        {"spec.trigger.signalTrigger": DELETE},
    ),
    (
        "es-min-above-max",
        "elasticscaler",
        {"spec.minReplicas": 11},
        "spec.minReplicas",
        {"spec.minReplicas": 10},
    ),
    (
        "es-min-zero-without-signal",
        "elasticscaler",
        {"spec.minReplicas": 0},
        "spec.minReplicas",
        {"spec.minReplicas": 1},
    ),
    (
        "es-metric-type-without-its-config",
        "elasticscaler",
        {f"{MT}.metrics[0].type": "Custom"},
        f"{MT}.metrics[0].custom",
        {f"{MT}.metrics[0].type": "Resource"},
    ),
    (
        "es-target-type-without-its-value",
        "elasticscaler",
        {f"{MT}.metrics[1].custom.target.type": "Value"},
        f"{MT}.metrics[1].custom.target.value",
        {f"{MT}.metrics[1].custom.target.type": "AverageValue"},
    ),
    (
        "es-utilization-on-external",
        "elasticscaler",
        {f"{MT}.metrics[2].external.target": {"type": "Utilization", "averageUtilization": 50}},
        f"{MT}.metrics[2].external.target.type",
        {f"{MT}.metrics[2].external.target": {"type": "Value", "value": "50"}},
    ),
    (
        "es-bad-quantity",
        "elasticscaler",
        {f"{MT}.metrics[3].externalServer.target.averageValue": "eight"},
        f"{MT}.metrics[3].externalServer.target.averageValue",
        {f"{MT}.metrics[3].externalServer.target.averageValue": "8"},
    ),
    (
        "es-unknown-trigger-type",
        "elasticscaler",
        {"spec.trigger.type": "CronTrigger"},
        "spec.trigger.type",
        {"spec.trigger.type": "MetricsTrigger"},
    ),
    # ---- ElasticScaler: what only the webhook checks
    (
        "es-algorithm-not-registered",
        "elasticscaler",
        {f"{MT}.scalingAlgorithm": "magic"},
        f"{MT}.scalingAlgorithm",
        {f"{MT}.scalingAlgorithm": "apa"},
    ),
    (
        "es-apa-config-not-a-number",
        "elasticscaler",
        {f"{MT}.algorithmConfig.tolerance": "ten percent"},
        f"{MT}.algorithmConfig[tolerance]",
        {f"{MT}.algorithmConfig.tolerance": "0.2"},
    ),
    (
        "es-apa-config-unknown-key",
        "elasticscaler",
        {f"{MT}.algorithmConfig.scaleUpRatio": "3"},
        f"{MT}.algorithmConfig",
        {f"{MT}.algorithmConfig.scaleUpRatio": DELETE},
    ),
    (
        "es-apa-tolerance-2",
        "elasticscaler",
        {f"{MT}.algorithmConfig.tolerance": "2"},
        f"{MT}.algorithmConfig[tolerance]",
        {f"{MT}.algorithmConfig.tolerance": "0.2"},
    ),
    (
        "es-apa-rate-not-above-1",
        "elasticscaler",
        {f"{MT}.algorithmConfig.scaleDownRate": "1"},
        f"{MT}.algorithmConfig[scaleDownRate]",
        {f"{MT}.algorithmConfig.scaleDownRate": "1.5"},
    ),
    (
        "es-hpa-with-externalserver",
        "hpa-scaler",
        {f"{MT}.metrics[1]": ELASTICSCALER["spec"]["trigger"]["metricsTrigger"]["metrics"][3]},
        f"{MT}.metrics",
        {f"{MT}.metrics[1].type": "External", f"{MT}.metrics[1].externalServer": DELETE,
         f"{MT}.metrics[1].external": {"metric": {"name": "q"}, "target": {"type": "Value", "value": "9"}}},
    ),
    # ---- issue 8 item 7: HPA mode refuses what the companion HPA would silently ignore
    (
        "es-hpa-with-algorithm-config",
        "hpa-scaler",
        {f"{MT}.algorithmConfig": {"tolerance": "0.2"}},
        f"{MT}.algorithmConfig",
        {f"{MT}.algorithmConfig": DELETE},
    ),
    (
        "es-hpa-with-metrics-annotation",
        "hpa-scaler",
        {f"{ANN}[elasticscaler.io/metrics.windowSeconds]": "60"},
        f"{ANN}[elasticscaler.io/metrics.windowSeconds]",
        {f"{ANN}[elasticscaler.io/metrics.windowSeconds]": DELETE},
    ),
    (
        "es-hpa-with-bad-metrics-annotation",
        "hpa-scaler",
        {f"{ANN}[elasticscaler.io/metrics.aggregationType]": "Median"},
        f"{ANN}[elasticscaler.io/metrics.aggregationType]",
        {f"{ANN}[elasticscaler.io/metrics.aggregationType]": DELETE},
    ),
    # ---- issue 8 item 11: refused even with the webhook before
    (
        "es-value-target-negative",
        "elasticscaler",
        {f"{MT}.metrics[2].external.target.value": "-5"},
        f"{MT}.metrics[2].external.target.value",
        {f"{MT}.metrics[2].external.target.value": "5"},
    ),
    (
        "es-average-value-zero",
        "elasticscaler",
        {f"{MT}.metrics[1].custom.target.averageValue": "0"},
        f"{MT}.metrics[1].custom.target.averageValue",
        {f"{MT}.metrics[1].custom.target.averageValue": "100m"},
    ),
    (
        "es-average-utilization-zero",
        "elasticscaler",
        {f"{MT}.metrics[0].resource.target.averageUtilization": 0},
        f"{MT}.metrics[0].resource.target.averageUtilization",
        {f"{MT}.metrics[0].resource.target.averageUtilization": 1},
    ),
    (
        "es-resource-gpu",
        "elasticscaler",
        {f"{MT}.metrics[0].resource.name": "gpu"},
        f"{MT}.metrics[0].resource.name",
        {f"{MT}.metrics[0].resource.name": "memory"},
    ),
    (
        "es-endpoint-scheme",
        "elasticscaler",
        {f"{MT}.metrics[3].externalServer.endpoint": "ftp://prom:9090"},
        f"{MT}.metrics[3].externalServer.endpoint",
        {f"{MT}.metrics[3].externalServer.endpoint": "https://prom:9090"},
    ),
    (
        "es-endpoint-whitespace",
        "elasticscaler",
        {f"{MT}.metrics[3].externalServer.endpoint": "http://prom etheus:9090"},
        f"{MT}.metrics[3].externalServer.endpoint",
        {f"{MT}.metrics[3].externalServer.endpoint": "http://prometheus:9090"},
    ),
    (
        "es-endpoint-no-host",
        "elasticscaler",
        {f"{MT}.metrics[3].externalServer.endpoint": "http://:9090/x"},
        f"{MT}.metrics[3].externalServer.endpoint",
        {f"{MT}.metrics[3].externalServer.endpoint": "http://10.0.0.7:9090/x"},
    ),
    (
        "es-endpoint-bad-port",
        "elasticscaler",
        {f"{MT}.metrics[3].externalServer.endpoint": "http://prometheus:99999"},
        f"{MT}.metrics[3].externalServer.endpoint",
        {f"{MT}.metrics[3].externalServer.endpoint": "http://prometheus:9999"},
    ),
    (
        "es-signal-endpoint-relative",
        "signal-scaler",
        {"spec.trigger.signalTrigger.endpoint": "gateway/activity"},
        "spec.trigger.signalTrigger.endpoint",
        {"spec.trigger.signalTrigger.endpoint": "http://gateway/activity"},
    ),
    # ---- Tidal
    (
        "tidal-no-cron-tz",
        "tidal",
        {"spec.rules[0].start": "0 9 * * 1-5"},
        "spec.rules[0].start",
        {"spec.rules[0].start": "CRON_TZ=UTC 0 9 * * 1-5"},
    ),
    (
        "tidal-unknown-zone",
        "tidal",
        {"spec.rules[0].start": "CRON_TZ=Mars/Olympus 0 9 * * 1-5"},
        "spec.rules[0].start",
        {"spec.rules[0].start": "CRON_TZ=Europe/Paris 0 9 * * 1-5"},
    ),
    (
        "tidal-bad-cron-field",
        "tidal",
        {"spec.rules[1].end": "CRON_TZ=UTC 61 4 * * *"},
        "spec.rules[1].end",
        {"spec.rules[1].end": "CRON_TZ=UTC 59 4 * * *"},
    ),
    (
        "tidal-six-fields",
        "tidal",
        {"spec.rules[1].end": "CRON_TZ=UTC 0 30 4 * * *"},
        "spec.rules[1].end",
        {"spec.rules[1].end": "CRON_TZ=UTC 30 4 * * *"},
    ),
    (
        "tidal-never-fires",
        "tidal",
        {"spec.rules[1].start": "CRON_TZ=UTC 0 1 30 2 *"},
        "spec.rules[1].start",
        {"spec.rules[1].start": "CRON_TZ=UTC 0 1 28 2 *"},
    ),
    (
        "tidal-end-equals-start",
        "tidal",
        {"spec.rules[1].end": "CRON_TZ=UTC 0 1 * * *"},
        "spec.rules[1].end",
        {"spec.rules[1].end": "CRON_TZ=UTC 0 2 * * *"},
    ),
    (
        "tidal-duplicate-rule-names",
        "tidal",
        {"spec.rules[1].name": "weekday-peak"},
        "spec.rules",
        {"spec.rules[1].name": "weekend"},
    ),
    (
        "tidal-negative-replicas",
        "tidal",
        {"spec.rules[0].replicas": -1},
        "spec.rules[0].replicas",
        {"spec.rules[0].replicas": 0},
    ),
    (
        "tidal-paused-replicas",
        "tidal",
        {f"{ANN}[elasticscaler.io/paused-replicas]": "-1"},
        f"{ANN}[elasticscaler.io/paused-replicas]",
        {f"{ANN}[elasticscaler.io/paused-replicas]": "0"},
    ),
    # ---- ResourceScalingGroup
    (
        "rsg-endpoint-without-scheme",
        "rsg",
        {"spec.scaleDown.prometheus.endpoint": "prometheus:9090"},
        "spec.scaleDown.prometheus.endpoint",
        {"spec.scaleDown.prometheus.endpoint": "http://prometheus:9090"},
    ),
    (
        "rsg-replicas-per-group-zero",
        "rsg",
        {"spec.members[0].replicasPerGroup": 0},
        "spec.members[0].replicasPerGroup",
        {"spec.members[0].replicasPerGroup": 1},
    ),
    (
        "rsg-duplicate-members",
        "rsg",
        {"spec.members[1].name": "prefill"},
        "spec.members",
        {"spec.members[1].name": "decode"},
    ),
    (
        "rsg-no-members",
        "rsg",
        {"spec.members": []},
        "spec.members",
        {
            "spec.members": [
                {"name": "all", "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"}}
            ]
        },
    ),
    (
        "rsg-unknown-strategy",
        "rsg",
        {"spec.strategy": "Clone"},
        "spec.strategy",
        {"spec.strategy": "GroupReplication"},
    ),
    # ---- LLMScaler
    (
        "llms-custom-without-provider",
        "llmscaler",
        {"spec.metricProvider": "Custom", "spec.customProvider": DELETE},
        "spec.customProvider",
        {"spec.customProvider": {"url": "http://slo:8080/decisions/x"}},
    ),
    (
        "llms-prometheus-endpoint-no-host",
        "llmscaler",
        {"spec.prometheus.endpoint": "https://"},
        "spec.prometheus.endpoint",
        {"spec.prometheus.endpoint": "https://prometheus"},
    ),
    (
        "llms-custom-url-credentials",
        "llmscaler",
        {"spec.customProvider.url": "http://user:secret@slo:8080/decisions/x"},
        "spec.customProvider.url",
        {"spec.customProvider.url": "http://slo:8080/decisions/x"},
    ),
    (
        "llms-min-above-max",
        "llmscaler",
        {"spec.minReplicas": 17},
        "spec.minReplicas",
        {"spec.minReplicas": 16},
    ),
    (
        "llms-target-per-replica-zero",
        "llmscaler",
        {"spec.prometheus.metrics[0].targetPerReplica": 0},
        "spec.prometheus.metrics[0].targetPerReplica",
        {"spec.prometheus.metrics[0].targetPerReplica": 0.5},
    ),
    # ---- LLMSLORequirement
    (
        "llmslo-bound-types-differ",
        "llmslo",
        {"spec.bounds.max.type": "replica"},
        "spec.bounds.max.type",
        {"spec.bounds.min.type": "replica"},
    ),
    (
        "llmslo-pdengine-max-1",
        "llmslo",
        {"spec.bounds.max.value": 1},
        "spec.bounds.max.value",
        {"spec.bounds.max.value": 2},
    ),
    (
        "llmslo-pdengine-needs-pd",
        "llmslo",
        {"spec.deployType": "aggregated"},
        "spec.bounds",
        {"spec.deployType": "pd"},
    ),
    (
        "llmslo-negative-bound",
        "llmslo",
        {"spec.bounds.min.value": -1},
        "spec.bounds.min.value",
        {"spec.bounds.min.value": 0},
    ),
    (
        "llmslo-min-above-max",
        "llmslo",
        {"spec.bounds.min.value": 5},
        "spec.bounds.min.value",
        {"spec.bounds.min.value": 4},
    ),
    # ---- JobSLORequirement
    (
        "jobslo-max-not-replica",
        "jobslo",
        {"spec.bounds.max.type": "concurrency"},
        "spec.bounds.max.type",
        {"spec.bounds.max.type": "replica"},
    ),
    (
        "jobslo-min-pdengine",
        "jobslo",
        {"spec.bounds.min.type": "pdengine"},
        "spec.bounds.min.type",
        {"spec.bounds.min.type": "replica"},
    ),
    (
        "jobslo-queue-missing",
        "jobslo",
        {"spec.queue": DELETE},
        "spec.queue",
        {"spec.queue": {"maxDepth": 10, "promql": "sum(q)"}},
    ),
    (
        "jobslo-min-above-max",
        "jobslo",
        {"spec.bounds.min": {"type": "replica", "value": 5}},
        "spec.bounds.min.value",
        {"spec.bounds.min.value": 4},
    ),
]


# an ElasticScaler following a Tidal (StateTrigger)
_STATE: dict[str, Any] = {
    "spec.targetRef": {"apiVersion": "tidal.io/v1alpha1", "kind": "Tidal", "name": "office-hours"},
    "spec.trigger": {"type": "StateTrigger"}}

# Issue 28 item 6: an annotation value the reconciler replaces by its default is allowed with a warning
# that says what the reconciler's Warning event says. (id, sample, the mistake {path: value}, the key,
# the warning's ending: the default used, the fix {path: value})
WARNED: list[tuple[str, str, dict[str, Any], str, str, dict[str, Any]]] = [
    ("es-ann-window-zero", "elasticscaler", {f"{ANN}[elasticscaler.io/metrics.windowSeconds]": "0"},
     "elasticscaler.io/metrics.windowSeconds", "got '0'; using the default 60",
     {f"{ANN}[elasticscaler.io/metrics.windowSeconds]": "120"}),
    ("es-ann-gc-factor-below-1", "elasticscaler", {f"{ANN}[elasticscaler.io/metrics.gcFactor]": "0.5"},
     "elasticscaler.io/metrics.gcFactor", "got '0.5'; using the default 2",
     {f"{ANN}[elasticscaler.io/metrics.gcFactor]": "1.5"}),
    ("es-ann-aggregation-type", "elasticscaler",
     {f"{ANN}[elasticscaler.io/metrics.aggregationType]": "Median"},
     "elasticscaler.io/metrics.aggregationType", "got 'Median'; using the default Average",
     {f"{ANN}[elasticscaler.io/metrics.aggregationType]": "P50"}),
    ("es-ann-missing-data-policy", "elasticscaler",
     {f"{ANN}[elasticscaler.io/metrics.missingDataPolicy]": "Skip"},
     "elasticscaler.io/metrics.missingDataPolicy", "got 'Skip'; using the default Ignore",
     {f"{ANN}[elasticscaler.io/metrics.missingDataPolicy]": "TreatAsZero"}),
    ("es-ann-outlier-filter", "elasticscaler",
     {f"{ANN}[elasticscaler.io/metrics.enableOutlierFilter]": "yes"},
     "elasticscaler.io/metrics.enableOutlierFilter", "got 'yes'; using the default false",
     {f"{ANN}[elasticscaler.io/metrics.enableOutlierFilter]": "true"}),
    ("es-ann-outlier-threshold", "elasticscaler", {f"{ANN}[elasticscaler.io/metrics.outlierThreshold]": "0"},
     "elasticscaler.io/metrics.outlierThreshold", "got '0'; using the default 3",
     {f"{ANN}[elasticscaler.io/metrics.outlierThreshold]": "2.5"}),
    ("es-ann-stabilization-too-long", "elasticscaler",
     {f"{ANN}[elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds]": "4000"},
     "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds", "got '4000'; using the default 300",
     {f"{ANN}[elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds]": "3600"}),
    # a StateTrigger's default scale-down window is 0: the warning names the default the reconciler uses
    ("es-ann-state-trigger-window", "elasticscaler",
     {**_STATE, f"{ANN}[elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds]": "soon"},
     "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds", "got 'soon'; using the default 0",
     {f"{ANN}[elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds]": "60"}),
    ("es-ann-max-pods-zero", "elasticscaler",
     {f"{ANN}[elasticscaler.io/behavior.scaleUp.maxPodsPerStep]": "0"},
     "elasticscaler.io/behavior.scaleUp.maxPodsPerStep", "got '0'; ignored",
     {f"{ANN}[elasticscaler.io/behavior.scaleUp.maxPodsPerStep]": "1"}),
    ("es-ann-typo", "elasticscaler", {f"{ANN}[elasticscaler.io/metrics.windowSecond]": "30"},
     "elasticscaler.io/metrics.windowSecond", "got '30'; ignored",
     {f"{ANN}[elasticscaler.io/metrics.windowSecond]": DELETE}),
    ("es-paused-not-bool", "elasticscaler", {f"{ANN}[elasticscaler.io/paused]": "yes"},
     "elasticscaler.io/paused", "got 'yes'; using the default false",
     {f"{ANN}[elasticscaler.io/paused]": "true"}),
    # HPA mode reads behavior.* (the companion HPA's behavior) and falls back like any other mode
    ("es-hpa-behavior-bad", "hpa-scaler",
     {f"{ANN}[elasticscaler.io/behavior.scaleUp.stabilizationWindowSeconds]": "-1"},
     "elasticscaler.io/behavior.scaleUp.stabilizationWindowSeconds", "got '-1'; using the default 0",
     {f"{ANN}[elasticscaler.io/behavior.scaleUp.stabilizationWindowSeconds]": "30"}),
    ("llms-paused-bad", "llmscaler", {f"{ANN}[elasticscaler.io/paused]": "True"},
     "elasticscaler.io/paused", "got 'True'; using the default false",
     {f"{ANN}[elasticscaler.io/paused]": "false"}),
    ("llms-paused-replicas-bad", "llmscaler", {f"{ANN}[elasticscaler.io/paused-replicas]": "-3"},
     "elasticscaler.io/paused-replicas", "got '-3'; ignored",
     {f"{ANN}[elasticscaler.io/paused-replicas]": "3"}),
]

def _kind(name: str) -> str:
    return str(SAMPLES[name]["kind"])


def test_table_covers_every_kind() -> None:
    assert len(CASES) >= 25
    assert {_kind(c[1]) for c in CASES} == set(KINDS)
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_valid_samples_allowed(name: str) -> None:
    outcome = validate_object(_kind(name), sample(name))
    assert outcome.errors == []


@pytest.mark.parametrize(
    ("name", "mistake", "path", "fix"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_mistake_denied_and_fix_allowed(
    name: str, mistake: dict[str, Any], path: str, fix: dict[str, Any]
) -> None:
    broken = sample(name, mistake)
    errors = validate_object(_kind(name), broken).errors
    assert errors, "the mistake was not denied"
    assert path in [e.path for e in errors], [str(e) for e in errors]
    assert all(str(e).startswith(f"{e.path}: ") or not e.path for e in errors)
    fixed = sample(name, mistake)
    for fix_path, value in fix.items():
        put(fixed, fix_path, value)
    assert validate_object(_kind(name), fixed).errors == []


def test_warned_table_covers_both_reading_kinds() -> None:
    assert len(WARNED) >= 12 and len({c[0] for c in WARNED}) == len(WARNED)
    assert {_kind(c[1]) for c in WARNED} == {"ElasticScaler", "LLMScaler"}
    assert not {c[0] for c in WARNED} & {c[0] for c in CASES}


@pytest.mark.parametrize(("name", "mistake", "key", "ending", "fix"), [c[1:] for c in WARNED],
                         ids=[c[0] for c in WARNED])
def test_fallback_value_allowed_with_the_reconcilers_warning(
    name: str, mistake: dict[str, Any], key: str, ending: str, fix: dict[str, Any]
) -> None:
    """Allowed; one warning naming the key, the rule, the value and the default, word for word the
    reconciler's InvalidAnnotation event; the fixed object has no warning."""
    broken = sample(name, mistake)
    outcome = validate_object(_kind(name), broken)
    assert outcome.errors == [], [str(e) for e in outcome.errors]
    assert len(outcome.warnings) == 1, outcome.warnings
    warning = outcome.warnings[0]
    assert warning.startswith(f"{ANN}[{key}]: ") and warning.endswith(ending), warning
    assert "must be" in warning or "unknown escaler annotation" in warning
    # the same words as the reconciler's Warning event (ElasticScaler: with its trigger's defaults)
    defaults = defaults_for_trigger(broken["spec"].get("trigger", {}).get("type"))
    policies = _kind(name) == "ElasticScaler"
    _, problems = parse_annotations(broken["metadata"]["annotations"], policies=policies,
                                    defaults=defaults if policies else DEFAULTS)
    assert [p.fallback_message() for p in problems] == [warning]
    fixed = sample(name, mistake)
    for fix_path, value in fix.items():
        put(fixed, fix_path, value)
    assert validate_object(_kind(name), fixed) == Outcome([], [])


@pytest.mark.parametrize("name", ["tidal", "rsg", "llmslo", "jobslo"])
def test_pause_annotation_on_a_kind_that_never_reads_it_is_denied(name: str) -> None:
    """No reconciler falls back from it or reports it: the webhook is the only one to tell."""
    outcome = validate_object(_kind(name), sample(name, {f"{ANN}[elasticscaler.io/paused]": "yes"}))
    assert [str(e) for e in outcome.errors] == [
        f"{ANN}[elasticscaler.io/paused]: must be \"true\" or \"false\", got 'yes'"]
    assert outcome.warnings == [] or all("paused" not in w for w in outcome.warnings)


def test_non_string_annotation_values_are_denied() -> None:
    obj = sample("elasticscaler", {f"{ANN}[elasticscaler.io/metrics.windowSeconds]": 60})
    outcome = validate_object("ElasticScaler", obj)
    assert f"{ANN}[elasticscaler.io/metrics.windowSeconds]" in [e.path for e in outcome.errors]


def test_many_bad_annotations_give_bounded_warnings() -> None:
    """Thirty unknown keys: ten warnings, each at most 256 bytes on one line, and a count of the rest."""
    mistakes = {f"{ANN}[elasticscaler.io/metrics.typo{i:02d}]": "x\n" * 100 for i in range(30)}
    outcome = validate_object("ElasticScaler", sample("elasticscaler", mistakes))
    assert outcome.errors == [] and len(outcome.warnings) == 30
    status, body = review(ROUTES[0], json.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "CREATE", "kind": {
            "group": ROUTES[0].group, "version": ROUTES[0].version, "kind": ROUTES[0].kind},
            "object": sample("elasticscaler", mistakes)}}).encode(), validators()[ROUTES[0]])
    response = body["response"]
    assert status == 200 and response["allowed"] is True
    warnings = response["warnings"]
    assert len(warnings) == MAX_WARNINGS + 1 and warnings[-1] == "and 20 more warnings"
    assert all(len(w.encode()) <= MAX_WARNING_BYTES and w.isprintable() for w in warnings)
    assert warnings[0].startswith(f"{ANN}[elasticscaler.io/metrics.typo00]: unknown escaler annotation")


def test_message_names_rule_and_value() -> None:
    errors = validate_object(
        "Tidal", sample("tidal", {"spec.rules[0].start": "CRON_TZ=Mars/Olympus 0 9 * * *"})
    ).errors
    assert [str(e) for e in errors] == [
        "spec.rules[0].start: rule 'weekday-peak': unknown time zone 'Mars/Olympus' "
        "(an IANA zone such as Asia/Shanghai or UTC)"
    ]
    errors = validate_object(
        "ElasticScaler", sample("elasticscaler", {f"{MT}.scalingAlgorithm": "magic"})
    ).errors
    assert str(errors[0]).startswith(
        "spec.trigger.metricsTrigger.scalingAlgorithm: scaling algorithm 'magic' is not registered"
    )


def test_every_error_reported_at_once() -> None:
    obj = sample(
        "elasticscaler",
        {
            f"{ANN}[elasticscaler.io/metrics.windowSeconds]": "-5",
            f"{ANN}[elasticscaler.io/paused-replicas]": "many",
            f"{MT}.scalingAlgorithm": "magic",
            f"{MT}.metrics[3].externalServer.endpoint": "gopher://x",
        },
    )
    outcome = validate_object("ElasticScaler", obj)
    paths = sorted(e.path for e in outcome.errors)
    assert paths == [
        f"{MT}.metrics[3].externalServer.endpoint",
        f"{MT}.scalingAlgorithm",
    ]
    # the annotations the reconciler falls back on are warnings beside the denials
    assert [w.split(":")[0] for w in outcome.warnings] == [
        f"{ANN}[elasticscaler.io/metrics.windowSeconds]",
        f"{ANN}[elasticscaler.io/paused-replicas]",
    ]


def test_url_pattern_error_replaced_by_specific_one() -> None:
    obj = sample("elasticscaler", {f"{MT}.metrics[3].externalServer.endpoint": "ftp://prom"})
    errors = validate_object("ElasticScaler", obj).errors
    assert [str(e) for e in errors] == [
        f"{MT}.metrics[3].externalServer.endpoint: invalid endpoint URL 'ftp://prom': "
        "scheme 'ftp' is not supported (use http or https)"
    ]


@pytest.fixture
def plugin() -> Iterator[str]:
    register_algorithm("keep-current", lambda ctx: ctx.current_replicas)
    yield "keep-current"
    unregister_algorithm("keep-current")


def test_registered_plugin_allowed_and_its_config_not_checked(plugin: str) -> None:
    obj = sample(
        "elasticscaler", {f"{MT}.scalingAlgorithm": plugin, f"{MT}.algorithmConfig": {"anything": "x"}}
    )
    assert validate_object("ElasticScaler", obj).errors == []


def test_min_replicas_zero_allowed_for_a_state_trigger_denied_for_plain_metrics() -> None:
    """A Tidal may decide 0 (issue 28 item 4): its StateTrigger follower may go there; a MetricsTrigger
    without activation still may not (docs/design.md#beyond-the-seeds)."""
    state = sample("elasticscaler", {
        "spec.targetRef": {"apiVersion": "tidal.io/v1alpha1", "kind": "Tidal", "name": "office-hours"},
        "spec.trigger": {"type": "StateTrigger"}, "spec.minReplicas": 0})
    assert validate_object("ElasticScaler", state).errors == []
    metrics = validate_object("ElasticScaler", sample("elasticscaler", {"spec.minReplicas": 0})).errors
    assert [e.path for e in metrics] == ["spec.minReplicas"], [str(e) for e in metrics]
    assert "SignalTrigger or StateTrigger" in str(metrics[0])


def test_hpa_without_externalserver_allowed() -> None:
    """HPA mode with metrics the HPA reads and behavior.* annotations (which it applies)."""
    assert validate_object("ElasticScaler", sample("hpa-scaler")).errors == []


def test_hpa_mode_refusals_say_why() -> None:
    obj = sample(
        "hpa-scaler",
        {
            f"{ANN}[elasticscaler.io/metrics.gcFactor]": "2",
            f"{MT}.algorithmConfig": {"scaleUpRate": "3"},
        },
    )
    errors = {e.path: e.message for e in validate_object("ElasticScaler", obj).errors}
    assert set(errors) == {f"{ANN}[elasticscaler.io/metrics.gcFactor]", f"{MT}.algorithmConfig"}
    annotation = errors[f"{ANN}[elasticscaler.io/metrics.gcFactor]"]
    assert "no effect with scalingAlgorithm HPA" in annotation and "elasticscaler.io/behavior.*" in annotation
    config = errors[f"{MT}.algorithmConfig"]
    assert config.startswith("algorithmConfig is not allowed with scalingAlgorithm HPA")


def test_metrics_annotations_are_fine_outside_hpa_mode() -> None:
    obj = sample("hpa-scaler", {f"{MT}.scalingAlgorithm": "apa",
                                f"{ANN}[elasticscaler.io/metrics.windowSeconds]": "60"})
    assert validate_object("ElasticScaler", obj).errors == []


@pytest.mark.parametrize("case", MALFORMED, ids=[m.id for m in MALFORMED])
def test_malformed_objects_denied(case: Malformed) -> None:
    """Every object the API server alone refuses (api_cases.MALFORMED) is denied by the webhook too,
    naming the same field."""
    errors = validate_object(case.kind, case.obj()).errors
    assert case.path in [e.path for e in errors], [str(e) for e in errors]


def test_default_algorithm_is_apa_and_its_config_checked() -> None:
    obj = sample("elasticscaler", {f"{MT}.scalingAlgorithm": DELETE, f"{MT}.algorithmConfig.tolerance": "2"})
    errors = validate_object("ElasticScaler", obj).errors
    assert [str(e) for e in errors] == [
        f"{MT}.algorithmConfig[tolerance]: algorithmConfig[tolerance] of apa must be a decimal number >= 0 "
        'and < 1 (the no-change band around the target, e.g. "0.1")'
    ]


@pytest.mark.parametrize(
    ("patterns", "url", "allowed"),
    [
        ("prometheus.monitoring", "http://prometheus.monitoring:9090", True),
        ("prometheus.monitoring", "http://evil.example:9090", False),
        ("*.svc.cluster.local", "https://prom.monitoring.svc.cluster.local", True),
        ("*.svc.cluster.local", "https://svc.cluster.local", False),
        ("", "http://anything:1", True),
    ],
    ids=["exact-match", "exact-mismatch", "wildcard-match", "wildcard-needs-subdomain", "no-list-allows-all"],
)
def test_allowed_endpoint_hosts(patterns: str, url: str, allowed: bool) -> None:
    ctx = CheckContext(parse_host_patterns(patterns))
    obj = sample("elasticscaler", {f"{MT}.metrics[3].externalServer.endpoint": url})
    errors = validate_object("ElasticScaler", obj, ctx).errors
    assert (errors == []) == allowed
    if not allowed:
        assert errors[0].path == f"{MT}.metrics[3].externalServer.endpoint"
        assert "--allowed-endpoint-hosts" in errors[0].message


def test_tidal_missing_labels_is_a_warning_not_a_denial() -> None:
    obj = sample("tidal", {"metadata.labels": DELETE})
    outcome = validate_object("Tidal", obj)
    assert outcome.errors == []
    assert (
        outcome.warnings
        and "elasticscaler.io/name and elasticscaler.io/namespace missing" in outcome.warnings[0]
    )


@pytest.mark.parametrize("obj", [None, [], "spec", 3], ids=["null", "list", "string", "int"])
def test_non_object_denied(obj: Any) -> None:
    errors = validate_object("Tidal", obj).errors
    assert errors and "must be a JSON object" in errors[0].message


def test_wrong_kind_in_object_denied() -> None:
    obj = sample("tidal", {"kind": "ElasticScaler"})
    errors = validate_object("Tidal", obj).errors
    assert errors and "a Tidal has kind 'Tidal'" in str(errors[0])


def test_routes_match_kinds_registry() -> None:
    assert [r.path for r in ROUTES] == [info.webhook_path for info in KINDS.values()]
    assert [r.path for r in ROUTES] == [
        "/validate-elasticscaler-io-v1alpha1-elasticscaler",
        "/validate-tidal-io-v1alpha1-tidal",
        "/validate-autoscaling-openfuyao-com-v1alpha1-resourcescalinggroup",
        "/validate-llm-escaler-io-v1alpha1-llmscaler",
        "/validate-llm-escaler-io-v1alpha1-llmslorequirement",
        "/validate-llm-escaler-io-v1alpha1-jobslorequirement",
    ]


@pytest.mark.parametrize(("url", "error"), [
    ("http://prometheus:9090", None),
    ("http://evil.example:9090", "--allowed-endpoint-hosts"),
    ("http://prometheus:9090?x=1", None),  # the Prometheus provider's rule: a URL, not a base one
    ("http://:9090", "invalid endpoint URL"),
], ids=["allowed", "host-not-allowed", "query-as-prometheus", "no-host"])
def test_a_flow_endpoint_is_checked_as_the_prometheus_providers(url: str, error: str | None) -> None:
    flow = {"engine": "vllm", "selector": 'model_name="llama"', "endpoint": url,
            "capacity": {"prefillTokensPerSecond": 8000, "decodeTokensPerSecond": 1500}}
    obj = sample("llmscaler", {"spec.metricProvider": "Flow", "spec.flow": flow,
                               "spec.customProvider": DELETE})
    outcome = validate_object("LLMScaler", obj, CheckContext(parse_host_patterns("prometheus")))
    errors = [e for e in outcome.errors if e.path == "spec.flow.endpoint"]
    assert [error in e.message for e in errors] == ([] if error is None else [True])
