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


def _named(name: str, rv: str, trigger: dict[str, object]) -> dict[str, object]:
    obj = scaler(name, trigger, namespace="default")
    obj["metadata"]["resourceVersion"] = rv  # type: ignore[index]
    obj["metadata"]["uid"] = f"uid-{name}"  # type: ignore[index]
    obj["spec"]["targetRef"]["name"] = f"w-{name}"  # type: ignore[index]
    return obj


def test_scalers_with_equal_triggers_share_one_parsed_trigger() -> None:
    cache = ParseCache()
    a = cache.load(Request("default", "a"), _named("a", "1", metrics_trigger(external_metric("queue", "10"))))
    b = cache.load(Request("default", "b"), _named("b", "7", metrics_trigger(external_metric("queue", "10"))))
    assert a.scaler.spec.trigger is b.scaler.spec.trigger, "one parsed trigger for the fleet"
    assert a.scaler.spec.target_ref is not b.scaler.spec.target_ref  # each scaler's own target
    assert a.scaler.spec.target_ref.name == "w-a" and b.scaler.spec.target_ref.name == "w-b"
    assert cache.shared.hits == 1 and len(cache.shared) == 1


def test_different_triggers_are_not_shared_and_each_reads_its_own() -> None:
    cache = ParseCache()
    a = cache.load(Request("default", "a"), _named("a", "1", metrics_trigger(external_metric("queue", "10"))))
    b = cache.load(Request("default", "b"), _named("b", "1", metrics_trigger(external_metric("queue", "20"))))
    # "10" and 10 are different inputs (the key is the raw JSON): never shared either
    c_obj = _named("c", "1", metrics_trigger(external_metric("queue", "10")))
    c_obj["spec"]["trigger"]["metricsTrigger"]["metrics"][0]["external"]["target"]["value"] = 10  # type: ignore[index]
    c = cache.load(Request("default", "c"), c_obj)
    assert a.scaler.spec.trigger is not b.scaler.spec.trigger
    assert a.scaler.spec.trigger is not c.scaler.spec.trigger
    targets = [p.scaler.spec.trigger.metrics_trigger.metrics[0].external.target.value  # type: ignore[union-attr]
               for p in (a, b, c)]
    assert [str(t) for t in targets] == ["10", "20", "10"]
    assert cache.shared.hits == 0


def test_a_shared_trigger_parse_equals_and_dumps_as_a_fresh_parse() -> None:
    from escaler.api.elasticscaler import ElasticScaler

    cache = ParseCache()
    cache.load(Request("default", "a"), _named("a", "1", metrics_trigger(external_metric("queue", "10"))))
    obj = _named("b", "1", metrics_trigger(external_metric("queue", "10")))
    shared = cache.load(Request("default", "b"), obj).scaler
    fresh = ElasticScaler.parse(obj)
    assert cache.shared.hits == 1
    for kwargs in ({}, {"exclude_unset": True}, {"mode": "json", "by_alias": True, "exclude_none": True}):
        assert shared.model_dump(**kwargs) == fresh.model_dump(**kwargs)  # type: ignore[arg-type]
    assert shared == fresh and shared.to_object() == fresh.to_object()


def test_sharing_never_changes_what_is_reparsed() -> None:
    cache = ParseCache()
    req = Request("default", "a")
    first = cache.load(req, _named("a", "1", metrics_trigger(external_metric("queue", "10"))))
    edited = cache.load(req, _named("a", "2", metrics_trigger(external_metric("queue", "30"))))
    assert edited is not first
    assert str(edited.scaler.spec.trigger.metrics_trigger.metrics[0].external.target.value) == "30"  # type: ignore[union-attr]
    assert cache.peek(req, _named("a", "1", metrics_trigger(external_metric("queue", "10")))) is None


