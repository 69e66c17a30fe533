"""Who is calling, and may they? Delegated to the Kubernetes API server
(docs/guide/elasticscaler.md#the-triggers, docs/sloapi.md).

Contract:

* An ``Authenticator`` turns a bearer token into a ``UserInfo`` (``None``: the token is not
  valid) and decides whether that user may do ``ResourceAttributes`` (an ``AccessDecision``).
  Either call raises ``ReviewUnavailable`` when it cannot answer (API server unreachable, an
  error status, the manager lacking RBAC); that is never cached and never read as a "no".
* ``KubeAuthenticator(rest)`` asks the API server, exactly as kube-apiserver's delegated
  authentication/authorization does: a ``TokenReview``
  (``POST /apis/authentication.k8s.io/v1/tokenreviews``) for the token, then a
  ``SubjectAccessReview`` (``POST /apis/authorization.k8s.io/v1/subjectaccessreviews``) carrying
  the reviewed user, uid, groups and extra and the resource attributes.
* The TokenReview names ``audiences`` (default ``("escaler",)``, ``DEFAULT_AUDIENCES``): a token
  is accepted only when the answer is authenticated **and** its ``status.audiences`` contains one
  of them — a ServiceAccount token minted for the API server (or any other audience) is refused,
  so a token a workload holds for something else cannot be replayed here. Clients mint one with
  ``kubectl create token <serviceaccount> --audience escaler`` (or a projected volume with
  ``audience: escaler``). ``audiences=()`` asks for the API server's own audiences (what a
  Prometheus ServiceAccount token carries: the secure ``/metrics`` uses that, as
  controller-runtime does).
* Both answers are cached for ``cache_ttl`` seconds (default ``DEFAULT_REVIEW_CACHE_TTL``) —
  positive *and* negative ones — in bounded ``cachetools.TTLCache``s timed by the injected clock:
  token reviews keyed by the token's SHA-256 (the token itself is never kept), access reviews by
  (user, attributes). Valid and invalid tokens live in **two** caches
  (``cache_size`` and ``negative_cache_size`` entries), so a flood of bad tokens evicts only
  other bad tokens, never a cached good one. Concurrent misses for one key make a single review
  (the others wait for its answer), so a storm of pushes with one token costs one TokenReview and
  one SubjectAccessReview per TTL, not one per request. The price: a revoked token or a removed
  RoleBinding keeps working for up to ``cache_ttl``.
* ``authorize`` takes ``ResourceAttributes`` or ``NonResourceAttributes`` (a path and a verb:
  ``/metrics`` ``get``, as controller-runtime's secure metrics serving asks).
* ``ResourceAttributes`` may hold ``{param}`` placeholders (``namespace="{namespace}"``) that
  ``substitute`` fills from a route's path parameters.

RBAC: the manager's ServiceAccount needs ``create`` on ``tokenreviews``
(``authentication.k8s.io``) and ``subjectaccessreviews`` (``authorization.k8s.io``) — the rules of
the built-in ``system:auth-delegator`` ClusterRole, which a ClusterRoleBinding may grant instead.
Without them every authenticated request is answered 503, and the log names the missing rule.
The manager's ClusterRole rules (no wildcards)::

    - apiGroups: [authentication.k8s.io]
      resources: [tokenreviews]
      verbs: [create]
    - apiGroups: [authorization.k8s.io]
      resources: [subjectaccessreviews]
      verbs: [create]

and a client that pushes signals needs, in the scaler's namespace (Role) or everywhere::

    - apiGroups: [elasticscaler.io]
      resources: [elasticscalers/signal]
      verbs: [update]
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Generic, Protocol, TypeVar

from cachetools import TTLCache

from escaler.clock import Clock, RealClock
from escaler.errors import ConnectionFailure, StatusError
from escaler.kube.rest import RestClient, Timeout

__all__ = [
    "DEFAULT_AUDIENCES",
    "DEFAULT_NEGATIVE_CACHE_SIZE",
    "DEFAULT_REVIEW_CACHE_SIZE",
    "DEFAULT_REVIEW_CACHE_TTL",
    "DEFAULT_REVIEW_TIMEOUT",
    "SUBJECT_ACCESS_REVIEW_PATH",
    "TOKEN_REVIEW_PATH",
    "AccessDecision",
    "Authenticator",
    "KubeAuthenticator",
    "NonResourceAttributes",
    "ResourceAttributes",
    "ReviewUnavailable",
    "UserInfo",
]

TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
# How long a review's answer (either way) is reused.
DEFAULT_REVIEW_CACHE_TTL = 10.0
# Entries per cache (valid tokens; (user, attributes)); the oldest are evicted beyond it.
DEFAULT_REVIEW_CACHE_SIZE = 4096
# Entries of the separate cache of tokens that did not authenticate.
DEFAULT_NEGATIVE_CACHE_SIZE = 1024
# The audiences a token must be issued for (TokenReview spec.audiences).
DEFAULT_AUDIENCES: tuple[str, ...] = ("escaler",)
# (connect, read) seconds for one review: a push waits on it, so it is kept short.
DEFAULT_REVIEW_TIMEOUT: tuple[float, float] = (2.0, 5.0)

_log = logging.getLogger(__name__)

_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

K = TypeVar("K")
V = TypeVar("V")


class ReviewUnavailable(Exception):
    """A review could not be made; the request can be retried later."""


@dataclass(frozen=True)
class UserInfo:
    """An authenticated user, as ``TokenReview.status.user`` names it. Hashable."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    # (key, values) pairs sorted by key; a tuple so the user can key a cache
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def from_review(cls, user: Mapping[str, Any]) -> UserInfo:
        extra = user.get("extra") or {}
        return cls(
            username=str(user.get("username") or ""),
            uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(v) for v in vs or ())) for k, vs in extra.items()))
            if isinstance(extra, Mapping) else (),
        )

    def extra_dict(self) -> dict[str, list[str]]:
        return {k: list(vs) for k, vs in self.extra}


