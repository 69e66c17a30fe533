"""A surge is followed at least as fast as the HPA follows it (docs/reference/annotations.md, issue 8 item
12).

Replays the issue's series — an External metric, AverageValue 10, load 40 → 120 → 60 → 20 with ±8 %
deterministic noise, one sample every 2 s — through the sample windows, ``apa`` and the pipeline
(``decide``, 10 s scale-down stabilization from the annotations), exactly as metricsync composes
them, next to a simple HPA model on the same samples: ``ceil(current * ratio)`` on the latest sample
with a 10 % tolerance, scale-up at once, scale-down to the highest recommendation of the last 10 s.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

import pytest

from escaler.scaling.algorithm import AlgorithmContext, AlgorithmResult, MetricValue
from escaler.scaling.annotations import (
    PANIC_WINDOW_PERCENTAGE,
    SCALE_DOWN_STABILIZATION_WINDOW,
    parse_annotations,
)
from escaler.scaling.apa import apa
from escaler.scaling.pipeline import Behavior, PipelineInput, PipelineState, RecommendResult, decide
from escaler.scaling.window import MetricWindows, WindowPolicy, choose

POLL = 2.0
TARGET = 10.0  # AverageValue per replica
# (load, seconds): the step up comes at t = 60 s
PHASES = ((40.0, 60.0), (120.0, 120.0), (60.0, 120.0), (20.0, 120.0))
STEP_AT = 60.0
NEED = 12
START = 4
NOISE = 0.08
T0 = 1_800_000_000.0  # wall clock of the first sample (the pipeline's time)


@dataclass(frozen=True)
class Poll:
    t: float
    load: float
    # the metric's total this poll (load with noise)
    total: float


def series(seed: int) -> list[Poll]:
    rng = random.Random(seed)
    out: list[Poll] = []
    t = 0.0
    for load, seconds in PHASES:
        for _ in range(round(seconds / POLL)):
            out.append(Poll(t, load, load * (1 + rng.uniform(-NOISE, NOISE))))
            t += POLL
    return out


def escaler(polls: list[Poll], annotations: dict[str, str] | None = None) -> list[int]:
    """The replica count after each poll: windows → apa on the stable, panic and peak values →
    choose → decide, with the total windowed and divided by the current count (metricsync's way)."""
    ann, problems = parse_annotations({SCALE_DOWN_STABILIZATION_WINDOW: "10", **(annotations or {})})
    assert problems == []
    behavior = Behavior.from_annotations(ann, min_replicas=1, max_replicas=50)
    windows = MetricWindows(WindowPolicy.from_annotations(ann))
    current, state, counts = START, PipelineState(), []
    for p in polls:
        windows.add("0/queue", p.t, p.total)

        def run(total: float | None, current: int = current) -> AlgorithmResult | None:
            if total is None:
                return None
            metric = MetricValue("queue", "External", total / current, "AverageValue", TARGET)
            return apa(AlgorithmContext(current_replicas=current, metrics=(metric,)))

        stable = run(windows.aggregate("0/queue", p.t))
        assert stable is not None
        choice = choose(current, stable, run(windows.panic("0/queue", p.t)),
                        run(windows.peak("0/queue", p.t)))
        rr = RecommendResult.from_metrics(choice.result.replicas, evaluated=1, total=1,
                                          uncapped=choice.result.uncapped)
        decision = decide(PipelineInput(now=T0 + p.t, current_replicas=current, recommend=rr,
                                        behavior=behavior, state=state))
        state = decision.state
        if decision.write:
            current = decision.desired
        windows.gc(p.t)
        counts.append(current)
    return counts


def hpa_model(polls: list[Poll]) -> list[int]:
    """The HPA on the latest sample: 10 % tolerance, scale-up at once, scale-down window 10 s."""
    current, recent, counts = START, list[tuple[float, int]](), []
    for p in polls:
        ratio = p.total / current / TARGET
        rec = current if abs(ratio - 1) <= 0.1 else math.ceil(current * ratio - 1e-9)
        recent = [(t, r) for t, r in recent if t > p.t - 10] + [(p.t, rec)]
        current = rec if rec >= current else min(current, max(r for _, r in recent))
        counts.append(current)
    return counts


def changes(counts: list[int]) -> int:
    return sum(1 for a, b in zip([START, *counts], counts, strict=False) if a != b)


def seconds_to_need(polls: list[Poll], counts: list[int]) -> float:
    return next(p.t for p, c in zip(polls, counts, strict=True) if p.t >= STEP_AT and c >= NEED) - STEP_AT


SEED = 8


def test_a_surge_is_followed_as_fast_as_the_hpa_with_no_more_changes() -> None:
    polls = series(SEED)
    ours, hpa = escaler(polls), hpa_model(polls)
    # 12 replicas within 4 s of the step: two polls (apa's default scaleUpRate 2 goes 4 → 8 → 12)
    assert seconds_to_need(polls, ours) <= 4.0
    step = next(i for i, p in enumerate(polls) if p.t == STEP_AT)
    assert ours[step] == 2 * START and ours[step + 1] >= NEED
    assert changes(ours) <= changes(hpa)
    # never below the need while the load is 120, once reached
    at_120 = [c for p, c in zip(polls, ours, strict=True) if p.load == 120 and p.t >= STEP_AT + POLL]
    assert min(at_120) >= NEED


def test_without_the_panic_window_the_stable_window_creeps() -> None:
    # the measurement, reproduced: the 60 s Average alone takes ~50 s and many changes
    polls = series(SEED)
    off = escaler(polls, {PANIC_WINDOW_PERCENTAGE: "0"})
    assert seconds_to_need(polls, off) >= 40.0
    assert changes(off) >= 3 * changes(escaler(polls))


@pytest.mark.parametrize("seed", range(40), ids=[f"seed-{s}" for s in range(40)])
def test_every_series_one_change_per_step_down(seed: int) -> None:
    polls = series(seed)
    ours, hpa = escaler(polls), hpa_model(polls)
    assert seconds_to_need(polls, ours) == POLL
    # two changes up (the 2x step cap), one per step down: the windows settle before a scale-down
    assert changes(ours) == 4
    # the uncapped HPA model makes 3 to 6; it beats 4 only on series where it needs a single
    # change per step down, because the HPA model is not capped at 2x per step
    assert changes(ours) <= changes(hpa) + 1


def test_over_many_series_no_more_changes_than_the_hpa() -> None:
    ours = [changes(escaler(series(s))) for s in range(40)]
    hpa = [changes(hpa_model(series(s))) for s in range(40)]
    assert statistics.mean(ours) <= statistics.mean(hpa)
    assert sum(o <= h for o, h in zip(ours, hpa, strict=True)) >= 38
