"""Capacity: N MetricsTrigger ElasticScalers on one manager, and the HPA controller on the same surge.

For each N of ``BENCH_CAPACITY_N`` (comma list, default ``1000,3000,10000``), on a **fresh** local
control plane (``hack/cluster.py``, kube-controller-manager with its *default* HPA settings:
15 s sync, 5 workers, 20 QPS to the API server):

1. a ``/scale``-only CRD kind (``Scalable``, no pods, so no pod churn loads the machine), N
   targets at 3 replicas spread over ``BENCH_CAPACITY_NAMESPACES`` namespaces (default 10), and N
   ElasticScalers (apa, one ExternalServer query each -- a distinct PromQL per scaler -- against
   the fake Prometheus, AverageValue 10, every annotation at its default: 60 s Average window,
   scale-up stabilization 0). The manager is ``python -m escaler manager`` with its defaults (30 s
   poll, default workers) as its own client-certificate user; the only flag a production
   manager would not carry is ``--allow-endpoint-networks=127.0.0.0/8`` (the fake listens on
   loopback, which the SSRF policy refuses by default).
2. The fake Prometheus runs in **its own process** (HTTP/1.1 keep-alive) and answers every query
   with 30 x scale x (1 +- noise); noise is +-4 % (inside apa's 10 % tolerance: 3 replicas hold).
3. Measured: ``create s`` (POSTing 2N objects, 8 client threads), ``first poll s`` (creation done
   -> every scaler's status shows a collection: ScalingActive=True or currentMetrics),
   ``idle CPU ms/poll`` (manager utime+stime from /proc over ``BENCH_CAPACITY_IDLE_CYCLES`` x 30 s,
   default 2, after one more settling interval), ``empty cores`` (the same manager's CPU per second
   over ``BENCH_CAPACITY_EMPTY_S``, default 60, before any scaler exists: its fixed part -- leases,
   informer watches, its own periodic passes) and ``idle marginal ms/query`` (the idle window's CPU
   less ``empty cores`` over the same span, per query: what a poll costs beyond the fixed part, the
   figure that does not move with how few polls share the fixed part), ``idle writes`` (every completed
   create/update/patch/delete of the manager's user in the audit log in that window -- not a
   name prefix) with the fake's query count (``queries/scaler/poll``: 1.0 means every scaler was
   polled once per interval; the row fails if the manager died or never queried), then the
   surge: at a random phase of the poll interval every series doubles at once (the clock is read
   before the change), and ONE watch on the targets records when each target's spec.replicas
   first rises (``write p50/p99/max s``) and when it first reaches 6, the count the doubled load
   needs (``need p99 s``); ``surge API writes`` the manager's writes the API server's audit log
   received from the step to the end of the surge, by resource (independent of the watch);
   ``surge CPU s`` is the manager's CPU from the step to the last write, ``surge apiserver+etcd
   CPU s`` the control plane's over the same span (they share the two cores); the manager's
   ``/metrics`` page after the surge is saved as ``metrics-<N>-after-surge.txt`` (workqueue depth,
   outbound jobs);
   ``VmHWM MB`` the peak RSS; ``KB/scaler`` = (VmRSS after the surge - VmRSS before any scaler
   existed) / N, ``HWM KB/scaler`` = (VmHWM - that) / N; ``threads`` the manager's thread count
   (/proc/<pid>/status). The bench scrapes the manager's ``/metrics`` every
   ``BENCH_CAPACITY_SCRAPE_S`` seconds (default 15, as a Prometheus would; 0 never, as runs before
   2026-12-07 did) from before the fleet is created to the end of the surge, so the peak includes
   what a scrape of N scalers' series costs; ``scrapes`` counts the pages read.
4. Then the same for kube-controller-manager's HPA controller: the manager is stopped, N new
   targets get N HPAs (External metric ``load-<i>``, AverageValue 10) served by the fake
   external.metrics.k8s.io (own process, behind the API server's aggregator), and the same
   doubling is observed the same way (``BENCH_CAPACITY_HPA=0`` skips it; its waits are capped by
   ``BENCH_CAPACITY_HPA_TIMEOUT`` seconds, default 600: a row that did not finish says how many
   targets were written in time).

``BENCH_CAPACITY_MANAGER_ARGS`` adds manager flags (e.g. ``--max-concurrent-reconciles=16``).
``BENCH_ESCALER_SRC=<checkout>`` runs the manager from another source tree (a before/after
comparison; the CRDs and this bench stay current). ``BENCH_PROFILE=1`` also records the manager
with py-spy (idle window and surge, GIL-holding samples only; raw collapsed stacks and a top-frames
summary in the work directory, printed at the end) and its threads by name -- docs/performance.md;
``BENCH_CAPACITY_MEMPROBE=1`` runs the manager under ``bench/memprobe.py`` and prints where its RSS is
before any scaler (no collection, no trim) and after the surge (pymalloc, glibc, garbage, threads,
Python objects by type; the row's figures are read first). ``BENCH_PROFILE=cpu`` records the same
windows with a deterministic CPU-clock profile instead
(``bench/cpuprofile.py``, yappi: every call on every thread; ``cpu-<N>-{idle,surge}.txt``).
Rows are also appended as JSON lines to ``<workdir>/capacity.jsonl`` as each N finishes.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))
sys.path.insert(0, str(ROOT / "bench"))

from benchkube import Api, Watch  # noqa: E402
from cluster import LocalCluster  # noqa: E402
from fake_metrics import MetricsAPIServer, PrometheusServer, apiservice_manifests  # noqa: E402

TITLE = "Capacity: N MetricsTrigger scalers on one manager vs the HPA controller (real control plane)"
NOTES = """
Conditions of every row: a fresh local control plane per N on this 2-core machine (etcd,
kube-apiserver, kube-controller-manager, scheduler and kwok share the 2 cores with the manager,
the fake metric servers and the bench's watch; other engineers' tests may run at the same time),
targets of a `/scale`-only CRD (no pods), a fleet spread over 10 namespaces, one distinct
ExternalServer query per scaler, every metric 30 +-4 % noise (AverageValue 10 at 3 replicas, inside
the 10 % tolerance) during the idle window, then one fleet-wide step to 60 at a random phase of the
30 s poll interval. escaler: `python -m escaler manager` with its defaults (30 s poll, default
workers, apa annotations at their defaults: 60 s Average window with its 6 s panic window,
scale-up stabilization 0). HPA: kube-controller-manager's defaults (15 s sync, 5 workers,
`--kube-api-qps=20`), External metrics served through the aggregator by a fake adapter, 5 min
downscale stabilization (irrelevant to a scale-up). `write` is the first change of spec.replicas
seen by one watch on the targets (clock read before the step is sent); `need` is reaching the 6
replicas the doubled load needs. Idle writes count every write of the manager's user in the audit
log; `queries/scaler/poll` is the fake Prometheus's query count / (N x idle intervals). An HPA row
capped by `BENCH_CAPACITY_HPA_TIMEOUT` reports `>cap` and how many targets it wrote in time.
`machine load` (newer runs) is the 1-minute load average when the surge ended: above 2 the manager
did not have a core to itself. `surge API writes` (newer runs) is the API server's own count, from
its audit log, of the manager's writes during the surge; `surge apiserver+etcd CPU s` what the
control plane spent over the same span on the same two cores. `idle ms/query` (newer runs) is the
manager's idle CPU per query it made (per completed poll; `idle CPU ms/poll` divides by N instead),
`idle others cores` what the fake Prometheus, the API server and etcd used over the idle window on
the same two cores. `empty cores` (newer runs) is the manager's CPU with no scaler, measured before
the fleet is created; `idle marginal ms/query` the idle window's CPU less that fixed part, per query;
`idle system share` the part of the idle window's CPU spent in the kernel (system time).
`HWM KB/scaler` (newer runs) is (VmHWM - the empty manager's VmRSS) / N, the peak the issue
measures, with the bench scraping the manager's `/metrics` every `BENCH_CAPACITY_SCRAPE_S` seconds
as a Prometheus would (`scrapes`: the pages read); `KB/scaler` is the same with VmRSS after the surge.
"""

NS_LIST = [int(x) for x in os.environ.get("BENCH_CAPACITY_N", "1000,3000,10000").split(",") if x.strip()]
NAMESPACES = int(os.environ.get("BENCH_CAPACITY_NAMESPACES", "10"))
IDLE_CYCLES = float(os.environ.get("BENCH_CAPACITY_IDLE_CYCLES", "2"))
# seconds of the empty manager's CPU measured before any scaler exists (its fixed part: leases,
# informer watches, the poller's passes; 0 skips it and the marginal column)
EMPTY_S = float(os.environ.get("BENCH_CAPACITY_EMPTY_S", "60"))
RUN_HPA = os.environ.get("BENCH_CAPACITY_HPA", "1") != "0"
# BENCH_CAPACITY_ESCALER=0 runs only the HPA row (e.g. the HPA at 10,000 in a run of its own)
RUN_ESCALER = os.environ.get("BENCH_CAPACITY_ESCALER", "1") != "0"
HPA_TIMEOUT = float(os.environ.get("BENCH_CAPACITY_HPA_TIMEOUT", "600"))
# another checkout whose escaler package the manager runs (e.g. the commit before a change)
SRC = Path(os.environ.get("BENCH_ESCALER_SRC") or ROOT).resolve()
PROFILE = os.environ.get("BENCH_PROFILE", "0") not in ("", "0")
# BENCH_PROFILE=cpu: a deterministic CPU-clock profile (bench/cpuprofile.py, yappi) instead of py-spy
CPU_PROFILE = os.environ.get("BENCH_PROFILE", "0") == "cpu"
# extra flags for the manager (e.g. "--max-concurrent-reconciles=16"), split on spaces
MANAGER_ARGS = os.environ.get("BENCH_CAPACITY_MANAGER_ARGS", "").split()
# BENCH_CAPACITY_MEMPROBE=1: after the surge, where the manager's RSS is (bench/memprobe.py)
MEMPROBE = os.environ.get("BENCH_CAPACITY_MEMPROBE", "0") not in ("", "0")
# seconds between the bench's scrapes of the manager's /metrics, as a Prometheus would scrape it
# (from before the fleet exists to the end of the surge; 0: never, as before 2026-12-07)
SCRAPE_S = float(os.environ.get("BENCH_CAPACITY_SCRAPE_S", "15"))
NOTES += (
    f"\nThis run: `BENCH_CAPACITY_N={','.join(map(str, NS_LIST))} BENCH_CAPACITY_NAMESPACES={NAMESPACES} "
    f"BENCH_CAPACITY_IDLE_CYCLES={IDLE_CYCLES:g} BENCH_CAPACITY_HPA={int(RUN_HPA)} "
    + ("BENCH_CAPACITY_ESCALER=0 " if not RUN_ESCALER else "")
    + f"BENCH_CAPACITY_HPA_TIMEOUT={HPA_TIMEOUT:g} BENCH_CAPACITY_SCRAPE_S={SCRAPE_S:g}"
    + (f" BENCH_CAPACITY_MANAGER_ARGS='{' '.join(MANAGER_ARGS)}'" if MANAGER_ARGS else "") + "`"
    + (f" with the manager from `{SRC}`" if SRC != ROOT else "")
    + ".\n"
)
POLL = 30.0  # the manager's default --metrics-trigger-poll-interval
BASE_LOAD = 30.0
AVERAGE_VALUE = 10
START_REPLICAS = 3
NEED_AFTER_SURGE = 6
NOISE = 0.04
USER = "escaler-capacity"
GROUP = "bench.escaler.io"
PLURAL = "scalables"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


# --- fake metric servers, each in its own process -----------------------------------------------


@dataclass
class Load:
    """The fleet's load, shared with a fake server's process: value = BASE x scale x (1 +- noise)."""

    scale: Any = field(default_factory=lambda: mp.Value("d", 1.0, lock=False))
    noise: Any = field(default_factory=lambda: mp.Value("d", NOISE, lock=False))
    count: Any = field(default_factory=lambda: mp.Value("q", 0))

    def value(self, rng: random.Random) -> float:
        with self.count.get_lock():
            self.count.value += 1
        n = self.noise.value
        return round(BASE_LOAD * self.scale.value * (1 + rng.uniform(-n, n)), 3)


def _serve_prometheus(load: Load, conn: Any) -> None:
    rng = random.Random()
    srv = PrometheusServer(value_fn=lambda _q: load.value(rng), record=False, keep_alive=True).start()
    conn.send(srv.port)
    threading.Event().wait()


def _serve_external(load: Load, cert: str, key: str, conn: Any) -> None:
    rng = random.Random()
    srv = MetricsAPIServer(
        Path(cert),
        Path(key),
        lambda _ns, _sel: [],
        record=False,
        keep_alive=True,
        external_fn=lambda _ns, m: load.value(rng) if m.startswith("load-") else None,
    )
    conn.send(srv.start().port)
    threading.Event().wait()


def spawn(target: Callable[..., None], *args: Any) -> tuple[mp.Process, int]:
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=target, args=(*args, child), daemon=True)
    p.start()
    return p, int(parent.recv())


class CpuWindow:
    """One window of bench/cpuprofile.py's profile of the manager: started when made, stopped (and
    its report written) by ``wait``, like a py-spy recording's end."""

    def __init__(self, pid: int, work: Path, label: str) -> None:
        self.pid, self.out = pid, work / f"cpu-{label}.txt"
        (work / "cpuprofile.label").write_text(label)
        os.kill(pid, signal.SIGUSR1)

    def wait(self, timeout: float) -> None:
        os.kill(self.pid, signal.SIGUSR2)
        deadline = time.monotonic() + timeout
        while not self.out.exists() and time.monotonic() < deadline:
            time.sleep(0.5)


