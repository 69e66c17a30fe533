"""The ``admission.k8s.io/v1`` AdmissionReview protocol of the validating webhook
(docs/install.md#the-admission-webhook).

``review(route, body, validate)`` turns one HTTP request body into ``(http_status, json_body)``:

* **400** with a plain ``{"error": ...}`` body when the body is not an ``admission.k8s.io/v1``
  AdmissionReview with a ``request.uid`` (not JSON, not an object, another apiVersion or kind,
  no uid): there is nothing to answer. This never happens with a real API server.
* Otherwise **200** with an AdmissionReview whose ``response.uid`` echoes the request's, and:

  - ``DELETE`` and ``CONNECT``: allowed, unread (docs/install.md#the-admission-webhook: delete is allowed);
  - a request whose ``request.kind`` is not the route's kind: denied (code 400), the message
    naming both — a misconfigured ValidatingWebhookConfiguration must not pass objects
    unchecked;
  - ``CREATE``/``UPDATE``: ``validate(object)``; no errors → allowed, with any warnings in
    ``response.warnings`` (kubectl prints them as ``Warning: ...``), bounded and one line each by
    ``warnings.bound_warnings``; errors → denied with
    ``status: {code: 422, reason: "Invalid", message, details.causes}``,
    the message listing every error as ``<field path>: <rule>`` (``; ``-separated) and each
    cause carrying ``field`` and ``message``, as the API server's own 422 does;
  - ``UPDATE`` of an object being deleted (``metadata.deletionTimestamp`` set), or one that
    leaves ``spec``, ``metadata.labels`` and ``metadata.annotations`` as they were (a
    finalizer or owner-reference change, say): allowed without validation, so an object stored
    before a rule existed can still be cleaned up and deleted (CRD validation ratcheting, by hand).

``validate`` is trusted never to raise; if it does anyway, the request is denied (code 500,
"internal error") and the traceback logged — the webhook answers every request.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escaler.api.rules import FieldError
from escaler.webhook.warnings import bound_warnings

__all__ = [
    "ADMISSION_API_VERSION",
    "MAX_CAUSES",
    "Outcome",
    "Route",
    "Validate",
    "review",
]

ADMISSION_API_VERSION = "admission.k8s.io/v1"
ADMISSION_KIND = "AdmissionReview"
# at most this many causes (and message entries) in one denial; the rest are counted
MAX_CAUSES = 50

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """What validation found: denials (field errors) and warnings (shown by kubectl)."""

    errors: list[FieldError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# validates one raw object of the route's kind; must not raise
Validate = Callable[[Any], Outcome]


@dataclass(frozen=True)
class Route:
    """One kind's webhook endpoint."""

    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def path(self) -> str:
        """``/validate-<group with dots as dashes>-<version>-<kind lowercase>`` (kubebuilder's form)."""
        return f"/validate-{self.group.replace('.', '-')}-{self.version}-{self.kind.lower()}"


class _BadReview(Exception):
    pass


