"""``ParseCache``: one parse per (uid, resourceVersion), and no parsed status kept (issue 10, memory)."""

from __future__ import annotations

from es_fakes import external_metric, metrics_trigger, scaler

from escaler.reconcilers.elasticscaler.parsecache import ParseCache
from escaler.runtime import Request

REQ = Request("default", "es")


def _obj(rv: str) -> dict[str, object]:
    obj = scaler("es", metrics_trigger(external_metric("queue", "10")), namespace="default")
    obj["metadata"]["resourceVersion"] = rv  # type: ignore[index]
    obj["status"] = {"desiredReplicas": 3, "conditions": [
        {"type": "AbleToScale", "status": "True", "reason": "ScaledUp", "message": "m",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    return obj


def test_the_parsed_model_keeps_no_status() -> None:
    parsed = ParseCache().load(REQ, _obj("1"))
    assert parsed.scaler.status is None
    assert parsed.scaler.spec.max_replicas == 10


def test_one_parse_per_resource_version_and_peek_never_parses() -> None:
    cache = ParseCache()
    assert cache.peek(REQ, _obj("1")) is None
    first = cache.load(REQ, _obj("1"))
    assert cache.load(REQ, _obj("1")) is first and cache.peek(REQ, _obj("1")) is first
    assert cache.peek(REQ, _obj("2")) is None, "a new version is left to load"
    assert cache.load(REQ, _obj("2")) is not first
    cache.forget(REQ)
    assert cache.peek(REQ, _obj("2")) is None and len(cache) == 0


def test_two_scalers_share_their_fields_sets_and_default_annotations() -> None:
    cache = ParseCache()
    a = cache.load(REQ, _obj("1"))
    b = cache.load(Request("default", "other"), {**_obj("1"), "metadata": {
        "name": "other", "namespace": "default", "uid": "u2", "resourceVersion": "1"}})
    assert a.scaler.spec.__pydantic_fields_set__ is b.scaler.spec.__pydantic_fields_set__
    assert a.annotations is b.annotations
    assert a.scaler.spec.trigger.__pydantic_extra__ is None


def test_a_shared_parse_dumps_as_a_fresh_parse() -> None:
    from escaler.api.elasticscaler import ElasticScaler

    obj = _obj("1")
    fresh = ElasticScaler.parse({k: v for k, v in obj.items() if k != "status"})
    cached = ParseCache().load(REQ, obj).scaler
    for kwargs in ({}, {"exclude_unset": True}, {"mode": "json", "by_alias": True, "exclude_none": True}):
        assert cached.model_dump(**kwargs) == fresh.model_dump(**kwargs)  # type: ignore[arg-type]
    assert cached == fresh and cached.to_object() == fresh.to_object()
