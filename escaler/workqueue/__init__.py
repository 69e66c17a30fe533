"""escaler.workqueue: a hand-written port of client-go's ``util/workqueue`` contract.

Three queues, composed by subclassing, each adding one capability:

* ``Queue`` (``queue.py``): fair (FIFO), stingy (an item is never processed by two workers at
  once; re-adds while queued collapse), an item re-added while processing is processed again
  after ``done``, and clean shutdown (``shutdown``/``shutdown_with_drain``; ``get`` raises
  ``ShutDown`` once nothing is left).
* ``DelayingQueue`` (``delaying.py``): ``add_after(item, delay)``, on a heap keyed by ready time
  (earliest wins for an item scheduled twice), driven by the injected ``Clock``.
* ``RateLimitingQueue`` (``ratelimiting.py``): ``add_rate_limited``/``forget``/``num_requeues``
  over a ``RateLimiter`` (``ratelimiters.py``): per-item exponential, fast/slow, token bucket,
  max-of, and client-go's ``default_controller_rate_limiter``.

Metrics (``metrics.py``) go through a ``MetricsProvider``: ``NoopMetricsProvider`` by default,
``PrometheusMetricsProvider`` for controller-runtime's ``workqueue_*`` series. Every timestamp and
wait goes through an injected ``escaler.clock.Clock`` (default ``RealClock``), so tests drive the
queues with a ``FakeClock``.

Typical worker loop::

    while True:
        try:
            key = queue.get()
        except ShutDown:
            return
        try:
            reconcile(key)
            queue.forget(key)
        except Exception:
            queue.add_rate_limited(key)
        finally:
            queue.done(key)
"""

from escaler.workqueue.delaying import DelayingQueue
from escaler.workqueue.metrics import (
    CounterMetric,
    GaugeMetric,
    HistogramMetric,
    MetricsProvider,
    NoopMetricsProvider,
    PrometheusMetricsProvider,
    SettableGaugeMetric,
)
from escaler.workqueue.queue import Queue, ShutDown
from escaler.workqueue.ratelimiters import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from escaler.workqueue.ratelimiting import RateLimitingQueue

__all__ = [
    "BucketRateLimiter",
    "CounterMetric",
    "DelayingQueue",
    "GaugeMetric",
    "HistogramMetric",
    "ItemExponentialFailureRateLimiter",
    "ItemFastSlowRateLimiter",
    "MaxOfRateLimiter",
    "MetricsProvider",
    "NoopMetricsProvider",
    "PrometheusMetricsProvider",
    "Queue",
    "RateLimiter",
    "RateLimitingQueue",
    "SettableGaugeMetric",
    "ShutDown",
    "default_controller_rate_limiter",
]
