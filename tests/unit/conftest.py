"""Fixtures shared by unit test modules that opt in, and one autouse hygiene fixture.

``_release_unstarted_workqueues`` (autouse): a workqueue with metrics runs a daemon thread until
``shutdown()`` (``escaler/workqueue/queue.py``), and a delaying queue another; a controller shuts
its queue down when its ``start`` returns, so a manager or controller a test builds and never runs
(the reconciler harnesses call ``reconcile`` directly; ``metricsdoc`` builds managers only to read
their registries) keeps both threads for the rest of the session. On a ``FakeClock`` the metrics
thread re-checks its stop event every 10 ms of real time, so the few hundred a full run used to
leave behind woke tens of thousands of times a second and slowed every later test (most of the
unit suite's system time). After each test, every queue created during it is shut down, as its
contract asks; a queue a test already shut down is untouched (``shutdown`` is idempotent).

``_forget_tidal_evaluations`` (autouse): the manager's shared Tidal parse/evaluation cache
(``escaler.reconcilers.kit.tidalevaluations.SHARED``) is keyed by uid and resourceVersion, which a
fake API server hands out again in every test: it is cleared before each test.

``httpbase.SERVE_POLL_SECONDS`` is lowered from 0.1 s to 5 ms for the session: a server's
``shutdown()`` waits for its serving loop's next poll, and the unit tests stop escaler's HTTP
servers (probes, metrics, webhook, API) ~100 times a run. Only how soon a stop is noticed changes.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator

import pytest

from escaler.reconcilers.kit.tidalevaluations import SHARED as TIDAL_EVALUATIONS
from escaler.runtime import httpbase
from escaler.workqueue.queue import Queue

httpbase.SERVE_POLL_SECONDS = 0.005

# every Queue (and subclass) constructed in this process, until it is garbage
_QUEUES: weakref.WeakSet[Queue[object]] = weakref.WeakSet()
_queue_init = Queue.__init__


def _tracked_init(self: Queue[object], *args: object, **kwargs: object) -> None:
    _queue_init(self, *args, **kwargs)  # type: ignore[arg-type]
    _QUEUES.add(self)


Queue.__init__ = _tracked_init  # type: ignore[method-assign,assignment]


@pytest.fixture(autouse=True)
def _release_unstarted_workqueues() -> Iterator[None]:
    """Shut down the queues made during the test (see the module docstring)."""
    before = set(_QUEUES)  # queues of wider-scoped fixtures set up before this one stay up
    yield
    for q in list(_QUEUES):
        if q not in before:
            q.shutdown()


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """The code under test installs root handlers (``setup_logging``); put the root logger back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(autouse=True)
def _forget_tidal_evaluations() -> None:
    TIDAL_EVALUATIONS.clear()
