"""ElasticScaler (``elasticscaler.io/v1alpha1``): the general scaler, docs/guide/elasticscaler.md.

One trigger per scaler: ``MetricsTrigger`` (an algorithm over metrics, or a companion HPA when
``scalingAlgorithm: HPA``), ``StateTrigger`` (``spec.targetRef`` names a state source whose
``status.desiredReplicas`` is followed) or ``SignalTrigger`` (scale to and from zero on external
signals). Rules, in CEL on the CRD and in Python for ``escaler.api.rules.validate``:

* ``trigger``: ``metricsTrigger`` is present exactly when ``type`` is MetricsTrigger;
  ``stateTrigger``/``signalTrigger`` only with their own type (both may be omitted: neither has
  a required field, and the defaults of ``SignalTrigger`` apply);
* ``minReplicas <= maxReplicas``; ``minReplicas: 0`` only with ``SignalTrigger``, ``StateTrigger``
  (the source decides: a Tidal at 0 takes its target to 0) or a ``MetricsTrigger`` with
  ``activation``;
* each metric carries exactly the sub-configuration named by its ``type``, each target exactly
  the value named by its ``type``, and the target type suits the source (Utilization only for
  Resource, AverageValue for Custom, since a Custom metric is a per-pod average);
* target values are > 0 (``averageUtilization`` by its schema minimum, ``averageValue`` and
  ``value`` by CEL ``quantity()``); a Resource metric is ``cpu`` or ``memory`` (schema enum);
* endpoint URLs name a host, carry no credentials and a port in 1..65535 (``common.url_rule``);
* ``apa``'s ``algorithmConfig``: only ``tolerance`` (a decimal number in [0, 1)), ``scaleUpRate``
  and ``scaleDownRate`` (decimal numbers > 1) — the same rules as ``escaler.scaling.apa``;
* ``scalingAlgorithm: HPA``: no ``algorithmConfig`` (the companion HPA would ignore it) and no
  ExternalServer metric (the HPA cannot read one). Both are ``admission_only`` rules: at
  reconcile time the first is ignored and the second is ``Validated=False/UnsupportedMetric``;
* ``metricsTrigger.activation`` (docs/design.md#beyond-the-seeds): only with an algorithm (not HPA) and at
  least one External or ExternalServer metric (the totals that exist at 0 replicas); ``minReplicas: 0`` is
  allowed for a MetricsTrigger only with ``activation`` set;
* ``fallback`` (docs/design.md#beyond-the-seeds): ``failureThreshold >= 1`` and ``replicas >= 0`` (schema
  minimums), and only on a MetricsTrigger with an algorithm (``trigger.type`` MetricsTrigger,
  ``scalingAlgorithm`` not HPA: the companion HPA does its own scaling);
* ``scaleDown.podDeletionCost`` (docs/design.md#beyond-the-seeds): only with a ``targetRef`` of kind
  Deployment in ``apps`` (the ReplicaSet controller is what reads the annotation) and not with
  ``scalingAlgorithm: HPA`` (escaler must be the one writing the replicas); its ``prometheus.endpoint``
  follows the ExternalServer endpoint rules and ``podLabel`` is a Prometheus label name.
* ``pollIntervalSeconds`` (docs/design.md#beyond-the-seeds, a per-scaler poll interval): only on a
  MetricsTrigger (the only trigger that is polled; a SignalTrigger's pull has its own
  ``signalTrigger.pollIntervalSeconds``);
* ``floorFrom`` (docs/design.md#beyond-the-seeds, a Tidal as a floor): only on a MetricsTrigger with an
  algorithm (not HPA), like ``fallback``: a StateTrigger already follows a Tidal, a SignalTrigger decides on
  activity alone, and the companion HPA scales on its own.

What CEL cannot check stays in the webhook (``escaler.webhook.checks``): that an algorithm is
registered, the ``--allowed-endpoint-hosts`` list, and the annotations. The metric-collection
and behaviour policies of docs/reference/annotations.md are annotations, not spec fields (parsed by
``escaler.scaling.annotations``); in HPA mode only ``elasticscaler.io/behavior.*`` is read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from escaler.api.common import (
    URL_PATTERN,
    KubeModel,
    LabelSelector,
    Quantity,
    TargetRef,
    positive_quantity_rule,
    url_rule,
)
from escaler.api.meta import KubeObject
from escaler.api.rules import Rule, cel_matches
from escaler.api.scaler import (
    DEFAULT_MIN_REPLICAS,
    MAX_POLL_INTERVAL_SECONDS,
    MIN_MAX_RULE,
    Fallback,
    FallbackStatus,
    FloorFrom,
    ScalerSpec,
    ScalerStatus,
    poll_interval_field,
)

__all__ = [
    "APA_CONFIG_KEYS",
    "DEFAULT_EXTERNAL_SERVER_TIMEOUT_SECONDS",
    "DEFAULT_POD_LABEL",
    "DEFAULT_SCALING_ALGORITHM",
    "HPA_ALGORITHM",
    "MAX_EXTERNAL_SERVER_TIMEOUT_SECONDS",
    "MAX_METRICS",
    "MAX_POLL_INTERVAL_SECONDS",
    "RESOURCE_NAMES",
    "WAKE_METRIC_TYPES",
    "Activation",
    "CustomMetricSource",
    "ElasticScaler",
    "ElasticScalerSpec",
    "ElasticScalerStatus",
    "ExternalMetricSource",
    "ExternalServerMetricSource",
    "Fallback",
    "FallbackStatus",
    "MetricIdentifier",
    "MetricSourceType",
    "MetricSpec",
    "MetricTarget",
    "MetricTargetType",
    "MetricsTrigger",
    "PodDeletionCost",
    "PodDeletionCostPrometheus",
    "ResourceMetricSource",
    "ScaleDown",
    "SignalTrigger",
    "StateTrigger",
    "Trigger",
    "TriggerType",
]

DEFAULT_SCALING_ALGORITHM = "apa"
# The reserved algorithm name that delegates to a companion autoscaling/v2 HPA
# (docs/guide/elasticscaler.md#the-triggers).
HPA_ALGORITHM = "HPA"
# apa's algorithmConfig keys (escaler.scaling.apa.CONFIG_KEYS; a unit test keeps them equal)
APA_CONFIG_KEYS = ("tolerance", "scaleUpRate", "scaleDownRate")
# a decimal number as apa reads one (escaler.scaling.strconv.parse_number): "0.1", ".5", "2", "1e3"
DECIMAL_PATTERN = r"^[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]+)?$"
# longest algorithmConfig number accepted (as escaler.scaling.strconv.parse_number)
MAX_DECIMAL_LENGTH = 64
# Bounds of algorithmConfig (entries, value length); they also bound the CEL cost of apa's rules.
MAX_ALGORITHM_CONFIG_ENTRIES = 32
MAX_ALGORITHM_CONFIG_VALUE_LENGTH = 256
# Resource metric names metrics.k8s.io serves per pod
RESOURCE_NAMES = ("cpu", "memory")
DEFAULT_EXTERNAL_SERVER_TIMEOUT_SECONDS = 5
# Longest ExternalServer timeoutSeconds; the manager's outbound client caps every request there too
# (escaler.signals.fetch.MAX_TIMEOUT_SECONDS): a slow endpoint cannot hold a collection for minutes.
MAX_EXTERNAL_SERVER_TIMEOUT_SECONDS = 30
DEFAULT_SIGNAL_POLL_INTERVAL_SECONDS = 10
# scaleDown.podDeletionCost.prometheus.podLabel: the series label naming the pod
DEFAULT_POD_LABEL = "pod"
# a Prometheus label name
LABEL_NAME_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
DEFAULT_SIGNAL_IDLE_TIMEOUT_SECONDS = 600
DEFAULT_SIGNAL_ACTIVATION_REPLICAS = 1
# Upper bound on metrics per scaler; also bounds the CEL cost of the per-metric rules.
MAX_METRICS = 16
# the metric types activation reads: totals that exist while the target has 0 replicas
WAKE_METRIC_TYPES = ("External", "ExternalServer")


class TriggerType(StrEnum):
    METRICS = "MetricsTrigger"
    STATE = "StateTrigger"
    SIGNAL = "SignalTrigger"


class MetricSourceType(StrEnum):
    RESOURCE = "Resource"
    CUSTOM = "Custom"
    EXTERNAL = "External"
    EXTERNAL_SERVER = "ExternalServer"


class MetricTargetType(StrEnum):
    UTILIZATION = "Utilization"
    AVERAGE_VALUE = "AverageValue"
    VALUE = "Value"


def _only_when(field: str, attr: str, type_value: str, what: str = "type") -> Rule:
    """``field`` is present exactly when ``self.<what> == type_value``."""
    return Rule(
        rule=f"(self.{what} == '{type_value}') == has(self.{field})",
        message=f"{field} is required when {what} is {type_value}, and not allowed otherwise",
        check=lambda m: (getattr(m, what) == type_value) == (getattr(m, attr) is not None),
        field_path=f".{field}",
    )


class MetricTarget(KubeModel):
    """The target value of a metric, as in autoscaling/v2 MetricTarget."""

    RULES = (
        _only_when("averageUtilization", "average_utilization", MetricTargetType.UTILIZATION),
        _only_when("averageValue", "average_value", MetricTargetType.AVERAGE_VALUE),
        _only_when("value", "value", MetricTargetType.VALUE),
        positive_quantity_rule("averageValue", "average_value"),
        positive_quantity_rule("value", "value"),
    )

    type: MetricTargetType = Field(
        description="Utilization: average percent of the pods' resource requests (Resource metrics "
        "only). AverageValue: the metric's total divided by the replica count. Value: the metric's "
        "total, compared as is."
    )
    average_utilization: int | None = Field(
        default=None,
        ge=1,
        description="Target average utilization, in percent of requests (type Utilization).",
    )
    average_value: Quantity | None = Field(
        default=None,
        description='Target value per replica, a quantity greater than 0 such as "4" or "500m" (type '
        "AverageValue).",
    )
    value: Quantity | None = Field(
        default=None, description="Target total value, a quantity greater than 0 (type Value)."
    )


class MetricIdentifier(KubeModel):
    """A metric by name, optionally narrowed by a label selector."""

    name: str = Field(min_length=1, max_length=253, description="Name of the metric.")
    selector: LabelSelector | None = Field(
        default=None, description="Narrows the metric's series (passed to the metrics API as its selector)."
    )


class ResourceMetricSource(KubeModel):
    """A resource metric of the target's pods from metrics.k8s.io (requires metrics-server)."""

    RULES = (
        Rule(
            rule="self.target.type != 'Value'",
            message="target.type of a Resource metric is Utilization or AverageValue",
            check=lambda m: m.target.type != MetricTargetType.VALUE,
            field_path=".target.type",
        ),
    )

    name: Literal["cpu", "memory"] = Field(
        description="Resource name: cpu or memory (what metrics.k8s.io reports per pod)."
    )
    target: MetricTarget = Field(description="Target value of the resource metric.")


