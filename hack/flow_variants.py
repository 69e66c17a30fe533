#!/usr/bin/env python3
"""Run the simulator's ``flow`` policy with variants of its settings on one trace, one line each.

Usage: ``python hack/flow_variants.py [--profile NAME|FILE] [--minutes] TRACE SCALE VARIANT...`` where
TRACE is a trace file or a shipped trace's short name (``conv``, ``code``), SCALE the rate multiplier
(``--scale``), and each VARIANT a JSON object of ``FlowConfig`` fields and ``FlowPolicy`` fields
overriding what ``escaler.sim.runner.build`` gives (``{}``: as shipped; ``{"standby": 1,
"wake_delay_s": 0.3277}`` is flow-standby-wake with one replica asleep). Each run starts from the
steady-state fleet, as ``python -m escaler simulate`` does (wake 10 s, standby at 20 %); it prints
the variant and the run's attainment, replica-hours, scale events, oscillations and peak, and with
``--minutes`` the requests that missed their objectives by the minute they arrived in. What
docs/simulator.md quotes of the flow policy's settings (e.g. the burst floor's lookback) comes from
here, e.g.::

    python hack/flow_variants.py conv 5 '{}' '{"burst_lookback_s": 1800}'
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter

from escaler.sim.engine import SimOptions, simulate
from escaler.sim.model import ReplicaProfile, load_profile
from escaler.sim.policies import FlowPolicy
from escaler.sim.report import SloTargets, meets, summarize
from escaler.sim.runner import Experiment, build, initial_fleet
from escaler.sim.trace import load_trace, resolve_trace, shipped_trace_path

_SHOWN = ("attainment", "replica_hours", "scale_events", "oscillations", "peak_replicas")


def main(argv: list[str]) -> int:
    profile = ReplicaProfile()
    if argv[:1] == ["--profile"]:
        profile, argv = load_profile(argv[1]), argv[2:]
    minutes = argv[:1] == ["--minutes"]
    if minutes:
        argv = argv[1:]
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    trace = str(shipped_trace_path()) if argv[0] == "conv" else str(resolve_trace(argv[0]))
    arrivals = load_trace(trace, scale=float(argv[1]), speedup=1.0, duration=None, seed=0, model=None,
                          lengths=None, time_unit=None, drop_failed=False, note=lambda _m: None)
    exp = initial_fleet(Experiment(arrivals=arrivals, options=SimOptions(profile=profile),
                                   slo=SloTargets(oscillation_window_s=profile.cold_start_s),
                                   policies=("flow",)))
    for raw in argv[2:]:
        variant = json.loads(raw)
        policy = build("flow", exp)
        assert isinstance(policy, FlowPolicy)
        config = policy.config
        names = {f.name for f in dataclasses.fields(config)}
        policy = dataclasses.replace(
            policy, config=dataclasses.replace(config, **{k: v for k, v in variant.items() if k in names}),
            **{k: v for k, v in variant.items() if k not in names})
        run = simulate(arrivals, policy, exp.options)
        s = summarize(run, exp.slo)
        print(json.dumps(variant), " ".join(f"{k}={s[k]}" for k in _SHOWN), flush=True)
        if minutes:
            missed = Counter(int(q.arrival // 60) for q in run.requests if not meets(q, exp.slo))
            print("  misses by minute:", " ".join(f"{m}:{n}" for m, n in sorted(missed.items())), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