def _parse(body: bytes) -> tuple[str, Mapping[str, Any]]:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise _BadReview(f"body is not JSON: {exc}") from None
    if not isinstance(doc, Mapping):
        raise _BadReview("body is not a JSON object")
    if doc.get("apiVersion") != ADMISSION_API_VERSION or doc.get("kind") != ADMISSION_KIND:
        raise _BadReview(f"body is not an {ADMISSION_API_VERSION} {ADMISSION_KIND} "
                         f"(apiVersion {doc.get('apiVersion')!r}, kind {doc.get('kind')!r})")
    request = doc.get("request")
    if not isinstance(request, Mapping):
        raise _BadReview("AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise _BadReview("AdmissionReview request has no uid")
    return uid, request


def _response(uid: str, allowed: bool, status: Mapping[str, Any] | None = None,
              warnings: list[str] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if status is not None:
        response["status"] = {"metadata": {}, "status": "Failure", **status}
    shown = bound_warnings(warnings or ())
    if shown:
        response["warnings"] = shown
    return {"apiVersion": ADMISSION_API_VERSION, "kind": ADMISSION_KIND, "response": response}


def _object_name(request: Mapping[str, Any], obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    for candidate in (meta.get("name"), request.get("name")):
        if isinstance(candidate, str) and candidate:
            return candidate
    generate = meta.get("generateName")
    return f"{generate}*" if isinstance(generate, str) and generate else ""


def _request_gvk(request: Mapping[str, Any]) -> tuple[str, str, str] | None:
    kind = request.get("kind")
    if not isinstance(kind, Mapping):
        return None
    group, version, k = kind.get("group", ""), kind.get("version"), kind.get("kind")
    if isinstance(group, str) and isinstance(version, str) and isinstance(k, str):
        return group, version, k
    return None


def _unchanged(obj: Mapping[str, Any], old: Any) -> bool:
    """True when an UPDATE leaves everything the webhook validates as it was."""
    if not isinstance(old, Mapping):
        return False

    def view(o: Mapping[str, Any]) -> tuple[Any, Any, Any]:
        meta = o.get("metadata") if isinstance(o.get("metadata"), Mapping) else {}
        assert isinstance(meta, Mapping)
        return o.get("spec"), meta.get("labels"), meta.get("annotations")

    return view(obj) == view(old)


def _deleting(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata")
    return isinstance(meta, Mapping) and bool(meta.get("deletionTimestamp"))


def _denial(route: Route, name: str, errors: list[FieldError]) -> dict[str, Any]:
    shown = errors[:MAX_CAUSES]
    parts = [str(e) for e in shown]
    if len(errors) > len(shown):
        parts.append(f"and {len(errors) - len(shown)} more")
    subject = f'{route.kind} "{name}"' if name else route.kind
    return {
        "code": 422,
        "reason": "Invalid",
        "message": f"{subject} is invalid: " + "; ".join(parts),
        "details": {
            "name": name,
            "group": route.group,
            "kind": route.kind,
            "causes": [{"reason": "FieldValueInvalid", "message": e.message, "field": e.path} for e in shown],
        },
    }


def review(route: Route, body: bytes, validate: Validate) -> tuple[int, dict[str, Any]]:
    """One AdmissionReview request → ``(http status, JSON body)``; see the module docstring."""
    try:
        uid, request = _parse(body)
    except _BadReview as exc:
        return 400, {"error": str(exc)}
    operation = request.get("operation")
    if operation in ("DELETE", "CONNECT"):
        return 200, _response(uid, True)
    gvk = _request_gvk(request)
    want = (route.group, route.version, route.kind)
    if gvk != want:
        got = "an unknown kind" if gvk is None else f"{gvk[2]} ({gvk[0]}/{gvk[1]})"
        return 200, _response(uid, False, {
            "code": 400, "reason": "BadRequest",
            "message": f"this webhook ({route.path}) validates {route.kind} ({route.api_version}); "
                       f"the request is for {got}: check the ValidatingWebhookConfiguration's rules",
        })
    if operation not in ("CREATE", "UPDATE"):
        return 200, _response(uid, False, {
            "code": 400, "reason": "BadRequest", "message": f"unsupported operation {operation!r}"})
    obj = request.get("object")
    name = _object_name(request, obj)
    if not isinstance(obj, Mapping):
        missing = [FieldError("request.object", "must be an object")]
        return 200, _response(uid, False, _denial(route, name, missing))
    if operation == "UPDATE" and (_deleting(obj) or _unchanged(obj, request.get("oldObject"))):
        return 200, _response(uid, True)
    try:
        outcome = validate(obj)
    except Exception:
        _log.exception("validating %s %r failed", route.kind, name)
        return 200, _response(uid, False, {
            "code": 500, "reason": "InternalError",
            "message": f"internal error validating {route.kind} {name!r}; see the escaler manager's log"})
    if outcome.errors:
        denial = _denial(route, name, outcome.errors)
        _log.info("denied %s %s/%s: %s", operation, request.get("namespace") or "", name, denial["message"])
        return 200, _response(uid, False, denial, outcome.warnings)
    return 200, _response(uid, True, warnings=outcome.warnings)
