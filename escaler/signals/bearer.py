"""Bearer tokens from Secrets (ExternalServer ``bearerTokenSecretRef``), read only when they opt in.

A scaler names a Secret in its own namespace, and the manager — which may read Secrets there —
sends its value to the scaler's endpoint. Without a rule, anyone who can create a scaler but not
read Secrets could have the manager send any Secret of the namespace to a server they own.

Contract of ``secret_key_reader(dynamic, informers=None)(namespace, name, key, host)``:

* reads the Secret at every call (a rotated token is used at the next query): with ``informers``
  (the manager's ``DynamicInformers``) from a **label-selected cache** of the namespace's Secrets
  — only Secrets labelled ``elasticscaler.io/bearer-token=true`` are ever listed, watched or
  held in memory — started on the first query of a namespace and kept while the manager runs
  (one informer per namespace that uses bearer tokens). A token read from that cache costs no
  API request. A cache that has not listed yet, or that does not hold the Secret (it is absent,
  or not labelled), falls back to one GET, so a lagging cache never reads as a missing Secret and
  the error says which of the two it is; without ``informers`` every call is a GET;
* refuses, without returning any value, a Secret that does not carry the label
  ``elasticscaler.io/bearer-token: "true"`` (``BEARER_TOKEN_LABEL``) **and** the annotation
  ``elasticscaler.io/bearer-token-hosts`` (``BEARER_TOKEN_HOSTS_ANNOTATION``: a comma list of
  host names, or ``*.suffix`` patterns, as ``--allowed-endpoint-hosts`` reads them) listing
  ``host``, the endpoint's host: label and annotation together are the Secret owner's consent to
  its use as a bearer token by any scaler of the namespace, **towards those hosts only** (a scaler
  writer cannot have the token sent to a server of their own). A Secret that does not exist, is
  not labelled, or does not list the host gets one and the same ``PermissionError`` (naming the
  Secret, the host and the rule, never the annotation's list), so the refusal does not tell a
  scaler writer which Secrets exist;
* returns the key's value, base64-decoded as UTF-8 and stripped of surrounding whitespace;
* raises (``StatusError`` from the API, ``KeyError``, ``ValueError``) with a message naming the
  Secret, the key and the rule, never the value.

That the token then travels only over ``https://`` is ``escaler.signals.fetch``'s rule (and the
collector's, before it reads the Secret). RBAC: ``get``, ``list`` and ``watch`` on Secrets (the
list and watch are label-selected by the manager), granted by one Role per namespace that uses
bearer tokens — never cluster-wide (``manifests/rbac/bearer-tokens.yaml``).
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from escaler.errors import StatusError, is_not_found
from escaler.informers.factory import ResourceKey
from escaler.kube.dynamic import DynamicClient
from escaler.scaling.endpoints import host_allowed

__all__ = ["BEARER_TOKEN_HOSTS_ANNOTATION", "BEARER_TOKEN_LABEL", "BEARER_TOKEN_LABEL_VALUE",
           "BEARER_TOKEN_SELECTOR", "secret_key_reader", "secrets_key"]

BEARER_TOKEN_LABEL = "elasticscaler.io/bearer-token"
BEARER_TOKEN_LABEL_VALUE = "true"
BEARER_TOKEN_HOSTS_ANNOTATION = "elasticscaler.io/bearer-token-hosts"
# the label selector of the bearer-token Secret caches
BEARER_TOKEN_SELECTOR = f"{BEARER_TOKEN_LABEL}={BEARER_TOKEN_LABEL_VALUE}"


class _Registration(Protocol):
    @property
    def informer(self) -> Any: ...


class Informers(Protocol):
    """What the reader needs of ``escaler.informers.dynamic.DynamicInformers``."""

    def register(self, key: ResourceKey, handler: Any) -> Any: ...


class _NoEvents:
    """The cache's handler: a token is read when a query needs it, so events wake nobody."""

    def on_add(self, obj: Any, is_in_initial_list: bool) -> None:
        pass

    def on_update(self, old: Any, new: Any) -> None:
        pass

    def on_delete(self, obj: Any) -> None:
        pass


def secrets_key(namespace: str) -> ResourceKey:
    """The informer key of ``namespace``'s opted-in Secrets."""
    return ResourceKey("", "v1", "secrets", namespace=namespace, label_selector=BEARER_TOKEN_SELECTOR)


class _Caches:
    """One label-selected Secret informer per namespace, registered on first use."""

    def __init__(self, informers: Informers) -> None:
        # the manager's DynamicInformers; fixed
        self._informers = informers
        # guards _regs
        self._mu = threading.Lock()
        # namespace → the registration holding its informer (kept while the manager runs)
        self._regs: dict[str, _Registration] = {}

    def cached(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        with self._mu:
            reg = self._regs.get(namespace)
            if reg is None:
                # registering starts the informer's thread; it never waits for the list
                reg = self._regs[namespace] = self._informers.register(secrets_key(namespace), _NoEvents())
        if not reg.informer.has_synced():  # the store has listed (no handler needs to catch up)
            return None
        found = reg.informer.store.get_by_key(f"{namespace}/{name}")
        return found if isinstance(found, Mapping) else None


def _refusal(namespace: str, name: str, host: str) -> PermissionError:
    """The one refusal of a Secret that is missing, not opted in, or not for ``host``."""
    return PermissionError(
        f"Secret {namespace}/{name} is not a bearer token for host {host}: a Secret is used only when "
        f"it exists, is labelled {BEARER_TOKEN_LABEL}: \"{BEARER_TOKEN_LABEL_VALUE}\" and its annotation "
        f"{BEARER_TOKEN_HOSTS_ANNOTATION} lists the endpoint's host (kubectl label secret -n {namespace} "
        f"{name} {BEARER_TOKEN_LABEL}={BEARER_TOKEN_LABEL_VALUE}; kubectl annotate secret -n {namespace} "
        f"{name} {BEARER_TOKEN_HOSTS_ANNOTATION}={host})")


def _consents(secret: Mapping[str, Any], host: str) -> bool:
    meta = secret.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(BEARER_TOKEN_LABEL) != BEARER_TOKEN_LABEL_VALUE:
        return False
    hosts = str((meta.get("annotations") or {}).get(BEARER_TOKEN_HOSTS_ANNOTATION) or "")
    patterns = [p.strip().lower() for p in hosts.split(",") if p.strip()]
    return bool(patterns) and host_allowed(host, patterns)


def _value(secret: Mapping[str, Any] | None, namespace: str, name: str, key: str, host: str) -> str:
    if secret is None or not _consents(secret, host):
        raise _refusal(namespace, name, host)
    data = secret.get("data") or {}
    if key not in data:
        raise KeyError(f"Secret {namespace}/{name} has no key {key!r}")
    try:
        return base64.b64decode(str(data[key]), validate=True).decode("utf-8").strip()
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"Secret {namespace}/{name} key {key!r} is not base64 UTF-8 text") from err


def secret_key_reader(dynamic: DynamicClient, *,
                      informers: Informers | None = None) -> Callable[[str, str, str, str], str]:
    """Reads one key of an opted-in Secret for ``host`` (see the module docstring)."""
    caches = _Caches(informers) if informers is not None else None

    def read(namespace: str, name: str, key: str, host: str) -> str:
        secret = caches.cached(namespace, name) if caches is not None else None
        if secret is None:
            try:
                secret = dynamic.get(("v1", "Secret"), name, namespace=namespace)
            except StatusError as err:
                if not is_not_found(err):
                    raise
                secret = None  # refused exactly as a Secret that is not opted in
        return _value(secret, namespace, name, key, host)

    return read
