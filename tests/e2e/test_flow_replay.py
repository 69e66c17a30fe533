"""What you simulate is what you run (issue 26): a trace segment replayed through the simulator's
``flow`` policy and, reading for reading, through the real manager on the control plane — the counts
the manager writes to the Deployment equal the simulator's decisions for the same inputs.

* The simulator (``escaler.sim``) runs the ``flow`` policy over a 25-minute synthetic trace with a
  burst (4 requests/s, 12 from minute 6 to 12; the default 8 B profile), and keeps every decision
  with the reading it decided on (``FlowPolicy.trail``).
* An LLMScaler ``metricProvider: Flow`` with the same settings (``capacity`` the profile's, the
  cold start, the TTFT objective, the poll of 30 s, min/max; no scale-down stabilization of its
  own, as the simulator's flow has none) scales a kwok Deployment started at the simulator's
  initial fleet. A fake Prometheus answers each query of the vLLM preset with what the simulator's
  Prometheus held at that poll: the token rates, the waiting requests, the request rate, the TTFT
  p90 (the queueing delay plus the mean prompt's prefill, which the manager subtracts again), the
  miss shares and the burst rates.
* The manager runs on a test clock (``--unsafe-test-clock-file``) stepped to the start plus 30 s
  per poll, so its flow state sees the simulator's times. The scaler is created just after a point
  of its poll phase (``align_to_poll_phase``), so each later point falls just before the step that
  asks for it and the manager reads at the step, whatever the phase; the manager decides each
  reading at its poll's due time (``poller.poll_time``), so however long after the step a loaded
  machine lets it read, its readings are 30 s apart as the simulator's are (CI of f78e1b0, before:
  the manager held 8 for the last five polls where the simulator went to 6, a down delay after the
  last change — a read started over a second later than the one ten polls before holds a
  scale-down at the delay's edge); each step waits for the manager to read
  every query once, then for the manager to have *decided* on that reading: its
  ``escaler_scaler_metric_value`` gauges (``/metrics``, set by the sync that decided, after its
  write) show the poll's values. Only then is the Deployment read and the clock stepped again, so a
  slow write on a loaded machine delays the test instead of being missed. Before each step the
  Deployment has rolled out the last write (as 30 s between real polls allow), and before the first
  the initial fleet: a Deployment its controller has not acted on yet is a rollout in progress, and
  the manager defers its write (CI, stop 39: the first write, 1 to 3, deferred behind a loaded
  controller-manager for more than the 10 s the test then waited; the count read 1, then 4).

Asserted: the sequence of counts the manager wrote equals the simulator's, and at every poll the
Deployment is at the simulator's decision of that poll or of a neighbouring one (one poll of
timing: a real manager's reads land a little after the period the simulator keeps exactly; the
flow gives every interval and window edge 1 s of slack, and a loaded machine can be later); and the
segment moves both ways, so the test cannot pass on a flat trace.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from escaler.api.llmflow import FlowProvider
from escaler.reconcilers.kit.flowpresets import flow_queries
from escaler.reconcilers.kit.poller import DEFAULT_POLL_TICK_SECONDS, DEFAULT_RELIST_SECONDS, phase
from escaler.runtime.types import Request
from escaler.sim.engine import simulate
from escaler.sim.policies import FlowPolicy, flow_capacity
from escaler.sim.runner import Experiment, build, initial_fleet
from escaler.sim.trace import Arrival

from .conftest import Cluster, PrometheusServer, eventually
from .es_helpers import apply, deployment, replicas, start_manager, workload
from .testclock import ManagerClock
from .webhook import free_port

pytestmark = pytest.mark.e2e

GROUP = "llm.escaler.io/v1alpha1"
POLL_S = 30.0
# how long a poll waits for the manager to decide on its reading (and write): far beyond the ~0.1 s
# it takes on an idle machine and the ~2 s of a loaded CI (run43), so that only a manager that never
# decides fails here
DECIDE_WAIT_S = 120.0
MINUTES = 25
# how far after a point of the scaler's poll phase its first reading is taken (align_to_poll_phase)
ALIGN_S = 0.5
# beyond one relist interval, the wait before the first step for the poller to have listed the scaler
RELIST_MARGIN_S = 5 * DEFAULT_POLL_TICK_SECONDS
_GAUGE = re.compile(r'^escaler_scaler_metric_value\{([^}]*)\} (\S+)$', re.M)


def bursty_trace(seed: int = 7) -> list[Arrival]:
    """Poisson arrivals at 4/s, 12/s from minute 6 to 12; prompts 500-6000 tokens, outputs 50-400."""
    rng = random.Random(seed)
    out, t = [], 0.0
    while t < MINUTES * 60:
        t += rng.expovariate(12.0 if 6 * 60 <= t < 12 * 60 else 4.0)
        out.append(Arrival(t, rng.randint(500, 6000), rng.randint(50, 400)))
    return out


def simulated() -> tuple[Experiment, FlowPolicy]:
    arrivals = bursty_trace()
    exp = initial_fleet(Experiment(arrivals=arrivals, policies=("flow",), poll_s=POLL_S))
    policy = build("flow", exp)
    assert isinstance(policy, FlowPolicy)
    simulate(arrivals, policy, exp.options)
    return exp, policy


def flow_spec(exp: Experiment, endpoint: str, namespace: str) -> dict[str, Any]:
    cap = flow_capacity(exp.options.profile)
    return {"engine": "vllm", "selector": f'model_name="llama-3.1-8b",namespace="{namespace}"',
            "endpoint": endpoint,
            "timeoutSeconds": 5,
            "capacity": {"prefillTokensPerSecond": cap.prefill_tokens_per_s,
                         "decodeTokensPerSecond": cap.decode_tokens_per_s},
            "ttftSeconds": exp.slo.ttft_s, "coldStartSeconds": int(exp.options.profile.cold_start_s),
            "rateWindowSeconds": 60}


def answers(reading: dict[str, Any], prefill: float) -> dict[str, float]:
    """What the simulator's Prometheus held at one poll, as the preset's signals."""
    prompt, rps = reading["prompt_tokens_per_s"], reading["requests_per_s"] or 0.0
    delay = reading["queue_delay_s"]
    # the manager reads the queueing delay as the TTFT p90 less the mean prompt's prefill time
    p90 = delay + prompt / rps / prefill if delay is not None and rps > 0 else 0.0
    return {"promptTokensRate": prompt, "generationTokensRate": reading["generation_tokens_per_s"],
            "waiting": reading["waiting"] or 0.0, "requestsRate": rps, "ttftP90": p90,
            "ttftMissShare": reading["miss_share"] or 0.0,
            "ttftMissShareLong": reading["long_miss_share"] or 0.0,
            "burstPromptTokensRate": reading["burst_prompt_tokens_per_s"],
            "burstGenerationTokensRate": reading["burst_generation_tokens_per_s"]}


def decided_values(metrics_port: int, namespace: str) -> dict[str, float]:
    """The flow signals' values the manager's last sync of the scaler decided on (``/metrics``)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:  # a manager too busy to answer within 10 s has not decided yet
        return {}
    out = {}
    for labels, value in _GAUGE.findall(text):
        tags = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if tags.get("namespace") == namespace and tags.get("name") == "llama":
            out[tags.get("metric", "")] = float(value)
    return out


