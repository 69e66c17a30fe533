"""Tenant PromQL confined to the tenant's namespace (issue 27 item 4; ``escaler.signals.promqlscope``):
the rule on queries, the flags, and each reader refusing before it reads — the LLMScaler (Prometheus
and Flow, InvalidSpec naming the field), the SLO decision engine (InvalidSpec naming the field, no
query sent), the RSG ranking (never sent, QueryFailed) and the pod-deletion-cost read. The
ElasticScaler ExternalServer reader: test_signals_collector.py. On the code before this test, every
query here ran as written (``sum(x{namespace="other"})`` read another namespace's series)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from api_cases import load_samples
from es_fakes import NS, deployment
from test_llmscaler_reconciler import LLM, llmscaler
from test_slo_reconciler import OTPS_Q, TTFT_Q, Rig, llm_req

from escaler.api.elasticscaler import PodDeletionCostPrometheus
from escaler.api.rsg import ResourceScalingGroup, RSGPrometheus
from escaler.cli.main import build_parser
from escaler.cli.manager import UsageError, flags_from_args
from escaler.clock import FakeClock
from escaler.reconcilers.rsg.ranking import GroupRanker, Loads
from escaler.runtime.executor import InlineExecutor
from escaler.signals.collector import MetricsCollector
from escaler.signals.promqlscope import DEFAULT_SCOPE, PromQLScope, confinement_error
from escaler.webhook.checks import CheckContext
from escaler.webhook.validation import validate_object

OK = [
    'sum(x{namespace="team"})',
    'sum(rate(x{namespace="team", job="a"}[5m])) / sum(y{namespace="team"})',
    'max_over_time(sum(irate(x{namespace="team"}[1m]))[10m:15s])',
    'histogram_quantile(0.9, sum by (le) (rate(h_bucket{namespace="team"}[1m])))',
    'sum(x{namespace="team"}) or vector(0)',
    'topk(3, x{namespace="team"})',
    'count_values("v", x{namespace="team"})',
    'x{namespace="team"} offset 5m',
    'x{namespace="team", namespace!="other"}',
    'x{namespace="team" or namespace="team", job="a"}',
    "vector(1)",
    "1",
]
REFUSED = [
    ("sum(x)", "x does not"),
    ('sum(x{namespace="team"}) / sum(y{namespace="other"})', 'y{namespace="other"} does not'),
    ('x{namespace=~"team|other"}', 'x{namespace=~"team|other"} does not'),
    ('x{namespace!="other"}', 'x{namespace!="other"} does not'),
    ('x{namespace="team" or job="a"}', 'x{namespace="team" or job="a"} does not'),
    ('{__name__=~".+"}', '{__name__=~".+"} does not'),
    ("absent(up)", "up does not"),
    ('max_over_time(x{namespace="team"}[5m:1m]) + on() group_left sum(z)', "z does not"),
    ("-x", "x does not"),
    ("((", "is not PromQL the manager can check"),
]


@pytest.mark.parametrize("query", OK)
def test_a_query_reading_only_its_namespace_runs(query: str) -> None:
    assert confinement_error(query, "team") is None


@pytest.mark.parametrize(("query", "names"), REFUSED)
def test_a_query_reading_another_namespace_is_refused_naming_the_selector(query: str, names: str) -> None:
    why = confinement_error(query, "team")
    assert why is not None and names in why and 'namespace="team"' in why


def test_the_label_is_configurable_and_empty_turns_confinement_off() -> None:
    assert confinement_error('sum(x{kubernetes_namespace="team"})', "team", "kubernetes_namespace") is None
    assert PromQLScope(label="").refusal("sum(x)", "team", "http://prom:9090") is None
    assert PromQLScope().refusal("sum(x)", "team", "http://prom:9090") is not None


def test_an_unconfined_host_runs_any_query_and_others_stay_confined() -> None:
    scope = PromQLScope.from_flags("namespace", ["prom.team.svc", "*.tenant.example"])
    assert scope.refusal("sum(x)", "team", "http://prom.team.svc:9090") is None
    assert scope.refusal("sum(x)", "team", "https://a.tenant.example/prom") is None
    assert scope.refusal("sum(x)", "team", "http://prometheus.monitoring:9090") is not None


@pytest.mark.parametrize(("label", "hosts", "flag"), [
    ("name space", [], "--promql-namespace-label"),
    ("9ns", [], "--promql-namespace-label"),
    ("namespace", ["http://x/"], "--promql-unconfined-hosts"),
])
def test_bad_flags_are_refused_naming_the_flag(label: str, hosts: list[str], flag: str) -> None:
    with pytest.raises(ValueError, match=flag):
        PromQLScope.from_flags(label, hosts)


def test_a_namespace_flooding_distinct_queries_does_not_evict_anothers_verdicts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Tenant A writes ten times the verdict cache's size of distinct queries; tenant B's verdicts are
    still answered without a parse, and the cache stays bounded (A churns through its own share)."""
    import promql_parser

    import escaler.signals.promqlscope as scope_module

    parses = []
    real_parse = promql_parser.parse

    def counted(query: str) -> Any:
        parses.append(query)
        return real_parse(query)

    monkeypatch.setattr(promql_parser, "parse", counted)
    own = [f'sum(rate(b_{i}{{namespace="flood-b"}}[5m]))' for i in range(32)]
    for query in own:
        assert confinement_error(query, "flood-b") is None
    for i in range(10 * scope_module._CACHED_VERDICTS):
        confinement_error(f'sum(a_{i}{{namespace="flood-a"}})', "flood-a")
    parses.clear()
    for query in own:
        assert confinement_error(query, "flood-b") is None
    assert parses == [], f"{len(parses)} of tenant B's {len(own)} verdicts were evicted by tenant A"
    verdicts = scope_module._VERDICTS
    assert verdicts.weight <= scope_module._CACHED_VERDICTS
    assert verdicts.weight_of("flood-a") <= verdicts.share("flood-a")


