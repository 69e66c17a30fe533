"""One experiment: a trace, the policies to compare, and the files of the report.

Contract of ``run_experiment(exp, out, progress, plot, jobs)``:

* builds each policy named in ``exp.policies`` (``POLICIES``: ``apa``, ``slo``, ``flow``, ``hpa``,
  ``kpa``, the default set; opt-in: ``oracle``, ``flow-standby``, ``predictive``, apa plus the
  seasonal forecast floor of ``escaler.sim.predictive``, its season ``exp.season_s`` in simulated
  seconds) from the experiment's shared settings — the metric and per-replica ``target`` the
  metric-driven ones scale on (apa, hpa; kpa on concurrency with the same target), the TTFT
  objective the SLO policy sizes for, the profile's capacity and the TTFT/TPOT objectives flow sizes
  on (``escaler.scaling.flow``: its forecast horizon the cold start plus a poll, its down delay two
  cold starts and at least 300 s, its miss budget ``1 - exp.goal`` up to 1 %, its queueing-delay
  budget half the TTFT objective) — and simulates each over the same arrivals and fleet;
* **steady start**: unless ``exp.steady_start`` is False (a given ``--initial-replicas``), every
  policy starts from the same warm fleet, the cheapest fixed fleet meeting ``exp.goal`` over the
  trace's first ``INITIAL_WINDOW_S`` (``escaler.sim.fixed.steady_state_fleet``): a service already
  running at that load; the report's settings say which (``initial_fleet``);
* the **oracle** (opt-in: a foresight heuristic, not a bound — the lower bound row is the yardstick
  — and 7 runs, as long as the default policies together) is calibrated, not guessed:
  ``calibrate_oracle`` bisects its utilization (geometrically, ``ORACLE_STEPS`` runs) for the
  cheapest schedule whose attainment is at least ``exp.goal``;
* two **reference rows** in every report (``references``): the **cheapest fixed fleet** meeting
  ``exp.goal`` (``escaler.sim.fixed.cheapest_fixed``, a sweep) and the **lower bound**
  (``escaler.sim.bound.lower_bound``: no policy meeting the goal costs less); when even the bound
  cannot meet the goal the report says so and prints no ratio; each policy row carries
  ``x_bound``, its replica-hours over the bound's (None then);
* **tuned baselines** (``exp.tune``, ``--tune-baselines``): each of ``TUNED`` (hpa, kpa, apa) is run
  at every target of ``tune_targets`` (fractions of the profile's max batch for the request metrics,
  utilizations for ``kv``), kpa also at every ``KPA_DELAYS_S`` scale-down delay — and, while the
  best run is at the smallest target swept, at half of it (down to 1): a best at the sweep's edge is
  not the baseline at its best — and the row reported is the best: the cheapest run that meets
  ``exp.goal``, else the one with the highest attainment (the cheaper on a tie); its settings are in
  the row (``tuned``) and every point of the sweep in ``<policy>.json``;
* writes, under ``out``: ``<policy>.json`` (the summary, the scale events, the replica count and
  arrival rate per scrape) and ``<policy>.md`` (its table row with the settings), ``summary.json``
  and ``summary.md`` (every policy, the references, the settings, and which escaler policies beat
  or fail to beat the HPA and KPA emulations and the cheapest fixed fleet on cost at equal or
  better attainment), ``flow-decisions.jsonl`` (every flow decision with its steps in words), and
  the plots (``escaler.sim.plots``, the references drawn on them);
* **flow-standby** (opt-in): flow over a fleet with a standby pool (``escaler.sim.serving``); its
  size ``exp.standby``, or swept over ``STANDBY_SWEEP`` (doubling past the top while the best is
  there) and the best reported as for a tuned baseline (``standby`` in the row); its ``x_bound``
  is against the bound where a rise may be a wake (``standby_bound``, ``lower_bound_standby`` in
  the references); **flow-standby-wake** (opt-in) the same, and the router also wakes a sleeper
  between polls when an arriving request's predicted queueing delay is over ``exp.wake_delay()``
  (``default_wake_delay`` unless given; ``escaler.sim.serving``, data-path wake); its row counts
  those ``wakes``;
* **side by side**: every simulation known up front (the references, each policy, each point of a
  sweep's first round, the oracle's calibration as one task) is submitted at once to ``jobs``
  worker processes (``escaler.sim.parallel``), and the results are taken in the order a single
  process makes them, so ``jobs`` changes the wall clock, never a byte of the report; with
  ``jobs`` > 1 progress says each task once, when it is done;
* the JSON is written with sorted keys and rounded numbers: the same trace, seed and settings give
  byte-identical files; returns the summary rows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from escaler.scaling.flow import service_config
from escaler.sim.bound import Bound, lower_bound
from escaler.sim.engine import Policy, Run, SimOptions, simulate
from escaler.sim.fixed import INITIAL_WINDOW_S, FixedResult, cheapest_fixed, steady_state_fleet
from escaler.sim.hpa import HpaPolicy
from escaler.sim.intervals import Comparison, Interval, blocks, compare
from escaler.sim.kpa import KpaPolicy
from escaler.sim.model import ReplicaProfile
from escaler.sim.oracle import MAX_UTILIZATION, OraclePolicy
from escaler.sim.parallel import Workers, shared
from escaler.sim.policies import ApaPolicy, FlowPolicy, SloPolicy, flow_capacity
from escaler.sim.predictive import DAY_S, DEFAULT_SLOTS, PredictivePolicy
from escaler.sim.report import SloTargets, markdown_table, summarize
from escaler.sim.trace import Arrival

__all__ = ["ALL_POLICIES", "ORACLE_STEPS", "POLICIES", "STANDBY_POLICIES", "Experiment", "calibrate_oracle",
           "default_slo_concurrency", "default_target", "default_wake_delay", "run_experiment"]

# the default set: what can be run, not what needs foresight or a standby pool
POLICIES = ("apa", "slo", "flow", "hpa", "kpa")
# every name --policy takes: the default set and the opt-in ones
ALL_POLICIES = (*POLICIES, "oracle", "predictive", "flow-standby", "flow-standby-wake")
# the policies with a standby pool (swept, against the standby bound)
STANDBY_POLICIES = ("flow-standby", "flow-standby-wake")
# flow-standby-wake's default wake trigger (default_wake_delay): a predicted queueing delay over this
# share of the TTFT objective (the flow policy's queueing-delay budget is the same half), or over one
# iteration's prefill budget if that is shorter
WAKE_DELAY_SHARE = 0.5
# the SLO policy's concurrencyPerReplica by default, as a share of the profile's max batch: 28 of a
# batch of 64, the batch less headroom for the TTFT objective (docs/simulator.md shows the sweep)
SLO_CONCURRENCY_SHARE = 28 / 64
# apa's, the HPA's and the KPA's per-replica in-flight target by default, as a share of the max
# batch (32 of 64); --tune-baselines sweeps TUNE_BATCH_FRACTIONS of it instead
TARGET_SHARE = 0.5
# a kv target (a utilization) is not a count
DEFAULT_KV_TARGET = 0.7
# the decision-quality goal for the SLO engine policy: this attainment at this multiple of the
# lower bound's replica-hours
GOAL_ATTAINMENT = 0.99
GOAL_COST_RATIO = 1.2
ESCALER_POLICIES = ("apa", "slo", "flow", *STANDBY_POLICIES)
BASELINES = ("hpa", "kpa")
# bisection steps of the oracle's utilization
ORACLE_STEPS = 7
# what --tune-baselines sweeps
TUNED = ("hpa", "kpa", "apa")
TUNE_BATCH_FRACTIONS = (0.125, 0.25, 0.375, 0.5, 0.75, 1.0)
TUNE_KV = (0.5, 0.7, 0.85, 0.95)
KPA_DELAYS_S = (0.0, 120.0, 300.0)
# the standby pool sizes flow-standby is swept over (doubling past the last while the best is there)
STANDBY_SWEEP = (1, 2, 3, 4, 6, 8)

Progress = Callable[[str], Callable[[int, int], None] | None]
T = TypeVar("T")


@dataclass(frozen=True)
class Experiment:
    arrivals: Sequence[Arrival]
    options: SimOptions = field(default_factory=SimOptions)
    slo: SloTargets = field(default_factory=SloTargets)
    policies: Sequence[str] = POLICIES
    # what apa and the HPA scale on, and the per-replica target (kpa: concurrency per replica);
    # None: default_target of the profile (metric_target())
    metric: str = "inflight"
    target: float | None = None
    # the SLO engine's TTFT percentile
    slo_percentile: float = 90.0
    # the SLO policy's spec.concurrencyPerReplica for spec.inflight; 0 = TTFT only; None:
    # default_slo_concurrency of the profile (concurrency())
    slo_concurrency: int | None = None
    poll_s: float = 30.0
    # the attainment goal: the oracle's calibration, the references and the verdicts
    goal: float = 0.99
    # start every policy from the steady-state fleet (module docstring); False: options.initial_replicas
    steady_start: bool = True
    # KPA's scale-down-delay; sweep the baselines' targets (module docstring)
    kpa_scale_down_delay_s: float = 0.0
    tune: bool = False
    # the predictive policy's season (simulated seconds: a day / --speedup) and its slots per season
    season_s: float = DAY_S
    predict_slots: int = DEFAULT_SLOTS
    # flow-standby's pool (replicas kept loaded and asleep); None: swept (standby_sweep)
    standby: int | None = None
    # flow-standby-wake's trigger, seconds of predicted queueing delay; None: WAKE_DELAY_SHARE x TTFT
    wake_delay_s: float | None = None
    # recorded in the report
    settings: dict[str, Any] = field(default_factory=dict)

    def metric_target(self) -> float:
        """The per-replica target of ``metric``: the given one, or the profile's default."""
        return self.target if self.target is not None else default_target(self.metric, self.options.profile)

    def wake_delay(self) -> float:
        """flow-standby-wake's trigger: the given one, or ``default_wake_delay``."""
        if self.wake_delay_s is not None:
            return self.wake_delay_s
        return default_wake_delay(self.options.profile, self.slo.ttft_s)

    def concurrency(self) -> int:
        """The SLO policy's concurrencyPerReplica: the given one, or the profile's default."""
        if self.slo_concurrency is not None:
            return self.slo_concurrency
        return default_slo_concurrency(self.options.profile)