class CustomMetricSource(KubeModel):
    """A per-pod metric of the target's pods from custom.metrics.k8s.io (requires a metrics adapter)."""

    RULES = (
        Rule(
            rule="self.target.type == 'AverageValue'",
            message="target.type of a Custom metric must be AverageValue (it is a per-pod average)",
            check=lambda m: m.target.type == MetricTargetType.AVERAGE_VALUE,
            field_path=".target.type",
        ),
    )

    metric: MetricIdentifier = Field(description="The metric, e.g. vllm_num_requests_waiting.")
    target: MetricTarget = Field(description="Target average value per pod.")


class ExternalMetricSource(KubeModel):
    """A metric not tied to any Kubernetes object, from external.metrics.k8s.io."""

    RULES = (
        Rule(
            rule="self.target.type != 'Utilization'",
            message="target.type of an External metric is Value or AverageValue",
            check=lambda m: m.target.type != MetricTargetType.UTILIZATION,
            field_path=".target.type",
        ),
    )

    metric: MetricIdentifier = Field(description="The metric and the selector of its series.")
    target: MetricTarget = Field(description="Target total (Value) or per-replica (AverageValue) value.")


class SecretKeyRef(KubeModel):
    """A key of a Secret in the scaler's namespace."""

    name: str = Field(min_length=1, max_length=253, description="Name of the Secret.")
    key: str = Field(min_length=1, max_length=253, description="Key in the Secret's data.")


