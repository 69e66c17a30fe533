"""``escaler manager``: the controller process (docs/operations.md).

Parses and validates the flags (a bad value exits 2 with a message naming the flag), sets up
structured logging, builds a ``Manager`` (probes, metrics, leader election, graceful shutdown on
SIGTERM), adds the validating admission webhook when a serving certificate is configured,
registers the reconcilers, logs what it serves where, and runs until stopped. Exit codes: 0 after
a graceful stop, 1 when the manager fails (no cluster configuration, a bind failure, a lost
lease), 2 for a usage error.

The webhook is served only with a serving certificate: ``--webhook-cert-dir DIR`` (``DIR/tls.crt``
and ``DIR/tls.key``, the layout of a mounted ``kubernetes.io/tls`` Secret, cert-manager's or
``hack/webhook-certs.sh``'s) or ``--webhook-cert-file`` with ``--webhook-key-file``; it then
listens on ``--webhook-port`` (default 9443). Without a certificate (``resolve_webhook``):

* no webhook flag at all (the bare ``escaler manager``) → the manager runs without the webhook
  and says so in its start-up summary, naming the script and the flags that enable it;
* an explicit non-zero ``--webhook-port`` → refused (exit 2) with a message naming the
  certificate flags, rather than silently serving no webhook;
* ``--webhook-port=0`` → no webhook, whatever else is given.

``--serving-cert-secret NAMESPACE/NAME`` with ``--serving-cert-dns-names`` (the shipped
manifests' setting): the manager gets or creates that ``kubernetes.io/tls`` Secret (a CA and a
serving certificate it signed for those names; ``escaler.runtime.servingcerts``) before anything
binds, writes its pair to a private temporary directory, re-checks it every hour on every replica,
and serves the API server, secure ``/metrics`` and the webhook with it unless they are given a
certificate of their own (``--api-cert-dir``, ``--metrics-cert-dir``, ``--webhook-cert-*`` win);
the webhook is then served on ``--webhook-port`` (default 9443) without a certificate flag. With
``--webhook-configuration NAME`` the leader keeps that ValidatingWebhookConfiguration's caBundle
equal to the Secret's ``ca.crt``, with ``--serving-cert-ca-configmap NAME`` that ConfigMap's
``ca.crt`` (for clients that may not read the Secret).

At start the manager logs what it serves where (``served_endpoints``): one line
``serving <component>: ...`` (in JSON with a ``component`` field) each for the API server
(address, TLS, routes), the health probes, the metrics, the webhook (or why it is off) and leader
election (on with its Lease, or off).

The API server (``--api-bind-address``, default ``:8082``; ``0`` disables it) carries the routes
reconcilers register on ``mgr.api_server`` (the SignalTrigger push, the SLO decisions). It serves
HTTPS: with ``--api-cert-dir DIR``'s ``tls.crt``/``tls.key``, else with a self-signed certificate
made at start (its SHA-256 fingerprint logged); ``--api-insecure`` serves plain HTTP instead. It
checks every request's bearer token with a TokenReview for the ``escaler`` audience (clients use
``kubectl create token <sa> --audience escaler``) and a SubjectAccessReview made with the
manager's own credentials — so the manager's ServiceAccount needs ``create`` on
``tokenreviews.authentication.k8s.io`` and ``subjectaccessreviews.authorization.k8s.io`` (the
``system:auth-delegator`` ClusterRole). It runs on the elected leader only (see
``Manager.add_api_server``). ``GET /decisions/v1/namespaces/{namespace}/{serviceId}`` (the SLO decision
engine) is authenticated like the other routes and authorized per requirement (``get``; a denied
route is answered 404); the unscoped ``GET /decisions/{serviceId}`` of 0.1 answers 410 naming it
(docs/slo.md, Migration). An LLMScaler of this manager reads decisions in-process
(``customProvider.serviceId``), not over HTTP. ``--slo-prometheus-endpoint`` is the
Prometheus the SLO decision engine queries.

Flags read by parts that land later (kept here so the command line is stable):
``--metrics-trigger-poll-interval`` (the MetricsTrigger poller) and ``--min-poll-interval`` (the floor
of a scaler's own ``pollIntervalSeconds``; a spec value below it is raised to it and a Warning
event ``PollIntervalClamped`` says so); ``--allowed-endpoint-hosts`` is
enforced by the webhook and by the collectors. ``ManagerFlags`` carries every parsed value for
``register_reconcilers``.

Outbound calls to user-named endpoints (ExternalServer, SignalTrigger pull) never reach
loopback, link-local, multicast, unspecified or cloud metadata addresses, checked after DNS
resolution (``escaler.signals.netpolicy``); ``--allow-endpoint-networks CIDR[,CIDR...]``
re-allows networks a deployment needs (e.g. ``127.0.0.0/8`` for a Prometheus on the manager's
own host).

ResourceScalingGroup GroupReplication is bounded by ``--max-clone-writes-per-sync`` (clone creates
plus deletes per reconcile of one RSG), ``--max-clones-per-namespace`` (clones of every RSG of a
namespace together) and ``--max-clone-template-bytes`` (the size of one clone):
``escaler.reconcilers.rsg.limits``.

``--controllers`` (``escaler.cli.controllers``: ``*``, ``name``, ``-name``, as
kube-controller-manager's flag) picks the controllers; each is registered behind a
``escaler.runtime.crdgate.CRDGate``, so one whose CRD is not installed does not stop the manager: it
is off (one WARNING, a detail on the ``/readyz`` check ``controllers``, which passes) until the CRD
appears, and then starts. The start-up log says which run, wait and are off (``controllers: ...``).

``--unsafe-test-clock-file PATH`` is for end-to-end tests only: the manager's one clock becomes an
``escaler.testclock.SteppedClock`` running ahead of real time by the offset (seconds) in ``PATH``,
which a test raises to step the manager across a schedule's minute boundary without waiting for it.
The file must hold a valid offset at start (else exit 2); the manager logs a WARNING at start and
on every step, refuses (and logs) a smaller offset or garbage, and nothing shipped passes the flag.
Without it the manager runs on the real clock.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import logging
import os
import re
import shutil
import ssl
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from escaler.cli.allocator import TRIM_INTERVAL_SECONDS, MallocTrim, tune_allocator
from escaler.cli.controllers import ALL as ALL_CONTROLLERS
from escaler.cli.controllers import CONTROLLERS, DEFAULT_CONTROLLERS, enabled_controllers
from escaler.cli.controllers import FLAG as CONTROLLERS_FLAG
from escaler.cli.flags import (
    bind_address,
    byte_size,
    duration_seconds,
    endpoint_networks,
    host_patterns,
    port,
    positive_int,
)
from escaler.cli.logging_setup import LOG_FORMATS, LOG_LEVELS, setup_logging
from escaler.clock import Clock, RealClock
from escaler.errors import ConnectionFailure, StatusError
from escaler.kube.config import ConfigError
from escaler.reconcilers.elasticscaler import setup_elasticscaler
from escaler.reconcilers.kit.bindings import TargetBindings
from escaler.reconcilers.kit.ports import DecisionLookup
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics
from escaler.reconcilers.kit.setup import outbound_executor
from escaler.reconcilers.llmscaler import setup_llmscaler
from escaler.reconcilers.rsg import setup_rsg
from escaler.reconcilers.rsg.limits import (
    DEFAULT_CLONE_TEMPLATE_BYTES,
    DEFAULT_CLONE_WRITES_PER_SYNC,
    DEFAULT_CLONES_PER_NAMESPACE,
    ReplicationLimits,
)
from escaler.reconcilers.slo import setup_slo
from escaler.reconcilers.tidal import setup_tidal
from escaler.runtime import ApiServer, Authenticator, KubeAuthenticator, Manager, ManagerOptions
from escaler.runtime.crdgate import CRDGate
from escaler.runtime.executor import DEFAULT_OUTBOUND_PER_GROUP, DEFAULT_OUTBOUND_WORKERS
from escaler.runtime.fence import WriteGate
from escaler.runtime.manager import (
    DEFAULT_HEALTH_PROBE_BIND_ADDRESS,
    DEFAULT_LEADER_ELECTION_ID,
    DEFAULT_MAX_CONCURRENT_RECONCILES,
    DEFAULT_METRICS_BIND_ADDRESS,
)
from escaler.runtime.server import parse_bind_address
from escaler.runtime.servingcerts import (
    ABSENT,
    CAConfigMap,
    CertPolicy,
    SecretRef,
    ServingCertFiles,
    ServingCerts,
    ServingCertSecret,
    WebhookCABundle,
)
from escaler.runtime.sharding import writing_for
from escaler.runtime.tls import CertificateReloader
from escaler.signals.netpolicy import IPNetwork
from escaler.signals.promqlscope import DEFAULT_NAMESPACE_LABEL, DEFAULT_SCOPE, PromQLScope
from escaler.testclock import ClockFile, read_offset
from escaler.webhook import CheckContext, WebhookServer, validators
from escaler.webhook.server import DEFAULT_WEBHOOK_PORT

__all__ = [
    "DEFAULT_API_BIND_ADDRESS",
    "DEFAULT_METRICS_TRIGGER_POLL_INTERVAL",
    "EXIT_USAGE",
    "TEST_CLOCK_FLAG",
    "WEBHOOK_OFF_BY_FLAG",
    "WEBHOOK_OFF_NO_CERT",
    "ManagerFlags",
    "UsageError",
    "WebhookServing",
    "add_parser",
    "build_manager",
    "controllers_line",
    "flags_from_args",
    "open_test_clock",
    "register_reconcilers",
    "resolve_webhook",
    "run",
    "served_endpoints",
]

DEFAULT_API_BIND_ADDRESS = ":8082"
DEFAULT_METRICS_TRIGGER_POLL_INTERVAL = "30s"
DEFAULT_MIN_POLL_INTERVAL = "5s"
DEFAULT_LOG_FORMAT = "json"
DEFAULT_LOG_LEVEL = "info"
CERT_FILE_NAME = "tls.crt"
KEY_FILE_NAME = "tls.key"
EXIT_USAGE = 2
# the one way to a test clock (escaler.testclock); named so that nobody passes it by accident
TEST_CLOCK_FLAG = "--unsafe-test-clock-file"

_log = logging.getLogger("escaler.manager")


class UsageError(Exception):
    """A flag combination that cannot work; the message names the flag(s)."""


@dataclass(frozen=True)
class ManagerFlags:
    """The validated command line."""

    # None = $KUBECONFIG, in-cluster, then ~/.kube/config
    kubeconfig: str | None
    # "" = every namespace
    namespace: str
    leader_elect: bool
    leader_election_id: str
    # "" = the pod's namespace (in-cluster)
    leader_election_namespace: str
    metrics_bind_address: str
    health_probe_bind_address: str
    # seconds; 0 = no polling (watch events only)
    metrics_trigger_poll_interval: float
    # seconds, > 0: the shortest per-scaler pollIntervalSeconds honoured
    min_poll_interval: float
    max_concurrent_reconciles: int
    # 0 = webhook disabled
    webhook_port: int
    # the serving pair; both set when webhook_port != 0, unless served from --serving-cert-secret
    webhook_cert_file: str | None
    webhook_key_file: str | None
    # "0" = API server disabled
    api_bind_address: str
    # the API server's serving pair (HTTPS); both None = plain HTTP
    api_cert_file: str | None
    api_key_file: str | None
    # normalised --allowed-endpoint-hosts; () = every host
    allowed_endpoint_hosts: tuple[str, ...]
    # --allow-endpoint-networks: refused networks (loopback, link-local ...) endpoints may reach anyway
    allow_endpoint_networks: tuple[IPNetwork, ...]
    log_format: str
    log_level: str
    # --api-insecure: serve the API over plain HTTP (else HTTPS; self-signed without --api-cert-dir)
    api_insecure: bool = False
    # --metrics-secure: /metrics behind TokenReview + SubjectAccessReview, over HTTPS
    metrics_secure: bool = False
    # --metrics-cert-dir: secure /metrics' tls.crt and tls.key ("" = self-signed at start)
    metrics_cert_dir: str = ""
    # --outbound-workers: threads running metric collections and signal pulls (off the reconcile workers)
    outbound_workers: int = DEFAULT_OUTBOUND_WORKERS
    # --outbound-per-namespace: of those, at most this many busy with one namespace's endpoints at once
    outbound_per_namespace: int = DEFAULT_OUTBOUND_PER_GROUP
    # --total-shards: scalers split across this many replicas by hash (1 = no sharding)
    total_shards: int = 1
    # --shard-index: preferred shard (with --leader-elect) or the only one (without); None = from
    # the pod name's ordinal
    shard_index: int | None = None
    # --status-refresh-seconds: status drift (values inside the significance) is written at most
    # this often per scaler; 0 = never on its own (escaler.reconcilers.kit.drift)
    status_refresh_seconds: float = 0.0
    # --malloc-trim-interval: seconds between malloc_trim calls (escaler.cli.allocator.MallocTrim);
    # 0 = never
    malloc_trim_interval: float = TRIM_INTERVAL_SECONDS
    # --slo-prometheus-endpoint: base URL of the Prometheus the SLO decision engine queries; "" = none
    slo_prometheus_endpoint: str = ""
    # --unsafe-test-clock-file: tests only; the file whose offset runs the manager's clock ahead of
    # real time (None = the real clock); it held a valid offset when the flags were checked
    unsafe_test_clock_file: str | None = None
    # --max-clone-writes-per-sync, --max-clones-per-namespace, --max-clone-template-bytes
    # (ResourceScalingGroup GroupReplication; escaler.reconcilers.rsg.limits)
    replication_limits: ReplicationLimits = field(default_factory=ReplicationLimits)
    # --promql-namespace-label, --promql-unconfined-hosts (escaler.signals.promqlscope)
    promql_scope: PromQLScope = DEFAULT_SCOPE
    # --controllers: the controllers this manager runs (escaler.cli.controllers; default every one)
    controllers: frozenset[str] = frozenset(CONTROLLERS)
    # --serving-cert-secret: the kubernetes.io/tls Secret of the CA-signed serving certificate the
    # API server, secure /metrics and the webhook serve when given no certificate of their own
    # (escaler.runtime.servingcerts); None = off
    serving_cert_secret: SecretRef | None = None
    # --serving-cert-dns-names: the names (and IPs) its serving certificate covers
    serving_cert_dns_names: tuple[str, ...] = ()
    # --webhook-configuration: the ValidatingWebhookConfiguration whose caBundle the manager keeps
    # equal to the Secret's ca.crt ("" = none)
    webhook_configuration: str = ""
    # --serving-cert-ca-configmap: the ConfigMap (in the Secret's namespace) the CA is published in
    # for clients ("" = none)
    serving_cert_ca_configmap: str = ""

    def manager_options(self, clock: Clock | None = None) -> ManagerOptions:
        """The manager's options; ``clock`` is its one clock (None: the real one)."""
        return ManagerOptions(
            kubeconfig=self.kubeconfig,
            namespace=self.namespace,
            leader_election=self.leader_elect,
            leader_election_id=self.leader_election_id,
            leader_election_namespace=self.leader_election_namespace,
            metrics_bind_address=self.metrics_bind_address,
            health_probe_bind_address=self.health_probe_bind_address,
            metrics_secure=self.metrics_secure,
            metrics_cert_dir=self.metrics_cert_dir,
            max_concurrent_reconciles=self.max_concurrent_reconciles,
            total_shards=self.total_shards,
            shard_index=self.shard_index,
            clock=clock,
        )


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> Callable[[argparse.Namespace], int]:
    p = sub.add_parser(
        "manager",
        help="run the controller manager (reconcilers, admission webhook, probes, metrics)",
        description="Run the escaler controller manager until SIGTERM. Every flag shows its default.",
    )
    add_arguments(p)
    return run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", metavar="PATH", default=None,
                   help="kubeconfig file (default: $KUBECONFIG, then in-cluster, then ~/.kube/config)")
    p.add_argument("--namespace", metavar="NS", default="",
                   help="watch only this namespace (default: '' = all namespaces)")
    p.add_argument("--leader-elect", action="store_true", default=False,
                   help="elect a leader on a coordination.k8s.io/v1 Lease before writing (default: false)")
    p.add_argument("--leader-election-id", metavar="NAME", default=DEFAULT_LEADER_ELECTION_ID,
                   help=f"name of the Lease (default: {DEFAULT_LEADER_ELECTION_ID})")
    p.add_argument("--leader-election-namespace", metavar="NS", default="",
                   help="namespace of the Lease (default: '' = the pod's own namespace)")
    p.add_argument("--total-shards", metavar="K", type=positive_int, default=1,
                   help="split the scalers across K replicas by a stable hash of namespace/name; with "
                        "--leader-elect each shard has its own Lease <leader-election-id>-shard-<i> "
                        "and a dead replica's shard moves to a standby (default: 1 = no sharding)")
    p.add_argument("--shard-index", metavar="I", type=int, default=None,
                   help="this replica's shard in [0, K): the one it prefers with --leader-elect (default: "
                        "the ordinal of $POD_NAME or the hostname <name>-<n>, mod K), the only one it "
                        "runs without (then required)")
    p.add_argument("--metrics-bind-address", metavar="ADDR", type=bind_address,
                   default=DEFAULT_METRICS_BIND_ADDRESS,
                   help=f"serve /metrics here; 0 disables (default: {DEFAULT_METRICS_BIND_ADDRESS})")
    p.add_argument("--health-probe-bind-address", metavar="ADDR", type=bind_address,
                   default=DEFAULT_HEALTH_PROBE_BIND_ADDRESS,
                   help="serve /healthz and /readyz here; 0 disables "
                        f"(default: {DEFAULT_HEALTH_PROBE_BIND_ADDRESS})")
    p.add_argument("--metrics-secure", action="store_true", default=False,
                   help="serve /metrics over HTTPS, only to callers whose bearer token passes a "
                        "TokenReview and a SubjectAccessReview for get on the non-resource URL /metrics "
                        "(default: false)")
    p.add_argument("--metrics-cert-dir", metavar="DIR", default="",
                   help="directory holding secure /metrics' tls.crt and tls.key; without it a "
                        "self-signed certificate is made at start, its SHA-256 fingerprint logged "
                        "(default: none)")
    p.add_argument("--metrics-trigger-poll-interval", metavar="DURATION", type=duration_seconds,
                   default=duration_seconds(DEFAULT_METRICS_TRIGGER_POLL_INTERVAL),
                   help="how often every MetricsTrigger scaler is re-evaluated, spread over the interval; "
                        f"0 disables polling (default: {DEFAULT_METRICS_TRIGGER_POLL_INTERVAL})")
    p.add_argument("--min-poll-interval", metavar="DURATION", type=_positive_duration,
                   default=duration_seconds(DEFAULT_MIN_POLL_INTERVAL),
                   help="the shortest per-scaler poll interval honoured (pollIntervalSeconds of a "
                        "MetricsTrigger or an LLMScaler): a smaller spec value is raised to it and a "
                        "Warning event PollIntervalClamped says so; must be > 0 "
                        f"(default: {DEFAULT_MIN_POLL_INTERVAL})")
    p.add_argument("--status-refresh-seconds", metavar="DURATION", type=duration_seconds, default=0.0,
                   help="rewrite a scaler's status for drift alone (metric values that moved less than "
                        "the algorithm's tolerance) at most this often; 0 never does: the status changes "
                        "only with a decision, a condition, a count or a significant value, and live "
                        "values are on /metrics (default: 0)")
    p.add_argument("--malloc-trim-interval", metavar="DURATION", type=duration_seconds,
                   default=TRIM_INTERVAL_SECONDS,
                   help="give the heap's free pages back to the system this often (glibc's "
                        "malloc_trim; a surge's freed memory otherwise stays resident); 0 never does "
                        f"(default: {TRIM_INTERVAL_SECONDS:g}s)")
    p.add_argument("--max-concurrent-reconciles", metavar="N", type=positive_int,
                   default=DEFAULT_MAX_CONCURRENT_RECONCILES,
                   help=f"workers per controller (default: {DEFAULT_MAX_CONCURRENT_RECONCILES})")
    p.add_argument("--webhook-port", metavar="PORT", type=port, default=None,
                   help="HTTPS port of the validating admission webhook, served only with a certificate "
                        "(--webhook-cert-dir, or --webhook-cert-file and --webhook-key-file); without "
                        "one the webhook is off, and this flag given with a non-zero port is an error; "
                        f"0 disables it (default: {DEFAULT_WEBHOOK_PORT})")
    p.add_argument("--webhook-cert-dir", metavar="DIR", default="",
                   help=f"directory holding the webhook's {CERT_FILE_NAME} and {KEY_FILE_NAME} "
                        "(a mounted kubernetes.io/tls Secret) (default: none)")
    p.add_argument("--webhook-cert-file", metavar="PATH", default="",
                   help="webhook serving certificate (PEM), instead of --webhook-cert-dir (default: none)")
    p.add_argument("--webhook-key-file", metavar="PATH", default="",
                   help="webhook serving key (PEM), with --webhook-cert-file (default: none)")
    p.add_argument("--api-bind-address", metavar="ADDR", type=bind_address, default=DEFAULT_API_BIND_ADDRESS,
                   help="serve the signal and decision API here; 0 disables "
                        f"(default: {DEFAULT_API_BIND_ADDRESS})")
    p.add_argument("--api-cert-dir", metavar="DIR", default="",
                   help=f"directory holding the API server's {CERT_FILE_NAME} and {KEY_FILE_NAME}; "
                        "without it the API serves HTTPS with a self-signed certificate made at start, "
                        "its SHA-256 fingerprint logged (default: none)")
    p.add_argument("--api-insecure", action="store_true", default=False,
                   help="serve the API over plain HTTP (bearer tokens in clear text: only on a trusted "
                        "network or behind a TLS-terminating proxy) (default: false)")
    p.add_argument("--serving-cert-secret", metavar="NAMESPACE/NAME", default="",
                   help="get or create this kubernetes.io/tls Secret holding a CA (ca.crt) and a serving "
                        "certificate it signed for --serving-cert-dns-names, renew it before it expires, and "
                        "serve the API server, secure /metrics and the webhook with it when they are given "
                        "no certificate of their own; clients verify with the Secret's ca.crt "
                        "(default: none = a self-signed certificate per server)")
    p.add_argument("--serving-cert-dns-names", metavar="NAMES", default="",
                   help="comma list of the DNS names (and IPs) the serving certificate of "
                        "--serving-cert-secret covers: the Services clients call, e.g. "
                        "escaler-manager.escaler-system.svc (required with it) (default: '')")
    p.add_argument("--webhook-configuration", metavar="NAME", default="",
                   help="with --serving-cert-secret: keep the caBundle of this "
                        "ValidatingWebhookConfiguration equal to the Secret's ca.crt (patched by the leader, "
                        "only when it differs) "
                        "(default: none)")
    p.add_argument("--serving-cert-ca-configmap", metavar="NAME", default="",
                   help="with --serving-cert-secret: publish the Secret's ca.crt in this ConfigMap of the "
                        "same namespace (key ca.crt), for clients that may not read the Secret, which "
                        "holds the CA key; written by the leader (default: none)")
    p.add_argument("--allowed-endpoint-hosts", metavar="HOSTS", type=host_patterns, default=(),
                   help="comma list of hosts (or *.domain) that endpoint URLs in specs may name; "
                        "empty allows every host (default: '')")
    p.add_argument("--promql-namespace-label", metavar="LABEL", default=DEFAULT_NAMESPACE_LABEL,
                   help="tenant PromQL (ExternalServer, LLMScaler, SLO requirement, RSG ranking and "
                        "pod-deletion-cost queries) runs only when every series selector holds "
                        "LABEL=\"<the object's namespace>\"; empty turns this off (a single-tenant "
                        f"cluster) (default: {DEFAULT_NAMESPACE_LABEL})")
    p.add_argument("--promql-unconfined-hosts", metavar="HOSTS", type=host_patterns, default=(),
                   help="comma list of hosts (or *.domain) of Prometheus servers that hold one "
                        "tenant's series only, whose queries are not confined (default: '')")
    p.add_argument("--allow-endpoint-networks", metavar="CIDRS", type=endpoint_networks, default=(),
                   help="comma list of networks endpoints may reach although refused by default "
                        "(loopback, link-local, multicast, unspecified; a cloud metadata address only "
                        "when named as a /32 or /128), e.g. 127.0.0.0/8 for a Prometheus on the "
                        "manager's host (default: '')")
    p.add_argument("--outbound-workers", metavar="N", type=positive_int, default=DEFAULT_OUTBOUND_WORKERS,
                   help="threads that run metric collections and signal pulls, off the reconcile workers "
                        "(and, per SLO kind, the SLO engine's signal reads); the pool grows to 4 x N while "
                        "jobs wait with every thread busy "
                        f"(default: {DEFAULT_OUTBOUND_WORKERS})")
    p.add_argument("--outbound-per-namespace", metavar="N", type=positive_int,
                   default=DEFAULT_OUTBOUND_PER_GROUP,
                   help="at most N of those threads serve one namespace's scalers at once, so one "
                        "namespace's slow endpoints cannot stall the others "
                        f"(default: {DEFAULT_OUTBOUND_PER_GROUP})")
    p.add_argument("--max-clone-writes-per-sync", metavar="N", type=positive_int,
                   default=DEFAULT_CLONE_WRITES_PER_SYNC,
                   help="ResourceScalingGroup GroupReplication: at most N clone creates plus deletes in "
                        "one reconcile of one RSG; the rest follow in the next passes (a new group is never "
                        "split) "
                        f"(default: {DEFAULT_CLONE_WRITES_PER_SYNC})")
    p.add_argument("--max-clones-per-namespace", metavar="N", type=positive_int,
                   default=DEFAULT_CLONES_PER_NAMESPACE,
                   help="ResourceScalingGroup GroupReplication: at most N clones of all RSGs of one "
                        "namespace together; groups beyond it are refused (Ready=False/CloneLimitReached) "
                        f"(default: {DEFAULT_CLONES_PER_NAMESPACE})")
    p.add_argument("--max-clone-template-bytes", metavar="SIZE", type=byte_size,
                   default=DEFAULT_CLONE_TEMPLATE_BYTES,
                   help="ResourceScalingGroup GroupReplication: a member whose clone is larger than SIZE "
                        "(JSON bytes; 256Ki, 1Mi) is not cloned (Ready=False/TemplateTooLarge) "
                        f"(default: {DEFAULT_CLONE_TEMPLATE_BYTES // 1024}Ki)")
    p.add_argument("--slo-prometheus-endpoint", metavar="URL", default="",
                   help="base URL of the Prometheus the SLO decision engine runs the PromQL of "
                        "LLMSLORequirements and JobSLORequirements against; without it their signals are "
                        "missing (default: '')")
    p.add_argument(CONTROLLERS_FLAG, metavar="LIST", default=DEFAULT_CONTROLLERS,
                   help="comma list of the controllers to run, as kube-controller-manager's flag: "
                        f"'{ALL_CONTROLLERS}' runs every one, 'name' enables one, '-name' disables one "
                        "(e.g. '*,-rsg' or 'elasticscaler,tidal'); controllers: "
                        + "; ".join(f"{name} ({' + '.join(n.kind for n in needs)})"
                                    for name, needs in CONTROLLERS.items())
                        + ". A controller whose CRD is not installed does not stop the manager: it is "
                        "off, logged once and listed on /readyz (which stays ready), until the CRD "
                        f"appears; then it starts (default: {DEFAULT_CONTROLLERS})")
    p.add_argument("--log-format", choices=LOG_FORMATS, default=DEFAULT_LOG_FORMAT,
                   help=f"log line format (default: {DEFAULT_LOG_FORMAT})")
    p.add_argument("--log-level", choices=LOG_LEVELS, default=DEFAULT_LOG_LEVEL,
                   help=f"lowest level logged (default: {DEFAULT_LOG_LEVEL})")
    p.add_argument(TEST_CLOCK_FLAG, metavar="PATH", default=None,
                   help="FOR TESTS ONLY, never in production: run the manager's clock ahead of real time "
                        "by the offset in PATH (one number of seconds >= 0, read at start and polled "
                        "every 50 ms; a larger value steps every schedule, window and timeout forward at "
                        "once, a smaller one or garbage is refused); logs a WARNING at start and on "
                        "every step (default: none = the real clock)")


