"""Issue 27 item 8 on the real API server: serving certificates clients can verify.

A manager started with ``--serving-cert-secret NS/escaler-serving-cert`` creates that
``kubernetes.io/tls`` Secret (a CA in ``ca.crt``, a serving certificate it signed) and publishes the
CA in the ConfigMap ``escaler-ca`` (``--serving-cert-ca-configmap``); a client that
trusts only that ``ca.crt`` and checks the server name reaches the API server's HTTPS port and
secure ``/metrics`` (a wrong name is refused by the client). A second start reuses the same
certificate: the Secret is not written again and the same certificate is served.

With ``--webhook-configuration`` the manager also sets the caBundle of its webhook configuration,
registered here without one: the real API server then calls the webhook (it refuses a
webhook-only mistake), which it can only do after verifying the manager's certificate with the
CA the manager put there.

On the code before this change (``ESCALER_E2E_SRC`` pointing at it) the manager refuses the
unknown ``--serving-cert-secret`` flag and exits 2.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, eventually
from .es_helpers import external_metric, metrics_trigger, scaler, start_manager
from .tls_helpers import SERVING_SECRET, configmap_ca, verified_get
from .webhook import free_port, manager_with_webhook, submit

pytestmark = pytest.mark.e2e

SECRET = SERVING_SECRET


def _secret(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    out = cluster.kubectl("get", "secret", SECRET, "-n", namespace, "-o", "json", check=False)
    return json.loads(out) if out.strip().startswith("{") else None


def _up(port: int, ca_pem: bytes, name: str) -> bool:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return verified_get(port, "/healthz", ca_pem, name)[0] == 200
    return False


def test_the_manager_serves_a_certificate_clients_verify_and_reuses_it(
        cluster: Cluster, namespace: str, tmp_path: Path, managers: list[Any]) -> None:
    name = f"escaler-manager.{namespace}.svc"
    metrics_port = free_port()
    flags = [f"--serving-cert-secret={namespace}/{SECRET}", "--serving-cert-ca-configmap=escaler-ca",
             f"--serving-cert-dns-names={name},escaler-manager-metrics.{namespace}.svc",
             "--metrics-secure", f"--metrics-bind-address=127.0.0.1:{metrics_port}"]
    served: list[bytes] = []
    versions: list[str] = []
    for run in ("first", "second"):
        mgr = start_manager(cluster, tmp_path, user=f"serving-certs-{run}", namespace=namespace,
                            extra_args=flags)
        managers.append(mgr)
        api_port = int(mgr.api.rsplit(":", 1)[1])
        eventually(lambda m=mgr: not m.alive() or _secret(cluster, namespace) is not None, timeout=60,
                   what="the Secret")
        assert mgr.alive(), mgr.output()
        secret = _secret(cluster, namespace)
        assert secret is not None and secret["type"] == "kubernetes.io/tls"
        assert {"ca.crt", "ca.key", "tls.crt", "tls.key"} <= set(secret["data"])
        ca = base64.b64decode(secret["data"]["ca.crt"])
        eventually(lambda p=api_port, c=ca: _up(p, c, name), timeout=60,
                   what=f"the API server over verified TLS; log:\n{mgr.output()}")
        code, der = verified_get(api_port, "/healthz", ca, name)
        assert code == 200
        # secure /metrics, verified the same way: reached, and it asks for a token
        metrics_code, metrics_der = verified_get(metrics_port, "/metrics", ca,
                                               f"escaler-manager-metrics.{namespace}.svc")
        assert metrics_code == 401 and metrics_der == der
        # a name the certificate does not cover is refused by the client
        with pytest.raises(ssl.SSLCertVerificationError):
            verified_get(api_port, "/healthz", ca, "elsewhere.example")
        # the CA published for clients that may not read the Secret
        eventually(lambda c=ca: configmap_ca(cluster, namespace) == c, timeout=30,
                   what=f"the ConfigMap escaler-ca; log:\n{mgr.output()}")
        served.append(der)
        versions.append(secret["metadata"]["resourceVersion"])
        assert mgr.stop() == 0
    # the second manager adopted the Secret: same certificate, no write
    assert served[0] == served[1]
    assert versions[0] == versions[1]


def test_the_api_server_calls_the_webhook_through_the_ca_bundle_the_manager_set(
        cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    with manager_with_webhook(cluster, tmp_path, namespace=namespace,
                              serving_secret=f"{namespace}/{SECRET}") as mgr:
        probe = scaler("probe", "web",
                       metrics_trigger(external_metric("queue"), algorithm="no-such-algorithm"))

        def refused() -> bool:
            ok, _ = submit(cluster, namespace, probe)
            if ok:
                cluster.kubectl("delete", "es", "probe", "-n", namespace, check=False)
            return not ok

        eventually(refused, timeout=60, what=f"the webhook to take effect; log:\n{mgr.output()[-3000:]}")
        ok, message = submit(cluster, namespace, probe)
        assert not ok and "no-such-algorithm" in message, message
        secret = _secret(cluster, namespace)
        assert secret is not None
        config = cluster.kubectl_json("get", "validatingwebhookconfiguration",
                                      f"escaler-validating-webhook-{namespace}")
        bundles = {h["clientConfig"].get("caBundle") for h in config["webhooks"]}
        assert bundles == {secret["data"]["ca.crt"]}