class ExternalServerMetricSource(KubeModel):
    """An instant query against any Prometheus-compatible HTTP API (GET <endpoint>/api/v1/query).
    Not supported with scalingAlgorithm HPA (Validated=False/UnsupportedMetric)."""

    RULES = (
        Rule(
            rule="self.target.type != 'Utilization'",
            message="target.type of an ExternalServer metric is Value or AverageValue",
            check=lambda m: m.target.type != MetricTargetType.UTILIZATION,
            field_path=".target.type",
        ),
        url_rule("endpoint", "endpoint"),
        Rule(
            rule="!self.endpoint.contains('?') && !self.endpoint.contains('#')",
            message="endpoint must be a base URL without '?' or '#': escaler appends /api/v1/query and the "
            "query (put the PromQL in query)",
            check=lambda m: "?" not in m.endpoint and "#" not in m.endpoint,
            field_path=".endpoint",
        ),
    )

    endpoint: str = Field(
        max_length=2048,
        pattern=URL_PATTERN,
        description="Base URL of the query API, e.g. http://prometheus.monitoring:9090 (no '?' or '#'). "
        "The manager refuses loopback, link-local and cloud metadata addresses unless its "
        "--allow-endpoint-networks re-allows them.",
    )
    query: str = Field(
        min_length=1,
        max_length=4096,
        description="PromQL instant query; its result must be a single number (a scalar or a "
        "one-sample vector), the metric's total over the target.",
    )
    target: MetricTarget = Field(
        description="AverageValue divides the query result by the replica count; Value compares it as is."
    )
    timeout_seconds: int = Field(
        default=DEFAULT_EXTERNAL_SERVER_TIMEOUT_SECONDS,
        ge=1,
        le=MAX_EXTERNAL_SERVER_TIMEOUT_SECONDS,
        description=f"Timeout of one query, in seconds (at most {MAX_EXTERNAL_SERVER_TIMEOUT_SECONDS}): "
        "connect, TLS, request and the whole answer.",
    )
    bearer_token_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Optional Secret key (in the scaler's namespace) whose value is sent as "
        "'Authorization: Bearer <token>' with every query, over https:// only. The Secret must be "
        "labelled elasticscaler.io/bearer-token: \"true\" and annotated elasticscaler.io/bearer-token-hosts "
        "with the endpoint's host (a comma list; *.suffix patterns), and the manager needs get on it.",
    )


