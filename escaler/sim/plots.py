"""The report's PNG plots (matplotlib, Agg backend: no display needed).

Contract of ``write_plots(runs, ttft_objective_s, out, references=None)``: three files under ``out``:

* ``replicas.png`` — per policy (one panel each), the replica count (spec.replicas and serving) and
  the arrival rate (requests/s, per minute, right axis) over time; every panel shares one replica
  axis with integer ticks, so panels compare at a glance; ``references`` (optional, label ->
  replica count, e.g. the cheapest fixed fleet or a lower bound) are drawn on every panel as
  labelled dashed horizontal lines;
* ``ttft.png`` — the TTFT p90 of each minute over time, every policy on one axis, with the TTFT
  objective as a line;
* ``ttft_cdf.png`` — the TTFT CDF of every policy (log x), with the objective.

Plots are written with fixed metadata (no timestamp), so the same runs give the same files.

The plots take plain data (the runs and the TTFT objective in seconds), not the runner's
``Experiment``: ``escaler.sim.runner`` imports this module (lazily, only when plotting), and this
module imports nothing of the runner, so the two form no import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from escaler.sim.engine import Run, percentile

__all__ = ["write_plots"]

_META = {"Software": "escaler simulate"}
# colours of the reference lines (cycled)
_REF_COLORS = ("tab:red", "tab:purple", "tab:orange", "tab:brown")


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


def _replicas_figure(runs: Mapping[str, Run], references: Mapping[str, float] | None = None) -> Figure:
    """One panel per policy: replicas on one y axis shared by every panel, integer ticks, arrivals
    on the right; each reference (label -> replica count) a labelled dashed line on every panel."""
    names = list(runs)
    refs = dict(references or {})
    fig, axes = plt.subplots(len(names), 1, figsize=(10, 2.6 * len(names)), sharex=True, sharey=True,
                             squeeze=False)
    rate_axes: list[Axes] = []
    for ax, name in zip(axes[:, 0], names, strict=True):
        run = runs[name]
        t = [s.t / 60.0 for s in run.scrapes]
        ax.step(t, [s.replicas for s in run.scrapes], where="post", color="tab:blue", lw=1.2,
                label="replicas")
        ax.step(t, [s.serving for s in run.scrapes], where="post", color="tab:green", lw=0.8, ls="--",
                label="serving")
        for i, (label, value) in enumerate(refs.items()):
            ax.axhline(value, color=_REF_COLORS[i % len(_REF_COLORS)], ls=(0, (6, 3)), lw=1,
                       label=f"{label} ({value:g})")
        ax.set_ylabel("replicas")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax2 = ax.twinx()
        if rate_axes:
            ax2.sharey(rate_axes[0])  # the same trace: the same arrivals scale on every panel
        rate_axes.append(ax2)
        mx, rate = _per_minute_rate(run)
        ax2.plot(mx, rate, color="tab:gray", lw=1, label="arrivals/s")
        ax2.set_ylabel("req/s")
        ax.set_zorder(ax2.get_zorder() + 1)  # replicas drawn over the arrivals
        ax.patch.set_visible(False)
        ax.set_title(name, loc="left", fontsize=10)
        lines = ax.get_legend_handles_labels()
        lines2 = ax2.get_legend_handles_labels()
        ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper right", fontsize=8)
    axes[0, 0].set_ylim(bottom=0)  # after every panel's data: the shared top covers them all
    axes[-1, 0].set_xlabel("minutes")
    fig.tight_layout()
    return fig


def write_plots(runs: Mapping[str, Run], ttft_objective_s: float, out: Path,
                references: Mapping[str, float] | None = None) -> None:
    names = list(runs)
    fig = _replicas_figure(runs, references)
    fig.savefig(out / "replicas.png", dpi=90, metadata=_META)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 4))
    for name in names:
        xs, ys = _ttft_p90_per_minute(runs[name])
        ax.plot(xs, ys, lw=1.2, label=name)
    ax.axhline(ttft_objective_s, color="black", ls=":", lw=1, label="TTFT objective")
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
    ax.axvline(ttft_objective_s, color="black", ls=":", lw=1, label="TTFT objective")
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("fraction of requests")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "ttft_cdf.png", dpi=90, metadata=_META)
    plt.close(fig)