def build(name: str, exp: Experiment) -> Policy:
    o = exp.options
    if name == "apa":
        return ApaPolicy(exp.metric, exp.metric_target(), o.min_replicas, o.max_replicas, poll_s=exp.poll_s)
    if name == "slo":
        return SloPolicy(exp.slo.ttft_s, o.min_replicas, o.max_replicas, percentile=exp.slo_percentile,
                         concurrency_per_replica=exp.concurrency(),
                         poll_s=exp.poll_s)
    if name == "flow":
        config = service_config(flow_capacity(o.profile), cold_start_s=o.profile.cold_start_s,
                                poll_s=exp.poll_s, min_replicas=o.min_replicas, max_replicas=o.max_replicas,
                                ttft_s=exp.slo.ttft_s, miss_budget=min(0.01, 1.0 - exp.goal) or 0.01)
        # the burst floor remembers a burst as long as a replica is kept after its need: a longer
        # memory holds the peak's fleet after the load falls (docs/simulator.md, flow)
        return FlowPolicy(config, ttft_target_s=exp.slo.ttft_s, tpot_target_s=exp.slo.tpot_s,
                          poll_s=exp.poll_s, burst_lookback_s=config.down_delay_s)
    if name == "flow-standby":
        flow = build("flow", exp)
        assert isinstance(flow, FlowPolicy)
        return replace(flow, name=name, standby=exp.standby if exp.standby is not None else STANDBY_SWEEP[0])
    if name == "flow-standby-wake":
        standby = build("flow-standby", exp)
        assert isinstance(standby, FlowPolicy)
        return replace(standby, name=name, wake_delay_s=exp.wake_delay())
    if name == "predictive":
        return PredictivePolicy(
            ApaPolicy(exp.metric, exp.metric_target(), o.min_replicas, o.max_replicas, poll_s=exp.poll_s),
            exp.season_s, exp.predict_slots, horizon_s=o.profile.cold_start_s + exp.poll_s)
    if name == "hpa":
        return HpaPolicy(exp.metric, exp.metric_target())
    if name == "kpa":
        return KpaPolicy(exp.metric_target(), scale_down_delay_s=exp.kpa_scale_down_delay_s)
    raise ValueError(f"policy: must be one of {', '.join(ALL_POLICIES)}, got {name!r}")


