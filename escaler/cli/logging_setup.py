"""Process-wide logging for the long-running commands (docs/operations.md: structured logs).

``setup_logging(fmt, level)`` installs one stderr handler on the root logger:

* ``json`` — one JSON object per line: ``time`` (RFC 3339, UTC, milliseconds), ``level``
  (``debug``/``info``/``warning``/``error``/``critical``), ``logger``, ``message``; during a
  reconcile also ``controller``, ``namespace``, ``name`` and ``reconcileID``
  (controller-runtime's keys, from ``escaler.runtime.ReconcileContextFilter``); any ``extra=``
  fields of the call; and ``error`` with the traceback when one is attached. Values that are not
  JSON are written as their ``str()``.
* ``console`` — ``<time> <LEVEL> <logger> <message> key=value ...``, for a terminal; during a
  reconcile the context is a compact prefix instead of key=value pairs:
  ``<time> <LEVEL> [<controller> <namespace>/<name> <id>] <logger> <message> ...`` where ``<id>``
  is the first ``SHORT_ID`` characters of the reconcile id (a prefix of the JSON ``reconcileID``,
  so either log can be searched for it).

Where the context comes from: the runtime's controller sets it in a ``contextvars.ContextVar``
around each ``Reconciler.reconcile`` call (``escaler.runtime.controller``), so every line a
reconciler (or anything it calls on its worker thread) logs carries it with no change to the
reconciler.

Chatty libraries (urllib3, kubernetes) are raised to WARNING unless the level is DEBUG.
Calling it again replaces the handler it installed (tests, re-configuration).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from escaler.runtime import ReconcileContextFilter

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "SHORT_ID", "ConsoleFormatter", "JSONFormatter", "setup_logging"]

LOG_FORMATS = ("json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error")
# characters of the reconcile id in a console line's prefix (32 bits of a UUID4: unique enough to
# tell apart the reconciles of one object in a log window)
SHORT_ID = 8
_QUIET_LOGGERS = ("urllib3", "kubernetes")

# LogRecord attribute → output key, for the reconcile context (controller-runtime's names)
_CONTEXT_KEYS = {"controller": "controller", "namespace": "namespace", "object_name": "name",
                 "reconcile_id": "reconcileID"}
# attributes every LogRecord has; anything else came from extra= (or a filter)
_STANDARD = set(vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None))) | {"message", "asctime"}

# marks the handler setup_logging installed, so a second call replaces it
_MARK = "_escaler_handler"


def _time(record: logging.LogRecord) -> str:
    stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr, key in _CONTEXT_KEYS.items():
        value = getattr(record, attr, None)
        if value is not None:
            out[key] = value
    for attr, value in vars(record).items():
        if attr not in _STANDARD and attr not in _CONTEXT_KEYS and not attr.startswith("_"):
            out[attr] = value
    return out


class JSONFormatter(logging.Formatter):
    """One JSON object per record; see the module docstring."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        doc.update(_fields(record))
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["error"] = record.exc_text
        return json.dumps(doc, default=str, ensure_ascii=False)


def _prefix(fields: dict[str, Any]) -> str | None:
    """``[controller namespace/name id]`` when the record carries a reconcile's context (the
    keys are then removed from ``fields``), else ``None``."""
    if "controller" not in fields or "reconcileID" not in fields:
        return None
    controller, rid = fields.pop("controller"), str(fields.pop("reconcileID"))[:SHORT_ID]
    namespace, name = fields.pop("namespace", ""), fields.pop("name", "")
    obj = f"{namespace}/{name}" if namespace else str(name)
    return f"[{controller} {obj} {rid}]"


class ConsoleFormatter(logging.Formatter):
    """``<time> <LEVEL> [<reconcile context>] <logger> <message> key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(record)
        prefix = _prefix(fields)
        parts = [_time(record), f"{record.levelname:<7}", *([prefix] if prefix else []), record.name,
                 record.getMessage()]
        parts += [f"{k}={v}" for k, v in fields.items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(fmt: str = "json", level: str = "info", stream: TextIO | None = None) -> logging.Handler:
    """Install the handler (see the module docstring) and return it."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format {fmt!r}: must be one of {', '.join(LOG_FORMATS)}")
    if level not in LOG_LEVELS:
        raise ValueError(f"log level {level!r}: must be one of {', '.join(LOG_LEVELS)}")
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, _MARK, False):
            root.removeHandler(h)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    setattr(handler, _MARK, True)
    handler.setFormatter(JSONFormatter() if fmt == "json" else ConsoleFormatter())
    handler.addFilter(ReconcileContextFilter())
    root.addHandler(handler)
    numeric = getattr(logging, level.upper())
    root.setLevel(numeric)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if numeric <= logging.DEBUG else logging.WARNING)
    return handler
