"""Where the API server is and how to authenticate: one new ``Configuration`` per manager.

Contract:

* ``load_config`` returns a **new** ``kubernetes.client.Configuration`` every call and never reads
  or writes the client library's process-wide default (``Configuration.set_default``), so two
  managers in one process (or a test and the code under test) cannot leak settings into each other.
* Sources are tried in this order; the first one that is *present* is used, and if it is present
  but broken its error is raised (we do not silently fall back past a configuration the user
  pointed at):

  1. the explicit ``kubeconfig`` path (must exist);
  2. ``$KUBECONFIG`` (a ``:``-separated list, merged as kubectl does; used when any file exists);
  3. in-cluster: ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT`` plus the service-account
     token and CA under ``/var/run/secrets/kubernetes.io/serviceaccount`` (the token is re-read
     periodically, so projected, rotating tokens keep working); skipped when a ``context`` is
     requested, since in-cluster configuration has no contexts;
  4. ``~/.kube/config``.

  When none is present, ``ConfigError`` lists every source and why it was not used.
* ``new_api_client`` builds the one ``ApiClient`` a manager shares. Its urllib3 pool must hold a
  connection for every informer's long-running watch plus every worker's concurrent request, or
  requests queue behind watches (urllib3 then opens throw-away connections and logs "Connection
  pool is full"). Size it with ``pool_size_for(informers, workers)``.
* Transport retries: unless the Configuration already sets ``retries``, urllib3 retries once a
  failed *connect* (nothing was sent, so it is always safe) and once a GET whose pooled connection
  turned out to be closed (reset/EOF: the server dropped an idle keep-alive connection), as
  client-go does. It never retries a read *timeout* (that would multiply the caller's timeout and
  a watch's dead-connection detection) nor a 5xx/429: those are the callers' policy (the
  informers' backoff, the workqueue's rate limiter).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

import kubernetes.config
import kubernetes.config.incluster_config
import urllib3
import urllib3.connectionpool
from kubernetes.client import ApiClient, Configuration

__all__ = [
    "DEFAULT_KUBECONFIG_PATH",
    "POOL_MARGIN",
    "SERVICE_ACCOUNT_DIR",
    "ConfigError",
    "TransportRetry",
    "load_config",
    "new_api_client",
    "pool_size_for",
]

# kubectl's default kubeconfig location.
DEFAULT_KUBECONFIG_PATH = "~/.kube/config"
# Where the kubelet mounts the pod's service-account token and cluster CA.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Connections beyond one per informer watch and one per worker: leader-election renewals, the event
# recorder, discovery and list calls made while watches are open.
POOL_MARGIN = 4
# Connect retries, and GET retries after a reset/EOF on a reused connection, when the
# Configuration does not choose its own policy.
DEFAULT_CONNECT_RETRIES = 1
DEFAULT_STALE_CONNECTION_RETRIES = 1

# the library's loaders are untyped; reach them through Any so mypy --strict accepts the calls
_kube_config: Any = kubernetes.config
_incluster: Any = kubernetes.config.incluster_config

_ENV_KUBECONFIG = "KUBECONFIG"
_ENV_SERVICE_HOST = "KUBERNETES_SERVICE_HOST"
_ENV_SERVICE_PORT = "KUBERNETES_SERVICE_PORT"


class ConfigError(Exception):
    """No usable cluster configuration; ``attempts`` says what was tried and why it failed."""

    def __init__(self, message: str, attempts: list[str]) -> None:
        super().__init__(message + "; tried: " + "; ".join(attempts))
        # one "source: outcome" line per configuration source consulted, in order
        self.attempts = list(attempts)


def load_config(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    service_account_dir: str = SERVICE_ACCOUNT_DIR,
    default_kubeconfig: str = DEFAULT_KUBECONFIG_PATH,
) -> Configuration:
    """Return a new ``kubernetes.client.Configuration`` from the first present source.

    ``environ``, ``service_account_dir`` and ``default_kubeconfig`` exist so tests (and unusual
    mounts) need not touch the real process environment or home directory.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    attempts: list[str] = []

    if kubeconfig is not None:
        path = os.path.expanduser(kubeconfig)
        if not os.path.isfile(path):
            attempts.append(f"explicit kubeconfig: {path} does not exist")
            raise ConfigError("cannot load Kubernetes configuration", attempts)
        return _from_kubeconfig(path, context, f"explicit kubeconfig {path}", attempts)
    attempts.append("explicit kubeconfig: not given")

    env_paths = env.get(_ENV_KUBECONFIG, "")
    if env_paths:
        files = [os.path.expanduser(p) for p in env_paths.split(os.pathsep) if p]
        if any(os.path.isfile(p) for p in files):
            return _from_kubeconfig(env_paths, context, f"$KUBECONFIG={env_paths}", attempts)
        attempts.append(f"$KUBECONFIG={env_paths}: no such file")
    else:
        attempts.append("$KUBECONFIG: not set")

    if context is not None:
        attempts.append(f"in-cluster: skipped (context {context!r} requested)")
    elif env.get(_ENV_SERVICE_HOST) and env.get(_ENV_SERVICE_PORT):
        return _from_service_account(env, service_account_dir, attempts)
    else:
        attempts.append(f"in-cluster: {_ENV_SERVICE_HOST}/{_ENV_SERVICE_PORT} not set")

    home_path = os.path.expanduser(default_kubeconfig)
    if os.path.isfile(home_path):
        return _from_kubeconfig(home_path, context, f"default kubeconfig {home_path}", attempts)
    attempts.append(f"default kubeconfig: {home_path} does not exist")
    raise ConfigError("no Kubernetes configuration found", attempts)


