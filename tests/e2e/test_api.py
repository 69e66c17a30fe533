"""The CRDs and the validating webhook on the real API server, as a user meets them.

* the generated CRDs are Established, ``kubectl explain`` shows the field docs, and
  ``kubectl get es,tidal,rsg,llms,llmslo,jobslo`` shows the specified columns;
* every CEL/schema rule is enforced by the API server alone (no webhook registered, the default
  install of docs/install.md#the-admission-webhook): the malformed objects of ``tests/unit/api_cases.py``
  (``MALFORMED``: at least 40, all six kinds) replayed with server-side dry runs, each refused naming its
  field (and a CEL rule's message); the webhook-only mistakes below are accepted there, which keeps the
  boundary between the CRDs and the webhook honest;
* with ``python -m escaler manager`` serving the webhook, registered in the API server, a table
  of invalid objects across all six kinds is refused — by the schema/CEL or by the webhook —
  with the field path in kubectl's message, and the same object with the one mistake fixed is
  created; annotation values the reconciler falls back from (``WARNED``) are created with
  kubectl's ``Warning:`` naming the key, the rule, the value and the default; deletes are allowed;
* issue 9: the manager's HTTP surfaces against the real TokenReview/SubjectAccessReview: the
  signal API speaks only TLS by default (a self-signed certificate whose fingerprint is logged),
  accepts only tokens for the ``escaler`` audience, rate-limits failed authentications (429);
  ``--metrics-secure`` serves ``/metrics`` only to a ServiceAccount allowed ``get`` on the
  non-resource URL; probes need no token.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, Cluster, eventually
from .webhook import free_port, in_namespace, manager_with_webhook, serves_namespace, submit

sys.path.insert(0, str(ROOT / "tests" / "unit"))
from api_cases import (
    DELETE,
    MALFORMED,
    REFUSED_BY_RULE,
    REFUSED_BY_SCHEMA,
    load_samples,
    mutate,
    server_disagreements,
)

pytestmark = pytest.mark.e2e

ES_M, ES_S, ES_SIG = "ElasticScaler/llama-decode", "ElasticScaler/llama-es", "ElasticScaler/llama-batch"
LLMS, LLMSLO, JOB = "LLMScaler/chat-llama", "LLMSLORequirement/chat-llama", "JobSLORequirement/batch-embed"
RSG, TIDAL = "ResourceScalingGroup/llama-pd", "Tidal/llama-office-hours"
MT = "spec.trigger.metricsTrigger"
ANN = "metadata.annotations"

# Checks that need code, not CEL: only the webhook can refuse these (the API server alone accepts
# each of them: test_cel_and_schema_rules_enforced_by_the_api_server_alone checks that too, so the
# boundary between the CRDs and the webhook is written down here and kept honest).
_HPA = {f"{MT}.scalingAlgorithm": "HPA", f"{MT}.algorithmConfig": DELETE, f"{MT}.metrics[3]": DELETE}
WEBHOOK_ONLY: list[tuple[str, str, dict[str, Any], str]] = [
    (
        "es/algorithm-not-registered",
        ES_M,
        {f"{MT}.scalingAlgorithm": "no-such-algo"},
        f"{MT}.scalingAlgorithm",
    ),
    (
        "es/externalserver-url-empty-label",
        ES_M,
        {f"{MT}.metrics[3].externalServer.endpoint": "http://prometheus..monitoring:9090"},
        f"{MT}.metrics[3].externalServer.endpoint",
    ),
    (
        "es/signal-endpoint-label-too-long",
        ES_SIG,
        {"spec.trigger.signalTrigger.endpoint": "http://" + "g" * 64 + ".llm/activity"},
        "spec.trigger.signalTrigger.endpoint",
    ),
    # issue 8 item 7: the companion HPA would silently ignore metrics.* annotations
    ("es/hpa-with-metrics-annotation", ES_M, _HPA, f"{ANN}[elasticscaler.io/metrics.windowSeconds]"),
    (
        "tidal/unknown-zone",
        TIDAL,
        {"spec.rules[1].end": "CRON_TZ=Mars/Olympus 0 14 * * 1-5"},
        "spec.rules[1].end",
    ),
    (
        "tidal/never-fires",
        TIDAL,
        {"spec.rules[2].start": "CRON_TZ=Asia/Shanghai 0 1 30 2 *"},
        "spec.rules[2].start",
    ),
    (
        "tidal/step-zero",
        TIDAL,
        {"spec.rules[0].start": "CRON_TZ=Asia/Shanghai */0 9 * * 1-5"},
        "spec.rules[0].start",
    ),
    (
        "llms/prometheus-url-empty-label",
        LLMS,
        {"spec.prometheus.endpoint": "http://prometheus..svc:9090"},
        "spec.prometheus.endpoint",
    ),
    (
        "rsg/scaledown-prometheus-url-empty-label",
        RSG,
        {"spec.scaleDown.prometheus.endpoint": "http://prometheus..svc:9090"},
        "spec.scaleDown.prometheus.endpoint",
    ),
]

# Issue 28 item 6: annotation values the reconciler replaces by their default (seed 003's fallback) are
# accepted, with the webhook on too, and kubectl prints the webhook's warning naming the key, the rule,
# the value and the default used. (id, sample, the mistake, what the warning must say)
WARNED: list[tuple[str, str, dict[str, Any], str]] = [
    (
        "es/annotation-window-not-int",
        ES_M,
        {f"{ANN}.elasticscaler\\.io/metrics\\.windowSeconds": "a minute"},
        f"Warning: {ANN}[elasticscaler.io/metrics.windowSeconds]: must be an integer >= 1, got 'a minute'; "
        "using the default 60",
    ),
    (
        "es/annotation-aggregation-enum",
        ES_M,
        {f"{ANN}.elasticscaler\\.io/metrics\\.aggregationType": "Median"},
        f"Warning: {ANN}[elasticscaler.io/metrics.aggregationType]: must be one of Average, Max, Min, P50, "
        "P90, P95, P99, Latest, got 'Median'; using the default Average",
    ),
    (
        "es/annotation-paused-replicas",
        ES_S,
        {f"{ANN}": {"elasticscaler.io/paused-replicas": "-2"}},
        f"Warning: {ANN}[elasticscaler.io/paused-replicas]: must be an integer >= 0, got '-2'; ignored",
    ),
]


def _set_annotation_path(obj: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``mutate`` with annotation keys (which contain dots) written as escaped dotted paths."""
    out = copy.deepcopy(obj)
    plain = {}
    for path, value in changes.items():
        if path.startswith(f"{ANN}.") and "\\." in path:
            key = path[len(ANN) + 1 :].replace("\\.", ".")
            out["metadata"].setdefault("annotations", {})[key] = value
        else:
            plain[path] = value
    return mutate(out, plain)


