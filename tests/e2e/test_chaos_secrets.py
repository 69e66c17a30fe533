"""Secrets stay secret (issue 15, "Secrets stay secret"), on the real control plane.

One run uses every credential the product handles:

* an ElasticScaler whose ExternalServer Prometheus query (https, the fake Prometheus requiring
  ``Authorization: Bearer <token>``) takes its token from a labelled Secret
  (``bearerTokenSecretRef``); the Secret is then rotated to a wrong token (the server answers 401,
  the condition says so) and back;
* signal pushes to the manager's signal API: with a ServiceAccount token allowed to push (202),
  one without RBAC (403) and a made-up token (401);
* the SLO API with ``--auth token``: an owner's token (200), a stranger's (403), a made-up one (401).

Then every place a secret could leak is read: the manager's and the SLO API's whole logs (debug
level), every Event of the namespace, the status of every object, and the manager's ``/metrics``
exposition. None holds a token, the Secret's values (or the signature part of a ServiceAccount
token, in case a token were cut), ``Authorization`` or ``Bearer <anything>``.

Reduced and full forms are the same (one pass; it is not a repetition test). Reports
(``record_property``): ``runs``, ``passed``, ``peak_rss_mib`` (the manager's).
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, PrometheusServer, eventually
from .es_helpers import (
    Manager,
    apply,
    cond,
    deployment,
    es,
    peak_rss_mib,
    replicas,
    scaler,
    start_manager,
)
from .sloapi_helpers import SLOApi, bind_owner, llm_slo, route_path, sa_token, slo_api_token, start_slo_api
from .webhook import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

# the manager's API certificate is self-signed here (no --api-cert-dir)
_UNVERIFIED = ssl.create_default_context()
_UNVERIFIED.check_hostname = False
_UNVERIFIED.verify_mode = ssl.CERT_NONE


def _push(api: str, ns: str, name: str, token: str) -> int:
    req = urllib.request.Request(
        f"{api}/signal/v1/namespaces/{ns}/elasticscalers/{name}", data=json.dumps({"active": True}).encode(),
        method="POST", headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10, context=_UNVERIFIED) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10, context=_UNVERIFIED) as r:
        return str(r.read().decode())


def prom_trigger(url: str, query: str) -> dict[str, Any]:
    return {"type": "MetricsTrigger", "metricsTrigger": {"scalingAlgorithm": "apa", "metrics": [{
        "type": "ExternalServer", "externalServer": {
            "endpoint": url, "query": query, "timeoutSeconds": 2,
            "bearerTokenSecretRef": {"name": "prom", "key": "token"},
            "target": {"type": "AverageValue", "averageValue": "10"}}}]}}


def set_secret(cluster: Cluster, ns: str, token: str) -> None:
    # opted in as a bearer token for the fake Prometheus' hosts (escaler.signals.bearer)
    cluster.apply({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "prom", "namespace": ns,
                                "labels": {"elasticscaler.io/bearer-token": "true"},
                                "annotations": {
                                    "elasticscaler.io/bearer-token-hosts": "localhost, 127.0.0.1"}},
                   "stringData": {"token": token, "password": f"pw-{token}"}})


def leaks(text: str, secrets: dict[str, str]) -> list[str]:
    """What of ``secrets`` (name → value) or of an Authorization header ``text`` holds."""
    found = [name for name, value in secrets.items() if value in text]
    found += [f"signature of {name}" for name, value in secrets.items()
              if value.count(".") == 2 and value.rsplit(".", 1)[1][:24] in text]
    if "Authorization" in text or "authorization:" in text.lower():
        found.append("Authorization")
    found += [f"Bearer {m[:12]}..." for m in re.findall(r"Bearer\s+(\S+)", text)]
    return found


def test_no_token_secret_or_authorization_header_leaks(
        cluster: Cluster, namespace: str, managers: list[Manager], slo_apis: list[SLOApi],
        tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    ns = namespace
    record_property("runs", 1)
    pki = cluster.require_local().pki
    secrets = {"prometheus token": f"prom-tok-{uuid.uuid4().hex}",
               "rotated wrong token": f"wrong-tok-{uuid.uuid4().hex}",
               "made-up push token": f"made-up-{uuid.uuid4().hex}",
               "made-up SLO API token": f"made-up-slo-{uuid.uuid4().hex}"}
    secrets["Secret's other key"] = f"pw-{secrets['prometheus token']}"
    prom = PrometheusServer(cert_file=pki / "metrics-server.crt", key_file=pki / "metrics-server.key",
                            required_token=secrets["prometheus token"]).start()
    metrics_port = free_port()
    mgr = start_manager(cluster, tmp_path, user="chaos-secrets", namespace=ns,
                        extra_args=[f"--metrics-bind-address=127.0.0.1:{metrics_port}", "--log-level=debug"],
                        extra_env={"SSL_CERT_FILE": str(pki / "ca.crt")})
    managers.append(mgr)
    try:
        _exercise(cluster, ns, mgr, prom, secrets, slo_apis, tmp_path)
    finally:
        prom.stop()
    # every place a secret could go
    places: dict[str, str] = {
        "manager log": mgr.log.read_text(errors="replace"),
        "SLO API log": slo_apis[0].log.read_text(errors="replace"),
        "Events": cluster.kubectl("get", "events", "-n", ns, "-o", "json")
        + cluster.kubectl("get", "events.events.k8s.io", "-n", ns, "-o", "json"),
        "/metrics": _get(f"http://127.0.0.1:{metrics_port}/metrics"),
    }
    for kind in ("elasticscalers", "llmslorequirements"):
        for obj in cluster.kubectl_json("get", kind, "-n", ns)["items"]:
            places[f"{kind}/{obj['metadata']['name']} status"] = json.dumps(obj.get("status") or {})
    assert places["/metrics"].count("\n") > 50 and "escaler_" in places["/metrics"], places["/metrics"][:500]
    # the places searched hold the run: the 401 of the rotated token, the refused SLO API calls
    assert "401" in places["Events"], "no Event of the refused token to search"
    assert len(places["manager log"]) > 20_000, len(places["manager log"])
    slo_log = places["SLO API log"]
    assert all(f'\\" {code}' in slo_log for code in (200, 401, 403)), slo_log[-1500:]
    assert prom.queries, "the Prometheus with the token was never queried"
    # the detector itself finds a header, a token and a cut token
    tok = secrets["push token"]
    assert len(leaks(f"Authorization: Bearer {tok}", secrets)) >= 3 and leaks(tok.rsplit(".", 1)[1], secrets)
    found = {where: leaks(text, secrets) for where, text in places.items()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}
    assert mgr.alive(), mgr.output()
    record_property("peak_rss_mib", peak_rss_mib(mgr.proc.pid))
    record_property("passed", 1)


def _exercise(cluster: Cluster, ns: str, mgr: Manager, prom: PrometheusServer, secrets: dict[str, str],
              slo_apis: list[SLOApi], tmp_path: Path) -> None:
    # 1. a Prometheus query with a bearer token from a labelled Secret
    set_secret(cluster, ns, secrets["prometheus token"])
    q = f'load{{namespace="{ns}"}}'
    prom.set(q, 40)  # 40 / 10 → 4
    apply(cluster, ns, deployment("tok", 2))
    apply(cluster, ns, scaler("tok", "tok", prom_trigger(prom.url, q),
                              annotations={"elasticscaler.io/metrics.windowSeconds": "4"}))
    eventually(lambda: replicas(cluster, ns, "tok") == 4, timeout=60,
               what=f"scaled with the token; {cond(es(cluster, ns, 'tok'), 'ScalingActive')}; "
                    f"log:\n{mgr.output(1500)}")
    # rotated to a wrong token: the server refuses it, the condition says so (and nothing of the token)
    set_secret(cluster, ns, secrets["rotated wrong token"])
    eventually(lambda: "401" in cond(es(cluster, ns, "tok"), "ScalingActive")[2], timeout=60,
               what=f"a 401 reported; {cond(es(cluster, ns, 'tok'), 'ScalingActive')}")
    set_secret(cluster, ns, secrets["prometheus token"])
    eventually(lambda: cond(es(cluster, ns, "tok"), "ScalingActive")[:2] == ("True", "MetricsAvailable"),
               timeout=60, what="the token back in use")
    # 2. signal pushes: allowed (202), no RBAC (403), a made-up token (401)
    apply(cluster, ns, deployment("push", 0))
    apply(cluster, ns, scaler("push", "push", {"type": "SignalTrigger", "signalTrigger": {
        "idleTimeoutSeconds": 30, "activationReplicas": 1}}, minr=0, maxr=3))
    cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "signal", "namespace": ns},
                   "rules": [{"apiGroups": ["elasticscaler.io"], "resources": ["elasticscalers/signal"],
                              "verbs": ["update"]}]})
    pusher = sa_token(cluster, ns, "gateway")
    nobody = sa_token(cluster, ns, "nobody")
    secrets["push token"], secrets["unauthorized push token"] = pusher, nobody
    cluster.kubectl("create", "rolebinding", "signal", "-n", ns, "--role=signal",
                    f"--serviceaccount={ns}:gateway")
    eventually(lambda: _push(mgr.api, ns, "push", pusher) == 202, timeout=60,
               what=f"an authorized push; log:\n{mgr.output(1500)}")
    eventually(lambda: replicas(cluster, ns, "push") == 1, timeout=30, what="0 → 1 on the push")
    assert _push(mgr.api, ns, "push", nobody) == 403
    assert _push(mgr.api, ns, "push", secrets["made-up push token"]) == 401
    # 3. the SLO API with auth on
    apply(cluster, ns, llm_slo("chat-cr", "chat-llama"))
    api = start_slo_api(cluster, tmp_path, namespace=ns, auth="token")
    slo_apis.append(api)
    owner, stranger = slo_api_token(cluster, ns, "owner"), slo_api_token(cluster, ns, "stranger")
    secrets["SLO owner token"], secrets["SLO stranger token"] = owner, stranger
    bind_owner(cluster, ns, "owner")
    chat = route_path(ns, "chat-llama")
    eventually(lambda: api.call("GET", chat, token=owner).status_code == 200, timeout=30,
               what="the owner allowed")
    assert api.call("PUT", chat, token=owner, json={"highPriority": True}).status_code == 200
    assert api.call("GET", "/config", token=stranger).status_code == 403
    assert api.call("GET", "/config", token=secrets["made-up SLO API token"]).status_code == 401
