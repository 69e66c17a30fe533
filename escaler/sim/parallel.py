"""Independent simulations on worker processes, or one after the other in this one.

A report simulates the same trace many times over (every policy, every point of a tuned sweep, the
fixed-fleet sweep, the oracle's calibration); the runs are pure functions of their inputs, so they
can run side by side and give the same results.

Contract of ``Workers(jobs, shared)`` (a context manager):

* ``submit(fn, *args)`` returns a ``concurrent.futures.Future`` of ``fn(*args)``. ``fn`` is a
  module-level function; it reads the experiment every task shares through ``shared()``.
* ``jobs`` 1: ``fn`` runs at once in this process (the future is done when ``submit`` returns),
  in the order submitted, exactly as a plain call would.
* ``jobs`` > 1: ``jobs`` worker processes started with ``fork`` once ``shared`` is set, so every
  worker inherits it (a trace of millions of requests is never pickled); ``args`` and results
  are pickled. A task's exception is raised by its ``result()``. Leaving the context waits for
  every task and stops the workers.
* ``parallel`` says which; a caller passes progress callbacks into a task only when it is False
  (a callback is not pickled, and two workers redrawing one terminal line would garble it).
* ``default_jobs()``: the CPUs this process may use, at most ``MAX_DEFAULT_JOBS``.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["MAX_DEFAULT_JOBS", "Workers", "default_jobs", "shared"]

MAX_DEFAULT_JOBS = 8

T = TypeVar("T")

# what every task reads (set by Workers before any worker is forked)
_SHARED: Any = None


def shared() -> Any:
    """The object the current ``Workers`` shares with its tasks."""
    if _SHARED is None:
        raise RuntimeError("escaler.sim.parallel.shared(): no Workers context is open")
    return _SHARED


def default_jobs() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    return max(1, min(MAX_DEFAULT_JOBS, n))


class Workers:
    """See the module docstring."""

    def __init__(self, jobs: int, shared_obj: Any) -> None:
        if jobs < 1:
            raise ValueError(f"jobs: must be >= 1, got {jobs}")
        self.jobs = jobs
        self._shared = shared_obj
        self._pool: ProcessPoolExecutor | None = None
        self._previous: Any = None

    @property
    def parallel(self) -> bool:
        return self.jobs > 1

    def __enter__(self) -> Workers:
        global _SHARED
        self._previous, _SHARED = _SHARED, self._shared
        if self.parallel:
            self._pool = ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("fork"))
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        global _SHARED
        try:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=err is not None)
        finally:
            self._pool = None
            _SHARED = self._previous

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        if self._pool is not None:
            return self._pool.submit(fn, *args)
        done: Future[T] = Future()
        try:
            done.set_result(fn(*args))
        except Exception as err:  # handed to the caller through result(), as a worker's would be
            done.set_exception(err)
        return done
