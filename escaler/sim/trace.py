"""Traffic traces for the simulator: files in, a sorted tuple of ``Arrival`` out.

Contract:

* ``load_trace(path, ...)`` reads one of these formats, told apart by the file (the extension, the
  CSV header, the first JSON object's keys). Each per-request format has a default time unit, used
  when ``time_unit`` is None; ``time_unit`` (``"s"``, ``"ms"`` or ``"us"``) says otherwise:

  - **Azure LLM inference** CSV, 2023 and 2024 (``TIMESTAMP,ContextTokens,GeneratedTokens``):
    one request per row. TIMESTAMPs are dates and times, ISO 8601 with or without fractional
    seconds and a UTC offset (2023: ``2023-11-16 18:15:46.6805900``; 2024:
    ``2024-05-10 00:00:00.009930+00:00``); a naive one is read as UTC. No unit applies:
    ``time_unit`` is refused.
  - **BurstGPT** CSV (``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``;
    recognised by ``Request tokens`` and ``Response tokens``): ``Timestamp`` in **seconds** by
    default, prompt = ``Request tokens``, output = ``Response tokens``. A row whose ``Response
    tokens`` is 0 is a failed request in BurstGPT: it is refused, naming its line and how many
    there are, unless ``drop_failed`` is set; then it is dropped and ``note`` is told how many.
  - **Mooncake** JSONL (a ``.jsonl``/``.ndjson`` file, or one whose first character is ``{``,
    whose first object has ``input_length`` and ``output_length``): ``timestamp`` in
    **milliseconds** by default; ``hash_ids`` (a list of whole numbers >= 0, optional) is kept in
    ``Arrival.hash_ids``.
  - **generic per-request** CSV (any other header) or JSONL (any other first object): an arrival
    time (``arrival_s``, ``arrival_time``, ``timestamp`` or ``time``) in **seconds** by default,
    the prompt length (``prompt_tokens``, ``input_tokens`` or ``context_tokens``) and the output
    length (``output_tokens``, ``generated_tokens`` or ``completion_tokens``); names are
    case-insensitive; JSONL objects may carry ``hash_ids`` too.
  - a **rate curve** CSV (the ServeGen aggregate: ``model,window_start_s,...,req_per_min``): the
    rate is constant over each window (to the next window's start; the last window lasts as long
    as the one before it), arrivals are a Poisson process at that rate from ``random.Random(seed)``,
    and each arrival's token lengths are drawn (with replacement) from a per-request trace
    (``lengths``, by default the Azure conversation trace shipped in the package). ``model`` picks
    the curve when the file holds several (required then; the error lists them). Its windows are
    seconds by name: ``time_unit`` is refused.

  Arrivals of a per-request trace are made relative to the earliest one.

* **Shipped traces by short name.** ``SHIPPED_TRACES`` maps ``conv``, ``code`` and ``servegen`` to
  the three files shipped as package data (``escaler/sim/data/``, attribution in its README.md);
  ``resolve_trace(name)`` returns the shipped file's path for such a name when no file of that name
  exists in the working directory, and the path itself otherwise.

* **Plausibility.** A per-request trace read in its format's default unit (or an Azure trace) is
  refused when, over its ``n`` rows and span (last arrival - first), it is longer than
  ``LONG_TRACE_S`` (7 days) at a mean rate under ``LONG_TRACE_MIN_RATE`` (0.1 requests/s), longer
  than ``SPARSE_TRACE_S`` (a day) at under ``SPARSE_TRACE_MIN_RATE`` (one request an hour), or
  faster on average than ``MAX_MEAN_RATE`` (100,000 requests/s). The error says what was read
  (rows, span in s and days, mean rate, the unit and that it was the format's default), which
  other unit makes the trace plausible (millisecond timestamps read as seconds: "look like
  milliseconds ... pass --time-unit ms"), and that ``--time-unit`` with the unit it is in accepts
  it: a unit given explicitly is the caller's word and is not second-guessed. Every public trace
  of these formats passes in its default unit (Azure 2023: an hour; Azure 2024: a week at ~27/s;
  BurstGPT: two months at ~0.3/s; Mooncake: an hour in ms). The token-length trace of a rate
  curve is not checked: only its lengths are used.
* ``speedup`` divides every arrival time (a day in an hour at 24); ``scale`` multiplies the request
  rate by superposing copies of the trace: the trace itself, and ``ceil(scale) - 1`` copies each
  shifted as a whole by its own seeded offset of up to 5 minutes (stratified: copy ``k`` of ``n``
  within ``(k/n, (k+1)/n)`` of the range), wrapping round the trace's span; the last copy is thinned
  to what ``scale`` has beyond a whole number (each request kept with that probability; below 1 the
  trace itself is). Each copy keeps the trace's own bursts and lulls, at its own times: copying
  every request in place would replay every burst ``scale`` times at one instant, a burstiness no
  real traffic at that rate has. A rate curve's rate is multiplied instead (it is drawn only up to
  ``duration``); ``duration`` (seconds, after ``speedup``) drops what arrives later.
* Any malformed input raises ``TraceError`` naming the file, the line (1-based, as an editor counts)
  and what was wrong: a missing column, a value that is not a number, a negative or non-finite one,
  fewer than one prompt or output token, an unparsable timestamp, a ``hash_ids`` that is not a list
  of whole numbers, a failed BurstGPT row. A bad flag value raises ``ValueError`` naming the flag.
  Nothing is skipped silently.
* The result is sorted by arrival time, ties kept in file order: the same file, flags and seed
  give the same tuple.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "LONG_TRACE_MIN_RATE",
    "LONG_TRACE_S",
    "MAX_MEAN_RATE",
    "SHIPPED_TRACE",
    "SHIPPED_TRACES",
    "SPARSE_TRACE_MIN_RATE",
    "SPARSE_TRACE_S",
    "TIME_UNITS",
    "Arrival",
    "TraceError",
    "load_trace",
    "resolve_trace",
    "shipped_trace_path",
]

# the per-request trace shipped as package data (CC-BY 4.0, escaler/sim/data/README.md)
SHIPPED_TRACE = "AzureLLMInferenceTrace_conv.csv"
# every trace shipped as package data, by the short name ``--trace`` accepts
SHIPPED_TRACES = {
    "conv": SHIPPED_TRACE,
    "code": "AzureLLMInferenceTrace_code.csv",
    "servegen": "servegen_aggregate_rate_10min.csv",
}

# time units a per-request trace may be in: how many of each make a second
_PER_SECOND = {"s": 1.0, "ms": 1e3, "us": 1e6}
_UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}
TIME_UNITS = tuple(_PER_SECOND)

# plausibility of a per-request trace read in its default unit (see the module docstring)
LONG_TRACE_S = 7 * 86_400.0
LONG_TRACE_MIN_RATE = 0.1  # requests/s
SPARSE_TRACE_S = 86_400.0
SPARSE_TRACE_MIN_RATE = 1 / 3600  # requests/s
MAX_MEAN_RATE = 100_000.0  # requests/s

_TIME_KEYS = ("arrival_s", "arrival_time", "timestamp", "time")
_PROMPT_KEYS = ("prompt_tokens", "input_tokens", "context_tokens")
_OUTPUT_KEYS = ("output_tokens", "generated_tokens", "completion_tokens")
# each column a per-request trace needs: its accepted names, and how an error names it
_Columns = tuple[tuple[tuple[str, ...], str], ...]
_GENERIC: _Columns = ((_TIME_KEYS, "an arrival time"), (_PROMPT_KEYS, "a prompt length"),
                      (_OUTPUT_KEYS, "an output length"))
_MOONCAKE: _Columns = ((("timestamp",), "an arrival time"), (("input_length",), "a prompt length"),
                       (("output_length",), "an output length"))
_AZURE_HEADER = ("timestamp", "contexttokens", "generatedtokens")
_BURSTGPT_KEYS = ("request tokens", "response tokens")
_RATE_KEYS = ("window_start_s", "req_per_min")
# the copies --scale adds are shifted by up to this many seconds (wrapping round the trace's span)
_COPY_SHIFT_S = 300.0
# a note lists at most this many line numbers
_NOTE_LINES = 10


class TraceError(ValueError):
    """A trace that cannot be read: ``file:line: what``."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.detail = path, line, message


