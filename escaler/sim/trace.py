"""Traffic traces for the simulator: files in, a sorted tuple of ``Arrival`` out.

Contract:

* ``load_trace(path, ...)`` reads one of three formats, told apart by the file (extension, header):

  - **Azure LLM inference 2023** CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``; timestamps
    ``YYYY-MM-DD HH:MM:SS.fffffff``): one request per row, arrival = seconds since the first row;
  - **generic per-request** CSV (a header) or JSONL (one object per line) with an arrival time in
    seconds (``arrival_s``, ``arrival_time``, ``timestamp`` or ``time``), the prompt length
    (``prompt_tokens``, ``input_tokens`` or ``context_tokens``) and the output length
    (``output_tokens``, ``generated_tokens`` or ``completion_tokens``); column names are
    case-insensitive; arrivals are made relative to the earliest one;
  - a **rate curve** CSV (the ServeGen aggregate: ``model,window_start_s,...,req_per_min``): the
    rate is constant over each window (to the next window's start; the last window lasts as long
    as the one before it), arrivals are a Poisson process at that rate from ``random.Random(seed)``,
    and each arrival's token lengths are drawn (with replacement) from a per-request trace
    (``lengths``, by default the Azure conversation trace shipped in the package). ``model`` picks
    the curve when the file holds several (required then; the error lists them).

* ``speedup`` divides every arrival time (a day in an hour at 24); ``scale`` multiplies the request
  rate: each request is kept ``floor(scale)`` times plus once more with probability
  ``scale - floor(scale)`` (seeded), copies spread over the following millisecond so that they stay
  distinct events — except for a rate curve, whose rate is multiplied (and which is drawn only up to
  ``duration``); ``duration`` (seconds, after ``speedup``) drops what arrives later.
* Any malformed input raises ``TraceError`` naming the file, the line (1-based, as an editor counts)
  and what was wrong: a missing column, a value that is not a number, a negative or non-finite one,
  fewer than one prompt or output token, an unparsable timestamp. Nothing is skipped silently.
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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["SHIPPED_TRACE", "Arrival", "TraceError", "load_trace", "shipped_trace_path"]

# the per-request trace shipped as package data (CC-BY 4.0, escaler/sim/data/README.md)
SHIPPED_TRACE = "AzureLLMInferenceTrace_conv.csv"

_TIME_KEYS = ("arrival_s", "arrival_time", "timestamp", "time")
_PROMPT_KEYS = ("prompt_tokens", "input_tokens", "context_tokens")
_OUTPUT_KEYS = ("output_tokens", "generated_tokens", "completion_tokens")
# each column a generic trace needs: its accepted names, and how an error names it
_COLUMNS = ((_TIME_KEYS, "an arrival time"), (_PROMPT_KEYS, "a prompt length"),
            (_OUTPUT_KEYS, "an output length"))
_AZURE_HEADER = ("timestamp", "contexttokens", "generatedtokens")
_RATE_KEYS = ("window_start_s", "req_per_min")
# copies made by --scale are spread over this many seconds after the original
_COPY_SPREAD_S = 1e-3


class TraceError(ValueError):
    """A trace that cannot be read: ``file:line: what``."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.detail = path, line, message


@dataclass(frozen=True, order=True)
class Arrival:
    """One request: when it arrives (s from the trace start) and its token counts."""

    t: float
    prompt_tokens: int
    output_tokens: int


def shipped_trace_path() -> Path:
    """The Azure conversation trace in the package data."""
    return Path(str(resources.files("escaler.sim") / "data" / SHIPPED_TRACE))


