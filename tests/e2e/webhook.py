"""E2E helpers: run ``python -m escaler manager`` with its validating webhook and register it in
the real API server.

The manager is a subprocess, exactly as a user runs it (the ``escaler`` package of
``ESCALER_E2E_SRC`` when set, so a regression test can watch the old code fail); its serving
certificate comes from ``hack/webhook-certs.sh`` (or its own Secret: ``serving_secret``); the
shipped ``manifests/webhook/`` configuration is applied with each webhook's ``clientConfig``
pointed at the manager's loopback URL (the API server runs on this machine, so no Service is
needed) and the CA bundle patched in (by the manager itself with ``serving_secret``).
"""

from __future__ import annotations

import base64
import copy
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .conftest import ROOT, Cluster, eventually, source_dir
from .conftest import free_port as cluster_free_port

WEBHOOK_CONFIG = ROOT / "manifests" / "webhook" / "validating-webhook-configuration.yaml"


# the label the API server puts on every namespace, naming it
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _config_name(name: str, namespace: str | None) -> str:
    return f"{name}-{namespace}" if namespace else name


def serves_namespace(config: dict[str, Any], namespace: str) -> bool:
    """Whether a webhook of ``config`` (a ValidatingWebhookConfiguration) can be called for an object
    in ``namespace``: one without a namespaceSelector serves every namespace; one registered by
    ``manager_with_webhook(namespace=...)`` serves only its own."""
    for hook in config.get("webhooks") or []:
        sel = hook.get("namespaceSelector") or {}
        if not sel or sel.get("matchExpressions"):
            return True
        if (sel.get("matchLabels") or {}).get(NAMESPACE_NAME_LABEL, namespace) == namespace:
            return True
    return False


def free_port() -> int:
    """A free loopback port outside the ephemeral range (``hack/cluster.py``'s ``free_port``)."""
    return int(cluster_free_port())


@dataclass
class ManagerProcess:
    proc: subprocess.Popen[bytes]
    log: Path
    webhook_port: int

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def manager_with_webhook(cluster: Cluster, workdir: Path, *extra: str,
                         namespace: str | None = None, user: str | None = None,
                         serving_secret: str | None = None) -> Iterator[ManagerProcess]:
    """The manager with its webhook, registered with the shipped configuration. With ``namespace``
    (the parallel tier, docs/testing.md) the manager watches only that namespace and the
    configuration, renamed ``<name>-<namespace>``, serves only it (a ``namespaceSelector`` on its
    name label), so tests running beside it never meet this webhook; without, it serves every
    namespace (a serial test). With ``user`` (the local control plane only) the manager runs as that
    client-certificate user, so the shared audit log tells its writes apart; without, as the admin.

    With ``serving_secret`` (``NAMESPACE/NAME``) the manager makes its own serving certificate in
    that Secret (``--serving-cert-secret``, for 127.0.0.1, the address the API server calls) and sets
    the configuration's caBundle itself (``--webhook-configuration``): it is registered without one.
    Without, the certificate comes from ``hack/webhook-certs.sh`` and its CA is registered here."""
    certs = workdir / "webhook-certs"
    ca: str | None = None
    config_names = [_config_name(d["metadata"]["name"], namespace)
                    for d in yaml.safe_load_all(WEBHOOK_CONFIG.read_text()) if d]
    if serving_secret is None:
        subprocess.run(
            ["bash", str(ROOT / "hack" / "webhook-certs.sh"), str(certs)], check=True, capture_output=True
        )
        ca = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
        tls_args = [f"--webhook-cert-dir={certs}"]
    else:
        [config_name] = config_names
        tls_args = [f"--serving-cert-secret={serving_secret}", "--serving-cert-dns-names=127.0.0.1",
                    f"--webhook-configuration={config_name}"]
    port = free_port()
    log = workdir / "manager.log"
    kubeconfig = cluster.require_local().user_kubeconfig(user) if user else cluster.kubeconfig
    src = source_dir()
    args = [
        sys.executable,
        "-m",
        "escaler",
        "manager",
        f"--kubeconfig={kubeconfig}",
        f"--webhook-port={port}",
        *tls_args,
        "--metrics-bind-address=127.0.0.1:0",
        "--health-probe-bind-address=127.0.0.1:0",
        "--api-bind-address=127.0.0.1:0",
        *([f"--namespace={namespace}"] if namespace else []),
        *extra,
    ]
    with open(log, "wb") as f:
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)}
        proc = subprocess.Popen(args, cwd=src, stdout=f, stderr=subprocess.STDOUT, env=env)
    mp = ManagerProcess(proc, log, port)
    names = config_names
    try:
        docs = [d for d in yaml.safe_load_all(WEBHOOK_CONFIG.read_text()) if d]
        for doc in docs:
            cfg = copy.deepcopy(doc)
            cfg["metadata"]["name"] = _config_name(doc["metadata"]["name"], namespace)
            for hook in cfg["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}"}
                if ca is not None:
                    hook["clientConfig"]["caBundle"] = ca
                if namespace:
                    hook["namespaceSelector"] = {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}
            cluster.apply(cfg)
        eventually(
            lambda: proc.poll() is None and _serving(port),
            timeout=30,
            what=f"the manager's webhook on :{port}; log:\n{mp.output()[-2000:]}",
        )
        yield mp
    finally:
        for name in names:
            cluster.kubectl(
                "delete",
                "validatingwebhookconfiguration",
                name,
                "--ignore-not-found",
                check=False,
            )
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _serving(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def in_namespace(obj: Any, namespace: str) -> Any:
    """``obj`` with the shipped samples' ``namespace="default"`` PromQL matchers naming ``namespace``:
    what a user edits to apply a sample elsewhere (tenant PromQL reads only its own namespace)."""
    if isinstance(obj, str):
        return obj.replace('namespace="default"', f'namespace="{namespace}"')
    if isinstance(obj, dict):
        return {k: in_namespace(v, namespace) for k, v in obj.items()}
    if isinstance(obj, list):
        return [in_namespace(v, namespace) for v in obj]
    return obj


def submit(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> tuple[bool, str]:
    """``kubectl create`` the object as a user would (a sample's PromQL naming ``namespace``:
    ``in_namespace``); (accepted, kubectl's message)."""
    import json

    obj = in_namespace(obj, namespace)

    r = subprocess.run(
        [cluster.kubectl_bin, f"--kubeconfig={cluster.kubeconfig}", "create", "-n", namespace, "-f", "-"],
        input=json.dumps(obj),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return r.returncode == 0, (r.stdout + r.stderr).strip()
