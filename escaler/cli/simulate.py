"""``escaler simulate``: replay a traffic trace through scaling policies and write a report.

``python -m escaler simulate [--trace FILE] --policy apa,slo,hpa,kpa,oracle --out DIR``. Without
``--trace`` the Azure conversation trace shipped in the package is used. Every flag is documented
in ``--help``; the model and the policies in ``docs/simulator.md``. Exit codes: 0 the report was
written; 2 a usage error or an unusable input (the message names the file and line, or the flag
and its rule); 3 the simulator's dependencies are not installed (``pip install 'escaler[sim]'``:
scipy, and matplotlib for the plots — the image and a bare ``pip install escaler`` leave them out).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from escaler.cli import extras
from escaler.scaling.predict import MAX_SLOTS
from escaler.sim.engine import SimOptions
from escaler.sim.model import DEFAULT_PROFILE, PROFILES, ProfileError, load_profile
from escaler.sim.parallel import MAX_DEFAULT_JOBS, default_jobs
from escaler.sim.predictive import DEFAULT_SLOTS, season_for
from escaler.sim.progress import MODES as PROGRESS_MODES
from escaler.sim.progress import reporter
from escaler.sim.report import SloTargets, markdown_table
from escaler.sim.runner import (
    ALL_POLICIES,
    POLICIES,
    Experiment,
    run_experiment,
)
from escaler.sim.signals import METRICS
from escaler.sim.trace import (
    SHIPPED_TRACES,
    TIME_UNITS,
    TraceError,
    load_trace,
    resolve_trace,
    shipped_trace_path,
)

__all__ = ["add_parser", "run"]


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a number, got {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return v


def _nonneg(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a number, got {text!r}") from None
    if not (v >= 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return v


def _jobs(text: str) -> int:
    v = _count(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return v


def _share(text: str) -> float:
    v = _nonneg(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"must be a share between 0 and 1, got {text!r}")
    return v


def _count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a whole number, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return v


def _policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in ALL_POLICIES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"want a comma list of {', '.join(ALL_POLICIES)}, got {text!r}")
    return list(dict.fromkeys(names))


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> Callable[[argparse.Namespace], int]:
    p = sub.add_parser(
        "simulate",
        help="replay a traffic trace through scaling policies and report SLO attainment and cost",
        description="A discrete-event simulation of an LLM service under a traffic trace, driving "
        "escaler's own scaling code (apa, the SLO engine) next to emulations of the Kubernetes HPA "
        "and Knative KPA (and, opt-in, a perfect-foresight oracle). Writes JSON, Markdown and PNG plots.",
    )
    t = p.add_argument_group("trace")
    t.add_argument("--trace", metavar="FILE", default=None,
                   help=f"a shipped trace by name ({', '.join(SHIPPED_TRACES)}: the Azure conversation "
                        "and code traces, the ServeGen rate curve), or a file: Azure LLM inference "
                        "2023/2024 CSV, BurstGPT CSV, Mooncake JSONL (timestamp, "
                        "input_length, output_length, hash_ids), generic CSV/JSONL (arrival_s, "
                        "prompt_tokens, output_tokens) or a rate curve CSV (model, window_start_s, "
                        "req_per_min); default: the shipped Azure conversation trace")
    t.add_argument("--time-unit", choices=TIME_UNITS, default=None,
                   help="unit of a per-request trace's arrival times (default: the format's: seconds, "
                        "milliseconds for Mooncake; not for Azure, whose timestamps are dates). Given, it "
                        "also accepts a trace whose span or rate looks implausible in that unit")
    t.add_argument("--drop-failed", action="store_true",
                   help="drop BurstGPT's failed requests (Response tokens 0) instead of refusing the trace")
    t.add_argument("--model", default=None, help="the curve of a rate-curve file that holds several")
    t.add_argument("--lengths", metavar="FILE", default=None,
                   help="per-request trace (a file, or a shipped trace's name) whose token lengths a "
                        "rate curve's arrivals sample "
                        "(default: the shipped Azure conversation trace)")
    t.add_argument("--scale", type=_positive, default=1.0, help="multiply the request rate (default: 1)")
    t.add_argument("--speedup", type=_positive, default=1.0,
                   help="divide every arrival time: 24 replays a day in an hour (default: 1)")
    t.add_argument("--duration", type=_positive, default=None,
                   help="keep the first N seconds (after --speedup; default: all)")
    t.add_argument("--seed", type=int, default=0,
                   help="seed of every random draw: the trace's, the replicas' cold starts (default: 0)")
    s = p.add_argument_group("policies")
    s.add_argument("--policy", type=_policies, default=list(POLICIES),
                   help=f"comma list of {', '.join(ALL_POLICIES)} (default: {','.join(POLICIES)}; "
                        "predictive = apa plus a seasonal forecast floor, a day of the trace being its "
                        "season)")
    s.add_argument("--predict-slots", type=_count, default=DEFAULT_SLOTS,
                   help="predictive: slots per season (a day) in its load profile "
                        f"(default: {DEFAULT_SLOTS})")
    s.add_argument("--metric", choices=METRICS, default="inflight",
                   help="per-replica metric apa and hpa scale on (default: inflight = running + waiting)")
    s.add_argument("--target", type=_positive, default=None,
                   help="per-replica target of --metric; kpa's concurrency target (default: half the "
                        "profile's max batch; 0.7 for kv)")
    s.add_argument("--poll-interval", type=_positive, default=30.0,
                   help="apa and slo poll interval, seconds (the manager's default: 30)")
    s.add_argument("--slo-percentile", type=_positive, default=90.0,
                   help="the TTFT percentile the SLO engine sizes on (default: 90)")
    s.add_argument("--slo-concurrency", type=_count, default=None,
                   help="the SLO engine's spec.concurrencyPerReplica for its in-flight signal "
                        "(spec.inflight); 0 sizes on TTFT alone (default: 28/64 of the profile's max "
                        "batch)")
    s.add_argument("--kpa-scale-down-delay", type=_nonneg, default=0.0,
                   help="kpa: Knative's scale-down-delay, seconds: a lower count applies once it has held "
                        "this long (default: 0, Knative's default)")
    s.add_argument("--tune-baselines", action="store_true",
                   help="sweep hpa's, kpa's (and its scale-down delay) and apa's target and report each "
                        "one's best: the cheapest run meeting --goal, else the highest attainment "
                        "(the sweep is in <policy>.json)")
    s.add_argument("--standby", type=_count, default=None,
                   help="flow-standby(-wake): replicas kept loaded and asleep beside the fleet, woken "
                        "first on a scale-up (default: swept, the best reported; the sweep is in "
                        "<policy>.json)")
    s.add_argument("--standby-cost", type=_share, default=0.2,
                   help="a standby replica's price asleep, as a share of a serving replica's "
                        "(default: 0.2)")
    s.add_argument("--wake-seconds", type=_nonneg, default=10.0,
                   help="seconds from waking a standby replica to its serving (default: 10; vLLM's "
                        "sleep mode wakes in under a second to a few)")
    s.add_argument("--wake-delay", type=_nonneg, default=None,
                   help="flow-standby-wake: the router wakes a sleeper between polls when an arriving "
                        "request's predicted queueing delay (the fleet's prefill backlog over the "
                        "replicas serving within a wake) is over this many seconds (default: half "
                        "the TTFT objective, or one iteration's prefill budget, max_batched_tokens / "
                        "prefill_tokens_per_s, if shorter)")
    s.add_argument("--goal", "--oracle-goal", dest="goal", type=_positive, default=0.99,
                   help="the attainment goal, 0-1: the cheapest fixed fleet and the lower bound are "
                        "for it, the oracle is calibrated to it, the steady-state start is sized for it "
                        "(default: 0.99; --oracle-goal is its old name)")
    o = p.add_argument_group("service")
    o.add_argument("--ttft-slo", type=_positive, default=2.0, help="TTFT objective, seconds (default: 2)")
    o.add_argument("--tpot-slo", type=_positive, default=0.1,
                   help="time-per-output-token objective, seconds (default: 0.1)")
    o.add_argument("--profile", metavar="NAME|YAML", default=None,
                   help=f"replica profile: a shipped one ({', '.join(PROFILES)}) or a YAML file of fields "
                        f"overriding the defaults (default: {DEFAULT_PROFILE}; docs/simulator.md)")
    o.add_argument("--min-replicas", type=_count, default=1, help="default: 1")
    o.add_argument("--max-replicas", type=_count, default=64, help="default: 64")
    o.add_argument("--initial-replicas", type=_count, default=None,
                   help="warm replicas at t=0 (default: the steady state, the cheapest fixed fleet "
                        "meeting --goal over the first 5 minutes, as a service already running at "
                        "that load)")
    p.add_argument("--out", metavar="DIR", required=True, help="directory the report is written to")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--progress", choices=PROGRESS_MODES, default="auto",
                   help="progress on stderr: bar (redrawn in place), lines (a plain line every 10 %% "
                        "and 10 s at most, for logs), off; auto = bar on a terminal, else lines "
                        "(default: auto)")
    p.add_argument("--jobs", type=_jobs, default=None,
                   help="simulations run side by side on this many worker processes; the report is the "
                        "same to the byte (default: the CPUs this process may use, at most "
                        f"{MAX_DEFAULT_JOBS})")
    p.add_argument("--no-progress", action="store_true", help="same as --progress off")
    return run


def _note(message: str) -> None:
    print(f"escaler simulate: {message}", file=sys.stderr)


def missing_dependencies(plots: bool) -> list[str]:
    """The ``sim`` extra's modules this run needs and cannot import."""
    return extras.missing(("scipy", *(("matplotlib",) if plots else ())))