def load_trace(path: str | Path, *, scale: float = 1.0, speedup: float = 1.0, duration: float | None = None,
               seed: int = 0, model: str | None = None, lengths: str | Path | None = None,
               ) -> tuple[Arrival, ...]:
    """Read ``path`` (see the module docstring) and apply ``scale``, ``speedup`` and ``duration``."""
    if not scale > 0 or not math.isfinite(scale):
        raise ValueError(f"--scale must be a positive number, got {scale}")
    if not speedup > 0 or not math.isfinite(speedup):
        raise ValueError(f"--speedup must be a positive number, got {speedup}")
    if duration is not None and not duration > 0:
        raise ValueError(f"--duration must be a positive number of seconds, got {duration}")
    p = Path(path)
    name = str(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(name, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise TraceError(name, None, f"cannot be read: {err}") from None
    rng = random.Random(seed)
    if p.suffix.lower() in (".jsonl", ".ndjson"):
        arrivals = _relative(_jsonl(name, text))
    else:
        header = _header(name, text)
        if header[:3] == _AZURE_HEADER:
            arrivals = _relative(_azure(name, text))
        elif all(k in header for k in _RATE_KEYS):
            sample = load_trace(lengths or shipped_trace_path())
            # a rate curve is scaled at its rate (a thinned Poisson process is a Poisson process at the
            # lower rate) and drawn only as far as --duration reaches: a 14-day curve at 1e-4 of its
            # rate draws 1e-4 of the arrivals, not all of them to keep a few
            until = None if duration is None else duration * speedup
            arrivals = _from_rate(name, text, model, sample, rng, scale, until)
            scale = 1.0
        else:
            arrivals = _relative(_generic_csv(name, text, header))
    out = _scale(arrivals, scale, rng) if scale != 1.0 else arrivals
    out = [Arrival(a.t / speedup, a.prompt_tokens, a.output_tokens) for a in out] if speedup != 1.0 else out
    if duration is not None:
        out = [a for a in out if a.t <= duration]
    if not out:
        raise TraceError(name, None, "holds no requests" + (f" within {duration:g} s" if duration else ""))
    return tuple(out)


# ------------------------------------------------------------------ formats

def _header(name: str, text: str) -> tuple[str, ...]:
    first = text.split("\n", 1)[0].strip().lstrip("\ufeff")
    if not first:
        raise TraceError(name, 1, "empty: want a CSV header line or JSONL objects")
    return tuple(c.strip().lower() for c in first.split(","))


def _rows(text: str) -> Iterator[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    reader.fieldnames = [f.strip().lower() for f in (reader.fieldnames or [])]
    for row in reader:
        if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
            continue  # a blank line
        yield reader.line_num, row


def _azure(name: str, text: str) -> Iterator[tuple[int, Arrival]]:
    for line, row in _rows(text):
        raw = (row.get("timestamp") or "").strip()
        try:
            t = datetime.fromisoformat(raw).timestamp()
        except ValueError:
            raise TraceError(name, line, f"TIMESTAMP {raw!r} is not 'YYYY-MM-DD HH:MM:SS[.fff]'") from None
        yield line, Arrival(t, _tokens(name, line, row, "contexttokens", "ContextTokens"),
                            _tokens(name, line, row, "generatedtokens", "GeneratedTokens"))


def _generic_csv(name: str, text: str, header: Sequence[str]) -> Iterator[tuple[int, Arrival]]:
    tk, pk, ok = (_pick(name, header, keys, what) for keys, what in _COLUMNS)
    for line, row in _rows(text):
        yield line, Arrival(_seconds(name, line, row.get(tk), tk), _tokens(name, line, row, pk, pk),
                            _tokens(name, line, row, ok, ok))


def _jsonl(name: str, text: str) -> Iterator[tuple[int, Arrival]]:
    for line, raw in enumerate(text.splitlines(), start=1):
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
        tk, pk, ok = (_pick(name, keys, k, what, line) for k, what in _COLUMNS)
        yield line, Arrival(_seconds(name, line, row[tk], tk), _tokens(name, line, row, pk, pk),
                            _tokens(name, line, row, ok, ok))


def _from_rate(name: str, text: str, model: str | None, sample: Sequence[Arrival],
               rng: random.Random, scale: float = 1.0, until: float | None = None) -> list[Arrival]:
    curves: dict[str, list[tuple[float, float]]] = {}
    for line, row in _rows(text):
        m = (row.get("model") or "").strip()
        start = _seconds(name, line, row.get("window_start_s"), "window_start_s")
        per_min = _number(name, line, row.get("req_per_min"), "req_per_min")
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
                out.append(Arrival(t - starts[0], s.prompt_tokens, s.output_tokens))
                continue
        if t >= end:
            return out


# ------------------------------------------------------------------ helpers

def _relative(rows: Iterator[tuple[int, Arrival]]) -> list[Arrival]:
    items = [a for _, a in rows]
    if not items:
        return []
    t0 = min(a.t for a in items)
    # sorted by time, file order kept for ties (sort is stable)
    return sorted((Arrival(a.t - t0, a.prompt_tokens, a.output_tokens) for a in items), key=lambda a: a.t)


def _scale(arrivals: Sequence[Arrival], scale: float, rng: random.Random) -> list[Arrival]:
    whole, frac = int(scale), scale - int(scale)
    out: list[Arrival] = []
    for a in arrivals:
        copies = whole + (1 if frac > 0 and rng.random() < frac else 0)
        for k in range(copies):
            out.append(a if k == 0 else Arrival(a.t + _COPY_SPREAD_S * k / max(copies, 1),
                                                a.prompt_tokens, a.output_tokens))
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


def _seconds(name: str, line: int, raw: Any, field: str) -> float:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise TraceError(name, line, f"{field} is missing")
    return _number(name, line, raw, field)


def _tokens(name: str, line: int, row: dict[str, Any], key: str, field: str) -> int:
    raw = row.get(key)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise TraceError(name, line, f"{field} is missing")
    v = _number(name, line, raw, field)
    if v != int(v):
        raise TraceError(name, line, f"{field} must be a whole number of tokens, got {raw!r}")
    if v < 1:  # a request without a prompt or without a first token has no TTFT
        raise TraceError(name, line, f"{field} must be at least 1, got {raw!r}")
    return int(v)
