"""``escaler slo-api``: the SLO API process (docs/sloapi.md).

Flags: ``--bind-address`` (default ``:8080``), ``--auth none|token`` (default ``token``: every
``/config`` request needs a bearer token issued for ``--token-audience``, default
``escaler-slo-api`` — not the manager's ``escaler``: a token for one API is refused by the other —,
checked by a TokenReview, and RBAC on the SLO requirement, checked by a SubjectAccessReview),
``--kubeconfig``,
``--namespace`` (serve only that namespace's SLO requirements; default all), ``--cert-dir``
(``tls.crt``/``tls.key``: serve HTTPS), ``--self-signed-tls`` (without ``--cert-dir``: serve HTTPS
with a self-signed pair made at start, its SHA-256 fingerprint logged; the shipped manifests mount
the manager's serving certificate as ``--cert-dir``, and a renewed pair there is served from the
next connection on, without a restart: ``escaler.runtime.tls.reload_on_handshake``), else plain
HTTP, which with ``--auth token`` carries bearer tokens in clear text — a warning is logged — so
terminate TLS in front of it or pass one of them; ``--log-format``, ``--log-level``.

It builds one ``RestClient`` (the process's ServiceAccount or kubeconfig), the ``SLOIndex`` (one
informer per kind, missing CRDs rechecked every 60 s), the ``SLOService`` and the FastAPI app,
then serves with uvicorn until SIGTERM/SIGINT (uvicorn finishes in-flight requests, closing what is
still open after ``GRACEFUL_SHUTDOWN_SECONDS``), and stops the informers. At most
``MAX_CONNECTIONS`` connections are served at once (503 beyond).

Exit codes: 0 after a stop, 1 when the cluster configuration cannot be loaded or the port cannot
be bound, 2 for a usage error, 3 when the ``sloapi`` extra is not installed (one line naming
``pip install 'escaler[sloapi]'``: a bare ``pip install escaler`` and the manager's image leave
FastAPI and uvicorn out; ``escaler.cli.extras``). RBAC: ``manifests/rbac/slo-api.yaml``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from escaler.cli import extras
from escaler.cli.flags import bind_address
from escaler.cli.logging_setup import LOG_FORMATS, LOG_LEVELS, setup_logging
from escaler.kube.config import ConfigError, load_config, new_api_client, pool_size_for
from escaler.kube.rest import RestClient
from escaler.runtime.server import parse_bind_address
from escaler.signals.netpolicy import IPNetwork, parse_networks

if TYPE_CHECKING:
    from escaler.sloapi.service import SLOService

# FastAPI, uvicorn and escaler.sloapi are imported by the functions that use them, so the other
# sub-commands (the manager above all) do not pay for importing them.

__all__ = ["AUTH_MODES", "DEFAULT_BIND_ADDRESS", "SLOApiFlags", "add_parser", "build_service", "run"]

DEFAULT_BIND_ADDRESS = ":8080"
AUTH_MODES = ("none", "token")
DEFAULT_AUTH = "token"
DEFAULT_LOG_FORMAT = "json"
DEFAULT_LOG_LEVEL = "info"
CERT_FILE_NAME = "tls.crt"
KEY_FILE_NAME = "tls.key"
# Connections served at once (uvicorn answers 503 beyond).
MAX_CONNECTIONS = 64
# Requests handled at once off the event loop (each may wait on a review or a patch).
WORKER_THREADS = 16
# Seconds an idle keep-alive connection is kept.
KEEP_ALIVE_SECONDS = 5
# Seconds a request's line and headers may take to arrive (uvicorn has no such bound of its own).
HEAD_DEADLINE_SECONDS = 10.0
# a stop closes what is still open after this long: a TLS connection a client dropped without its
# close_notify counts as open until asyncio's 30 s SSL shutdown timeout, as long as the pod's whole
# grace period (30 s), so without a bound a SIGTERM under HTTPS could end in a SIGKILL
GRACEFUL_SHUTDOWN_SECONDS = 10
EXIT_USAGE = 2
# the SLO API's own token audience: a token for the manager's API (audience escaler) is not one here
SLO_API_AUDIENCE = "escaler-slo-api"

_log = logging.getLogger("escaler.sloapi")


@dataclass(frozen=True)
class SLOApiFlags:
    """The validated command line."""

    # host ("" = every IPv4 interface), port
    host: str
    port: int
    auth: str
    # None = $KUBECONFIG, in-cluster, then ~/.kube/config
    kubeconfig: str | None
    # "" = every namespace
    namespace: str
    # both set = HTTPS
    cert_file: str | None
    key_file: str | None
    log_format: str
    log_level: str
    # --trusted-proxies: networks whose X-Forwarded-For names the client (escaler.sloapi.clients)
    trusted_proxies: tuple[IPNetwork, ...] = ()
    # --token-audience: the audience a bearer token must be issued for
    token_audience: str = SLO_API_AUDIENCE
    # --self-signed-tls: no pair given, make one at start (run() fills cert_file/key_file)
    self_signed_tls: bool = False


class UsageError(Exception):
    """A flag value that cannot work; the message names the flag."""


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> Callable[[argparse.Namespace], int]:
    p = sub.add_parser(
        "slo-api", help="serve the SLO API (read and change SLO requirements over HTTP)",
        description="Serve the SLO API until SIGTERM. Every flag shows its default.")
    p.add_argument("--bind-address", metavar="ADDR", type=bind_address, default=DEFAULT_BIND_ADDRESS,
                   help=f"serve here: host:port, :port or [v6]:port (default: {DEFAULT_BIND_ADDRESS})")
    p.add_argument("--auth", choices=AUTH_MODES, default=DEFAULT_AUTH,
                   help="token: bearer tokens (for --token-audience) checked by TokenReview, access by "
                        "SubjectAccessReview on the SLO requirement; none: no checks, for a trusted "
                        f"network only (default: {DEFAULT_AUTH})")
    p.add_argument("--token-audience", metavar="AUDIENCE", default=SLO_API_AUDIENCE,
                   help="with --auth token, the audience a bearer token must be issued for (kubectl "
                        "create token <sa> --audience AUDIENCE); distinct from the manager API's "
                        "'escaler', so a token for one is refused by the other "
                        f"(default: {SLO_API_AUDIENCE})")
    p.add_argument("--kubeconfig", metavar="PATH", default=None,
                   help="kubeconfig file (default: $KUBECONFIG, then in-cluster, then ~/.kube/config)")
    p.add_argument("--namespace", metavar="NS", default="",
                   help="serve only this namespace's SLO requirements (default: '' = all namespaces)")
    p.add_argument("--cert-dir", metavar="DIR", default="",
                   help=f"directory holding {CERT_FILE_NAME} and {KEY_FILE_NAME}: serve HTTPS "
                        "(default: none = plain HTTP)")
    p.add_argument("--self-signed-tls", action="store_true", default=False,
                   help="without --cert-dir, serve HTTPS with a self-signed certificate made at start "
                        "(its SHA-256 fingerprint logged) instead of plain HTTP (default: false)")
    p.add_argument("--trusted-proxies", metavar="CIDRS", default="",
                   help="comma list of networks (an ingress' pods) whose X-Forwarded-For names the client a "
                        "failed login is charged to; requests from elsewhere are charged to their peer "
                        "(default: none: every request to its peer)")
    p.add_argument("--log-format", choices=LOG_FORMATS, default=DEFAULT_LOG_FORMAT,
                   help=f"log line format (default: {DEFAULT_LOG_FORMAT})")
    p.add_argument("--log-level", choices=LOG_LEVELS, default=DEFAULT_LOG_LEVEL,
                   help=f"lowest level logged (default: {DEFAULT_LOG_LEVEL})")
    return run


def flags_from_args(args: argparse.Namespace) -> SLOApiFlags:
    parsed = parse_bind_address(args.bind_address)
    if parsed is None:
        raise UsageError("--bind-address: the SLO API cannot be disabled; give host:port or :port")
    host, port, ipv6 = parsed
    cert_file = key_file = None
    if args.cert_dir and args.self_signed_tls:
        raise UsageError("--self-signed-tls: only without --cert-dir (the given pair is served)")
    if args.cert_dir:
        cert_file = os.path.join(args.cert_dir, CERT_FILE_NAME)
        key_file = os.path.join(args.cert_dir, KEY_FILE_NAME)
        for path in (cert_file, key_file):
            if not os.path.isfile(path):
                raise UsageError(f"--cert-dir: {path} does not exist")
    if not args.token_audience:
        raise UsageError("--token-audience: must not be empty (a token must be issued for some audience)")
    try:
        trusted = parse_networks(args.trusted_proxies) if args.trusted_proxies else ()
    except ValueError as err:
        raise UsageError(str(err).replace("--allow-endpoint-networks", "--trusted-proxies")) from None
    return SLOApiFlags(
        host=host or ("::" if ipv6 else "0.0.0.0"), port=port, auth=args.auth,
        kubeconfig=args.kubeconfig or None, namespace=args.namespace, cert_file=cert_file,
        key_file=key_file, log_format=args.log_format, log_level=args.log_level,
        trusted_proxies=tuple(trusted), token_audience=args.token_audience,
        self_signed_tls=args.self_signed_tls)


def _self_signed_pair(host: str) -> tuple[str, str]:
    """A self-signed tls.crt/tls.key in a directory of its own (removed at exit)."""
    import atexit
    import shutil
    import tempfile

    from escaler.runtime.tls import self_signed

    directory = tempfile.mkdtemp(prefix="escaler-slo-api-tls-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    cert, key, fingerprint = self_signed(directory, [host] if host not in ("", "0.0.0.0", "::") else [])
    _log.warning("the SLO API has no serving certificate: serving a self-signed one (SHA-256 fingerprint "
                 "%s); give it one with --cert-dir", fingerprint)
    return cert, key


def build_service(flags: SLOApiFlags, rest: RestClient) -> SLOService:
    """The index (not started) and the service over ``rest``."""
    from escaler.runtime.authfilter import RequestAuth
    from escaler.runtime.authn import KubeAuthenticator
    from escaler.sloapi.index import SLOIndex
    from escaler.sloapi.service import SLOService
    from escaler.sloapi.upstream import KubeSLOClient

    client = KubeSLOClient(rest, namespace=flags.namespace)
    index = SLOIndex(client.informer_for, client.probe)
    hint = (f"tokens must be issued for the {flags.token_audience} audience: "
            f"kubectl create token <serviceaccount> --audience {flags.token_audience}")
    auth = (RequestAuth(KubeAuthenticator(rest, audiences=(flags.token_audience,)), hint=hint,
                        name="slo-api") if flags.auth == "token" else None)
    return SLOService(index, client, auth, flags.trusted_proxies)


def run(args: argparse.Namespace) -> int:
    absent = extras.missing(extras.EXTRAS["sloapi"].modules)
    if absent:
        print(extras.missing_message("slo-api", "sloapi", absent), file=sys.stderr)
        return extras.EXIT_MISSING
    import uvicorn

    from escaler.runtime.tls import CertificateReloader, reload_on_handshake
    from escaler.sloapi.app import create_app
    from escaler.sloapi.connections import bounded_protocol
    from escaler.sloapi.kinds import KINDS

    try:
        flags = flags_from_args(args)
    except UsageError as exc:
        print(f"escaler slo-api: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(flags.log_format, flags.log_level)
    if flags.self_signed_tls:
        cert_file, key_file = _self_signed_pair(flags.host)
        flags = dataclasses.replace(flags, cert_file=cert_file, key_file=key_file)
    try:
        cfg = load_config(flags.kubeconfig)
    except ConfigError as exc:
        _log.error("cannot connect to Kubernetes: %s", exc)
        return 1
    rest = RestClient(new_api_client(cfg, pool_size=pool_size_for(len(KINDS), WORKER_THREADS)))
    service = build_service(flags, rest)
    if flags.auth == "none":
        _log.warning("--auth none: every client may read and change SLOs; use only on a trusted network")
    elif flags.cert_file is None:
        _log.warning("serving plain HTTP with --auth token: bearer tokens cross the network in clear "
                     "text; pass --cert-dir or terminate TLS in front of the SLO API")
    stop = threading.Event()
    service.index.start(stop)
    config = uvicorn.Config(
        create_app(service, worker_threads=WORKER_THREADS), host=flags.host, port=flags.port,
        log_config=None, lifespan="on",
        limit_concurrency=MAX_CONNECTIONS, timeout_keep_alive=KEEP_ALIVE_SECONDS,
        # one client holds at most half the connections; a request's head arrives within the deadline
        http=bounded_protocol(MAX_CONNECTIONS // 2, HEAD_DEADLINE_SECONDS),
        ssl_certfile=flags.cert_file, ssl_keyfile=flags.key_file, server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS)
    if flags.cert_file is not None and flags.key_file is not None:
        # a renewed pair (the manager's serving certificate, a mounted Secret) is served from the
        # next connection on, without a restart
        config.load()
        assert config.ssl is not None
        reload_on_handshake(config.ssl, CertificateReloader(flags.cert_file, flags.key_file,
                                                            name="slo-api"))
    server = uvicorn.Server(config)
    _log.info("starting the SLO API", extra={"bindAddress": f"{flags.host}:{flags.port}",
                                              "auth": flags.auth, "watchNamespace": flags.namespace or "*"})
    try:
        server.run()
    finally:
        stop.set()
    return 0 if server.started else 1