class PodDeletionCostPrometheus(KubeModel):
    """A Prometheus instant query giving one value per pod of the target (lower = more idle)."""

    RULES = ExternalServerMetricSource.RULES[1:]  # the endpoint rules, word for word

    endpoint: str = Field(
        max_length=2048,
        pattern=URL_PATTERN,
        description="Base URL of the query API, e.g. http://prometheus.monitoring:9090 (no '?' or '#'); "
        "queried through the manager's outbound client like an ExternalServer metric "
        "(--allowed-endpoint-hosts, --allow-endpoint-networks, the timeout, the body cap).",
    )
    query: str = Field(
        min_length=1,
        max_length=4096,
        description="PromQL instant query returning one sample per pod, labelled with the pod's name "
        "(podLabel), e.g. sum by (pod) (vllm:num_requests_running{namespace=\"llm\"}). Lower values go "
        "first. Pods without a sample are never chosen over a measured pod; several samples for one "
        "pod count as the largest.",
    )
    pod_label: str = Field(
        default=DEFAULT_POD_LABEL,
        min_length=1,
        max_length=128,
        pattern=LABEL_NAME_PATTERN,
        description="The label of each sample that holds the pod name (default pod).",
    )
    timeout_seconds: int = Field(
        default=DEFAULT_EXTERNAL_SERVER_TIMEOUT_SECONDS,
        ge=1,
        le=MAX_EXTERNAL_SERVER_TIMEOUT_SECONDS,
        description=f"Timeout of the query, in seconds (at most {MAX_EXTERNAL_SERVER_TIMEOUT_SECONDS}).",
    )
    bearer_token_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Optional Secret key sent as 'Authorization: Bearer <token>', over https:// only, as "
        "for ExternalServer metrics (the Secret must be labelled elasticscaler.io/bearer-token: \"true\" and "
        "list the endpoint's host in its elasticscaler.io/bearer-token-hosts annotation).",
    )


class PodDeletionCost(KubeModel):
    """Set controller.kubernetes.io/pod-deletion-cost before a scale-down, so idle pods go first."""

    prometheus: PodDeletionCostPrometheus = Field(
        description="Where the per-pod value comes from (lower = more idle = deleted first)."
    )


class ScaleDown(KubeModel):
    """Scale-down policies of an ElasticScaler."""

    pod_deletion_cost: PodDeletionCost | None = Field(
        default=None,
        description="Opt-in: before a Deployment scale-down by k pods is written (never while a guard "
        "or the stabilization window holds it), read a value per pod and give the k Ready pods with "
        "the lowest values the lowest controller.kubernetes.io/pod-deletion-cost (-k..-1), so the "
        "ReplicaSet controller removes them. Only pods whose annotation changes are patched (those k, "
        "and a negative cost left on another pod, which is removed). A failed query or patch never "
        "blocks the scale-down: it goes ahead in the controller's own order and a Warning event "
        "DeletionCostSkipped says why. Needs RBAC patch on pods.",
    )


class MetricSpec(KubeModel):
    """One metric; exactly the sub-configuration named by its type is set."""

    RULES = (
        _only_when("resource", "resource", MetricSourceType.RESOURCE),
        _only_when("custom", "custom", MetricSourceType.CUSTOM),
        _only_when("external", "external", MetricSourceType.EXTERNAL),
        _only_when("externalServer", "external_server", MetricSourceType.EXTERNAL_SERVER),
    )

    type: MetricSourceType = Field(
        description="Resource (metrics.k8s.io), Custom (custom.metrics.k8s.io, per pod), External "
        "(external.metrics.k8s.io) or ExternalServer (a Prometheus-compatible query API)."
    )
    resource: ResourceMetricSource | None = Field(
        default=None, description="The Resource metric (type Resource)."
    )
    custom: CustomMetricSource | None = Field(default=None, description="The Custom metric (type Custom).")
    external: ExternalMetricSource | None = Field(
        default=None, description="The External metric (type External)."
    )
    external_server: ExternalServerMetricSource | None = Field(
        default=None, description="The query and its target (type ExternalServer)."
    )


