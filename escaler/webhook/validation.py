"""Spec-level validation of one object of each kind (docs/install.md#the-admission-webhook): no cluster reads.

``validate_object(kind, obj, ctx)`` runs three layers over a raw object (an AdmissionReview's
``request.object``) and returns an ``Outcome`` (field errors and warnings); it never raises:

1. **schema** — the kind's pydantic model (``escaler.api``; the CRD's OpenAPI schema is
   generated from the same fields) parses the object; each pydantic error becomes a
   ``FieldError`` whose path is read off the raw object
   (``spec.trigger.metricsTrigger.metrics[1].externalServer.endpoint``), so it names the field as
   the user wrote it;
2. **CEL twins** — when the object parsed, ``escaler.api.rules.validate(..., admission=True)``
   evaluates every rule the CRD also carries as ``x-kubernetes-validations`` (trigger
   exclusivity, ``minReplicas <= maxReplicas``, metric type ↔ sub-configuration, target values
   > 0, ``apa``'s config, HPA mode's limits, URL and schedule forms, SLO bounds, ...), so the
   webhook refuses what the API server refuses, with the same words;
3. **code-only checks** (``checks.py``) — algorithm registered, endpoint URLs in full and the
   allowed hosts, Tidal schedules in full (tz database, croniter), annotations.

A schema error about a pattern (say, the CRD's URL pattern) or a CEL-twin error at a path that a
code-only check also reports is dropped: the code-only message says more precisely what is
wrong (``unknown time zone 'Mars/Olympus'`` rather than the schedule's form), and one mistake
gives one message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from escaler.api.meta import KubeObject
from escaler.api.registry import KINDS
from escaler.api.rules import FieldError, validate
from escaler.webhook.admission import Outcome, Route, Validate
from escaler.webhook.checks import EXTRA_CHECKS, CheckContext, Checks, check_common

__all__ = ["MODELS", "ROUTES", "validate_object", "validators"]

# kind → its model, for every escaler kind (escaler.api.registry.KINDS, docs/concepts.md#the-kinds order)
MODELS: dict[str, type[KubeObject]] = {kind: info.model for kind, info in KINDS.items()}
# one route per kind, in KINDS order; Route.path equals KindInfo.webhook_path
ROUTES: tuple[Route, ...] = tuple(Route(info.group, info.version, kind) for kind, info in KINDS.items())
# pydantic error types that a more specific code-only check may replace at the same path
_REPLACEABLE = frozenset({"string_pattern_mismatch"})
_SCALAR = (str, int, float, bool, type(None))


def _segment(key: str) -> str:
    return f".{key}" if key.replace("_", "a").isalnum() else f"[{key}]"


def _raw_path(loc: Sequence[int | str], raw: Any, missing: bool) -> str:
    """The field path of a pydantic error location, following the raw object.

    Union-member tags pydantic inserts (``int``, ``function-after[...]``) are not keys of the raw
    object and are skipped; the last key of a ``missing`` error is kept.
    """
    out = ""
    cur: Any = raw
    for i, seg in enumerate(loc):
        if isinstance(seg, int):
            if isinstance(cur, list) and 0 <= seg < len(cur):
                out += f"[{seg}]"
                cur = cur[seg]
            continue
        if isinstance(cur, Mapping) and seg in cur:
            out += _segment(seg)
            cur = cur[seg]
        elif missing and i == len(loc) - 1 and isinstance(cur, Mapping):
            out += _segment(seg)
    return out.lstrip(".")


def _message(err: Mapping[str, Any]) -> str:
    msg = str(err.get("msg", "invalid value"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    value = err.get("input")
    if err.get("type") != "missing" and isinstance(value, _SCALAR) and repr(value) not in msg:
        shown = repr(value)
        msg += f", got {shown if len(shown) <= 80 else shown[:77] + '...'}"
    return msg


def _schema_errors(exc: ValidationError, raw: Mapping[str, Any]) -> list[tuple[str, FieldError]]:
    out = []
    for err in exc.errors(include_url=False):
        missing = err.get("type") == "missing"
        path = _raw_path(err.get("loc", ()), raw, missing)
        out.append((str(err.get("type", "")), FieldError(path, "required field is missing" if missing
                                                         else _message(err))))
    return out


def _dedupe(errors: list[FieldError]) -> list[FieldError]:
    seen: set[tuple[str, str]] = set()
    out = []
    for e in errors:
        if (e.path, e.message) not in seen:
            seen.add((e.path, e.message))
            out.append(e)
    return out


def validate_object(kind: str, obj: Any, ctx: CheckContext | None = None) -> Outcome:
    """Every spec-level problem of ``obj`` as a ``kind``; see the module docstring."""
    ctx = ctx or CheckContext()
    if not isinstance(obj, Mapping):
        return Outcome([FieldError("", f"a {kind} must be a JSON object, got {type(obj).__name__}")])
    model = MODELS[kind]
    schema: list[tuple[str, FieldError]] = []
    cel: list[FieldError] = []
    try:
        parsed = model.parse(obj)
    except ValidationError as exc:
        schema = _schema_errors(exc, obj)
    else:
        cel = validate(parsed, admission=True)
    checks = Checks(ctx)
    EXTRA_CHECKS.get(kind, check_common)(obj, checks)
    extra_paths = {e.path for e in checks.errors}
    kept = [e for t, e in schema if not (t in _REPLACEABLE and e.path in extra_paths)]
    cel = [e for e in cel if e.path not in extra_paths]
    return Outcome(_dedupe([*kept, *cel, *checks.errors]), checks.warnings)


def validators(ctx: CheckContext | None = None) -> dict[Route, Validate]:
    """The webhook's routes and their validators, for ``WebhookServer``."""
    ctx = ctx or CheckContext()
    return {route: _validator(route.kind, ctx) for route in ROUTES}


def _validator(kind: str, ctx: CheckContext) -> Validate:
    def run(obj: Any) -> Outcome:
        return validate_object(kind, obj, ctx)
    return run