@dataclass(frozen=True)
class ResourceAttributes:
    """A SubjectAccessReview's ``resourceAttributes``; ``""`` fields are left out of the review.

    Any field may hold ``{param}`` placeholders, filled by ``substitute`` (route path params).
    """

    verb: str
    resource: str
    group: str = ""
    version: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    def __post_init__(self) -> None:
        for required in ("verb", "resource"):
            if not getattr(self, required):
                raise ValueError(f"ResourceAttributes.{required}: must not be empty")

    def placeholders(self) -> set[str]:
        return {m for f in fields(self) for m in _PLACEHOLDER_RE.findall(getattr(self, f.name))}

    def substitute(self, params: Mapping[str, str]) -> ResourceAttributes:
        """A copy with every ``{param}`` replaced; ``KeyError`` for a param not given."""
        if not self.placeholders():
            return self
        return replace(self, **{
            f.name: _PLACEHOLDER_RE.sub(lambda m: params[m.group(1)], getattr(self, f.name))
            for f in fields(self)
        })

    def to_spec(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}

    def describe(self) -> str:
        """kube-apiserver's wording: ``update resource "elasticscalers/signal" in API group ...``."""
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        text = f'{self.verb} resource "{resource}" in API group "{self.group}"'
        if self.name:
            text = f'{self.verb} resource "{resource}" named "{self.name}" in API group "{self.group}"'
        if self.namespace:
            text += f' in the namespace "{self.namespace}"'
        return text


@dataclass(frozen=True)
class NonResourceAttributes:
    """A SubjectAccessReview's ``nonResourceAttributes``: a URL path and an HTTP verb."""

    path: str
    verb: str = "get"

    def __post_init__(self) -> None:
        if not self.path.startswith("/"):
            raise ValueError(f"NonResourceAttributes.path: must start with '/', got {self.path!r}")
        if not self.verb:
            raise ValueError("NonResourceAttributes.verb: must not be empty")

    def to_spec(self) -> dict[str, str]:
        return {"path": self.path, "verb": self.verb}

    def describe(self) -> str:
        return f'{self.verb} path "{self.path}"'


