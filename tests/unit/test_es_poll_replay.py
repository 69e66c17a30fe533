"""A replay of recorded ElasticScaler polls pins today's decisions (issue 30).

``es_replay.py`` drives the reconciler through the poller's path on the fakes (shortcut, collection,
the consuming reconcile; the Deployment controller's catch-up and the sync it wakes) for seeded
scenarios — flat, noise inside the tolerance, a slow drift across it, steps up and down under a 300 s
scale-down window, unreadable metrics and fallback, min/max clamps, several metrics, a random walk —
and records everything a user sees per poll: the target's replicas and the writes to it, the status
as stored (desiredReplicas, conditions, currentMetrics, recentDecisions, fallback), the status
writes, the events and the requeue. ``es_poll_replay.golden.json`` keeps each scenario's digest of
those outcomes and one readable line per step; a change that moves any outcome fails here, naming
the first step that differs. An intended decision change regenerates the file
(``PYTHONPATH=. python tests/unit/es_replay.py --update``) and says so in its commit.
"""

from __future__ import annotations

import json

import pytest
from es_replay import GOLDEN, SCENARIOS, Scenario, digest, replay, summary


def _golden() -> dict[str, dict[str, object]]:
    return json.loads(GOLDEN.read_text())  # type: ignore[no-any-return]


def test_the_golden_file_covers_every_scenario() -> None:
    assert sorted(_golden()) == sorted(sc.name for sc in SCENARIOS)


@pytest.mark.parametrize("sc", SCENARIOS, ids=[sc.name for sc in SCENARIOS])
def test_a_replay_gives_the_recorded_outcomes(sc: Scenario) -> None:
    steps = replay(sc)
    want = _golden()[sc.name]
    got = summary(steps)
    first = next((i for i, (a, b) in enumerate(zip(got, want["summary"], strict=False)) if a != b), None)
    assert got == want["summary"], f"step {first} differs:\n got  {got[first or 0]}\n want " \
        f"{want['summary'][first or 0]}"  # type: ignore[index]
    assert digest(steps) == want["digest"], "a detail outside the summary lines changed (status text, " \
        "timestamps, event notes or requeues)"


def test_the_scenarios_exercise_what_they_are_named_for() -> None:
    """Guards the harness itself: the replays scale up and down, hold in the scale-down window,
    clamp at both bounds, engage fallback and lose a metric — else the pins above pin little."""
    lines = {sc.name: "\n".join(_golden()[sc.name]["summary"]) for sc in SCENARIOS}  # type: ignore[arg-type]
    assert "SuccessfulRescale" not in lines["flat"] + lines["noisy within tolerance"]
    assert "SuccessfulRescale" in lines["slow drift across the tolerance"]
    steps = lines["steps up and down, 300 s scale-down window"]
    assert "ScaleDownStabilized" in steps and "SuccessfulRescale" in steps
    clamps = lines["min and max clamps"]
    assert "TooManyReplicas" in clamps and "TooFewReplicas" in clamps
    assert "fb=3" in lines["missing data and fallback"]
    assert "r=7" in lines["missing data and fallback"]
    assert "tokens" in lines["several metrics"]


@pytest.mark.parametrize("sc", SCENARIOS, ids=[sc.name for sc in SCENARIOS])
def test_the_pollers_shortcut_decides_as_a_plain_reconcile(sc: Scenario) -> None:
    """The same replay with every poll run as a plain reconcile (submit, complete, consume) gives
    byte-identical outcomes: the shortcut and its one target read change no decision. This is the
    on/off comparison any further poll cut must pass as well."""
    taken: list[int] = []
    with_shortcut = replay(sc, taken=taken)
    assert len(taken) >= sc.polls // 2, f"the shortcut started only {len(taken)} of {sc.polls} polls"
    plain: list[int] = []
    without = replay(sc, shortcut=False, taken=plain)
    assert plain == []
    assert summary(without) == summary(with_shortcut)
    assert digest(without) == digest(with_shortcut)


def test_a_replay_is_deterministic() -> None:
    sc = SCENARIOS[3]
    assert digest(replay(sc)) == digest(replay(sc))
