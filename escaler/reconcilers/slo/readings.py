"""An SLO requirement's PromQL signals, read off the reconcile workers, at most once per poll interval.

``SignalReader.read(req, tag, namespace, queries, now)`` answers one of:

* ``Readings(samples, at)``: one ``Sample`` per signal name, read at monotonic time ``at`` for this
  ``tag`` (the requirement's uid and generation: a spec change — new PromQL — never reuses readings
  made for the old one). Fresh while ``now - at < interval``; ``due_in`` says when the next poll is;
* ``PENDING``: the first read for this tag is in flight on the outbound executor; its completion
  enqueues the requirement, whose next reconcile consumes it;
* ``BUSY``: the namespace's outbound queue is full and there are no earlier readings: the
  requirement is requeued after ``BUSY_RETRY_SECONDS`` (nothing is decided on a read that did not
  happen).

When the readings are due, a new read is submitted and the previous readings (same tag) are
returned meanwhile: a reconcile woken by a target change is not held up by a poll.

The read (``query(promql)``, bound by ``setup_slo`` to ``escaler.signals.prometheus.query_prometheus``
on the manager's hardened ``HttpClient``) goes through the same outbound path as ElasticScaler's
ExternalServer metrics: ``--allowed-endpoint-hosts``, the SSRF address policy of
``--allow-endpoint-networks``, no redirects, a total deadline per query (``QUERY_TIMEOUT_SECONDS``),
a capped body, and no echo of the answer's bytes. The queries of one requirement run one after the
other in one job (at most ``len(queries) x QUERY_TIMEOUT_SECONDS``), on a ``KeyedExecutor`` bounded
per namespace; a query that raises becomes an error sample, never an exception in a worker.

What is remembered (the last readings per requirement) is dropped by ``forget`` when the
requirement goes.

``signal_value(samples, name)`` is how a sizer reads one signal of a ``Readings``: its value, or why it
is missing (a read that failed as a whole is stored under ``ALL_SIGNALS`` and counts for every signal).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from escaler.runtime.executor import Executor, Submitted
from escaler.runtime.types import Request
from escaler.signals.sample import Sample

__all__ = ["ALL_SIGNALS", "BUSY", "BUSY_RETRY_SECONDS", "PENDING", "QUERY_TIMEOUT_SECONDS", "Readings",
           "SignalReader", "read_all", "signal_value"]

# the key of a failure that took every signal of a read (the read itself failed)
ALL_SIGNALS = "*"

# total deadline of one PromQL query, seconds
QUERY_TIMEOUT_SECONDS = 5.0

# a requirement whose read found the namespace's outbound queue full is retried after this long
BUSY_RETRY_SECONDS = 5.0

# the first read of this tag is in flight
PENDING = object()
# the namespace's outbound queue is full
BUSY = object()

Query = Callable[[str], Sample]


@dataclass(frozen=True)
class Readings:
    """The samples of one read."""

    # signal name → sample (value or error)
    samples: Mapping[str, Sample]
    # monotonic time the read was taken in (its completion woke the requirement at once)
    at: float
    # seconds until the next read is due (>= 0); None: a read is in flight and its completion wakes
    # the requirement
    due_in: float | None = None


def signal_value(samples: Mapping[str, Sample], name: str) -> tuple[float | None, str | None]:
    """``(value, None)`` of signal ``name``, or ``(None, why it is missing)`` (see the module docstring)."""
    s = samples.get(name) or samples.get(ALL_SIGNALS)
    if s is None:
        return None, "not read"
    return s.value, s.error


def read_all(query: Query, queries: Sequence[tuple[str, str]]) -> dict[str, Sample]:
    """Run each query in turn; an exception becomes that signal's error sample."""
    out: dict[str, Sample] = {}
    for name, promql in queries:
        try:
            out[name] = query(promql)
        except Exception as err:  # a bug or an unexpected failure: that signal is missing, say why
            out[name] = Sample.fail(f"query failed: {type(err).__name__}: {err}")
    return out


@dataclass(frozen=True)
class _Held:
    tag: Hashable
    samples: Mapping[str, Sample]
    at: float


class SignalReader:
    """See the module docstring. Thread-safe."""

    def __init__(self, executor: Executor, query: Query, interval: float, kind: str) -> None:
        if not math.isfinite(interval) or interval <= 0:
            raise ValueError(f"SignalReader.interval: must be a finite number > 0, got {interval!r}")
        # runs the reads off the reconcile workers; completions enqueue the requirement
        self._executor = executor
        # one blocking, bounded PromQL query
        self._query = query
        # seconds between two reads of one requirement; fixed
        self.interval = interval
        # the kind, part of the executor key (two kinds may share names)
        self._kind = kind
        # guards _held
        self._mu = threading.Lock()
        # requirement → its last readings (for the tag they were made for); dropped by forget
        self._held: dict[Request, _Held] = {}

    def _key(self, req: Request) -> Hashable:
        return ("slo-signals", self._kind, req.namespace, req.name)

    def _consume(self, req: Request, tag: Hashable, now: float) -> _Held | None:
        """Take a finished read (made for ``tag``) as this requirement's readings, at ``now`` (its
        completion enqueued the requirement, so that is within a reconcile of the read's end)."""
        fin = self._executor.take(self._key(req))
        with self._mu:
            if fin is not None and fin.tag == tag:
                samples = fin.value if fin.error is None else {
                    ALL_SIGNALS: Sample.fail(f"signal read failed: {fin.error}")}
                self._held[req] = _Held(tag, dict(samples), now)
            held = self._held.get(req)
        return held if held is not None and held.tag == tag else None

    def read(self, req: Request, tag: Hashable, namespace: str, queries: Sequence[tuple[str, str]],
             now: float) -> Readings | Any:
        held = self._consume(req, tag, now)
        if held is not None and now - held.at < self.interval:
            return Readings(held.samples, held.at, self.interval - (now - held.at))
        key = self._key(req)
        if not self._executor.pending(key):
            query, qs = self._query, tuple(queries)
            submitted = self._executor.submit(key, namespace, tag, lambda: read_all(query, qs), req)
            if submitted == Submitted.FULL:
                return Readings(held.samples, held.at, BUSY_RETRY_SECONDS) if held is not None else BUSY
            fresh = self._consume(req, tag, now)  # an inline executor has finished already
            if fresh is not None and fresh is not held:
                return Readings(fresh.samples, fresh.at, max(0.0, self.interval - (now - fresh.at)))
        # in flight: its completion enqueues the requirement (due_in None: no timed requeue)
        return Readings(held.samples, held.at, None) if held is not None else PENDING

    def forget(self, req: Request) -> None:
        self._executor.discard(self._key(req))
        with self._mu:
            self._held.pop(req, None)
