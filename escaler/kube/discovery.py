"""Discovery and REST mapping: which resource (URL segment) serves an ``apiVersion``/``kind``.

Contract:

* ``RESTMapper.mapping_for(api_version, kind)`` and ``mapping_for_resource(group, version, resource)``
  answer from the group-version's discovery document (``/api/v1`` or ``/apis/<group>/<version>``),
  fetched on first use and cached per group-version for ``ttl`` seconds.
* A miss (unknown kind/resource, or a group-version the server does not serve) refetches that
  group-version's document once, so a CRD installed after startup is found; misses refetch at most
  once per ``miss_refresh_interval`` per group-version so a reconcile loop asking for a kind that
  does not exist cannot turn into a discovery storm. A miss that survives the refetch raises
  ``StatusError(404, "NotFound", "no resource for kind X in apiVersion Y")``.
* Transport errors and non-404 statuses from the discovery GET propagate unchanged (retryable ones
  stay retryable). ``invalidate()`` drops the whole cache.
* Thread-safe. The lock is never held across a network call; two threads missing the same
  group-version at once may both fetch it (harmless, and rarer than serialising every lookup).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from escaler.clock import Clock, RealClock
from escaler.errors import StatusError, is_not_found
from escaler.kube.rest import RestClient

__all__ = [
    "DEFAULT_DISCOVERY_TTL",
    "DEFAULT_MISS_REFRESH_INTERVAL",
    "RESTMapper",
    "ResourceMapping",
    "parse_api_version",
]

# A cached discovery document is refetched after this long even without a miss (picks up a CRD that
# gained a subresource, or a resource that moved scope).
DEFAULT_DISCOVERY_TTL = 600.0
# Minimum seconds between miss-triggered refetches of one group-version.
DEFAULT_MISS_REFRESH_INTERVAL = 5.0

_GROUP_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_VERSION_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@functools.lru_cache(maxsize=1024)
def parse_api_version(api_version: str) -> tuple[str, str]:
    """``"v1"`` → ``("", "v1")``; ``"apps/v1"`` → ``("apps", "v1")``; anything else → ValueError.

    Memoized (bounded; a refusal is not cached): every poll of every scaler parses its target's."""
    parts = api_version.split("/")
    if len(parts) == 1:
        group, version = "", parts[0]
    elif len(parts) == 2:
        group, version = parts
        if not _GROUP_RE.fullmatch(group):
            group = "!"  # falls through to the error below
    else:
        group, version = "!", ""
    if group == "!" or not _VERSION_RE.fullmatch(version):
        raise ValueError(
            f"invalid apiVersion {api_version!r}: want '<version>' for the core group (e.g. 'v1') "
            "or '<group>/<version>' (e.g. 'apps/v1')"
        )
    return group, version


@dataclass(frozen=True)
class ResourceMapping:
    """One resource of one group-version, as discovery describes it."""

    # API group; "" for the core group
    group: str
    # version within the group, e.g. "v1"
    version: str
    # plural resource name used in URLs, e.g. "deployments"
    resource: str
    # kind of the objects it serves, e.g. "Deployment"
    kind: str
    # True when objects live in namespaces (URLs carry /namespaces/<ns>)
    namespaced: bool
    # subresources the server serves for it, e.g. {"status", "scale"}
    subresources: frozenset[str] = field(default_factory=frozenset)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """``deployments.apps`` (``pods`` for the core group), as kubectl and error messages spell it."""
        return f"{self.resource}.{self.group}" if self.group else self.resource


@dataclass
class _GroupVersionDoc:
    # resource mappings by kind (main resources only, no "x/status" entries)
    by_kind: dict[str, ResourceMapping]
    # the same mappings by plural resource name
    by_resource: dict[str, ResourceMapping]
    # clock.monotonic() when fetched; drives the TTL and the miss-refresh throttle
    fetched_at: float