def calibrate_oracle(exp: Experiment, progress: Progress | None = None) -> tuple[Run, float]:
    """The cheapest oracle run meeting ``exp.goal`` (or the fullest-headroom one when none
    does), and its utilization."""
    lo, hi = 0.05, MAX_UTILIZATION
    best: tuple[Run, float] | None = None
    for step in range(ORACLE_STEPS):
        u = hi if step == 0 else math.sqrt(lo * hi)  # bisect in log space: ~3 % steps at the end
        cb = progress(f"oracle u={u:.3f}") if progress is not None else None
        oracle = OraclePolicy(exp.arrivals, exp.options.profile, utilization=u)
        run = simulate(exp.arrivals, oracle, exp.options, cb)
        ok = (summarize(run, exp.slo)["attainment"] or 0.0) >= exp.goal
        if ok:
            if best is None or run.replica_seconds < best[0].replica_seconds:
                best = (run, u)
            if step == 0:
                break  # the fullest replicas already meet the goal
            lo = u
        else:
            hi = u
    if best is None:
        low = simulate(exp.arrivals, OraclePolicy(exp.arrivals, exp.options.profile, utilization=lo),
                       exp.options, progress(f"oracle u={lo:.3f}") if progress is not None else None)
        best = (low, lo)
    return best


def default_slo_concurrency(profile: ReplicaProfile) -> int:
    """The SLO policy's ``concurrencyPerReplica`` when none is given: ``SLO_CONCURRENCY_SHARE`` of the
    profile's max batch (at least 1)."""
    return max(1, round(SLO_CONCURRENCY_SHARE * profile.max_batch))


def default_wake_delay(profile: ReplicaProfile, ttft_s: float) -> float:
    """The predicted queueing delay (s) at which flow-standby-wake's router wakes a sleeper when none
    is given: ``WAKE_DELAY_SHARE`` of the TTFT objective (past it a first token is at risk), or one
    iteration's token budget of prefill (``max_batched_tokens / prefill_tokens_per_s``) if shorter
    (past it every decode on the replica shares more than one iteration with a full prefill chunk:
    time per output token is at risk; 0.33 s on the default profile, 0.91 s on the 70 B one)."""
    delay = WAKE_DELAY_SHARE * ttft_s
    if profile.max_batched_tokens:
        delay = min(delay, profile.max_batched_tokens / profile.prefill_tokens_per_s)
    return delay


def default_target(metric: str, profile: ReplicaProfile) -> float:
    """The baselines' per-replica target of ``metric`` when none is given: ``TARGET_SHARE`` of the
    profile's max batch for a count of requests, ``DEFAULT_KV_TARGET`` for ``kv``."""
    if metric == "kv":
        return DEFAULT_KV_TARGET
    return float(max(1, round(TARGET_SHARE * profile.max_batch)))