@dataclass(frozen=True, order=True)
class Arrival:
    """One request: when it arrives (s from the trace start), its token counts and, when the trace
    has them (Mooncake), the hashes of its prompt's blocks (shared prefixes share hashes)."""

    t: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class _Format:
    title: str  # how an error names it
    unit: str | None  # its default time unit; None: no unit applies (dates, or seconds by name)


_AZURE = _Format("an Azure LLM inference trace", None)
_BURSTGPT = _Format("a BurstGPT trace", "s")
_MOONCAKE_FMT = _Format("a Mooncake trace", "ms")
_CSV = _Format("a generic CSV trace", "s")
_JSONL = _Format("a generic JSONL trace", "s")
_RATE = _Format("a rate curve", None)

Note = Callable[[str], None]


def shipped_trace_path() -> Path:
    """The Azure conversation trace in the package data."""
    return Path(str(resources.files("escaler.sim") / "data" / SHIPPED_TRACE))


def resolve_trace(name: str | Path) -> Path:
    """A shipped trace's path for its short name (``SHIPPED_TRACES``), unless a file of that name
    exists; any other name is returned as a path, unchanged."""
    path = Path(name)
    if str(name) in SHIPPED_TRACES and not path.exists():
        return Path(str(resources.files("escaler.sim") / "data" / SHIPPED_TRACES[str(name)]))
    return path


