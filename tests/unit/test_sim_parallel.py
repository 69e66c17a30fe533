"""Simulations side by side (escaler/sim/parallel.py): a report made on worker processes is the
report made in one, to the byte; the Workers contract."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from escaler.sim.engine import SimOptions
from escaler.sim.parallel import MAX_DEFAULT_JOBS, Workers, default_jobs, shared
from escaler.sim.runner import Experiment, run_experiment
from tests.unit.test_sim_bound import PROFILE, SLO, bursty


def test_a_report_on_two_workers_is_the_report_on_one_to_the_byte(tmp_path: Path) -> None:
    exp = Experiment(arrivals=bursty(4, seconds=240.0), options=SimOptions(profile=PROFILE, max_replicas=16),
                     slo=SLO, policies=("apa", "flow", "hpa", "kpa", "oracle", "flow-standby"), tune=True,
                     goal=0.9)
    one, two = tmp_path / "one", tmp_path / "two"
    rows1 = run_experiment(exp, one, plot=False, jobs=1)
    rows2 = run_experiment(exp, two, plot=False, jobs=2)
    assert rows1 == rows2
    names = sorted(os.listdir(one))
    assert names == sorted(os.listdir(two)) and "summary.json" in names and "kpa.json" in names
    for name in names:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name


def _read(key: str) -> str:
    return str(shared()[key])


def _boom(_: int) -> None:
    raise ValueError("task failed")


@pytest.mark.parametrize("jobs", [1, 2])
def test_tasks_read_the_shared_object_and_their_errors_reach_result(jobs: int) -> None:
    with Workers(jobs, {"a": "x"}) as w:
        assert w.parallel == (jobs > 1)
        assert w.submit(_read, "a").result() == "x"
        failed = w.submit(_boom, 1)
        with pytest.raises(ValueError, match="task failed"):
            failed.result()
    with pytest.raises(RuntimeError, match="no Workers context"):
        shared()


def test_jobs_are_at_least_one_and_the_default_is_bounded() -> None:
    with pytest.raises(ValueError, match="jobs: must be >= 1"):
        Workers(0, None)
    assert 1 <= default_jobs() <= MAX_DEFAULT_JOBS