# --- /proc ---------------------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM", "Threads"):
            out[k] = int(v.split()[0])
    return out


def cpu_seconds(pid: int) -> float:
    return sum(cpu_split(pid))


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


# --- objects -------------------------------------------------------------------------------------


def crd() -> dict[str, Any]:
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "scalable", "kind": "Scalable"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        }
                    },
                }
            ],
        },
    }


def target(name: str) -> dict[str, Any]:
    # no status subresource: status is written with the object, as a workload controller would
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Scalable",
        "metadata": {"name": name},
        "spec": {"replicas": START_REPLICAS},
        "status": {"replicas": START_REPLICAS, "selector": f"app={name}"},
    }


def scaler(name: str, endpoint: str, ns: str) -> dict[str, Any]:
    # names its namespace: the manager runs tenant PromQL only within it (escaler.signals.promqlscope)
    query = f'sum(rate(http_requests_total{{namespace="{ns}",service="{name}"}}[1m]))'
    metric = {
        "type": "ExternalServer",
        "externalServer": {
            "endpoint": endpoint,
            "query": query,
            "target": {"type": "AverageValue", "averageValue": str(AVERAGE_VALUE)},
        },
    }
    return {
        "apiVersion": "elasticscaler.io/v1alpha1",
        "kind": "ElasticScaler",
        "metadata": {"name": name},
        "spec": {
            "targetRef": {"apiVersion": f"{GROUP}/v1", "kind": "Scalable", "name": name},
            "minReplicas": 1,
            "maxReplicas": 20,
            "trigger": {
                "type": "MetricsTrigger",
                "metricsTrigger": {"scalingAlgorithm": "apa", "metrics": [metric]},
            },
        },
    }


