"""Random custom resources through the API server's schema and CEL, the webhook and the reconcilers
(issue 15, hostile input), on the real control plane with one running manager.

hypothesis builds objects of all six kinds from the shipped samples (``manifests/samples``, valid)
with one to three mutations each, at paths of the sample or of the kind's CRD schema: a field
removed (a required one too), a value of the wrong JSON type, a number out of range (negative,
2^31, 2^53, 1e308), a huge string (up to 256 KiB), random unicode, a valid-looking value for an
optional field of the schema, a second trigger beside the first or another ``trigger.type``, and
policy annotations with random values. Every object is created twice, as a user would (the Python
client, a real create):

* in a namespace the webhook serves (``namespaceSelector`` on the shipped configuration), so it
  meets the schema, CEL, then the webhook;
* in a namespace it does not serve (the default install: the webhook is off in the chart), so what
  only the webhook refuses reaches the reconcilers.

Each create is either refused with a 4xx whose message (or ``details.causes``) names a field path
related to a mutated one (a path sharing its first two segments, or the mutated field's own name
in the text), or accepted; the webhook only adds refusals (refused without it → refused with it).
Every accepted object then ends, within ``SETTLE_S``, with status conditions written for its
current ``metadata.generation``. The manager never crashes: it is alive, its log holds no
traceback, ``controller_runtime_reconcile_panics_total`` stays 0, a sentinel ElasticScaler created
afterwards is still reconciled (its Deployment raised to ``minReplicas``), then every work queue
drains (is seen empty within ``DRAIN_S``) and no reconcile runs for more than ``STUCK_S``.

Then each shape only code refuses (``CODE_ONLY``, per kind) once, with a target and serviceId of its
own: the webhook refuses it naming the field — or, for an annotation value the reconciler falls back
from (ElasticScaler, LLMScaler; issue 28 item 6), accepts it with an admission warning naming the
annotation, which the API server passes on as a ``Warning`` header — and without the webhook the
reconciler reports it in a False condition naming the field (an annotation: a Warning Event
``InvalidAnnotation``).

Reduced (every e2e run): ``derandomize`` with 60 examples (120 creates, plus 42 fixed ones). Full
(``ESCALER_CHAOS=full``): 500 examples. Reports (``record_property``): ``runs`` (creates),
``passed`` (creates whose outcome was as above).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from .conftest import ROOT, Cluster, eventually
from .es_helpers import apply, chaos_full, chaos_runs, deployment, scaler
from .webhook import free_port, in_namespace, manager_with_webhook

# serial tier (docs/testing.md): it registers the shipped admission webhook for every namespace
pytestmark = [pytest.mark.e2e, pytest.mark.chaos, pytest.mark.serial]

EXAMPLES = chaos_runs(60, 500)
# how long accepted objects may take to get their conditions, after the last create
SETTLE_S = 90.0 if chaos_full() else 60.0
# a reconcile running longer than this is a stuck worker
STUCK_S = 30.0
# how long every work queue has to be seen empty once, after the sentinel
DRAIN_S = 20.0
WEBHOOK_CONFIG = "escaler-validating-webhook"
HOOKED_LABEL = "escaler.test/webhook"
KINDS: dict[str, tuple[str, str, str]] = {  # kind → (group, version, plural)
    "ElasticScaler": ("elasticscaler.io", "v1alpha1", "elasticscalers"),
    "Tidal": ("tidal.io", "v1alpha1", "tidals"),
    "ResourceScalingGroup": ("autoscaling.openfuyao.com", "v1alpha1", "resourcescalinggroups"),
    "LLMScaler": ("llm.escaler.io", "v1alpha1", "llmscalers"),
    "LLMSLORequirement": ("llm.escaler.io", "v1alpha1", "llmslorequirements"),
    "JobSLORequirement": ("llm.escaler.io", "v1alpha1", "jobslorequirements"),
}
ANNOTATIONS = (
    "elasticscaler.io/metrics.windowSeconds", "elasticscaler.io/metrics.gcFactor",
    "elasticscaler.io/metrics.aggregationType", "elasticscaler.io/metrics.panicWindowPercentage",
    "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds",
    "elasticscaler.io/behavior.scaleUp.maxPodsPerStep", "elasticscaler.io/paused",
    "elasticscaler.io/paused-replicas",
)
Token = str | int
_MT = ("spec", "trigger", "metricsTrigger")
# per kind: mutations the schema and CEL let through that only code can refuse
CODE_ONLY: dict[str, list[Mutation]] = {}

# ------------------------------------------------------------------------------------ the objects


def _samples() -> list[dict[str, Any]]:
    out = []
    for path in sorted((ROOT / "manifests" / "samples").glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert {d["kind"] for d in out} == set(KINDS), "a sample of every kind"
    return out


def _schema_paths(kind: str) -> list[tuple[tuple[Token, ...], dict[str, Any]]]:
    """(path, schema) of every field under ``spec`` of the kind's CRD, arrays as element 0."""
    group, _, plural = KINDS[kind]
    crd = yaml.safe_load((ROOT / "manifests" / "crds" / f"{plural}.{group}.yaml").read_text())
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    out: list[tuple[tuple[Token, ...], dict[str, Any]]] = []

    def walk(path: tuple[Token, ...], schema: dict[str, Any], depth: int) -> None:
        out.append((path, schema))
        if depth > 6:
            return
        for name, sub in (schema.get("properties") or {}).items():
            walk((*path, name), sub, depth + 1)
        if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
            walk((*path, 0), schema["items"], depth + 1)

    walk(("spec",), root, 0)
    return out


