"""A replay of ElasticScaler polls on the fakes: every externally visible outcome, poll by poll (no tests
here; ``test_es_poll_replay.py`` runs it).

What it drives: one MetricsTrigger scaler ``es`` on Deployment ``web`` in ``es_fakes.Harness``, with a
``ManualExecutor`` for collections, a manager's target handlers (targets read from the watch cache) and
a ``FakeClock``. A poll is what a manager does for a due scaler: the clock moves one poll interval,
the metric source answers the scenario's values, ``ElasticScalerReconciler.poll`` (the poller's
shortcut) starts the collection, the collection completes, and the reconcile it wakes consumes it
(a poll the shortcut declines is a plain reconcile, as the poller would enqueue). Any collection a
reconcile leaves pending is completed and consumed the same way (bounded). When the target's spec
changed, the harness then plays the Deployment controller (status catches up) and runs the
event-driven reconcile that change wakes — as a user's cluster would.

What it records per step (``Step``): the target's ``spec.replicas``, the target and status writes
made, the scaler's whole ``status`` as stored, the events recorded (type, reason, note) and the
reconcile's requeue. ``replay`` returns those steps; ``digest`` is a sha256 over their canonical JSON
and ``summary`` one readable line per step (what the golden file keeps next to the digest, so a
changed decision shows which poll changed first).

Inputs: a ``Scenario`` (the scaler's spec knobs and a seeded value generator, one dict of metric
name → value or error string per poll). Bounds: a scenario is at most ``MAX_POLLS`` polls; every
run is deterministic (seeded generator, fake clock, every cache waited on before each reconcile).

``PYTHONPATH=. python tests/unit/es_replay.py --update`` rewrites ``es_poll_replay.golden.json`` from the code
as it is (do that only for an intended decision change, and say so in the commit).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from es_fakes import NS, Harness, deployment, external_metric, harness, metrics_trigger, scaler
from executor_fakes import ManualExecutor

from escaler.reconcilers.kit.setup import cache_reader
from escaler.reconcilers.kit.watchkey import NOT_SYNCED_RETRY_SECONDS
from escaler.runtime import Request
from escaler.targets.registry import default_registry

GOLDEN = Path(__file__).resolve().parent / "es_poll_replay.golden.json"
POLL = 30.0
MAX_POLLS = 200
KEY = ("metrics", NS, "es")
REQ = Request(NS, "es")
# a reconcile that leaves a collection pending is followed by at most this many more
MAX_FOLLOW_UPS = 3

Values = Callable[[int, random.Random], Mapping[str, float | str]]


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One scaler and what its metric source answers at each poll."""

    name: str
    polls: int
    # poll index, the scenario's seeded rng → metric name → value (an error string: the read fails)
    values: Values
    # metric name → Value target
    metrics: tuple[tuple[str, str], ...] = (("queue", "10"),)
    replicas: int = 4
    min_replicas: int = 1
    max_replicas: int = 10
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    config: Mapping[str, str] = dataclasses.field(default_factory=dict)
    fallback: Mapping[str, int] | None = None
    seed: int = 1


@dataclasses.dataclass(frozen=True)
class Step:
    """What a user sees after one poll (``kind`` "poll") or the reconcile a target change woke ("echo")."""

    poll: int
    kind: str
    replicas: int
    target_writes: int
    status_writes: int
    status: Mapping[str, Any]
    events: tuple[tuple[str, str, str], ...]
    requeue_after: float | None

    def as_json(self) -> dict[str, Any]:
        return {"poll": self.poll, "kind": self.kind, "replicas": self.replicas,
                "target_writes": self.target_writes, "status_writes": self.status_writes,
                "status": self.status, "events": [list(e) for e in self.events],
                "requeue_after": self.requeue_after}


def _scaler_object(sc: Scenario) -> dict[str, Any]:
    trigger = metrics_trigger(*(external_metric(n, v) for n, v in sc.metrics), config=dict(sc.config) or None)
    obj = scaler("es", trigger, min_replicas=sc.min_replicas, max_replicas=sc.max_replicas,
                 annotations=dict(sc.annotations) or None)
    if sc.fallback is not None:
        obj["spec"]["fallback"] = dict(sc.fallback)
    return obj


def _production_handlers(h: Harness) -> None:
    """The handlers a manager builds: targets read from the watch cache (not a GET each)."""
    h.reconciler._d = dataclasses.replace(h.reconciler._d, handlers=default_registry(
        h.client, cache_get=cache_reader(h.cluster.mapper, h.es.watches)))  # type: ignore[arg-type]