Attributes = ResourceAttributes | NonResourceAttributes


@dataclass(frozen=True)
class AccessDecision:
    allowed: bool
    # the authorizer's reason (may be empty), shown in a 403
    reason: str = ""


class Authenticator(Protocol):
    """Bearer token → user; (user, attributes) → decision. See the module docstring."""

    def authenticate(self, token: str) -> UserInfo | None: ...

    def authorize(self, user: UserInfo, attributes: Attributes) -> AccessDecision: ...


class _Flight(Generic[V]):
    """One in-progress review that concurrent callers for the same key wait on."""

    def __init__(self) -> None:
        # set once value or error is
        self.done = threading.Event()
        self.value: V | None = None
        self.error: BaseException | None = None


class _ReviewCache(Generic[K, V]):
    """A TTL cache with single-flight misses; thread-safe. Errors are not cached.

    With ``negative_size``, answers for which ``is_negative`` holds go to a second cache of that
    size, so negative answers never evict positive ones (and the other way round).
    """

    def __init__(self, ttl: float, maxsize: int, clock: Clock, *, negative_size: int = 0,
                 is_negative: Callable[[V], bool] = lambda _v: False) -> None:
        # answers younger than ttl (clock.monotonic seconds); the positive ones when split
        self._cache: TTLCache[K, V] = TTLCache(maxsize=maxsize, ttl=ttl, timer=clock.monotonic)
        # the negative answers when split (None: one cache for both)
        self._negative: TTLCache[K, V] | None = (
            TTLCache(maxsize=negative_size, ttl=ttl, timer=clock.monotonic) if negative_size else None)
        self._is_negative = is_negative
        # keys being reviewed now; an entry lives from the first miss until its answer is cached
        self._inflight: dict[K, _Flight[V]] = {}
        # guards _cache (TTLCache is not thread-safe) and _inflight
        self._mu = threading.Lock()

    def get(self, key: K, compute: Callable[[], V]) -> V:
        with self._mu:
            for cache in (self._cache, self._negative):
                if cache is not None and key in cache:
                    return cache[key]
            flight = self._inflight.get(key)
            leader = flight is None
            if flight is None:
                flight = self._inflight[key] = _Flight()
        if not leader:
            # compute() is bounded by the review's request timeout, so this wait is too
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.value  # type: ignore[return-value]
        try:
            value = compute()
        except BaseException as exc:
            flight.error = exc
            with self._mu:
                del self._inflight[key]
            flight.done.set()
            raise
        flight.value = value
        with self._mu:
            negative = self._negative is not None and self._is_negative(value)
            target = self._negative if negative and self._negative is not None else self._cache
            target[key] = value
            del self._inflight[key]
        flight.done.set()
        return value


