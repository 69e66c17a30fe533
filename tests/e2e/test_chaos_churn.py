"""Resource bounds under scaler churn (issue 15, "Resource bounds"), on the real control plane.

One ``python -m escaler manager`` (its own client-certificate user, watching one namespace) keeps a
population of ``POPULATION`` MetricsTrigger ElasticScalers (apa, one ExternalServer query each, a
distinct PromQL per scaler, on the fake Prometheus) whose targets are objects of the ``/scale``-only
CRD of ``test_capacity`` (no pods: kwok and the scheduler stay idle). Then, for ``MINUTES``, every
``STEP_SECONDS`` the ``BATCH`` oldest scalers and their targets are deleted and as many are created
under fresh names (official Python client, ``WORKERS`` threads), so the population turns over
``churned / POPULATION`` times. Every ``SAMPLE_SECONDS`` the manager's ``VmRSS`` and ``VmHWM``
(``/proc/<pid>/status``), its thread count (``/proc/<pid>/task``) and its open file descriptors
(``/proc/<pid>/fd``) are sampled.

Asserted, the baseline being the mean of the samples of the ``BASELINE_SECONDS`` after
``WARMUP_SECONDS`` of churn (in the full form one whole turnover of the population: from then on
every scaler in the caches was created during the churn, as at the end; the samples show RSS flat
after it) and the end the mean of the last ``BASELINE_SECONDS`` of churn:

* **memory is bounded**: RSS at the end minus RSS at the baseline is at most
  ``RSS_SLACK_MIB + RSS_MIB_PER_1000 x churned-after-baseline / 1000`` (a leak of per-scaler state
  -- a dict entry, a metric series, a window of samples, an informer object -- grows linearly with
  the churned count; see the constants for the measurement the bound comes from);
* **no thread leak**: the thread count at the end is at most the baseline's + ``THREAD_SLACK``;
* **no descriptor leak**: the median open fds at the end are at most the baseline's + ``FD_SLACK``
  (HTTP keep-alive connections to the API server and the fake Prometheus come and go: a poll
  burst opens several at once for a sample or two);
* **per-scaler state is dropped**: no deleted scaler is queried more than ``GRACE_SECONDS`` after
  its deletion (the poller forgot it and no collection job survived it), checked after one more
  poll interval plus the grace once the churn stopped; the manager's ``/metrics`` has no
  ``escaler_*{name=...}`` series of a deleted scaler and at most ``POPULATION`` of
  ``escaler_desired_replicas``; and every live scaler, the last created included, is queried again
  within two poll intervals plus the grace after the churn stopped (still served, not forgotten; a
  manager that fell behind during the churn polls late, which ``queries_per_s`` shows).

Reduced (every e2e run): 300 scalers, 2 min of churn, 10 s poll. Full (``ESCALER_CHAOS=full``,
``make chaos``): 3,000 scalers, 30 min, the default 30 s poll. Reports (``record_property``, read by
``bench/chaos.py``): ``runs`` (churn steps), ``passed`` (all of them when every bound held, else
0), ``peak_rss_mib`` (VmHWM), ``rss_growth_mib`` (end - baseline), ``rss_baseline_mib``,
``threads_start``/``threads_end``, ``fds_start``/``fds_end`` (baseline and end), ``churned``
(scalers deleted and replaced), ``worst_late_query_s`` (latest query of a deleted scaler after its
deletion), ``queries_per_s`` (the fake Prometheus's queries per second during the churn) against
``queries_per_s_needed`` (every scaler once per poll interval).
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from .conftest import Cluster, PrometheusServer, eventually
from .es_helpers import Manager, chaos_runs, start_manager
from .test_capacity import BASE_LOAD, GROUP, PLURAL, crd, objects
from .webhook import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

POPULATION = chaos_runs(300, 3000)
MINUTES = chaos_runs(2, 30)
# the manager's --metrics-trigger-poll-interval: reduced, 10 s (30 queries/s at 300 scalers);
# full, the default 30 s (100 queries/s at 3,000)
POLL_SECONDS = chaos_runs(10, 30)
STEP_SECONDS = 2.0
# scalers replaced per step: reduced 10 / 2 s (600 in 2 min, the population twice over); full
# 5 / 2 s (4,500 in 30 min, one and a half times)
BATCH = chaos_runs(10, 5)
WORKERS = 4
SAMPLE_SECONDS = chaos_runs(3, 10)
# churn before the baseline, and the span averaged at the baseline and at the end. Full: one whole
# turnover of the population (3,000 scalers at 5 per 2 s: 20 min), so that from the baseline on
# every cached object and every piece of per-scaler state belongs to a scaler created during the
# churn, as at the end. RSS rises until the population has turned over once and is flat after (the
# initial fleet, created in a burst before the churn, costs less than the scalers that replace it;
# not diagnosed further): the full run at af72241 with
# a 10-minute baseline measured 153 MiB at the start of the churn, 169 at 10 min, 179.2 at 20 min
# and 179.7 at 30 min (+0.5 MiB over the last 1,500 churned), and failed that baseline by 0.2 MiB
# (+10.0 against 9.8). Reduced: 40 s (the run is 2 min; its bound is loose enough for the ramp).
WARMUP_SECONDS = chaos_runs(40.0, POPULATION * STEP_SECONDS / BATCH)
BASELINE_SECONDS = chaos_runs(12, 60)
# The memory bound: end - baseline <= slack + per_1000 x churned/1000. Measured (2 cores, load 4-11
# from other test runs): the reduced form +0.7 MiB over 400 scalers churned after the baseline; 300
# scalers churned 4,800 times (20 per step) +4.5 MiB over 4,200, i.e. about 1.1 KiB per churned
# scaler. tracemalloc in the manager over 90 s of that churn: +444 KiB of Python heap, about half
# of it (1,129 entries, ~210 KiB) the (uid, generation) validity caches of the claim index, which
# nothing empties when a scaler is deleted (two ``Claims`` see ElasticScalers, an LRU of 65,536
# entries each: bounded, they stop growing near 32 MiB after 65,536 churned scalers); RSS grows
# more than the heap (allocator arenas, steps of ~1 MiB in the samples). Twice the measured rate
# plus the slack is the bound: a copy of a scaler object (3-5 KiB) kept per deleted scaler exceeds
# it in the full form, anything of 12 KiB or more per scaler in the reduced one too.
# Since then (issue 15, stop 23): the validity memos are pruned against the informer cache
# (``Claims(live=...)``: about twice the live scalers), and the Event recorder drops spam buckets
# that have refilled, so neither follows the number of scalers ever seen. tracemalloc over 200 s of
# a 7-minute reduced churn before those fixes: +3.7 MiB of heap per 1,000 churned, almost all the
# recorder's series and buckets of deleted scalers (one TargetNotFound Warning each) and the memos.
RSS_SLACK_MIB = 4.0
RSS_MIB_PER_1000 = 2.0
THREAD_SLACK = 3
FD_SLACK = 8
# a deleted scaler may be queried by a collection already in flight, or once more by a poll the
# poller scheduled before its next relist (10 s): never later than this after its deletion
GRACE_SECONDS = 15.0
SERVICE = re.compile(r'service="([^"]+)"')
ES = ("elasticscaler.io", "v1alpha1", "elasticscalers")


@dataclass(frozen=True)
class Usage:
    """One sample of a process: when (monotonic), RSS and peak RSS in MiB, threads, open fds."""

    t: float
    rss_mib: float
    hwm_mib: float
    threads: int
    fds: int


def usage(pid: int) -> Usage:
    """The process's current usage (``/proc/<pid>``); raises OSError when it is gone."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return Usage(time.monotonic(), fields["VmRSS"], fields["VmHWM"], len(os.listdir(f"/proc/{pid}/task")),
                 len(os.listdir(f"/proc/{pid}/fd")))