def _parse_document(group: str, version: str, doc: dict[str, Any], fetched_at: float) -> _GroupVersionDoc:
    raw = doc.get("resources")
    entries = [r for r in raw if isinstance(r, dict)] if isinstance(raw, list) else []
    subs: dict[str, set[str]] = {}
    for r in entries:
        name = str(r.get("name") or "")
        if "/" in name:
            parent, sub = name.split("/", 1)
            subs.setdefault(parent, set()).add(sub)
    by_kind: dict[str, ResourceMapping] = {}
    by_resource: dict[str, ResourceMapping] = {}
    for r in entries:
        name = str(r.get("name") or "")
        kind = str(r.get("kind") or "")
        if not name or "/" in name or not kind:
            continue
        m = ResourceMapping(group, version, name, kind, bool(r.get("namespaced")),
                            frozenset(subs.get(name, ())))
        by_resource[name] = m
        # two resources may serve one kind (rare); the first listed wins, as in client-go's mapper
        by_kind.setdefault(kind, m)
    return _GroupVersionDoc(by_kind, by_resource, fetched_at)


class RESTMapper:
    """Kind ↔ resource mapping backed by cached discovery documents; see the module docstring."""

    def __init__(
        self,
        rest: RestClient,
        *,
        clock: Clock | None = None,
        ttl: float = DEFAULT_DISCOVERY_TTL,
        miss_refresh_interval: float = DEFAULT_MISS_REFRESH_INTERVAL,
    ) -> None:
        if ttl <= 0:
            raise ValueError(f"RESTMapper: ttl must be > 0, got {ttl}")
        if miss_refresh_interval < 0:
            raise ValueError(f"RESTMapper: miss_refresh_interval must be >= 0, got {miss_refresh_interval}")
        # fetches discovery documents
        self._rest = rest
        # times cache entries (monotonic)
        self._clock: Clock = clock or RealClock()
        # seconds a document is trusted without a miss
        self._ttl = ttl
        # minimum seconds between miss-triggered refetches of one group-version
        self._miss_interval = miss_refresh_interval
        # guards _cache; never held during a fetch
        self._lock = threading.Lock()
        # (group, version) → parsed document; a group-version the server does not serve is cached
        # as an empty document so repeated misses obey the refresh throttle
        self._cache: dict[tuple[str, str], _GroupVersionDoc] = {}

    def mapping_for(self, api_version: str, kind: str) -> ResourceMapping:
        group, version = parse_api_version(api_version)
        if not kind:
            raise ValueError(f"mapping_for: kind must not be empty (apiVersion {api_version!r})")
        m = self._lookup(group, version, lambda d: d.by_kind.get(kind))
        if m is None:
            raise StatusError(404, "NotFound", f"no resource for kind {kind} in apiVersion {api_version}")
        return m

    def mapping_for_resource(self, group: str, version: str, resource: str) -> ResourceMapping:
        api_version = f"{group}/{version}" if group else version
        parse_api_version(api_version)
        if not resource or "/" in resource:
            raise ValueError(f"mapping_for_resource: invalid resource {resource!r} in {api_version}")
        m = self._lookup(group, version, lambda d: d.by_resource.get(resource))
        if m is None:
            raise StatusError(404, "NotFound", f"no resource {resource} in apiVersion {api_version}")
        return m

    def invalidate(self) -> None:
        with self._lock:
            self._cache.clear()

    def _lookup(
        self, group: str, version: str, pick: Callable[[_GroupVersionDoc], ResourceMapping | None]
    ) -> ResourceMapping | None:
        now = self._clock.monotonic()
        with self._lock:
            doc = self._cache.get((group, version))
        if doc is None or now - doc.fetched_at >= self._ttl:
            return pick(self._fetch(group, version))
        found = pick(doc)
        if found is None and now - doc.fetched_at >= self._miss_interval:
            found = pick(self._fetch(group, version))
        return found

    def _fetch(self, group: str, version: str) -> _GroupVersionDoc:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            body = self._rest.request("GET", path)
        except StatusError as err:
            if not is_not_found(err):
                raise
            body = {}  # group-version not served (yet): remember it as empty
        doc = _parse_document(group, version, body, self._clock.monotonic())
        with self._lock:
            self._cache[(group, version)] = doc
        return doc