def _decimal(text: str, ok: Callable[[float], bool]) -> bool:
    """The Python twin of ``v.size() <= 64 && v.matches(DECIMAL) && <ok over double(v)>``; a value
    too large for a double (CEL's ``double()`` fails there) is refused."""
    if len(text) > MAX_DECIMAL_LENGTH or not cel_matches(DECIMAL_PATTERN, text):
        return False
    value = float(text)
    return math.isfinite(value) and ok(value)


def _apa_setting(key: str, cel: str, ok: Callable[[float], bool], what: str) -> Rule:
    """``algorithmConfig[key]``, when ``apa`` runs and the key is set, is a decimal number with ``cel``."""
    v = f"self.algorithmConfig['{key}']"
    return Rule(
        rule=f"self.scalingAlgorithm != 'apa' || !has(self.algorithmConfig) || "
        f"!('{key}' in self.algorithmConfig) || ({v}.size() <= {MAX_DECIMAL_LENGTH} && "
        f"{v}.matches(r'{DECIMAL_PATTERN}') && {cel.format(v=f'double({v})')})",
        message=f"algorithmConfig[{key}] of apa must be {what}",
        check=lambda m: (
            m.scaling_algorithm != DEFAULT_SCALING_ALGORITHM
            or m.algorithm_config is None
            or key not in m.algorithm_config
            or _decimal(m.algorithm_config[key], ok)
        ),
        field_path=f".algorithmConfig['{key}']",
    )


class Activation(KubeModel):
    """Scale to and from zero on the trigger's metrics (KEDA's activationThreshold)."""

    value: Quantity = Field(
        description="The activation threshold, compared with the total of each External and "
        "ExternalServer metric at every poll (the newest reading, not the window's aggregate). The "
        "trigger is active when at least one is strictly greater: from 0 replicas the target wakes "
        "to 1 at once, then scales 1 <-> N on load as usual. When every reading is at or below it, "
        "the recommendation is 0: the target goes to 0 once the scale-down stabilization window "
        "(elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds) has seen only such polls. "
        'A quantity such as "0" (any non-zero load wakes it) or "5".'
    )


# one algorithmConfig value
_ConfigValue = Annotated[str, Field(max_length=MAX_ALGORITHM_CONFIG_VALUE_LENGTH)]
_APA_KEYS_CEL = "[" + ", ".join(f"'{k}'" for k in APA_CONFIG_KEYS) + "]"