def _from_kubeconfig(paths: str, context: str | None, source: str, attempts: list[str]) -> Configuration:
    cfg = Configuration()
    try:
        # client_configuration given → the library leaves its global default alone;
        # persist_config=False → never rewrite the user's kubeconfig (token refreshes stay in memory).
        _kube_config.load_kube_config(
            config_file=paths, context=context, client_configuration=cfg, persist_config=False
        )
    except Exception as exc:  # the loader raises ConfigException, KeyError, yaml errors, OSError...
        attempts.append(f"{source}: {type(exc).__name__}: {exc}")
        raise ConfigError("cannot load Kubernetes configuration", attempts) from exc
    return cfg


def _from_service_account(env: Mapping[str, str], sa_dir: str, attempts: list[str]) -> Configuration:
    cfg = Configuration()
    loader = _incluster.InClusterConfigLoader(
        token_filename=os.path.join(sa_dir, "token"),
        cert_filename=os.path.join(sa_dir, "ca.crt"),
        try_refresh_token=True,
        environ=env,
    )
    try:
        loader.load_and_set(cfg)
    except Exception as exc:
        attempts.append(f"in-cluster ({sa_dir}): {type(exc).__name__}: {exc}")
        raise ConfigError("cannot load in-cluster Kubernetes configuration", attempts) from exc
    return cfg


class TransportRetry(urllib3.Retry):
    """urllib3 retries minus read timeouts: a read that timed out is raised at once."""

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: urllib3.BaseHTTPResponse | None = None,
        error: Exception | None = None,
        _pool: urllib3.connectionpool.ConnectionPool | None = None,
        _stacktrace: TracebackType | None = None,
    ) -> Self:
        if isinstance(error, urllib3.exceptions.ReadTimeoutError):
            raise error
        return super().increment(method, url, response, error, _pool, _stacktrace)


def pool_size_for(informers: int, workers: int) -> int:
    """Connections a manager needs: one per informer watch, one per worker, plus ``POOL_MARGIN``."""
    if informers < 0 or workers < 0:
        raise ValueError(f"pool_size_for: informers ({informers}) and workers ({workers}) must be >= 0")
    return informers + workers + POOL_MARGIN


def new_api_client(config: Configuration, *, pool_size: int, user_agent: str | None = None) -> ApiClient:
    """Build a ``kubernetes.client.ApiClient`` on ``config`` with a pool of ``pool_size`` connections.

    Sets ``config.connection_pool_maxsize`` (the pool is created from it, so it must be set before the
    client exists) and, when ``config.retries`` is unset, the connect-only retry policy described in
    the module docstring.
    """
    if pool_size < 1:
        raise ValueError(f"new_api_client: pool_size must be >= 1, got {pool_size}")
    config.connection_pool_maxsize = pool_size
    if config.retries is None:
        config.retries = TransportRetry(
            total=None, connect=DEFAULT_CONNECT_RETRIES, read=DEFAULT_STALE_CONNECTION_RETRIES,
            redirect=3, status=0, other=0, allowed_methods=frozenset({"GET", "HEAD"}),
        )
    client = ApiClient(configuration=config)
    if user_agent is not None:
        client.user_agent = user_agent
    return client
