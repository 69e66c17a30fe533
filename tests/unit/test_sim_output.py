"""The simulator's output: progress reports readable in a log and on a terminal, and replicas.png."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from escaler.sim.engine import Run, SimOptions, simulate
from escaler.sim.progress import LINE_FRACTION, reporter, resolve_mode
from escaler.sim.runner import Experiment, build
from escaler.sim.trace import Arrival


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def drive(update: Callable[[int, int], None], clock: FakeClock, n: int, seconds: float) -> None:
    """n updates spread evenly over ``seconds`` of fake time, the last one done == total."""
    for i in range(1, n + 1):
        clock.now += seconds / n
        update(i, n)


def make(mode: str, stream: io.StringIO, clock: FakeClock) -> Callable[[int, int], None]:
    factory = reporter(mode, stream, clock)
    assert factory is not None
    return factory("apa")


# --- progress ---------------------------------------------------------------------------------


def test_auto_is_bar_on_a_terminal_and_lines_elsewhere() -> None:
    assert resolve_mode("auto", Tty()) == "bar"
    assert resolve_mode("auto", io.StringIO()) == "lines"
    assert resolve_mode("lines", Tty()) == "lines"
    assert reporter("off", io.StringIO()) is None
    with pytest.raises(ValueError, match="progress mode"):
        resolve_mode("fancy", io.StringIO())


def test_lines_mode_writes_few_plain_lines_for_100k_updates_over_60_s() -> None:
    out, clock = io.StringIO(), FakeClock()
    drive(make("lines", out, clock), clock, 100_000, 60.0)
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    # one per 10 s at most (the rarer rule over 60 s), plus the final line
    assert 2 <= len(lines) <= 7
    assert lines[-1].startswith("apa") and "100000/100000 req" in lines[-1] and lines[-1].endswith("done")


def test_lines_mode_is_also_bounded_by_share_of_work_on_a_long_run() -> None:
    out, clock = io.StringIO(), FakeClock()
    drive(make("lines", out, clock), clock, 100_000, 3600.0)  # an hour: time alone would allow 360
    lines = out.getvalue().splitlines()
    assert len(lines) <= round(1 / LINE_FRACTION) + 1
    assert len(lines) >= 5


def test_the_final_line_appears_even_when_the_run_is_instant_and_only_once() -> None:
    for mode, stream in (("lines", io.StringIO()), ("bar", Tty())):
        clock = FakeClock()
        update = make(mode, stream, clock)
        update(3, 10)
        update(10, 10)
        update(10, 10)  # the engine's last call may repeat the total: no second final line
        text = stream.getvalue()
        assert text.endswith("\n") and text.count("10/10 req") == 1, mode


def test_an_empty_run_still_reports_its_end() -> None:
    out = io.StringIO()
    make("lines", out, FakeClock())(0, 0)
    assert out.getvalue().splitlines() == [out.getvalue().strip()]
    assert "0/0 req 100 %" in out.getvalue()


def test_bar_mode_redraws_in_place_at_most_ten_times_a_second() -> None:
    out, clock = Tty(), FakeClock()
    drive(make("bar", out, clock), clock, 100_000, 60.0)
    text = out.getvalue()
    redraws = text.count("\r")
    assert 2 <= redraws <= 60 * 10 + 2
    assert text.count("\n") == 1 and text.endswith("\n")
    assert "100000/100000 req 100 %" in text.rsplit("\r", 1)[-1]


def test_bar_mode_draws_the_first_update_and_drops_a_burst() -> None:
    out, clock = Tty(), FakeClock()
    update = make("bar", out, clock)
    for i in range(1, 1000):  # a burst inside one redraw interval
        update(i, 1000)
    assert out.getvalue().count("\r") == 1
    clock.now += 0.2
    update(1000 - 1, 1000)
    assert out.getvalue().count("\r") == 2


def test_every_label_gets_its_own_report() -> None:
    out, clock = io.StringIO(), FakeClock()
    factory = reporter("lines", out, clock)
    assert factory is not None
    for label in ("apa", "oracle u=0.500"):
        factory(label)(5, 5)
    assert [line.split()[0] for line in out.getvalue().splitlines()] == ["apa", "oracle"]


# --- plots ------------------------------------------------------------------------------------


def small_runs() -> dict[str, Run]:
    # 10 req/s for 3 minutes against a target of 2 in flight: both policies scale from 1 to the cap
    arrivals = [Arrival(t=0.1 * i, prompt_tokens=200, output_tokens=300) for i in range(1800)]
    exp = Experiment(arrivals=arrivals, options=SimOptions(max_replicas=6), target=2.0,
                     policies=("apa", "hpa"))
    return {name: simulate(arrivals, build(name, exp), exp.options) for name in exp.policies}


def test_replicas_figure_shares_one_integer_replica_axis_with_reference_lines() -> None:
    import matplotlib.pyplot as plt

    from escaler.sim.plots import _replicas_figure

    refs = {"cheapest fixed fleet": 3.0, "lower bound (mean)": 1.7}
    fig = _replicas_figure(small_runs(), refs)
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.get_ylabel() == "replicas"]
    assert len(panels) == 2
    assert max(max(line.get_ydata()) for line in panels[0].lines) > 1  # the run did scale
    assert panels[0].get_shared_y_axes().joined(panels[0], panels[1])
    assert panels[0].get_ylim() == panels[1].get_ylim()
    for ax in panels:
        ticks = ax.get_yticks()
        assert len(ticks) >= 2 and all(float(v).is_integer() for v in ticks), ticks
        labels = [line.get_label() for line in ax.lines]
        assert "cheapest fixed fleet (3)" in labels and "lower bound (mean) (1.7)" in labels
        ref = next(line for line in ax.lines if line.get_label() == "cheapest fixed fleet (3)")
        assert list(ref.get_ydata()) == [3.0, 3.0] and ref.get_linestyle() == "--"
        legend = ax.get_legend()
        assert legend is not None and "lower bound (mean) (1.7)" in [t.get_text() for t in legend.get_texts()]
    plt.close(fig)


def test_write_plots_keeps_working_without_references(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    from escaler.sim.plots import _replicas_figure, write_plots

    runs = small_runs()
    fig = _replicas_figure(runs)
    assert all(not line.get_label().startswith("lower") for ax in fig.axes for line in ax.lines)
    plt.close(fig)
    for out, refs in ((tmp_path / "plain", None), (tmp_path / "refs", {"lower bound (mean)": 2.0})):
        out.mkdir()
        write_plots(runs, Experiment(arrivals=[]).slo.ttft_s, out, references=refs)
        for png in ("replicas.png", "ttft.png", "ttft_cdf.png"):
            assert (out / png).stat().st_size > 5_000, (out, png)