class MetricsTrigger(KubeModel):
    """Scale on metrics, with a registered algorithm or a companion HPA."""

    RULES = (
        Rule(
            rule="self.scalingAlgorithm != 'apa' || !has(self.algorithmConfig) || "
            f"self.algorithmConfig.all(k, k in {_APA_KEYS_CEL})",
            message="algorithmConfig of apa takes only tolerance, scaleUpRate and scaleDownRate",
            check=lambda m: (
                m.scaling_algorithm != DEFAULT_SCALING_ALGORITHM
                or m.algorithm_config is None
                or all(k in APA_CONFIG_KEYS for k in m.algorithm_config)
            ),
            field_path=".algorithmConfig",
        ),
        _apa_setting(
            "tolerance",
            "{v} >= 0.0 && {v} < 1.0",
            lambda x: 0 <= x < 1,
            'a decimal number >= 0 and < 1 (the no-change band around the target, e.g. "0.1")',
        ),
        _apa_setting(
            "scaleUpRate",
            "{v} > 1.0",
            lambda x: x > 1,
            'a decimal number > 1 (the most one step may multiply replicas by, e.g. "2.0")',
        ),
        _apa_setting(
            "scaleDownRate",
            "{v} > 1.0",
            lambda x: x > 1,
            'a decimal number > 1 (the most one step may divide replicas by, e.g. "2.0")',
        ),
        Rule(
            rule="self.scalingAlgorithm != 'HPA' || !has(self.algorithmConfig)",
            message="algorithmConfig is not allowed with scalingAlgorithm HPA: the companion HPA "
            "ignores it (HPA mode takes its behavior from the elasticscaler.io/behavior.* "
            "annotations only)",
            check=lambda m: m.scaling_algorithm != HPA_ALGORITHM or m.algorithm_config is None,
            field_path=".algorithmConfig",
            reason="FieldValueForbidden",
            admission_only=True,
        ),
        Rule(
            rule="self.scalingAlgorithm != 'HPA' || self.metrics.all(m, m.type != 'ExternalServer')",
            message="metrics of type ExternalServer are not supported with scalingAlgorithm HPA (the "
            "companion HPA reads only the metrics APIs: UnsupportedMetric); use apa or another "
            "registered algorithm",
            check=lambda m: m.scaling_algorithm != HPA_ALGORITHM
            or all(x.type != MetricSourceType.EXTERNAL_SERVER for x in m.metrics),
            field_path=".metrics",
            admission_only=True,
        ),
        Rule(
            rule="!has(self.activation) || self.scalingAlgorithm != 'HPA'",
            message="activation is not allowed with scalingAlgorithm HPA (the companion HPA scales on "
            "its own); use apa or another registered algorithm",
            check=lambda m: m.activation is None or m.scaling_algorithm != HPA_ALGORITHM,
            field_path=".activation",
            reason="FieldValueForbidden",
        ),
        Rule(
            rule="!has(self.activation) || "
            "self.metrics.exists(m, m.type == 'External' || m.type == 'ExternalServer')",
            message="activation needs at least one metric of type External or ExternalServer: a "
            "Resource or Custom metric is read from the target's pods, and there are none at 0 replicas",
            check=lambda m: m.activation is None or any(str(x.type) in WAKE_METRIC_TYPES for x in m.metrics),
            field_path=".activation",
        ),
    )

    scaling_algorithm: str = Field(
        default=DEFAULT_SCALING_ALGORITHM,
        min_length=1,
        max_length=63,
        pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        description="apa (default): the built-in algorithm, the max over metrics of "
        "ceil(currentReplicas x current/target) outside a tolerance band, rate-limited per step. "
        "HPA: create a companion autoscaling/v2 HorizontalPodAutoscaler named <name>-hpa that does "
        "the scaling; it takes min/max and metrics from this spec and its behavior (stabilization "
        "windows, maxPodsPerStep) from the elasticscaler.io/behavior.* annotations only, so "
        "algorithmConfig, ExternalServer metrics and elasticscaler.io/metrics.* annotations are "
        "refused there. flow (built in too): stateless flow sizing, ceil(work / utilization + backlog) "
        "from metrics named promptTokensRate and generationTokensRate (waiting and requestsRate "
        "optional). Any other value names an algorithm registered in the manager "
        "(Validated=False/AlgorithmNotRegistered otherwise).",
    )
    algorithm_config: dict[str, _ConfigValue] | None = Field(
        default=None,
        max_length=MAX_ALGORITHM_CONFIG_ENTRIES,
        description='Parameters of the algorithm, as strings. apa reads tolerance (default "0.1", '
        'a decimal number >= 0 and < 1), scaleUpRate ("2.0": at most x2 per step) and scaleDownRate '
        '("2.0": at most /2 per step), both > 1, and nothing else. flow reads prefillTokensPerSecond and '
        "decodeTokensPerSecond (one replica's capacity, required), utilization (\"0.85\") and drainSeconds "
        '("60"). Not allowed with HPA.',
    )
    metrics: list[MetricSpec] = Field(
        min_length=1,
        max_length=MAX_METRICS,
        description="The metrics to scale on; the algorithm combines them (apa takes the highest "
        "recommendation). Collection and aggregation are tuned with elasticscaler.io/metrics.* "
        "annotations.",
    )
    activation: Activation | None = Field(
        default=None,
        description="Scale to and from zero on these metrics (not with scalingAlgorithm HPA; needs an "
        "External or ExternalServer metric). Below activation.value the target goes to 0, above it "
        "the target leaves 0; minReplicas 0 is allowed only with it. Without it, a MetricsTrigger "
        "never scales a target up from 0 replicas (ScalingActive=False/ScalingDisabled).",
    )


class StateTrigger(KubeModel):
    """Follow a state source: spec.targetRef names an object whose status.desiredReplicas is the
    decision (a Tidal, or any custom resource). The written target is found by following
    spec.targetRef links from the source (at most 5 hops). The source must carry the labels
    elasticscaler.io/name and elasticscaler.io/namespace naming this scaler. The source's decision is
    followed at once, down as well as up: no scale-down stabilization window unless the annotation
    elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds sets one. minReplicas may be 0, so
    that a source at 0 (a Tidal rule of 0 replicas) takes the target to 0. No fields yet."""


class SignalTrigger(KubeModel):
    """Scale to and from zero on external activity signals, pushed to the manager (POST
    /signal/v1/namespaces/{ns}/elasticscalers/{name} with {"active": true} or {"replicas": n}) or
    pulled from endpoint."""

    RULES = (url_rule("endpoint", "endpoint", optional=True),)

    endpoint: str | None = Field(
        default=None,
        max_length=2048,
        pattern=URL_PATTERN,
        description='Optional pull source: GET returns {"active": bool, "replicas": int (optional)}. '
        "Without it, only pushed signals are used.",
    )
    poll_interval_seconds: int = Field(
        default=DEFAULT_SIGNAL_POLL_INTERVAL_SECONDS,
        ge=1,
        description="Seconds between two polls of endpoint; raised to the manager's --min-poll-interval "
        "(default 5 s) with a PollIntervalClamped Warning.",
    )
    idle_timeout_seconds: int = Field(
        default=DEFAULT_SIGNAL_IDLE_TIMEOUT_SECONDS,
        ge=1,
        description="With no activity for this long, scale to minReplicas (which may be 0).",
    )
    activation_replicas: int = Field(
        default=DEFAULT_SIGNAL_ACTIVATION_REPLICAS,
        ge=1,
        description="Replicas to go to from zero on the first activity signal.",
    )