def test_a_verdict_is_kept_per_namespace_and_label() -> None:
    query = 'sum(x{namespace="team"})'
    assert confinement_error(query, "team") is None
    assert confinement_error(query, "team") is None  # kept: the same answer
    assert confinement_error(query, "other") is not None  # another namespace, another verdict
    assert confinement_error(query, "team", "kubernetes_namespace") is not None  # another label


def _flags(*argv: str) -> Any:
    parser, _ = build_parser()
    return flags_from_args(parser.parse_args(["manager", "--webhook-port=0", *argv]))


def test_the_manager_confines_by_default_and_the_flags_reach_it() -> None:
    assert _flags().promql_scope == DEFAULT_SCOPE == PromQLScope("namespace", ())
    flags = _flags("--promql-namespace-label", "", "--promql-unconfined-hosts", "prom.a.svc")
    assert flags.promql_scope == PromQLScope("", ("prom.a.svc",))
    with pytest.raises(UsageError, match="--promql-namespace-label"):
        _flags("--promql-namespace-label", "a-b")


# ---- the readers -------------------------------------------------------------------------------


@pytest.fixture
def confined_llm() -> Iterator[LLM]:
    t = LLM(promql_scope=DEFAULT_SCOPE)
    try:
        yield t
    finally:
        t.stop()


def test_an_llmscaler_query_outside_its_namespace_is_invalid_spec_naming_it(confined_llm: LLM) -> None:
    t = confined_llm
    t.h.api("deployments").create(deployment("web", 2))
    t.h.api("llmscalers").create(llmscaler(metrics=[
        {"name": "running", "query": f'sum(running{{namespace="{NS}"}})', "targetPerReplica": 8},
        {"name": "waiting", "query": 'sum(waiting{namespace="other"})', "targetPerReplica": 2}]))
    t.start()
    t.reconcile()
    active = t.cond("ScalingActive")
    assert active is not None and (active["status"], active["reason"]) == ("False", "InvalidSpec")
    assert active["message"].startswith("spec.prometheus.metrics[1].query: every series selector must hold "
                                        f'namespace="{NS}"')
    assert t.reader.calls == 0 and t.h.replicas() == 2