def load_trace(path: str | Path, *, scale: float = 1.0, speedup: float = 1.0, duration: float | None = None,
               seed: int = 0, model: str | None = None, lengths: str | Path | None = None,
               time_unit: str | None = None, drop_failed: bool = False, note: Note | None = None,
               ) -> tuple[Arrival, ...]:
    """Read ``path`` (see the module docstring) and apply ``scale``, ``speedup`` and ``duration``.

    ``note`` is told what was dropped on request (``drop_failed``), one sentence per call."""
    if not scale > 0 or not math.isfinite(scale):
        raise ValueError(f"--scale must be a positive number, got {scale}")
    if not speedup > 0 or not math.isfinite(speedup):
        raise ValueError(f"--speedup must be a positive number, got {speedup}")
    if duration is not None and not duration > 0:
        raise ValueError(f"--duration must be a positive number of seconds, got {duration}")
    if time_unit is not None and time_unit not in _PER_SECOND:
        raise ValueError(f"--time-unit must be one of {', '.join(TIME_UNITS)}, got {time_unit!r}")
    name, text = _read(path)
    fmt = _detect(name, Path(path), text)
    if time_unit is not None and fmt.unit is None:
        why = ("its TIMESTAMP column holds dates and times" if fmt is _AZURE
               else "its window_start_s column is seconds by name")
        raise TraceError(name, None, f"--time-unit {time_unit} does not apply to {fmt.title}: {why}")
    rng = random.Random(seed)
    if fmt is _RATE:
        # only the lengths are used: their times are not checked, and a failed BurstGPT row is
        # refused or dropped as in any trace
        lpath = Path(lengths) if lengths is not None else shipped_trace_path()
        lname, ltext = _read(lpath)
        sample = _requests(lname, ltext, _detect(lname, lpath, ltext), None, drop_failed, note)
        if not sample:
            raise TraceError(lname, None, "holds no requests to draw token lengths from")
        # a rate curve is scaled at its rate (a thinned Poisson process is a Poisson process at the
        # lower rate) and drawn only as far as --duration reaches: a 14-day curve at 1e-4 of its
        # rate draws 1e-4 of the arrivals, not all of them to keep a few
        until = None if duration is None else duration * speedup
        arrivals = _from_rate(name, text, model, sample, rng, scale, until)
        scale = 1.0
    else:
        arrivals = _requests(name, text, fmt, time_unit, drop_failed, note)
        if time_unit is None:
            _check_plausible(name, fmt, arrivals)
    out = _scale(arrivals, scale, rng) if scale != 1.0 else arrivals
    out = [replace(a, t=a.t / speedup) for a in out] if speedup != 1.0 else out
    if duration is not None:
        out = [a for a in out if a.t <= duration]
    if not out:
        raise TraceError(name, None, "holds no requests" + (f" within {duration:g} s" if duration else ""))
    return tuple(out)


# ------------------------------------------------------------------ formats