def _unique(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["name"] = f"{out['metadata']['name'][:40]}-{uuid.uuid4().hex[:6]}"
    out["metadata"].pop("namespace", None)
    return out


def all_cases() -> list[tuple[str, str, dict[str, Any], str]]:
    cases = [(c.id, c.sample, c.changes, c.errors[0][0]) for c in REFUSED_BY_RULE]
    cases += [(cid, sample, changes, path) for cid, sample, changes, path in REFUSED_BY_SCHEMA]
    return cases + WEBHOOK_ONLY


def test_crds_established_and_explained(cluster: Cluster) -> None:
    crds = cluster.kubectl_json("get", "crd")["items"]
    names = {c["metadata"]["name"] for c in crds}
    expected = {p.stem for p in (ROOT / "manifests" / "crds").glob("*.yaml")}
    assert expected <= names and len(expected) == 6
    for c in crds:
        if c["metadata"]["name"] in expected:
            conds = {x["type"]: x["status"] for x in c["status"]["conditions"]}
            assert conds.get("Established") == "True" and conds.get("NamesAccepted") == "True"
    out = cluster.kubectl("explain", "elasticscaler.spec.trigger.metricsTrigger")
    assert "scalingAlgorithm" in out and "metrics" in out
    assert "apa" in out  # the field doc names the default algorithm
    field_doc = cluster.kubectl("explain", "elasticscaler.spec.minReplicas")
    assert "DESCRIPTION" in field_doc and len(field_doc.split("DESCRIPTION:", 1)[1].strip()) > 20
    # issue 8 item 9: boundBy is one enum, documented where a user looks
    bound_by = cluster.kubectl("explain", "elasticscaler.status.recentDecisions.boundBy")
    for step in ("RateLimit", "Stabilize", "StepLimit", "Clamp", "Guard", "Paused", "PausedReplicas"):
        assert step in bound_by, bound_by
    assert "Recommend" not in bound_by, bound_by
    # issue 8 item 7: HPA mode's behavior comes from the behavior.* annotations only
    assert "elasticscaler.io/behavior.*" in cluster.kubectl(
        "explain", "elasticscaler.spec.trigger.metricsTrigger.scalingAlgorithm"
    )


# issue 16: every new field is documented where a user looks (the CRD's description, kubectl explain)
BEYOND_THE_SEEDS_FIELDS = (
    ("elasticscaler.spec.trigger.metricsTrigger.activation", "activation"),
    ("elasticscaler.spec.trigger.metricsTrigger.activation.value", "0"),
    ("elasticscaler.spec.floorFrom", "Tidal"),
    ("elasticscaler.spec.floorFrom.name", "Tidal"),
    ("elasticscaler.spec.fallback", "failureThreshold"),
    ("elasticscaler.spec.fallback.replicas", "stabilization"),
    ("elasticscaler.spec.scaleDown.podDeletionCost", "pod-deletion-cost"),
    ("elasticscaler.spec.scaleDown.podDeletionCost.prometheus.query", "pod"),
    ("elasticscaler.spec.pollIntervalSeconds", "--min-poll-interval"),
    ("llmscaler.spec.floorFrom", "Tidal"),
    ("llmscaler.spec.fallback", "failureThreshold"),
    ("llmscaler.spec.pollIntervalSeconds", "--min-poll-interval"),
    ("tidal.spec.rules.excludeDates", "YYYY-MM-DD"),
)


@pytest.mark.parametrize(("path", "word"), BEYOND_THE_SEEDS_FIELDS,
                         ids=[p for p, _ in BEYOND_THE_SEEDS_FIELDS])
def test_beyond_the_seeds_fields_are_explained(cluster: Cluster, path: str, word: str) -> None:
    out = cluster.kubectl("explain", path)
    description = out.split("DESCRIPTION:", 1)[1].strip() if "DESCRIPTION:" in out else ""
    assert len(description) > 40 and word in out, out


def test_printer_columns(cluster: Cluster, namespace: str) -> None:
    for doc in load_samples().values():
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    out = cluster.kubectl("get", "es,tidal,rsg,llms,llmslo,jobslo", "-n", namespace)
    headers = [line.split() for line in out.splitlines() if line.startswith("NAME")]
    scaler = ["NAME", "TARGET", "MIN", "MAX", "CURRENT", "DESIRED", "ACTIVE", "ABLETOSCALE", "SCALING", "AGE"]
    assert headers.count(scaler) == 2, out  # es and llms
    # issue 11: "Active Rules" and "Next Transition" are two words each in the header
    tidal = ["NAME", "TARGET", "DESIRED", "ACTIVE", "RULES", "NEXT", "TRANSITION", "READY", "AGE"]
    assert tidal in headers, out
    assert ["NAME", "STRATEGY", "GROUPS", "READY", "AGE"] in headers, out
    assert headers.count(["NAME", "SERVICE", "REPLICAS", "REASON", "AGE"]) == 2, out
    rows = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.strip() and not line.startswith("NAME")
    }
    assert rows["elasticscaler.elasticscaler.io/llama-decode"][1:4] == ["llama-decode", "1", "10"], out