class _Recorder:
    """Turns the harness's counters into per-step deltas."""

    def __init__(self, h: Harness) -> None:
        self._h = h
        self._events = 0
        self._target = 0
        self._status = 0

    def _target_writes(self) -> int:
        c = self._h.client
        return c.count("patch", "deployments") + c.count("update", "deployments")

    def _status_writes(self) -> int:
        return self._h.client.count("patch", "elasticscalers/status")

    def mark(self) -> None:
        self._events = len(self._h.recorder.events)  # type: ignore[attr-defined]
        self._target = self._target_writes()
        self._status = self._status_writes()

    def step(self, poll: int, kind: str, requeue_after: float | None) -> Step:
        h = self._h
        events = tuple((e.type, e.reason, e.note)
                       for e in h.recorder.events[self._events:])  # type: ignore[attr-defined]
        out = Step(poll=poll, kind=kind, replicas=h.replicas(),
                   target_writes=self._target_writes() - self._target,
                   status_writes=self._status_writes() - self._status,
                   status=json.loads(json.dumps(h.status("es"), sort_keys=True)),
                   events=events, requeue_after=requeue_after)
        self.mark()
        return out


def _synced(h: Harness) -> None:
    h.wait_listed()
    h.wait_synced("elasticscalers")
    h.wait_synced("deployments")


def _consume(h: Harness, mx: ManualExecutor) -> float | None:
    """The reconcile a collection's completion wakes, and those of any collection it leaves pending."""
    _synced(h)
    result = h.reconciler.reconcile(REQ)
    for _ in range(MAX_FOLLOW_UPS):
        if not mx.pending(KEY):
            break
        mx.complete(KEY)
        _synced(h)
        result = h.reconciler.reconcile(REQ)
    return result.requeue_after


def replay(sc: Scenario, *, shortcut: bool = True, taken: list[int] | None = None) -> list[Step]:
    """Run ``sc`` and return its steps (see the module docstring). ``shortcut=False`` runs every poll
    as the plain reconcile the poller enqueues when its shortcut declines (the reconcile submits the
    collection, its completion wakes the one that consumes it): the same decisions are expected.
    ``taken`` (when given) receives the index of every poll the shortcut started."""
    if not 0 < sc.polls <= MAX_POLLS:
        raise ValueError(f"Scenario.polls must be in 1..{MAX_POLLS}, got {sc.polls}")
    rng = random.Random(sc.seed)
    mx = ManualExecutor()
    steps: list[Step] = []
    with harness(outbound=mx, poll_interval=POLL) as h:
        _production_handlers(h)
        h.api("deployments").create(deployment("web", sc.replicas))
        h.api("elasticscalers").create(_scaler_object(sc))
        h.collector.values.update(sc.values(0, rng))
        h.start()
        mx.start(h.es.controller.queue)
        rec = _Recorder(h)
        rec.mark()
        # the first sync starts the target's informer (its initial list wakes the scaler) and a
        # collection; the collection's completion wakes the sync that consumes it
        _synced(h)
        if h.reconciler.reconcile(REQ).requeue_after == NOT_SYNCED_RETRY_SECONDS:
            _synced(h)
            h.reconciler.reconcile(REQ)
        steps.append(rec.step(0, "poll", _consume(h, mx) if _complete(mx) else None))
        steps += _echo(h, mx, rec, 0)
        for i in range(1, sc.polls):
            h.clock.step(POLL)
            h.collector.values.clear()
            h.collector.values.update(sc.values(i, rng))
            _synced(h)
            if shortcut and h.reconciler.poll(REQ):
                mx.complete(KEY)
                if taken is not None:
                    taken.append(i)
            steps.append(rec.step(i, "poll", _consume(h, mx)))
            steps += _echo(h, mx, rec, i)
    return steps


def _complete(mx: ManualExecutor) -> bool:
    if mx.pending(KEY):
        mx.complete(KEY)
        return True
    return False


def _echo(h: Harness, mx: ManualExecutor, rec: _Recorder, poll: int) -> list[Step]:
    """After a target write: the Deployment controller catches up, and the sync that change wakes."""
    obj = h.api("deployments").get(f"{NS}/web")
    assert obj is not None
    if obj["spec"]["replicas"] == (obj.get("status") or {}).get("replicas"):
        return []
    h.settle()
    return [rec.step(poll, "echo", _consume(h, mx))]