@dataclass(frozen=True)
class WebhookServing:
    """Whether and how the admission webhook is served, from its four flags."""

    # 0 = not served
    port: int
    # the serving pair; both set exactly when port != 0
    cert_file: str | None
    key_file: str | None
    # why it is not served ("" when it is): the summary line says so
    off_reason: str = ""
    # served with the certificate of --serving-cert-secret (cert_file/key_file None until provisioned)
    from_secret: bool = False


WEBHOOK_OFF_NO_CERT = ("no serving certificate; to serve it, pass --serving-cert-secret NAMESPACE/NAME with "
                       "--serving-cert-dns-names (and --webhook-configuration NAME to set its caBundle), or "
                       "make one with hack/webhook-certs.sh DIR and "
                       "pass --webhook-cert-dir DIR (or --webhook-cert-file and --webhook-key-file), "
                       f"on --webhook-port (default {DEFAULT_WEBHOOK_PORT}); register it with "
                       "hack/webhook-patch-cabundle.sh DIR/ca.crt")
WEBHOOK_OFF_BY_FLAG = "--webhook-port=0"


def resolve_webhook(port_flag: int | None, cert_dir: str, cert_file: str, key_file: str,
                    serving_secret: bool = False) -> WebhookServing:
    """The webhook the flags ask for (see the module docstring); ``UsageError`` naming the flags.

    ``port_flag`` is ``--webhook-port`` as given (``None`` when absent). A configured pair is
    checked: both files exist and load as a certificate with its key. Without one, ``serving_secret``
    (``--serving-cert-secret`` given) serves the webhook with that Secret's certificate.
    """
    if port_flag == 0:
        return WebhookServing(0, None, None, WEBHOOK_OFF_BY_FLAG)
    if cert_dir and (cert_file or key_file):
        raise UsageError(
            "--webhook-cert-dir and --webhook-cert-file/--webhook-key-file are mutually exclusive")
    if bool(cert_file) != bool(key_file):
        given, missing = ("--webhook-cert-file", "--webhook-key-file") if cert_file else (
            "--webhook-key-file", "--webhook-cert-file")
        raise UsageError(f"{given} needs {missing}")
    if cert_dir:
        flag = "--webhook-cert-dir"
        cert_file, key_file = os.path.join(cert_dir, CERT_FILE_NAME), os.path.join(cert_dir, KEY_FILE_NAME)
    elif cert_file:
        flag = "--webhook-cert-file/--webhook-key-file"
    elif serving_secret:
        return WebhookServing(DEFAULT_WEBHOOK_PORT if port_flag is None else port_flag, None, None,
                              from_secret=True)
    elif port_flag is None:
        return WebhookServing(0, None, None, WEBHOOK_OFF_NO_CERT)
    else:
        raise UsageError(
            f"--webhook-port={port_flag} needs a serving certificate: pass --webhook-cert-dir DIR "
            f"(with {CERT_FILE_NAME} and {KEY_FILE_NAME}; hack/webhook-certs.sh DIR makes a pair) or "
            "--webhook-cert-file and --webhook-key-file; omit --webhook-port (or pass --webhook-port=0) "
            "to run without the webhook")
    _check_pair(flag, cert_file, key_file)
    return WebhookServing(DEFAULT_WEBHOOK_PORT if port_flag is None else port_flag, cert_file, key_file)