class Trigger(KubeModel):
    """What drives the decision; exactly one type, and only its sub-configuration."""

    RULES = (
        _only_when("metricsTrigger", "metrics_trigger", TriggerType.METRICS),
        Rule(
            rule="!has(self.stateTrigger) || self.type == 'StateTrigger'",
            message="stateTrigger is only allowed when type is StateTrigger",
            check=lambda m: m.state_trigger is None or m.type == TriggerType.STATE,
            field_path=".stateTrigger",
            reason="FieldValueForbidden",
        ),
        Rule(
            rule="!has(self.signalTrigger) || self.type == 'SignalTrigger'",
            message="signalTrigger is only allowed when type is SignalTrigger",
            check=lambda m: m.signal_trigger is None or m.type == TriggerType.SIGNAL,
            field_path=".signalTrigger",
            reason="FieldValueForbidden",
        ),
    )

    type: TriggerType = Field(
        description="MetricsTrigger: scale on metrics (metricsTrigger required). StateTrigger: "
        "follow the status.desiredReplicas of the object named by spec.targetRef. SignalTrigger: "
        "scale to and from zero on activity signals (signalTrigger optional)."
    )
    metrics_trigger: MetricsTrigger | None = Field(
        default=None, description="Configuration of a MetricsTrigger; required with that type."
    )
    state_trigger: StateTrigger | None = Field(
        default=None, description="Configuration of a StateTrigger (no fields yet); only with that type."
    )
    signal_trigger: SignalTrigger | None = Field(
        default=None,
        description="Configuration of a SignalTrigger; only with that type (defaults apply when omitted).",
    )


# triggers whose decision may be 0 as it is: a signal, a state source (a Tidal at 0); a MetricsTrigger
# needs activation for that
_MAY_DECIDE_ZERO = (TriggerType.SIGNAL, TriggerType.STATE)


# A MetricsTrigger decided by escaler's own algorithm (not the companion HPA): what fallback and
# floorFrom need, as CEL and as its Python twin
_ALGORITHMIC_METRICS_CEL = (
    "(self.trigger.type == 'MetricsTrigger' && has(self.trigger.metricsTrigger) && "
    "self.trigger.metricsTrigger.scalingAlgorithm != 'HPA')"
)


def _algorithmic_metrics(m: ElasticScalerSpec) -> bool:
    mt = m.trigger.metrics_trigger
    return m.trigger.type == TriggerType.METRICS and mt is not None and mt.scaling_algorithm != HPA_ALGORITHM


