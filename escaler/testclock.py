"""A test-only clock a test steps forward through a file: ``escaler manager --unsafe-test-clock-file``.

An end-to-end test cannot wait for the wall clock to reach a minute boundary (a cron schedule's
granularity) and still be fast; it moves the manager's clock instead. Nothing in production
builds one: the manager's only way to it is the ``--unsafe-test-clock-file`` flag, which logs a
WARNING at start and on every step (``escaler.cli.manager``).

Contract:

* ``SteppedClock(base, offset)`` is a ``Clock`` (``escaler.clock``) running ``offset`` seconds
  ahead of ``base``: ``monotonic() = base.monotonic() + offset`` and ``now() = base.now() +
  offset``. Both move by the same amount, so a delay computed from wall times (a Tidal's next
  transition) and waited on the monotonic clock (the delaying queue) stays consistent.
* The offset only moves forward: ``advance_to(offset)`` refuses a smaller offset (and NaN, ±inf)
  with ``ValueError`` and leaves the clock as it was; an equal one is a no-op. A larger one wakes
  every thread parked in this clock's ``wait()`` or ``sleep()``, which then recomputes its
  deadline on the new time (the ``Clock`` contract allows early returns; every caller re-checks
  in a loop). A waiter that computed its timeout from a read of this clock taken before a step
  (on the same thread) returns at once instead of parking on the stale timeout.
* ``sleep(seconds, stop)`` wakes at once for a step; a ``threading.Event`` cannot notify a
  condition, so a sleeper looks at its ``stop`` every ``STOP_POLL_SECONDS`` of the base clock's
  time (real time, wherever this runs outside unit tests).
* ``ClockFile(path, clock)`` is the file a test writes: its whole content is the offset, a number
  of seconds >= 0 (``read_offset``). ``ClockFile.open`` reads it once, at start (a missing file or
  a bad offset raises ``ValueError``, so the command refuses to start); then one daemon thread per
  process (``start()``) polls it every ``POLL_SECONDS`` of real time and steps the clock to a
  larger offset (logged at WARNING with the new offset). A smaller offset, garbage or a missing
  file is refused with one ERROR line naming the file and the rule (once per distinct content), and
  never applied; the clock keeps its offset. A test writes the file through a rename so the
  thread never reads half of it.

With ``--leader-elect``, a step longer than the lease's renew deadline lapses the lease (the
manager's fence measures it on this clock), and the manager exits as on any lost lease.

This module imports nothing of escaler but ``escaler.clock``.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from escaler.clock import Clock

__all__ = ["POLL_SECONDS", "STOP_POLL_SECONDS", "ClockFile", "SteppedClock", "read_offset"]

# how often (real seconds) the ClockFile thread reads the file: a step reaches the manager this late
POLL_SECONDS = 0.05
# how often (base-clock seconds) a sleeper with a stop event looks at it
STOP_POLL_SECONDS = 0.05
# the offset file's rule, quoted by every refusal
RULE = "the file holds one number of seconds >= 0, and the offset only moves forward"

_log = logging.getLogger("escaler.testclock")


@dataclass(eq=False)
class _Parked:
    # the condition a thread waits on in wait() or sleep(); a step notifies it
    cond: threading.Condition


class _Seen(threading.local):
    # the step generation this thread last read the time at (-1: never read it)
    generation: int = -1


class SteppedClock:
    """``base`` plus an offset that only moves forward; see the module docstring."""

    def __init__(self, base: Clock, offset: float = 0.0) -> None:
        _check(offset)
        self._base = base
        # (generation, offset), replaced as a whole under _lock so a reader needs no lock;
        # generation counts the steps (+1 each), offset only increases
        self._state: tuple[int, float] = (0, float(offset))
        # guards _state's replacement and _parked; never held while notifying a parked condition
        self._lock = threading.Lock()
        # the threads parked in wait()/sleep() right now, one entry each
        self._parked: list[_Parked] = []
        # per thread: the generation of its last read of this clock
        self._seen = _Seen()

    @property
    def offset(self) -> float:
        return self._state[1]

    def advance_to(self, offset: float) -> bool:
        """Move the offset to ``offset`` and wake every parked thread; False (nothing done) when it
        equals the current offset; ``ValueError`` when it is smaller, NaN or infinite."""
        _check(offset)
        with self._lock:
            generation, current = self._state
            if offset < current:
                raise ValueError(f"offset {offset:g} s is less than the current {current:g} s: {RULE}")
            if offset == current:
                return False
            self._state = (generation + 1, float(offset))
            parked = list(self._parked)
        for p in parked:
            with p.cond:
                p.cond.notify_all()
        return True

    def monotonic(self) -> float:
        generation, offset = self._state
        self._seen.generation = generation
        return self._base.monotonic() + offset

    def now(self) -> datetime:
        generation, offset = self._state
        self._seen.generation = generation
        return self._base.now() + timedelta(seconds=offset)

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        if timeout is None:
            self._base.wait(cond, None)  # no deadline: a step changes nothing for it
            return
        p = _Parked(cond)
        with self._lock:
            generation = self._state[0]
            seen, self._seen.generation = self._seen.generation, generation
            if seen not in (-1, generation):
                return  # stepped since this thread read the time: its timeout is stale
            self._parked.append(p)
        try:
            self._base.wait(cond, timeout)
        finally:
            with self._lock:
                self._parked.remove(p)

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        if stop is not None and stop.is_set():
            return True
        deadline = self.monotonic() + max(0.0, seconds)
        p = _Parked(threading.Condition())
        with p.cond:
            with self._lock:
                self._parked.append(p)
            try:
                # registered before the first read below and p.cond held throughout: a step
                # notifies only once this thread is parked, so none is missed
                while True:
                    if stop is not None and stop.is_set():
                        return True
                    left = deadline - self.monotonic()
                    if left <= 0:
                        return False
                    self._base.wait(p.cond, left if stop is None else min(left, STOP_POLL_SECONDS))
            finally:
                with self._lock:
                    self._parked.remove(p)


def _check(offset: float) -> None:
    if not math.isfinite(offset):
        raise ValueError(f"offset {offset!r} is not a finite number of seconds: {RULE}")
    if offset < 0:
        raise ValueError(f"offset {offset:g} s is negative: {RULE}")


def read_offset(path: str | Path) -> float:
    """The offset in the file at ``path``; ``ValueError`` naming the file and the rule when it is
    missing, unreadable, not a number, negative, NaN or infinite."""
    return _parse(str(path), _read(path))


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the test clock file ({exc.strerror or exc}): {RULE}") from None


def _parse(path: str, text: str) -> float:
    try:
        offset = float(text.strip())
    except ValueError:
        raise ValueError(f"{path}: {_quote(text)} is not a number of seconds: {RULE}") from None
    try:
        _check(offset)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return offset


def _quote(text: str, limit: int = 60) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


class ClockFile:
    """The offset file of a ``SteppedClock``, polled by one thread; see the module docstring."""

    def __init__(self, path: str | Path, clock: SteppedClock, *, poll_seconds: float = POLL_SECONDS) -> None:
        if not poll_seconds > 0:
            raise ValueError(f"ClockFile.poll_seconds must be > 0, got {poll_seconds}")
        self.path = str(path)
        self.clock = clock
        self.poll_seconds = poll_seconds
        # the content (or read error) last looked at, so an unchanged file costs no parse and a bad
        # one is refused in one log line, not one per poll
        self._last: str | None = None
        # set by stop(); the thread exits at its next poll
        self._stop = threading.Event()
        # the polling thread, once start()ed
        self._thread: threading.Thread | None = None

    @classmethod
    def open(cls, path: str | Path, base: Clock, *, poll_seconds: float = POLL_SECONDS) -> ClockFile:
        """A ``SteppedClock`` over ``base`` at the offset the file holds now, and its watcher (not
        started); ``ValueError`` (naming the file and the rule) when the file has no valid offset."""
        text = _read(path)
        watcher = cls(path, SteppedClock(base, _parse(str(path), text)), poll_seconds=poll_seconds)
        watcher._last = text
        return watcher

    def poll_once(self) -> bool:
        """Read the file and step the clock to its offset; True when the clock moved."""
        try:
            text = Path(self.path).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            text = f"<unreadable: {exc.strerror or exc}>"
            if text != self._last:
                self._last = text
                _log.error("test clock file %s cannot be read (%s); refused, offset stays %g s: %s",
                           self.path, exc.strerror or exc, self.clock.offset, RULE,
                           extra={"clockFile": self.path, "offset": self.clock.offset})
            return False
        if text == self._last:
            return False
        self._last = text
        before = self.clock.offset
        try:
            offset = _parse(self.path, text)
            try:
                moved = self.clock.advance_to(offset)
            except ValueError as exc:
                raise ValueError(f"{self.path}: {exc}") from None
        except ValueError as exc:
            _log.error("test clock file refused, offset stays %g s: %s", before, exc,
                       extra={"clockFile": self.path, "offset": before})
            return False
        if moved:
            _log.warning("UNSAFE TEST CLOCK stepped: offset %g s (+%g s); this manager's time is now %s",
                         offset, offset - before, self.clock.now().isoformat(),
                         extra={"clockFile": self.path, "offset": offset})
        return moved

    def start(self) -> None:
        """Start the polling thread (once)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="unsafe-test-clock", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the polling thread (it exits within one poll; a daemon, so never waited for)."""
        self._stop.set()

    def _run(self) -> None:
        # Real time, not self.clock: the file is written by a process living in real time, and a
        # wait on the clock this thread steps would never end under a FakeClock base.
        while not self._stop.wait(self.poll_seconds):
            try:
                self.poll_once()
            except Exception:  # keep watching: a test that steps again must still be served
                _log.exception("test clock file %s: poll failed", self.path)
