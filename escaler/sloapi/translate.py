"""Route bodies ↔ SLO requirement specs: what the SLO API shows, and what a write patches.

Contract (pure: data in, data out; every refusal is an ``SLOApiError(400)`` naming the field):

* ``summary(kind, obj)`` → ``{namespace, route, kind, highPriority, bounds}`` (``bounds`` is
  ``null`` when the CR has none); ``full(kind, obj)`` → the whole route body: ``route``, ``kind``,
  ``highPriority``, ``concurrencyPerReplica``, ``deployType`` (LLM), the kind's sections
  (``ttft``/``otps`` or ``queue``; an absent optional section is left out) and ``bounds``.
  Only those fields are copied from the CR (never its name, namespace or status).
* ``validate_patch(kind, body, current)`` checks a ``PUT`` body, a JSON merge patch (RFC 7396)
  of the route body: an object; no unknown field; a field of the other kind refused naming the
  kind that takes it (``ttft`` on a job route); read-only fields (``route``, ``kind``,
  ``deployType``) only with their current value; ``observed`` (``escaler.sloapi.observed``: the
  engine's status, which moves on its own) with any value, ignored, so a GET body PUTs back;
  per-field types and ranges (the CRD's ``minimum``s; ``promql`` 1..4096 characters); bound
  types allowed for the kind at each end; ``null`` removes an optional field, but not ``queue``
  (required on a job route). Nested objects merge: ``{"ttft": {"targetMs": 500}}`` keeps the
  stored ``promql``. Cross-field rules are left to the API server, which checks the merged spec
  with the CRD's CEL rules.
* ``spec_patch(kind, body)`` → the CR merge patch ``{"spec": {...}}`` of a validated body.
* ``clear_patch(kind, current)`` → the merge patch of ``DELETE``: ``null`` for every optional
  section present (LLM: ``ttft``, ``otps``), ``None`` when there is nothing to clear (a job
  route always keeps ``queue``).
* ``merge(target, patch)`` is RFC 7396, used to tell a no-op write (not sent) from a change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from escaler.api.slo import DeployType
from escaler.sloapi.errors import SLOApiError
from escaler.sloapi.kinds import KINDS, LLM, SLOKind
from escaler.sloapi.observed import FIELD as OBSERVED

__all__ = [
    "MAX_PROMQL_LENGTH",
    "clear_patch",
    "full",
    "merge",
    "spec_patch",
    "summary",
    "validate_patch",
]

MAX_PROMQL_LENGTH = 4096
MAX_PERCENTILE = 100.0
# the largest integer a bound or depth may hold (int64, what the API server stores)
MAX_INT = 2**63 - 1

# section → field → the check its value must pass
_SECTION_FIELDS: Mapping[str, Mapping[str, str]] = {
    "ttft": {"targetMs": "positive_number", "percentile": "percentile", "promql": "promql"},
    "otps": {"target": "positive_number", "promql": "promql"},
    "queue": {"maxDepth": "positive_int", "promql": "promql"},
}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _plain(value: Any) -> Any:
    """A JSON copy of a (possibly frozen) cached value."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def summary(kind: SLOKind, obj: Mapping[str, Any]) -> dict[str, Any]:
    spec = _spec(obj)
    meta = obj.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return {
        "namespace": ns if isinstance(ns, str) else "",
        "route": str(spec.get("serviceId") or ""),
        "kind": kind.name,
        "highPriority": bool(spec.get("highPriority", False)),
        "bounds": _plain(spec.get("bounds")) if isinstance(spec.get("bounds"), Mapping) else None,
    }


def full(kind: SLOKind, obj: Mapping[str, Any]) -> dict[str, Any]:
    spec = _spec(obj)
    body: dict[str, Any] = {
        "route": str(spec.get("serviceId") or ""),
        "kind": kind.name,
        "highPriority": bool(spec.get("highPriority", False)),
        "concurrencyPerReplica": spec.get("concurrencyPerReplica", 1),
    }
    if kind is LLM:
        body["deployType"] = str(spec.get("deployType") or DeployType.AGGREGATED.value)
    for section in kind.sections:
        if isinstance(spec.get(section), Mapping):
            body[section] = _plain(spec[section])
    body["bounds"] = _plain(spec.get("bounds")) if isinstance(spec.get("bounds"), Mapping) else None
    return body


