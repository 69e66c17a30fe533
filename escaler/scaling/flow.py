"""Flow sizing: an LLM server fleet sized on the work that flows through it, not on a stock.

Pure: data in, data out — no I/O, no clock (the caller passes ``now``, in seconds).

Why a flow. A stock signal (requests in flight, KV use) is a *consequence* of the fleet size: when
a queue builds it inflates, a policy that divides it by a per-replica target multiplies the fleet,
and the queue then drains on a fleet far too large. The work arriving per second does not depend
on the fleet: a replica can prefill ``prefill_tokens_per_s`` prompt tokens per second and decode
``decode_tokens_per_s`` tokens per second at its full batch (``FlowCapacity``), and sharing one
GPU between the two is additive in time (a chunked-prefill iteration spends its time on either),
so the fleet needs ``work = prompt/s / prefill + generated/s / decode`` replicas at 100 % busy.

Contract of ``decide_flow(reading, config, state) -> FlowDecision`` (``FlowDecision.steps`` are the
same steps in words, for ``escaler explain`` and status):

1. **Work** (``FlowReading``: the fleet's ``rate(prompt_tokens_total)`` and
   ``rate(generation_tokens_total)`` over the rate window): ``work`` as above, in replicas at
   100 %. A missing rate holds the last decision (``held``; the current count when there is none):
   a partial reading is not acted on.
2. **Backlog** (``waiting`` requests, not admitted by any replica): it is drained over
   ``drain_s`` seconds: ``backlog = waiting x work_per_request / drain_s`` extra replicas, where
   ``work_per_request`` is ``work / requests_per_s`` (the last known value when no request
   completed in the window). The processed rates under-read demand on a saturated fleet (they are
   capped by what it serves); the backlog is what corrects them, so stock only ever corrects.
3. **Forecast** (only raises): the least-squares trend of ``work`` over the last
   ``trend_window_s`` projected ``horizon_s`` ahead (the cold start plus a poll: the time a replica
   ordered now takes to serve), less the residuals' standard deviation (a rise inside the noise of
   the rate projects nothing). ``planned = max(work, projected)``; a falling trend never lowers it.
4. **Utilisation target**: ``base = ceil(planned / utilization + backlog)``. The target is trimmed
   slowly by latency, never multiplied by it: with ``queue_delay_s`` (the TTFT percentile less the
   prompt's own prefill time) above ``queue_delay_budget_s`` the target drops by ``trim_step``
   (down to ``min_utilization``); below a quarter of the budget it rises by a quarter step (up to
   ``max_utilization``). Without a latency reading it stays.
4b. **Burst floor**: with the burst rates read (``burst_prompt_tokens_per_s`` and
   ``burst_generation_tokens_per_s``: the largest, or a high percentile, of the token rates between
   consecutive scrapes over a lookback), ``base`` is at least ``ceil(burst work /
   burst_utilization)`` (0.95: a burst served at the whole capacity curve leaves no room for the
   prefill chunks between decode steps).
5. **Burst headroom** (learned from misses, slowly forgotten): bursts shorter than a cold start
   cannot be met by ordering replicas; only capacity already serving meets them. The misses are
   the share of requests over their latency objective (TTFT or TPOT) in the rate window
   (``miss_share``) and over a long window (``long_miss_share``, e.g. 15 minutes). When both exceed
   ``miss_budget`` (new misses, and not a noisy minute), ``headroom`` grows by
   ``ceil(miss_share / miss_budget)`` replicas, at most a quarter of the fleet (and at least 1),
   at most once per ``headroom_interval_s`` (at least the window the share is read over: its misses
   count once; ``service_config`` also waits a horizon, until the last growth could serve). When the
   long share is under half the budget and ``headroom_decay_s`` passed since the headroom last
   changed, it shrinks by one. The first decision over a running fleet (``seed_headroom``) takes
   what the fleet has beyond ``base`` as headroom: its size is taken as right, as a stabilization
   window is seeded with the current count. ``need = base + headroom``.
6. **Asymmetry**: up at once to ``need`` (starting replicas are already in ``current``: they count
   as capacity on the way, so a cold start is not ordered twice). Down only to the largest *keep*
   of the last ``down_delay_s`` (at least one cold start; the history is seeded with ``current``
   the first time), and only once per ``down_delay_s`` after the last change: a dip shorter than a
   cold start never sheds a replica that would be needed back before a new one could serve. The
   keep is the need with the flow and the burst floor sized ``down_margin`` below their targets
   (hysteresis): a load hovering at a replica boundary, whose need flips between n and n + 1 from
   one poll to the next, does not shed the replica it asks back a poll later.
7. Clamp to ``[min_replicas, max_replicas]``.

Every interval and window above is compared with ``JITTER_S`` of slack (an interval that has all
but passed counts as passed, a point that has all but left a window as left): polls a second off
their period decide as polls on it.

``FlowState`` carries what the next decision needs (the trimmed target, the work and need
histories, the headroom, the last change); ``FlowState()`` is the start. ``FlowDecision.signals``
holds the figures of the steps (work, backlog, planned, utilization, headroom, need).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

__all__ = ["JITTER_S", "MIN_DOWN_DELAY_S", "FlowCapacity", "FlowConfig", "FlowDecision", "FlowReading",
           "FlowState", "decide_flow", "down_delay", "service_config"]

# a time this close to one of the decision's boundaries (an interval since the last change, a window's
# edge) counts as at it: a real manager's polls land milliseconds to a second off their period, and
# two polls one interval apart must not flip a decision on that (the simulator's, exactly on the
# period, decide the same)
JITTER_S = 1.0
# the down delay is two cold starts and at least this: a replica kept after its need long enough
# that a burst's return finds it (a fast cold start would otherwise shed one after every burst)
MIN_DOWN_DELAY_S = 300.0


@dataclass(frozen=True)
class FlowCapacity:
    """One replica's throughput: prompt tokens prefilled per second, tokens decoded per second at
    its full batch (both with the GPU doing only that)."""

    prefill_tokens_per_s: float
    decode_tokens_per_s: float

    def __post_init__(self) -> None:
        for name in ("prefill_tokens_per_s", "decode_tokens_per_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"flow capacity {name}: must be a finite number > 0, got {v!r}")


@dataclass(frozen=True)
class FlowConfig:
    """See the module docstring."""

    capacity: FlowCapacity
    min_replicas: int = 1
    max_replicas: int = 64
    utilization: float = 0.85
    min_utilization: float = 0.5
    max_utilization: float = 0.92
    trim_step: float = 0.02
    queue_delay_budget_s: float = 1.0
    drain_s: float = 60.0
    trend_window_s: float = 600.0
    horizon_s: float = 90.0
    down_delay_s: float = 300.0
    # the first decision turns what the running fleet has beyond the flow's need into headroom
    seed_headroom: bool = True
    # the burst floor's utilisation: ceil(burst work / burst_utilization). Below 1: a replica run at
    # its whole capacity curve through a burst has no room left for the prefill chunks between its
    # decode steps (TPOT misses), and the misses then teach a headroom that outlives the burst
    burst_utilization: float = 0.95
    # the share of first tokens allowed over the TTFT objective before headroom grows
    miss_budget: float = 0.01
    headroom_decay_s: float = 900.0
    # headroom grows at most once per this (the misses of one window are counted once)
    headroom_interval_s: float = 60.0
    # a scale-down keeps the fleet the flow and burst floor need at targets this share lower
    down_margin: float = 0.1

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"flow replicas: want 0 <= min ({self.min_replicas}) <= max "
                             f"({self.max_replicas})")
        if not 0 < self.min_utilization <= self.utilization <= self.max_utilization <= 1:
            raise ValueError("flow utilization: want 0 < min_utilization <= utilization <= "
                             f"max_utilization <= 1, got {self.min_utilization} / {self.utilization} / "
                             f"{self.max_utilization}")
        for name in ("trim_step", "queue_delay_budget_s", "trend_window_s", "horizon_s", "down_delay_s",
                     "headroom_interval_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"flow {name}: must be a finite number >= 0, got {v!r}")
        if not (math.isfinite(self.burst_utilization) and 0 < self.burst_utilization <= 1):
            raise ValueError(f"flow burst_utilization: must be in (0, 1], got {self.burst_utilization!r}")
        if not 0 < self.miss_budget < 1:
            raise ValueError(f"flow miss_budget: must be in (0, 1), got {self.miss_budget!r}")
        if not (math.isfinite(self.headroom_decay_s) and self.headroom_decay_s > 0):
            raise ValueError(f"flow headroom_decay_s: must be a finite number > 0, "
                             f"got {self.headroom_decay_s!r}")
        if not (math.isfinite(self.down_margin) and 0 <= self.down_margin < 1):
            raise ValueError(f"flow down_margin: must be in [0, 1), got {self.down_margin!r}")
        if not (math.isfinite(self.drain_s) and self.drain_s > 0):
            raise ValueError(f"flow drain_s: must be a finite number > 0, got {self.drain_s!r}")


def down_delay(cold_start_s: float) -> float:
    """The down delay of a service whose replicas take ``cold_start_s`` to serve: two cold starts,
    at least ``MIN_DOWN_DELAY_S``. The burst floor's lookback is the same span (a burst is
    remembered as long as a replica is kept after its need, no longer)."""
    return max(2.0 * cold_start_s, MIN_DOWN_DELAY_S)


def service_config(capacity: FlowCapacity, *, cold_start_s: float, poll_s: float, min_replicas: int,
                   max_replicas: int, ttft_s: float | None = None, utilization: float = 0.85,
                   miss_budget: float = 0.01, rate_window_s: float = 60.0) -> FlowConfig:
    """The ``FlowConfig`` of a service, the one definition the simulator's ``flow`` and the
    LLMScaler's ``metricProvider: Flow`` share: the forecast horizon is a cold start plus a poll
    (when a replica ordered now serves), the down delay ``down_delay(cold_start_s)``, the
    queueing-delay budget half the TTFT objective, the headroom grows at most once per horizon and
    per rate window (the misses of one window count once, and a growth waits until the last one
    could serve: the misses a replica still starting will stop must not order another — with a
    180 s cold start, growing once a minute tripled the headroom a rise needed, 16.3 against 9.1
    replica-hours on conversation x5 with the 70 B profile), and the utilisation trim's range
    (0.5-0.92) is widened to include ``utilization``."""
    return FlowConfig(
        capacity=capacity, min_replicas=min_replicas, max_replicas=max_replicas, utilization=utilization,
        min_utilization=min(FlowConfig.min_utilization, utilization),
        max_utilization=max(FlowConfig.max_utilization, utilization),
        queue_delay_budget_s=ttft_s / 2 if ttft_s is not None else FlowConfig.queue_delay_budget_s,
        horizon_s=cold_start_s + max(0.0, poll_s), down_delay_s=down_delay(cold_start_s),
        miss_budget=miss_budget, headroom_interval_s=max(rate_window_s, cold_start_s + max(0.0, poll_s)))


@dataclass(frozen=True)
class FlowReading:
    """What the fleet's metrics say at ``now`` (None: could not be read)."""

    now: float
    current: int
    prompt_tokens_per_s: float | None
    generation_tokens_per_s: float | None
    requests_per_s: float | None = None
    waiting: float | None = None
    queue_delay_s: float | None = None
    # the largest short-range (one scrape interval) token rates over the burst lookback: what a
    # burst needs served; None = not read (no burst floor)
    burst_prompt_tokens_per_s: float | None = None
    burst_generation_tokens_per_s: float | None = None
    # the share of requests over their latency objective in the rate window and over a long one
    # (None: nothing observed)
    miss_share: float | None = None
    long_miss_share: float | None = None