def digest(steps: list[Step]) -> str:
    body = json.dumps([s.as_json() for s in steps], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


def summary(steps: list[Step]) -> list[str]:
    """One line per step: replicas, desiredReplicas, writes, conditions, metric values, events."""
    lines = []
    for s in steps:
        st = s.status
        conds = ",".join(f"{c['type']}={c['status'][0]}:{c.get('reason', '')}"
                         for c in st.get("conditions") or ())
        metrics = ",".join(_metric(m) for m in st.get("currentMetrics") or ())
        events = ",".join(e[1] for e in s.events)
        failures = st.get("fallback", {}).get("failures", "-")
        lines.append(f"{s.poll:03d} {s.kind} r={s.replicas} d={st.get('desiredReplicas')} "
                     f"tw={s.target_writes} sw={s.status_writes} rq={s.requeue_after} "
                     f"fb={failures} [{conds}] m=[{metrics}] ev=[{events}]")
    return lines


def _metric(m: Mapping[str, Any]) -> str:
    v = m.get("value")
    return f"{m.get('name')}:{v if not isinstance(v, float) else round(v, 3)}->{m.get('recommendedReplicas')}"


# ----------------------------------------------------------------------------------------- scenarios

ON = 40.0  # Value target 10 at 4 replicas
DOWN = "HTTP 503 from the metrics adapter"


def _flat(i: int, rng: random.Random) -> Mapping[str, float | str]:
    return {"queue": ON}


def _noisy(i: int, rng: random.Random) -> Mapping[str, float | str]:
    return {"queue": ON * (1 + rng.uniform(-0.04, 0.04))}


def _drift(i: int, rng: random.Random) -> Mapping[str, float | str]:
    # +1.5 % a poll for 30 polls (crosses apa's 10 % tolerance), then back down past it
    up = min(i, 30)
    down = max(0, i - 30)
    return {"queue": round(ON * (1 + 0.015 * up - 0.02 * down) * (1 + rng.uniform(-0.005, 0.005)), 6)}


def _steps(i: int, rng: random.Random) -> Mapping[str, float | str]:
    # up at 5, down at 15 (held by the 300 s scale-down window), a short dip that the window absorbs
    if i < 5:
        v = ON
    elif i < 15:
        v = 3 * ON
    elif i < 35:
        v = ON / 2
    elif i < 38:
        v = ON / 4
    else:
        v = ON / 2
    return {"queue": v * (1 + rng.uniform(-0.03, 0.03))}


def _missing(i: int, rng: random.Random) -> Mapping[str, float | str]:
    # reads fail for polls 4..11 (fallback after 3), recover, one more short gap at 20..21
    if 4 <= i < 12 or 20 <= i < 22:
        return {"queue": DOWN}
    return {"queue": ON * (1 + rng.uniform(-0.04, 0.04))}


def _clamps(i: int, rng: random.Random) -> Mapping[str, float | str]:
    # far above max, then far below min, then back inside
    if i < 10:
        v = 500.0
    elif i < 25:
        v = 0.5
    else:
        v = ON
    return {"queue": v * (1 + rng.uniform(-0.04, 0.04))}


def _several(i: int, rng: random.Random) -> Mapping[str, float | str]:
    # two metrics; the higher recommendation wins, the lead changes hands, one metric goes missing
    a = ON * (1 + rng.uniform(-0.04, 0.04)) if i < 12 else ON * 2
    b = 2 * ON if 6 <= i < 12 else ON * 0.6
    out: dict[str, float | str] = {"queue": round(a, 6), "tokens": round(b * 10, 6)}
    if 16 <= i < 19:
        out["tokens"] = DOWN
    return out


def _walk(i: int, rng: random.Random) -> Mapping[str, float | str]:
    # a seeded random walk with occasional jumps and a few unreadable polls
    state = getattr(rng, "_walk", ON)
    state = max(1.0, state * math.exp(rng.gauss(0, 0.05)) * (3.0 if rng.random() < 0.03 else 1.0)
                * (0.4 if rng.random() < 0.03 else 1.0))
    rng._walk = state  # type: ignore[attr-defined]
    return {"queue": DOWN} if rng.random() < 0.05 else {"queue": round(state, 6)}


DOWN_WINDOW_300 = {"elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "300"}

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("flat", 20, _flat),
    Scenario("noisy within tolerance", 30, _noisy),
    Scenario("slow drift across the tolerance", 60, _drift),
    Scenario("steps up and down, 300 s scale-down window", 50, _steps, annotations=DOWN_WINDOW_300),
    Scenario("missing data and fallback", 30, _missing,
             fallback={"failureThreshold": 3, "replicas": 7},
             annotations={"elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "60"}),
    Scenario("min and max clamps", 35, _clamps, min_replicas=2, max_replicas=6,
             annotations={"elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "0"}),
    Scenario("several metrics", 25, _several, metrics=(("queue", "10"), ("tokens", "100"))),
    Scenario("random walk, tolerance 5 %", 80, _walk, config={"tolerance": "0.05"}, seed=7,
             annotations={"elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "120"}),
)


def record() -> dict[str, Any]:
    """Every scenario's digest and summary, as the golden file keeps them."""
    out: dict[str, Any] = {}
    for sc in SCENARIOS:
        steps = replay(sc)
        out[sc.name] = {"digest": digest(steps), "summary": summary(steps)}
    return out


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/unit/es_replay.py --update  (rewrites the golden file)")
    GOLDEN.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