def test_an_llmscaler_query_inside_its_namespace_is_read(confined_llm: LLM) -> None:
    t = confined_llm
    q = f'sum(running{{namespace="{NS}"}})'
    t.reader.values[q] = 40.0
    t.h.api("deployments").create(deployment("web", 2))
    t.h.api("llmscalers").create(llmscaler(metrics=[{"name": "running", "query": q, "targetPerReplica": 8}]))
    t.start()
    t.reconcile()
    assert t.reason("ScalingActive") == ("True", "MetricsAvailable") and t.h.replicas() == 5


def test_a_flow_selector_without_the_namespace_is_invalid_spec_naming_the_selector(confined_llm: LLM) -> None:
    t = confined_llm
    t.h.api("deployments").create(deployment("web", 2))
    obj = llmscaler(provider="Flow")
    obj["spec"]["flow"] = {"endpoint": "http://prom.example:9090", "engine": "vllm",
                           "selector": 'model_name="llama"',
                           "capacity": {"prefillTokensPerSecond": 9000, "decodeTokensPerSecond": 3000}}
    t.h.api("llmscalers").create(obj)
    t.start()
    t.reconcile()
    active = t.cond("ScalingActive")
    assert active is not None and active["reason"] == "InvalidSpec", active
    assert active["message"].startswith("spec.flow.selector: every series selector must hold")


@pytest.fixture
def confined_rig() -> Iterator[Rig]:
    r = Rig(promql_scope=DEFAULT_SCOPE)
    r.h.api("deployments").create(deployment("web", 4))
    r.start()
    try:
        yield r
    finally:
        r.h.stop()


def test_an_slo_requirement_query_outside_its_namespace_is_invalid_and_never_sent(confined_rig: Rig) -> None:
    rig = confined_rig
    rig.api().create(llm_req())  # TTFT_Q and OTPS_Q name no namespace
    rig.reconcile()
    status, reason, message = rig.ready()
    assert (status, reason) == ("False", "InvalidSpec")
    assert message.startswith(f"spec.ttft.promql: every series selector must hold namespace=\"{NS}\"")
    assert "spec.otps.promql:" in message and rig.queries == []


def test_an_slo_requirement_query_inside_its_namespace_is_read(confined_rig: Rig) -> None:
    rig = confined_rig
    ttft, otps = f'{TTFT_Q}{{namespace="{NS}"}}', f'{OTPS_Q}{{namespace="{NS}"}}'
    rig.answers.update({ttft: 1200.0, otps: 25.0})
    obj = llm_req()
    obj["spec"]["ttft"]["promql"], obj["spec"]["otps"]["promql"] = ttft, otps
    rig.api().create(obj)
    rig.reconcile()
    assert rig.ready()[:2] == ("True", "Sized") and sorted(rig.queries) == sorted([ttft, otps])


