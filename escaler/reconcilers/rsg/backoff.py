"""``WriteBackoff``: how long an RSG waits before retrying a failed member or clone write.

A write that fails (a 403 from RBAC, a webhook's refusal, a 5xx, a connection failure) is recorded
in status and retried after ``base x 2^(n-1)`` seconds for the n-th consecutive failed sync of that
RSG, capped at ``cap``: a refusal that lasts is not hammered, and one that is lifted is retried
within ``cap`` seconds (any event on the RSG or a member retries sooner). A sync whose writes all
succeed resets the count. Pure bookkeeping: the delay is returned as ``Result(requeue_after=...)``.
Thread-safe.
"""

from __future__ import annotations

import threading

from escaler.runtime.types import Request

__all__ = ["DEFAULT_RETRY_BASE_SECONDS", "DEFAULT_RETRY_CAP_SECONDS", "WriteBackoff"]

DEFAULT_RETRY_BASE_SECONDS = 1.0
DEFAULT_RETRY_CAP_SECONDS = 10.0


class WriteBackoff:
    """Consecutive failed syncs per RSG → the delay before the next retry."""

    def __init__(self, base: float = DEFAULT_RETRY_BASE_SECONDS,
                 cap: float = DEFAULT_RETRY_CAP_SECONDS) -> None:
        if not 0 < base <= cap:
            raise ValueError(f"WriteBackoff: need 0 < base <= cap, got base={base} cap={cap}")
        # first delay, and the largest; fixed
        self._base = base
        self._cap = cap
        # guards _failures
        self._mu = threading.Lock()
        # RSG → consecutive failed syncs (absent = 0)
        self._failures: dict[Request, int] = {}

    def failed(self, req: Request) -> float:
        """Count a failed sync; the delay before the retry."""
        with self._mu:
            n = self._failures[req] = self._failures.get(req, 0) + 1
        return float(min(self._base * 2.0 ** min(n - 1, 30), self._cap))

    def succeeded(self, req: Request) -> None:
        with self._mu:
            self._failures.pop(req, None)

    forget = succeeded