def test_cel_and_schema_rules_enforced_by_the_api_server_alone(cluster: Cluster, namespace: str) -> None:
    hooks = [h for h in cluster.kubectl_json("get", "validatingwebhookconfigurations")["items"]
             if "escaler" in h["metadata"]["name"] and serves_namespace(h, namespace)]
    assert not hooks, "this test must run without the webhook in its namespace"

    def dry_run(obj: dict[str, Any]) -> tuple[bool, str]:
        obj = in_namespace(obj, namespace)
        r = subprocess.run(
            [
                cluster.kubectl_bin,
                f"--kubeconfig={cluster.kubeconfig}",
                "create",
                "-n",
                namespace,
                "--dry-run=server",
                "-f",
                "-",
            ],
            input=json.dumps(obj),
            capture_output=True,
            text=True,
            timeout=60,
        )
        return r.returncode == 0, r.stdout + r.stderr

    assert len(MALFORMED) >= 40 and len({m.kind for m in MALFORMED}) == 6
    assert server_disagreements(dry_run) == []
    samples = load_samples()
    refused = [cid for cid, sample, changes, _ in WEBHOOK_ONLY + WARNED
               if not dry_run(_set_annotation_path(samples[sample], changes))[0]]
    assert refused == [], "refused without the webhook: move these to api_cases"