def _rsg(namespace: str) -> ResourceScalingGroup:
    return ResourceScalingGroup.parse({
        "apiVersion": "autoscaling.openfuyao.com/v1alpha1", "kind": "ResourceScalingGroup",
        "metadata": {"name": "pd", "namespace": namespace, "uid": "u1", "generation": 1},
        "spec": {"strategy": "InplaceScaling", "members": [
            {"name": "p", "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "p"}}]}})


def test_an_rsg_ranking_query_outside_its_namespace_is_never_sent() -> None:
    sent: list[str] = []

    def query(prom: Any) -> dict[int, float]:
        sent.append(prom.query)
        return {0: 1.0}

    ranker = GroupRanker(InlineExecutor(FakeClock()), query, DEFAULT_SCOPE)
    prom = RSGPrometheus.model_validate({"endpoint": "http://prom:9090", "query": "sum by (group) (load)"})
    got = ranker.loads(_rsg(NS), prom, {0, 1})
    assert isinstance(got, Loads) and got.error is not None and sent == []
    assert got.error.startswith(f'query: every series selector must hold namespace="{NS}"')
    ok = RSGPrometheus.model_validate({"endpoint": "http://prom:9090",
                                       "query": f'sum by (group) (load{{namespace="{NS}"}})'})
    got = ranker.loads(_rsg(NS), ok, {0, 1})
    assert isinstance(got, Loads) and got.error is None and len(sent) == 1


def test_a_pod_deletion_cost_query_outside_its_namespace_is_never_sent() -> None:
    c = MetricsCollector(None, None, promql_scope=DEFAULT_SCOPE)  # type: ignore[arg-type]
    source = PodDeletionCostPrometheus.model_validate({"endpoint": "http://prom:9090",
                                                       "query": "sum by (pod) (busy)"})
    got = c.pod_values(NS, source)
    assert got.error is not None
    assert got.error.startswith("scaleDown.podDeletionCost.prometheus.query: every series selector")


def test_a_query_nested_past_the_bound_is_refused_before_the_parser_sees_it() -> None:
    """The Rust parser recurses on the native stack: 20,000 levels killed the process (SIGSEGV)."""
    deep = "(" * 20_000 + 'x{namespace="team"}' + ")" * 20_000
    why = confinement_error(deep, "team")
    assert why is not None and why.startswith("nests deeper than 256 levels")
    assert confinement_error("(" * 200 + 'x{namespace="team"}' + ")" * 200, "team") is None
    long = 'x{namespace="team"} + ' * 4000 + "1"
    assert (confinement_error(long, "team") or "").startswith("is longer than")


SAMPLES = sorted((Path(__file__).resolve().parents[2] / "manifests" / "samples").glob("*.yaml"))


def _promql(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("query", "promql") and isinstance(v, str):
                yield f"{path}.{k}", v
            elif k == "flow" and isinstance(v, dict) and v.get("selector"):
                yield f"{path}.flow.selector", f'x{{{v["selector"]}}}'
            else:
                yield from _promql(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _promql(v, f"{path}[{i}]")


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_every_shipped_samples_promql_runs_in_the_namespace_it_is_applied_to(sample: Path) -> None:
    """The samples are applied to ``default`` (the Tidal's labels name it): their queries read it."""
    for doc in yaml.safe_load_all(sample.read_text(encoding="utf-8")):
        for path, query in _promql(doc or {}):
            assert confinement_error(query, "default") is None, (sample.name, path, query)


# ---- the admission webhook (with the manager's scope) -------------------------------------------

# sample → the query field the webhook names when the sample is created in another namespace
WEBHOOK_CASES = [
    ("ElasticScaler/llama-decode", "spec.trigger.metricsTrigger.metrics[3].externalServer.query"),
    ("LLMScaler/chat-llama", "spec.prometheus.metrics[0].query"),
    ("LLMScaler/chat-llama-flow", "spec.flow.selector"),
    ("LLMSLORequirement/chat-llama", "spec.ttft.promql"),
    ("LLMSLORequirement/chat-llama-flow", "spec.flow.selector"),
    ("JobSLORequirement/batch-embed", "spec.queue.promql"),
    ("ResourceScalingGroup/llama-pd", "spec.scaleDown.prometheus.query"),
]


@pytest.mark.parametrize(("sample", "path"), WEBHOOK_CASES, ids=[c[0] for c in WEBHOOK_CASES])
def test_the_webhook_denies_a_query_outside_the_objects_namespace_naming_the_field(sample: str,
                                                                                   path: str) -> None:
    obj = load_samples()[sample]
    ctx = CheckContext((), DEFAULT_SCOPE, "http://prometheus.monitoring:9090")
    obj["metadata"]["namespace"] = "default"
    assert validate_object(obj["kind"], obj, ctx).errors == []
    obj["metadata"]["namespace"] = "team-b"
    errors = validate_object(obj["kind"], obj, ctx).errors
    assert errors and errors[0].path == path, errors
    assert 'every series selector must hold namespace="team-b"' in errors[0].message
    assert validate_object(obj["kind"], obj, CheckContext()).errors == []  # no scope: not checked


def _in(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    obj["metadata"]["namespace"] = namespace
    return obj


# (sample, how it is changed, the field the webhook names): the query fields the samples leave out
def _deletion_cost(obj: dict[str, Any]) -> None:
    obj["spec"]["scaleDown"] = {"podDeletionCost": {"prometheus": {
        "endpoint": "http://prometheus.monitoring:9090", "podLabel": "pod",
        "query": 'sum by (pod) (vllm:num_requests_running{namespace="team-a"})'}}}


def _llm_flow_query(obj: dict[str, Any]) -> None:
    obj["spec"]["flow"]["queries"] = {"waiting": 'sum(vllm:num_requests_waiting{namespace="team-a"})'}


def _slo_flow_query(obj: dict[str, Any]) -> None:
    obj["spec"]["flow"]["queries"] = {"promptTokensRate": 'sum(rate(prompt{namespace="team-a"}[1m]))'}


def _slo_inflight(obj: dict[str, Any]) -> None:
    obj["spec"]["inflight"] = {"promql": 'sum(inflight{namespace="team-a"})', "target": 4}


EXTRA_WEBHOOK_CASES = [
    ("ElasticScaler/llama-decode", _deletion_cost, "spec.scaleDown.podDeletionCost.prometheus.query"),
    ("LLMScaler/chat-llama-flow", _llm_flow_query, "spec.flow.queries.waiting"),
    ("LLMSLORequirement/chat-llama-flow", _slo_flow_query, "spec.flow.queries.promptTokensRate"),
]


def _reading(node: Any, namespace: str) -> Any:
    """``node`` with every ``namespace="..."`` matcher in its strings naming ``namespace``."""
    if isinstance(node, dict):
        return {k: _reading(v, namespace) for k, v in node.items()}
    if isinstance(node, list):
        return [_reading(v, namespace) for v in node]
    if isinstance(node, str):
        return re.sub(r'namespace="[^"]*"', f'namespace="{namespace}"', node)
    return node


@pytest.mark.parametrize(("sample", "change", "path"), EXTRA_WEBHOOK_CASES,
                         ids=[c[2] for c in EXTRA_WEBHOOK_CASES])
def test_the_webhook_names_each_query_field_reading_another_namespace(sample: str, change: Any,
                                                                      path: str) -> None:
    """In ``team-a``, the sample with the field added (reading ``team-a``) is allowed; in ``team-b``,
    every other query rewritten to read ``team-b``, it is denied naming that field alone."""
    ctx = CheckContext((), DEFAULT_SCOPE, "http://prometheus.monitoring:9090")
    own = _in(_reading(load_samples()[sample], "team-a"), "team-a")
    change(own)
    assert validate_object(own["kind"], own, ctx).errors == []
    other = _in(_reading(load_samples()[sample], "team-b"), "team-b")
    change(other)  # the field under test reads team-a
    errors = validate_object(other["kind"], other, ctx).errors
    assert [e.path for e in errors] == [path], errors
    assert 'every series selector must hold namespace="team-b"' in errors[0].message
    assert 'namespace="team-a"' in errors[0].message  # the selector that breaks it, shown


def test_the_webhook_checks_the_slo_promql_sections_it_reads() -> None:
    ctx = CheckContext((), DEFAULT_SCOPE, "http://prometheus.monitoring:9090")
    obj = _in(load_samples()["LLMSLORequirement/chat-llama"], "default")
    _slo_inflight(obj)
    errors = validate_object(obj["kind"], obj, ctx).errors
    assert [e.path for e in errors] == ["spec.inflight.promql"], errors


def test_the_webhook_uses_the_managers_label_and_unconfined_hosts() -> None:
    obj = _in(load_samples()["ElasticScaler/llama-decode"], "team-b")  # reads namespace="default"
    path = "spec.trigger.metricsTrigger.metrics[3].externalServer.query"
    labelled = validate_object(obj["kind"], obj,
                               CheckContext((), PromQLScope("kubernetes_namespace", ()))).errors
    assert [e.path for e in labelled] == [path]
    assert 'every series selector must hold kubernetes_namespace="team-b"' in labelled[0].message
    unconfined = PromQLScope.from_flags("namespace", ["prometheus.monitoring"])
    assert validate_object(obj["kind"], obj, CheckContext((), unconfined)).errors == []
    elsewhere = PromQLScope.from_flags("namespace", ["prom.team-b.svc"])
    assert [e.path for e in validate_object(obj["kind"], obj, CheckContext((), elsewhere)).errors] == [path]
    assert validate_object(obj["kind"], obj, CheckContext((), PromQLScope(label=""))).errors == []

