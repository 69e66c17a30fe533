"""Bearer-token authentication and authorization of one HTTP request, shared by the signal API and
the secure ``/metrics`` (controller-runtime's ``filters.WithAuthenticationAndAuthorization``).

Contract:

* ``RequestAuth.check(token, client, attributes)`` returns the reviewed ``UserInfo`` or raises an
  ``HttpError``: no token → 401 (``WWW-Authenticate: Bearer``); a client that has used up its
  failed-authentication budget → 429 with ``Retry-After``, **without** a TokenReview; the token not
  valid (or not for the audience) → 401, and the client's budget is charged; the user not allowed
  ``attributes`` → 403 naming user, verb and resource, and the *user's* denial budget is charged
  (``denials``, the same buckets keyed by user name); a user who has used it up → 429 with
  ``Retry-After`` **without** a SubjectAccessReview (nor a log line): a valid token and a stream of
  object names it may not touch cost a bounded number of reviews, made with the manager's
  identity, not one each; a review that cannot be made → 503 with
  ``Retry-After`` whose body says only "authentication unavailable" / "authorization
  unavailable" — the internal cause (an RBAC error, an unreachable API server) is logged, never
  shown to a caller that may not even be authenticated.
* ``FailureLimiter``: one token bucket per client address (``burst`` failures, refilled at
  ``per_second``), on the injected clock; the table of clients is a bounded LRU
  (``max_clients``), so a scan from many addresses costs bounded memory (an evicted client starts
  with a full bucket again).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict

from escaler.clock import Clock, RealClock
from escaler.runtime.authn import (
    AccessDecision,
    Attributes,
    Authenticator,
    ReviewUnavailable,
    UserInfo,
)
from escaler.runtime.httpbase import RETRY_AFTER_SECONDS, HttpError

__all__ = [
    "DEFAULT_FAILURE_BURST",
    "DEFAULT_FAILURE_MAX_CLIENTS",
    "DEFAULT_FAILURE_PER_SECOND",
    "FailureLimiter",
    "RequestAuth",
]

# failed authentications a client may make at once, and the refill rate of that budget
DEFAULT_FAILURE_BURST = 10
DEFAULT_FAILURE_PER_SECOND = 1.0
# clients whose budget is tracked (least recently failing evicted first)
DEFAULT_FAILURE_MAX_CLIENTS = 4096

_log = logging.getLogger(__name__)


class FailureLimiter:
    """Per-client token buckets of failed authentications; thread-safe."""

    def __init__(self, *, burst: int = DEFAULT_FAILURE_BURST, per_second: float = DEFAULT_FAILURE_PER_SECOND,
                 max_clients: int = DEFAULT_FAILURE_MAX_CLIENTS, clock: Clock | None = None) -> None:
        if burst < 1:
            raise ValueError(f"FailureLimiter.burst: must be >= 1, got {burst!r}")
        if not (per_second > 0 and math.isfinite(per_second)):
            raise ValueError(f"FailureLimiter.per_second: must be a finite number > 0, got {per_second!r}")
        if max_clients < 1:
            raise ValueError(f"FailureLimiter.max_clients: must be >= 1, got {max_clients!r}")
        self.burst = burst
        self.per_second = per_second
        self.max_clients = max_clients
        self._clock = clock or RealClock()
        self.clock = self._clock
        # guards _buckets
        self._mu = threading.Lock()
        # client → (tokens left, clock.monotonic() of that count); LRU order, at most max_clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def _tokens(self, client: str, now: float) -> float:
        tokens, at = self._buckets.get(client, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) * self.per_second)

    def retry_after(self, client: str) -> float:
        """0 when ``client`` may try to authenticate now, else the seconds until it may."""
        with self._mu:
            tokens = self._tokens(client, self._clock.monotonic())
        return 0.0 if tokens >= 1 else (1 - tokens) / self.per_second

    def failed(self, client: str) -> None:
        """Charge one failed authentication to ``client``."""
        with self._mu:
            now = self._clock.monotonic()
            tokens = self._tokens(client, now)
            self._buckets[client] = (max(0.0, tokens - 1), now)
            self._buckets.move_to_end(client)
            while len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)


class RequestAuth:
    """The authentication filter of one server; see the module docstring."""

    def __init__(self, authenticator: Authenticator, limiter: FailureLimiter | None = None,
                 *, name: str = "http", hint: str = "", denials: FailureLimiter | None = None) -> None:
        self.authenticator = authenticator
        self.limiter = limiter or FailureLimiter()
        # denied authorizations per user name (the same budget, on the failure limiter's clock)
        self.denials = denials or FailureLimiter(clock=self.limiter.clock)
        # appended to the 401 for an invalid token (how to get a good one)
        self.hint = hint
        # names the server in log lines
        self.name = name

    def authenticate(self, token: str | None, client: str) -> UserInfo:
        if token is None:
            raise HttpError(401, "a bearer token is required (Authorization: Bearer <token>)",
                            headers={"WWW-Authenticate": "Bearer"})
        wait = self.limiter.retry_after(client)
        if wait > 0:
            raise HttpError(429, "too many failed authentications from this client; retry later",
                            headers={"Retry-After": str(max(1, math.ceil(wait)))})
        try:
            user = self.authenticator.authenticate(token)
        except ReviewUnavailable as exc:
            _log.error("%s: cannot authenticate a request from %s: %s", self.name, client, exc)
            raise HttpError(503, "authentication unavailable; retry later",
                            headers={"Retry-After": str(RETRY_AFTER_SECONDS)}) from None
        if user is None:
            self.limiter.failed(client)
            raise HttpError(401, "the bearer token is not valid" + (f" ({self.hint})" if self.hint else ""),
                            headers={"WWW-Authenticate": "Bearer"})
        return user

    def check_denials(self, user: UserInfo) -> None:
        """429 when ``user`` has used up its denial budget (no review is made then)."""
        wait = self.denials.retry_after(f"user:{user.username}")
        if wait > 0:
            raise HttpError(429, "too many denied requests for this user; retry later",
                            headers={"Retry-After": str(max(1, math.ceil(wait)))})

    def charge_denial(self, user: UserInfo) -> None:
        """Count a refusal against ``user``'s denial budget (a caller that answers a missing object
        as it answers a denied one charges it too, so the budget tells nothing either)."""
        self.denials.failed(f"user:{user.username}")

    def authorize(self, user: UserInfo, attributes: Attributes) -> None:
        key = f"user:{user.username}"
        self.check_denials(user)
        try:
            decision: AccessDecision = self.authenticator.authorize(user, attributes)
        except ReviewUnavailable as exc:
            _log.error("%s: cannot authorize %s: %s", self.name, user.username, exc)
            raise HttpError(503, "authorization unavailable; retry later",
                            headers={"Retry-After": str(RETRY_AFTER_SECONDS)}) from None
        if not decision.allowed:
            self.denials.failed(key)
            message = f'user "{user.username}" cannot {attributes.describe()}'
            if decision.reason:
                message += f": {decision.reason}"
            _log.info("%s: request denied: %s", self.name, message)
            raise HttpError(403, message)

    def permits(self, user: UserInfo, attributes: Attributes) -> bool:
        """Whether ``user`` may ``attributes``, for *filtering* what a request shows (a listing's
        per-namespace checks): the review is cached like ``authorize``'s, but a refusal is no
        denied request — nothing is charged and no budget is checked (the caller checks the budget
        once per request, and charges once if the request as a whole is refused)."""
        try:
            return self.authenticator.authorize(user, attributes).allowed
        except ReviewUnavailable as exc:
            _log.error("%s: cannot authorize %s: %s", self.name, user.username, exc)
            raise HttpError(503, "authorization unavailable; retry later",
                            headers={"Retry-After": str(RETRY_AFTER_SECONDS)}) from None

    def check(self, token: str | None, client: str, attributes: Attributes | None) -> UserInfo:
        """Authenticate, then (with ``attributes``) authorize; raises ``HttpError``."""
        user = self.authenticate(token, client)
        if attributes is not None:
            self.authorize(user, attributes)
        return user
