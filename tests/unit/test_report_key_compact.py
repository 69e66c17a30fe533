"""The Reporter's last-status key is compact (issue 30, memory per scaler): a fleet's keys share
each equal condition row and set of rows and the valid spec's Validation, the shared table is
bounded, and the idle poll still skips the status rebuild exactly as before."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from es_fakes import Harness, deployment, external_server_metric, harness, metrics_trigger, scaler

from escaler.reconcilers.kit import report
from escaler.scaling.conditions import Validation

POLL = 30.0
# the position of the condition rows and of the Validation in the key (report._key)
WRITES, VALIDATION = 3, 11


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness(poll_interval=POLL) as hh:
        yield hh


def _fleet(h: Harness, n: int) -> None:
    """``n`` scalers, each with its own query (no two triggers equal), all on target."""
    for i in range(n):
        h.api("deployments").create(deployment(f"w{i}", 2))
        obj = scaler(f"es{i}", metrics_trigger(external_server_metric(f'sum(load{{s="{i}"}})', "10")))
        obj["spec"]["targetRef"]["name"] = f"w{i}"
        h.api("elasticscalers").create(obj)
        h.collector.values[f'sum(load{{s="{i}"}})'] = 20.0
    h.start()
    for i in range(n):
        h.reconcile(f"es{i}")


def _keys(h: Harness) -> list[tuple[object, ...]]:
    seen = h.reconciler.reporter._seen
    return [v.key for v in seen.values()]


def test_equal_condition_rows_are_one_object_across_the_fleet(h: Harness) -> None:
    _fleet(h, 3)
    keys = _keys(h)
    assert len(keys) == 3
    first = keys[0][WRITES]
    assert all(k[WRITES] == first for k in keys)  # the plans are equal ...
    assert all(k[WRITES] is first for k in keys), "equal condition rows are kept once per fleet"
    assert all(k[VALIDATION] is keys[0][VALIDATION] for k in keys), "one Validation for valid specs"
    assert keys[0][VALIDATION] == Validation()


def test_the_remembered_status_has_no_instance_dict(h: Harness) -> None:
    _fleet(h, 1)
    (seen,) = h.reconciler.reporter._seen.values()
    assert not hasattr(seen, "__dict__")


def test_the_shared_table_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "_shared_rows", {})
    for i in range(report.SHARED_ROWS_MAX * 2 + 5):
        row = ("Validated", "True", "Valid", f"message {i}")
        assert report._shared(row) == row
        assert len(report._shared_rows) <= report.SHARED_ROWS_MAX
    # an equal row hands back the held instance, never a different value
    held = report._shared(("a", "b"))
    assert report._shared(("a", "".join(["b"]))) is held


def test_idle_polls_still_skip_the_rebuild(h: Harness) -> None:
    _fleet(h, 2)
    writes = h.client.count("patch", "elasticscalers/status")
    for _ in range(3):
        h.clock.step(POLL)
        for i in range(2):
            h.reconcile(f"es{i}")
    assert h.client.count("patch", "elasticscalers/status") == writes
