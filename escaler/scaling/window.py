"""Sample windows (docs/reference/annotations.md): the in-memory metric samples of one scaler, and their
aggregation.

Contract:

* Time is an argument. Every method takes ``now`` — monotonic seconds from the caller's clock
  (``Clock.monotonic()``) — and nothing here reads a clock, so the simulator and the tests step
  time by passing numbers.
* ``SampleWindow.add(now, value)`` records one sample. NaN, ±Inf, booleans and non-numbers never
  enter a window: ``add`` raises ``ValueError`` (the collector reports the metric as unusable
  instead). Samples are kept ordered by time (a sample stamped earlier than the newest one is
  inserted in place, after any sample with the same time).
* ``gc(now, window_seconds, gc_factor)`` drops samples older than ``window_seconds * gc_factor``
  (``metrics.windowSeconds`` * ``metrics.gcFactor``), i.e. keeps those with
  ``time > now - window * gcFactor``. As a backstop against a caller that never collects, a window
  never holds more than ``MAX_SAMPLES`` samples (the oldest go first).
* ``aggregate(now, window_seconds, aggregation, missing_policy, outlier_filter, outlier_threshold)``
  reduces the samples *in the window* — ``now - window_seconds < time <= now`` (the last
  ``window_seconds`` seconds; a sample stamped after ``now`` is not counted) — to one number:

  - ``Average`` (arithmetic mean), ``Max``, ``Min``, ``Latest`` (the newest sample);
  - ``P50``, ``P90``, ``P95``, ``P99``: **nearest-rank** percentiles — the smallest sample such
    that at least p % of the samples are <= it, i.e. ``sorted[ceil(p/100 * n) - 1]``. Nearest
    rank always returns a value that was observed (no interpolated ``4.7`` requests waiting),
    and P50 of an even count is the lower middle sample.

  With no sample in the window, the ``missingDataPolicy`` decides: ``Ignore`` → ``None`` (the
  metric is unusable this sync; an algorithm given ``None`` raises ``NoDecision``),
  ``TreatAsZero`` → ``0.0``, ``Fail`` → ``NoDecision`` naming the metric.
* The outlier filter (``metrics.enableOutlierFilter``) runs before the aggregation, over the
  samples in the window: with ``median`` the median and ``MAD`` the median absolute deviation
  ``median(|x - median|)`` (raw, not scaled by 1.4826), a sample is dropped when
  ``|x - median| > threshold * MAD``. When ``MAD`` is 0 (half or more of the samples are equal)
  every sample is kept: nothing can be called an outlier against a zero spread; with fewer than
  three samples nothing is dropped either. The filter never turns data into missing data (should
  it reject every sample, which a threshold below 1 can do, all are kept); with it, ``Latest`` is
  the newest sample that survived.

``MetricWindows`` holds one ``SampleWindow`` per metric for one scaler, with the scaler's
``WindowPolicy`` (built from its parsed annotations) applied on ``aggregate``, ``panic`` and ``gc``.
Windows are keyed by the metric's *identity*, a key the caller chooses (metricsync uses the
metric's index in the spec plus a hash of its canonical spec): two metrics that share a display
name (two External ``queue_depth`` with different selectors) never share a series, and a spec
edit starts a fresh one. ``aggregate(..., metric=<display name>)`` names the metric in messages.
``copy()`` gives an independent copy (a sync works on a copy and hands it back: see metricsync).

**The panic window** (``metrics.panicWindowPercentage``, default 10: ``panic_window_seconds =
window_seconds * 10 %`` = 6 s). The main (*stable*) window smooths noise and scale-down, but an
``Average`` over 60 s dilutes a step: load 40 → 120 at AverageValue 10 (4 → 12 replicas) polled every
2 s moves the 60 s average by 80/30 ≈ 2.7 per poll, so the stable recommendation alone creeps
4→5→6→7→8→10→12 over ~50 s (measured: 51 s, 7 changes), where the HPA, deciding on the latest
sample, is at 12 in one sync. And on the way down it creeps the same way, in ~10 % steps
(12→11→10→9→8→7→6: six changes for one step of load). So, as Knative's KPA does, a short window is
read alongside the stable one, and the recommendation is chosen by two rules:

* ``panic(key, now)`` is the **newest sample in the panic window** ``(now - panic_window_seconds,
  now]`` (the newest that survives the outlier filter over those samples, when it is enabled;
  ``None`` when there is none, so a stale sample — a read that failed this sync — never panics).
  The newest sample is exactly what the HPA decides on, so escaler is never slower than the HPA to
  follow a rise. Knative's average over the panic window reads [40, 40, 120] as 67, one poll behind;
  a maximum would be as fast but would keep one outlier for the whole window and let the
  algorithm's 2x step cap compound on it (4→8→16→32 on a single bad sample).
* ``peak(key, now)`` is the **largest sample in the stable window** (after the outlier filter):
  the busiest moment the window remembers.

``choose(current, stable, panic, peak)`` combines the algorithm's recommendations
(``AlgorithmResult``) on the stable aggregates, on the panic values and on the peaks (pure):

1. **the panic window takes over a scale-up** when its count is above both the current count and
   the stable one (the algorithm's tolerance band has already kept it at ``current`` for a rise
   inside the band): ``source == PANIC``. The takeover is per sync: it lasts as long as the newest
   samples ask for more;
2. **a scale-down waits for the whole window**: when the stable count is below the current one but
   the peak's count is not (some sample of the last ``windowSeconds`` still needed the current
   count), the current count is held (``source == SETTLING``). This is what makes the scale-down
   one change, to where the window has settled (12 → 6 one window after the step, not six 10 %
   steps), and what keeps the count after a panic scale-up while the stable average is still
   catching up (Knative's "no scale-down while panicking", with no extra state: the surge samples
   are in the window for one window length). The stable window still decides *where* to go; the
   panic window never drives a scale-down;
3. otherwise the stable recommendation stands (``source == STABLE``), a stable scale-up included.

Without a panic value the panic rule does not apply; without a peak the settling rule does not
(the panic window turned off with ``panicWindowPercentage: 0`` turns both off: the stable aggregate
alone decides, as before). The pipeline's scale-down stabilization (default 300 s) applies to
whatever is chosen, after it. Measured on the issue's series (load 40 → 120 → 60 → 20 at AverageValue 10,
±8 % noise, a sample every 2 s, 10 s scale-down stabilization; ``tests/unit/test_scaling_panic.py``
replays it), over 40 seeded series: 12 replicas 2 s after the step in every one (two polls: apa's
default ``scaleUpRate`` 2 makes 4 → 8 → 12), and exactly 4 replica changes in every one (two up, one
per step down) against 3 to 6 (mean 4.65) for an uncapped HPA model deciding on the latest sample.
The price: a scale-down comes one window later than the HPA model's (about 20 % more
replica-seconds on this series with a 10 s scale-down window; with the default 300 s stabilization,
a drop is followed after 360 s instead of 300 s). A user who wants a faster scale-down shortens
``windowSeconds`` (the panic window and the wait scale with it).

Neither class is thread-safe: a scaler's windows have one owner, its reconcile, which the
workqueue never runs concurrently for the same key. Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from statistics import median

from escaler.scaling.algorithm import AlgorithmResult, NoDecision
from escaler.scaling.annotations import (
    AGGREGATION_TYPES,
    DEFAULTS,
    MISSING_DATA_POLICIES,
    ScalerAnnotations,
)

__all__ = [
    "AVERAGE",
    "FAIL",
    "IGNORE",
    "LATEST",
    "MAX",
    "MAX_SAMPLES",
    "MIN",
    "P50",
    "P90",
    "P95",
    "P99",
    "PANIC",
    "SETTLING",
    "SOURCES",
    "STABLE",
    "TREAT_AS_ZERO",
    "MetricWindows",
    "SampleWindow",
    "WindowChoice",
    "WindowPolicy",
    "choose",
    "filter_outliers",
    "percentile",
]

AVERAGE, MAX, MIN, P50, P90, P95, P99, LATEST = AGGREGATION_TYPES
IGNORE, TREAT_AS_ZERO, FAIL = MISSING_DATA_POLICIES
# the percentile each P-aggregation selects
_PERCENTILES = {P50: 50.0, P90: 90.0, P95: 95.0, P99: 99.0}
# WindowChoice.source: which window the sync's recommendation comes from
STABLE = "stable"      # the main window
PANIC = "panic"        # the panic window took over a scale-up
SETTLING = "settling"  # a stable scale-down is held until the whole stable window asks for it
SOURCES = (STABLE, PANIC, SETTLING)
# hard cap on one window's length: a 30 s poll keeps ~4 samples per 60 s window * gcFactor 2;
# even a 1 s poll with an hour-long window * 1 fits
MAX_SAMPLES = 4096


def _check_value(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"sample must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"sample must be finite, got {value!r}")
    return float(value)


def _check_time(now: float, what: str = "now") -> float:
    if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
        raise ValueError(f"{what} must be a finite number of seconds, got {now!r}")
    return float(now)


def _positive(value: float) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
        and value > 0


def _check_policy(
    window_seconds: float, aggregation: str, missing_policy: str, outlier_threshold: float
) -> None:
    if not _positive(window_seconds):
        raise ValueError(f"window_seconds must be a finite number > 0, got {window_seconds!r}")
    if aggregation not in AGGREGATION_TYPES:
        raise ValueError(f"aggregation must be one of {', '.join(AGGREGATION_TYPES)}, got {aggregation!r}")
    if missing_policy not in MISSING_DATA_POLICIES:
        raise ValueError(
            f"missing_policy must be one of {', '.join(MISSING_DATA_POLICIES)}, got {missing_policy!r}")
    if not _positive(outlier_threshold):
        raise ValueError(f"outlier_threshold must be a finite number > 0, got {outlier_threshold!r}")


def _check_gc(window_seconds: float, gc_factor: float) -> None:
    if not _positive(window_seconds):
        raise ValueError(f"window_seconds must be a finite number > 0, got {window_seconds!r}")
    if not (_positive(gc_factor) and gc_factor >= 1):
        raise ValueError(f"gc_factor must be a finite number >= 1, got {gc_factor!r}")


def percentile(values: Iterable[float], p: float) -> float:
    """Nearest-rank percentile ``p`` (0 < p <= 100) of a non-empty collection."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    if not 0 < p <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {p!r}")
    rank = math.ceil(p / 100 * len(ordered))
    return ordered[max(rank, 1) - 1]