@dataclass
class Sampler:
    """Samples ``usage(pid)`` every ``interval`` seconds on a background thread."""

    pid: int
    interval: float
    samples: list[Usage] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Sampler:
        def run() -> None:
            while not self._stop.is_set():
                with contextlib.suppress(OSError):
                    self.samples.append(usage(self.pid))
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=run, name="churn-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(10)

    def between(self, start: float, end: float) -> list[Usage]:
        return [s for s in self.samples if start <= s.t <= end]


@dataclass(frozen=True)
class Span:
    """The means of a span of samples (RSS), its largest thread count and its median fd count: the
    fds jump by the outbound connections of a poll burst for a sample or two (26 -> 35 -> 27 every
    ~30 s in a CI run), which a leak would not do; a leak raises the median with the churn."""

    rss_mib: float
    threads: int
    fds: int
    n: int

    @classmethod
    def of(cls, samples: list[Usage]) -> Span:
        assert samples, "no usage sample in the span (the manager died?)"
        return cls(round(statistics.fmean(s.rss_mib for s in samples), 1), max(s.threads for s in samples),
                   round(statistics.median(s.fds for s in samples)), len(samples))


class QueryLog:
    """The fake Prometheus's answers, recording when each scaler (by its query's service label) was
    last queried and how often."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        # scaler name -> time.monotonic() of its latest query
        self.last: dict[str, float] = {}
        self.count = 0

    def value(self, query: str) -> float:
        m = SERVICE.search(query)
        with self._mu:
            self.count += 1
            if m:
                self.last[m.group(1)] = time.monotonic()
        return BASE_LOAD  # 3 replicas at AverageValue 10: every target holds

    def queried(self) -> dict[str, float]:
        with self._mu:
            return dict(self.last)


class Fleet:
    """The population: creates scalers with their targets under fresh names and deletes the oldest."""

    def __init__(self, api: k8s.ApiClient, ns: str, endpoint: str) -> None:
        self.api = k8s.CustomObjectsApi(api)
        self.ns, self.endpoint = ns, endpoint
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="churn")
        # live scalers, oldest first
        self.live: deque[str] = deque()
        # deleted scaler -> time.monotonic() its delete was answered
        self.deleted: dict[str, float] = {}
        self.created: dict[str, float] = {}
        self._seq = 0
        self.errors: list[str] = []

    def _create(self, name: str) -> None:
        target, scaler = objects(self.ns, name, self.endpoint)
        self.api.create_namespaced_custom_object(GROUP, "v1", self.ns, PLURAL, target)
        self.api.create_namespaced_custom_object(*ES[:2], self.ns, ES[2], scaler)
        self.created[name] = time.monotonic()

    def _delete(self, name: str) -> None:
        self.api.delete_namespaced_custom_object(*ES[:2], self.ns, ES[2], name)
        self.deleted[name] = time.monotonic()
        with contextlib.suppress(ApiException):  # the scaler is what counts; its target follows
            self.api.delete_namespaced_custom_object(GROUP, "v1", self.ns, PLURAL, name)

    def _run(self, fn: Callable[[str], None], names: list[str]) -> None:
        for name, fut in [(n, self.pool.submit(fn, n)) for n in names]:
            try:
                fut.result(60)
            except Exception as e:  # counted; the test fails on any
                self.errors.append(f"{fn.__name__} {name}: {e}"[:300])

    def grow(self, n: int) -> list[str]:
        names = [f"c-{self._seq + i:06d}" for i in range(n)]
        self._seq += n
        self._run(self._create, names)
        self.live.extend(names)
        return names

    def churn(self, n: int) -> list[str]:
        """Delete the ``n`` oldest, then create ``n`` under fresh names; returns the new names."""
        old = [self.live.popleft() for _ in range(min(n, len(self.live)))]
        self._run(self._delete, old)
        return self.grow(n)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def _series(metrics_port: int, ns: str) -> dict[str, set[str]]:
    """Metric name -> the scaler names of ``ns`` with an ``escaler_*`` series on the manager's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, set[str]] = {}
    for m in re.finditer(r'^(escaler_\w+)\{([^}]*)\}', text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if labels.get("namespace") == ns and "name" in labels:
            out.setdefault(m.group(1), set()).add(labels["name"])
    return out


def _unpolled_since(log: QueryLog, live: set[str], since: float, until: float) -> list[str]:
    """The scalers of ``live`` not queried after ``since``, once all were or at ``until``
    (monotonic)."""
    while True:
        queried = log.queried()
        idle = sorted(n for n in live if queried.get(n, 0.0) < since)
        if not idle or time.monotonic() >= until:
            return idle
        time.sleep(1.0)


@pytest.fixture
def scalable_crd(cluster: Cluster) -> Iterator[None]:
    cluster.apply(crd())
    cluster.wait_established(f"{PLURAL}.{GROUP}")
    yield


# the full run: 30 min of churn, creating 3,000 scalers first and a poll interval of checks after
@pytest.mark.timeout(chaos_runs(600, 3600))
def test_churning_scalers_leak_no_memory_threads_or_descriptors(
        cluster: Cluster, namespace: str, scalable_crd: None, managers: list[Manager],
        api_client: k8s.ApiClient, tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    ns = namespace
    record_property("runs", 0)
    record_property("passed", 0)
    log = QueryLog()
    prom = PrometheusServer(value_fn=log.value, record=False, keep_alive=True).start()
    metrics_port = free_port()
    m = start_manager(cluster, tmp_path, user="chaos-churn", namespace=ns, api=False, poll=f"{POLL_SECONDS}s",
                      extra_args=[f"--metrics-bind-address=127.0.0.1:{metrics_port}"])
    managers.append(m)
    fleet = Fleet(api_client, ns, prom.url)
    sampler = Sampler(m.proc.pid, SAMPLE_SECONDS).start()
    try:
        t0 = time.monotonic()
        first = fleet.grow(POPULATION)
        eventually(lambda: set(first) <= log.queried().keys(), timeout=60 + POPULATION / 10, interval=2,
                   what=f"each of the {POPULATION} first scalers queried once; log:\n{m.output(2000)}")
        sys.stderr.write(f"\n[chaos] churn: {POPULATION} scalers created and polled in "
                         f"{time.monotonic() - t0:.0f}s; churning {BATCH} every {STEP_SECONDS:g}s "
                         f"for {MINUTES} min\n")
        churn_start = time.monotonic()
        queries_at_start = log.count
        base_at = churn_start + WARMUP_SECONDS
        churned_at_base, steps = 0, 0
        # by the clock, not by a count of steps: on a loaded machine a step may take longer
        while time.monotonic() < churn_start + MINUTES * 60:
            step_start = time.monotonic()
            fleet.churn(BATCH)
            steps += 1
            if step_start < base_at:
                churned_at_base = steps * BATCH
            assert m.alive(), m.output()
            time.sleep(max(0.0, STEP_SECONDS - (time.monotonic() - step_start)))
        churn_end = time.monotonic()
        # the poll pace the manager kept up during the churn (it needs POPULATION / POLL_SECONDS)
        pace = round((log.count - queries_at_start) / (churn_end - churn_start), 1)
        churned = steps * BATCH
        record_property("runs", steps)
        last = list(fleet.live)[-BATCH:]
        base = Span.of(sampler.between(base_at, base_at + BASELINE_SECONDS))
        end = Span.of(sampler.between(churn_end - BASELINE_SECONDS, churn_end))
        # one more poll round and the grace, then what the manager still does about the deleted
        time.sleep(POLL_SECONDS + GRACE_SECONDS)
        queried = log.queried()
        series = _series(metrics_port, ns)
        idle = _unpolled_since(log, set(fleet.live), churn_end,
                               until=churn_end + 2 * POLL_SECONDS + GRACE_SECONDS)
    finally:
        sampler.stop()
        fleet.close()
        prom.stop()
    peak = max(s.hwm_mib for s in sampler.samples)
    growth = round(end.rss_mib - base.rss_mib, 1)
    after_base = churned - churned_at_base
    bound = RSS_SLACK_MIB + RSS_MIB_PER_1000 * after_base / 1000
    late = {n: round(queried[n] - t, 1) for n, t in fleet.deleted.items() if n in queried and queried[n] > t}
    worst_late = max(late.values(), default=0.0)
    for key, value in (("peak_rss_mib", round(peak, 1)), ("rss_baseline_mib", base.rss_mib),
                       ("rss_growth_mib", growth), ("threads_start", base.threads),
                       ("threads_end", end.threads), ("fds_start", base.fds), ("fds_end", end.fds),
                       ("churned", churned), ("worst_late_query_s", worst_late),
                       ("queries_per_s", pace),
                       ("queries_per_s_needed", round(POPULATION / POLL_SECONDS, 1))):
        record_property(key, value)
    report = (f"{churned} scalers churned over {steps} steps ({churned / POPULATION:.1f}x the population "
              f"of {POPULATION}); RSS {base.rss_mib} MiB at the baseline ({base.n} samples) -> "
              f"{end.rss_mib} MiB at the end ({end.n}): {growth:+.1f} MiB over {after_base} churned "
              f"(bound {bound:.1f}); "
              f"peak {peak:.1f} MiB; threads {base.threads} -> {end.threads}; fds {base.fds} -> {end.fds}; "
              f"{log.count} queries ({pace}/s during the churn, {POPULATION / POLL_SECONDS:g}/s needed); "
              f"latest query of a deleted scaler {worst_late} s after its deletion "
              f"({len(late)} queried after it)")
    sys.stderr.write(f"[chaos] churn: {report}\n")
    rss = [(round(s.t - churn_start), round(s.rss_mib, 1), s.threads, s.fds) for s in sampler.samples]
    sys.stderr.write(f"[chaos] churn samples (s since churn start, RSS MiB, threads, fds): {rss}\n")
    assert not fleet.errors, fleet.errors[:5]
    assert m.alive(), m.output()
    assert growth <= bound, report
    assert end.threads <= base.threads + THREAD_SLACK, report
    assert end.fds <= base.fds + FD_SLACK, report
    # per-scaler state of a deleted scaler is gone: never polled after the grace ...
    too_late = sorted((d, n) for n, d in late.items() if d > GRACE_SECONDS)
    assert not too_late, f"deleted scalers still queried (s after deletion, name): {too_late[:10]}; {report}"
    # ... no metric series left ...
    deleted = set(fleet.deleted)
    stale = {metric: sorted(names & deleted)[:5] for metric, names in series.items() if names & deleted}
    assert not stale, f"series of deleted scalers on /metrics: {stale}"
    desired = series.get("escaler_desired_replicas", set())
    assert len(desired) <= POPULATION, (len(desired), POPULATION)
    # ... while every live scaler, the last created included, is still polled: queried again after
    # the churn stopped, within two poll intervals and the grace (a manager that fell behind during
    # the churn polls late — see queries_per_s; a forgotten scaler never)
    assert not idle, (f"{len(idle)} live scalers not queried in the {2 * POLL_SECONDS + GRACE_SECONDS:g} s "
                      f"after the churn stopped: {idle[:10]}; {report}")
    assert set(last) <= desired, f"last created scalers without a sync: {sorted(set(last) - desired)}"
    record_property("passed", steps)
