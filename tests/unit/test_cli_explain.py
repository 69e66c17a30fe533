"""escaler explain: the rendering from a scaler's status and events (every pipeline step, the
algorithm's rate cap as its own step, BoundBy values), and the health verdict."""

from __future__ import annotations

from typing import Any

import pytest

from escaler.cli import explain


def cond(t: str, status: str, reason: str, message: str = "m") -> dict[str, Any]:
    return {
        "type": t,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 1,
    }


def scaler(*conditions: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "elasticscaler.io/v1alpha1",
        "kind": "ElasticScaler",
        "metadata": {"name": "llama", "namespace": "team", "generation": 1},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"},
            "minReplicas": 1,
            "maxReplicas": 8,
            "trigger": {"type": "MetricsTrigger", "metricsTrigger": {"metrics": []}},
        },
        "status": {"observedGeneration": 1, "conditions": list(conditions), **status},
    }


def test_render_step_by_step() -> None:
    obj = scaler(
        cond("ScalingActive", "True", "MetricsAvailable", "evaluated 1 of 1 metrics; recommends 7 replicas"),
        cond("AbleToScale", "True", "RolloutInProgress", "3 of 4 replicas ready"),
        cond("ScalingLimited", "True", "ScaleUpLimit", "limited to 6"),
        cond("Validated", "True", "Valid", "the spec is valid"),
        currentReplicas=4,
        desiredReplicas=6,
        deferredSince="2026-01-01T00:01:00Z",
        currentMetrics=[
            {
                "name": "queue",
                "type": "External",
                "value": 70.0,
                "target": 10.0,
                "targetType": "Value",
                "recommendedReplicas": 7,
            }
        ],
        recentDecisions=[
            {"time": "2026-01-01T00:00:00Z", "from": 2, "to": 4, "reason": "a; b", "boundBy": "StepLimit"}
        ],
    )
    events = [
        {
            "type": "Normal",
            "reason": "ScalingDeferred",
            "note": "holding 4 -> 6",
            "eventTime": "2026-01-01T00:01:00.000000Z",
        }
    ]
    text = explain.render(obj, events)
    for needle in (
        "ElasticScaler team/llama",
        "1. Inputs",
        "queue: value 70 vs target 10 (Value) -> recommends 7",
        "2. Recommendation",
        "recommends 7 replicas",
        "4. Rate limit (the algorithm's own)\n   the algorithm's rate cap did not bind the count",
        "5. Step limits\n   ScaleUpLimit: limited to 6",
        "7. Guard\n   RolloutInProgress: 3 of 4 replicas ready",
        "deferred since 2026-01-01T00:01:00Z",
        "8. Write",
        "current 4 -> desired 6",
        "2 -> 4 (bound by StepLimit)",
        "[StepLimit]",
        "ScalingDeferred: holding 4 -> 6",
        "Health: waiting",
    ):
        assert needle in text, needle


def test_render_shows_the_algorithm_rate_cap_as_its_own_step() -> None:
    obj = scaler(
        cond("ScalingActive", "True", "MetricsAvailable", "evaluated 1 of 1 metrics; recommends 12 replicas"),
        cond("AbleToScale", "True", "Synced", "scaled the target from 4 to 8"),
        cond("ScalingLimited", "True", "ScaleUpLimit", "the desired replica count is increasing faster than "
                                                       "the algorithm's scale-up rate; capped from 12 to 8"),
        currentReplicas=8,
        desiredReplicas=8,
        recentDecisions=[{"time": "2026-01-01T00:00:00Z", "from": 4, "to": 8, "boundBy": "RateLimit",
                          "reason": "evaluated 1 of 1 metrics; recommends 12 replicas; capped to 8 by the "
                                    "algorithm's scale-up rate (recommended 12)"}],
    )
    text = explain.render(obj)
    assert ("4. Rate limit (the algorithm's own)\n   ScaleUpLimit: the desired replica count is increasing "
            "faster than the algorithm's scale-up rate; capped from 12 to 8\n") in text
    # the same ScalingLimited reason is not shown again as a step limit
    assert "5. Step limits\n   no step limit bound the count\n" in text
    assert "4 -> 8 (bound by RateLimit)" in text
    assert "capped to 8 by the algorithm's scale-up rate (recommended 12)" in text


def test_render_reports_unschedulable_pods_under_guard() -> None:
    message = "2 pods of the target Pending as Unschedulable: 0/3 nodes are available: 3 Insufficient gpu."
    obj = scaler(cond("ScalingActive", "True", "MetricsAvailable"),
                 cond("AbleToScale", "True", "InsufficientCapacity", message))
    text = explain.render(obj)
    assert f"7. Guard\n   InsufficientCapacity: {message}\n" in text
    assert f"Health: waiting (AbleToScale=True/InsufficientCapacity: {message})" in text