def _read(path: str | Path) -> tuple[str, str]:
    name = str(path)
    try:
        return name, Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(name, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise TraceError(name, None, f"cannot be read: {err}") from None


def _detect(name: str, p: Path, text: str) -> _Format:
    body = text.lstrip("\ufeff")
    if p.suffix.lower() in (".jsonl", ".ndjson") or body.lstrip().startswith("{"):
        first = next((ln for ln in body.splitlines() if ln.strip()), "")
        try:
            obj = json.loads(first)
        except json.JSONDecodeError:
            return _JSONL  # its reader names the line
        keys = {str(k).lower() for k in obj} if isinstance(obj, dict) else set()
        return _MOONCAKE_FMT if {"input_length", "output_length"} <= keys else _JSONL
    header = _header(name, body)
    if header[:3] == _AZURE_HEADER:
        return _AZURE
    if all(k in header for k in _BURSTGPT_KEYS):
        return _BURSTGPT
    if all(k in header for k in _RATE_KEYS):
        return _RATE
    return _CSV


def _requests(name: str, text: str, fmt: _Format, time_unit: str | None, drop_failed: bool,
              note: Note | None) -> list[Arrival]:
    """The per-request trace ``text`` in format ``fmt``, relative to its first arrival, sorted."""
    per_s = _PER_SECOND[time_unit or fmt.unit or "s"]  # the readers return times in this unit
    if fmt is _AZURE:
        rows = _azure(name, text)  # seconds since the epoch
    elif fmt is _BURSTGPT:
        rows = _burstgpt(name, text, drop_failed, note)
    elif fmt is _CSV:
        rows = _generic_csv(name, text, _header(name, text))
    elif fmt in (_JSONL, _MOONCAKE_FMT):
        rows = _jsonl(name, text, _MOONCAKE if fmt is _MOONCAKE_FMT else _GENERIC)
    else:
        raise TraceError(name, None, f"{fmt.title} is not a per-request trace")
    return _relative(rows, per_s)


def _header(name: str, text: str) -> tuple[str, ...]:
    first = text.lstrip("\ufeff").split("\n", 1)[0].strip()
    if not first:
        raise TraceError(name, 1, "empty: want a CSV header line or JSONL objects")
    return tuple(c.strip().lower() for c in first.split(","))


def _rows(text: str) -> list[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    reader.fieldnames = [f.strip().lower() for f in (reader.fieldnames or [])]
    out = []
    for row in reader:
        if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
            continue  # a blank line
        out.append((reader.line_num, row))
    return out


def _azure(name: str, text: str) -> list[Arrival]:
    out = []
    for line, row in _rows(text):
        raw = (row.get("timestamp") or "").strip()
        try:
            when = datetime.fromisoformat(raw)
        except ValueError:
            raise TraceError(name, line,
                             f"TIMESTAMP {raw!r} is not 'YYYY-MM-DD HH:MM:SS[.fff][+HH:MM]'") from None
        t = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
        out.append(Arrival(t, _tokens(name, line, row, "contexttokens", "ContextTokens"),
                           _tokens(name, line, row, "generatedtokens", "GeneratedTokens")))
    return out


def _burstgpt(name: str, text: str, drop_failed: bool, note: Note | None) -> list[Arrival]:
    out, failed = [], []
    for line, row in _rows(text):
        if _value(name, line, row.get("response tokens"), "Response tokens") == 0:
            failed.append(line)
            continue
        out.append(Arrival(_value(name, line, row.get("timestamp"), "Timestamp"),
                           _tokens(name, line, row, "request tokens", "Request tokens"),
                           _tokens(name, line, row, "response tokens", "Response tokens")))
    if failed and not drop_failed:
        raise TraceError(name, failed[0], f"Response tokens is 0: a failed request, as BurstGPT logs them "
                                          f"({len(failed)} such rows in the file); drop them with "
                                          f"--drop-failed or read the BurstGPT_without_fails file")
    if failed and note is not None:
        more = ", ..." if len(failed) > _NOTE_LINES else ""
        shown = ", ".join(str(n) for n in failed[:_NOTE_LINES]) + more
        note(f"{name}: dropped {len(failed)} failed request{'s' * (len(failed) != 1)} "
             f"(Response tokens 0; line{'s' * (len(failed) != 1)} {shown}), "
             f"kept {len(out)}")
    return out


def _generic_csv(name: str, text: str, header: Sequence[str]) -> list[Arrival]:
    tk, pk, ok = (_pick(name, header, keys, what) for keys, what in _GENERIC)
    return [Arrival(_value(name, line, row.get(tk), tk), _tokens(name, line, row, pk, pk),
                    _tokens(name, line, row, ok, ok))
            for line, row in _rows(text)]


def _jsonl(name: str, text: str, columns: _Columns) -> list[Arrival]:
    out = []
    for line, raw in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as err:
            raise TraceError(name, line, f"not JSON: {err.msg}") from None
        if not isinstance(obj, dict):
            raise TraceError(name, line, "want a JSON object per line")
        row = {str(k).lower(): v for k, v in obj.items()}
        keys = tuple(row)
        tk, pk, ok = (_pick(name, keys, k, what, line) for k, what in columns)
        out.append(Arrival(_value(name, line, row[tk], tk), _tokens(name, line, row, pk, pk),
                           _tokens(name, line, row, ok, ok), _hash_ids(name, line, row.get("hash_ids"))))
    return out


def _from_rate(name: str, text: str, model: str | None, sample: Sequence[Arrival],
               rng: random.Random, scale: float = 1.0, until: float | None = None) -> list[Arrival]:
    curves: dict[str, list[tuple[float, float]]] = {}
    for line, row in _rows(text):
        m = (row.get("model") or "").strip()
        start = _value(name, line, row.get("window_start_s"), "window_start_s")
        per_min = _value(name, line, row.get("req_per_min"), "req_per_min")
        curves.setdefault(m, []).append((start, per_min / 60.0 * scale))
    if not curves:
        raise TraceError(name, None, "holds no rate windows")
    if model is None:
        if len(curves) > 1:
            raise TraceError(name, None, f"holds {len(curves)} models; choose one with --model "
                                         f"({', '.join(sorted(curves))})")
        model = next(iter(curves))
    if model not in curves:
        raise TraceError(name, None, f"has no model {model!r} (it has: {', '.join(sorted(curves))})")
    windows = sorted(curves[model])
    starts = [w[0] for w in windows]
    step = starts[1] - starts[0] if len(starts) > 1 else 600.0
    end = starts[-1] + step if until is None else min(starts[-1] + step, starts[0] + until)
    out: list[Arrival] = []
    t = starts[0]
    while True:
        i = bisect_right(starts, t) - 1
        rate = windows[i][1]
        w_end = starts[i + 1] if i + 1 < len(starts) else end
        if rate <= 0:
            t = w_end
        else:
            gap = rng.expovariate(rate)
            if t + gap >= w_end:  # memoryless: restart the draw at the next window's rate
                t = w_end
            else:
                t += gap
                s = sample[rng.randrange(len(sample))]
                out.append(Arrival(t - starts[0], s.prompt_tokens, s.output_tokens, s.hash_ids))
                continue
        if t >= end:
            return out


# ------------------------------------------------------------------ plausibility

def _implausible(n: int, span: float) -> str | None:
    """Which rule ``n`` requests over ``span`` seconds break (None: none), as a phrase."""
    if n < 2 or span <= 0:
        return None
    rate = n / span
    if rate > MAX_MEAN_RATE:
        return f"faster than {MAX_MEAN_RATE:,.0f} requests/s on average"
    if span > LONG_TRACE_S and rate < LONG_TRACE_MIN_RATE:
        return f"longer than {LONG_TRACE_S / 86_400:g} days at under {LONG_TRACE_MIN_RATE:g} requests/s"
    if span > SPARSE_TRACE_S and rate < SPARSE_TRACE_MIN_RATE:
        return f"longer than {SPARSE_TRACE_S / 86_400:g} day at under one request an hour"
    return None


def _shape(n: int, span: float) -> str:
    secs = f"{span:,.0f}" if span >= 100 else f"{span:.3g}"
    return f"{secs} s ({span / 86_400:.3g} days) at {n / span:.3g} requests/s"


def _check_plausible(name: str, fmt: _Format, arrivals: Sequence[Arrival]) -> None:
    n = len(arrivals)
    span = arrivals[-1].t if arrivals else 0.0
    broken = _implausible(n, span)
    if broken is None:
        return
    read = f"{n:,} requests over {_shape(n, span)}"
    if fmt.unit is None:  # Azure: the timestamps are dates, no unit to get wrong
        raise TraceError(name, None, f"read {read}: implausible for a per-request trace ({broken}); "
                                     f"check its TIMESTAMPs")
    unit = fmt.unit
    # too dense: the values are in a coarser unit than read; too sparse: a finer one. Nearest first.
    dense = n / span > MAX_MEAN_RATE
    others = sorted((u for u in _PER_SECOND if (_PER_SECOND[u] < _PER_SECOND[unit]) == dense and u != unit),
                    key=lambda u: abs(math.log(_PER_SECOND[u] / _PER_SECOND[unit])))
    fits = [u for u in others if _implausible(n, span * _PER_SECOND[unit] / _PER_SECOND[u]) is None]
    msg = (f"read {read} with times in {_UNIT_NAMES[unit]} ({fmt.title}'s default unit): "
           f"implausible for a per-request trace ({broken}). ")
    if fits:
        u = fits[0]
        msg += (f"The values look like {_UNIT_NAMES[u]} (in {u}: "
                f"{_shape(n, span * _PER_SECOND[unit] / _PER_SECOND[u])}): pass --time-unit {u}")
    elif others:
        msg += "No other unit makes it plausible (" + "; ".join(
            f"in {u}: {_shape(n, span * _PER_SECOND[unit] / _PER_SECOND[u])}" for u in others) + ")"
    else:
        msg += f"No unit {'coarser' if dense else 'finer'} than {_UNIT_NAMES[unit]} is read: check the file"
    raise TraceError(name, None, msg + f"; if they really are {_UNIT_NAMES[unit]}, pass --time-unit {unit}")


# ------------------------------------------------------------------ helpers

def _relative(items: list[Arrival], per_s: float = 1.0) -> list[Arrival]:
    """``items`` (times in units of which ``per_s`` make a second) in seconds from the earliest."""
    if not items:
        return []
    t0 = min(a.t for a in items)
    # sorted by time, file order kept for ties (sort is stable); subtracting before dividing keeps
    # whole milliseconds exact (3052 ms -> 3.052 s)
    return sorted((replace(a, t=(a.t - t0) / per_s) for a in items), key=lambda a: a.t)


def _scale(arrivals: Sequence[Arrival], scale: float, rng: random.Random) -> list[Arrival]:
    """``scale`` times the rate: the trace itself, then ``ceil(scale) - 1`` copies of it, each shifted
    in time as a whole (module docstring); what ``scale`` has beyond a whole number is one more copy,
    thinned (each request kept with that probability); below 1 the trace itself is thinned."""
    t0, t1 = arrivals[0].t, arrivals[-1].t
    span = t1 - t0
    # the copies wrap around a period one mean gap longer than the span, so that the last request
    # and the first do not land on one instant
    period = span + (span / (len(arrivals) - 1) if len(arrivals) > 1 else 1.0)
    layers = max(1, math.ceil(scale - 1e-12))
    out: list[Arrival] = []
    for k in range(layers):
        keep = min(1.0, scale - k)
        # copy k is shifted by a stratified random offset within (k/layers, (k+1)/layers) of the
        # shift range: no two copies share a shift, so no burst is replayed twice at one instant
        shift = 0.0 if k == 0 else (k + rng.random()) / layers * min(_COPY_SHIFT_S, period)
        for a in arrivals:
            if keep < 1.0 and rng.random() >= keep:
                continue
            out.append(a if shift == 0.0 else replace(a, t=t0 + (a.t - t0 + shift) % period))
    out.sort(key=lambda a: a.t)
    return out


def _pick(name: str, header: Sequence[str], keys: Sequence[str], what: str, line: int = 1) -> str:
    for k in keys:
        if k in header:
            return k
    raise TraceError(name, line, f"no column for {what}: want one of {', '.join(keys)} "
                                 f"(found: {', '.join(header) or 'none'})")


def _number(name: str, line: int, raw: Any, field: str) -> float:
    if isinstance(raw, bool):
        raise TraceError(name, line, f"{field} must be a number, got {raw!r}")
    try:
        v = float(raw.strip()) if isinstance(raw, str) else float(raw)
    except (TypeError, ValueError):
        raise TraceError(name, line, f"{field} must be a number, got {raw!r}") from None
    if not math.isfinite(v) or v < 0:
        raise TraceError(name, line, f"{field} must be a finite number >= 0, got {raw!r}")
    return v


def _value(name: str, line: int, raw: Any, field: str) -> float:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise TraceError(name, line, f"{field} is missing")
    return _number(name, line, raw, field)


def _tokens(name: str, line: int, row: dict[str, Any], key: str, field: str) -> int:
    raw = row.get(key)
    v = _value(name, line, raw, field)
    if v != int(v):
        raise TraceError(name, line, f"{field} must be a whole number of tokens, got {raw!r}")
    if v < 1:  # a request without a prompt or without a first token has no TTFT
        raise TraceError(name, line, f"{field} must be at least 1, got {raw!r}")
    return int(v)


def _hash_ids(name: str, line: int, raw: Any) -> tuple[int, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0
                                            for h in raw):
        raise TraceError(name, line, f"hash_ids must be a list of whole numbers >= 0, got {raw!r}")
    return tuple(raw)
