"""A true lower bound on what any policy pays to meet an attainment goal on a trace.

Contract of ``lower_bound(arrivals, profile, slo, goal, initial_replicas, ...)`` → ``Bound``:

* **Work.** A request costs a replica at least ``prefill_s(prompt - cached, cached)`` seconds of
  prefill and ``output x (decode_base_s / B + decode_per_seq_s) + decode_per_kv_token_s x`` (the
  context its ``output - 1`` decode steps read: ``(output - 1) x prompt + output x (output - 1) /
  2``) seconds of decode, ``B = max_batch`` (its share of full-batch iterations: no iteration
  serves a token more cheaply, ``work``). ``cached`` is the most a prefix cache can serve it
  (``reusable``): its blocks whose hash an earlier arrival of the trace carries, in any position
  (every replica sharing one unbounded cache), at most ``prompt - 1`` tokens; a block shared by
  several requests is so charged once, to the first to arrive, and that request needs it by its
  own deadline whoever computes it. A request that meets
  the SLO has its prefill done by ``arrival + ttft_s`` and its decode by ``arrival + ttft_s +
  (output - 1) x tpot_s``.
* **Capacity.** Time is cut into buckets of ``bucket_s`` (default ``default_bucket_s``: 10 s, coarser
  for a trace longer than ``MAX_BUCKETS`` of them, so a day costs the solver what four hours do;
  every bucket length gives a valid bound, the windows below simply span other lengths); ``c[k]``
  is the mean number of serving replicas over bucket ``k``. For every bucket ``k`` and every window
  length ``h`` in ``WINDOWS`` buckets, the work *released* at or after the window's start and *due* by its end
  (prefill and decode as two parts, each with its own deadline) fits in ``bucket_s x sum(c)``
  over the window — less the work of the requests allowed to fail (a goal of ``goal`` lets
  ``floor((1 - goal) x requests)`` fail anywhere; a failed request's work can be done at any
  time): each bucket's failed work ``g[k]`` costs at least as many failed requests ``f[k]`` as its
  largest requests carrying that much work (tangent lines of that convex count), and ``sum(f) <=
  floor((1 - goal) x requests)``. A request that misses its SLO even alone on an idle replica
  (``_doomed``: a request runs on one replica, so no fleet helps it) fails in every schedule: it
  spends the budget first and carries no work. Every schedule that meets the goal satisfies every
  such constraint.
* **Cold starts.** A replica started costs at least ``min_startup_s`` before it serves (the
  engine charges from creation; the least start-up the profile can draw: the cold start's floor,
  plus the node delay when every new replica needs a node): the bound adds ``min_startup_s x
  max(0, c[k] - c[k-1])`` for every rise, from the ``initial_replicas`` serving at 0 (averaging a
  schedule over buckets never adds rises); and before ``min_startup_s`` has passed only the
  initial replicas can serve (``c[k] <= initial_replicas``). ``c[k] <= max_replicas``.
* **The fleet's floor.** A policy never holds fewer than ``min_replicas`` replicas (the engine clamps
  every decision) and pays each from its creation, the run lasting at least until the last
  arrival: the bound is at least ``min_replicas x`` that span, whatever the program says (with
  ``min_replicas`` 1, a trace of sparse bursts no longer gets a bound below one replica kept all
  along).
* ``startup_s`` (default ``min_startup_s``) replaces that least start-up: with a standby tier a
  rise can be a wake (``min(wake, min_startup_s)``), which still pays full price from the order
  until it serves, and its asleep price is >= 0, so the program is a bound for those policies too.
* The bound is the linear program's minimum of ``bucket_s x sum(c) + min_startup_s x
  sum(rises)`` (scipy's HiGHS), in replica-hours. It relaxes integrality, batching below ``B``,
  the KV cache, the order of service, the cold starts' spread and the prefix caches' size and
  placement, so a real policy pays more: **no policy beats it**. When
  the program is infeasible no policy can meet the goal with these bounds: ``reachable`` is False
  and ``replica_hours`` is None (a report prints no ratio then).
* Pure and deterministic: the same inputs give the same ``Bound``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from escaler.sim.model import ReplicaProfile
from escaler.sim.trace import Arrival

if TYPE_CHECKING:  # numpy and scipy (the ``sim`` extra) are imported where the program is built
    import numpy as np

__all__ = ["DEFAULT_BUCKET_S", "MAX_BUCKETS", "WINDOWS", "Bound", "default_bucket_s", "lower_bound",
           "reusable", "work"]

# the time resolution of the capacity variables
DEFAULT_BUCKET_S = 10.0
# the most buckets a default resolution cuts a trace into: the program's size (and HiGHS' time,
# ~12 CPU-s at 1,440 buckets of 10 s, ~34 s for a day at 60 s) grows faster than its length
MAX_BUCKETS = 1440
# the window lengths (in buckets) a constraint spans
WINDOWS = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class Bound:
    """The lower bound; ``replica_hours`` None when ``reachable`` is False."""

    reachable: bool
    replica_hours: float | None
    goal: float
    bucket_s: float
    # the requests the goal lets fail
    may_fail: int
    # the least mean serving replicas over the run (LP), for plots
    mean_replicas: float | None


def default_bucket_s(span_s: float) -> float:
    """``DEFAULT_BUCKET_S``, or for a trace spanning more than ``MAX_BUCKETS`` of them the next
    multiple of it that cuts ``span_s`` into at most ``MAX_BUCKETS`` buckets."""
    if not span_s > DEFAULT_BUCKET_S * MAX_BUCKETS:
        return DEFAULT_BUCKET_S
    return DEFAULT_BUCKET_S * math.ceil(span_s / (DEFAULT_BUCKET_S * MAX_BUCKETS))


def work(a: Arrival, profile: ReplicaProfile, cached: int = 0) -> tuple[float, float]:
    """The least replica-seconds of prefill and of decode ``a`` costs with ``cached`` of its prompt
    tokens served by a prefix cache (module docstring)."""
    p, o = a.prompt_tokens, a.output_tokens
    per_token = profile.decode_base_s / profile.max_batch + profile.decode_per_seq_s
    context = (o - 1) * p + o * (o - 1) / 2  # the KV tokens its decode steps read
    return profile.prefill_s(p - cached, cached), o * per_token + profile.decode_per_kv_token_s * context


def reusable(arrivals: Sequence[Arrival], profile: ReplicaProfile) -> list[int]:
    """For each arrival, the most prompt tokens any prefix cache can serve it (module docstring):
    O(blocks) per arrival."""
    block = profile.prefix_block_tokens
    if not block:
        return [0] * len(arrivals)
    seen: set[int] = set()
    out = []
    for a in arrivals:
        hits = sum(1 for h in a.hash_ids if h in seen)
        out.append(min(hits * block, a.prompt_tokens - 1) if hits else 0)
        seen.update(a.hash_ids)
    return out


def _buckets(arrivals: Sequence[Arrival], cached: Sequence[int], profile: ReplicaProfile, ttft_s: float,
             tpot_s: float, bucket_s: float) -> list[list[tuple[float, float, float]]]:
    """Per bucket of arrival: each request's (total work, prefill due, decode due), prefill work
    carried by its first item only through ``_due_by``."""
    n = max(1, math.ceil(max(a.t for a in arrivals) / bucket_s + 1e-12))
    out: list[list[tuple[float, float, float]]] = [[] for _ in range(n)]
    for a, c in zip(arrivals, cached, strict=True):
        pre, dec = work(a, profile, c)
        k = min(n - 1, int(a.t // bucket_s))
        out[k].append((pre, a.t + ttft_s, dec))
        out[k].append((0.0, a.t + ttft_s + max(a.output_tokens - 1, 0) * tpot_s, 0.0))
    return out


def _due_by(items: list[tuple[float, float, float]], ends: np.ndarray) -> np.ndarray:
    """For each end time, the work of one bucket due by it (prefill by its deadline, decode by its)."""
    import numpy as np

    pre = np.array([(d, w) for w, d, _ in items[0::2]], dtype=float).reshape(-1, 2)
    dec = np.array([(d, w) for (_, d, _), (_, _, w) in zip(items[1::2], items[0::2], strict=True)],
                   dtype=float).reshape(-1, 2)
    total = np.zeros(len(ends))
    for part in (pre, dec):
        if len(part) == 0:
            continue
        order = np.argsort(part[:, 0])
        due, cum = part[order, 0], np.cumsum(part[order, 1])
        idx = np.searchsorted(due, ends, side="right")
        total += np.where(idx > 0, cum[np.maximum(idx - 1, 0)], 0.0)
    return total


def _doomed(a: Arrival, cached: int, profile: ReplicaProfile, ttft_s: float, tpot_s: float) -> bool:
    """Whether ``a`` misses its SLO even alone on an idle replica with the most its prefix can hit:
    its first iteration (the decode step of a batch of one plus its prompt less ``cached``) is longer
    than ``ttft_s``, or, with more than one output token, a batch of one reading its prompt steps
    slower than ``tpot_s``. A request is served by one replica, so no fleet size helps it."""
    if (profile.decode_step_s(1, 0) + profile.prefill_s(a.prompt_tokens - cached, cached)
            > ttft_s * (1 + 1e-12)):
        return True
    return a.output_tokens > 1 and profile.decode_step_s(1, a.prompt_tokens) > tpot_s * (1 + 1e-12)


def _fail_lines(items: list[tuple[float, float, float]]) -> list[tuple[float, float]]:
    """Lines ``count >= a + s x failed_work`` under the least count of a bucket's requests whose
    work adds up to ``failed_work`` (largest first; each line extends one segment of that convex
    function, so every line is below it)."""
    works = sorted((pre + dec for pre, _, dec in items[0::2]), reverse=True)
    lines, done, j = [], 0.0, 0
    while j < len(works):
        w = works[j]
        if w > 0:
            lines.append((j - done / w, 1.0 / w))  # count = j + (g - done) / w on this segment
        j2 = 2 * j + 1
        done += sum(works[j:j2])
        j = j2
    return lines


def lower_bound(arrivals: Sequence[Arrival], profile: ReplicaProfile, *, ttft_s: float, tpot_s: float,
                goal: float, initial_replicas: int, max_replicas: int, min_replicas: int = 0,
                bucket_s: float | None = None, startup_s: float | None = None) -> Bound:
    """See the module docstring; ``bucket_s`` None is ``default_bucket_s`` of the trace's span,
    ``startup_s`` None the profile's ``min_startup_s``."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    if not arrivals:
        raise ValueError("lower_bound: the trace holds no requests")
    if bucket_s is None:
        bucket_s = default_bucket_s(max(a.t for a in arrivals))
    if not 0 < goal <= 1:
        raise ValueError(f"lower_bound: goal must be in (0, 1], got {goal}")
    if not bucket_s > 0:
        raise ValueError(f"lower_bound: bucket_s must be > 0, got {bucket_s}")
    may_fail = math.floor((1 - goal) * len(arrivals) + 1e-9)
    cached = reusable(arrivals, profile)
    fate = [_doomed(a, c, profile, ttft_s, tpot_s) for a, c in zip(arrivals, cached, strict=True)]
    doomed = sum(fate)
    if doomed > may_fail:
        return Bound(False, None, goal, bucket_s, may_fail, None)
    possible = [(a, c) for a, c, lost in zip(arrivals, cached, fate, strict=True) if not lost]
    floor_h = max(0, min_replicas) * max(a.t for a in arrivals) / 3600.0
    if not possible:
        return Bound(True, floor_h, goal, bucket_s, may_fail, 0.0)
    budget = may_fail - doomed
    buckets = _buckets([a for a, _ in possible], [c for _, c in possible], profile, ttft_s, tpot_s, bucket_s)
    last_due = max(d for b in buckets for _, d, _ in b)
    n = max(len(buckets), math.ceil(last_due / bucket_s))
    nb = len(buckets)
    hmax = max(WINDOWS)
    # due[k][e]: bucket k's work due by the end of bucket k + e (e = 1..hmax)
    due = [(_due_by(b, (k + np.arange(1, hmax + 1)) * bucket_s) if b else np.zeros(hmax))
           for k, b in enumerate(buckets)]
    # variables: c[0..n) serving, u[0..n) rises, g[0..nb) failed work, f[0..nb) failed requests
    C, U, G, F = 0, n, 2 * n, 2 * n + nb
    nvar = 2 * n + 2 * nb
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    rhs: list[float] = []

    def row(entries: list[tuple[int, float]], bound: float) -> None:
        r = len(rhs)
        for col, v in entries:
            rows.append(r)
            cols.append(col)
            vals.append(v)
        rhs.append(bound)

    for h in WINDOWS:
        for k in range(max(0, nb - h + 1) if h <= nb else 1):
            span = range(k, min(k + h, nb))
            need = sum(float(due[j][k + h - j - 1]) for j in span)
            if need <= 0:
                continue
            # need - sum(g) <= bucket_s * sum(c)  →  -bucket_s*sum(c) - sum(g) <= -need
            row([(C + j, -bucket_s) for j in range(k, min(k + h, n))] + [(G + j, -1.0) for j in span], -need)
    row([(C, 1.0), (U, -1.0)], float(initial_replicas))  # c[0] - u[0] <= initial
    for j in range(1, n):
        row([(C + j, 1.0), (C + j - 1, -1.0), (U + j, -1.0)], 0.0)
    for k, b in enumerate(buckets):
        for a, slope in _fail_lines(b):
            row([(G + k, slope), (F + k, -1.0)], -a)  # a + slope*g <= f
    row([(F + k, 1.0) for k in range(nb)], float(budget))
    a_ub = coo_matrix((vals, (rows, cols)), shape=(len(rhs), nvar)).tocsr()
    startup = profile.min_startup_s if startup_s is None else max(0.0, startup_s)
    cost = np.concatenate([np.full(n, bucket_s), np.full(n, startup), np.zeros(2 * nb)])
    warm_only = int(startup // bucket_s)  # buckets that end before a started replica serves
    cap = float(max_replicas)
    bounds = ([(0.0, min(float(initial_replicas), cap) if j < warm_only else cap) for j in range(n)]
              + [(0.0, None)] * n
              + [(0.0, sum(p + d for p, _, d in b[0::2])) for b in buckets]
              + [(0.0, None)] * nb)
    res = linprog(cost, A_ub=a_ub, b_ub=np.array(rhs), bounds=bounds, method="highs")
    if res.status == 2:  # infeasible
        return Bound(False, None, goal, bucket_s, may_fail, None)
    if res.status != 0:
        raise RuntimeError(f"lower_bound: the linear program did not solve: {res.message}")
    hours = max(float(res.fun) / 3600.0, floor_h)
    return Bound(True, hours, goal, bucket_s, may_fail, float(res.x[:n].mean()))