def ready(probe_port: int) -> bool:
    """The manager's caches have synced (``/readyz``): its clock file watcher runs, and a scaler
    created now is reconciled at once."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{probe_port}/readyz", timeout=5) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def rolled_out(cluster: Cluster, namespace: str) -> bool:
    """The Deployment's controller has acted on its latest spec (no rollout in progress for the
    scaler's guard: observedGeneration current, every replica of the latest template created)."""
    d = workload(cluster, namespace, "llama")
    status = d.get("status") or {}
    return bool(status.get("observedGeneration", 0) >= d["metadata"]["generation"]
                and status.get("updatedReplicas", 0) >= d["spec"]["replicas"])


def same_values(got: dict[str, float], want: dict[str, float]) -> bool:
    return all(k in got and math.isclose(got[k], v, rel_tol=1e-9, abs_tol=1e-9) for k, v in want.items())


def test_the_manager_writes_the_simulators_flow_decisions(
        cluster: Cluster, namespace: str, prometheus: PrometheusServer, managers: list[Any],
        tmp_path: Path) -> None:
    exp, policy = simulated()
    # the first poll holds (no full rate range yet); the manager's first reading is the second poll's
    trail = [d for d in policy.trail if not d["held"]]
    assert trail and trail[0]["t"] == 2 * POLL_S, policy.trail[:2]
    sim_counts = [int(d["to"]) for d in trail]
    assert max(sim_counts) > min(sim_counts) and any(b < a for a, b in itertools.pairwise(sim_counts)), \
        f"the segment must move up and down: {sim_counts}"

    spec = flow_spec(exp, prometheus.url, namespace)
    queries = flow_queries(FlowProvider.model_validate(spec))
    prefill = float(spec["capacity"]["prefillTokensPerSecond"])

    def serve(k: int) -> None:
        values = answers(trail[k]["reading"], prefill)
        for signal, query in queries:
            prometheus.set(query, values[signal])

    clock = ManagerClock(tmp_path / "clock")
    metrics_port, probe_port = free_port(), free_port()
    manager = start_manager(cluster, tmp_path, user="escaler-replay", namespace=namespace,
                            poll=f"{POLL_S:g}s", test_clock_file=clock.path,
                            extra_args=[f"--metrics-bind-address=127.0.0.1:{metrics_port}",
                                        f"--health-probe-bind-address=127.0.0.1:{probe_port}"])
    managers.append(manager)
    apply(cluster, namespace, deployment("llama", int(trail[0]["from"])))
    # the simulator starts from a warm fleet: so does the manager (a Deployment its controller has
    # not acted on yet is a rollout in progress, and the scaler rightly defers its writes)
    eventually(lambda: rolled_out(cluster, namespace), timeout=DECIDE_WAIT_S,
               what="the Deployment rolled out at its initial count")
    serve(0)
    # the scaler's first reading (its creation) lands just after one of its poll phase's points, so
    # that every later due point falls just before the step that asks for it, whatever the phase
    eventually(lambda: ready(probe_port), timeout=DECIDE_WAIT_S, what="the manager's /readyz 200")
    align_to_poll_phase(clock, manager, namespace)
    before = prometheus.query_count
    apply(cluster, namespace, {
        "apiVersion": GROUP, "kind": "LLMScaler", "metadata": {"name": "llama"}, "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"},
            "minReplicas": exp.options.min_replicas, "maxReplicas": exp.options.max_replicas,
            "metricProvider": "Flow", "flow": spec, "scaleDown": {"stabilizationWindowSeconds": 0}}})

    seen: list[int] = []
    start = clock.manager_now()
    for k in range(len(trail)):
        if k:
            # a real poll comes 30 s after the last: time for the Deployment's controller to act on
            # the last write, which a loaded control plane may take seconds to do. Only after a
            # write: the manager's clock also runs in real time, and a step that comes later than
            # the scaler's poll phase lets a read land between steps, every later poll then waiting
            # for its phase (seconds of real time each: CI run of b1ad681, the 600 s timeout)
            if seen[-1] != (seen[-2] if len(seen) > 1 else int(trail[0]["from"])):
                eventually(lambda: rolled_out(cluster, namespace), timeout=DECIDE_WAIT_S,
                           what=f"poll {k}: the Deployment rolled out at the last write")
            serve(k)
            before = prometheus.query_count
            clock.step_to(start + timedelta(seconds=POLL_S * k), manager)
        want_queries = before + len(queries)
        eventually(lambda: prometheus.query_count >= want_queries, timeout=60, interval=0.05,  # noqa: B023
                   what=f"poll {k}: the manager reads every query")
        if not k:  # the manager's time of its first reading: poll k is read POLL_S x k after it
            start = clock.manager_now()
            # the poller schedules a scaler at its relist, at the first phase point after it: one
            # that comes after the first step would schedule the point after the asked-for one. A
            # relist comes every DEFAULT_RELIST_SECONDS of the poller's passes (one a tick); the
            # margin covers a poller thread held up on a loaded machine, and the wait stays well
            # short of the next point (~29 s after the reading)
            time.sleep(DEFAULT_RELIST_SECONDS + RELIST_MARGIN_S)
        # the sync that consumes the reading decides, writes, then sets the gauges: once they show
        # this poll's values, the count of this poll is on the Deployment
        served = answers(trail[k]["reading"], prefill)
        eventually(lambda: same_values(decided_values(metrics_port, namespace), served),  # noqa: B023
                   timeout=DECIDE_WAIT_S, interval=0.05,
                   what=f"poll {k}: the manager decides on the poll's reading {served}")
        seen.append(replicas(cluster, namespace, "llama"))

    for k, got in enumerate(seen):
        near = set(sim_counts[max(0, k - 1):k + 2])
        assert got in near, (f"poll {k} (t={trail[k]['t']:g} s): the manager's count {got}, the "
                             f"simulator's {sim_counts[k]} (neighbours {sorted(near)})\nmanager: {seen}\n"
                             f"sim:     {sim_counts}")

    def changes(counts: list[int]) -> list[int]:
        return [c for i, c in enumerate(counts) if i == 0 or c != counts[i - 1]]

    assert changes(seen) == changes(sim_counts), \
        f"manager: {seen}\nsim:     {sim_counts}\n{scale_log(manager.output(100_000))}"