def test_triggers_differing_only_in_their_query_share_the_metric_target() -> None:
    from es_fakes import external_server_metric

    cache = ParseCache()
    parsed = [cache.load(Request("default", n),
                         _named(n, "1", metrics_trigger(external_server_metric(q, "10"))))
              for n, q in (("a", "sum(a)"), ("b", "sum(b)"), ("c", "sum(c)"))]
    sources = [p.scaler.spec.trigger.metrics_trigger.metrics[0].external_server for p in parsed]  # type: ignore[union-attr]
    assert all(s is not None for s in sources)
    assert [s.query for s in sources] == ["sum(a)", "sum(b)", "sum(c)"]  # type: ignore[union-attr]
    assert sources[0].target is sources[1].target is sources[2].target, "one parsed target for the fleet"  # type: ignore[union-attr]
    assert cache.shared.hits == 0  # the triggers themselves differ


def test_a_different_metric_target_keeps_its_own_and_reads_it() -> None:
    from es_fakes import external_server_metric

    from escaler.api.elasticscaler import ElasticScaler

    cache = ParseCache()
    a_obj = _named("a", "1", metrics_trigger(external_server_metric("q1", "10")))
    a = cache.load(Request("default", "a"), a_obj)
    b_obj = _named("b", "1", metrics_trigger(external_server_metric("q2", "20")))
    b = cache.load(Request("default", "b"), b_obj)
    ta = a.scaler.spec.trigger.metrics_trigger.metrics[0].external_server.target  # type: ignore[union-attr]
    tb = b.scaler.spec.trigger.metrics_trigger.metrics[0].external_server.target  # type: ignore[union-attr]
    assert ta is not tb and (str(ta.value), str(tb.value)) == ("10", "20")
    fresh = ElasticScaler.parse(b_obj)
    assert b.scaler == fresh and b.scaler.to_object() == fresh.to_object()


def test_a_reparse_holds_the_same_strings_as_the_parse_before() -> None:
    """Issue 30: every status write makes a new resourceVersion, so a new parse; what was made from
    the previous parse (the last collection's rows, the per-scaler series, the PromQL verdict cache)
    keeps its strings. Through the ElasticScaler cache's own transform (the spec packed, decoded by
    ``loads_frozen``), a reparse holds the very same objects: the query interned by the parse, the
    short strings by the decode (before 2026-12-08 each parse had its own copies)."""
    import json

    from es_fakes import external_server_metric

    from escaler.api.share import SubModelTable
    from escaler.informers import freeze
    from escaler.informers.transform import transform_for

    transform = transform_for("elasticscaler.io", "elasticscalers")
    query = 'sum(rate(http_requests_total{namespace="default",service="a-long-enough-name"}[1m]))'
    text = json.dumps(_named("a", "1", metrics_trigger(external_server_metric(query, "10"))))

    def cached(rv: str) -> object:  # each event is its own decode, as the reflector's
        obj = json.loads(text)
        obj["metadata"]["resourceVersion"] = rv
        return freeze(transform(obj))

    cache = ParseCache()
    cache.shared = SubModelTable(max_entries=1)  # a fleet of more distinct triggers than the table holds
    req = Request("default", "a")
    one = cache.load(req, cached("1")).scaler  # type: ignore[arg-type]
    other = _named("b", "1", metrics_trigger(external_server_metric("sum(b)", "10")))
    cache.load(Request("default", "b"), other)  # evicts a's trigger from the table
    two = cache.load(req, cached("2")).scaler  # type: ignore[arg-type]
    assert one is not two and one.spec.trigger is not two.spec.trigger  # nothing shared by the table
    q1 = one.spec.trigger.metrics_trigger.metrics[0].external_server.query  # type: ignore[union-attr]
    q2 = two.spec.trigger.metrics_trigger.metrics[0].external_server.query  # type: ignore[union-attr]
    assert q1 == query and q1 is q2
    for field in ("api_version", "kind", "name"):
        assert getattr(one.spec.target_ref, field) is getattr(two.spec.target_ref, field), field
