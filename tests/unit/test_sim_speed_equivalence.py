"""The simulator's coalesced decode runs give the very same run as one event per iteration.

``escaler.sim.engine.COALESCE`` False schedules every iteration of every replica as its own event
(the step-by-step simulator); True coalesces decode-only runs (``escaler.sim.serving``). Each case
runs both over the same small synthetic trace and compares the whole ``Run`` with ``==``: every
request's record (first token, done, replica, prefix-cache hit), every scrape (gauges, token
counters, TTFTs and TPOTs in order), every scale event, the replica-seconds, the end and each
replica's lifetime — floats to the last bit.

The cases are seeded draws over what changes an iteration: batch sizes from 1 to 256, a token
budget (chunked prefill) or none, prefix-cache hashes, one-token answers, bursts of identical
requests (replicas in lockstep), scale-ups and scale-downs that drain serving replicas, scrape
intervals short enough that no run is coalesced; and profiles whose iterations last a power of
two of seconds, so that iteration ends fall exactly on scrapes, policy ticks and arrivals (the
ties the event order has to get right).
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from escaler.sim import engine
from escaler.sim.engine import Run, SimOptions, simulate
from escaler.sim.model import ReplicaProfile
from escaler.sim.serving import Fleet
from escaler.sim.trace import Arrival
from tests.unit.test_sim_engine import Schedule


def _arrivals(rng: random.Random, n: int, span: float, exact: bool) -> list[Arrival]:
    out = []
    for _ in range(n):
        t = rng.uniform(0.0, span)
        if exact or rng.random() < 0.2:  # on a 1/16 s grid: ties with iteration ends and scrapes
            t = round(t * 16) / 16
        prompt = rng.choice([1, 5, 60, 300, 1000, 4000, 9000, 20000]) + rng.randint(0, 40)
        if exact:  # a whole number of 1/64 s of prefill
            prompt = 256 * rng.choice([1, 4, 16, 40])
        output = rng.choice([1, 2, 3, 10, 60, 200, 700])
        hashes = tuple(rng.randint(0, 12) for _ in range(rng.randint(0, 5))) if rng.random() < 0.5 else ()
        out.append(Arrival(t, prompt, output, hashes))
    if rng.random() < 0.3:  # a burst of identical requests: idle replicas in lockstep
        t0 = round(rng.uniform(0.0, span))
        out += [Arrival(float(t0), 700, 40)] * rng.randint(2, 6)
    return sorted(out, key=lambda a: a.t)


def _profile(rng: random.Random, exact: bool) -> ReplicaProfile:
    if exact:  # every duration a multiple of 1/64 s: sums stay exact, ends land on whole seconds
        decode = dict(decode_base_s=rng.choice([2.0**-4, 2.0**-5, 3 * 2.0**-6]),
                      decode_per_seq_s=rng.choice([0.0, 2.0**-6]),
                      decode_per_kv_token_s=0.0, prefill_tokens_per_s=2.0**14, prefill_context_scale=0.0)
    else:
        decode = dict(decode_base_s=rng.choice([0.01, 0.007, rng.uniform(0.001, 0.05)]),
                      decode_per_seq_s=rng.choice([0.0, 4e-5, rng.uniform(0.0, 1e-3)]),
                      decode_per_kv_token_s=rng.choice([0.0, 5e-8, rng.uniform(0.0, 1e-6)]),
                      prefill_tokens_per_s=rng.choice([10_000.0, 25_000.0, rng.uniform(5e3, 5e4)]),
                      prefill_context_scale=rng.choice([0.0, 27_000.0, rng.uniform(1e3, 1e5)]))
    cold = rng.choice([0.0, 4.0, 30.0])
    prof = ReplicaProfile(max_batch=rng.choice([1, 4, 16, 64, 256]),
                          kv_capacity_tokens=rng.choice([30_000, 100_000, 430_000]),
                          cold_start_s=cold, cold_start_p90_s=cold * rng.choice([1.0, 2.0]),
                          max_batched_tokens=0, prefix_block_tokens=rng.choice([0, 16, 512]), **decode)
    if rng.random() < 0.6:
        prof = replace(prof, max_batched_tokens=max(prof.max_batch, rng.choice([256, 2048, 8192])))
    return prof


def _case(seed: int) -> tuple[list[Arrival], Schedule, SimOptions]:
    rng = random.Random(seed)
    exact = seed % 3 == 0
    span = rng.uniform(5.0, 90.0)
    arrivals = _arrivals(rng, rng.randint(40, 250), span, exact)
    steps = sorted((float(round(rng.uniform(0.0, span * 1.5))), rng.randint(0, 6))
                   for _ in range(rng.randint(0, 8)))
    policy = Schedule(steps, period_s=rng.choice([1.0, 2.0, 0.5, 30.0, 0.013]))
    options = SimOptions(profile=_profile(rng, exact), initial_replicas=rng.randint(0, 4),
                         min_replicas=rng.choice([0, 1]), max_replicas=rng.choice([1, 3, 8]),
                         scrape_interval_s=rng.choice([1.0, 1.0, 0.25, 0.07]),
                         horizon_s=rng.choice([3600.0, 20.0]), seed=seed)
    return arrivals, policy, options


def _run(seed: int, coalesce: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Run, int]:
    """The case's run, and how many iteration events it processed."""
    arrivals, policy, options = _case(seed)
    events = 0
    done = Fleet.iteration_done

    def counted(fleet: Fleet, *args: object) -> None:
        nonlocal events
        events += 1
        done(fleet, *args)  # type: ignore[arg-type]

    with monkeypatch.context() as m:
        m.setattr(engine, "COALESCE", coalesce)
        m.setattr(Fleet, "iteration_done", counted)
        return simulate(arrivals, policy, options), events


