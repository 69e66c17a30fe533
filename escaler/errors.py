"""API errors in the shape of ``metav1.Status``, shared by every layer.

The informers classify failures with these predicates (410 → relist; 429/5xx/connection →
backoff), the kube layer raises them from HTTP responses, and reconcilers branch on them
(NotFound, Conflict). Messages taken from response bodies are capped at ``MAX_BODY_BYTES``
so that a proxy's HTML error page cannot flood a condition message or a log line.

This module is a bottom utility: it imports nothing else from escaler.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "MAX_BODY_BYTES",
    "ConnectionFailure",
    "FencedWrite",
    "StatusError",
    "cap_body",
    "is_conflict",
    "is_gone",
    "is_not_found",
    "is_retryable",
]

# Error bodies are capped at 1 KiB before they reach any message (docs/concepts.md#conditions-and-health,
# docs/llmscaler.md).
MAX_BODY_BYTES = 1024


def cap_body(body: str | bytes | None, limit: int = MAX_BODY_BYTES) -> str:
    """Return at most ``limit`` bytes of ``body`` as text, marking a cut with an ellipsis."""
    if body is None:
        return ""
    raw = body.encode("utf-8", "replace") if isinstance(body, str) else body
    if len(raw) <= limit:
        return raw.decode("utf-8", "replace")
    return raw[:limit].decode("utf-8", "ignore") + "…"


class StatusError(Exception):
    """A non-2xx answer from the API server (or a watch ERROR event), as a ``metav1.Status``."""

    def __init__(
        self,
        code: int,
        reason: str = "",
        message: str = "",
        details: dict[str, Any] | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(f"{code} {reason}: {message}" if reason else f"{code}: {message}")
        # HTTP status code (410 for an expired resourceVersion, 409 for a conflict, ...)
        self.code = code
        # metav1.StatusReason, e.g. "Expired", "Gone", "Conflict", "NotFound", "Invalid"
        self.reason = reason
        # human-readable message, capped at MAX_BODY_BYTES
        self.message = cap_body(message)
        # metav1.StatusDetails (causes carry field paths for 422s); {} when absent
        self.details: dict[str, Any] = details or {}
        # the server's Retry-After hint in seconds, if it sent one
        self.retry_after_seconds = retry_after_seconds

    @classmethod
    def from_status(cls, status: dict[str, Any], default_code: int = 500) -> StatusError:
        """Build from a ``metav1.Status`` object (as found in a watch ERROR event)."""
        details = status.get("details") or {}
        retry = details.get("retryAfterSeconds") if isinstance(details, dict) else None
        return cls(
            int(status.get("code") or default_code),
            str(status.get("reason") or ""),
            str(status.get("message") or ""),
            details if isinstance(details, dict) else {},
            float(retry) if isinstance(retry, int | float) else None,
        )

    @classmethod
    def from_response(
        cls, code: int, body: str | bytes | None, retry_after: str | None = None
    ) -> StatusError:
        """Build from an HTTP response; the body is parsed as a Status when it is one."""
        text = cap_body(body, 64 * MAX_BODY_BYTES)
        retry_s: float | None = None
        if retry_after:
            try:
                retry_s = float(retry_after)
            except ValueError:
                retry_s = None
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("kind") == "Status":
            err = cls.from_status(parsed, default_code=code)
            err.code = code
            if err.retry_after_seconds is None:
                err.retry_after_seconds = retry_s
            return err
        return cls(code, "", cap_body(body), None, retry_s)


class ConnectionFailure(Exception):
    """The API server could not be reached or the connection broke (refused, reset, timed out)."""


class FencedWrite(Exception):
    """A write refused before it was sent: this process may no longer be (or not yet be) the
    leader — its lease is not provably valid now (``escaler.runtime.fence``). Not retryable: the
    process is about to exit, or has not been elected."""


def is_gone(err: BaseException) -> bool:
    """410: the requested resourceVersion is too old (compacted); the caller must relist."""
    return isinstance(err, StatusError) and err.code == 410


def is_not_found(err: BaseException) -> bool:
    return isinstance(err, StatusError) and err.code == 404


def is_conflict(err: BaseException) -> bool:
    return isinstance(err, StatusError) and err.code == 409


def is_retryable(err: BaseException) -> bool:
    """429, 5xx and connection failures: worth retrying after a backoff."""
    if isinstance(err, ConnectionFailure):
        return True
    return isinstance(err, StatusError) and (err.code == 429 or err.code >= 500)
