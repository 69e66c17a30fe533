"""The simulator's progress reports on a stream (stderr), readable on a terminal and in a CI log.

Contract of ``reporter(mode, stream, monotonic)``: returns the ``Progress`` factory
``run_experiment`` takes (``label -> update(done, total)``), or None for ``off``:

* ``mode`` is one of ``MODES``: ``auto`` is ``bar`` when ``stream.isatty()``, else ``lines``;
* ``bar`` redraws one line in place (``\\r``) at most once per ``BAR_INTERVAL_S`` seconds, then
  ends the finished bar with a newline;
* ``lines`` writes plain lines, never a ``\\r``: one only when both ``LINE_INTERVAL_S`` seconds
  and ``LINE_FRACTION`` of the work have passed since the last one (whichever is rarer), so a run
  of any length writes at most ``1 / LINE_FRACTION`` of them, plus the final line;
* either mode always writes the final state once, when ``done >= total``; later updates of that
  label are ignored;
* time comes only from ``monotonic`` (default ``time.monotonic``), so tests drive it without
  sleeping.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["BAR_INTERVAL_S", "LINE_FRACTION", "LINE_INTERVAL_S", "MODES", "reporter", "resolve_mode"]

MODES = ("auto", "bar", "lines", "off")
# off a terminal: a line at most this often, and only after this share of the work
LINE_INTERVAL_S = 10.0
LINE_FRACTION = 0.1
# on a terminal: at most 10 redraws a second
BAR_INTERVAL_S = 0.1
BAR_WIDTH = 30
LABEL_WIDTH = 14

Update = Callable[[int, int], None]
Clock = Callable[[], float]


def resolve_mode(mode: str, stream: TextIO) -> str:
    """``auto`` becomes ``bar`` on a terminal and ``lines`` elsewhere; other modes stay."""
    if mode not in MODES:
        raise ValueError(f"progress mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode != "auto":
        return mode
    isatty = getattr(stream, "isatty", None)
    return "bar" if isatty is not None and isatty() else "lines"


def reporter(mode: str = "auto", stream: TextIO | None = None,
             monotonic: Clock = time.monotonic) -> Callable[[str], Update] | None:
    out = sys.stderr if stream is None else stream
    resolved = resolve_mode(mode, out)
    if resolved == "off":
        return None
    if resolved == "bar":
        return lambda label: _Bar(label, out, monotonic)
    return lambda label: _Lines(label, out, monotonic)


def _share(done: int, total: int) -> float:
    return 1.0 if total <= 0 else min(max(done / total, 0.0), 1.0)


def _status(label: str, done: int, total: int, elapsed: float) -> str:
    return f"{label:<{LABEL_WIDTH}} {done}/{total} req {100 * _share(done, total):3.0f} % {elapsed:.0f} s"


def _bar_text(label: str, done: int, total: int, elapsed: float) -> str:
    filled = int(BAR_WIDTH * _share(done, total))
    return (f"{label:<{LABEL_WIDTH}} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
            f"{done}/{total} req {100 * _share(done, total):3.0f} % {elapsed:.0f} s")


class _Lines:
    """Plain lines, no ``\\r``: after both LINE_INTERVAL_S and LINE_FRACTION of the work, and the last."""

    def __init__(self, label: str, out: TextIO, monotonic: Clock) -> None:
        self.label, self.out, self.monotonic = label, out, monotonic
        self.start = self.last_t = monotonic()
        self.last_done = 0
        self.finished = False

    def __call__(self, done: int, total: int) -> None:
        if self.finished:
            return
        now = self.monotonic()
        if done >= total:
            self.finished = True
            self.out.write(f"{_status(self.label, done, total, now - self.start)} done\n")
        elif now - self.last_t >= LINE_INTERVAL_S and done - self.last_done >= LINE_FRACTION * total:
            self.last_t, self.last_done = now, done
            self.out.write(_status(self.label, done, total, now - self.start) + "\n")
        else:
            return
        self.out.flush()


class _Bar:
    """One line redrawn in place at most once per BAR_INTERVAL_S; the finished bar stays."""

    def __init__(self, label: str, out: TextIO, monotonic: Clock) -> None:
        self.label, self.out, self.monotonic = label, out, monotonic
        self.start = monotonic()
        self.last_t: float | None = None
        self.width = 0
        self.finished = False

    def __call__(self, done: int, total: int) -> None:
        if self.finished:
            return
        now = self.monotonic()
        final = done >= total
        if not final and self.last_t is not None and now - self.last_t < BAR_INTERVAL_S:
            return
        text = _bar_text(self.label, done, total, now - self.start)
        pad = " " * max(0, self.width - len(text))  # wipe what a longer earlier draw left
        self.last_t, self.width = now, len(text)
        self.out.write(f"\r{text}{pad}")
        if final:
            self.finished = True
            self.out.write("\n")
        self.out.flush()