def _check_pair(flag: str, cert_file: str, key_file: str) -> None:
    for path in (cert_file, key_file):
        if not os.path.isfile(path):
            raise UsageError(f"{flag}: {path} does not exist")
    try:
        CertificateReloader(cert_file, key_file).load()
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"{flag}: cannot load {cert_file} with {key_file}: {exc}") from None


def _api_files(args: argparse.Namespace) -> tuple[str | None, str | None]:
    if args.api_insecure and args.api_cert_dir:
        raise UsageError("--api-insecure and --api-cert-dir are mutually exclusive (plain HTTP or HTTPS)")
    if not args.api_cert_dir or parse_bind_address(args.api_bind_address) is None:
        return None, None
    cert_file = os.path.join(args.api_cert_dir, CERT_FILE_NAME)
    key_file = os.path.join(args.api_cert_dir, KEY_FILE_NAME)
    _check_pair("--api-cert-dir", cert_file, key_file)
    return cert_file, key_file


def flags_from_args(args: argparse.Namespace) -> ManagerFlags:
    """The validated flags; ``UsageError`` naming the flag when a combination cannot work."""
    if args.leader_elect and not args.leader_election_id:
        raise UsageError("--leader-election-id must not be empty with --leader-elect")
    serving_secret, serving_names = _serving_cert_flags(args)
    webhook = resolve_webhook(args.webhook_port, args.webhook_cert_dir, args.webhook_cert_file,
                              args.webhook_key_file, serving_secret is not None)
    api_cert_file, api_key_file = _api_files(args)
    try:
        controllers = enabled_controllers(args.controllers)
    except ValueError as exc:
        raise UsageError(f"{CONTROLLERS_FLAG}: {exc}") from None
    if args.unsafe_test_clock_file is not None:
        try:
            read_offset(args.unsafe_test_clock_file)
        except ValueError as exc:
            raise UsageError(f"{TEST_CLOCK_FLAG}: {exc}") from None
    try:
        promql_scope = PromQLScope.from_flags(args.promql_namespace_label, args.promql_unconfined_hosts)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return ManagerFlags(
        kubeconfig=args.kubeconfig or None,
        namespace=args.namespace,
        leader_elect=args.leader_elect,
        leader_election_id=args.leader_election_id,
        leader_election_namespace=args.leader_election_namespace,
        metrics_bind_address=args.metrics_bind_address,
        health_probe_bind_address=args.health_probe_bind_address,
        metrics_trigger_poll_interval=args.metrics_trigger_poll_interval,
        min_poll_interval=args.min_poll_interval,
        max_concurrent_reconciles=args.max_concurrent_reconciles,
        webhook_port=webhook.port,
        webhook_cert_file=webhook.cert_file,
        webhook_key_file=webhook.key_file,
        api_bind_address=args.api_bind_address,
        api_cert_file=api_cert_file,
        api_key_file=api_key_file,
        allowed_endpoint_hosts=tuple(args.allowed_endpoint_hosts),
        allow_endpoint_networks=tuple(args.allow_endpoint_networks),
        log_format=args.log_format,
        log_level=args.log_level,
        api_insecure=args.api_insecure,
        metrics_secure=args.metrics_secure,
        metrics_cert_dir=args.metrics_cert_dir,
        outbound_workers=args.outbound_workers,
        outbound_per_namespace=args.outbound_per_namespace,
        total_shards=args.total_shards,
        shard_index=args.shard_index,
        status_refresh_seconds=args.status_refresh_seconds,
        malloc_trim_interval=args.malloc_trim_interval,
        slo_prometheus_endpoint=args.slo_prometheus_endpoint,
        unsafe_test_clock_file=args.unsafe_test_clock_file,
        replication_limits=ReplicationLimits(writes_per_sync=args.max_clone_writes_per_sync,
                                             clones_per_namespace=args.max_clones_per_namespace,
                                             template_bytes=args.max_clone_template_bytes),
        promql_scope=promql_scope,
        controllers=controllers,
        serving_cert_secret=serving_secret,
        serving_cert_dns_names=serving_names,
        webhook_configuration=args.webhook_configuration,
        serving_cert_ca_configmap=args.serving_cert_ca_configmap,
    )


