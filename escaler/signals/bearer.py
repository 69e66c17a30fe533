"""Bearer tokens from Secrets (ExternalServer ``bearerTokenSecretRef``), read only when they opt in.

A scaler names a Secret in its own namespace, and the manager — which may read Secrets there —
sends its value to the scaler's endpoint. Without a rule, anyone who can create a scaler but not
read Secrets could have the manager send any Secret of the namespace to a server they own.

Contract of ``secret_key_reader(dynamic)(namespace, name, key)``:

* reads the Secret at every call (a rotated token is used at the next query);
* refuses, without returning any value, a Secret that does not carry the label
  ``elasticscaler.io/bearer-token: "true"`` (``BEARER_TOKEN_LABEL``): putting the label on is
  the Secret owner's consent to its use as a bearer token by any scaler of the namespace;
* returns the key's value, base64-decoded as UTF-8 and stripped of surrounding whitespace;
* raises (``StatusError`` from the API, ``KeyError``, ``ValueError``) with a message naming the
  Secret, the key and the rule, never the value.

That the token then travels only over ``https://`` is ``escaler.signals.fetch``'s rule (and the
collector's, before it reads the Secret). RBAC: ``get`` on Secrets, granted by one Role per
namespace that uses bearer tokens — never cluster-wide (``manifests/rbac/manager.yaml``).
"""

from __future__ import annotations

import base64
from collections.abc import Callable

from escaler.kube.dynamic import DynamicClient

__all__ = ["BEARER_TOKEN_LABEL", "BEARER_TOKEN_LABEL_VALUE", "secret_key_reader"]

BEARER_TOKEN_LABEL = "elasticscaler.io/bearer-token"
BEARER_TOKEN_LABEL_VALUE = "true"


def secret_key_reader(dynamic: DynamicClient) -> Callable[[str, str, str], str]:
    """Reads one key of an opted-in Secret (see the module docstring)."""

    def read(namespace: str, name: str, key: str) -> str:
        secret = dynamic.get(("v1", "Secret"), name, namespace=namespace)
        labels = (secret.get("metadata") or {}).get("labels") or {}
        if labels.get(BEARER_TOKEN_LABEL) != BEARER_TOKEN_LABEL_VALUE:
            raise PermissionError(
                f"Secret {namespace}/{name} is not labelled {BEARER_TOKEN_LABEL}: "
                f"\"{BEARER_TOKEN_LABEL_VALUE}\"; only Secrets that opt in are used as bearer tokens "
                f"(kubectl label secret -n {namespace} {name} "
                f"{BEARER_TOKEN_LABEL}={BEARER_TOKEN_LABEL_VALUE})")
        data = secret.get("data") or {}
        if key not in data:
            raise KeyError(f"Secret {namespace}/{name} has no key {key!r}")
        try:
            return base64.b64decode(str(data[key]), validate=True).decode("utf-8").strip()
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(f"Secret {namespace}/{name} key {key!r} is not base64 UTF-8 text") from err

    return read
