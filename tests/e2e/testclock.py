"""The manager's test clock from the test's side (``escaler manager --unsafe-test-clock-file``,
``escaler.testclock``): a test that needs the manager across a cron schedule's minute boundary steps
the manager's clock to a few seconds before it instead of waiting for the wall clock.

* ``ManagerClock(path)`` writes the offset file (0 s at first) that ``start_manager(...,
  test_clock_file=clock.path)`` hands to the manager; a restarted manager given the same file runs
  on the same time.
* Manager time is real time plus the offset, for ``now()`` and the monotonic clock alike:
  ``manager_now()`` is the manager's wall clock now, ``real(t)`` the real instant at which the
  manager's clock shows ``t`` (for a latency budget measured from a transition).
* ``step_to(t, mgr)`` raises the offset so that the manager's clock shows ``t`` now (the offset
  only moves forward: a ``t`` in the manager's past is refused here, as the manager would refuse
  it) and, given the running manager, waits until its log shows the step applied (its file watcher
  polls every 50 ms), so ``real()`` is exact from then on.
* ``next_minute(margin)``: the first whole minute at least ``margin`` seconds ahead in manager time.

The file is written through a rename, so the manager never reads half of it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from .conftest import eventually
from .es_helpers import Manager


class ManagerClock:
    """The offset file of a manager's test clock; see the module docstring."""

    def __init__(self, path: Path, offset: float = 0.0) -> None:
        self.path = path
        # seconds the manager's clock runs ahead of real time; only increases
        self.offset = 0.0
        self._write(offset)

    def _write(self, offset: float) -> None:
        if offset < self.offset:
            raise ValueError(f"the test clock only moves forward: {offset} s < {self.offset} s")
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(repr(float(offset)), encoding="utf-8")
        tmp.replace(self.path)
        self.offset = float(offset)

    def manager_now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset)

    def real(self, manager_time: datetime) -> datetime:
        """The real instant at which the manager's clock shows ``manager_time`` (at this offset)."""
        return manager_time - timedelta(seconds=self.offset)

    def next_minute(self, margin: float) -> datetime:
        now = self.manager_now()
        t = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        while (t - now).total_seconds() < margin:
            t += timedelta(minutes=1)
        return t

    def step_to(self, manager_time: datetime, mgr: Manager | None = None) -> None:
        """Step the manager's clock to show ``manager_time`` now; with ``mgr``, wait until it applied it."""
        offset = self.offset + (manager_time - self.manager_now()).total_seconds()
        self._write(offset)
        if mgr is not None:
            eventually(lambda: stepped_to(mgr, offset), timeout=10, interval=0.02,
                       what=f"the manager's clock stepped to offset {offset} s; log:\n{mgr.output(2000)}")


def stepped_to(mgr: Manager, offset: float) -> bool:
    """Whether ``mgr``'s JSON log shows its clock stepped to ``offset``."""
    for line in mgr.output(200_000).splitlines():
        if "UNSAFE TEST CLOCK stepped" not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("offset") == offset:
            return True
    return False