def tune_targets(exp: Experiment) -> tuple[float, ...]:
    """The targets a tuned baseline is swept over (module docstring)."""
    if exp.metric == "kv":
        return TUNE_KV
    b = exp.options.profile.max_batch
    return tuple(sorted({max(1.0, round(f * b)) for f in TUNE_BATCH_FRACTIONS}))


def _better(a: dict[str, Any], b: dict[str, Any], goal: float) -> bool:
    """Whether summary ``a`` beats ``b``: meeting the goal, then cheaper; else more attainment."""
    am, bm = (a["attainment"] or 0) >= goal, (b["attainment"] or 0) >= goal
    if am != bm:
        return am
    if am:
        return bool(a["replica_hours"] < b["replica_hours"])
    if a["attainment"] != b["attainment"]:
        return bool((a["attainment"] or 0) > (b["attainment"] or 0))
    return bool(a["replica_hours"] < b["replica_hours"])


Result = tuple[Run, dict[str, Any], list[dict[str, Any]] | None]
# a sweep's point: its setting (reported) and the experiment's fields it changes
Point = tuple[dict[str, Any], dict[str, Any]]


def _policy_task(name: str, overrides: dict[str, Any], cb: Callable[[int, int], None] | None) -> Result:
    """One run of policy ``name`` on the shared experiment with ``overrides`` (a worker's task,
    ``escaler.sim.parallel``): the run, its summary, and a flow policy's trail (else None)."""
    exp = replace(shared(), **overrides)
    policy = build(name, exp)
    run = simulate(exp.arrivals, policy, exp.options, cb)
    row = summarize(run, exp.slo)
    if isinstance(policy, PredictivePolicy):  # polls where the forecast raised the count
        row["forecast_floor_polls"] = policy.floors
    if isinstance(policy, FlowPolicy) and policy.wake_delay_s is not None:  # the router's wakes
        row["wakes"] = run.wakes
    return run, row, list(policy.trail) if isinstance(policy, FlowPolicy) else None


def _oracle_task(cb: None) -> tuple[Run, float]:
    return calibrate_oracle(shared())


def _fixed_task(progress: Progress | None) -> FixedResult:
    exp = shared()
    return cheapest_fixed(exp.arrivals, exp.options, exp.slo, exp.goal, progress)


def _bounds_task() -> tuple[Bound, Bound | None]:
    return bounds(shared())


def _submit(workers: Workers, progress: Progress | None, label: str, fn: Callable[..., T],
            *args: Any) -> Future[T]:
    """``fn(*args, cb)`` on ``workers``: ``cb`` the progress of ``label`` when it runs here, else None
    and a final progress line once the worker is done."""
    if not workers.parallel:
        return workers.submit(fn, *args, progress(label) if progress is not None else None)
    future = workers.submit(fn, *args, None)
    if progress is not None:
        future.add_done_callback(lambda _: (update := progress(label)) and update(1, 1))
    return future


class _Sweep:
    """One policy's sweep on the workers: ``first`` points (setting, overrides) submitted at once;
    ``finish`` takes their results in order, keeps the best (``_better``), asks ``more(sweep, best
    row)`` for another round, and returns the best result and every point."""

    def __init__(self, name: str, exp: Experiment, workers: Workers, progress: Progress | None,
                 first: list[Point], more: Callable[[list[dict[str, Any]], dict[str, Any]], list[Point]],
                 tag: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]) -> None:
        self.name, self.exp, self.workers, self.progress = name, exp, workers, progress
        self.more, self.tag = more, tag
        self.pending = [self._submit(setting, overrides) for setting, overrides in first]

    def _submit(self, setting: dict[str, Any],
                overrides: dict[str, Any]) -> tuple[dict[str, Any], Future[Result]]:
        label = self.name + "".join(f" {k}={v:g}" for k, v in setting.items())
        return setting, _submit(self.workers, self.progress, label, _policy_task, self.name, overrides)

    def finish(self) -> tuple[Result, list[dict[str, Any]]]:
        best: Result | None = None
        sweep: list[dict[str, Any]] = []
        while self.pending:
            for setting, future in self.pending:
                run, row, trail = future.result()
                row = self.tag(row, setting)
                sweep.append({**setting, "attainment": row["attainment"],
                              "replica_hours": row["replica_hours"]})
                if best is None or _better(row, best[1], self.exp.goal):
                    best = (run, row, trail)
            assert best is not None
            self.pending = [self._submit(s, o) for s, o in self.more(sweep, best[1])]
        assert best is not None
        return best, sweep


def _start_tuned(name: str, exp: Experiment, workers: Workers, progress: Progress | None) -> _Sweep:
    delays = KPA_DELAYS_S if name == "kpa" else (exp.kpa_scale_down_delay_s,)

    def points(targets: list[float]) -> list[Point]:
        return [({"target": t, **({"scale_down_delay_s": d} if name == "kpa" else {})},
                 {"target": t, "kpa_scale_down_delay_s": d}) for t in targets for d in delays]

    def more(sweep: list[dict[str, Any]], best: dict[str, Any]) -> list[Point]:
        smaller = _below_the_sweep(exp, sweep, best)
        return points([smaller]) if smaller is not None else []

    return _Sweep(name, exp, workers, progress, points(list(tune_targets(exp))), more,
                  lambda row, setting: {**row, "tuned": setting})