def hpa(name: str, i: int) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": f"{GROUP}/v1", "kind": "Scalable", "name": name},
            "minReplicas": 1,
            "maxReplicas": 20,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": f"load-{i}"},
                        "target": {"type": "AverageValue", "averageValue": str(AVERAGE_VALUE)},
                    },
                }
            ],
        },
    }


def placed(n: int, prefix: str) -> list[tuple[str, str, int]]:
    """(namespace, name, index) of ``n`` objects spread over the namespaces."""
    return [(f"{prefix}-{i % NAMESPACES}", f"s-{i:05d}", i) for i in range(n)]


# --- observation ---------------------------------------------------------------------------------


def metrics_url(log: Path) -> str | None:
    """The manager's /metrics URL, from the address its log says it serves metrics on."""
    m = re.search(rb"serving metrics on (\S+):(\d+)", log.read_bytes())
    return None if m is None else f"http://{m[1].decode()}:{m[2].decode()}/metrics"


class Scraper:
    """Scrapes the manager's /metrics every ``every`` seconds on a thread of its own, reading and
    dropping each page, until ``stop()`` (nothing when ``every`` is 0). ``scrapes`` counts pages read."""

    def __init__(self, log: Path, every: float) -> None:
        self.scrapes = 0
        self._stop = threading.Event()
        self._log, self._every = log, every
        if every > 0:
            threading.Thread(target=self._run, name="scraper", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            url = metrics_url(self._log)
            if url is None:
                continue
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=30) as r:
                r.read()
                self.scrapes += 1

    def stop(self) -> None:
        self._stop.set()