def merge(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON merge patch of ``patch`` onto ``target`` (neither is modified)."""
    if not isinstance(patch, Mapping):
        return _plain(patch)
    result: dict[str, Any] = dict(_plain(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


# ---- validation -----------------------------------------------------------------------------


def _bad(field: str, rule: str) -> SLOApiError:
    return SLOApiError(400, f"{field}: {rule}")


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    # JSON 3 and 3.0 are the same number; the API server's int64 takes both
    return _is_number(value) and float(value).is_integer() and abs(value) <= MAX_INT


def _check_value(field: str, check: str, value: Any) -> None:
    if check == "positive_number":
        if not _is_number(value) or value <= 0:
            raise _bad(field, f"must be a number > 0, got {_shown(value)}")
    elif check == "percentile":
        if not _is_number(value) or not 0 < value <= MAX_PERCENTILE:
            raise _bad(field, f"must be a number in (0, 100], got {_shown(value)}")
    elif check == "positive_int":
        if not _is_int(value) or value < 1:
            raise _bad(field, f"must be an integer >= 1, got {_shown(value)}")
    elif check == "non_negative_int":
        if not _is_int(value) or value < 0:
            raise _bad(field, f"must be an integer >= 0, got {_shown(value)}")
    elif check == "promql":
        if not isinstance(value, str) or not value.strip():
            raise _bad(field, f"must be a non-empty PromQL string, got {_shown(value)}")
        if len(value) > MAX_PROMQL_LENGTH:
            raise _bad(field, f"must be at most {MAX_PROMQL_LENGTH} characters, got {len(value)}")
    elif check == "bool":
        if not isinstance(value, bool):
            raise _bad(field, f"must be true or false, got {_shown(value)}")
    else:  # pragma: no cover - a table entry without a checker is a programming error
        raise AssertionError(f"unknown check {check!r}")


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return repr(value[:64] + ("…" if len(value) > 64 else ""))
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return _type_name(value)


def _object(field: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad(field, f"must be an object, got {_type_name(value)}")
    return value


def _unknown(field: str, key: str, allowed: tuple[str, ...] | list[str]) -> SLOApiError:
    return _bad(f"{field}.{key}" if field else key,
                f"unknown field; {'' if not field else field + ' '}takes {', '.join(allowed)}")


def _validate_section(kind: SLOKind, section: str, value: Any) -> None:
    if value is None:
        if section not in kind.optional_sections:
            raise _bad(section, f"is required on a {kind.name} route and cannot be removed")
        return
    fields = _SECTION_FIELDS[section]
    for key, sub in _object(section, value).items():
        if key not in fields:
            raise _unknown(section, key, list(fields))
        # null removes the field: the API server then refuses a required one, or defaults it
        if sub is not None:
            _check_value(f"{section}.{key}", fields[key], sub)


def _validate_bound(kind: SLOKind, end: str, value: Any) -> None:
    field = f"bounds.{end}"
    if value is None:
        return  # the API server requires both ends; its 422 names the field
    allowed = kind.min_bound_types if end == "min" else kind.max_bound_types
    for key, sub in _object(field, value).items():
        if key == "type":
            if sub not in allowed:
                raise _bad(f"{field}.type", f"must be {' or '.join(allowed)} on a {kind.name} route, "
                                            f"got {_shown(sub)}")
        elif key == "value":
            _check_value(f"{field}.value", "non_negative_int", sub)
        else:
            raise _unknown(field, key, ("type", "value"))


def _validate_bounds(kind: SLOKind, value: Any) -> None:
    if value is None:
        return
    for key, sub in _object("bounds", value).items():
        if key not in ("min", "max"):
            raise _unknown("bounds", key, ("min", "max"))
        _validate_bound(kind, key, sub)


def _other_kind(field: str, kind: SLOKind) -> SLOKind | None:
    for other in KINDS:
        if other is not kind and (field in other.sections or field in other.read_only
                                  or field in other.scalars):
            return other
    return None


def validate_patch(kind: SLOKind, body: Any, current: Mapping[str, Any]) -> Mapping[str, Any]:
    """The body as a validated merge patch; ``SLOApiError(400)`` naming the field otherwise.

    ``current`` is the route's ``full`` body (read-only fields are compared with it)."""
    patch = _object("request body", body)
    for key, value in patch.items():
        if key == OBSERVED:
            continue  # the engine's status, as a GET showed it: never written, so a GET body PUTs back
        if key in kind.read_only:
            if value != current.get(key):
                raise _bad(key, f"is read-only on the SLO API (current value {_shown(current.get(key))}); "
                                "leave it out of the request")
        elif key in kind.sections:
            _validate_section(kind, key, value)
        elif key == "bounds":
            _validate_bounds(kind, value)
        elif key == "highPriority":
            if value is not None:
                _check_value(key, "bool", value)
        elif key == "concurrencyPerReplica":
            if value is not None:
                _check_value(key, "positive_int", value)
        else:
            other = _other_kind(key, kind)
            if other is not None:
                raise _bad(key, f"is a field of {other.name} routes ({other.kind}), not of {kind.name} "
                                f"routes; a {kind.name} route takes {', '.join(kind.writable)}")
            raise _unknown("", key, kind.writable)
    return patch


def spec_patch(kind: SLOKind, body: Mapping[str, Any]) -> dict[str, Any]:
    """The CR merge patch for a validated body (read-only fields dropped)."""
    return {"spec": {k: _plain(v) for k, v in body.items() if k in kind.writable}}


def clear_patch(kind: SLOKind, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    spec = _spec(obj)
    present = [s for s in kind.optional_sections if spec.get(s) is not None]
    if not present:
        return None
    return {"spec": dict.fromkeys(present)}