def _serving_cert_flags(args: argparse.Namespace) -> tuple[SecretRef | None, tuple[str, ...]]:
    """``--serving-cert-secret`` and ``--serving-cert-dns-names``, checked together."""
    names = tuple(n.strip() for n in args.serving_cert_dns_names.split(",") if n.strip())
    if not args.serving_cert_secret:
        if names:
            raise UsageError("--serving-cert-dns-names needs --serving-cert-secret")
        if args.webhook_configuration:
            raise UsageError("--webhook-configuration needs --serving-cert-secret (its ca.crt is the "
                             "caBundle it sets)")
        if args.serving_cert_ca_configmap:
            raise UsageError("--serving-cert-ca-configmap needs --serving-cert-secret (its ca.crt is "
                             "what it publishes)")
        return None, ()
    try:
        ref = SecretRef.parse(args.serving_cert_secret)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not names:
        raise UsageError("--serving-cert-secret needs --serving-cert-dns-names: the names clients call "
                         "the servers by (e.g. escaler-manager.escaler-system.svc)")
    try:
        CertPolicy(names)
    except ValueError as exc:
        raise UsageError(f"--serving-cert-dns-names: {exc}".replace("CertPolicy.dns_names: ", "")) from None
    for flag, value in (("--webhook-configuration", args.webhook_configuration),
                        ("--serving-cert-ca-configmap", args.serving_cert_ca_configmap)):
        if value and not _K8S_NAME.match(value):
            raise UsageError(f"{flag}: {value!r} is not a valid Kubernetes name (lower-case letters, "
                             "digits, '-' and '.')")
    return ref, names


