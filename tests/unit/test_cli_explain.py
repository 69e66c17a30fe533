"""escaler explain: the rendering from a scaler's status and events, and the health verdict."""

from __future__ import annotations

from typing import Any

import pytest

from escaler.cli import explain
from escaler.cli.main import build_parser


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
            {"time": "2026-01-01T00:00:00Z", "from": 2, "to": 4, "reason": "a; b", "boundBy": "scaleUpLimit"}
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
        "4. Step limits",
        "ScaleUpLimit: limited to 6",
        "6. Guard",
        "RolloutInProgress: 3 of 4 replicas ready",
        "deferred since 2026-01-01T00:01:00Z",
        "7. Write",
        "current 4 -> desired 6",
        "2 -> 4 (bound by scaleUpLimit)",
        "ScalingDeferred: holding 4 -> 6",
        "Health: waiting",
    ):
        assert needle in text, needle


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
        ([], "waiting"),
    ],
    ids=[
        "target-missing",
        "no-decision",
        "stabilized",
        "limited-is-informational",
        "conflict",
        "never-synced",
    ],
)
def test_health(conditions: list[dict[str, Any]], verdict: str) -> None:
    assert explain.health(scaler(*conditions))[0] == verdict


def test_registered_in_the_cli() -> None:
    parser, handlers = build_parser()
    args = parser.parse_args(["explain", "-n", "team", "llama", "--kubeconfig", "/nope"])
    assert (args.namespace, args.name, args.kubeconfig) == ("team", "llama", "/nope")
    assert "explain" in handlers


def test_unreadable_kubeconfig_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    parser, handlers = build_parser()
    args = parser.parse_args(["explain", "-n", "team", "llama", "--kubeconfig", "/nope/kubeconfig"])
    assert handlers["explain"](args) == 1
    assert "escaler explain" in capsys.readouterr().err