def _start_standby(name: str, exp: Experiment, workers: Workers, progress: Progress | None) -> _Sweep:
    def point(m: int) -> Point:
        return {"standby": m}, {"standby": m}

    def more(sweep: list[dict[str, Any]], best: dict[str, Any]) -> list[Point]:
        top = max(p["standby"] for p in sweep)
        return [point(2 * top)] if best["standby"] == top and 2 * top <= exp.options.max_replicas else []

    return _Sweep(name, exp, workers, progress, [point(m) for m in STANDBY_SWEEP], more,
                  lambda row, setting: {**row, **setting})


def tuned(name: str, exp: Experiment,
          progress: Progress | None = None) -> tuple[Run, dict[str, Any], list[dict[str, Any]]]:
    """The best run of baseline ``name`` over its sweep, its summary (with ``tuned``), every point."""
    with Workers(1, exp) as workers:
        (run, row, _), sweep = _start_tuned(name, exp, workers, progress).finish()
    return run, row, sweep


def _below_the_sweep(exp: Experiment, sweep: list[dict[str, Any]],
                     best: dict[str, Any] | None) -> float | None:
    """Half the smallest target swept while the best run is at it (the optimum may lie below the
    sweep: a tuned row at the sweep's edge is not the baseline at its best); None otherwise, or at 1,
    or for ``kv`` (a utilization, its range already spans the useful one)."""
    if exp.metric == "kv" or best is None:
        return None
    smallest = min(p["target"] for p in sweep)
    if best["tuned"]["target"] != smallest or smallest <= 1:
        return None
    return float(max(1, math.floor(smallest / 2)))


def _dump(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, sort_keys=True, indent=1) + "\n")


def _timeline(run: Run) -> dict[str, list[float | int]]:
    return {"t": [s.t for s in run.scrapes], "replicas": [s.replicas for s in run.scrapes],
            "serving": [s.serving for s in run.scrapes], "arrivals": [s.arrivals for s in run.scrapes]}


def verdicts(rows: Sequence[dict[str, Any]], refs: dict[str, Any] | None = None,
             comparisons: Mapping[tuple[str, str], Comparison] | None = None) -> list[str]:
    """Plain sentences: each escaler policy against each baseline and the cheapest fixed fleet, on
    cost at attainment, and the SLO policy against the goal (``GOAL_ATTAINMENT`` at at most
    ``GOAL_COST_RATIO`` x the lower bound). With ``comparisons`` (``escaler.sim.intervals``, keyed
    ``(mine, other)``, the fixed fleet as ``"fixed"``) a verdict is said only where a paired
    interval separates, and both intervals are quoted; a policy cheaper by its interval while both
    meet the goal (``refs``' goal) beats, whatever the surplus attainment of the dearer one."""
    by = {r["policy"]: r for r in rows}
    goal = refs["goal"] if refs is not None else None
    out = []
    for mine in ESCALER_POLICIES:
        for base in BASELINES:
            if mine not in by or base not in by:
                continue
            m, b = by[mine], by[base]
            c = (comparisons or {}).get((mine, base))
            if c is not None:
                out.append(_interval_verdict(mine, base, m, b, c, goal))
                continue
            cheaper = m["replica_hours"] <= b["replica_hours"]
            better = (m["attainment"] or 0) >= (b["attainment"] or 0)
            if cheaper and better:
                out.append(f"{mine} beats {base}: {m['replica_hours']} vs {b['replica_hours']} replica-hours "
                           f"at {100 * m['attainment']:.2f} % vs {100 * b['attainment']:.2f} % attainment")
            else:
                out.append(f"{mine} does NOT beat {base}: {m['replica_hours']} vs {b['replica_hours']} "
                           f"replica-hours at {100 * (m['attainment'] or 0):.2f} % vs "
                           f"{100 * (b['attainment'] or 0):.2f} % attainment")
    if "predictive" in by and "apa" in by:
        out.append(_predictive_verdict(by["predictive"], by["apa"]))
    if refs is not None:
        out.extend(_reference_verdicts(by, refs, comparisons or {}))
    return out