def _object_paths(obj: Any, path: tuple[Token, ...] = ()) -> list[tuple[Token, ...]]:
    out = [path] if path else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _object_paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _object_paths(v, (*path, i))
    return out


SAMPLES = _samples()
SCHEMA_PATHS = {kind: _schema_paths(kind) for kind in KINDS}


def show(path: tuple[Token, ...]) -> str:
    out = ""
    for tok in path:
        if isinstance(tok, int):
            out += f"[{tok}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tok):
            out += f".{tok}" if out else tok
        else:
            out += f"[{tok}]"
    return out


def put(obj: dict[str, Any], path: tuple[Token, ...], value: Any) -> None:
    """Set ``path`` in ``obj``, making (or replacing with) containers on the way."""
    node: Any = obj
    for tok, nxt in itertools.pairwise(path):
        want: type = list if isinstance(nxt, int) else dict
        if isinstance(tok, int):
            while len(node) <= tok:
                node.append(want())
            if not isinstance(node[tok], want):
                node[tok] = want()
            node = node[tok]
        else:
            if not isinstance(node.get(tok), want):
                node[tok] = want()
            node = node[tok]
    last = path[-1]
    if isinstance(last, int):
        while len(node) <= last:
            node.append(None)
    node[last] = copy.deepcopy(value)


def remove(obj: dict[str, Any], path: tuple[Token, ...]) -> None:
    node: Any = obj
    for tok in path[:-1]:
        try:
            node = node[tok]
        except (KeyError, IndexError, TypeError):
            return
    if isinstance(node, dict):
        node.pop(path[-1], None)
    elif isinstance(node, list) and isinstance(path[-1], int) and path[-1] < len(node):
        node.pop(path[-1])


@dataclass(frozen=True)
class Mutation:
    op: str
    path: tuple[Token, ...]
    value: Any = None

    def __str__(self) -> str:
        shown = json.dumps(self.value, default=str)
        return f"{self.op} {show(self.path)}" + ("" if self.op == "delete" else f" = {shown[:60]}")


CODE_ONLY.update({
    "ElasticScaler": [
        Mutation("set", (*_MT, "scalingAlgorithm"), "no-such-algorithm"),
        Mutation("set", (*_MT, "metrics", 3, "externalServer", "endpoint"), "http://bad host:9090"),
        Mutation("set", ("metadata", "annotations", "elasticscaler.io/metrics.windowSeconds"), "soon"),
        Mutation("set", ("metadata", "annotations", "elasticscaler.io/paused-replicas"), "-3"),
    ],
    "Tidal": [
        Mutation("set", ("spec", "rules", 0, "start"), "CRON_TZ=Mars/Olympus 0 9 * * 1-5"),
        Mutation("set", ("spec", "rules", 1, "end"), "CRON_TZ=Asia/Shanghai 0 25 * * 1-5"),
        Mutation("delete", ("metadata", "labels")),
    ],
    "ResourceScalingGroup": [
        Mutation("set", ("spec", "scaleDown", "prometheus", "endpoint"), "ftp://prometheus:9090"),
        Mutation("set", ("spec", "members", 1, "targetRef", "apiVersion"), "a/b/c"),
    ],
    "LLMScaler": [
        Mutation("set", ("spec", "prometheus", "endpoint"), "http://user:pw@prometheus:9090"),
        Mutation("set", ("spec", "customProvider", "url"), "not a url"),
        Mutation("set", ("metadata", "annotations", "elasticscaler.io/paused"), "maybe"),
    ],
    "LLMSLORequirement": [
        Mutation("set", ("metadata", "annotations", "elasticscaler.io/paused"), "yes please"),
    ],
    "JobSLORequirement": [
        Mutation("set", ("metadata", "annotations", "elasticscaler.io/paused-replicas"), "many"),
    ],
})

scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)
out_of_range = st.sampled_from([-1, 0, -(2**31), 2**31, 2**53 + 1, 10**12, -0.5, 1e308, 0.0001, "-1",
                                "1e309"])
# at most 100,000 characters: 💥 JSON-escaped is 12 bytes, and the request stays under the API server's
# 3 MiB cap (a body over it is refused before any field is read, naming none)
huge = st.sampled_from([1_000, 70_000, 100_000]).flatmap(
    lambda n: st.sampled_from(["x", "é", "💥", "a.b/"]).map(lambda s: (s * n)[:n]))
weird_text = st.text(min_size=1, max_size=40)  # any code point hypothesis draws, control and RTL ones too


def _valid_like(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value of the schema's own type (often valid, sometimes off its pattern or range)."""
    if schema.get("enum"):
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "integer":
        low = int(schema.get("minimum", 0))
        return st.integers(low, low + 20)
    if kind == "number":
        return st.floats(0, 100, allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "string":
        return st.sampled_from(["abc", "1", "0.5", "http://example.invalid:9090", "CRON_TZ=UTC 0 9 * * *",
                                "apps/v1", "Deployment", "sum(up)", "2026-01-01"])
    if kind == "array":
        return st.just([])
    return st.just({})


@st.composite
def mutation(draw: st.DrawFn, obj: dict[str, Any]) -> Mutation:
    kind = obj["kind"]
    present = [p for p in _object_paths(obj) if p[0] == "spec" or p[:2] in (("metadata", "annotations"),
                                                                            ("metadata", "labels"))]
    op = draw(st.sampled_from(["delete", "wrong_type", "out_of_range", "huge", "unicode", "schema", "schema",
                               "schema", "trigger", "annotation", "annotation", "code_only", "code_only"]))
    if op == "code_only":
        # shapes the schema and CEL accept and only code refuses (the webhook, or the reconciler)
        return draw(st.sampled_from(CODE_ONLY[kind]))
    if op == "schema":
        path, schema = draw(st.sampled_from(SCHEMA_PATHS[kind]))
        return Mutation("set", path, draw(_valid_like(schema)))
    if op == "trigger" and kind == "ElasticScaler":
        other = draw(st.sampled_from(["metricsTrigger", "stateTrigger", "signalTrigger", "type"]))
        if other == "type":
            types = ["MetricsTrigger", "StateTrigger", "SignalTrigger", "Cron"]
            return Mutation("set", ("spec", "trigger", "type"), draw(st.sampled_from(types)))
        return Mutation("set", ("spec", "trigger", other), draw(st.sampled_from(
            [{}, {"idleTimeoutSeconds": 60}, {"metrics": []}, {"scalingAlgorithm": "apa"}])))
    if op == "annotation":
        key = draw(st.sampled_from(ANNOTATIONS))
        value = draw(st.sampled_from(["abc", "-1", "0", "1e9", "true", "", "Latest", "99999999999"])
                     | weird_text)
        return Mutation("set", ("metadata", "annotations", key), value)
    path = draw(st.sampled_from(present or [("spec",)]))
    if op == "delete":
        return Mutation("delete", path)
    value = draw({"wrong_type": json_values, "out_of_range": out_of_range, "huge": huge,
                  "unicode": weird_text, "trigger": json_values}[op])
    return Mutation("set", path, value)


@st.composite
def hostile_objects(draw: st.DrawFn) -> tuple[dict[str, Any], list[Mutation]]:
    obj = copy.deepcopy(draw(st.sampled_from(SAMPLES)))
    obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k in ("annotations", "labels")}
    mutations = draw(st.lists(mutation(obj), min_size=1, max_size=2))
    for m in mutations:
        if m.op == "delete":
            remove(obj, m.path)
        else:
            put(obj, m.path, m.value)
    return obj, mutations


# ------------------------------------------------------------------------------------ judging

_PATH_RE = re.compile(r"\b(?:spec|metadata)(?:\.[A-Za-z0-9_]+|\[[^\]\s]*\])*")


def _tokens(path: str) -> list[str]:
    return [t for t in re.split(r"[.\[\]]", path) if t]


def names_a_mutated_field(message: str, fields: list[str], mutations: list[Mutation]) -> bool:
    """Whether a refusal names a field path related to a mutated one (see the module docstring)."""
    named = [_tokens(p) for p in [*_PATH_RE.findall(message), *fields]]
    for m in mutations:
        mine = [str(t) for t in m.path]
        for other in named:
            common = 0
            for a, b in zip(mine, other, strict=False):
                if a != b:
                    break
                common += 1
            # the mutated field itself, a field inside it, or a sibling under the same parent
            if common >= 2 or common == len(mine):
                return True
        # a field's own name in the text (the API server's decoder names Go fields: ObjectMeta.annotations)
        if any(isinstance(t, str) and t not in ("spec", "metadata") and t in message for t in m.path):
            return True
    return False


@dataclass
class Record:
    """What happened to every create."""

    # (kind, namespace, name) of the objects accepted
    accepted: list[tuple[str, str, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    runs: int = 0
    refused: int = 0
    # creates the webhook refused that the API server alone accepted
    webhook_only: int = 0
    # code-only annotation mistakes accepted with the webhook on, with a warning naming the annotation
    warned: int = 0


# kinds whose reconciler reads the pause annotations and falls back (escaler.scaling.annotations.READERS)
FALLBACK_KINDS = ("ElasticScaler", "LLMScaler")
# one Warning header value: 299 <agent> "<text>" (RFC 7234; the API server's agent is "-")
_WARNING_RE = re.compile(r'^\d{3} \S+ "((?:[^"\\]|\\.)*)"')


def _warnings(headers: Any) -> list[str]:
    values = headers.getlist("Warning") if hasattr(headers, "getlist") else [headers.get("Warning") or ""]
    out = []
    for value in values:
        m = _WARNING_RE.match(value or "")
        if m:
            out.append(re.sub(r"\\(.)", r"\1", m.group(1)))
    return out


def create(api: k8s.CustomObjectsApi, ns: str, obj: dict[str, Any]) -> tuple[int, str, list[str], list[str]]:
    """(HTTP status, message, causes' fields, warnings) of a create; 201 on success, with the admission
    warnings the API server passed on (what kubectl prints as ``Warning: ...``)."""
    group, version, plural = KINDS[obj["kind"]]
    obj = in_namespace(obj, ns)  # the samples' PromQL names the namespace they are created in
    try:
        _, code, headers = api.create_namespaced_custom_object_with_http_info(
            group, version, ns, plural, obj, _request_timeout=60)
        return int(code), "", [], _warnings(headers)
    except ApiException as exc:
        try:
            status = json.loads(exc.body or "{}")
        except ValueError:
            status = {"message": str(exc.body)[:2000]}
        causes = ((status.get("details") or {}).get("causes")) or []
        return int(exc.status), str(status.get("message", "")), [str(c.get("field", "")) for c in causes], []


def settled(obj: dict[str, Any]) -> bool:
    """Status conditions written for the object's current generation."""
    gen = obj["metadata"].get("generation")
    status = obj.get("status") or {}
    conditions = status.get("conditions") or []
    if not conditions:
        return False
    if status.get("observedGeneration") == gen:
        return True
    return all(c.get("observedGeneration") == gen for c in conditions)


# ------------------------------------------------------------------------------------ the manager


def _metrics(port: int) -> dict[str, float]:
    """The manager's /metrics samples, name{labels} → value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def _metric_values(metrics: dict[str, float], name: str) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if k == name or k.startswith(name + "{")}


def _queues_health(port: int) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """(panics, queues never seen empty, reconciles running past ``STUCK_S``) over up to ``DRAIN_S``.

    A queue drains when it is seen empty once: a single sample is no proof either way, since scalers
    that poll or wait re-add themselves on their own schedule, and the sentinel's own write has just
    queued it again (a watch event for its Deployment). A stuck worker keeps its queue non-empty and
    its processor running, which every sample sees.
    """
    never_empty: dict[str, float] = {}
    longest: dict[str, float] = {}
    deadline = time.monotonic() + DRAIN_S
    seen_empty: set[str] = set()
    while True:
        m = _metrics(port)
        depths = _metric_values(m, "workqueue_depth")
        seen_empty |= {k for k, v in depths.items() if not v}
        never_empty = {k: v for k, v in depths.items() if k not in seen_empty}
        longest |= {k: v for k, v in _metric_values(m, "workqueue_longest_running_processor_seconds").items()
                    if v > STUCK_S}
        if not never_empty or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    panics = {k: v for k, v in _metric_values(m, "controller_runtime_reconcile_panics_total").items() if v}
    return panics, never_empty, longest


def _hook_only(cluster: Cluster, label: str) -> None:
    """Point every webhook of the shipped configuration at namespaces labelled ``label``=on."""
    cfg = cluster.kubectl_json("get", "validatingwebhookconfiguration", WEBHOOK_CONFIG)
    patch = [{"op": "add", "path": f"/webhooks/{i}/namespaceSelector",
              "value": {"matchLabels": {label: "on"}}} for i in range(len(cfg["webhooks"]))]
    cluster.kubectl("patch", "validatingwebhookconfiguration", WEBHOOK_CONFIG, "--type=json",
                    "-p", json.dumps(patch))


@pytest.fixture
def second_namespace(cluster: Cluster, namespace: str) -> Iterator[str]:
    name = f"{namespace[:50]}-plain"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_random_custom_resources_are_refused_naming_the_field_or_reconciled(
        cluster: Cluster, namespace: str, second_namespace: str, api_client: k8s.ApiClient, tmp_path: Path,
        record_property: Callable[[str, object], None]) -> None:
    hooked, plain = namespace, second_namespace
    cluster.kubectl("label", "namespace", hooked, f"{HOOKED_LABEL}=on")
    api = k8s.CustomObjectsApi(api_client)
    metrics_port = free_port()
    with manager_with_webhook(cluster, tmp_path, f"--metrics-bind-address=127.0.0.1:{metrics_port}",
                              "--log-format=json") as mgr:
        _hook_only(cluster, HOOKED_LABEL)
        _wait_webhook_scoped(api, hooked, plain)
        rec = Record()
        counter = iter(range(10**6))

        @given(case=hostile_objects())
        @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def fuzz(case: tuple[dict[str, Any], list[Mutation]]) -> None:
            obj, mutations = case
            obj = {**obj, "metadata": {**obj["metadata"], "name": f"fz-{next(counter)}"}}
            _judge(api, obj, mutations, hooked, plain, rec)

        fuzz()
        assert rec.runs == 2 * EXAMPLES, rec.runs
        # then every shape only code refuses, once each: the webhook must refuse it naming the field,
        # and without the webhook the reconciler must say what is wrong in a condition
        fixed: list[tuple[dict[str, Any], Mutation]] = []
        for sample in SAMPLES:
            for m in CODE_ONLY[sample["kind"]]:
                obj = copy.deepcopy(sample)
                obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k in ("annotations", "labels")}
                remove(obj, m.path) if m.op == "delete" else put(obj, m.path, m.value)
                obj["metadata"]["name"] = name = f"code-{next(counter)}"
                _unique(obj, name)
                warnings = _judge(api, obj, [m], hooked, plain, rec)
                fixed.append((obj, m))
                if m.path[:2] == ("metadata", "annotations") and obj["kind"] in FALLBACK_KINDS:
                    _warned(obj, m, hooked, warnings, rec)
        _wait_settled(api, rec)
        reported = _reported(api, cluster, plain, fixed, rec)
        _sentinel(cluster, plain, mgr)
        panics, depth, longest = _queues_health(metrics_port)
        record_property("runs", rec.runs)
        record_property("passed", rec.runs - len(rec.failures))
        log = mgr.output()
        alive = mgr.proc.poll() is None
    summary = (f"{rec.runs} creates: {rec.refused} refused ({rec.webhook_only} by the webhook only), "
               f"{len(rec.accepted)} accepted")
    assert alive, log[-3000:]
    assert "Traceback" not in log, log[log.index("Traceback") - 2000:][:6000]
    assert not panics and not depth and not longest, (panics, depth, longest)
    assert not rec.failures, summary + "\n" + "\n".join(rec.failures[:30])
    # the run reached every layer: refusals and accepted objects on both sides
    assert rec.refused and rec.accepted and rec.webhook_only, summary
    # the reconcilers judged code-only mistakes of the four scaler kinds (not all refused by CEL first)
    assert reported >= 8, (reported, summary)
    # every fall-back annotation of CODE_ONLY (two per ElasticScaler sample, one per LLMScaler sample) was
    # accepted with the webhook on, with a warning naming the annotation
    fallbacks = sum(1 for sample in SAMPLES for m in CODE_ONLY[sample["kind"]]
                    if m.path[:2] == ("metadata", "annotations") and sample["kind"] in FALLBACK_KINDS)
    assert fallbacks >= 3 and rec.warned == fallbacks, (rec.warned, fallbacks, summary)


def _wait_webhook_scoped(api: k8s.CustomObjectsApi, hooked: str, plain: str) -> None:
    """Until an object only the webhook refuses is refused in ``hooked`` and accepted in ``plain``."""
    probe = copy.deepcopy(next(s for s in SAMPLES if s["kind"] == "ElasticScaler"
                               and s["spec"]["trigger"]["type"] == "MetricsTrigger"))
    probe["metadata"] = {"name": "probe"}
    probe["spec"]["trigger"]["metricsTrigger"]["scalingAlgorithm"] = "no-such-algorithm"
    group, version, plural = KINDS["ElasticScaler"]

    def scoped() -> bool:
        outcome = {ns: create(api, ns, probe)[0] for ns in (hooked, plain)}
        for ns, code in outcome.items():
            if code == 201:
                api.delete_namespaced_custom_object(group, version, ns, plural, "probe")
        return outcome[hooked] >= 400 and outcome[plain] == 201

    eventually(scoped, timeout=30, what="the webhook serving only the labelled namespace")


def _judge(api: k8s.CustomObjectsApi, obj: dict[str, Any], mutations: list[Mutation], hooked: str,
           plain: str, rec: Record) -> dict[str, list[str]]:
    """Create ``obj`` in both namespaces and judge the outcomes; returns each namespace's warnings."""
    what = f"{obj['kind']}/{obj['metadata']['name']} ({'; '.join(map(str, mutations))})"
    codes: dict[str, int] = {}
    warnings: dict[str, list[str]] = {}
    for ns in (plain, hooked):
        rec.runs += 1
        code, message, fields, warnings[ns] = create(api, ns, obj)
        codes[ns] = code
        if code == 201:
            rec.accepted.append((obj["kind"], ns, obj["metadata"]["name"]))
            continue
        rec.refused += 1
        where = "with the webhook" if ns == hooked else "schema/CEL only"
        if not 400 <= code < 500:
            rec.failures.append(f"{what} {where}: HTTP {code}: {message[:300]}")
        elif not names_a_mutated_field(message, fields, mutations):
            rec.failures.append(f"{what} {where}: the refusal names no mutated field: {message[:400]}")
    if codes[plain] != 201 and codes[hooked] == 201:
        rec.failures.append(f"{what}: refused by schema/CEL alone but accepted with the webhook on")
    if codes[plain] == 201 and codes[hooked] != 201:
        rec.webhook_only += 1
    return warnings


def _warned(obj: dict[str, Any], m: Mutation, hooked: str, warnings: dict[str, list[str]],
            rec: Record) -> None:
    """An annotation the kind's reconciler falls back from: accepted with the webhook on, and a warning
    names it (``metadata.annotations[<key>]``), the value and the default used (issue 28 item 6)."""
    what = f"{obj['kind']}/{obj['metadata']['name']} ({m})"
    if (obj["kind"], hooked, obj["metadata"]["name"]) not in rec.accepted:
        rec.failures.append(f"{what}: refused with the webhook on; the reconciler falls back from it, so "
                            "the webhook should accept it with a warning")
        return
    path = f"metadata.annotations[{m.path[2]}]"
    named = [w for w in warnings[hooked] if w.startswith(f"{path}: ") and repr(m.value) in w
             and ("using the default" in w or w.endswith("; ignored"))]
    if not named:
        rec.failures.append(f"{what}: accepted with the webhook on, but no warning names {path}, the value "
                            f"and the default: {warnings[hooked]}")
        return
    rec.warned += 1


def _wait_settled(api: k8s.CustomObjectsApi, rec: Record) -> None:
    """Every accepted object ends with conditions for its generation (one list per kind and namespace)."""
    pending = set(rec.accepted)

    def check() -> bool:
        for kind, ns in {(k, n) for k, n, _ in pending}:
            group, version, plural = KINDS[kind]
            items = api.list_namespaced_custom_object(group, version, ns, plural)["items"]
            for item in items:
                key = (kind, ns, item["metadata"]["name"])
                if key in pending and settled(item):
                    pending.discard(key)
        return not pending

    try:
        eventually(check, timeout=SETTLE_S, interval=1.0, what="conditions on every accepted object")
    except AssertionError:
        for kind, ns, name in sorted(pending)[:10]:
            group, version, plural = KINDS[kind]
            item = api.get_namespaced_custom_object(group, version, ns, plural, name)
            rec.failures.append(f"{kind} {ns}/{name} accepted but not reconciled within {SETTLE_S:g} s: "
                                f"generation {item['metadata'].get('generation')}, status "
                                f"{json.dumps(item.get('status'))[:300]}, "
                                f"spec {json.dumps(item['spec'])[:300]}")
        rec.failures.append(f"{len(pending)} accepted objects never got conditions")


def _sentinel(cluster: Cluster, ns: str, mgr: Any) -> None:
    """A valid scaler created after the fuzzing is still reconciled: its target goes to minReplicas."""
    apply(cluster, ns, deployment("sentinel", 1))
    apply(cluster, ns, scaler("sentinel", "sentinel", {"type": "SignalTrigger", "signalTrigger": {
        "idleTimeoutSeconds": 600, "activationReplicas": 1}}, minr=2, maxr=3))
    eventually(lambda: cluster.kubectl_json("get", "deployment", "sentinel", "-n", ns)["spec"]["replicas"]
               == 2, timeout=30,
               what=f"the sentinel scaled to minReplicas; manager log:\n{mgr.output()[-2000:]}")


def _unique(obj: dict[str, Any], name: str) -> None:
    """A target and serviceId of its own (so no TargetConflict or ServiceIdConflict hides the mistake)."""
    spec = obj["spec"]
    ref = spec.get("targetRef")
    if isinstance(ref, dict) and ref.get("kind") == "Deployment":
        ref["name"] = name
    if "serviceId" in spec:
        spec["serviceId"] = name
    for member in spec.get("members") or []:
        # GroupReplication clones are named after the member: {member}-g{i}
        if isinstance(member, dict) and isinstance(member.get("name"), str):
            member["name"] = f"{name}-{member['name']}"


def _reported(api: k8s.CustomObjectsApi, cluster: Cluster, ns: str,
              fixed: list[tuple[dict[str, Any], Mutation]], rec: Record) -> int:
    """Each code-only mistake accepted without the webhook ends with a False condition naming it (an
    ElasticScaler's annotation: a Warning Event ``InvalidAnnotation`` naming it, the documented way; the
    SLO kinds read no pause annotation, so the webhook is the only one to refuse those)."""
    accepted = set(rec.accepted)
    checked = 0
    events = cluster.kubectl_json("get", "events.events.k8s.io", "-n", ns)["items"]
    for obj, m in fixed:
        if (obj["kind"], ns, obj["metadata"]["name"]) not in accepted:
            continue  # the schema or CEL refused it already (judged as a refusal)
        if obj["kind"] in ("LLMSLORequirement", "JobSLORequirement"):
            continue
        checked += 1
        notes = [e.get("note", "") for e in events if e.get("reason") == "InvalidAnnotation"
                 and (e.get("regarding") or {}).get("name") == obj["metadata"]["name"]]
        if m.path[:2] == ("metadata", "annotations") and any(str(m.path[2]) in n for n in notes):
            continue
        group, version, plural = KINDS[obj["kind"]]
        item = api.get_namespaced_custom_object(group, version, ns, plural, obj["metadata"]["name"])
        false = [c for c in (item.get("status") or {}).get("conditions") or [] if c.get("status") == "False"]
        text = " | ".join(f"{c['type']}/{c.get('reason')}: {c.get('message', '')}" for c in false)
        if not any(names_a_mutated_field(c.get("message", ""), [], [m]) for c in false):
            rec.failures.append(f"{obj['kind']} {ns}/{obj['metadata']['name']} ({m}) accepted without the "
                                f"webhook: no False condition names the field; False: {text[:400]}")
    return checked
