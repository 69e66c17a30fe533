"""Intervals on a run's figures, so that a verdict is said only where the runs really differ.

One trace is one sample of traffic: a policy that wins by a replica-step may win by the luck of
where the bursts fell. Contract:

* ``blocks(run, block_s)`` cuts a run into consecutive time blocks of ``block_s`` seconds (from 0
  to the run's end): per block, the requests that *arrived* in it, those of them that met both
  objectives, and the replica-seconds paid in it (every replica's life from creation to removal,
  cut at the block edges). Requests never served count as misses of the last block. Summed over
  the blocks they give the run's attainment and replica-seconds exactly.
* ``paired_interval(a, b, statistic, ...)`` is a **paired block bootstrap**: ``resamples`` times,
  draw as many block indices as there are, with replacement, from a ``random.Random(seed)`` (so
  the interval is a pure function of its inputs), and compute ``statistic`` over the drawn blocks
  of ``a`` minus the same over the *same* blocks of ``b`` (the two policies saw the same traffic
  in a block, so pairing removes the traffic's own variation); the interval is the ``(1 - level)
  / 2`` and ``(1 + level) / 2`` percentiles of those differences. Blocks of 5 minutes keep a
  burst and the cold starts it causes within one block, as a block bootstrap needs.
* ``compare(a, b, ...)`` gives what a verdict needs: the intervals of replica-hours of ``a`` minus
  ``b`` and of attainment of ``a`` minus ``b``, and the two differences over the whole runs.
  ``Comparison.verdict`` is ``"cheaper"`` when the whole cost interval is below 0 and ``a``'s
  attainment is at least ``b``'s; ``"better"`` when the cost interval straddles 0 (the runs cost
  the same as far as the traffic can tell) and the whole attainment interval is above 0;
  ``"worse"`` when the cost interval excludes 0 the other way or the attainment is worse at a
  separated lower cost; ``None`` (no verdict) when neither interval separates.
* ``Interval.__str__`` is ``[lo, hi]`` with 3 significant digits.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from escaler.sim.engine import Run, percentile
from escaler.sim.report import SloTargets, meets

__all__ = ["BLOCK_S", "RESAMPLES", "Block", "Comparison", "Interval", "attainment", "blocks", "compare",
           "paired_interval", "replica_hours"]

BLOCK_S = 300.0
RESAMPLES = 1000
LEVEL = 0.95


@dataclass(frozen=True)
class Block:
    requests: int
    met: int
    replica_seconds: float


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float

    def __str__(self) -> str:
        return f"[{self.lo:.3g}, {self.hi:.3g}]"


def blocks(run: Run, slo: SloTargets, block_s: float = BLOCK_S) -> list[Block]:
    """See the module docstring."""
    if not block_s > 0:
        raise ValueError(f"block_s: must be > 0, got {block_s}")
    n = max(1, math.ceil(run.end / block_s))
    requests, met, cost = [0] * n, [0] * n, [0.0] * n
    for q in run.requests:
        i = min(n - 1, int(q.arrival // block_s))
        requests[i] += 1
        if meets(q, slo):
            met[i] += 1
    requests[-1] += run.unfinished
    for start, stop, price in run.lifetimes:
        i = int(start // block_s)
        while i < n and i * block_s < stop:
            cost[i] += price * (min(stop, (i + 1) * block_s) - max(start, i * block_s))
            i += 1
    return [Block(r, m, c) for r, m, c in zip(requests, met, cost, strict=True)]


def attainment(bs: Sequence[Block]) -> float:
    total = sum(b.requests for b in bs)
    return sum(b.met for b in bs) / total if total else 0.0


def replica_hours(bs: Sequence[Block]) -> float:
    return sum(b.replica_seconds for b in bs) / 3600.0


def paired_interval(a: Sequence[Block], b: Sequence[Block], statistic: Callable[[Sequence[Block]], float],
                    resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0) -> Interval:
    """See the module docstring."""
    if len(a) != len(b):
        # the runs end at different times: the shorter one's tail has no requests and no cost
        n = max(len(a), len(b))
        a = [*a, *[Block(0, 0, 0.0)] * (n - len(a))]
        b = [*b, *[Block(0, 0, 0.0)] * (n - len(b))]
    rng = random.Random(seed)
    n = len(a)
    diffs = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        diffs.append(statistic([a[i] for i in idx]) - statistic([b[i] for i in idx]))
    lo = percentile(diffs, 100 * (1 - level) / 2)
    hi = percentile(diffs, 100 * (1 + level) / 2)
    assert lo is not None and hi is not None
    return Interval(lo, hi)


@dataclass(frozen=True)
class Comparison:
    # the intervals of replica-hours of a minus b and of attainment of a minus b (fractions)
    cost: Interval
    attainment: Interval
    # the same differences over the whole runs
    cost_difference: float = 0.0
    attainment_difference: float = 0.0

    @property
    def verdict(self) -> str | None:
        """See the module docstring."""
        if self.cost.hi < 0:
            return "cheaper" if self.attainment_difference >= 0 else "worse"
        if self.cost.lo > 0:
            return "worse"
        if self.attainment.lo > 0:
            return "better"
        return None

    @property
    def beats(self) -> bool:
        return self.verdict in ("cheaper", "better")


def compare(a: Sequence[Block], b: Sequence[Block], resamples: int = RESAMPLES, seed: int = 0) -> Comparison:
    """See the module docstring."""
    return Comparison(paired_interval(a, b, replica_hours, resamples, seed=seed),
                      paired_interval(a, b, attainment, resamples, seed=seed),
                      replica_hours(a) - replica_hours(b), attainment(a) - attainment(b))