def _interval_verdict(mine: str, other: str, m: dict[str, Any], o: dict[str, Any], c: Comparison,
                      goal: float | None = None) -> str:
    figures = (f"{m['replica_hours']} vs {o['replica_hours']} replica-hours (difference {c.cost}) at "
               f"{100 * (m['attainment'] or 0):.2f} % vs {100 * (o['attainment'] or 0):.2f} % attainment "
               f"(difference {_pp(c.attainment)} pp; 95 % paired block bootstrap)")
    v = c.verdict
    if v is None:
        return f"no verdict on {mine} vs {other}, both intervals straddle 0: {figures}"
    if v == "cheaper":
        return f"{mine} beats {other}, cheaper at equal or better attainment: {figures}"
    both_meet = goal is not None and min(m["attainment"] or 0, o["attainment"] or 0) >= goal
    if v == "worse" and c.cost.hi < 0 and both_meet:
        return (f"{mine} beats {other}, cheaper with both at or above the {100 * (goal or 0):g} % goal: "
                f"{figures}")
    if v == "better":
        return (f"{mine} beats {other}, better attainment at a cost the intervals cannot tell apart: "
                f"{figures}")
    if c.cost.lo > 0 and c.attainment.lo > 0:
        # dearer and better, both separated: a trade, not a ranking — unless the goal decides it
        mine_meets = goal is not None and (m["attainment"] or 0) >= goal > (o["attainment"] or 0)
        if mine_meets:
            return (f"{mine} meets the {100 * (goal or 0):g} % goal that {other} misses, at a higher "
                    f"cost: {figures}")
        return f"no verdict on {mine} vs {other}, dearer at better attainment (a trade): {figures}"
    return f"{mine} does NOT beat {other}: {figures}"


def _pp(i: Interval) -> str:
    return f"[{100 * i.lo:.2f}, {100 * i.hi:.2f}]"


def _reference_verdicts(by: dict[str, dict[str, Any]], refs: dict[str, Any],
                        comparisons: Mapping[tuple[str, str], Comparison]) -> list[str]:
    goal, fixed, bound = refs["goal"], refs["cheapest_fixed"], refs["lower_bound"]
    out = []
    for mine in (p for p in ESCALER_POLICIES if p in by):
        m = by[mine]
        att = m["attainment"] or 0.0
        if fixed["n"] is None:
            out.append(f"{mine} vs the cheapest fixed fleet: no fixed fleet up to max_replicas reaches "
                       f"{100 * goal:g} %")
            continue
        c = comparisons.get((mine, "fixed"))
        if c is not None:
            name = f"the cheapest fixed fleet ({fixed['policy']})"
            said = _interval_verdict(mine, name, m, fixed, c, goal)
            if att < goal and c.beats:  # cheaper, but short of the goal the fixed fleet meets
                said = f"{mine} does NOT beat {name}, it misses the goal: " + said.split(": ", 1)[1]
            out.append(f"{said}; the goal is {100 * goal:g} %")
            continue
        wins = att >= goal and m["replica_hours"] <= fixed["replica_hours"]
        verb = "beats" if wins else "does NOT beat"
        out.append(f"{mine} {verb} the cheapest fixed fleet ({fixed['policy']}) "
                   f"at the {100 * goal:g} % goal: {m['replica_hours']} vs {fixed['replica_hours']} "
                   f"replica-hours at {100 * att:.2f} % vs {100 * (fixed['attainment'] or 0):.2f} %")
    if not bound["reachable"]:
        out.append(f"the {100 * goal:g} % goal is out of reach even for the lower bound (max_replicas "
                   "and the cold start allow no schedule that meets it): no policy can meet it, no ratio")
    elif "slo" in by:
        m = by["slo"]
        ratio = m["replica_hours"] / bound["replica_hours"] if bound["replica_hours"] else math.inf
        met = (m["attainment"] or 0) >= GOAL_ATTAINMENT and ratio <= GOAL_COST_RATIO + 1e-9
        out.append(f"slo {'meets' if met else 'does NOT meet'} the goal (>= {100 * GOAL_ATTAINMENT:g} % "
                   f"attainment at <= {GOAL_COST_RATIO:g}x the lower bound's replica-hours): "
                   f"{100 * (m['attainment'] or 0):.2f} % at {ratio:.2f}x")
    return out


def _predictive_verdict(p: dict[str, Any], r: dict[str, Any]) -> str:
    """Issue 16's rule: predictive ships only if it wins on attainment at equal (or lower) cost."""
    pa, ra = p["attainment"] or 0.0, r["attainment"] or 0.0
    wins = pa > ra and p["replica_hours"] <= r["replica_hours"]
    return (f"predictive {'wins over' if wins else 'does NOT win over'} apa (higher attainment at equal or "
            f"lower cost): {100 * pa:.2f} % vs {100 * ra:.2f} % attainment at {p['replica_hours']} vs "
            f"{r['replica_hours']} replica-hours")


def initial_fleet(exp: Experiment) -> Experiment:
    """``exp`` with the fleet every policy starts from (module docstring: steady start)."""
    if not exp.steady_start:
        return replace(exp, settings={**exp.settings, "initial_fleet": "given (--initial-replicas)"})
    n = steady_state_fleet(exp.arrivals, exp.options, exp.slo, exp.goal)
    n = max(exp.options.min_replicas, min(n, exp.options.max_replicas))
    note = (f"steady state: the cheapest fixed fleet meeting {100 * exp.goal:g} % over the first "
            f"{INITIAL_WINDOW_S:g} s, warm")
    return replace(exp, options=replace(exp.options, initial_replicas=n),
                   settings={**exp.settings, "initial_fleet": note})


def _bound_row(bound: Bound) -> dict[str, Any]:
    return {"policy": "lower bound", "reachable": bound.reachable,
            "replica_hours": (None if bound.replica_hours is None else float(f"{bound.replica_hours:.6g}")),
            "mean_replicas": None if bound.mean_replicas is None else round(bound.mean_replicas, 3),
            "may_fail": bound.may_fail, "bucket_s": bound.bucket_s}


