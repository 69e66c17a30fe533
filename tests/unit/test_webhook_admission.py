"""The AdmissionReview protocol (docs/install.md#the-admission-webhook): allowed/denied answers, DELETE,
malformed bodies, wrong
kinds, UPDATE ratcheting, and a property test that the handler answers every request."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webhook_samples import SAMPLES, review_body, sample

from escaler.api.rules import FieldError
from escaler.webhook.admission import MAX_CAUSES, Outcome, Route, review
from escaler.webhook.validation import ROUTES, validators

VALIDATORS = validators()
ROUTE_OF = {r.kind: r for r in ROUTES}
ES = ROUTE_OF["ElasticScaler"]


def call(route: Route, body: bytes) -> tuple[int, dict[str, Any]]:
    return review(route, body, VALIDATORS[route])


def response(route: Route, body: bytes) -> dict[str, Any]:
    status, doc = call(route, body)
    assert status == 200, doc
    assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
    resp: dict[str, Any] = doc["response"]
    return resp


def test_valid_create_allowed_and_uid_echoed() -> None:
    resp = response(ES, review_body(sample("elasticscaler"), uid="abc-123"))
    assert resp == {"uid": "abc-123", "allowed": True}


def test_invalid_create_denied_with_422_and_causes() -> None:
    obj = sample("elasticscaler", {"spec.minReplicas": 11})
    resp = response(ES, review_body(obj))
    assert resp["allowed"] is False
    status = resp["status"]
    assert status["code"] == 422 and status["reason"] == "Invalid" and status["status"] == "Failure"
    assert status["message"] == (
        'ElasticScaler "llama-decode" is invalid: spec.minReplicas: '
        "minReplicas must be less than or equal to maxReplicas"
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.minReplicas",
            "message": "minReplicas must be less than or equal to maxReplicas",
        }
    ]
    assert status["details"]["kind"] == "ElasticScaler" and status["details"]["group"] == "elasticscaler.io"


def test_every_error_joined_in_message() -> None:
    obj = sample(
        "elasticscaler", {"spec.minReplicas": 11, "spec.trigger.metricsTrigger.scalingAlgorithm": "x"}
    )
    message = response(ES, review_body(obj))["status"]["message"]
    assert "spec.minReplicas: " in message and "; spec.trigger.metricsTrigger.scalingAlgorithm: " in message


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_kind_allowed_on_its_route(name: str) -> None:
    obj = sample(name)
    assert response(ROUTE_OF[obj["kind"]], review_body(obj))["allowed"] is True


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_allowed_unread(operation: str) -> None:
    broken = sample("elasticscaler", {"spec.minReplicas": 11})
    assert response(ES, review_body(broken, operation=operation))["allowed"] is True


def test_unknown_operation_denied() -> None:
    resp = response(ES, review_body(sample("elasticscaler"), operation="PATCH"))
    assert resp["allowed"] is False and "unsupported operation 'PATCH'" in resp["status"]["message"]


MALFORMED: list[tuple[str, bytes]] = [
    ("not-json", b"{nope"),
    ("empty", b""),
    ("not-utf8", b"\xff\xfe\x00"),
    ("json-list", b"[]"),
    ("json-string", b'"AdmissionReview"'),
    ("deeply-nested", b"[" * 100_000 + b"]" * 100_000),
    (
        "v1beta1",
        json.dumps(
            {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "1"}}
        ).encode(),
    ),
    ("other-kind", json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "Status"}).encode()),
    ("no-request", json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode()),
    (
        "request-not-object",
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": [1]}).encode(),
    ),
    (
        "no-uid",
        json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"operation": "CREATE"},
            }
        ).encode(),
    ),
    (
        "uid-not-string",
        json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}
        ).encode(),
    ),
]


@pytest.mark.parametrize("body", [c[1] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_body_is_400(body: bytes) -> None:
    status, doc = call(ES, body)
    assert status == 400
    assert isinstance(doc["error"], str) and doc["error"]


def test_wrong_kind_denied() -> None:
    tidal = sample("tidal")
    resp = response(ES, review_body(tidal))
    assert resp["allowed"] is False
    assert resp["status"]["message"].startswith(
        "this webhook (/validate-elasticscaler-io-v1alpha1-elasticscaler) validates ElasticScaler "
        "(elasticscaler.io/v1alpha1); the request is for Tidal (tidal.io/v1alpha1)"
    )


def test_request_without_kind_denied() -> None:
    body = review_body(sample("elasticscaler"), kind={"version": "v1alpha1"})  # type: ignore[typeddict-item]
    resp = response(ES, body)
    assert resp["allowed"] is False and "an unknown kind" in resp["status"]["message"]


def test_object_not_a_map_denied() -> None:
    body = review_body(
        [1, 2], kind={"group": "elasticscaler.io", "version": "v1alpha1", "kind": "ElasticScaler"}
    )
    resp = response(ES, body)
    assert resp["allowed"] is False and "request.object: must be an object" in resp["status"]["message"]


def test_update_validates_the_new_object() -> None:
    old = sample("elasticscaler")
    new = sample("elasticscaler", {"spec.minReplicas": 11})
    assert response(ES, review_body(new, operation="UPDATE", old=old))["allowed"] is False


def test_update_leaving_spec_unchanged_is_allowed() -> None:
    # an object stored before a rule existed can still get finalizers removed and be deleted
    legacy = sample("elasticscaler", {"spec.trigger.metricsTrigger.scalingAlgorithm": "retired"})
    new = copy.deepcopy(legacy)
    new["metadata"]["finalizers"] = []
    assert response(ES, review_body(new, operation="UPDATE", old=legacy))["allowed"] is True


def test_update_of_object_being_deleted_is_allowed() -> None:
    legacy = sample("elasticscaler", {"spec.minReplicas": 11})
    new = sample(
        "elasticscaler", {"spec.minReplicas": 12, "metadata.deletionTimestamp": "2025-01-01T00:00:00Z"}
    )
    assert response(ES, review_body(new, operation="UPDATE", old=legacy))["allowed"] is True


def test_warnings_returned() -> None:
    tidal = sample("tidal")
    del tidal["metadata"]["labels"]
    resp = response(ROUTE_OF["Tidal"], review_body(tidal))
    assert resp["allowed"] is True and "MissingRequiredLabels" in resp["warnings"][0]


def test_causes_capped() -> None:
    errors = [FieldError(f"spec.x[{i}]", "bad") for i in range(MAX_CAUSES + 7)]
    _, doc = review(ES, review_body(sample("elasticscaler")), lambda obj: Outcome(errors))
    status = doc["response"]["status"]
    assert len(status["details"]["causes"]) == MAX_CAUSES
    assert status["message"].endswith("; and 7 more")


def test_validator_bug_denied_not_raised() -> None:
    def boom(obj: Any) -> Outcome:
        raise RuntimeError("bug")

    status, doc = review(ES, review_body(sample("elasticscaler")), boom)
    assert status == 200
    assert doc["response"]["allowed"] is False and doc["response"]["status"]["code"] == 500


# ---------------------------------------------------------------- property tests

FIELD_NAMES = sorted(
    {
        key
        for obj in SAMPLES.values()
        for key in json.dumps(obj).replace('"', " ").split()
        if key.isidentifier()
    }
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(
        [
            "CRON_TZ=UTC 0 9 * * *",
            "http://x:9090",
            "apa",
            "HPA",
            "Resource",
            "ExternalServer",
            "pdengine",
            "0",
            "-1",
            "1e9",
        ]
    )
)
keys = st.sampled_from(FIELD_NAMES) | st.text(max_size=12)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=25,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _mutate(obj: dict[str, Any], path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not path:
        return value
    cur: Any = obj
    for seg in path[:-1]:
        cur = cur[seg]
    if delete:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return obj


def _check_answer(route: Route, obj: Any) -> None:
    status, doc = call(
        route, review_body(obj, kind={"group": route.group, "version": route.version, "kind": route.kind})
    )
    assert status == 200
    resp = doc["response"]
    assert isinstance(resp["allowed"], bool)
    if not resp["allowed"]:
        assert resp["status"]["code"] == 422, resp["status"]
        assert resp["status"]["message"]
    json.dumps(doc, allow_nan=False)  # the answer is always plain JSON


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(route=st.sampled_from(ROUTES), obj=json_values)
def test_random_objects_always_answered(route: Route, obj: Any) -> None:
    _check_answer(route, obj)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(SAMPLES)), value=json_values, delete=st.booleans())
def test_mutated_samples_always_answered(data: st.DataObject, name: str, value: Any, delete: bool) -> None:
    obj = sample(name)
    path = data.draw(st.sampled_from(_paths(obj)), label="path")
    mutated = _mutate(obj, path, value, delete and bool(path) and not isinstance(path[-1], int))
    _check_answer(ROUTE_OF[SAMPLES[name]["kind"]], mutated)


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_random_bodies_always_answered(body: bytes) -> None:
    status, _doc = call(ES, body)
    assert status in (200, 400)
