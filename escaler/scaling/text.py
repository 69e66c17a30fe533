"""Text helpers for what the decision layer writes into status and events.

* ``cap_text(text, limit)`` bounds a text to ``limit`` UTF-8 bytes (default 1 KiB,
  docs/concepts.md#conditions-and-health: error bodies are capped at 1 KiB before they reach a message),
  cutting on a character boundary and ending in ``TRUNCATED`` so a reader knows there was more. A body bigger
  than a condition's ``maxLength`` would otherwise make every status write fail validation.
* ``format_time(seconds)`` renders wall-clock seconds since the epoch as RFC 3339 in UTC with
  seconds precision (``2026-01-01T00:00:00Z``), the ``metav1.Time`` wire form. It converts a
  number it is given; it never reads a clock.

Pure.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

__all__ = ["MAX_ERROR_BYTES", "TRUNCATED", "cap_text", "format_time"]

# the cap on an error body inside a message (docs/concepts.md#conditions-and-health)
MAX_ERROR_BYTES = 1024
# appended to a capped text
TRUNCATED = " ...[truncated]"


def cap_text(text: str, limit: int = MAX_ERROR_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes (marker included); unchanged when it fits."""
    marker = TRUNCATED.encode()
    if limit < len(marker):
        raise ValueError(f"limit must be at least {len(marker)} bytes, got {limit}")
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text
    head = data[: limit - len(marker)].decode("utf-8", errors="ignore")
    return head + TRUNCATED


def format_time(seconds: float) -> str:
    """Epoch seconds as RFC 3339 UTC, seconds precision (``metav1.Time``)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        raise ValueError(f"time must be a finite number of seconds, got {seconds!r}")
    return datetime.fromtimestamp(math.floor(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
