"""escaler.signals: metric and decision sources — the metrics APIs, Prometheus, activity signals.

Layering (docs/toolkit.md#the-packages): above ``escaler.kube``, below ``escaler.runtime``; independent of
``escaler.targets`` (a collector sees the target through the ``PodTarget`` protocol, which
``TargetSnapshot`` satisfies). Every collector returns a ``Sample`` (a finite value, or an error
capped at 1 KiB) and never raises for data problems. Each module's docstring states its contract:

* ``sample`` — ``Sample``, ``PodTarget``;
* ``parse_quantity`` (re-exported from ``escaler.api.quantity``: Kubernetes quantities as floats);
* ``metricsapi`` — GETs against the aggregated metrics APIs, with actionable errors;
* ``resource`` / ``custom`` / ``external`` — metrics.k8s.io (with the HPA's pod groups:
  ``resource_sample``, ``resource_replicas``), custom.metrics.k8s.io, external.metrics.k8s.io;
* ``fetch`` / ``netpolicy`` / ``prometheus`` — bounded GETs to user endpoints (one total deadline,
  the SSRF address policy, no echo of answers); ExternalServer instant queries;
* ``connpool`` — idle keep-alive connections of ``fetch``, reused only for the checked address;
* ``dedupe`` — ``SharedQueries``: identical queries in flight or within one poll tick made once;
* ``bearer`` — bearer tokens from Secrets that opt in (``elasticscaler.io/bearer-token: "true"``),
  read from a label-selected Secret cache per namespace;
* ``collector`` — ``MetricsCollector`` (one sample per MetricSpec) and ``to_metric_value``;
* ``signal_pull`` — SignalTrigger's pull endpoint → ``SignalReading``.

Typical use in a reconciler::

    http = HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")))   # default: no loopback
    collector = MetricsCollector(rest, dynamic, http, clock,
                                 allowed=lambda host: host_allowed(host, patterns))
    pairs = collector.collect(ns, spec.trigger.metrics_trigger.metrics, snapshot, snapshot.spec_replicas)
    values = [to_metric_value(spec, sample) for spec, sample in pairs]   # ValueError → InvalidSpec
    # a Resource sample carries Sample.pods (the HPA's groups); its MetricValue.pods lets apa apply
    # the HPA's missing/unready rules
"""

from escaler.api.quantity import parse_quantity
from escaler.signals.collector import (
    DEFAULT_COLLECT_BUDGET_SECONDS,
    MetricsCollector,
    metric_name,
    to_metric_value,
)
from escaler.signals.custom import CustomCollector
from escaler.signals.external import ExternalCollector, per_target_type
from escaler.signals.fetch import MAX_TIMEOUT_SECONDS, FetchError, HttpClient, fetch
from escaler.signals.netpolicy import AddressPolicy, parse_networks
from escaler.signals.prometheus import parse_query_response, query_prometheus
from escaler.signals.resource import (
    CPU_INITIALIZATION_PERIOD_SECONDS,
    INITIAL_READINESS_DELAY_SECONDS,
    PodLister,
    PodUsage,
    ResourceCollector,
    resource_replicas,
    resource_sample,
)
from escaler.signals.sample import PodTarget, Sample
from escaler.signals.signal_pull import SignalReading, parse_signal, pull_signal

__all__ = [
    "CPU_INITIALIZATION_PERIOD_SECONDS",
    "DEFAULT_COLLECT_BUDGET_SECONDS",
    "INITIAL_READINESS_DELAY_SECONDS",
    "MAX_TIMEOUT_SECONDS",
    "AddressPolicy",
    "CustomCollector",
    "ExternalCollector",
    "FetchError",
    "HttpClient",
    "MetricsCollector",
    "PodLister",
    "PodTarget",
    "PodUsage",
    "ResourceCollector",
    "Sample",
    "SignalReading",
    "fetch",
    "metric_name",
    "parse_networks",
    "parse_quantity",
    "parse_query_response",
    "parse_signal",
    "per_target_type",
    "pull_signal",
    "query_prometheus",
    "resource_replicas",
    "resource_sample",
    "to_metric_value",
]