@pytest.mark.parametrize(
    ("conditions", "verdict"),
    [
        (
            [
                cond("AbleToScale", "False", "TargetNotFound"),
                cond("ScalingActive", "True", "MetricsAvailable"),
            ],
            "failing",
        ),
        (
            [cond("AbleToScale", "True", "Synced"), cond("ScalingActive", "False", "DecisionUnavailable")],
            "failing",
        ),
        (
            [
                cond("AbleToScale", "True", "ScaleDownStabilized"),
                cond("ScalingActive", "True", "MetricsAvailable"),
            ],
            "waiting",
        ),
        (
            [
                cond("AbleToScale", "True", "Synced"),
                cond("ScalingActive", "True", "MetricsAvailable"),
                cond("ScalingLimited", "True", "TooManyReplicas"),
            ],
            "ok",
        ),
        ([cond("Validated", "False", "TargetConflict")], "failing"),
        ([cond("AbleToScale", "True", "InsufficientCapacity")], "waiting"),
        ([cond("ScalingActive", "False", "Advisory")], "failing"),
        ([], "waiting"),
    ],
    ids=[
        "target-missing",
        "no-decision",
        "stabilized",
        "limited-is-informational",
        "conflict",
        "unschedulable",
        "advisory-hpa-computes-nothing",
        "never-synced",
    ],
)
def test_health(conditions: list[dict[str, Any]], verdict: str) -> None:
    assert explain.health(scaler(*conditions))[0] == verdict


def test_registered_in_the_cli() -> None:
    from escaler.cli.main import build_parser  # imports the manager; only these tests need it

    parser, handlers = build_parser()
    args = parser.parse_args(["explain", "-n", "team", "llama", "--kubeconfig", "/nope"])
    assert (args.namespace, args.name, args.kubeconfig) == ("team", "llama", "/nope")
    assert "explain" in handlers


def test_unreadable_kubeconfig_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    from escaler.cli.main import build_parser

    parser, handlers = build_parser()
    args = parser.parse_args(["explain", "-n", "team", "llama", "--kubeconfig", "/nope/kubeconfig"])
    assert handlers["explain"](args) == 1
    assert "escaler explain" in capsys.readouterr().err


def test_render_shows_the_values_as_of_the_last_status_write_and_the_live_series() -> None:
    obj = scaler(cond("ScalingActive", "True", "MetricsAvailable"),
                 currentMetrics=[{"name": "queue", "type": "External", "value": 41.5, "target": 10.0,
                                  "targetType": "Value", "recommendedReplicas": 4}])
    obj["metadata"]["managedFields"] = [
        {"manager": "escaler", "subresource": "status", "time": "2026-01-01T00:05:00Z"},
        {"manager": "escaler", "subresource": "status", "time": "2026-01-01T00:10:00Z"},
        {"manager": "kubectl", "time": "2026-01-01T00:20:00Z"},
    ]
    out = explain.render(obj)
    assert "value 41.5 vs target 10 (Value) -> recommends 4" in out
    assert "values as of 2026-01-01T00:10:00Z" in out
    assert 'escaler_scaler_metric_value{namespace="team",name="llama"}' in out
    assert "rewritten when it moves beyond the algorithm's tolerance" in out
    del obj["metadata"]["managedFields"]
    assert "values as of the last status write" in explain.render(obj)


@pytest.mark.parametrize(("fallback", "status", "line"), [
    (None, None, "   not set: while every metric fails, the current count is held"),
    ({"failureThreshold": 3, "replicas": 5}, None,
     "   not engaged: the last metric poll had a usable signal"),
    ({"failureThreshold": 3, "replicas": 5}, {"failures": 2, "since": "2026-01-01T00:01:00Z"},
     "   counting: 2 of 3 consecutive metric polls without a usable signal since 2026-01-01T00:01:00Z; the "
     "current count is held until 3"),
    ({"failureThreshold": 3, "replicas": 5}, {"failures": 3, "since": "2026-01-01T00:01:00Z"},
     "   ENGAGED: 3 consecutive metric polls without a usable signal since 2026-01-01T00:01:00Z: 5 replicas "
     "is the recommendation; stabilization, step limits, the clamp and the guards below apply"),
], ids=["not-set", "not-engaged", "counting", "engaged"])
def test_render_shows_the_fallback_step(fallback: dict[str, int] | None, status: dict[str, Any] | None,
                                        line: str) -> None:
    obj = scaler(cond("ScalingActive", "False", "DecisionUnavailable", "metrics: queue: HTTP 503"),
                 **({"fallback": status} if status else {}))
    if fallback is not None:
        obj["spec"]["fallback"] = fallback
    text = explain.render(obj)
    head = "2b. Fallback (spec.fallback)" + (
        "" if fallback is None else ": 5 replicas after 3 consecutive metric polls without a usable signal")
    assert "2. Recommendation\n   ScalingActive=False" in text
    assert f"\n{head}\n{line}\n2c. Activation" in text


def test_render_has_no_fallback_step_off_a_metrics_trigger() -> None:
    obj = scaler(cond("ScalingActive", "True", "DecisionReceived", "received a decision"))
    obj["spec"]["trigger"] = {"type": "StateTrigger"}
    assert "2b. Fallback" not in explain.render(obj)