_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ScalerSetupKwargs(TypedDict):
    """The keyword arguments ``setup_elasticscaler`` and ``setup_llmscaler`` take alike (mypy checks the
    ``**`` at each call against the setup's signature)."""

    poll_interval: float
    min_poll_interval: float
    allowed_hosts: Sequence[str]
    allow_networks: Sequence[IPNetwork]
    max_concurrent_reconciles: int | None
    bindings: TargetBindings
    scaler_metrics: ScalerMetrics
    status_refresh_seconds: float
    crd_gate: CRDGate
    promql_scope: PromQLScope | None


class OutboundBounds(TypedDict):
    """``outbound_executor``'s bounds (``--outbound-workers``, ``--outbound-per-namespace``)."""

    workers: int
    per_namespace: int


def register_reconcilers(mgr: Manager, flags: ManagerFlags) -> CRDGate:
    """Register one reconciler per escaler kind on ``mgr``, each behind the ``CRDGate``; return it.

    Registered, when ``--controllers`` enables them (``escaler.cli.controllers``): ElasticScaler
    (``escaler.reconcilers.elasticscaler``: its controller, the
    MetricsTrigger poller at ``--metrics-trigger-poll-interval``, endpoint hosts checked against
    ``--allowed-endpoint-hosts``, and the SignalTrigger push route on ``mgr.api_server`` when the
    API server is enabled) and Tidal (``escaler.reconcilers.tidal``: status.desiredReplicas from
    its rules, requeued at each transition) and ResourceScalingGroup (``escaler.reconcilers.rsg``:
    members written in place or cloned per group, scale-down ranked by ``scaleDown.prometheus``
    through the same outbound policy) and LLMScaler (``escaler.reconcilers.llmscaler``: Prometheus or
    custom-provider decisions on the same pipeline, polled at ``--metrics-trigger-poll-interval``).
    And the SLO decision engine (``escaler.reconcilers.slo``: LLMSLORequirement and JobSLORequirement
    sized from PromQL on ``--slo-prometheus-endpoint`` every ``--metrics-trigger-poll-interval``, and
    ``GET /decisions/v1/namespaces/{namespace}/{serviceId}`` on ``mgr.api_server``; its decisions are
    handed to the LLMScaler's ``customProvider.serviceId`` in-process — while the engine waits for its
    CRDs, that read says so; with ``-slo`` the LLMScaler has no engine to read).

    A controller whose CRD is not installed waits for it (``escaler.runtime.crdgate``): the manager
    starts without it, and sets it up when the CRD appears.
    """
    # state every scaler kind shares: one binding index, one set of escaler_* collectors
    bindings = TargetBindings()
    scaler_metrics = ScalerMetrics(mgr.metrics.registry)
    gate = CRDGate(mgr)
    slo = _LateDecisions()
    # what the ElasticScaler and LLMScaler setups are given alike, each setting stated once; each gets
    # an outbound executor of its own on the same bounds (its completions wake that controller's scalers),
    # made when its setup runs
    scalers = ScalerSetupKwargs(
        poll_interval=flags.metrics_trigger_poll_interval, min_poll_interval=flags.min_poll_interval,
        allowed_hosts=flags.allowed_endpoint_hosts, allow_networks=flags.allow_endpoint_networks,
        max_concurrent_reconciles=flags.max_concurrent_reconciles, bindings=bindings,
        scaler_metrics=scaler_metrics, status_refresh_seconds=flags.status_refresh_seconds, crd_gate=gate,
        promql_scope=flags.promql_scope)
    outbound = OutboundBounds(workers=flags.outbound_workers, per_namespace=flags.outbound_per_namespace)
    setups: dict[str, Callable[[], object]] = {
        "elasticscaler": lambda: setup_elasticscaler(
            mgr, **scalers, outbound=outbound_executor(mgr, **outbound, controller="elasticscaler")),
        # Tidal: time rules → status.desiredReplicas, followed by a StateTrigger ElasticScaler
        "tidal": lambda: setup_tidal(mgr, bindings=bindings,
                                     max_concurrent_reconciles=flags.max_concurrent_reconciles),
        # ResourceScalingGroup: members scaled as one unit; its ranking queries use the outbound policy
        "rsg": lambda: setup_rsg(mgr, bindings=bindings, allowed_hosts=flags.allowed_endpoint_hosts,
                                 allow_networks=flags.allow_endpoint_networks,
                                 max_concurrent_reconciles=flags.max_concurrent_reconciles,
                                 limits=flags.replication_limits, promql_scope=flags.promql_scope),
        # SLO decision engine: LLM/Job SLO requirements → status.decision and the decisions route; set up
        # before the LLMScaler, which reads its decisions in-process (customProvider.serviceId)
        "slo": lambda: slo.serve(setup_slo(
            mgr, prometheus_endpoint=flags.slo_prometheus_endpoint,
            poll_interval=flags.metrics_trigger_poll_interval, allowed_hosts=flags.allowed_endpoint_hosts,
            allow_networks=flags.allow_endpoint_networks,
            max_concurrent_reconciles=flags.max_concurrent_reconciles,
            outbound_workers=flags.outbound_workers, promql_scope=flags.promql_scope).decisions.lookup),
        # LLMScaler: Prometheus or custom-provider decisions, on the same pipeline, bindings, outbound policy
        "llmscaler": lambda: setup_llmscaler(
            mgr, **scalers, outbound=outbound_executor(mgr, **outbound, controller="llmscaler"),
            decisions=slo if "slo" in flags.controllers else None),
    }
    for name, needs in CONTROLLERS.items():
        if name in flags.controllers:
            started = gate.add(name, needs, setups[name])
            if not started and name == "slo":
                slo.why = ("the SLO decision engine of this manager waits for CRD "
                           + " and ".join(gate.waiting()[name]))
    return gate