SEEDS = list(range(30))


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed{s}{'-exact' if s % 3 == 0 else ''}" for s in SEEDS])
def test_coalesced_runs_give_the_step_by_step_run(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    step_by_step, every = _run(seed, False, monkeypatch)
    coalesced, fewer = _run(seed, True, monkeypatch)
    assert coalesced == step_by_step
    assert fewer <= every


# iterations of 1/16 s (and 1/16 s more per 1,024 tokens prefilled): their ends fall on scrapes,
# ticks and arrivals
TIES = ReplicaProfile(max_batch=8, prefill_tokens_per_s=2.0**14, prefill_context_scale=0.0,
                      decode_base_s=2.0**-4, decode_per_seq_s=0.0, decode_per_kv_token_s=0.0,
                      kv_capacity_tokens=100_000, cold_start_s=0.0, cold_start_p90_s=0.0,
                      max_batched_tokens=0, prefix_block_tokens=0)


def test_iteration_ends_on_scrapes_ticks_and_arrivals(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1,024 prompt tokens: a first iteration of 1/16 + 1/16 s, then one of 1/16 s per token. The
    # second request arrives at 3.0, the end of an iteration of a run, the third at 12.5, another
    # one's: each is admitted by the iteration ending at its arrival (it comes first)
    arrivals = [Arrival(0.0, 1024, 200), Arrival(3.0, 1024, 40), Arrival(12.5, 1024, 10)]
    options = SimOptions(profile=TIES, initial_replicas=1, max_replicas=1)
    with monkeypatch.context() as m:
        m.setattr(engine, "COALESCE", False)
        step_by_step = simulate(arrivals, Schedule([], period_s=2.0), options)
    coalesced = simulate(arrivals, Schedule([], period_s=2.0), options)
    assert coalesced == step_by_step
    assert [(q.first_token, q.done) for q in coalesced.requests] == [(0.125, 12.6875), (3.125, 5.5625),
                                                                     (12.625, 13.1875)]
    # a scrape counts the iterations ended before it; one ending with it comes after: by 1.0 the
    # first token and 13 more (0.1875 to 0.9375); in [3, 4) the one ending at 3, the prefill
    # (two tokens) and 13 of two
    assert [s.generation_tokens for s in coalesced.scrapes[:4]] == [14, 16, 16, 29]
