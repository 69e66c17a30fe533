"""The SLO API's errors: one envelope, fixed codes, and the API server's failures translated.

Contract:

* Every error body is ``{"error": {"code": CODE, "message": TEXT}}`` (``envelope``). Codes:
  400 ``invalid_request``, 401 ``unauthorized``, 403 ``forbidden``, 404 ``not_found``,
  405 ``method_not_allowed``, 408 ``request_timeout``, 409 ``conflict``,
  413 ``payload_too_large``, 415 ``unsupported_media_type``, 429 ``too_many_requests``,
  500 ``internal_error``, 502 ``upstream_error``, 503 ``unavailable`` (``ERROR_CODES``).
* ``from_upstream(exc, route)`` maps a failed write to the API server:

  - ``422`` (the CRD's schema or CEL refused the merged spec) → 400 ``invalid_request`` whose
    message is rebuilt from ``details.causes`` — never from the Status message, which names the
    CR (``LLMSLORequirement.llm.escaler.io "x" is invalid: ...``). A cause's field
    ``spec.x.y`` is shown as ``x.y`` (the route body's own path), and ``spec.`` prefixes inside
    cause messages are dropped the same way. Several causes are joined with ``"; "``.
  - ``404`` (the CR went away since the index saw it) → 404 ``not_found`` for the route.
  - ``409`` → 409 ``conflict`` (retry).
  - anything else — other statuses (403 when the SLO API's own RBAC is missing), connection
    failures, timeouts — → 502 ``upstream_error`` with the HTTP code and reason only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from escaler.errors import ConnectionFailure, StatusError
from escaler.runtime.apiserver import ERROR_CODES as API_ERROR_CODES

__all__ = ["ERROR_CODES", "SLOApiError", "envelope", "from_upstream", "strip_spec"]

# the manager API server's status → code table (one vocabulary for every escaler HTTP API), plus
# the media-type refusal only the SLO API makes
ERROR_CODES: Mapping[int, str] = {**API_ERROR_CODES, 415: "unsupported_media_type"}

# "spec.x" at the start of a field path or a word inside a message
_SPEC_PREFIX_RE = re.compile(r"(?<![\w.])spec\.")
# at most this many causes are spelled out in one message
MAX_CAUSES = 10


class SLOApiError(Exception):
    """Answer ``status`` with the envelope ``{"error": {"code", "message"}}``."""

    def __init__(self, status: int, message: str, *, code: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        # the HTTP status (4xx/5xx)
        self.status = status
        # shown to the caller: names the field and the rule; never a CR name, never a token
        self.message = message
        # the machine-readable code; derived from status unless given
        self.code = code or ERROR_CODES.get(status, "error")
        # extra response headers (WWW-Authenticate, Retry-After)
        self.headers = dict(headers or {})


def envelope(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def strip_spec(text: str) -> str:
    """``spec.bounds.max`` → ``bounds.max``; ``spec`` alone (the whole route body) → ``""``."""
    stripped = _SPEC_PREFIX_RE.sub("", text)
    return "" if stripped == "spec" else stripped


def _cause_text(cause: Mapping[str, Any]) -> str:
    field = strip_spec(str(cause.get("field") or ""))
    message = strip_spec(str(cause.get("message") or cause.get("reason") or "invalid"))
    return f"{field}: {message}" if field else message


def _invalid_message(details: Mapping[str, Any]) -> str:
    causes = [c for c in details.get("causes") or () if isinstance(c, Mapping)]
    if not causes:
        return "the SLO was refused by the cluster's validation (no details given)"
    texts = [_cause_text(c) for c in causes[:MAX_CAUSES]]
    if len(causes) > MAX_CAUSES:
        texts.append(f"and {len(causes) - MAX_CAUSES} more")
    return "; ".join(texts)


def from_upstream(exc: StatusError | ConnectionFailure, route: str) -> SLOApiError:
    """The SLO API's answer to a failed call to the API server; see the module docstring."""
    if isinstance(exc, ConnectionFailure):
        return SLOApiError(502, "the Kubernetes API server could not be reached; retry later")
    if exc.code == 422:
        return SLOApiError(400, _invalid_message(exc.details))
    if exc.code == 404:
        return SLOApiError(404, f"route {route!r} not found")
    if exc.code == 409:
        return SLOApiError(409, f"route {route!r} changed while it was being written; retry")
    reason = f" {exc.reason}" if exc.reason else ""
    return SLOApiError(502, f"the Kubernetes API server answered {exc.code}{reason}")
