"""Per-manager Prometheus metrics with controller-runtime's names.

Contract:

* ``MetricsRegistry`` owns one ``prometheus_client.CollectorRegistry`` — by default a fresh one,
  **not** the process-global ``REGISTRY`` — so two managers (or two tests) in one process never
  clash over metric names. ``/metrics`` serves exactly this registry (``exposition()``).
* It registers, once: ``controller_runtime_reconcile_total{controller,result}``,
  ``controller_runtime_reconcile_errors_total{controller}``,
  ``controller_runtime_terminal_reconcile_errors_total{controller}``,
  ``controller_runtime_reconcile_panics_total{controller}``,
  ``controller_runtime_reconcile_time_seconds{controller}`` (histogram),
  ``controller_runtime_active_workers{controller}``,
  ``controller_runtime_max_concurrent_reconciles{controller}``,
  ``leader_election_master_status{name}`` (1 while leading, else 0), and, through
  ``workqueue_provider`` (a ``PrometheusMetricsProvider`` on the same registry), the
  ``workqueue_*`` family labelled by queue ``name`` (= controller name).
* ``controller(name)`` returns the ``ControllerMetrics`` a ``Controller`` drives. Like
  controller-runtime, every ``result`` series and the error/panic counters of a controller are
  initialised to 0 when it is created, so rates work from the first scrape.
* ``exposition()`` is ``generate_latest(registry)``'s text, byte for byte, made one metric family
  at a time into one buffer: ``generate_latest`` keeps every line of the page as a string, then
  joins them into a second copy and encodes a third. With a series per scaler (10,000 scalers: a
  4.7 MB page), a scrape's peak was 17.2 MB; per family it is the page plus one family's lines,
  10.3 MB, with the per-scaler collectors' samples streamed (``escaler.reconcilers.kit.
  scalermetrics``; issue 30: a manager scraped every 15 s keeps its scrape's peak as RSS;
  ``python bench/bench_scrape_memory.py``).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric

from escaler.workqueue.metrics import PrometheusMetricsProvider

__all__ = [
    "EXPOSITION_CONTENT_TYPE",
    "RECONCILE_RESULTS",
    "RECONCILE_TIME_BUCKETS_SECONDS",
    "ControllerMetrics",
    "MetricsRegistry",
]

EXPOSITION_CONTENT_TYPE: Final = CONTENT_TYPE_LATEST

# The values of the ``result`` label of controller_runtime_reconcile_total.
RESULT_SUCCESS: Final = "success"
RESULT_ERROR: Final = "error"
RESULT_REQUEUE: Final = "requeue"
RESULT_REQUEUE_AFTER: Final = "requeue_after"
RECONCILE_RESULTS: Final = (RESULT_SUCCESS, RESULT_ERROR, RESULT_REQUEUE, RESULT_REQUEUE_AFTER)

# controller-runtime's reconcile_time_seconds buckets.
RECONCILE_TIME_BUCKETS_SECONDS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
)  # fmt: skip


class ControllerMetrics:
    """The labelled children one controller records into (thread-safe: prometheus_client is)."""

    def __init__(self, registry: MetricsRegistry, name: str) -> None:
        # the controller label; fixed
        self.name = name
        # one child per result label, created eagerly so every series exists from the start
        self._total = {
            r: registry.reconcile_total.labels(controller=name, result=r) for r in RECONCILE_RESULTS
        }
        # the remaining per-controller children
        self._errors = registry.reconcile_errors.labels(controller=name)
        self._terminal = registry.terminal_reconcile_errors.labels(controller=name)
        self._panics = registry.reconcile_panics.labels(controller=name)
        self._time = registry.reconcile_time.labels(controller=name)
        self._active = registry.active_workers.labels(controller=name)
        self._max = registry.max_concurrent_reconciles.labels(controller=name)

    def reconcile_finished(self, result: str, seconds: float) -> None:
        """One reconcile ended with ``result`` (one of ``RECONCILE_RESULTS``) after ``seconds``."""
        self._total[result].inc()
        self._time.observe(max(0.0, seconds))

    def error(self, *, terminal: bool = False) -> None:
        self._errors.inc()
        if terminal:
            self._terminal.inc()

    def panic(self) -> None:
        self._panics.inc()

    def worker_busy(self, delta: int) -> None:
        """+1 when a worker starts a reconcile, -1 when it ends it."""
        self._active.inc(delta)

    def set_max_concurrent_reconciles(self, n: int) -> None:
        self._max.set(n)


class MetricsRegistry:
    """One manager's metrics; see the module docstring."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # where every collector below is registered; never the global REGISTRY unless passed in
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        # The collectors, each registered exactly once on self.registry.
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"], registry=r,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"], registry=r,
        )
        self.terminal_reconcile_errors = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            ["controller"], registry=r,
        )
        self.reconcile_panics = Counter(
            "controller_runtime_reconcile_panics_total",
            "Total number of reconciliation panics per controller",
            ["controller"], registry=r,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"], buckets=RECONCILE_TIME_BUCKETS_SECONDS, registry=r,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"], registry=r,
        )
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"], registry=r,
        )
        self.leader_election_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
            "1 indicates master. 'name' is the string used to identify the lease.",
            ["name"], registry=r,
        )
        # the workqueue_* family, shared by every controller queue of this manager
        self.workqueue_provider = PrometheusMetricsProvider(r)
        # guards _controllers
        self._mu = threading.Lock()
        # controller name → its metrics; a name is registered once
        self._controllers: dict[str, ControllerMetrics] = {}

    def controller(self, name: str) -> ControllerMetrics:
        """The metrics of controller ``name`` (created and zero-initialised on first use)."""
        if not name:
            raise ValueError("MetricsRegistry.controller: name must not be empty")
        with self._mu:
            found = self._controllers.get(name)
            if found is None:
                found = self._controllers[name] = ControllerMetrics(self, name)
            return found

    def set_leader(self, lease_name: str, leading: bool) -> None:
        self.leader_election_status.labels(name=lease_name).set(1 if leading else 0)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (what ``/metrics`` serves), one family at a
        time (see the module docstring)."""
        page = io.BytesIO()
        for family in self.registry.collect():
            page.write(generate_latest(_OneFamily(family)))
        return page.getvalue()


class _OneFamily:
    """A collector of one metric family already collected (``generate_latest`` formats it alone)."""

    def __init__(self, family: Metric) -> None:
        self._family = family

    def collect(self) -> Iterator[Metric]:
        yield self._family
