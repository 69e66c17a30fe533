"""``SLOService``: what each SLO API route does, independent of the HTTP framework.

Contract (every method is synchronous; the HTTP layer runs it off the event loop; every refusal
is an ``SLOApiError``):

* **Readiness.** Until the index is ready every ``/config`` call is 503 ``unavailable`` (a route
  not yet seen must not read as 404).
* **Authentication** (with a ``RequestAuth``; ``None`` = ``--auth none``): a bearer token is
  reviewed by TokenReview (none or invalid → 401; a client past its failed-authentication budget
  → 429), then the user is authorized by SubjectAccessReview *on the CRs the request touches*:
  ``get`` on each CR of a route for ``GET /config/namespaces/{namespace}/{route}``, ``patch`` for
  ``PUT`` and ``DELETE``; ``list`` of a kind (cluster-wide, else per namespace holding routes) for
  ``GET /config``, which shows only what the user may list (403 when nothing). A route the user
  may not ``get``/``patch`` and a route with no CR get **the same** 404 ("route R not found in
  namespace N, or user U may not V it"): the answer never tells a caller whether a route exists,
  nor names the CR behind it; both charge the user's denial budget (``RequestAuth``: past it,
  429 without a review).
  Tokens are never logged or kept (the review cache keys them by SHA-256).
* **Routes.** A route is ``(namespace, serviceId)`` (issue 27 item 5): ``resolve`` across both
  kinds **in that namespace only**, so a serviceId in another namespace is another route and never
  a conflict: none → 404 ``not_found``; more than one CR → 409 ``conflict`` ("serviceId X is
  defined by more than one SLO requirement CRs in namespace N", naming no CR), for reads and writes
  alike (after authorization, so the 409 tells only a user allowed on every CR of the route).
* ``put(route, body)``: ``translate.validate_patch`` against the route's kind, then the CR merge
  patch; a patch that changes nothing is not sent. ``delete(route)``: ``translate.clear_patch``
  (nothing to clear → no write). Both answer the route's full body from what the API server
  returned, and map the API server's failures with ``errors.from_upstream``. A write is recorded
  in the index (``SLOIndex.record_write``), so the next read shows it even before the watch does.
* **Observed.** Every route in an answer (the listing's summaries, a route's body) carries
  ``observed`` (``escaler.sloapi.observed``): its objectives, the latest measured values and the
  engine's decision from the CR's status, read-only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from escaler.errors import ConnectionFailure, StatusError
from escaler.runtime.authfilter import RequestAuth
from escaler.runtime.authn import ResourceAttributes, UserInfo
from escaler.runtime.httpbase import RETRY_AFTER_SECONDS, HttpError
from escaler.signals.netpolicy import IPNetwork
from escaler.sloapi import translate
from escaler.sloapi.errors import SLOApiError, from_upstream
from escaler.sloapi.index import Entry, SLOIndex
from escaler.sloapi.kinds import GROUP, VERSION, SLOKind
from escaler.sloapi.observed import FIELD, observed

__all__ = ["CONFLICT_MESSAGE", "GONE_MESSAGE", "SLOService", "SLOWriter"]

CONFLICT_MESSAGE = ("serviceId {route} is defined by more than one SLO requirement CRs "
                    "in namespace {namespace}")

# the answer (410) of the unscoped /config/{route} of 0.1, whatever the route: it tells nothing
GONE_MESSAGE = ("/config/{route} is gone: a route is scoped by namespace. Use "
                "/config/namespaces/<namespace>/<route> (GET /config lists each route's namespace) — "
                "docs/sloapi.md, Migration")

_log = logging.getLogger(__name__)


class SLOWriter(Protocol):
    """Writes to the API server (``escaler.sloapi.upstream.KubeSLOClient``)."""

    def patch(self, kind: SLOKind, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...


class SLOService:
    """See the module docstring."""

    def __init__(self, index: SLOIndex, writer: SLOWriter, auth: RequestAuth | None = None,
                 trusted_proxies: Sequence[IPNetwork] = ()) -> None:
        # the read side: every CR of both kinds by route; fixed
        self.index = index
        # --trusted-proxies: whose X-Forwarded-For names the client (escaler.sloapi.clients)
        self.trusted_proxies = tuple(trusted_proxies)
        # the write side; fixed
        self.writer = writer
        # None = no authentication (--auth none)
        self.auth = auth

    # ---- auth -------------------------------------------------------------------------------

    def authenticate(self, token: str | None, client: str) -> UserInfo | None:
        if self.auth is None:
            return None
        try:
            return self.auth.authenticate(token, client)
        except HttpError as exc:
            raise SLOApiError(exc.status, exc.message, headers=exc.headers) from None

    def _permits(self, user: UserInfo | None, attrs: ResourceAttributes) -> bool:
        if self.auth is None or user is None:
            return True
        try:
            return self.auth.permits(user, attrs)
        except HttpError as exc:
            raise SLOApiError(exc.status, exc.message, headers=exc.headers) from None

    def _authorize(self, user: UserInfo | None, verb: str, entries: list[Entry]) -> None:
        if self.auth is None or user is None:
            return
        for e in entries:
            try:
                self.auth.authorize(user, _attributes(verb, e.kind, e.namespace, e.name))
            except HttpError as exc:
                raise SLOApiError(exc.status, exc.message, headers=exc.headers) from None

    # ---- routes -----------------------------------------------------------------------------

    def _ready(self) -> None:
        reason = self.index.not_ready_reason()
        if reason is not None:
            raise SLOApiError(503, f"the SLO API is starting: {reason}",
                              headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

    def _entry(self, namespace: str, route: str, user: UserInfo | None, verb: str) -> Entry:
        self._ready()
        authed = self.auth is not None and user is not None
        who = f", or user {user.username!r} may not {verb} it" if authed and user is not None else ""
        hidden = SLOApiError(404, f"route {route!r} not found in namespace {namespace!r}{who}")
        if self.auth is not None and user is not None:
            try:
                self.auth.check_denials(user)
            except HttpError as exc:
                raise SLOApiError(exc.status, exc.message, headers=exc.headers) from None
        entries = self.index.resolve(namespace, route)
        if not entries:
            if self.auth is not None and user is not None:
                self.auth.charge_denial(user)
            raise hidden
        try:
            self._authorize(user, verb, entries)
        except SLOApiError as exc:
            if exc.status == 403:
                raise hidden from None
            raise
        if len(entries) > 1:
            raise SLOApiError(409, CONFLICT_MESSAGE.format(route=route, namespace=namespace))
        return entries[0]

    def list_routes(self, user: UserInfo | None) -> dict[str, Any]:
        """Every route ``user`` may list. The per-namespace checks filter, they are not denied
        requests: a tenant listing in a cluster of many namespaces is charged one denial when it may
        list none of them, not one per namespace it may not see (its budget would be spent by its
        first listing)."""
        self._ready()
        if self.auth is not None and user is not None:
            try:
                self.auth.check_denials(user)
            except HttpError as exc:
                raise SLOApiError(exc.status, exc.message, headers=exc.headers) from None
        entries = self.index.entries()
        visible: list[Entry] = []
        any_allowed = False
        for kind in self.index.kinds:
            of_kind = [e for e in entries if e.kind is kind]
            if self._permits(user, _attributes("list", kind, "", "")):
                any_allowed = True
                visible += of_kind
                continue
            for ns in sorted({e.namespace for e in of_kind}):
                if self._permits(user, _attributes("list", kind, ns, "")):
                    any_allowed = True
                    visible += [e for e in of_kind if e.namespace == ns]
        if not any_allowed:
            assert user is not None
            if self.auth is not None:
                self.auth.charge_denial(user)
            raise SLOApiError(403, f'user "{user.username}" cannot list SLO requirements '
                                   f'({", ".join(k.plural for k in self.index.kinds)}) in API group '
                                   f'"{GROUP}" in any namespace holding routes')
        visible.sort(key=lambda e: (e.route, e.namespace, e.key))
        return {"routes": [{**translate.summary(e.kind, e.obj), FIELD: observed(e.kind, e.obj)}
                           for e in visible]}

    def get(self, namespace: str, route: str, user: UserInfo | None) -> dict[str, Any]:
        e = self._entry(namespace, route, user, "get")
        return _body(e.kind, e.obj)

    def put(self, namespace: str, route: str, user: UserInfo | None, body: Any) -> dict[str, Any]:
        e = self._entry(namespace, route, user, "patch")
        current = translate.full(e.kind, e.obj)
        patch = translate.validate_patch(e.kind, body, current)
        cr_patch = translate.spec_patch(e.kind, patch)
        merged = translate.full(e.kind, {"spec": translate.merge(e.obj.get("spec"), cr_patch["spec"])})
        if merged == current:  # compared as shown, so a default written out is no change either
            return _body(e.kind, e.obj)
        return self._write(e, route, cr_patch)

    def delete(self, namespace: str, route: str, user: UserInfo | None) -> dict[str, Any]:
        e = self._entry(namespace, route, user, "patch")
        cr_patch = translate.clear_patch(e.kind, e.obj)
        if cr_patch is None:
            return _body(e.kind, e.obj)
        return self._write(e, route, cr_patch)

    def _write(self, e: Entry, route: str, cr_patch: dict[str, Any]) -> dict[str, Any]:
        try:
            written = self.writer.patch(e.kind, e.namespace, e.name, cr_patch)
        except (StatusError, ConnectionFailure) as exc:
            err = from_upstream(exc, route)
            log = _log.info if err.status < 500 else _log.warning
            log("write of route %s (%s %s/%s) refused: %s", route, e.kind.kind, e.namespace, e.name, exc)
            raise err from None
        _log.info("route %s written (%s %s/%s)", route, e.kind.kind, e.namespace, e.name)
        if not isinstance(written, Mapping):
            return _body(e.kind, {})
        self.index.record_write(e.kind, written)  # a listing right after this shows the write
        return _body(e.kind, written)


def _body(kind: SLOKind, obj: Mapping[str, Any]) -> dict[str, Any]:
    """A route's answer: its body (``translate.full``) and what the engine observed of it."""
    return {**translate.full(kind, obj), FIELD: observed(kind, obj)}


def _attributes(verb: str, kind: SLOKind, namespace: str, name: str) -> ResourceAttributes:
    return ResourceAttributes(verb=verb, group=GROUP, version=VERSION, resource=kind.plural,
                              namespace=namespace, name=name)
