"""The manager: one process's shared clients, caches, runnables and leader election (docs/operations.md).

A ``Manager`` owns exactly one of each shared thing — one ``ApiClient`` (from
``escaler.kube.new_api_client``, never the library's global default), a ``RESTMapper``, a
``DynamicClient``, an ``InformerFactory`` plus ``DynamicInformers``, an ``EventRecorder`` and a
``MetricsRegistry`` (its own ``CollectorRegistry``) — and runs *runnables*: objects with a
blocking ``start(stop: threading.Event) -> None`` that return once ``stop`` is set.
Controllers are runnables that need leader election.

**Start order** (``start()``), each step only after the previous one succeeded:

0. the ``add_before_start`` steps, in order (the serving certificate the servers load:
   ``escaler.runtime.servingcerts``); one that raises fails the start before anything binds;
1. the probe (``/healthz``, ``/readyz``) and metrics (``/metrics``) servers — a bind failure
   fails the start before anything touches the cluster. Both run on ``runtime.httpbase``
   (connection cap, total request deadline, no request body). Defaults bind what a Deployment
   needs: probes on ``:8081`` (the kubelet probes the pod IP) and metrics on ``:8080`` (scraped
   through the pod IP or a Service); ``metrics_secure`` (``--metrics-secure``) puts ``/metrics``
   behind TokenReview + SubjectAccessReview (``get`` on the non-resource URL ``/metrics``), as
   controller-runtime's secure metrics serving does; probes are never authenticated;
2. the *webhooks* group (``add_webhook``);
3. the caches: every informer requested so far is started, and all must sync within
   ``cache_sync_timeout`` (else the start fails);
4. the runnables that do not need leader election;
5. leader election, when enabled (a standby replica stays here, caches warm);
6. once elected (at once when leader election is off): ``can_write`` is opened, then the leader
   runnables (controllers, and the API server of ``add_api_server``) start.

A runnable added while the manager runs (``add``; e.g. a controller set up once its CRD appeared,
``escaler.runtime.crdgate``) has the informers it asked for started at once, on a standby too (its
caches are warm when it takes over), and starts with its group: a leader runnable only once elected.

**The write fence** (``can_write``, a ``escaler.runtime.fence.WriteFence``): the manager's REST
client runs it right before every POST/PUT/PATCH/DELETE it sends (Lease and review calls
exempt), so target, status, HPA and Event writes are all refused — ``FencedWrite``, before
anything reaches the wire — unless this process is elected *and* its lease is provably valid now:
``monotonic() < send time of the last successful renewal + renew_deadline``. A process that was
frozen and thaws finds the fence lapsed on its first write; the elector then reports the loss.
Without leader election the fence is open from start until shutdown. ``allow_unleased_write``
lets exact ``(method, path)`` requests through on every replica: writes that are safe without the
lease because they are compare-and-swap and every replica decides them alike (the
serving-certificate Secret's create and update).

**Graceful stop** (``stop`` set, or SIGTERM/SIGINT when ``start()`` runs on the main thread — a
second signal exits immediately with status 1): controllers stop taking work and their in-flight
reconciles finish; then the lease is released (only if every leader runnable did finish: a
reconcile still running past the deadline could still write, so the lease is then left to
expire instead) — the event recorder flushes just before that, while the lease is still ours;
then the non-leader runnables and caches stop, and the webhooks and servers stop last (they may
still be answering). All of it is bounded by
``graceful_shutdown_timeout``, measured on the manager's clock (``ManagerOptions.clock``: every
wait for a thread to exit is a wait on that clock, never a wall-time ``Thread.join``); ``start()``
returns 0 (1 if a leader runnable outlived it).

**Sharding** (``total_shards`` > 1, ``escaler.runtime.sharding``): ``can_write`` is a
``ShardedFence`` (also ``shards``), one fence per shard, checked against the shard of the write in
progress. The leader runnables start once the caches synced — they gate each request by its
shard. With leader election, one ``ShardCandidate`` per shard competes for the Lease
``<leader_election_id>-shard-<i>``: an ordinary candidate for the preferred shard
(``shard_index``, else the ordinal of the pod name ``$POD_NAME``/hostname ``<name>-<n>``, else
none), a standby for the others. A lost shard closes its fence and is run for again; the process
does not exit. Without leader election the split is static: exactly ``shard_index`` is led.
Shutdown releases every shard Lease held (after the controllers stopped, as for one lease).

**Losing the lease**: ``can_write`` is closed *first* (it latches; it had usually lapsed by
itself already) — controllers check it before every reconcile, and every write is checked on the
wire — then every leader runnable is told to
stop, without waiting for it (controller-runtime skips the grace period here too), the rest is
torn down, and ``start()`` returns 1 so the process exits non-zero and its Deployment restarts it
as a fresh standby. A failed start (bind, cache sync) or a runnable that raises also returns 1.

**Readiness** (our reading of docs/operations.md "caches synced and, when elected, leading"): ``/readyz``
passes once the caches have synced — a *standby* replica is ready, so rolling updates of a
multi-replica Deployment proceed — and fails again if this replica was elected and then lost
the lease (it is about to exit). ``/healthz`` passes while the process serves ("ping").
Extra checks may be added with ``add_healthz_check``/``add_readyz_check``.

Limitations: Python cannot interrupt a thread, so a reconcile stuck in I/O past the grace period
is abandoned (its daemon thread dies with the process), not cancelled — its writes are refused
by the fence. The urllib3 pool is sized at construction from an estimate
(``POOL_ESTIMATE_*``; override with ``ManagerOptions.api_pool_size``), before the controllers
that will use it exist. Signal handlers are installed only when ``start()`` runs on the main
thread; elsewhere the caller owns the ``stop`` event.

For tests and embedding without a cluster, every collaborator can be injected: pass ``mapper``
and ``lw_factory`` (and ``lease_client`` for leader election) and no API connection is made;
``Manager.for_testing`` does that with both servers disabled.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import signal
import socket
import ssl
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Protocol

from escaler.clock import Clock, RealClock, wait_for
from escaler.informers.dynamic import DynamicInformers
from escaler.informers.factory import InformerFactory, ResourceKey
from escaler.informers.interfaces import ListerWatcher
from escaler.kube.config import SERVICE_ACCOUNT_DIR, load_config, new_api_client, pool_size_for
from escaler.kube.discovery import ResourceMapping, RESTMapper
from escaler.kube.dynamic import DynamicClient, lister_watcher_factory
from escaler.kube.events import EventRecorder, FakeRecorder, Recorder
from escaler.kube.rest import RestClient
from escaler.runtime.apiserver import ApiServer
from escaler.runtime.authfilter import FailureLimiter, RequestAuth
from escaler.runtime.authn import Authenticator, KubeAuthenticator
from escaler.runtime.fence import WriteFence
from escaler.runtime.health import Check, Detail, HealthChecks, ping
from escaler.runtime.leaderelection import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
    LeaderElectionConfig,
    LeaderElector,
)
from escaler.runtime.leaselock import KubeLeaseClient, LeaseClient, LeaseLock
from escaler.runtime.leasewatch import lease_watcher
from escaler.runtime.metrics import EXPOSITION_CONTENT_TYPE, MetricsRegistry
from escaler.runtime.server import HTTPServer, Response, RouteHandler, parse_bind_address
from escaler.runtime.sharding import ShardCandidate, ShardedFence, ordinal_shard, shard_lease_name
from escaler.runtime.tls import CertificateReloader, self_signed

__all__ = [
    "DEFAULT_CACHE_SYNC_TIMEOUT",
    "DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT",
    "DEFAULT_HEALTH_PROBE_BIND_ADDRESS",
    "DEFAULT_LEADER_ELECTION_ID",
    "DEFAULT_METRICS_BIND_ADDRESS",
    "DYNAMIC_LIST_PAGE_SIZE",
    "EXIT_FAILURE",
    "EXIT_OK",
    "Manager",
    "ManagerOptions",
    "Mapper",
    "Runnable",
]

DEFAULT_METRICS_BIND_ADDRESS = ":8080"
DEFAULT_HEALTH_PROBE_BIND_ADDRESS = ":8081"
DEFAULT_LEADER_ELECTION_ID = "escaler-manager"
DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT = 30.0
DEFAULT_CACHE_SYNC_TIMEOUT = 120.0
# Workers per controller. Reconciles are CPU-bound apart from their writes (the /scale write, the
# status patch): with one core, workers only overlap those round trips, which is what a fleet-wide
# surge is made of. Throughput levels off near (cpu + io) / cpu workers; 8 reaches that plateau for
# a 1 ms reconcile with a 5 ms write (bench/bench_controller_workers.py, in docs/benchmarks.md) and
# costs nothing when idle. (A standalone Controller keeps controller-runtime's default of 1.)
DEFAULT_MAX_CONCURRENT_RECONCILES = 8
DEFAULT_EVENT_COMPONENT = "escaler"
# most objects per list page of the dynamic informers (workloads, pods, clones, sources); the reflector
# also bounds a page by bytes (16 objects first, then about 4 MiB of JSON) and transforms each object
# as it is decoded, so a relist of 256 clones of a 256 KiB template (GroupReplication's bounds) never
# holds a page of them whole
DYNAMIC_LIST_PAGE_SIZE = 100
# The urllib3 pool is sized before controllers exist: assume this many informers and controllers
# (each with max_concurrent_reconciles workers) unless ManagerOptions.api_pool_size says otherwise.
POOL_ESTIMATE_INFORMERS = 16
POOL_ESTIMATE_CONTROLLERS = 6
# The main thread blocks on the caller's stop event (so a stop is seen at once) and re-checks the
# manager's own "done" (a lost lease, a failed runnable) this often. Real time on purpose: both
# events are set by other threads in real time, and nothing is timed by this poll.
MAIN_LOOP_POLL_SECONDS = 0.1
# The initial cache sync is awaited in slices this long, re-checking the stop event between them.
CACHE_SYNC_SLICE_SECONDS = 0.5
# After a lost lease: how long caches, non-leader runnables and servers get to stop.
LOST_LEASE_CLEANUP_SECONDS = 2.0

EXIT_OK = 0
EXIT_FAILURE = 1

_log = logging.getLogger(__name__)


class Runnable(Protocol):
    """Anything the manager runs: ``start`` blocks until ``stop`` is set, then returns."""

    def start(self, stop: threading.Event) -> None: ...


class Mapper(Protocol):
    """What the manager and builder need from a RESTMapper."""

    def mapping_for(self, api_version: str, kind: str) -> ResourceMapping: ...


@dataclass(frozen=True)
class ManagerOptions:
    """Manager configuration; every field has the CLI flag's default (docs/operations.md)."""

    # kubeconfig path and context; None = $KUBECONFIG, in-cluster, then ~/.kube/config
    kubeconfig: str | None = None
    context: str | None = None
    # namespace the caches watch for namespaced kinds; "" = all namespaces
    namespace: str = ""
    leader_election: bool = False
    # the Lease's name and namespace ("" namespace = the pod's own namespace, in-cluster)
    leader_election_id: str = DEFAULT_LEADER_ELECTION_ID
    leader_election_namespace: str = ""
    # "" = "<hostname>_<uuid4>", unique per process
    leader_election_identity: str = ""
    lease_duration: float = DEFAULT_LEASE_DURATION
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    retry_period: float = DEFAULT_RETRY_PERIOD
    leader_election_release_on_cancel: bool = True
    # "host:port", ":port", "[v6]:port", or "0" to disable
    metrics_bind_address: str = DEFAULT_METRICS_BIND_ADDRESS
    health_probe_bind_address: str = DEFAULT_HEALTH_PROBE_BIND_ADDRESS
    # /metrics behind TokenReview + SubjectAccessReview (get on the non-resource URL /metrics), over
    # HTTPS: the pair in metrics_cert_dir (tls.crt, tls.key), else a self-signed one made at start
    metrics_secure: bool = False
    metrics_cert_dir: str = ""
    # workers per controller unless the builder sets its own
    max_concurrent_reconciles: int = DEFAULT_MAX_CONCURRENT_RECONCILES
    # upper bound on the whole graceful stop, in seconds of ``clock``
    graceful_shutdown_timeout: float = DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT
    # upper bound on the initial cache sync
    cache_sync_timeout: float = DEFAULT_CACHE_SYNC_TIMEOUT
    # urllib3 connections; None = pool_size_for(estimated informers, estimated workers)
    api_pool_size: int | None = None
    # reportingController of the Events the manager's recorder writes
    event_component: str = DEFAULT_EVENT_COMPONENT
    # time source for everything the manager builds; None = RealClock
    clock: Clock | None = None
    # shards the scalers are split into across replicas (1 = no sharding; see the docstring)
    total_shards: int = 1
    # this replica's preferred shard (with leader election) or its only shard (without);
    # None = derived from the pod name's ordinal (leader election only)
    shard_index: int | None = None

    def __post_init__(self) -> None:
        for name in ("metrics_bind_address", "health_probe_bind_address"):
            try:
                parse_bind_address(getattr(self, name))
            except ValueError as exc:
                raise ValueError(f"ManagerOptions.{name}: {exc}") from None
        shared = parse_bind_address(self.metrics_bind_address)
        if (self.metrics_secure and shared is not None and shared[1] != 0
                and self.metrics_bind_address == self.health_probe_bind_address):
            raise ValueError("ManagerOptions.metrics_secure: /metrics is then served over HTTPS, and the "
                             "kubelet probes over HTTP: give metrics_bind_address a port of its own, apart "
                             "from health_probe_bind_address")
        if self.metrics_cert_dir and not self.metrics_secure:
            raise ValueError("ManagerOptions.metrics_cert_dir: only with metrics_secure (plain /metrics "
                             "serves no certificate)")
        if not isinstance(self.max_concurrent_reconciles, int) or self.max_concurrent_reconciles < 1:
            raise ValueError(
                f"ManagerOptions.max_concurrent_reconciles: must be an integer >= 1, "
                f"got {self.max_concurrent_reconciles!r}"
            )
        for name in ("graceful_shutdown_timeout", "cache_sync_timeout"):
            value = getattr(self, name)
            minimum_ok = value > 0 if name == "cache_sync_timeout" else value >= 0
            if not math.isfinite(value) or not minimum_ok:
                rule = "> 0" if name == "cache_sync_timeout" else ">= 0"
                raise ValueError(f"ManagerOptions.{name}: must be a finite number {rule}, got {value!r}")
        if self.api_pool_size is not None and self.api_pool_size < 1:
            raise ValueError(f"ManagerOptions.api_pool_size: must be >= 1, got {self.api_pool_size}")
        if not isinstance(self.total_shards, int) or self.total_shards < 1:
            raise ValueError(
                f"ManagerOptions.total_shards: must be an integer >= 1, got {self.total_shards!r}")
        if self.shard_index is not None and not 0 <= self.shard_index < self.total_shards:
            raise ValueError(f"ManagerOptions.shard_index: must be in [0, total_shards={self.total_shards}), "
                             f"got {self.shard_index}")
        if self.total_shards > 1 and not self.leader_election and self.shard_index is None:
            raise ValueError("ManagerOptions.shard_index: required with total_shards > 1 and no leader "
                             "election (static sharding: this replica leads exactly that shard)")
        if self.leader_election and not self.leader_election_id:
            raise ValueError("ManagerOptions.leader_election_id: required when leader_election is on")
        # Lease timings are validated (client-go's rules) whether or not election is on, so a bad
        # flag fails at startup rather than on the day leader election gets enabled.
        LeaderElectionConfig(
            name=self.leader_election_id or DEFAULT_LEADER_ELECTION_ID, namespace="-", identity="-",
            lease_duration=self.lease_duration, renew_deadline=self.renew_deadline,
            retry_period=self.retry_period,
        )