def standby_bound(exp: Experiment) -> Bound:
    """The lower bound for a policy with a standby tier: a rise may be a wake (``escaler.sim.bound``)."""
    o = exp.options
    return lower_bound(exp.arrivals, o.profile, ttft_s=exp.slo.ttft_s, tpot_s=exp.slo.tpot_s, goal=exp.goal,
                       initial_replicas=o.initial_replicas, max_replicas=o.max_replicas,
                       min_replicas=o.min_replicas, startup_s=min(o.wake_s, o.profile.min_startup_s))


def bounds(exp: Experiment) -> tuple[Bound, Bound | None]:
    """The lower bound, and with a standby policy among the policies the bound with a standby tier."""
    o = exp.options
    bound = lower_bound(exp.arrivals, o.profile, ttft_s=exp.slo.ttft_s, tpot_s=exp.slo.tpot_s, goal=exp.goal,
                        initial_replicas=o.initial_replicas, max_replicas=o.max_replicas,
                        min_replicas=o.min_replicas)
    return bound, standby_bound(exp) if any(p in exp.policies for p in STANDBY_POLICIES) else None


def reference_rows(exp: Experiment, fixed: FixedResult, bound: Bound,
                   standby: Bound | None) -> dict[str, Any]:
    """The two reference rows (module docstring) as one JSON-ready mapping; with a standby bound also
    ``lower_bound_standby``."""
    fixed_row = {**summarize(fixed.run, exp.slo), "n": fixed.n,
                 "tried": {str(n): a for n, a in sorted(fixed.tried.items())},
                 "stopped_early": sorted(fixed.stopped)}
    refs = {"goal": exp.goal, "cheapest_fixed": fixed_row, "lower_bound": _bound_row(bound)}
    if standby is not None:
        refs["lower_bound_standby"] = {**_bound_row(standby), "wake_s": exp.options.wake_s,
                                       "standby_cost": exp.options.standby_cost}
    return refs


def references(exp: Experiment,
               progress: Progress | None = None) -> tuple[dict[str, Any], FixedResult, Bound, Bound | None]:
    """``reference_rows`` and what they came from: the cheapest fixed fleet, the bounds."""
    fixed = cheapest_fixed(exp.arrivals, exp.options, exp.slo, exp.goal, progress)
    bound, standby = bounds(exp)
    return reference_rows(exp, fixed, bound, standby), fixed, bound, standby


def _with_ratio(row: dict[str, Any], bound: Bound) -> dict[str, Any]:
    rh = bound.replica_hours
    return {**row, "x_bound": round(row["replica_hours"] / rh, 3) if rh else None}


def _references_md(refs: dict[str, Any]) -> str:
    fixed, bound = refs["cheapest_fixed"], refs["lower_bound"]
    goal = f"{100 * refs['goal']:g} %"
    lines = [f"References at the {goal} goal:", ""]
    if fixed["n"] is None:
        lines.append(f"- cheapest fixed fleet: none up to max_replicas reaches {goal} (at the largest: "
                     f"{100 * (fixed['attainment'] or 0):.2f} %, {fixed['replica_hours']} replica-hours)")
    else:
        att = 100 * (fixed["attainment"] or 0)
        lines.append(f"- cheapest fixed fleet: {fixed['n']} replicas, {att:.2f} % "
                     f"at {fixed['replica_hours']} replica-hours")
    if bound["reachable"]:
        lines.append(f"- lower bound (no policy meeting {goal} costs less): {bound['replica_hours']} "
                     f"replica-hours, {bound['mean_replicas']} replicas serving on average")
    else:
        lines.append(f"- lower bound: {goal} is out of reach for any policy with these settings (no ratio)")
    standby = refs.get("lower_bound_standby")
    if standby is not None and standby["reachable"]:
        lines.append(f"- lower bound with a standby tier (wake {standby['wake_s']:g} s, asleep at "
                     f"{100 * standby['standby_cost']:g} % of the price; the standby policies' x bound): "
                     f"{standby['replica_hours']} replica-hours")
    elif standby is not None:
        lines.append(f"- lower bound with a standby tier: {goal} is out of reach (no ratio)")
    return "\n".join(lines) + "\n"