class TargetObserver:
    """When each target's spec.replicas first rose above the start, and first reached the need."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.armed = False
        self.first_write: dict[str, float] = {}
        self.first_need: dict[str, float] = {}
        self.changed_before: set[str] = set()

    def on_event(self, key: str, obj: dict[str, Any], t: float) -> None:
        r = int((obj.get("spec") or {}).get("replicas") or 0)
        with self.lock:
            if r != START_REPLICAS and not self.armed:
                self.changed_before.add(key)
            if not self.armed:
                return
            if r > START_REPLICAS:
                self.first_write.setdefault(key, t)
            if r >= NEED_AFTER_SURGE:
                self.first_need.setdefault(key, t)


class CollectedObserver:
    """Scalers (ElasticScaler or HPA) whose status shows a metric collection."""

    def __init__(self) -> None:
        self.done: set[str] = set()

    def on_event(self, key: str, obj: dict[str, Any], t: float) -> None:
        st = obj.get("status") or {}
        active = any(
            c.get("type") == "ScalingActive" and c.get("status") == "True" for c in st.get("conditions") or []
        )
        if active or st.get("currentMetrics"):
            self.done.add(key)


def wait_until(
    pred: Callable[[], bool],
    timeout: float,
    what: str,
    alive: Callable[[], bool] | None = None,
    interval: float = 0.5,
) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic() - t0
        if alive is not None and not alive():
            raise RuntimeError(f"the manager died while waiting for {what}")
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def audit_writes(path: Path, since: int, user: str, after: float, before: float) -> Counter[str]:
    """Completed writes of ``user`` received in [after, before) (time.time()), by resource."""
    by: Counter[str] = Counter()
    with open(path, "rb") as f:
        f.seek(since)
        for line in f:
            if user.encode() not in line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("stage") != "ResponseComplete" or ev.get("verb") not in WRITE_VERBS:
                continue
            if (ev.get("user") or {}).get("username") != user:
                continue
            ts = datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
            if after <= ts < before:
                ref = ev.get("objectRef") or {}
                sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
                by[f"{ref.get('resource', '?')}{sub}"] += 1
    return by


def surge_stats(obs: TargetObserver, t0: float, n: int, cap: float) -> dict[str, Any]:
    """Latencies over all ``n`` targets; a target not written within ``cap`` counts as > cap."""
    writes = sorted(t - t0 for t in obs.first_write.values())
    needs = sorted(t - t0 for t in obs.first_need.values())

    def at(xs: list[float], p: float) -> float | str:
        i = min(n - 1, max(0, round(p / 100 * (n - 1))))
        return round(xs[i], 2) if i < len(xs) else f">{cap:.0f}"

    return {
        "written": f"{len(writes)}/{n}",
        "write p50 s": at(writes, 50),
        "write p99 s": at(writes, 99),
        "write max s": at(writes, 100),
        "need p99 s": at(needs, 99),
    }


# --- one N ---------------------------------------------------------------------------------------


class Run:
    def __init__(self, n: int) -> None:
        self.n = n
        self.work = Path(tempfile.mkdtemp(prefix=f"escaler-capacity-{n}-"))
        self.cluster = LocalCluster(self.work / "cluster", quick_hpa=False).start()
        self.api = Api(self.cluster)
        self.procs: list[mp.Process] = []
        self.mgr: subprocess.Popen[bytes] | None = None
        self.profiles: list[Path] = []

    def close(self) -> None:
        self.stop_manager()
        for p in self.procs:
            p.kill()
        self.cluster.stop()

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.cluster.kubectl(*args, input=input)

    def setup(self) -> None:
        for f in sorted((ROOT / "manifests" / "crds").glob("*.yaml")):
            self.kubectl("apply", "--server-side", "-f", str(f))
        self.kubectl("apply", "-f", "-", input=json.dumps(crd()))
        self.kubectl("wait", "--for=condition=Established", "crd", "--all")

    def namespaces(self, prefix: str) -> None:
        for i in range(NAMESPACES):
            self.api.call(
                "POST",
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{prefix}-{i}"}},
            )

    def start_manager(self) -> int:
        kc = self.cluster.user_kubeconfig(USER)
        self.log = open(self.work / "manager.log", "wb")  # noqa: SIM115
        wrap = [str(ROOT / "bench" / "cpuprofile.py"), str(self.work)] if CPU_PROFILE else []
        if MEMPROBE and not CPU_PROFILE:
            wrap = [str(ROOT / "bench" / "memprobe.py"), str(self.work)]
        self.mgr = subprocess.Popen(
            [
                sys.executable,
                *wrap,
                "-m",
                "escaler",
                "manager",
                f"--kubeconfig={kc}",
                "--webhook-port=0",
                "--metrics-bind-address=127.0.0.1:0",
                "--health-probe-bind-address=127.0.0.1:0",
                "--api-bind-address=0",
                "--allow-endpoint-networks=127.0.0.0/8",
                *MANAGER_ARGS,
            ],
            cwd=SRC,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(SRC)},
        )
        return self.mgr.pid

    def server_cpu(self) -> float:
        """CPU seconds used so far by the control plane's kube-apiserver and etcd (they share the
        machine with the manager: in a surge every write costs them CPU too)."""
        total = 0.0
        for name in ("kube-apiserver", "etcd"):
            proc = self.cluster.procs.get(name)
            if proc is not None and proc.popen is not None:
                with contextlib.suppress(OSError):
                    total += cpu_seconds(proc.popen.pid)
        return total

    def dump_metrics(self, name: str) -> None:
        """Save the manager's /metrics page (workqueue depth, outbound jobs) into the work directory."""
        url = metrics_url(self.work / "manager.log")
        if url is None:
            return
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                (self.work / name).write_bytes(r.read())
        except OSError as err:
            (self.work / name).write_text(f"metrics unavailable: {err}\n")

    def memprobe(self, label: str, observe: bool = False) -> None:
        """bench/memprobe.py's RSS decomposition of the manager, printed and kept in the work dir
        (``observe``: without the collection and the trim, which would move the baseline)."""
        if self.mgr is None:
            return
        (self.work / "memprobe.label").write_text(label + (" observe" if observe else ""))
        out = self.work / f"memprobe-{label}.txt"
        os.kill(self.mgr.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 120
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        print(out.read_text() if out.exists() else f"  memprobe: no report in {out}", flush=True)

    def empty_cores(self, pid: int) -> float | None:
        """The manager's CPU per second over ``EMPTY_S`` with no scaler: its fixed part."""
        if EMPTY_S <= 0:
            return None
        c0, w0 = cpu_seconds(pid), time.monotonic()
        time.sleep(EMPTY_S)
        return (cpu_seconds(pid) - c0) / (time.monotonic() - w0)

    def alive(self) -> bool:
        return self.mgr is not None and self.mgr.poll() is None

    def stop_manager(self) -> None:
        if self.mgr is not None and self.mgr.poll() is None:
            self.mgr.terminate()
            try:
                self.mgr.wait(60)
            except subprocess.TimeoutExpired:
                self.mgr.kill()
                self.mgr.wait(10)

    def profile(self, name: str, seconds: float) -> subprocess.Popen[bytes] | CpuWindow | None:
        if not PROFILE or self.mgr is None:
            return None
        if CPU_PROFILE:
            self.profiles.append(self.work / f"cpu-{self.n}-{name}.txt")
            return CpuWindow(self.mgr.pid, self.work, f"{self.n}-{name}")
        out = self.work / f"profile-{self.n}-{name}.txt"
        self.profiles.append(out)
        spy = Path(sys.executable).parent / "py-spy"
        return subprocess.Popen(
            [
                str(spy),
                "record",
                "--pid",
                str(self.mgr.pid),
                "--duration",
                str(int(seconds)),
                "--rate",
                "100",
                "--format",
                "raw",
                "--gil",  # only samples that hold the GIL: where the CPU goes
                "-o",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    # -- escaler ----------------------------------------------------------------------------------

    def escaler(self) -> dict[str, Any]:
        n = self.n
        load = Load()
        proc, port = spawn(_serve_prometheus, load)
        self.procs.append(proc)
        endpoint = f"http://127.0.0.1:{port}"
        self.namespaces("es")
        pid = self.start_manager()
        # started (threads up: imports done under a loaded machine can take a while), caches synced
        wait_until(lambda: proc_status(pid)["Threads"] >= 10, 120, "the manager's threads", self.alive)
        time.sleep(8)
        rss0 = proc_status(pid)["VmRSS"]
        threads0 = proc_status(pid)["Threads"]
        empty_cores = self.empty_cores(pid)
        if MEMPROBE and not CPU_PROFILE:
            self.memprobe(f"{n}-before", observe=True)
        scraper = Scraper(self.work / "manager.log", SCRAPE_S)
        obs, collected = TargetObserver(), CollectedObserver()
        Watch(self.api, f"/apis/{GROUP}/v1/{PLURAL}", obs.on_event).start()
        Watch(self.api, "/apis/elasticscaler.io/v1alpha1/elasticscalers", collected.on_event).start()
        fleet = placed(n, "es")
        t0 = time.monotonic()
        self.api.create_all(
            (f"/apis/{GROUP}/v1/namespaces/{ns}/{PLURAL}", {**target(name)}) for ns, name, _ in fleet
        )
        self.api.create_all(
            (f"/apis/elasticscaler.io/v1alpha1/namespaces/{ns}/elasticscalers", scaler(name, endpoint, ns))
            for ns, name, _ in fleet
        )
        create_s = time.monotonic() - t0
        first_poll_s = wait_until(
            lambda: len(collected.done) >= n,
            60 + 4 * POLL + n / 50,
            f"all {n} scalers collected (have {len(collected.done)})",
            self.alive,
        )
        time.sleep(POLL)  # one more interval: first status writes land
        # -- idle, noisy metric
        idle_s = IDLE_CYCLES * POLL
        spy = self.profile("idle", idle_s)
        audit_off = self.cluster.audit_log.stat().st_size

        def others() -> float:  # the rest of the machine: the fake Prometheus, the API server, etcd
            return cpu_seconds(proc.pid) + self.server_cpu()

        sys0 = cpu_split(pid)[1]
        q0, c0, o0, w0 = load.count.value, cpu_seconds(pid), others(), time.time()
        time.sleep(idle_s)
        q1, c1, o1, w1 = load.count.value, cpu_seconds(pid), others(), time.time()
        sys1 = cpu_split(pid)[1]
        if spy:
            spy.wait(60)
        if not self.alive():
            raise RuntimeError(f"the manager died during the idle window; see {self.work}/manager.log")
        queries = q1 - q0
        if queries == 0:
            raise RuntimeError(f"the manager made no query in the idle window; see {self.work}/manager.log")
        time.sleep(3)  # audit lines of requests received before w1
        idle_writes = audit_writes(self.cluster.audit_log, audit_off, USER, w0, w1)
        # -- surge at a random phase of the interval
        time.sleep(random.uniform(0, POLL))
        surge_audit_off = self.cluster.audit_log.stat().st_size
        surge_timeout = 4 * POLL + n / 100
        spy = self.profile("surge", min(surge_timeout, 2 * POLL + 10))
        with obs.lock:
            obs.armed = True
        c_step, s_step = cpu_seconds(pid), self.server_cpu()
        w_step, ts = time.time(), time.monotonic()
        load.scale.value = 2.0
        with contextlib.suppress(TimeoutError):
            wait_until(
                lambda: len(obs.first_write) >= n and len(obs.first_need) >= n,
                surge_timeout,
                "every target written",
                self.alive,
                interval=0.2,
            )
        last = max([*obs.first_write.values(), *obs.first_need.values()], default=ts)
        c_end, s_end = cpu_seconds(pid), self.server_cpu()
        st = proc_status(pid)
        scraper.stop()
        self.dump_metrics(f"metrics-{n}-after-surge.txt")
        if MEMPROBE and not CPU_PROFILE:  # after the row's RSS is read: the probe collects and trims
            self.memprobe(f"{n}-after-surge")
        # the API server's own count of the manager's writes in the surge (independent of the watch)
        w_end = time.time()
        time.sleep(3)  # audit lines of requests received before w_end
        surge_writes = audit_writes(self.cluster.audit_log, surge_audit_off, USER, w_step, w_end)
        if spy:
            spy.wait(120)
        if PROFILE:  # after the recording: one tracer at a time
            census = thread_census(pid)
            (self.work / f"threads-{n}.json").write_text(json.dumps(census))
            print(f"  manager threads by name: {dict(census.most_common(12))}", flush=True)
        row: dict[str, Any] = {
            "controller": "escaler",
            "N": n,
            "create s": round(create_s, 1),
            "first poll s": round(first_poll_s, 1),
            "idle CPU ms/poll": round((c1 - c0) / (idle_s / POLL) * 1000),
            "idle cores": round((c1 - c0) / (w1 - w0), 3),
            "idle ms/query": round((c1 - c0) * 1000 / queries, 2),
            "idle system share": round((sys1 - sys0) / max(c1 - c0, 1e-9), 2),
            "idle others cores": round((o1 - o0) / (w1 - w0), 3),
            **({} if empty_cores is None else {
                "empty cores": round(empty_cores, 4),
                # the idle window's CPU less what the same manager used with no scaler, per query
                "idle marginal ms/query": round(((c1 - c0) - empty_cores * (w1 - w0)) * 1000 / queries, 2),
            }),
            "idle writes": sum(idle_writes.values()),
            "queries/scaler/poll": round(queries / n / (idle_s / POLL), 2),
            **surge_stats(obs, ts, n, surge_timeout),
            "surge API writes": ", ".join(f"{k} {v}" for k, v in sorted(surge_writes.items())) or "0",
            "surge CPU s": round(c_end - c_step, 1),
            "surge apiserver+etcd CPU s": round(s_end - s_step, 1),
            "surge wall s": round(last - ts, 1),
            "VmHWM MB": round(st["VmHWM"] / 1024),
            "KB/scaler": round((st["VmRSS"] - rss0) / n, 1),
            "HWM KB/scaler": round((st["VmHWM"] - rss0) / n, 1),
            "scrapes": scraper.scrapes,
            "threads": f"{threads0}→{st['Threads']}",
            "machine load": round(os.getloadavg()[0], 1),  # 1-min load average after the surge
        }
        (self.work / "idle-writes.json").write_text(json.dumps(idle_writes))
        if idle_writes:
            print(f"  idle writes by resource: {dict(idle_writes)}", flush=True)
        self.stop_manager()
        return row

    # -- HPA --------------------------------------------------------------------------------------

    def hpa(self) -> dict[str, Any]:
        n = self.n
        load = Load()
        pki = self.cluster.pki
        proc, port = spawn(
            _serve_external, load, str(pki / "metrics-server.crt"), str(pki / "metrics-server.key")
        )
        self.procs.append(proc)
        docs = apiservice_manifests(port, (pki / "ca.crt").read_bytes())
        self.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
        )
        self.kubectl(
            "wait", "--for=condition=Available", "--timeout=60s", "apiservice/v1beta1.external.metrics.k8s.io"
        )
        self.namespaces("hpa")
        obs, collected = TargetObserver(), CollectedObserver()
        Watch(
            self.api,
            f"/apis/{GROUP}/v1/{PLURAL}",
            lambda k, o, t: k.startswith("hpa-") and obs.on_event(k, o, t),
        ).start()
        Watch(self.api, "/apis/autoscaling/v2/horizontalpodautoscalers", collected.on_event).start()
        fleet = placed(n, "hpa")
        self.api.create_all(
            (f"/apis/{GROUP}/v1/namespaces/{ns}/{PLURAL}", target(name)) for ns, name, _ in fleet
        )
        self.api.create_all(
            (f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers", hpa(name, i))
            for ns, name, i in fleet
        )
        t0 = time.monotonic()
        settled = True
        try:
            wait_until(lambda: len(collected.done) >= n, HPA_TIMEOUT, f"all {n} HPAs active")
        except TimeoutError:
            settled = False
        first_s = time.monotonic() - t0
        time.sleep(random.uniform(0, 15))
        with obs.lock:
            obs.armed = True
        ts = time.monotonic()
        load.scale.value = 2.0
        with contextlib.suppress(TimeoutError):
            wait_until(
                lambda: len(obs.first_write) >= n and len(obs.first_need) >= n,
                HPA_TIMEOUT,
                "every HPA target written",
                interval=0.5,
            )
        stats = surge_stats(obs, ts, n, HPA_TIMEOUT)
        stats["machine load"] = round(os.getloadavg()[0], 1)
        return {
            "controller": "HPA (KCM defaults)",
            "N": n,
            "first poll s": round(first_s, 1)
            if settled
            else f">{HPA_TIMEOUT:.0f} ({len(collected.done)}/{n})",
            **stats,
        }


def thread_census(pid: int) -> Counter[str]:
    """The manager's Python threads by name (digits folded to #), from ``py-spy dump``."""
    import re

    spy = Path(sys.executable).parent / "py-spy"
    out = subprocess.run(
        [str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60
    ).stdout
    names = re.findall(r'^Thread \S+ \([^)]*\): "(.*)"$', out, re.M)
    return Counter(re.sub(r"\d+", "#", n) for n in names)


def summarize_profile(path: Path, top: int = 25) -> str:
    """Top frames of a py-spy raw (collapsed) profile: by self samples and by inclusive samples."""
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        total += c
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        self_c[frames[-1]] += c
        for f in set(frames):
            incl[f] += c
    out = [f"{path.name}: {total} samples", "self:"]
    out += [f"  {100 * c / total:5.1f}%  {f}" for f, c in self_c.most_common(top)]
    out.append("inclusive:")
    out += [f"  {100 * c / total:5.1f}%  {f}" for f, c in incl.most_common(top)]
    return "\n".join(out)


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for n in NS_LIST:
        r = Run(n)
        print(f"capacity N={n}: work directory {r.work}", flush=True)
        try:
            r.setup()
            for phase in (*((r.escaler,) if RUN_ESCALER else ()), *((r.hpa,) if RUN_HPA else ())):
                row = phase()
                print(f"  {row}", flush=True)
                rows.append(row)
                with open(r.work.parent / "escaler-capacity.jsonl", "a") as f:
                    f.write(json.dumps({"when": time.strftime("%H:%M:%S"), **row}) + "\n")
            for p in r.profiles:
                if p.exists():
                    print(p.read_text() if p.name.startswith("cpu-") else summarize_profile(p), flush=True)
        finally:
            r.close()
    return rows


def main() -> int:
    sys.path.insert(0, str(ROOT / "bench"))
    from run import table

    print(table(run()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