def filter_outliers(values: list[float], threshold: float) -> list[float]:
    """``values`` without those beyond ``threshold * MAD`` from the median (order kept)."""
    if len(values) < 3:
        # one or two samples: the median sits on (or midway between) them; nothing stands out
        return list(values)
    center = median(values)
    mad = median(abs(v - center) for v in values)
    if mad == 0:
        return list(values)
    limit = threshold * mad
    kept = [v for v in values if abs(v - center) <= limit]
    # a threshold below 1 can reject even the middle samples; never turn data into missing data
    return kept or list(values)


class SampleWindow:
    """The samples of one metric; see the module docstring."""

    # no per-instance __dict__: one per metric of every scaler; the samples in two arrays of
    # doubles, 16 bytes a sample, not a list of (time, value) tuples at ~110 bytes a sample (issue
    # 30, memory per scaler). A double holds a Python float exactly: nothing read back changes.
    __slots__ = ("_t", "_v")

    def __init__(self) -> None:
        # sample times, ascending (ties in insertion order), and their values (every one finite),
        # index for index; at most MAX_SAMPLES long
        self._t = array("d")
        self._v = array("d")

    def __len__(self) -> int:
        return len(self._t)

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return iter(self.samples())

    def samples(self) -> tuple[tuple[float, float], ...]:
        """Every kept ``(time, value)``, oldest first."""
        return tuple(zip(self._t, self._v, strict=True))

    def add(self, now: float, value: float) -> None:
        """Record ``value`` observed at ``now``; ``ValueError`` for NaN, Inf or a non-number."""
        t = _check_time(now)
        v = _check_value(value)
        if not self._t or self._t[-1] <= t:
            self._t.append(t)
            self._v.append(v)
        else:
            i = bisect.bisect_right(self._t, t)
            self._t.insert(i, t)
            self._v.insert(i, v)
        if len(self._t) > MAX_SAMPLES:
            self._drop(len(self._t) - MAX_SAMPLES)

    def _drop(self, oldest: int) -> None:
        del self._t[:oldest]
        del self._v[:oldest]

    def copy(self) -> SampleWindow:
        """An independent copy (O(samples))."""
        clone = SampleWindow()
        clone._t = array("d", self._t)
        clone._v = array("d", self._v)
        return clone

    def gc(self, now: float, window_seconds: float, gc_factor: float) -> int:
        """Drop samples older than ``window_seconds * gc_factor``; returns how many were dropped."""
        t = _check_time(now)
        _check_gc(window_seconds, gc_factor)
        cutoff = t - window_seconds * gc_factor
        # first index with time > cutoff
        keep_from = bisect.bisect_right(self._t, cutoff)
        self._drop(keep_from)
        return keep_from

    def _span(self, now: float, window_seconds: float) -> tuple[int, int]:
        t = _check_time(now)
        return bisect.bisect_right(self._t, t - window_seconds), bisect.bisect_right(self._t, t)

    def in_window(self, now: float, window_seconds: float) -> list[tuple[float, float]]:
        """The ``(time, value)`` pairs with ``now - window_seconds < time <= now``, oldest first."""
        lo, hi = self._span(now, window_seconds)
        return list(zip(self._t[lo:hi], self._v[lo:hi], strict=True))

    def values_in(self, now: float, window_seconds: float) -> list[float]:
        """The values of ``in_window``, oldest first."""
        lo, hi = self._span(now, window_seconds)
        return self._v[lo:hi].tolist()

    def _filtered(self, now: float, seconds: float, outlier_filter: bool, outlier_threshold: float,
                  ) -> list[float]:
        if not _positive(seconds):
            raise ValueError(f"seconds must be a finite number > 0, got {seconds!r}")
        values = self.values_in(now, seconds)
        return filter_outliers(values, outlier_threshold) if outlier_filter and values else values

    def newest(self, now: float, seconds: float, outlier_filter: bool = DEFAULTS.enable_outlier_filter,
               outlier_threshold: float = DEFAULTS.outlier_threshold) -> float | None:
        """The newest sample in ``(now - seconds, now]`` that survives the outlier filter (when
        enabled, over those samples); ``None`` when there is none. The panic aggregate."""
        values = self._filtered(now, seconds, outlier_filter, outlier_threshold)
        return values[-1] if values else None

    def peak(self, now: float, seconds: float, outlier_filter: bool = DEFAULTS.enable_outlier_filter,
             outlier_threshold: float = DEFAULTS.outlier_threshold) -> float | None:
        """The largest sample in ``(now - seconds, now]`` (after the outlier filter, when enabled);
        ``None`` when there is none."""
        values = self._filtered(now, seconds, outlier_filter, outlier_threshold)
        return max(values) if values else None

    def aggregate(
        self,
        now: float,
        window_seconds: float,
        aggregation: str = DEFAULTS.aggregation_type,
        missing_policy: str = DEFAULTS.missing_data_policy,
        outlier_filter: bool = DEFAULTS.enable_outlier_filter,
        outlier_threshold: float = DEFAULTS.outlier_threshold,
        *,
        metric: str = "metric",
    ) -> float | None:
        """The window's aggregate; see the module docstring. ``metric`` names it in ``NoDecision``."""
        _check_policy(window_seconds, aggregation, missing_policy, outlier_threshold)
        values = self.values_in(now, window_seconds)
        if not values:
            if missing_policy == TREAT_AS_ZERO:
                return 0.0
            if missing_policy == FAIL:
                raise NoDecision(
                    f"metric {metric!r}: no sample in the last {window_seconds:g}s "
                    f"(missingDataPolicy {FAIL})")
            return None
        if outlier_filter:
            values = filter_outliers(values, outlier_threshold)
        return _reduce(values, aggregation)