def test_invalid_objects_refused_fixed_ones_accepted(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    samples = load_samples()
    cases = all_cases()
    assert len(cases) >= 25 and len({s.split("/")[0] for _, s, _, _ in cases}) == 6
    failures: list[str] = []
    with manager_with_webhook(cluster, tmp_path, namespace=namespace) as mgr:
        # the webhook is live once a webhook-only mistake is refused
        probe = _unique(_set_annotation_path(samples[ES_M], {f"{MT}.scalingAlgorithm": "no-such-algo"}))

        def webhook_refuses() -> bool:
            ok, _ = submit(cluster, namespace, probe)
            if ok:
                cluster.kubectl("delete", "es", probe["metadata"]["name"], "-n", namespace, check=False)
            return not ok

        eventually(
            webhook_refuses,
            timeout=30,
            what=f"the webhook to take effect; manager log:\n{mgr.output()[-3000:]}",
        )

        for cid, sample, changes, path in cases:
            bad = _unique(_set_annotation_path(samples[sample], changes))
            ok, msg = submit(cluster, namespace, bad)
            if ok:
                failures.append(f"{cid}: accepted")
            elif path not in msg:
                failures.append(f"{cid}: {path!r} not in {msg!r}")
            fixed = _unique(samples[sample])
            ok, msg = submit(cluster, namespace, fixed)
            if not ok:
                failures.append(f"{cid}: fixed object refused: {msg}")
        # what the reconciler falls back on is accepted, with the webhook's warning (issue 28 item 6)
        for cid, sample, changes, warning in WARNED:
            ok, msg = submit(cluster, namespace, _unique(_set_annotation_path(samples[sample], changes)))
            if not ok:
                failures.append(f"{cid}: refused: {msg}")
            elif warning not in msg.splitlines():
                failures.append(f"{cid}: no {warning!r} in {msg!r}")
        # deletes are always allowed
        kinds = "es,tidal,rsg,llms,llmslo,jobslo"
        cluster.kubectl("delete", kinds, "--all", "-n", namespace)
        assert cluster.kubectl("get", kinds, "-n", namespace, "-o", "name").strip() == ""
        # an update that breaks a rule is refused too (UPDATE is matched)
        obj = _unique(samples[TIDAL])
        assert submit(cluster, namespace, obj)[0]
        r = subprocess.run(
            [
                cluster.kubectl_bin,
                f"--kubeconfig={cluster.kubeconfig}",
                "patch",
                "tidal",
                obj["metadata"]["name"],
                "-n",
                namespace,
                "--type=json",
                "-p",
                json.dumps([{"op": "replace", "path": "/spec/rules/0/start", "value": "0 9 * * *"}]),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode != 0 and "spec.rules[0].start" in r.stderr, r.stderr
    assert failures == [], "\n".join(failures)


# ---------------------------------------------------------------------------- issue 9: HTTP surfaces


@contextlib.contextmanager
def _secure_manager(
    cluster: Cluster, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path, dict[str, int]]]:
    ports = {"api": free_port(), "probes": free_port(), "metrics": free_port()}
    log = tmp_path / "manager.log"
    args = [sys.executable, "-m", "escaler", "manager", f"--kubeconfig={cluster.kubeconfig}",
            "--webhook-port=0", f"--api-bind-address=127.0.0.1:{ports['api']}",
            f"--health-probe-bind-address=127.0.0.1:{ports['probes']}",
            f"--metrics-bind-address=127.0.0.1:{ports['metrics']}", "--metrics-secure", "--log-format=json"]
    with open(log, "wb") as f:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        yield proc, log, ports
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _get(port: int, path: str, token: str | None = None, *, tls: bool = False,
         method: str = "GET", body: bytes | None = None) -> tuple[int, bytes, bytes]:
    """(status, body, DER of the server certificate or b"")."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    conn = (http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10) if tls
            else http.client.HTTPConnection("127.0.0.1", port, timeout=10))
    try:
        conn.request(method, path, body=body, headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        der = conn.sock.getpeercert(binary_form=True) if tls and conn.sock is not None else b""
        return resp.status, resp.read(), der or b""
    finally:
        conn.close()


def _sa_token(cluster: Cluster, ns: str, sa: str, audience: str | None) -> str:
    if cluster.kubectl("get", "serviceaccount", sa, "-n", ns, "-o", "name", check=False).strip() == "":
        cluster.kubectl("create", "serviceaccount", sa, "-n", ns)
    extra = ["--audience", audience] if audience else []
    return cluster.kubectl("create", "token", sa, "-n", ns, *extra).strip()


@pytest.mark.serial  # serial tier (docs/testing.md): its manager watches every namespace
def test_http_surfaces_tls_audience_rate_limit_and_secure_metrics(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    push = f"/signal/v1/namespaces/{namespace}/elasticscalers/any"
    role = f"metrics-reader-{uuid.uuid4().hex[:6]}"
    with _secure_manager(cluster, tmp_path) as (proc, log, ports):
        eventually(lambda: _probe_ok(ports["probes"]), timeout=60,
                   what=f"the manager to be ready; log:\n{log.read_text(errors='replace')[-3000:]}")
        # probes: no token (the kubelet has none)
        assert _get(ports["probes"], "/healthz")[0] == 200
        # the signal API: TLS by default, with the fingerprint the log names
        eventually(lambda: _api_up(ports["api"]), timeout=30, what="the API server")
        code, _, der = _get(ports["api"], "/healthz", tls=True)
        assert code == 200
        fingerprint = hashlib.sha256(der).hexdigest().upper()
        logged = re.findall(r"the API server has no serving certificate: serving a self-signed one "
                            r"\(SHA-256 fingerprint ([0-9A-F:]{95})", log.read_text(errors="replace"))
        assert [f.replace(":", "") for f in logged] == [fingerprint], logged
        with socket.create_connection(("127.0.0.1", ports["api"]), timeout=10) as plain:
            plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            plain.settimeout(10)
            with contextlib.suppress(OSError):
                assert not plain.recv(100).startswith(b"HTTP/1.1 200")
        # only tokens for the escaler audience; the right audience without RBAC is a 403
        api_audience = _sa_token(cluster, namespace, "gateway", None)
        assert _get(ports["api"], push, api_audience, tls=True, method="POST", body=b"{}")[0] == 401
        escaler_audience = _sa_token(cluster, namespace, "gateway", "escaler")
        assert _get(ports["api"], push, escaler_audience, tls=True, method="POST", body=b"{}")[0] == 403
        # a flood of bad tokens from one client: 401s, then 429 without asking the API server
        codes = [_get(ports["api"], push, f"bad-{i}", tls=True, method="POST", body=b"{}")[0]
                 for i in range(15)]
        assert codes[:9] == [401] * 9 and 429 in codes, codes
        # /metrics: over HTTPS (a scraper's token never in clear), 401 without a token, 403
        # without RBAC, 200 once allowed get on /metrics
        code, _, der = _get(ports["metrics"], "/metrics", tls=True)
        assert code == 401
        logged = re.findall(r"secure /metrics has no serving certificate: serving a self-signed one "
                            r"\(SHA-256 fingerprint ([0-9A-F:]{95})", log.read_text(errors="replace"))
        assert [f.replace(":", "") for f in logged] == [hashlib.sha256(der).hexdigest().upper()], logged
        with contextlib.suppress(OSError, http.client.HTTPException):
            assert _get(ports["metrics"], "/metrics")[0] != 401, "secure /metrics answered plain HTTP"
        scraper = _sa_token(cluster, namespace, "scraper", None)
        assert _get(ports["metrics"], "/metrics", scraper, tls=True)[0] == 403
        cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                       "metadata": {"name": role},
                       "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]})
        try:
            cluster.kubectl("create", "clusterrolebinding", role, f"--clusterrole={role}",
                            f"--serviceaccount={namespace}:scraper")
            eventually(lambda: _get(ports["metrics"], "/metrics", scraper, tls=True)[0] == 200, timeout=40,
                       what="the scraper allowed once the cached denial expires")
            assert b"controller_runtime_reconcile_total" in _get(ports["metrics"], "/metrics", scraper,
                                                                 tls=True)[1]
        finally:
            cluster.kubectl("delete", "clusterrolebinding,clusterrole", role, check=False)
        assert proc.poll() is None


def _probe_ok(port: int) -> bool:
    with contextlib.suppress(OSError, http.client.HTTPException):
        return _get(port, "/readyz")[0] == 200
    return False


def _api_up(port: int) -> bool:
    with contextlib.suppress(OSError, http.client.HTTPException):
        return _get(port, "/healthz", tls=True)[0] == 200
    return False
