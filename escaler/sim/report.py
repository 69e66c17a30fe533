"""One run → its summary numbers; several → the Markdown table. Pure.

Contract of ``summarize(run, slo)``:

* ``requests`` (in the trace), ``unfinished`` (never served: counted as missing every SLO);
* ``ttft_p50/p90/p99_s`` and ``tpot_p50/p90/p99_s`` over the finished requests (TPOT: the mean
  time per output token after the first; a one-token answer has none and is left out of TPOT);
* ``ttft_attainment``: the share of *all* requests whose TTFT is within ``slo.ttft_s``;
  ``attainment``: within both ``slo.ttft_s`` and ``slo.tpot_s`` (a one-token answer meets TPOT);
* ``replica_hours``: what the fleet paid, every replica from its creation to its removal;
* ``scale_events``: changes of the replica count; ``flaps``: events that reverse the direction of
  the previous one within ``slo.flap_window_s`` (up then down, or down then up);
* ``oscillations``: events that reverse the previous one within ``slo.oscillation_window_s``
  (one cold start: a replica shed and ordered back, or ordered and shed, before a new one could
  have served) — ``flaps`` with the cold start as its window;
* ``event_rate``: scale events per 5 minutes per 10 replicas (the mean fleet, at least 10) over the
  run — a platform's tolerance for churn is about 1;
* ``peak_replicas``, ``end_s`` (simulated seconds to the last request's end).

Numbers are rounded (6 significant digits) so that the JSON is byte-identical across runs on any
machine that computes the same floats.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from escaler.sim.engine import Run, percentile
from escaler.sim.serving import RequestRecord

__all__ = ["SloTargets", "markdown_table", "meets", "summarize"]


@dataclass(frozen=True)
class SloTargets:
    ttft_s: float = 2.0
    tpot_s: float = 0.1
    flap_window_s: float = 300.0
    # one cold start: ``oscillations`` counts a turn back within it
    oscillation_window_s: float = 60.0


def _r(v: float | None) -> float | None:
    return None if v is None else float(f"{v:.6g}")


def meets(q: RequestRecord, slo: SloTargets) -> bool:
    """Whether a served request met both objectives (a one-token answer meets TPOT)."""
    return q.ttft <= slo.ttft_s and (q.output_tokens <= 1 or q.tpot <= slo.tpot_s)


def _reversals(events: Sequence[tuple[float, int, int]], window_s: float) -> int:
    """Scale events that reverse the direction of the previous one within ``window_s``."""
    return sum(1 for a, b in itertools.pairwise(events)
               if (a[2] - a[1]) * (b[2] - b[1]) < 0 and b[0] - a[0] <= window_s)


def summarize(run: Run, slo: SloTargets) -> dict[str, Any]:
    reqs = run.requests
    total = len(reqs) + run.unfinished
    ttfts = [q.ttft for q in reqs]
    tpots = [q.tpot for q in reqs if q.output_tokens > 1]
    ttft_ok = sum(1 for q in reqs if q.ttft <= slo.ttft_s)
    both_ok = sum(1 for q in reqs if meets(q, slo))
    flaps = _reversals(run.scale_events, slo.flap_window_s)
    oscillations = _reversals(run.scale_events, slo.oscillation_window_s)
    events = run.scale_events
    mean = run.replica_seconds / run.end if run.end > 0 else 0.0
    rate = len(events) / (run.end / 300.0) / max(1.0, mean / 10.0) if run.end > 0 else 0.0
    peak = max([s.replicas for s in run.scrapes] + [e[2] for e in run.scale_events] or [0])
    return {
        "policy": run.policy,
        "requests": total,
        "unfinished": run.unfinished,
        "ttft_p50_s": _r(percentile(ttfts, 50)),
        "ttft_p90_s": _r(percentile(ttfts, 90)),
        "ttft_p99_s": _r(percentile(ttfts, 99)),
        "tpot_p50_s": _r(percentile(tpots, 50)),
        "tpot_p90_s": _r(percentile(tpots, 90)),
        "tpot_p99_s": _r(percentile(tpots, 99)),
        "ttft_attainment": _r(ttft_ok / total if total else None),
        "attainment": _r(both_ok / total if total else None),
        "replica_hours": _r(run.replica_seconds / 3600.0),
        "scale_events": len(run.scale_events),
        "flaps": flaps,
        "oscillations": oscillations,
        "event_rate": _r(rate),
        "peak_replicas": peak,
        "end_s": _r(run.end),
        **({"standby_hours": _r(run.standby_seconds / 3600.0)} if run.standby_seconds else {}),
    }


_COLUMNS = (("policy", "policy"), ("attainment", "SLO attainment"), ("ttft_attainment", "TTFT attainment"),
            ("ttft_p50_s", "TTFT p50 s"), ("ttft_p90_s", "TTFT p90 s"), ("ttft_p99_s", "TTFT p99 s"),
            ("tpot_p50_s", "TPOT p50 s"), ("tpot_p99_s", "TPOT p99 s"), ("replica_hours", "replica-hours"),
            ("x_bound", "x bound"), ("scale_events", "scale events"), ("flaps", "flaps"),
            ("oscillations", "oscillations"), ("event_rate", "events /5 min /10 replicas"),
            ("peak_replicas", "peak replicas"),
            ("unfinished", "unfinished"))


def _cell(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if key.endswith("attainment"):
        return f"{100 * v:.2f} %"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    head = "| " + " | ".join(title for _, title in _COLUMNS) + " |"
    sep = "|" + "---|" * len(_COLUMNS)
    body = ["| " + " | ".join(_cell(k, r.get(k)) for k, _ in _COLUMNS) + " |" for r in rows]
    return "\n".join([head, sep, *body]) + "\n"
