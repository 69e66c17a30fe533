"""``ManualExecutor``: an outbound executor whose jobs finish only when a test says so (no tests here).

It implements ``escaler.runtime.executor.Executor`` and the controller ``Source`` protocol like
``KeyedExecutor``, without threads: ``submit`` records the job (one per key), ``complete(key)``
runs it on the test's thread, keeps its ``Finished`` for ``take`` and adds the job's ``wake`` item
to the queue given to ``start`` (and to ``woken``). ``full`` makes the next submits answer ``FULL``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from escaler.runtime.executor import Finished, Submitted


@dataclass
class Job:
    key: Hashable
    group: str
    tag: Hashable
    fn: Callable[[], Any]
    wake: Any


class ManualExecutor:
    """See the module docstring."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        # key → the job submitted and not completed yet
        self.jobs: dict[Hashable, Job] = {}
        # key → its finished job, until taken
        self.done: dict[Hashable, Finished] = {}
        # every submit, in order (key, group)
        self.submitted: list[tuple[Hashable, str]] = []
        # every wake item added on completion, in order
        self.woken: list[Any] = []
        # keys discarded, in order
        self.discarded: list[Hashable] = []
        self.full = False
        self._queue: Any = None

    # Source protocol
    def start(self, queue: Any) -> None:
        self._queue = queue

    def wait_for_sync(self, timeout: float) -> bool:
        return True

    def stop(self) -> None:
        self._queue = None

    # Executor protocol
    def submit(self, key: Hashable, group: str, tag: Hashable, fn: Callable[[], Any], wake: Any) -> Submitted:
        with self._mu:
            if self.full:
                return Submitted.FULL
            if key in self.jobs:
                return Submitted.PENDING
            self.done.pop(key, None)
            self.jobs[key] = Job(key, group, tag, fn, wake)
            self.submitted.append((key, group))
            return Submitted.QUEUED

    def take(self, key: Hashable) -> Finished | None:
        with self._mu:
            return self.done.pop(key, None)

    def pending(self, key: Hashable) -> bool:
        with self._mu:
            return key in self.jobs

    def finished(self, key: Hashable) -> bool:
        with self._mu:
            return key in self.done

    @property
    def wakes(self) -> bool:
        return True

    def discard(self, key: Hashable) -> None:
        with self._mu:
            self.discarded.append(key)
            self.jobs.pop(key, None)
            self.done.pop(key, None)

    # the test's controls
    def complete(self, key: Hashable) -> Finished:
        """Run the job of ``key`` now; keep its result and wake its item."""
        with self._mu:
            job = self.jobs[key]
        try:
            fin = Finished(job.tag, value=job.fn())
        except Exception as err:
            fin = Finished(job.tag, error=err)
        with self._mu:
            if self.jobs.get(key) is job:  # not discarded meanwhile
                del self.jobs[key]
                self.done[key] = fin
                self.woken.append(job.wake)
        if self._queue is not None:
            self._queue.add(job.wake)
        return fin
