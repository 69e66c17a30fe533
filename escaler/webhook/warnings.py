"""Admission warnings as the API server passes them on: bounded, one line each
(docs/install.md#the-admission-webhook).

A validating webhook's ``response.warnings`` reach the user as HTTP ``Warning: 299 - "..."``
headers, which kubectl prints as ``Warning: ...``. kube-apiserver
(``k8s.io/apiserver/pkg/endpoints/filters/warning.go``) drops a warning it cannot put in a
header (empty, or not valid UTF-8), de-duplicates them, and once their total passes 4096 runes
truncates every one to 256 runes; Kubernetes' own guidance asks for short warnings and few of them.

``bound_warnings(warnings)`` makes a list the API server shows as written:

* each warning is one line of printable text: every control character (newline, tab, ESC, ...)
  and every other non-printable code point becomes one space, and surrounding space is stripped;
  an empty result is dropped;
* duplicates are dropped (the first one stays, order kept);
* each is at most ``MAX_WARNING_BYTES`` bytes of UTF-8, cut at a character boundary and ending in
  ``...`` when cut;
* at most ``MAX_WARNINGS`` are kept; when more were given, one more line says how many were left
  out (``and 3 more warnings``), so the total stays far below the API server's 4096 runes.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["MAX_WARNINGS", "MAX_WARNING_BYTES", "bound_warnings", "one_line"]

# at most this many warnings in one response, plus one "and N more warnings" line
MAX_WARNINGS = 10
# each warning at most this many bytes of UTF-8 (kube-apiserver truncates to 256 runes under load)
MAX_WARNING_BYTES = 256
_ELLIPSIS = "..."


def one_line(text: str) -> str:
    """``text`` with every non-printable character (control characters included) as a space."""
    return "".join(c if c.isprintable() else " " for c in text).strip()


def _cap(text: str) -> str:
    data = text.encode("utf-8")
    if len(data) <= MAX_WARNING_BYTES:
        return text
    cut = data[: MAX_WARNING_BYTES - len(_ELLIPSIS)].decode("utf-8", errors="ignore")
    return cut.rstrip() + _ELLIPSIS


def bound_warnings(warnings: Iterable[str]) -> list[str]:
    """See the module docstring."""
    seen: set[str] = set()
    kept: list[str] = []
    for raw in warnings:
        text = _cap(one_line(str(raw)))
        if text and text not in seen:
            seen.add(text)
            kept.append(text)
    if len(kept) <= MAX_WARNINGS:
        return kept
    more = len(kept) - MAX_WARNINGS
    return [*kept[:MAX_WARNINGS], f"and {more} more warning{'s' if more > 1 else ''}"]
