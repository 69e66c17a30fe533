"""E2E helpers: HTTPS the way a client that verifies does it.

``verified_get(port, path, ca_pem, server_name)`` connects to ``127.0.0.1:port`` (where the test's
servers listen) but verifies the certificate as a client calling ``server_name`` would: trusting
only ``ca_pem`` and checking the name (SNI and hostname check), so a Service name the certificate
must cover can be tested without cluster DNS. It returns ``(status, DER of the certificate)`` and
raises ``ssl.SSLCertVerificationError`` when the certificate does not verify. ``configmap_ca``
reads the CA the manager publishes for clients.
"""

from __future__ import annotations

import json
import socket
import ssl
from typing import Any

SERVING_SECRET = "escaler-serving-cert"
CA_CONFIGMAP = "escaler-ca"


def configmap_ca(cluster: Any, namespace: str, name: str = CA_CONFIGMAP) -> bytes | None:
    """The ``ca.crt`` of the ConfigMap the manager publishes its CA in; None while there is none."""
    out = cluster.kubectl("get", "configmap", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(out)["data"]["ca.crt"].encode() if out.strip().startswith("{") else None


def verified_get(port: int, path: str, ca_pem: bytes, server_name: str) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=server_name) as tls:
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {server_name}\r\nConnection: close\r\n\r\n".encode())
        der = tls.getpeercert(binary_form=True) or b""
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]), der