def default_identity() -> str:
    """client-go's convention: ``<hostname>_<uuid4>``."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def _in_cluster_namespace(sa_dir: str = SERVICE_ACCOUNT_DIR) -> str:
    try:
        with open(os.path.join(sa_dir, "namespace"), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


@dataclass
class _Group:
    """One runnable group: started together, stopped together."""

    # for logs and thread names
    name: str
    # set to stop every runnable of the group; never cleared
    stop: threading.Event
    # the runnables, in add order
    runnables: list[Runnable]
    # the started runnables' threads that have not returned yet; guarded by Manager._exits
    running: set[threading.Thread] = field(default_factory=set)
    # True once the group was started; runnables added later start at once
    started: bool = False


class Manager:
    """Runs runnables over shared clients and caches; see the module docstring."""

    def __init__(
        self,
        options: ManagerOptions | None = None,
        *,
        mapper: Mapper | None = None,
        lw_factory: Callable[[ResourceKey], ListerWatcher] | None = None,
        client: DynamicClient | None = None,
        rest: RestClient | None = None,
        lease_client: LeaseClient | None = None,
        event_recorder: Recorder | None = None,
        metrics: MetricsRegistry | None = None,
        metrics_authenticator: Authenticator | None = None,
    ) -> None:
        opts = options or ManagerOptions()
        # configuration; fixed
        self.options = opts
        # the one time source handed to everything built here
        self.clock: Clock = opts.clock or RealClock()
        if (mapper is None) != (lw_factory is None):
            raise ValueError("Manager: inject both mapper and lw_factory, or neither")
        # the Lease's namespace; "" when leader election is off (validated before building anything)
        self._le_namespace = ""
        if opts.leader_election:
            self._le_namespace = opts.leader_election_namespace or _in_cluster_namespace()
            if not self._le_namespace:
                raise ValueError(
                    "ManagerOptions.leader_election_namespace: required when not running in a cluster "
                    "(no service-account namespace file)"
                )
            if lease_client is None and mapper is not None and rest is None:
                raise ValueError("Manager: leader election on injected fakes needs a lease_client")
        # the write fence (see the module docstring); every write of ``rest`` passes its guard.
        # Sharded: one fence per shard (``shards`` is the same object; None when not sharded)
        self.shards: ShardedFence | None = (
            ShardedFence(self.clock, opts.total_shards, leased=opts.leader_election)
            if opts.total_shards > 1 else None)
        self.can_write: WriteFence | ShardedFence = (
            self.shards if self.shards is not None else WriteFence(self.clock, leased=opts.leader_election))
        if mapper is None or lw_factory is None:
            rest = rest or self._connect(opts)
            real_mapper = RESTMapper(rest, clock=self.clock)
            mapper = real_mapper
            lw_factory = lister_watcher_factory(rest, real_mapper)
            client = client or DynamicClient(rest, real_mapper)
        # the REST client (None when the manager was built on injected fakes)
        self.rest: RestClient | None = rest
        # (method, path) writes that do not need the lease (allow_unleased_write); only grows
        self._unleased: set[tuple[str, str]] = set()
        for fenced in (rest, getattr(client, "rest", None)):
            if isinstance(fenced, RestClient):
                fenced.set_write_guard(self.write_guard)
        # kind → resource resolution for the builder
        self.mapper: Mapper = mapper
        # dynamic access to any resource; None when built on injected fakes
        self._client: DynamicClient | None = client
        # shared informers (controllers' caches) and ref-counted label-selected informers
        self.informers = InformerFactory(lw_factory, clock=self.clock)
        self.dynamic_informers = DynamicInformers(lw_factory, clock=self.clock,
                                                  page_size=DYNAMIC_LIST_PAGE_SIZE)
        # this manager's metrics (its own CollectorRegistry) served on /metrics
        self.metrics = metrics or MetricsRegistry()
        # identity in the Lease and in Events' reportingInstance
        self.identity = opts.leader_election_identity or default_identity()
        # Events: injected, else written through the client, else recorded in memory
        self._recorder: Recorder = event_recorder or (
            EventRecorder(client, component=opts.event_component, instance=self.identity[:128],
                          clock=self.clock)
            if client is not None else FakeRecorder()
        )
        # set once the initial cache sync succeeded; never cleared
        self.caches_synced = threading.Event()
        # the probe checks, with the defaults of the module docstring
        self.healthz = HealthChecks("healthz")
        self.readyz = HealthChecks("readyz")
        self.healthz.add("ping", ping)
        self.readyz.add("informers-synced", lambda: self.caches_synced.is_set() and not self._lost)
        # guards the groups, _controller_names and _started
        self._mu = threading.Lock()
        self._webhooks = _Group("webhooks", threading.Event(), [])
        self._others = _Group("runnables", threading.Event(), [])
        self._leaders = _Group("leader-runnables", threading.Event(), [])
        # guards every "running" set of threads the manager awaits (groups, elector, bounded
        # steps); notified as each of them exits, so shutdown waits on self.clock (see _spawn)
        self._exits = threading.Condition()
        # names of controllers built on this manager (unique: they label metrics)
        self._controller_names: set[str] = set()
        # start() runs once
        self._started = False
        # set to end start()'s wait: stop requested, lease lost, or a runnable failed
        self._done = threading.Event()
        # True once the lease was lost (exit code 1, readyz fails); never reset
        self._lost = False
        # the first runnable failure, if any (exit code 1)
        self._failure: str | None = None
        # the lease client; injected, else built on the REST client at start when needed
        self._lease_client = lease_client
        # the elector and its stop; None unless leader election runs (sharded: the current
        # term's elector of each shard, in _shard_electors, guarded by _mu)
        self._elector: LeaderElector | None = None
        self._shard_electors: dict[int, LeaderElector] = {}
        self._elector_stop = threading.Event()
        # the elector's thread while it runs (empty before and after); guarded by _exits
        self._elector_running: set[threading.Thread] = set()
        # stops the informer factory
        self._cache_stop = threading.Event()
        # where secure /metrics' self-signed pair lives (None: not secure, or given a pair)
        self._metrics_tls_dir: tempfile.TemporaryDirectory[str] | None = None
        # run first in start(), before anything binds (add_before_start); in add order
        self._before_start: list[tuple[str, Callable[[], object]]] = []
        # the HTTP servers (one when both addresses are equal)
        self._servers: list[HTTPServer] = self._build_servers(opts, metrics_authenticator)
        self._metrics_server: HTTPServer | None = next(
            (s for s in self._servers if "/metrics" in s.routes), None)
        self._probe_server: HTTPServer | None = next(
            (s for s in self._servers if "/healthz" in s.routes), None)
        # the API server reconcilers add routes to during setup; None unless add_api_server ran
        self.api_server: ApiServer | None = None
        if opts.leader_election:
            self.metrics.set_leader(opts.leader_election_id, False)

    @classmethod
    def for_testing(
        cls,
        lw_factory: Callable[[ResourceKey], ListerWatcher],
        mapper: Mapper,
        lease_client: LeaseClient | None = None,
        client: DynamicClient | None = None,
        **overrides: Any,
    ) -> Manager:
        """A manager on injected fakes: no API connection (``client``: a fake one for the
        reconcilers' writes), both servers disabled unless overridden."""
        defaults: dict[str, Any] = {"metrics_bind_address": "0", "health_probe_bind_address": "0"}
        if lease_client is not None:
            defaults.update(leader_election=True, leader_election_namespace="default")
        options = ManagerOptions(**{**defaults, **overrides})
        return cls(options, mapper=mapper, lw_factory=lw_factory, lease_client=lease_client,
                   event_recorder=FakeRecorder(), client=client)

    @staticmethod
    def _connect(opts: ManagerOptions) -> RestClient:
        cfg = load_config(opts.kubeconfig, opts.context)
        pool = opts.api_pool_size or pool_size_for(
            POOL_ESTIMATE_INFORMERS, POOL_ESTIMATE_CONTROLLERS * opts.max_concurrent_reconciles
        )
        return RestClient(new_api_client(cfg, pool_size=pool))

    # ------------------------------------------------------------------ accessors

    @property
    def client(self) -> DynamicClient:
        if self._client is None:
            raise RuntimeError("Manager.client: this manager was built on injected fakes without a client")
        return self._client

    @property
    def event_recorder(self) -> Recorder:
        return self._recorder

    @property
    def metrics_port(self) -> int | None:
        """The bound /metrics port while serving (None when disabled or not started)."""
        return self._metrics_server.port if self._metrics_server is not None else None

    @property
    def health_probe_port(self) -> int | None:
        """The bound /healthz+/readyz port while serving (None when disabled or not started)."""
        return self._probe_server.port if self._probe_server is not None else None

    @property
    def leader_election_namespace(self) -> str:
        """The Lease's namespace, as resolved at construction ("" when leader election is off)."""
        return self._le_namespace

    def is_leader(self) -> bool:
        """True while this replica may write (elected, or leader election off, and started);
        sharded: while it leads at least one shard."""
        if self.shards is not None:
            return self.shards.any_led()
        return self.can_write.allowed()

    def preferred_shard(self) -> int | None:
        """The shard this replica prefers (sharded managers): ``shard_index``, else the ordinal of
        ``$POD_NAME`` or the hostname (``<name>-<n>``), else None (a standby for every shard)."""
        opts = self.options
        if opts.shard_index is not None:
            return opts.shard_index
        return ordinal_shard(os.environ.get("POD_NAME") or socket.gethostname(), opts.total_shards)

    def lease_lost(self) -> bool:
        return self._lost

    # ------------------------------------------------------------------ registration

    def add(self, runnable: Runnable, *, needs_leader_election: bool = True) -> None:
        """Run ``runnable``; leader runnables start only once elected. May be called while running."""
        self._add(self._leaders if needs_leader_election else self._others, runnable)

    def add_webhook(self, runnable: Runnable) -> None:
        """Run ``runnable`` in the webhooks group (started before the caches, stopped last)."""
        self._add(self._webhooks, runnable)

    def add_api_server(self, server: ApiServer) -> None:
        """Run ``server`` as ``api_server``, a *leader* runnable (at most one per manager).

        Leader-only because its routes act through the controllers (a signal push enqueues on
        the ElasticScaler controller), which run only on the leader: a standby does not bind
        the port, so a client's connection is refused at once and it retries, rather than
        being accepted by a replica that could only drop the request. See
        ``escaler.runtime.apiserver`` for the limitation this implies behind a Service.
        """
        with self._mu:
            if self.api_server is not None:
                raise ValueError("Manager.add_api_server: this manager already has an API server")
            self.api_server = server
        self.add(server, needs_leader_election=True)

    def add_before_start(self, name: str, step: Callable[[], object]) -> None:
        """Run ``step`` at the very start of ``start()``, before any server binds (e.g. provisioning
        the serving certificate the servers load); an exception fails the start, logged with ``name``."""
        with self._mu:
            self._before_start.append((name, step))

    def allow_unleased_write(self, method: str, path: str) -> None:
        """Let exactly ``method path`` through the write fence on every replica, elected or not: for
        writes that are safe without the lease because they are compare-and-swap and every replica
        decides them alike (the serving-certificate Secret, ``escaler.runtime.servingcerts``)."""
        with self._mu:
            self._unleased.add((method.upper(), path))

    def write_guard(self, method: str, path: str) -> None:
        """The guard every write of the manager's REST client passes: ``allow_unleased_write``'s
        exact writes go through, every other one is checked by ``can_write``."""
        if (method.upper(), path) in self._unleased:
            return
        self.can_write.guard(method, path)

    def add_healthz_check(self, name: str, check: Check) -> None:
        self.healthz.add(name, check)

    def add_readyz_check(self, name: str, check: Check, detail: Detail | None = None) -> None:
        """A ``/readyz`` check; ``detail`` adds a line of information to it (``runtime.health``)."""
        self.readyz.add(name, check, detail)

    def start_new_informers(self) -> None:
        """Start the informers requested since the caches synced (a controller set up late, e.g. when
        its CRD appeared); a no-op before the initial sync, which starts every informer itself.

        On every replica, leader or standby: a standby keeps the late controller's caches warm too,
        and the controller itself (a leader runnable) still starts only once elected."""
        if self.caches_synced.is_set() and not self._cache_stop.is_set():  # not once stopping
            self.informers.start(self._cache_stop)

    def reserve_controller_name(self, name: str) -> None:
        """Claim a controller name; a duplicate is refused (names label metrics)."""
        with self._mu:
            if name in self._controller_names:
                raise ValueError(
                    f"controller name {name!r}: already used by another controller of this manager; "
                    "use ControllerBuilder.named() to pick a unique one"
                )
            self._controller_names.add(name)

    def _add(self, group: _Group, runnable: Runnable) -> None:
        with self._mu:
            group.runnables.append(runnable)
            start_now = group.started
        # informers a late runnable asked for are started now (a late controller waits for their
        # sync), also when its group waits for the election: its caches must be warm by then
        self.start_new_informers()
        if start_now:
            self._start_runnable(group, runnable)

    # ------------------------------------------------------------------ lifecycle

    def start(self, stop: threading.Event | None = None) -> int:
        """Run until ``stop`` (or a signal), a lost lease or a failure; return the exit code."""
        with self._mu:
            if self._started:
                raise RuntimeError("Manager.start: a manager starts once")
            self._started = True
        stop = stop if stop is not None else threading.Event()
        restore = self._install_signal_handlers(stop)
        try:
            return self._run(stop)
        finally:
            restore()

    def _run(self, stop: threading.Event) -> int:
        code = EXIT_OK
        try:
            code = self._start_steps(stop)
            if code == EXIT_OK:
                while not self._done.is_set() and not stop.wait(MAIN_LOOP_POLL_SECONDS):
                    pass
        except Exception:
            _log.exception("manager start failed")
            code = EXIT_FAILURE
        return self._shutdown(code)

    def _start_steps(self, stop: threading.Event) -> int:
        # 0. what must exist before anything binds (the serving certificate)
        for name, step in list(self._before_start):
            try:
                step()
            except Exception as exc:
                _log.error("cannot start: %s failed: %s", name, exc)
                return EXIT_FAILURE
        # 1. probes and metrics
        for server in self._servers:
            try:
                if isinstance(server.certs, CertificateReloader):
                    server.certs.load()
                server.serve()
            except (OSError, ssl.SSLError) as exc:
                _log.error("cannot serve %s on %s: %s", server.name, server.address, exc)
                return EXIT_FAILURE
        # 2. webhooks
        self._start_group(self._webhooks)
        # 3. caches
        self.informers.start(self._cache_stop)
        _log.info("waiting for caches to sync (timeout %gs)", self.options.cache_sync_timeout)
        deadline = self.clock.monotonic() + self.options.cache_sync_timeout
        # in slices, so a stop request (SIGTERM during a slow startup) is honoured promptly
        while not self.informers.wait_for_cache_sync(
                min(CACHE_SYNC_SLICE_SECONDS, max(0.0, deadline - self.clock.monotonic()))):
            if stop.is_set() or self._done.is_set():
                return EXIT_OK
            if self.clock.monotonic() >= deadline:
                _log.error("caches did not sync within %gs", self.options.cache_sync_timeout)
                return EXIT_FAILURE
        if stop.is_set() or self._done.is_set():
            return EXIT_OK
        self.caches_synced.set()
        _log.info("caches synced")
        # 4. runnables that do not need leader election
        self._start_group(self._others)
        # 5./6. leader election, then leader runnables
        if self.shards is not None:
            self._start_sharded(self.shards)
        elif self.options.leader_election:
            self._start_leader_election()
        else:
            self._on_started_leading()
        return EXIT_OK

    def _start_leader_election(self) -> None:
        opts = self.options
        config = LeaderElectionConfig(
            name=opts.leader_election_id, namespace=self._le_namespace, identity=self.identity,
            lease_duration=opts.lease_duration, renew_deadline=opts.renew_deadline,
            retry_period=opts.retry_period, release_on_cancel=opts.leader_election_release_on_cancel,
        )
        lease_client = self._lease_client
        if lease_client is None:
            assert self.rest is not None  # checked in __init__
            lease_client = KubeLeaseClient(self._client or self.rest, timeout=opts.renew_deadline / 2)
        assert isinstance(self.can_write, WriteFence)  # not sharded
        elector = LeaderElector(
            config, LeaseLock(lease_client, config.namespace, config.name), clock=self.clock,
            fence=self.can_write, watcher=lease_watcher(lease_client, config, self.clock),
            on_started_leading=self._on_started_leading,
            on_stopped_leading=self._on_stopped_leading,
            on_new_leader=lambda holder: _log.info("current leader: %s", holder or "<none>"),
        )
        self._elector = elector
        self._spawn("leader-election", lambda: elector.run(self._elector_stop), self._elector_running)

    def _start_sharded(self, shards: ShardedFence) -> None:
        """Leader runnables at once (they gate by shard), then the shards: elected or static."""
        opts = self.options
        self._start_group(self._leaders)
        if not opts.leader_election:
            assert opts.shard_index is not None  # validated
            shards.gained(opts.shard_index, shards.new_term(opts.shard_index))
            return
        preferred = self.preferred_shard()
        _log.info("sharded: %d shards, preferring %s", opts.total_shards,
                  "none" if preferred is None else f"shard {preferred}")
        lease_client = self._lease_client
        if lease_client is None:
            assert self.rest is not None  # checked in __init__
            lease_client = KubeLeaseClient(self._client or self.rest, timeout=opts.renew_deadline / 2)
        lease_of = functools.partial(shard_lease_name, opts.leader_election_id)
        shards.on_gained(lambda i: self.metrics.set_leader(lease_of(i), True))
        shards.on_lost(lambda i: self.metrics.set_leader(lease_of(i), False))
        for i in range(opts.total_shards):
            name = shard_lease_name(opts.leader_election_id, i)
            self.metrics.set_leader(name, False)
            config = LeaderElectionConfig(
                name=name, namespace=self._le_namespace, identity=self.identity,
                lease_duration=opts.lease_duration, renew_deadline=opts.renew_deadline,
                retry_period=opts.retry_period, release_on_cancel=opts.leader_election_release_on_cancel,
                standby=i != preferred,
            )
            candidate = ShardCandidate(i, config, lease_client, shards, self.clock,
                                       on_term=functools.partial(self._note_shard_elector, i))
            self._spawn(f"leader-election-shard-{i}", functools.partial(candidate.run, self._elector_stop),
                        self._elector_running)

    def _note_shard_elector(self, shard: int, elector: LeaderElector) -> None:
        with self._mu:
            self._shard_electors[shard] = elector

    def _electors(self) -> list[LeaderElector]:
        with self._mu:
            sharded = list(self._shard_electors.values())
        return sharded + ([self._elector] if self._elector is not None else [])

    def _on_started_leading(self) -> None:
        if self.options.leader_election:
            self.metrics.set_leader(self.options.leader_election_id, True)
        with self._mu:
            # atomic with _shutdown's _done.set(): never open the fence once stopping began
            if self._done.is_set():
                return
            self.can_write.open()
        _log.info("elected: starting leader runnables")
        self._start_group(self._leaders)

    def _on_stopped_leading(self) -> None:
        if self.options.leader_election:
            self.metrics.set_leader(self.options.leader_election_id, False)
        if self._elector_stop.is_set():
            return  # our own graceful release
        # Fence first (the elector closed it already; idempotent): no reconcile starts, no write leaves.
        self.can_write.close("leader lease lost")
        self._lost = True
        self._leaders.stop.set()
        _log.error("leader election lost: stopping leader runnables and exiting")
        self._done.set()

    def _start_group(self, group: _Group) -> None:
        with self._mu:
            group.started = True
            runnables = list(group.runnables)
        for runnable in runnables:
            self._start_runnable(group, runnable)

    def _start_runnable(self, group: _Group, runnable: Runnable) -> None:
        label = getattr(runnable, "name", None) or type(runnable).__name__
        self._spawn(f"{group.name}-{label}", lambda: self._run_runnable(group, runnable, label),
                    group.running)

    def _spawn(self, name: str, target: Callable[[], None], running: set[threading.Thread]) -> None:
        """Run ``target`` on a daemon thread that is in ``running`` until it returns.

        Its exit notifies ``_exits``, so ``_await_exit`` waits for it on ``self.clock``:
        ``Thread.join(timeout)`` would measure the shutdown budget in wall time.
        """
        def run() -> None:
            try:
                target()
            finally:
                with self._exits:
                    running.discard(thread)
                    self._exits.notify_all()

        thread = threading.Thread(target=run, name=name, daemon=True)
        with self._exits:
            running.add(thread)
        try:
            thread.start()
        except BaseException:
            with self._exits:
                running.discard(thread)
            raise

    def _await_exit(self, running: set[threading.Thread], timeout: float) -> list[str]:
        """Wait up to ``timeout`` seconds of ``self.clock`` for ``running`` to empty; return the
        names of the threads still running."""
        with self._exits:
            wait_for(self.clock, self._exits, lambda: not running, timeout)
            return sorted(t.name for t in running)

    def _run_runnable(self, group: _Group, runnable: Runnable, label: str) -> None:
        try:
            runnable.start(group.stop)
        except Exception as exc:
            _log.exception("%s %s failed", group.name, label)
            with self._mu:
                if self._failure is None:
                    self._failure = f"{group.name} {label}: {exc}"
            self._done.set()

    # ------------------------------------------------------------------ shutdown

    def _shutdown(self, code: int) -> int:
        lost = self._lost
        grace = self.options.graceful_shutdown_timeout
        # A lost lease skips the grace period for the leader runnables (they must not write
        # again); the rest still gets a short, bounded cleanup.
        budget = min(grace, LOST_LEASE_CLEANUP_SECONDS) if lost else grace
        deadline = self.clock.monotonic() + budget

        def left() -> float:
            return max(0.0, deadline - self.clock.monotonic())

        with self._mu:
            self._done.set()
        # 1. leader runnables: stop taking work, let in-flight reconciles finish (not when lost)
        self._leaders.stop.set()
        leaders_done = self._join(self._leaders, 0.0 if lost else left())
        # events next, while the fence may still be valid: after the release below a standby may
        # take over at once, and nothing of ours may be written after that (when lost, the fence
        # is closed already and the backlog is dropped, not written)
        self._bounded("flushing events", lambda: self._stop_recorder(left()), left())
        # 2. the lease: release it only when no leader runnable can still write
        self.can_write.close("shutting down")
        electors = self._electors()
        if electors:
            if not leaders_done and not lost:
                _log.error("leader runnables still running after %gs: not releasing the lease "
                           "(it expires by itself)", budget)
                for elector in electors:
                    elector.disable_release()
            self._elector_stop.set()
            if self._await_exit(self._elector_running, left()):
                _log.warning("leader election still running after %gs", budget)
        # 3. non-leader runnables and caches
        self._others.stop.set()
        self._join(self._others, left())
        self._cache_stop.set()
        self._bounded("stopping informers", self.informers.shutdown, left())
        self._bounded("stopping dynamic informers", self.dynamic_informers.stop_all, left())
        # 4. webhooks, servers
        self._webhooks.stop.set()
        self._join(self._webhooks, left())
        for server in self._servers:
            server.shutdown()
        if self._failure is not None:
            _log.error("manager stopped after a failure: %s", self._failure)
            code = EXIT_FAILURE
        if lost or not leaders_done:
            code = EXIT_FAILURE  # controller-runtime: "failed waiting for all runnables to end"
        _log.info("manager stopped (exit code %d)", code)
        return code

    def _stop_recorder(self, timeout: float) -> None:
        stop = getattr(self._recorder, "stop", None)
        if callable(stop):
            stop(timeout)

    def _join(self, group: _Group, timeout: float) -> bool:
        stuck = self._await_exit(group.running, timeout)
        if stuck:
            _log.warning("%s still running after %gs: %s", group.name, timeout, ", ".join(stuck))
        return not stuck

    def _bounded(self, what: str, fn: Callable[[], None], timeout: float) -> None:
        def run() -> None:
            try:
                fn()
            except Exception:
                _log.exception("%s failed", what)

        running: set[threading.Thread] = set()
        self._spawn(what.replace(" ", "-"), run, running)
        if self._await_exit(running, timeout):
            _log.warning("%s did not finish within %gs", what, timeout)

    def _install_signal_handlers(self, stop: threading.Event) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        received = {"count": 0}

        def handler(signum: int, frame: FrameType | None) -> None:
            received["count"] += 1
            if received["count"] > 1:
                _log.error("second signal %s: exiting immediately", signal.Signals(signum).name)
                sys.stderr.flush()
                os._exit(EXIT_FAILURE)
            _log.info("signal %s: shutting down gracefully", signal.Signals(signum).name)
            stop.set()
            self._done.set()

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for sig, prev in previous.items():
                signal.signal(sig, prev)

        return restore

    # ------------------------------------------------------------------ HTTP

    def _metrics_auth(self, opts: ManagerOptions, authenticator: Authenticator | None) -> RequestAuth | None:
        """The /metrics filter with ``metrics_secure`` (TokenReview/SAR on the manager's client)."""
        if not opts.metrics_secure or parse_bind_address(opts.metrics_bind_address) is None:
            return None
        if authenticator is None:
            if self.rest is None:
                raise ValueError("ManagerOptions.metrics_secure: needs a cluster connection (TokenReview "
                                 "and SubjectAccessReview) or an injected metrics_authenticator")
            # a scraper's ServiceAccount token is for the API server's audience (controller-runtime's too)
            authenticator = KubeAuthenticator(self.rest, audiences=(), clock=self.clock)
        return RequestAuth(authenticator, FailureLimiter(clock=self.clock), name="metrics")

    def _build_servers(self, opts: ManagerOptions, authenticator: Authenticator | None) -> list[HTTPServer]:
        auth = self._metrics_auth(opts, authenticator)
        protected = ["/metrics"] if auth is not None else []
        probe_routes: dict[str, RouteHandler] = {
            "/healthz": lambda rest: self._probe(self.healthz, rest),
            "/readyz": lambda rest: self._probe(self.readyz, rest),
        }
        metrics_routes: dict[str, RouteHandler] = {"/metrics": lambda _rest: self._serve_metrics()}
        probe_addr, metrics_addr = opts.health_probe_bind_address, opts.metrics_bind_address
        parsed = parse_bind_address(probe_addr)
        # One server when both name the same fixed port; two ":0"s mean two ephemeral ports.
        if parsed is not None and parsed[1] != 0 and probe_addr == metrics_addr:
            return [HTTPServer("probes+metrics", probe_addr, {**probe_routes, **metrics_routes},
                               auth=auth, protected=protected, clock=self.clock)]
        servers = []
        if parse_bind_address(probe_addr) is not None:
            servers.append(HTTPServer("probes", probe_addr, probe_routes, clock=self.clock))
        if parse_bind_address(metrics_addr) is not None:
            servers.append(HTTPServer("metrics", metrics_addr, metrics_routes, auth=auth, protected=protected,
                                      clock=self.clock,
                                      certs=self._metrics_certs(opts) if auth is not None else None))
        return servers

    def _metrics_certs(self, opts: ManagerOptions) -> CertificateReloader:
        """Secure /metrics' serving pair: ``metrics_cert_dir``'s, else a self-signed one made now (its
        SHA-256 fingerprint logged) — a scraper's bearer token never crosses the network in clear."""
        if opts.metrics_cert_dir:
            certs = CertificateReloader(os.path.join(opts.metrics_cert_dir, "tls.crt"),
                                        os.path.join(opts.metrics_cert_dir, "tls.key"), name="metrics")
            if not os.path.exists(certs.cert_file):
                # provisioned before the server binds (add_before_start); start() loads it then
                return certs
        else:
            self._metrics_tls_dir = tempfile.TemporaryDirectory(prefix="escaler-metrics-tls-")
            host = (parse_bind_address(opts.metrics_bind_address) or ("", 0, False))[0]
            cert, key, fingerprint = self_signed(self._metrics_tls_dir.name, [host] if host else [])
            certs = CertificateReloader(cert, key, name="metrics")
            _log.warning("secure /metrics has no serving certificate: serving a self-signed one (SHA-256 "
                         "fingerprint %s); give it one with --metrics-cert-dir", fingerprint)
        certs.load()
        return certs

    @staticmethod
    def _probe(checks: HealthChecks, rest: str) -> Response:
        result = checks.evaluate(only=rest or None)
        if result is None:
            return 404, "text/plain; charset=utf-8", f"no {checks.kind} check named {rest!r}\n".encode()
        ok, body = result
        return (200 if ok else 500), "text/plain; charset=utf-8", body.encode()

    def _serve_metrics(self) -> Response:
        return 200, EXPOSITION_CONTENT_TYPE, self.metrics.exposition()