class KubeAuthenticator:
    """TokenReview + SubjectAccessReview on the API server, cached; see the module docstring."""

    def __init__(
        self,
        rest: RestClient,
        *,
        cache_ttl: float = DEFAULT_REVIEW_CACHE_TTL,
        cache_size: int = DEFAULT_REVIEW_CACHE_SIZE,
        negative_cache_size: int = DEFAULT_NEGATIVE_CACHE_SIZE,
        audiences: tuple[str, ...] = DEFAULT_AUDIENCES,
        timeout: Timeout = DEFAULT_REVIEW_TIMEOUT,
        clock: Clock | None = None,
    ) -> None:
        if not cache_ttl > 0:
            raise ValueError(f"KubeAuthenticator.cache_ttl: must be > 0 seconds, got {cache_ttl!r}")
        if cache_size < 1:
            raise ValueError(f"KubeAuthenticator.cache_size: must be >= 1, got {cache_size!r}")
        if negative_cache_size < 1:
            raise ValueError(
                f"KubeAuthenticator.negative_cache_size: must be >= 1, got {negative_cache_size!r}")
        if not all(audiences):
            raise ValueError(f"KubeAuthenticator.audiences: must be non-empty strings, got {audiences!r}")
        # the audiences a token must be issued for; () = the API server's own (no check here); fixed
        self.audiences = tuple(audiences)
        # the manager's REST client (its credentials make the reviews)
        self._rest = rest
        # per-review request timeout
        self._timeout = timeout
        clock = clock or RealClock()
        # sha256(token) → user (None: not authenticated, kept in the separate negative cache)
        self._tokens: _ReviewCache[str, UserInfo | None] = _ReviewCache(
            cache_ttl, cache_size, clock, negative_size=negative_cache_size, is_negative=lambda u: u is None)
        # (user, attributes) → decision
        self._access: _ReviewCache[tuple[UserInfo, Attributes], AccessDecision] = _ReviewCache(
            cache_ttl, cache_size, clock)

    def authenticate(self, token: str) -> UserInfo | None:
        key = hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()
        return self._tokens.get(key, lambda: self._token_review(token))

    def authorize(self, user: UserInfo, attributes: Attributes) -> AccessDecision:
        return self._access.get((user, attributes), lambda: self._access_review(user, attributes))

    def _post(self, path: str, what: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._rest.request("POST", path, body=body, timeout=self._timeout)
        except StatusError as exc:
            if exc.code == 403:
                message = (f"the manager may not create {what} (RBAC: grant create on {what}, e.g. "
                           f"bind the system:auth-delegator ClusterRole): {exc.message}")
            else:
                message = f"{what}: {exc}"
            _log.error("cannot review a request: %s", message)
            raise ReviewUnavailable(message) from exc
        except ConnectionFailure as exc:
            _log.error("cannot review a request: %s: %s", what, exc)
            raise ReviewUnavailable(f"{what}: {exc}") from exc

    def _token_review(self, token: str) -> UserInfo | None:
        doc = self._post(TOKEN_REVIEW_PATH, "tokenreviews.authentication.k8s.io", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token, **({"audiences": list(self.audiences)} if self.audiences else {})},
        })
        status = doc.get("status") or {}
        if not status.get("authenticated"):
            _log.debug("token not authenticated: %s", status.get("error") or "no error given")
            return None
        granted = status.get("audiences") or []
        if self.audiences and (not isinstance(granted, list)
                               or not set(self.audiences) & {str(a) for a in granted}):
            _log.info("TokenReview authenticated a token for audiences %s, not %s; refusing it",
                      granted, list(self.audiences))
            return None
        user = UserInfo.from_review(status.get("user") or {})
        if not user.username:
            _log.warning("TokenReview authenticated a token without a username; refusing it")
            return None
        return user

    def _access_review(self, user: UserInfo, attributes: Attributes) -> AccessDecision:
        kind = "resourceAttributes" if isinstance(attributes, ResourceAttributes) else "nonResourceAttributes"
        spec: dict[str, Any] = {kind: attributes.to_spec(), "user": user.username}
        if user.uid:
            spec["uid"] = user.uid
        if user.groups:
            spec["groups"] = list(user.groups)
        if user.extra:
            spec["extra"] = user.extra_dict()
        doc = self._post(SUBJECT_ACCESS_REVIEW_PATH, "subjectaccessreviews.authorization.k8s.io", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec,
        })
        status = doc.get("status") or {}
        reason = str(status.get("reason") or "")
        if status.get("evaluationError"):
            reason = f"{reason}; {status['evaluationError']}" if reason else str(status["evaluationError"])
        # "denied" only matters when "allowed" is false; both false is "no opinion" = not allowed
        return AccessDecision(allowed=bool(status.get("allowed")) and not status.get("denied"),
                              reason=reason)