class _LateDecisions:
    """The SLO engine's decision lookup for the LLMScaler, bound when the engine is set up (at start,
    or when its CRDs appear); until then every lookup answers why there is no decision."""

    def __init__(self) -> None:
        # the engine's lookup; None until it is set up (then fixed)
        self._lookup: DecisionLookup | None = None
        # the answer while there is no engine
        self.why = "the SLO decision engine of this manager is not set up"

    def serve(self, lookup: DecisionLookup) -> None:
        self._lookup = lookup

    def __call__(self, namespace: str, service_id: str) -> Mapping[str, Any] | str:
        lookup = self._lookup
        return self.why if lookup is None else lookup(namespace, service_id)


def controllers_line(flags: ManagerFlags, gate: CRDGate) -> str:
    """The start-up summary's ``controllers: ...`` line: running, waiting for a CRD, off by the flag."""
    waiting = gate.waiting()
    running = [n for n in CONTROLLERS if n in flags.controllers and n not in waiting]
    off = [n for n in CONTROLLERS if n not in flags.controllers]
    parts = [f"running {', '.join(running) or 'none'}"]
    if waiting:
        parts.append("waiting for their CRD: " + ", ".join(f"{n} ({' and '.join(crds)})"
                                                           for n, crds in waiting.items()))
    if off:
        parts.append(f"off by {CONTROLLERS_FLAG}: {', '.join(off)}")
    return "; ".join(parts)


