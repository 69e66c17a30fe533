"""Kubernetes timestamps (``metav1.Time``, RFC 3339 with a ``Z`` or an offset) as epoch seconds.

``epoch_seconds(value) -> float | None``: None when the value is absent, not a string, or does not
parse — object fields written by other controllers are untrusted input, and a bad timestamp must
read as "unknown", never raise. Pure, thread-safe.
"""

from __future__ import annotations

from datetime import datetime

__all__ = ["epoch_seconds"]


def epoch_seconds(value: object) -> float | None:
    """An RFC 3339 timestamp as epoch seconds; None when absent or unparsable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