def _reduce(values: list[float], aggregation: str) -> float:
    if aggregation == AVERAGE:
        return math.fsum(values) / len(values)
    if aggregation == MAX:
        return max(values)
    if aggregation == MIN:
        return min(values)
    if aggregation == LATEST:
        return values[-1]
    return percentile(values, _PERCENTILES[aggregation])


@dataclass(frozen=True)
class WindowPolicy:
    """How a scaler's windows are kept and aggregated (the ``metrics.*`` annotations,
    docs/reference/annotations.md)."""

    # the aggregation window, seconds; > 0
    window_seconds: float = DEFAULTS.window_seconds
    # samples are kept for window_seconds * gc_factor; >= 1
    gc_factor: float = DEFAULTS.gc_factor
    # one of AGGREGATION_TYPES
    aggregation: str = DEFAULTS.aggregation_type
    # one of MISSING_DATA_POLICIES
    missing_policy: str = DEFAULTS.missing_data_policy
    # drop samples beyond outlier_threshold * MAD before aggregating
    outlier_filter: bool = DEFAULTS.enable_outlier_filter
    # > 0
    outlier_threshold: float = DEFAULTS.outlier_threshold
    # the panic window, seconds; 0 = off, else in (0, window_seconds]; None (the default) = the
    # default percentage of window_seconds (10 %: 6 s of 60 s)
    panic_window_seconds: float | None = None

    def __post_init__(self) -> None:
        _check_policy(self.window_seconds, self.aggregation, self.missing_policy, self.outlier_threshold)
        _check_gc(self.window_seconds, self.gc_factor)
        if self.panic_window_seconds is None:
            object.__setattr__(self, "panic_window_seconds",
                               self.window_seconds * DEFAULTS.panic_window_percentage / 100)
        p = self.panic_window_seconds
        if not (isinstance(p, int | float) and not isinstance(p, bool) and math.isfinite(p)
                and 0 <= p <= self.window_seconds):
            raise ValueError(f"panic_window_seconds must be a number in [0, window_seconds "
                             f"({self.window_seconds:g})], got {p!r}")

    @classmethod
    def from_annotations(cls, annotations: ScalerAnnotations) -> WindowPolicy:
        """The policy a scaler's parsed annotations give (defaults for what they leave out)."""
        return cls(
            window_seconds=annotations.window_seconds,
            gc_factor=annotations.gc_factor,
            aggregation=annotations.aggregation_type,
            missing_policy=annotations.missing_data_policy,
            outlier_filter=annotations.enable_outlier_filter,
            outlier_threshold=annotations.outlier_threshold,
            panic_window_seconds=annotations.window_seconds * annotations.panic_window_percentage / 100,
        )