@pytest.mark.parametrize(("activation", "active", "line"), [
    (None, cond("ScalingActive", "True", "MetricsAvailable", "evaluated 1 of 1 metrics; recommends 2"),
     "   not set: the target is never scaled up from 0 replicas by this trigger"),
    ({"value": "5"}, cond("ScalingActive", "True", "MetricsAvailable",
                          "evaluated 1 of 1 metrics; recommends 0 replicas (the target has 0 replicas: only "
                          "activation is read); below activation (q 0; activation.value 5): the target goes "
                          "to 0"),
     "   below activation (q 0; activation.value 5): the target goes to 0"),
    ({"value": "5"}, cond("ScalingActive", "True", "MetricsAvailable",
                          "evaluated 1 of 1 metrics; recommends 3 replicas; above activation (q 30; "
                          "activation.value 5): active"),
     "   above activation (q 30; activation.value 5): active"),
    ({"value": "5"}, cond("ScalingActive", "False", "DecisionUnavailable", "metrics: q: HTTP 503"),
     "   no verdict this sync (no usable metric: the count is held, or the fallback applies)"),
], ids=["not-set", "below", "above", "no-metrics"])
def test_render_shows_the_activation_step(activation: dict[str, str] | None, active: dict[str, Any],
                                          line: str) -> None:
    obj = scaler(active)
    if activation is not None:
        obj["spec"]["trigger"]["metricsTrigger"]["activation"] = activation
    head = "2c. Activation (metricsTrigger.activation)" + ("" if activation is None else ": value 5")
    assert f"\n{head}\n{line}\n2d. Floor (spec.floorFrom)\n" in explain.render(obj)


def test_render_an_llmscaler_flow_step_by_step() -> None:
    """metricProvider Flow: the signals read under 1, the flow's figures in the order of its steps
    under 1b, and its steps in words from the last decision's reason under 8."""
    reason = ("evaluated 4 of 4 metrics; recommends 5 replicas (work: 16000 prompt tok/s / 8000 + 3000 "
              "generated tok/s / 1500 = 4.000 replicas at 100 %; utilisation target 0.80 (no latency "
              "reading: unchanged); flow need: ceil(4.000 / 0.80 + 0.000) = 5; need: 5 + 0 headroom = 5; "
              "up at once: 2 -> 5 (starting replicas count as capacity))")
    figures = {"work": 4.0, "backlog": 0.0, "planned": 4.0, "utilization": 0.8, "headroom": 0.0, "need": 5.0}
    obj = scaler(
        cond("ScalingActive", "True", "MetricsAvailable", "evaluated 4 of 4 metrics; recommends 5 replicas"),
        cond("AbleToScale", "True", "Synced", "ok"),
        currentReplicas=5,
        desiredReplicas=5,
        currentMetrics=[
            {"name": "promptTokensRate", "type": "Flow", "value": 16000.0},
            {"name": "waiting", "type": "Flow", "error": "HTTP 503, 12 bytes"},
            *({"name": k, "type": "FlowDecision", "value": v} for k, v in figures.items()),
        ],
        recentDecisions=[{"time": "2026-01-01T00:00:00Z", "from": 2, "to": 5, "reason": reason}],
    )
    obj["apiVersion"], obj["kind"] = "llm.escaler.io/v1alpha1", "LLMScaler"
    obj["spec"] = {**obj["spec"], "metricProvider": "Flow",
                   "flow": {"engine": "vllm", "capacity": {"prefillTokensPerSecond": 8000,
                                                           "decodeTokensPerSecond": 1500}}}
    del obj["spec"]["trigger"]
    text = explain.render(obj)
    assert "provider Flow" in text
    assert "   - Flow promptTokensRate: value 16000\n   - Flow waiting: ERROR HTTP 503, 12 bytes\n" in text
    assert ("1b. Flow sizing (spec.flow: engine vllm, one replica 8000 prompt tok/s prefilled, 1500 tok/s "
            "decoded)") in text
    block = text[text.index("1b. Flow sizing"):text.index("2. Recommendation")]
    assert [line.split()[0] for line in block.splitlines()[1:7]] == list(figures)
    assert "   need 5: ceil(planned / utilization + backlog)" in block
    assert "FlowDecision" not in text
    for step in ("work: 16000 prompt tok/s", "flow need: ceil(4.000 / 0.80 + 0.000) = 5",
                 "need: 5 + 0 headroom = 5"):
        assert f"\n     {step}" in text or f"({step}" in text


def test_render_an_llmscaler_flow_before_its_first_decision() -> None:
    obj = scaler(cond("ScalingActive", "False", "DecisionUnavailable", "Flow http://p:9090: waiting: x"),
                 currentMetrics=[{"name": "waiting", "type": "Flow", "error": "x"}])
    obj["kind"] = "LLMScaler"
    obj["spec"] = {**obj["spec"], "metricProvider": "Flow", "flow": {"engine": "sglang"}}
    text = explain.render(obj)
    assert "   no flow decision yet (every configured signal must be read: see 1. Inputs)" in text
