"""The report's PNG plots (matplotlib, Agg backend: no display needed).

Contract of ``write_plots(runs, exp, out)``: three files under ``out``:

* ``replicas.png`` — per policy (one panel each), the arrival rate (requests/s, per minute) and the
  replica count (spec.replicas and serving) over time;
* ``ttft.png`` — the TTFT p90 of each minute over time, every policy on one axis, with the TTFT
  objective as a line;
* ``ttft_cdf.png`` — the TTFT CDF of every policy (log x), with the objective.

Plots are written with fixed metadata (no timestamp), so the same runs give the same files.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from escaler.sim.engine import Run, percentile

if TYPE_CHECKING:
    from escaler.sim.runner import Experiment

__all__ = ["write_plots"]

_META = {"Software": "escaler simulate"}


def _per_minute_rate(run: Run) -> tuple[list[float], list[float]]:
    buckets: dict[int, int] = {}
    for s in run.scrapes:
        buckets[int(s.t // 60)] = buckets.get(int(s.t // 60), 0) + s.arrivals
    xs = sorted(buckets)
    return [float(x) for x in xs], [buckets[x] / 60.0 for x in xs]


def _ttft_p90_per_minute(run: Run) -> tuple[list[float], list[float]]:
    buckets: dict[int, list[float]] = {}
    for q in run.requests:
        buckets.setdefault(int(q.arrival // 60), []).append(q.ttft)
    xs = sorted(buckets)
    return [float(x) for x in xs], [percentile(buckets[x], 90) or 0.0 for x in xs]


def write_plots(runs: Mapping[str, Run], exp: Experiment, out: Path) -> None:
    names = list(runs)
    fig, axes = plt.subplots(len(names), 1, figsize=(10, 2.6 * len(names)), sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], names, strict=True):
        run = runs[name]
        mx, rate = _per_minute_rate(run)
        ax.plot(mx, rate, color="tab:gray", lw=1, label="arrivals/s")
        ax.set_ylabel("req/s")
        ax2 = ax.twinx()
        t = [s.t / 60.0 for s in run.scrapes]
        ax2.step(t, [s.replicas for s in run.scrapes], where="post", color="tab:blue", lw=1.2,
                 label="replicas")
        ax2.step(t, [s.serving for s in run.scrapes], where="post", color="tab:green", lw=0.8, ls="--",
                 label="serving")
        ax2.set_ylabel("replicas")
        ax.set_title(name, loc="left", fontsize=10)
        lines = ax.get_legend_handles_labels()
        lines2 = ax2.get_legend_handles_labels()
        ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(out / "replicas.png", dpi=90, metadata=_META)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 4))
    for name in names:
        xs, ys = _ttft_p90_per_minute(runs[name])
        ax.plot(xs, ys, lw=1.2, label=name)
    ax.axhline(exp.slo.ttft_s, color="black", ls=":", lw=1, label="TTFT objective")
    ax.set_yscale("log")
    ax.set_xlabel("minutes")
    ax.set_ylabel("TTFT p90 per minute (s)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "ttft.png", dpi=90, metadata=_META)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for name in names:
        ttfts = sorted(q.ttft for q in runs[name].requests)
        n = len(ttfts)
        if n:
            ax.plot(ttfts, [(i + 1) / n for i in range(n)], lw=1.2, label=name)
    ax.axvline(exp.slo.ttft_s, color="black", ls=":", lw=1, label="TTFT objective")
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("fraction of requests")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "ttft_cdf.png", dpi=90, metadata=_META)
    plt.close(fig)