def _positive_duration(text: str) -> float:
    """A duration > 0 (``--min-poll-interval``: 0 would let a spec poll as fast as the poller ticks)."""
    seconds = duration_seconds(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: must be greater than 0")
    return seconds


def _kube_authenticator(mgr: Manager) -> Authenticator:
    if mgr.rest is None:
        raise ValueError("--api-bind-address: the API server checks tokens with the cluster's "
                         "TokenReview and SubjectAccessReview, but this manager has no cluster connection")
    return KubeAuthenticator(mgr.rest, clock=mgr.clock)


def build_manager(
    flags: ManagerFlags,
    manager_factory: Callable[[ManagerOptions], Manager] = Manager,
    api_authenticator: Callable[[Manager], Authenticator | None] = _kube_authenticator,
    clock: Clock | None = None,
) -> Manager:
    """The manager with the webhook and API server (if enabled) and the reconcilers; not started.

    ``api_authenticator`` builds the API server's authenticator from the manager (default: the
    TokenReview/SubjectAccessReview ``KubeAuthenticator`` on ``mgr.rest``; ``None`` turns
    authentication off — for tests and embedding only). ``clock`` is the manager's one clock
    (default: the real one; ``run`` passes the test clock of ``--unsafe-test-clock-file``).
    """
    options = flags.manager_options(clock)
    files: ServingCertFiles | None = None
    if flags.serving_cert_secret is not None:
        # a private directory the Secret's pair is written to (never its CA key)
        files = ServingCertFiles(tempfile.mkdtemp(prefix="escaler-serving-"))
        # the pair (its key) does not outlive the process
        atexit.register(shutil.rmtree, files.directory, ignore_errors=True)
        if options.metrics_secure and not options.metrics_cert_dir:
            options = dataclasses.replace(options, metrics_cert_dir=files.directory)
    mgr = manager_factory(options)
    if files is not None:
        _add_serving_certs(mgr, flags, files)
    api_cert, api_key = flags.api_cert_file, flags.api_key_file
    if files is not None and api_cert is None and not flags.api_insecure:
        api_cert, api_key = files.cert_file, files.key_file
    if parse_bind_address(flags.api_bind_address) is not None:
        mgr.add_api_server(ApiServer(
            flags.api_bind_address, cert_file=api_cert, key_file=api_key,
            insecure=flags.api_insecure, clock=mgr.clock, authenticator=api_authenticator(mgr),
            registry=mgr.metrics.registry,
        ))
    if flags.webhook_port:
        hook_cert, hook_key = flags.webhook_cert_file, flags.webhook_key_file
        if hook_cert is None and files is not None:
            hook_cert, hook_key = files.cert_file, files.key_file
        assert hook_cert is not None and hook_key is not None
        server = WebhookServer(
            validators(CheckContext(flags.allowed_endpoint_hosts, flags.promql_scope,
                                    flags.slo_prometheus_endpoint)),
            cert_file=hook_cert, key_file=hook_key,
            bind_address=f":{flags.webhook_port}", registry=mgr.metrics.registry,
        )
        mgr.add_webhook(server)
        mgr.add_readyz_check("webhook", server.serving.is_set)
    gate = register_reconcilers(mgr, flags)
    _log.info("controllers: %s", controllers_line(flags, gate),
              extra={"controllers": sorted(flags.controllers), "waitingForCRDs": gate.waiting()})
    return mgr


def _add_serving_certs(mgr: Manager, flags: ManagerFlags, files: ServingCertFiles) -> None:
    """``--serving-cert-secret``: provision the Secret before anything binds, re-check it on every
    replica, and (``--webhook-configuration``) keep the webhook's caBundle equal to its ca.crt from
    the leader."""
    ref = flags.serving_cert_secret
    assert ref is not None
    if mgr.rest is None:
        raise ValueError("--serving-cert-secret: the serving-certificate Secret needs a cluster connection")
    secret = ServingCertSecret(mgr.rest, ref, CertPolicy(flags.serving_cert_dns_names), mgr.clock)
    webhook = WebhookCABundle(mgr.rest, flags.webhook_configuration) if flags.webhook_configuration else None
    configmap = (CAConfigMap(mgr.rest, SecretRef(ref.namespace, flags.serving_cert_ca_configmap))
                 if flags.serving_cert_ca_configmap else None)
    certs = ServingCerts(secret, files, webhook=webhook, ca_configmap=configmap)
    # every replica keeps the Secret valid: creates carry no resourceVersion and fail when it exists,
    # updates carry the one read, so two replicas racing converge on one certificate (no lease needed)
    mgr.allow_unleased_write("POST", ref.collection)
    mgr.allow_unleased_write("PUT", ref.path)
    mgr.add_before_start(f"the serving certificate of Secret {ref}", certs.provision)
    mgr.add(certs, needs_leader_election=False)
    if certs.publishes:
        mgr.add(_CABundleSync(certs, mgr.can_write, sharded=mgr.shards is not None),
                needs_leader_election=True)


# how often the leader compares the webhook configuration's caBundle with the Secret's ca.crt, and
# how soon it tries again when the configuration is not there yet or the attempt failed
CA_BUNDLE_SYNC_INTERVAL = 60.0
CA_BUNDLE_RETRY_INTERVAL = 5.0


class _CABundleSync:
    """A leader runnable: the CA ConfigMap and the webhook configuration's caBundle from the Secret,
    now and every
    ``CA_BUNDLE_SYNC_INTERVAL`` seconds, ``CA_BUNDLE_RETRY_INTERVAL`` while the configuration is
    absent or a call failed (a write through the fence; sharded: the leader of shard 0, the other
    replicas skip the pass without a call)."""

    def __init__(self, certs: ServingCerts, fence: WriteGate, *, sharded: bool) -> None:
        # what to sync, the manager's write fence, and whether writes need a shard in context; fixed
        self.certs = certs
        self.fence = fence
        self.sharded = sharded

    def start(self, stop: threading.Event) -> None:
        clock = self.certs.secret.clock
        while not stop.is_set():
            wait = CA_BUNDLE_SYNC_INTERVAL
            try:
                with writing_for(0 if self.sharded else None):
                    if self.fence.is_set() and self.certs.publish_ca() == ABSENT:
                        wait = CA_BUNDLE_RETRY_INTERVAL
            except Exception as exc:
                wait = CA_BUNDLE_RETRY_INTERVAL
                _log.warning("cannot publish the serving CA (ConfigMap %s, ValidatingWebhookConfiguration "
                             "%s): %s", self.certs.ca_configmap.ref if self.certs.ca_configmap else "-",
                             self.certs.webhook.name if self.certs.webhook else "-", exc)
            if clock.sleep(wait, stop):
                return


# API route path prefix → what the start-up summary calls it
_API_NAMES = (("/decisions/", "decisions API"), ("/signal/", "signals API"))


def _where(address: str) -> str:
    host, bound_port, _v6 = parse_bind_address(address) or ("", 0, False)
    where = f"on {address}"
    if not host:
        where += " (all interfaces)"
    return where + (" (an ephemeral port)" if bound_port == 0 else "")


def _api_line(flags: ManagerFlags, api: ApiServer | None) -> str:
    if api is None:
        return "off (--api-bind-address=0)"
    if flags.api_insecure:
        tls = "plain HTTP (--api-insecure)"
    elif flags.api_cert_file:
        tls = "HTTPS with --api-cert-dir's certificate"
    elif flags.serving_cert_secret is not None:
        tls = f"HTTPS with the certificate of Secret {flags.serving_cert_secret} (clients trust its ca.crt)"
    else:
        tls = "HTTPS with a self-signed certificate (its SHA-256 fingerprint logged when it binds)"
    routes = []
    for method, pattern in api.routes:
        name = next((n for prefix, n in _API_NAMES if pattern.startswith(prefix)), "route")
        routes.append(f"{name} {method} {pattern}")
    return (f"{_where(flags.api_bind_address)}, {tls}, on the leader only: "
            + ("; ".join(routes) or "no routes"))


def _leader_line(flags: ManagerFlags, lease_namespace: str) -> str:
    if not flags.leader_elect:
        line = "off: this process writes as soon as its caches sync (--leader-elect to run replicas)"
        if flags.total_shards > 1:
            line += f"; static shard {flags.shard_index} of {flags.total_shards}"
        return line
    lease = f"{lease_namespace}/{flags.leader_election_id}"
    if flags.total_shards > 1:
        return (f"on: Leases {lease}-shard-0..{flags.total_shards - 1} (coordination.k8s.io/v1), "
                "one per shard")
    return f"on: Lease {lease} (coordination.k8s.io/v1); writes only while it holds the lease"


def served_endpoints(flags: ManagerFlags, mgr: Manager, webhook_off_reason: str) -> list[tuple[str, str]]:
    """``(component, what and where)`` for the start-up summary: the API server, health probes,
    metrics, the admission webhook and leader election, from the flags and the built manager."""
    probes, metrics = flags.health_probe_bind_address, flags.metrics_bind_address
    auth = (" over HTTPS behind TokenReview + SubjectAccessReview (--metrics-secure)" if flags.metrics_secure
            else "")
    hook_cert = flags.webhook_cert_file or f"the certificate of Secret {flags.serving_cert_secret}"
    webhook = (f"on :{flags.webhook_port} (all interfaces), HTTPS with {hook_cert}: "
               "POST /validate-<group>-<version>-<kind>" if flags.webhook_port
               else f"off: {webhook_off_reason}")
    return [
        ("api", _api_line(flags, mgr.api_server)),
        ("probes", f"{_where(probes)}: GET /healthz, GET /readyz" if parse_bind_address(probes)
         else "off (--health-probe-bind-address=0)"),
        ("metrics", f"{_where(metrics)}: GET /metrics{auth}" if parse_bind_address(metrics)
         else "off (--metrics-bind-address=0)"),
        ("webhook", webhook),
        ("leader-election", _leader_line(flags, mgr.leader_election_namespace)),
    ]


# ManagerOptions field (in its ValueError messages) → the flag that sets it
_OPTION_FLAGS = {
    "leader_election": "--leader-elect",
    "leader_election_namespace": "--leader-election-namespace",
    "leader_election_id": "--leader-election-id",
    "metrics_bind_address": "--metrics-bind-address",
    "health_probe_bind_address": "--health-probe-bind-address",
    "metrics_secure": "--metrics-secure",
    "metrics_cert_dir": "--metrics-cert-dir",
    "max_concurrent_reconciles": "--max-concurrent-reconciles",
    "total_shards": "--total-shards",
    "shard_index": "--shard-index",
}
_OPTION_RE = re.compile(r"ManagerOptions\.(\w+)")


def _flag_message(message: str) -> str:
    return _OPTION_RE.sub(lambda m: _OPTION_FLAGS.get(m.group(1), m.group(0)), message)


def open_test_clock(flags: ManagerFlags) -> ClockFile | None:
    """``--unsafe-test-clock-file``'s clock and its (started) file watcher, announced by a WARNING;
    None without the flag. ``UsageError`` when the file no longer holds a valid offset."""
    if flags.unsafe_test_clock_file is None:
        return None
    try:
        watcher = ClockFile.open(flags.unsafe_test_clock_file, RealClock())
    except ValueError as exc:
        raise UsageError(f"{TEST_CLOCK_FLAG}: {exc}") from None
    _log.warning(
        "UNSAFE TEST CLOCK: %s=%s is set, for tests only: this manager's clock runs %g s ahead of real "
        "time and steps forward whenever that file's offset grows (every schedule, window, lease and "
        "timeout follows it); never run a production manager with it",
        TEST_CLOCK_FLAG, watcher.path, watcher.clock.offset,
        extra={"clockFile": watcher.path, "offset": watcher.clock.offset})
    watcher.start()
    return watcher


def run(args: argparse.Namespace) -> int:
    allocator = tune_allocator()  # before any thread makes a malloc arena of its own
    try:
        flags = flags_from_args(args)
    except UsageError as exc:
        print(f"escaler manager: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(flags.log_format, flags.log_level)
    try:
        test_clock = open_test_clock(flags)
    except UsageError as exc:
        print(f"escaler manager: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _run(args, flags, test_clock.clock if test_clock is not None else None, allocator)
    finally:
        if test_clock is not None:
            test_clock.stop()


def _run(args: argparse.Namespace, flags: ManagerFlags, clock: Clock | None, allocator: str) -> int:
    try:
        # without the test clock, exactly the call it has always been
        mgr = build_manager(flags) if clock is None else build_manager(flags, clock=clock)
    except ConfigError as exc:
        _log.error("cannot connect to Kubernetes: %s", exc)
        return 1
    except ConnectionFailure as exc:
        _log.error("cannot reach the API server to set up the controllers: %s", exc)
        return 1
    except StatusError as exc:
        hint = (" — are escaler's CRDs installed? (kubectl apply --server-side -k manifests/crds/)"
                if exc.code == 404 else "")
        _log.error("cannot set up the controllers: %s%s", exc, hint)
        return 1
    except ValueError as exc:
        print(f"escaler manager: error: {_flag_message(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    # logged once the manager is built: a usage error stays the first line, the test clock's WARNING
    # the first log line
    trim = MallocTrim(flags.malloc_trim_interval, clock=clock)
    if trim.enabled:
        mgr.add(trim, needs_leader_election=False)
    allocator += f", trim every {trim.interval:g}s" if trim.enabled else ", no trim"
    _log.info("malloc: %s", allocator, extra={"allocator": allocator})
    _log.info("starting manager", extra={
        "webhookPort": flags.webhook_port, "apiBindAddress": flags.api_bind_address,
        "watchNamespace": flags.namespace or "*",
        "leaderElect": flags.leader_elect})
    off_reason = WEBHOOK_OFF_BY_FLAG if args.webhook_port == 0 else WEBHOOK_OFF_NO_CERT
    for component, line in served_endpoints(flags, mgr, off_reason):
        _log.info("serving %s: %s", component, line, extra={"component": component})
    return mgr.start()