def run(args: argparse.Namespace) -> int:
    absent = missing_dependencies(not args.no_plots)
    if absent:
        print(extras.missing_message("simulate", "sim", absent), file=sys.stderr)
        return extras.EXIT_MISSING
    if args.min_replicas > args.max_replicas:
        print(f"escaler simulate: --min-replicas {args.min_replicas} > --max-replicas {args.max_replicas}",
              file=sys.stderr)
        return 2
    if not 1 <= args.predict_slots <= MAX_SLOTS:
        print(f"escaler simulate: --predict-slots must be in [1, {MAX_SLOTS}], got {args.predict_slots}",
              file=sys.stderr)
        return 2
    if args.goal > 1:
        print(f"escaler simulate: --goal must be in (0, 1], got {args.goal}", file=sys.stderr)
        return 2
    try:
        profile = load_profile(args.profile)
        trace = resolve_trace(args.trace) if args.trace else shipped_trace_path()
        arrivals = load_trace(trace, scale=args.scale, speedup=args.speedup, duration=args.duration,
                              seed=args.seed, model=args.model,
                              lengths=resolve_trace(args.lengths) if args.lengths else None,
                              time_unit=args.time_unit, drop_failed=args.drop_failed, note=_note)
    except (TraceError, ProfileError, ValueError) as err:
        print(f"escaler simulate: {err}", file=sys.stderr)
        return 2
    exp = Experiment(
        arrivals=arrivals,
        options=SimOptions(profile=profile,
                           initial_replicas=(max(1, args.min_replicas) if args.initial_replicas is None
                                             else args.initial_replicas),
                           min_replicas=args.min_replicas, max_replicas=args.max_replicas,
                           seed=args.seed, wake_s=args.wake_seconds, standby_cost=args.standby_cost),
        slo=SloTargets(ttft_s=args.ttft_slo, tpot_s=args.tpot_slo,
                       oscillation_window_s=profile.cold_start_s), policies=args.policy, metric=args.metric,
        target=args.target, slo_percentile=args.slo_percentile, poll_s=args.poll_interval,
        slo_concurrency=args.slo_concurrency,
        goal=args.goal, steady_start=args.initial_replicas is None,
        kpa_scale_down_delay_s=args.kpa_scale_down_delay, tune=args.tune_baselines,
        season_s=season_for(args.speedup), predict_slots=args.predict_slots, standby=args.standby,
        wake_delay_s=args.wake_delay,
        settings={"trace": Path(trace).name, "scale": args.scale, "speedup": args.speedup,
                  "duration": args.duration, "seed": args.seed, "model": args.model,
                  "time_unit": args.time_unit, "drop_failed": args.drop_failed})
    rows = run_experiment(exp, Path(args.out), reporter("off" if args.no_progress else args.progress),
                          plot=not args.no_plots, jobs=args.jobs if args.jobs is not None else default_jobs())
    print(markdown_table(rows), end="")
    print(f"report: {args.out}/summary.md", file=sys.stderr)
    return 0
