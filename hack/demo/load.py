"""The demo's traffic: the shipped Azure conversation trace, time-compressed, as Prometheus gauges.

Contract:

* ``TraceLoad.from_trace(duration)`` reads ``escaler/sim/data/AzureLLMInferenceTrace_conv.csv``
  through ``escaler.sim.trace.load_trace`` (one request per row, about an hour of traffic) and
  plays it in ``duration`` demo seconds: ``speedup = (trace span - window) / duration``.
* ``at(elapsed)`` is the load ``elapsed`` demo seconds in: trace time ``T = window + elapsed x
  speedup`` (clamped to the trace's end), and over the requests that arrived in the trailing
  ``window`` trace seconds ``[T - window, T)``:

  - ``rate``: requests per second;
  - ``in_flight``: requests being served, by Little's law with a fixed mean request latency
    (``in_flight = rate x latency``), i.e. what ``vllm:num_requests_running`` summed over the
    fleet would show;
  - ``prompt_tps`` / ``output_tps``: prompt and generated tokens per second.

* Pure: no clock, no I/O after loading; the same ``elapsed`` gives the same ``Load``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import accumulate

from escaler.sim.trace import Arrival, load_trace, shipped_trace_path

# trailing window the rates are measured over, in trace seconds (4 s of demo time at 30x)
WINDOW_S = 120.0
# mean request latency (s) used to turn an arrival rate into requests in flight
MEAN_LATENCY_S = 8.0


@dataclass(frozen=True)
class Load:
    """The traffic at one instant of the demo."""

    # trace time, seconds since the trace's first request
    trace_s: float
    rate: float
    in_flight: float
    prompt_tps: float
    output_tps: float

    @property
    def total_tps(self) -> float:
        return self.prompt_tps + self.output_tps


@dataclass(frozen=True)
class TraceLoad:
    """A trace played ``speedup`` times faster than it was recorded."""

    # arrival times (trace seconds), sorted
    times: tuple[float, ...]
    # running sums of prompt / output tokens: cum[i] = sum over arrivals [0, i)
    prompt_cum: tuple[int, ...]
    output_cum: tuple[int, ...]
    speedup: float
    window_s: float = WINDOW_S

    @classmethod
    def from_arrivals(cls, arrivals: tuple[Arrival, ...], duration: float,
                      window_s: float = WINDOW_S) -> TraceLoad:
        if not duration > 0:
            raise ValueError(f"duration must be > 0 seconds, got {duration}")
        times = tuple(a.t for a in arrivals)
        span = times[-1] - window_s
        if span <= 0:
            raise ValueError(f"the trace spans {times[-1]:.0f} s, not more than the {window_s:.0f} s window")
        return cls(times, (0, *accumulate(a.prompt_tokens for a in arrivals)),
                   (0, *accumulate(a.output_tokens for a in arrivals)), span / duration, window_s)

    @classmethod
    def from_trace(cls, duration: float) -> TraceLoad:
        return cls.from_arrivals(load_trace(shipped_trace_path()), duration)

    def at(self, elapsed: float) -> Load:
        t = min(self.window_s + max(0.0, elapsed) * self.speedup, self.times[-1])
        lo = bisect.bisect_left(self.times, t - self.window_s)
        hi = bisect.bisect_left(self.times, t)
        rate = (hi - lo) / self.window_s
        return Load(trace_s=t, rate=rate, in_flight=rate * MEAN_LATENCY_S,
                    prompt_tps=(self.prompt_cum[hi] - self.prompt_cum[lo]) / self.window_s,
                    output_tps=(self.output_cum[hi] - self.output_cum[lo]) / self.window_s)