def run_experiment(exp: Experiment, out: Path, progress: Progress | None = None,
                   plot: bool = True, jobs: int = 1) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    exp = initial_fleet(exp)
    with Workers(jobs, exp) as workers:
        # everything known up front is submitted at once, so every worker has work; the longest
        # first (the oracle's calibration, then the fixed-fleet sweep: runs one after the other)
        started: dict[str, Any] = {}
        if "oracle" in exp.policies:
            started["oracle"] = _submit(workers, progress, "oracle", _oracle_task)
        fixed_f = workers.submit(_fixed_task, None if workers.parallel else progress)
        bounds_f = workers.submit(_bounds_task)
        for name in exp.policies:
            if name == "oracle":
                continue
            elif exp.tune and name in TUNED:
                started[name] = _start_tuned(name, exp, workers, progress)
            elif name in STANDBY_POLICIES and exp.standby is None:
                started[name] = _start_standby(name, exp, workers, progress)
            else:
                started[name] = _submit(workers, progress, name, _policy_task, name, {})
        fixed = fixed_f.result()
        bound, standby_ref = bounds_f.result()
        refs = reference_rows(exp, fixed, bound, standby_ref)
        rows: list[dict[str, Any]] = []
        runs: dict[str, Run] = {}
        for name in exp.policies:
            sweep: list[dict[str, Any]] = []
            job = started.pop(name)
            trail: list[dict[str, Any]] | None = None
            if name == "oracle":
                run, u = job.result()
                row = {**summarize(run, exp.slo), "oracle_utilization": round(u, 4)}
            elif isinstance(job, _Sweep):
                (run, row, trail), sweep = job.finish()
            else:
                run, row, trail = job.result()
                if name in STANDBY_POLICIES:
                    row["standby"] = exp.standby
            if trail is not None:  # every flow decision in words, as explain would give it
                (out / f"{name}-decisions.jsonl").write_text(
                    "".join(json.dumps(d, sort_keys=True) + "\n" for d in trail))
            ref = standby_ref if name in STANDBY_POLICIES and standby_ref is not None else bound
            row = _with_ratio(row, ref)
            rows.append(row)
            runs[name] = run
            _dump(out / f"{name}.json", {"summary": row, "scale_events": [list(e) for e in run.scale_events],
                                         "timeline": _timeline(run), **({"sweep": sweep} if sweep else {})})
            (out / f"{name}.md").write_text(f"# {name}\n\n{_settings_md(exp)}\n{markdown_table([row])}")
    comparisons = compare_runs(runs, fixed.run if fixed.n is not None else None, exp.slo)
    said = verdicts(rows, refs, comparisons)
    _dump(out / "summary.json", {"settings": _settings(exp), "policies": rows, "references": refs,
                                 "verdicts": said, "intervals": _intervals_json(comparisons)})
    (out / "summary.md").write_text(
        "# Simulation summary\n\n" + _settings_md(exp) + "\n" + markdown_table(rows) + "\n"
        + _references_md(refs) + "\n" + "".join(f"- {v}\n" for v in said))
    if plot:
        from escaler.sim.plots import write_plots  # matplotlib is imported only when plotting
        lines = {} if fixed.n is None else {"cheapest fixed fleet": float(fixed.n)}
        if bound.mean_replicas is not None:
            lines["lower bound, mean serving"] = round(bound.mean_replicas, 2)
        write_plots(runs, exp.slo.ttft_s, out, references=lines)
    return rows


def _intervals_json(comparisons: Mapping[tuple[str, str], Comparison]) -> list[dict[str, Any]]:
    def r(i: Interval) -> list[float]:
        return [float(f"{i.lo:.6g}"), float(f"{i.hi:.6g}")]
    return [{"policy": a, "against": b, "replica_hours_difference": r(c.cost),
             "attainment_difference": r(c.attainment), "verdict": c.verdict}
            for (a, b), c in sorted(comparisons.items())]


def compare_runs(runs: Mapping[str, Run], fixed: Run | None,
                 slo: SloTargets) -> dict[tuple[str, str], Comparison]:
    """Each escaler policy run against each baseline run and the cheapest fixed fleet's run: the
    paired block-bootstrap intervals of ``escaler.sim.intervals``."""
    cut = {name: blocks(run, slo) for name, run in runs.items()}
    others = {b: cut[b] for b in BASELINES if b in cut}
    if fixed is not None:
        others["fixed"] = blocks(fixed, slo)
    return {(mine, other): compare(cut[mine], theirs)
            for mine in ESCALER_POLICIES if mine in cut for other, theirs in others.items()}


def _settings(exp: Experiment) -> dict[str, Any]:
    o = exp.options
    return {**exp.settings, "requests": len(exp.arrivals), "metric": exp.metric,
            "target": exp.metric_target(), "poll_s": exp.poll_s, "ttft_slo_s": exp.slo.ttft_s,
            "tpot_slo_s": exp.slo.tpot_s,
            "slo_percentile": exp.slo_percentile, "slo_concurrency": exp.concurrency(),
            "goal": exp.goal, "kpa_scale_down_delay_s": exp.kpa_scale_down_delay_s,
            "tuned_baselines": list(TUNED) if exp.tune else [],
            **({"season_s": exp.season_s, "predict_slots": exp.predict_slots}
               if "predictive" in exp.policies else {}),
            **({"wake_s": o.wake_s, "standby_cost": o.standby_cost}
               if any(p in exp.policies for p in STANDBY_POLICIES) else {}),
            **({"wake_delay_s": round(exp.wake_delay(), 4)} if "flow-standby-wake" in exp.policies else {}),
            "min_replicas": o.min_replicas, "max_replicas": o.max_replicas,
            "initial_replicas": o.initial_replicas, "profile": asdict(o.profile)}


def _settings_md(exp: Experiment) -> str:
    s = _settings(exp)
    prof = s.pop("profile")
    return ("Settings: " + ", ".join(f"`{k}={v}`" for k, v in s.items()) + "\n\nReplica profile: "
            + ", ".join(f"`{k}={v}`" for k, v in prof.items()) + "\n")