def align_to_poll_phase(clock: ManagerClock, manager: Any, namespace: str) -> None:
    """Step the manager's clock to ``ALIGN_S`` after the next point of the scaler's poll phase
    (``k x POLL_S + phase``, on the manager's monotonic clock: the system's plus the test offset).

    The test steps the manager's clock to its first reading's time plus ``POLL_S x k``; the manager
    reads at its phase's points. With the first reading just after a point, each later point comes
    just before the step that asks for it, and the next one ``POLL_S`` minus that margin after it,
    so a reading lands between two steps only if one step takes ~28 s of real time. Without this,
    the phase (a hash of the namespace, random per run) could fall anywhere after the step: a read
    then lands between steps and every later poll waits for its phase (a full make test of b1ad681:
    the 600 s timeout)."""
    offset = phase(Request(namespace, "llama"), POLL_S)
    mono = time.monotonic() + clock.offset
    point = (math.floor((mono + ALIGN_S - offset) / POLL_S) + 1) * POLL_S + offset
    clock.step_to(clock.manager_now() + timedelta(seconds=point + ALIGN_S - mono), manager)


def scale_log(log: str) -> str:
    """The manager's replica writes and holds, for a failure message."""
    return "\n".join(line[:600] for line in log.splitlines() if '"scaled ' in line or "hold" in line)