@dataclass(frozen=True)
class FlowState:
    """What one decision leaves for the next."""

    utilization: float | None = None
    # (time, work in replicas at 100 %), oldest first, within the trend window
    work: tuple[tuple[float, float], ...] = ()
    # (time, keep: the need within the down margin), oldest first, within the down delay
    needs: tuple[tuple[float, int], ...] = ()
    work_per_request: float | None = None
    last_change: float | None = None
    last: int | None = None
    headroom: int = 0
    # when the headroom last grew or shrank (its decay counts from there)
    headroom_since: float | None = None


@dataclass(frozen=True)
class FlowDecision:
    replicas: int
    state: FlowState
    steps: tuple[str, ...]
    held: bool = False
    signals: dict[str, float] = field(default_factory=dict)


def _trend(points: tuple[tuple[float, float], ...], now: float, horizon: float) -> float | None:
    """The least-squares line through ``points`` at ``now + horizon``, less the residuals' standard
    deviation (a rise within the noise projects nothing); None below 3 points or for no rise."""
    if len(points) < 3:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mw = sum(w for _, w in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var <= 0:
        return None
    slope = sum((t - mt) * (w - mw) for t, w in points) / var
    if slope <= 0:
        return None
    noise = math.sqrt(sum((w - mw - slope * (t - mt)) ** 2 for t, w in points) / (n - 2)) if n > 2 else 0.0
    return mw + slope * (now + horizon - mt) - noise


def _trim(u: float, delay: float | None, c: FlowConfig) -> tuple[float, str]:
    if delay is None:
        return u, f"utilisation target {u:.2f} (no latency reading: unchanged)"
    if delay > c.queue_delay_budget_s:
        new = max(c.min_utilization, u - c.trim_step)
        return new, (f"queueing delay {delay:.3g} s > budget {c.queue_delay_budget_s:g} s: "
                     f"utilisation target {u:.2f} -> {new:.2f}")
    if delay < c.queue_delay_budget_s / 4:
        new = min(c.max_utilization, u + c.trim_step / 4)
        return new, (f"queueing delay {delay:.3g} s < a quarter of the budget: "
                     f"utilisation target {u:.2f} -> {new:.2f}")
    return u, f"queueing delay {delay:.3g} s within budget: utilisation target {u:.2f}"


def _headroom(state: FlowState, r: FlowReading, now: float,
              c: FlowConfig) -> tuple[int, float | None, str | None]:
    h, since = state.headroom, state.headroom_since
    miss, long = r.miss_share, r.long_miss_share
    grown_recently = since is not None and now - since < c.headroom_interval_s - JITTER_S
    if (miss is not None and long is not None and miss > c.miss_budget and long > c.miss_budget
            and not grown_recently):
        step = min(math.ceil(miss / c.miss_budget), max(1, math.ceil(r.current / 4)))
        return h + step, now, (f"burst headroom: {100 * miss:.3g} % of requests over their objective "
                               f"(long window {100 * long:.3g} %) > {100 * c.miss_budget:g} %: "
                               f"{h} -> {h + step}")
    calm = long is None or long < c.miss_budget / 2
    if h > 0 and calm and (since is None or now - since >= c.headroom_decay_s - JITTER_S):
        return h - 1, now, (f"burst headroom: misses under half the budget for "
                            f"{c.headroom_decay_s:g} s: {h} -> {h - 1}")
    return h, since, (f"burst headroom: {h}" if h else None)


def _clamp(n: int, c: FlowConfig) -> int:
    return max(c.min_replicas, min(c.max_replicas, n))


def _work(prompt: float, generation: float, cap: FlowCapacity) -> float:
    """Replicas at 100 % busy that ``prompt`` and ``generation`` tokens/s keep."""
    return max(0.0, prompt) / cap.prefill_tokens_per_s + max(0.0, generation) / cap.decode_tokens_per_s


def _backlog(r: FlowReading, work: float, state: FlowState,
             c: FlowConfig) -> tuple[float, float | None, str | None]:
    """Extra replicas that drain the waiting requests over ``drain_s``, the work per request."""
    per_req = state.work_per_request
    if r.requests_per_s is not None and r.requests_per_s > 0 and work > 0:
        per_req = work / r.requests_per_s
    waiting = max(0.0, r.waiting or 0.0)
    if not waiting or per_req is None:
        return 0.0, per_req, None
    backlog = waiting * per_req / c.drain_s
    return backlog, per_req, (f"backlog: {waiting:g} waiting x {per_req:.3g} replica-s each / "
                              f"{c.drain_s:g} s drain = {backlog:.3f} replicas")


def _planned(work: float, history: tuple[tuple[float, float], ...], now: float,
             c: FlowConfig) -> tuple[float, str | None]:
    projected = _trend(history, now, c.horizon_s)
    if projected is None or projected <= work:
        return work, None
    return projected, (f"forecast: trend over {c.trend_window_s:g} s projects {projected:.3f} in "
                       f"{c.horizon_s:g} s (raises only)")


def _burst_floor(r: FlowReading, c: FlowConfig) -> tuple[int, float] | None:
    if r.burst_prompt_tokens_per_s is None or r.burst_generation_tokens_per_s is None:
        return None
    burst = _work(r.burst_prompt_tokens_per_s, r.burst_generation_tokens_per_s, c.capacity)
    return math.ceil(burst / c.burst_utilization - 1e-9), burst


def _direction(need: int, needs: tuple[tuple[float, int], ...], r: FlowReading, state: FlowState,
               c: FlowConfig) -> tuple[int, str | None]:
    """Up at once; down to the largest keep of the down delay, a down delay after the last change."""
    cur, now = r.current, r.now
    if need > cur:
        return need, f"up at once: {cur} -> {need} (starting replicas count as capacity)"
    if need == cur:
        return cur, None
    if state.last_change is not None and now - state.last_change < c.down_delay_s - JITTER_S:
        return cur, f"down held: last change {now - state.last_change:.0f} s ago < {c.down_delay_s:g} s"
    held = min(cur, max(n for _, n in needs))
    if held == cur:
        return cur, (f"down held: the need {need} < {cur}, but {cur} is kept within the down margin "
                     f"({100 * c.down_margin:g} %) of the last {c.down_delay_s:g} s")
    return held, (f"down to the largest keep (the need within the down margin) of the last "
                  f"{c.down_delay_s:g} s: {held}")


def _hold(r: FlowReading, state: FlowState, c: FlowConfig) -> FlowDecision:
    hold = _clamp(state.last if state.last is not None else r.current, c)
    return FlowDecision(hold, replace(state, last=hold),
                        (f"token rates missing: hold {hold} (a partial reading is not acted on)",), held=True)


def decide_flow(reading: FlowReading, config: FlowConfig, state: FlowState) -> FlowDecision:
    """See the module docstring."""
    c, r, now, cur = config, reading, reading.now, reading.current
    if r.prompt_tokens_per_s is None or r.generation_tokens_per_s is None:
        return _hold(r, state, c)
    cap = c.capacity
    work = _work(r.prompt_tokens_per_s, r.generation_tokens_per_s, cap)
    steps: list[str | None] = [
        f"work: {r.prompt_tokens_per_s:.6g} prompt tok/s / {cap.prefill_tokens_per_s:g} + "
        f"{r.generation_tokens_per_s:.6g} generated tok/s / {cap.decode_tokens_per_s:g} = "
        f"{work:.3f} replicas at 100 %"]
    backlog, per_req, why = _backlog(r, work, state, c)
    steps.append(why)
    history = (*(p for p in state.work if p[0] > now - c.trend_window_s + JITTER_S), (now, work))
    planned, why = _planned(work, history, now, c)
    steps.append(why)
    u, why = _trim(state.utilization if state.utilization is not None else c.utilization, r.queue_delay_s, c)
    steps.append(why)
    base = math.ceil(planned / u + backlog - 1e-9)
    steps.append(f"flow need: ceil({planned:.3f} / {u:.2f} + {backlog:.3f}) = {base}")
    # what a scale-down keeps: the same at targets down_margin lower (module docstring, step 6)
    low = 1.0 - c.down_margin
    keep_base = max(base, math.ceil(planned / (u * low) + backlog - 1e-9))
    floor = _burst_floor(r, c)
    if floor is not None and floor[0] > base:
        steps.append(f"burst floor: the lookback's short-range work {floor[1]:.3f} / "
                     f"{c.burst_utilization:g} = {floor[0]} > {base}")
        base = floor[0]
    if floor is not None:
        keep_base = max(keep_base, base, math.ceil(floor[1] / (c.burst_utilization * low) - 1e-9))
    headroom, since, why = _headroom(state, r, now, c)
    if state.utilization is None and c.seed_headroom and cur > base:
        # the first decision over a running fleet: its size is taken as right (bursts it absorbs
        # show in no rate), and what the flow does not explain becomes headroom, forgotten slowly
        headroom, since = cur - base, now
        why = f"burst headroom seeded from the running fleet: {cur} - {base} = {headroom}"
    steps.append(why)
    need = base + headroom
    steps.append(f"need: {base} + {headroom} headroom = {need}")
    keep = max(need, keep_base + headroom)
    needs = (*(p for p in (state.needs or ((now, cur),)) if p[0] > now - c.down_delay_s + JITTER_S),
             (now, keep))
    desired, why = _direction(need, needs, r, state, c)
    steps.append(why)
    final = _clamp(desired, c)
    if final != desired:
        steps.append(f"clamped to [{c.min_replicas}, {c.max_replicas}]: {final}")
    new_state = FlowState(utilization=u, work=history, needs=needs, work_per_request=per_req,
                          last_change=now if final != cur else state.last_change, last=final,
                          headroom=headroom, headroom_since=since)
    signals = {"work": round(work, 4), "backlog": round(backlog, 4), "planned": round(planned, 4),
               "utilization": round(u, 4), "headroom": float(headroom), "need": float(need)}
    return FlowDecision(final, new_state, tuple(x for x in steps if x), signals=signals)