class ElasticScalerSpec(ScalerSpec):
    """Desired behaviour of an ElasticScaler."""

    RULES = (
        MIN_MAX_RULE,
        Rule(
            rule="self.minReplicas > 0 || self.trigger.type == 'SignalTrigger' || "
            "self.trigger.type == 'StateTrigger' || "
            "(self.trigger.type == 'MetricsTrigger' && has(self.trigger.metricsTrigger) && "
            "has(self.trigger.metricsTrigger.activation))",
            message="minReplicas may be 0 (scale to zero) only with trigger.type SignalTrigger or "
            "StateTrigger, or MetricsTrigger with trigger.metricsTrigger.activation set",
            check=lambda m: m.min_replicas > 0 or m.trigger.type in _MAY_DECIDE_ZERO or (
                m.trigger.type == TriggerType.METRICS and m.trigger.metrics_trigger is not None
                and m.trigger.metrics_trigger.activation is not None),
            field_path=".minReplicas",
        ),
        Rule(
            rule=f"!has(self.fallback) || {_ALGORITHMIC_METRICS_CEL}",
            message="fallback is only allowed with trigger.type MetricsTrigger and a scalingAlgorithm "
            "other than HPA (a State or Signal trigger has no metrics to lose; the companion HPA "
            "scales on its own)",
            check=lambda m: m.fallback is None or _algorithmic_metrics(m),
            field_path=".fallback",
            reason="FieldValueForbidden",
        ),
        Rule(
            rule="!has(self.pollIntervalSeconds) || self.trigger.type == 'MetricsTrigger'",
            message="pollIntervalSeconds is only allowed with trigger.type MetricsTrigger (only metrics "
            "are polled; a SignalTrigger's pull interval is trigger.signalTrigger.pollIntervalSeconds)",
            check=lambda m: m.poll_interval_seconds is None or m.trigger.type == TriggerType.METRICS,
            field_path=".pollIntervalSeconds",
            reason="FieldValueForbidden",
        ),
        Rule(
            rule=f"!has(self.floorFrom) || {_ALGORITHMIC_METRICS_CEL}",
            message="floorFrom is only allowed with trigger.type MetricsTrigger and a scalingAlgorithm "
            "other than HPA (a StateTrigger follows a Tidal already; the companion HPA scales on its own)",
            check=lambda m: m.floor_from is None or _algorithmic_metrics(m),
            field_path=".floorFrom",
            reason="FieldValueForbidden",
        ),
        Rule(
            rule="!has(self.scaleDown) || !has(self.scaleDown.podDeletionCost) || "
            "(self.targetRef.kind == 'Deployment' && self.targetRef.apiVersion.startsWith('apps/') && "
            "!(self.trigger.type == 'MetricsTrigger' && has(self.trigger.metricsTrigger) && "
            "self.trigger.metricsTrigger.scalingAlgorithm == 'HPA'))",
            message="scaleDown.podDeletionCost needs a targetRef of kind Deployment (apiVersion apps/v1) "
            "and a scalingAlgorithm other than HPA: the ReplicaSet controller is what reads the "
            "annotation, and escaler must be the one writing the replicas",
            check=lambda m: m.scale_down is None or m.scale_down.pod_deletion_cost is None or (
                m.target_ref.kind == "Deployment" and m.target_ref.api_version.startswith("apps/")
                and not (m.trigger.type == TriggerType.METRICS and m.trigger.metrics_trigger is not None
                         and m.trigger.metrics_trigger.scaling_algorithm == HPA_ALGORITHM)),
            field_path=".scaleDown.podDeletionCost",
            reason="FieldValueForbidden",
        ),
    )

    target_ref: TargetRef = Field(
        description="The workload to scale (anything with a /scale subresource or spec.replicas: "
        "Deployment, StatefulSet, LeaderWorkerSet, ResourceScalingGroup, ...). With StateTrigger, "
        "the state source instead (e.g. a Tidal), whose own spec.targetRef chain leads to the "
        "workload. A workload is managed by at most one escaler scaler (Validated=False/TargetConflict)."
    )
    min_replicas: int = Field(
        default=DEFAULT_MIN_REPLICAS,
        ge=0,
        description="Lower bound of the replica count. 0 (scale to zero) only with SignalTrigger, "
        "StateTrigger (a source at 0, e.g. a Tidal rule of 0 replicas, takes the target to 0), or "
        "MetricsTrigger with metricsTrigger.activation.",
    )
    trigger: Trigger = Field(description="What drives the decision.")
    fallback: Fallback | None = Field(
        default=None,
        description="MetricsTrigger only (not with scalingAlgorithm HPA): after failureThreshold "
        "consecutive metric polls without a usable signal, scale to replicas instead of holding the "
        "current count (ScalingActive stays False/DecisionUnavailable and its message names the "
        "fallback). Without it, a scaler whose metrics all fail holds its count.",
    )
    poll_interval_seconds: int | None = poll_interval_field(
        "metric polls", "MetricsTrigger only (a SignalTrigger's pull interval is "
        "trigger.signalTrigger.pollIntervalSeconds). ")
    floor_from: FloorFrom | None = Field(
        default=None,
        description="MetricsTrigger only (not with scalingAlgorithm HPA): a Tidal in this namespace whose "
        "schedule is a lower bound under the metric scaling (a calendar floor: office hours, a launch, "
        "minus holidays with excludeDates). See floorFrom.name for how the floor is applied.",
    )
    scale_down: ScaleDown | None = Field(
        default=None,
        description="Scale-down policies: which pods leave (podDeletionCost).",
    )


class ElasticScalerStatus(ScalerStatus):
    """Observed state of an ElasticScaler (HPA v2 model)."""

    hpa_name: str | None = Field(
        default=None,
        max_length=253,
        description="Name of the companion HorizontalPodAutoscaler (scalingAlgorithm HPA), whose "
        "replicas and conditions this status mirrors.",
    )
    resolved_target_ref: TargetRef | None = Field(
        default=None,
        description="The workload replicas are written to: spec.targetRef, or for StateTrigger the "
        "end of the targetRef chain from the state source.",
    )
    fallback: FallbackStatus | None = Field(
        default=None,
        description="Set while metric polls fail with spec.fallback set: how many in a row, and since "
        "when; cleared by a poll with a usable signal.",
    )


class ElasticScaler(KubeObject):
    """Scales a workload on metrics, on a state source (e.g. a Tidal) or on activity signals."""

    API_VERSION = "elasticscaler.io/v1alpha1"
    KIND = "ElasticScaler"

    spec: ElasticScalerSpec = Field(description="Desired behaviour.")
    status: ElasticScalerStatus | None = Field(
        default=None, description="Observed state, written by the controller."
    )
