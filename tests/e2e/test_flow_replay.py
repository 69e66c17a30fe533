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
  per poll, so its flow state sees the simulator's times; each step waits for the manager to read
  every query once.

Asserted: the sequence of counts the manager wrote equals the simulator's, and at every poll the
Deployment is at the simulator's decision of that poll or of a neighbouring one (one poll of
timing: the manager's write lands a moment after its read); and the segment moves both ways, so
the test cannot pass on a flat trace.
"""

from __future__ import annotations

import itertools
import random
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from escaler.api.llmflow import FlowProvider
from escaler.reconcilers.kit.flowpresets import flow_queries
from escaler.sim.engine import simulate
from escaler.sim.policies import FlowPolicy, flow_capacity
from escaler.sim.runner import Experiment, build, initial_fleet
from escaler.sim.trace import Arrival

from .conftest import Cluster, PrometheusServer, eventually
from .es_helpers import apply, deployment, replicas, start_manager
from .testclock import ManagerClock

pytestmark = pytest.mark.e2e

GROUP = "llm.escaler.io/v1alpha1"
POLL_S = 30.0
# how long a poll waits for the manager's write of the simulator's count (a poll whose count is a
# neighbour's waits it out: a few polls of a run)
WRITE_WAIT_S = 10.0
MINUTES = 25


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
    manager = start_manager(cluster, tmp_path, user="escaler-replay", namespace=namespace,
                            poll=f"{POLL_S:g}s", test_clock_file=clock.path)
    managers.append(manager)
    apply(cluster, namespace, deployment("llama", int(trail[0]["from"])))
    serve(0)
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
            serve(k)
            before = prometheus.query_count
            clock.step_to(start + timedelta(seconds=POLL_S * k), manager)
        want_queries = before + len(queries)
        eventually(lambda: prometheus.query_count >= want_queries, timeout=60, interval=0.05,  # noqa: B023
                   what=f"poll {k}: the manager reads every query")
        if not k:  # the manager's time of its first reading: poll k is read POLL_S x k after it
            start = clock.manager_now()
        want = sim_counts[k]
        # the write follows the read by the executor's completion, a reconcile and a PUT: ~2 s on a
        # loaded CI (run43: 1.8-2.2 s). Moving on before it lands lets the next step's reading meet a
        # consume of this one at the next poll's time, and the decisions part from the simulator's
        deadline = time.monotonic() + WRITE_WAIT_S
        while replicas(cluster, namespace, "llama") != want and time.monotonic() < deadline:
            time.sleep(0.1)
        seen.append(replicas(cluster, namespace, "llama"))

    for k, got in enumerate(seen):
        near = set(sim_counts[max(0, k - 1):k + 2])
        assert got in near, (f"poll {k} (t={trail[k]['t']:g} s): the manager's count {got}, the "
                             f"simulator's {sim_counts[k]} (neighbours {sorted(near)})\nmanager: {seen}\n"
                             f"sim:     {sim_counts}")

    def changes(counts: list[int]) -> list[int]:
        return [c for i, c in enumerate(counts) if i == 0 or c != counts[i - 1]]

    assert changes(seen) == changes(sim_counts), f"manager: {seen}\nsim:     {sim_counts}"