class MetricWindows:
    """One scaler's sample windows, keyed by metric identity; see the module docstring."""

    # no per-instance __dict__: one per scaler (issue 30, memory per scaler); the first metric's
    # window is kept inline and a dict made only for a second (most scalers read one metric: a dict
    # of one entry is ~180 bytes a scaler)
    __slots__ = ("_key", "_more", "_window", "policy")

    def __init__(self, policy: WindowPolicy | None = None) -> None:
        # applied by aggregate(), panic() and gc(); replaced when the scaler's annotations change
        self.policy: WindowPolicy = policy or WindowPolicy()
        # one metric key and its window inline (None: no window), further keys in _more (None until
        # a second key); a window is never empty after gc(), and no key is in both
        self._key: str | None = None
        self._window: SampleWindow | None = None
        self._more: dict[str, SampleWindow] | None = None

    def _items(self) -> list[tuple[str, SampleWindow]]:
        inline = [] if self._key is None or self._window is None else [(self._key, self._window)]
        return inline + list(self._more.items()) if self._more else inline

    def _get(self, key: str) -> SampleWindow | None:
        if key == self._key:
            return self._window
        return self._more.get(key) if self._more else None

    def _set(self, key: str, window: SampleWindow) -> None:
        if self._key is None or key == self._key:
            self._key, self._window = key, window
        else:
            if self._more is None:
                self._more = {}
            self._more[key] = window

    def _remove(self, key: str) -> None:
        if key == self._key:
            self._key = self._window = None
            if self._more:  # another key takes the inline place
                self._key = next(iter(self._more))
                self._window = self._more.pop(self._key)
        elif self._more:
            self._more.pop(key, None)
        if not self._more:
            self._more = None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._get(key) is not None

    def __len__(self) -> int:
        return (self._key is not None) + (len(self._more) if self._more else 0)

    def names(self) -> list[str]:
        """The metric keys with samples, sorted."""
        return sorted(key for key, _ in self._items())

    def copy(self, policy: WindowPolicy | None = None) -> MetricWindows:
        """An independent copy (the samples are copied; O(samples)), under ``policy`` if given."""
        other = MetricWindows(policy or self.policy)
        for key, window in self._items():
            other._set(key, window.copy())
        return other

    def window(self, key: str) -> SampleWindow:
        """The window of ``key`` (created empty on first use)."""
        window = self._get(key)
        if window is None:
            window = SampleWindow()
            self._set(key, window)
        return window

    def add(self, key: str, now: float, value: float) -> None:
        """Record a sample of ``key``; ``ValueError`` for NaN, Inf or a non-number."""
        _check_value(value)
        self.window(key).add(now, value)

    def aggregate(self, key: str, now: float, *, metric: str | None = None) -> float | None:
        """``key``'s aggregate under ``policy``; a metric never sampled counts as missing.
        ``metric`` (default: the key) names the metric in a ``NoDecision``."""
        p = self.policy
        window = self._get(key) or SampleWindow()
        return window.aggregate(now, p.window_seconds, p.aggregation, p.missing_policy,
                                p.outlier_filter, p.outlier_threshold, metric=metric or key)

    def panic(self, key: str, now: float) -> float | None:
        """``key``'s panic value: the newest sample of the panic window; ``None`` when the panic window
        is off or holds no sample (missing data never panics, whatever the missing-data policy)."""
        p = self.policy
        window = self._get(key)
        if not p.panic_window_seconds or window is None:
            return None
        return window.newest(now, p.panic_window_seconds, p.outlier_filter, p.outlier_threshold)

    def peak(self, key: str, now: float) -> float | None:
        """``key``'s peak: the largest sample of the stable window; ``None`` when the panic window is
        off (the settling rule goes with it) or the stable window holds no sample."""
        p = self.policy
        window = self._get(key)
        if not p.panic_window_seconds or window is None:
            return None
        return window.peak(now, p.window_seconds, p.outlier_filter, p.outlier_threshold)

    def gc(self, now: float) -> int:
        """Collect every window under ``policy`` and forget empty ones; returns samples dropped."""
        dropped = 0
        for name, window in self._items():
            dropped += window.gc(now, self.policy.window_seconds, self.policy.gc_factor)
            if not window:
                self._remove(name)
        return dropped

    def retain(self, keys: Iterable[str]) -> None:
        """Forget the windows of metrics no longer in the spec."""
        keep = set(keys)
        for key, _ in self._items():
            if key not in keep:
                self._remove(key)


@dataclass(frozen=True)
class WindowChoice:
    """Which window's recommendation a sync uses (see the module docstring)."""

    # the recommendation to use (SETTLING: the current count, capped and uncapped)
    result: AlgorithmResult
    # STABLE | PANIC | SETTLING
    source: str


def choose(current: int, stable: AlgorithmResult, panic: AlgorithmResult | None = None,
           peak: AlgorithmResult | None = None) -> WindowChoice:
    """Combine the recommendations on the stable, panic and peak values (see the module docstring)."""
    if isinstance(current, bool) or not isinstance(current, int) or current < 0:
        raise ValueError(f"current must be an integer >= 0, got {current!r}")
    if panic is not None and panic.replicas > current and panic.replicas > stable.replicas:
        return WindowChoice(panic, PANIC)
    if peak is not None and stable.replicas < current <= peak.replicas:
        return WindowChoice(AlgorithmResult(replicas=current, uncapped=current), SETTLING)
    return WindowChoice(stable, STABLE)
