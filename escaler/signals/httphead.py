"""The head of an HTTP/1.x response (status line and header fields), parsed without the ``email``
package, for the outbound GETs of ``escaler.signals.fetch``.

``http.client`` parses response headers with ``email.parser`` (a feed parser built for mail
messages): most of the cost of reading a small metric answer. ``BoundedResponse`` is an
``http.client.HTTPResponse`` whose ``begin`` reads the head itself; everything after the head —
``Content-Length`` and chunked framing, ``read``, the keep-alive decision (``will_close``),
``getheader`` — is ``http.client``'s own, unchanged, fed by the same values.

Contract of ``BoundedResponse(sock, method="GET").begin()`` (``sock.makefile("rb")`` gives the
stream; every receive on it is bounded by the caller's deadline, so a server trickling one byte at
a time is cut there — this module never waits on its own):

* **Input**: the bytes of one response head. The status line is ``HTTP/1.<d> <3 digits>[ reason]``
  (``HTTP/1.0`` is version 10, any other ``HTTP/1.x`` 11, as ``http.client``); interim ``100
  Continue`` answers are skipped, at most ``MAX_INTERIM`` of them. Then header lines up to the
  empty line; a line ends with CRLF (a bare LF is accepted, as ``http.client`` does).
* **Bounds**, the same as ``http.client``'s: a line at most ``MAX_LINE`` (64 KiB) bytes, at most
  ``MAX_HEADERS`` (100) lines per head, the empty line that ends it included.
* **Output**: ``status``, ``reason``, ``version``, and ``headers``, a ``Headers``: the fields in
  order as (name, value), looked up case-insensitively (``get`` is the first value, ``get_all``
  every one). A value has its surrounding spaces and tabs removed, and a folded (continued) line
  is joined to it with one space.
* **Refused** with ``MalformedResponse`` (an ``http.client.HTTPException``), whose message names the
  rule and the line number but never carries bytes of the response: a status line that is not
  HTTP/1.x or has no 3-digit status, a line over the cap, too many lines, a connection closed
  inside the head, a line without ``:`` or with an empty or invalid name (visible ASCII but ``:``),
  a continuation line before the first field, a bare CR or a NUL in a line, a
  ``Content-Length`` that is not digits, or several that differ. A connection closed before the
  first byte raises ``http.client.RemoteDisconnected``, as ``http.client`` does (the keep-alive
  retry depends on it).
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["MAX_HEADERS", "MAX_INTERIM", "MAX_LINE", "BoundedResponse", "Headers", "MalformedResponse",
           "read_headers"]

# longest status or header line, in bytes (http.client's _MAXLINE)
MAX_LINE = 65536
# most lines in one head, the empty line that ends it included (http.client's _MAXHEADERS)
MAX_HEADERS = 100
# most interim "100 Continue" answers skipped before the final one
MAX_INTERIM = 10

# longest Content-Length accepted, in digits (an exabyte; int() refuses past 4,300 digits anyway)
_MAX_LENGTH_DIGITS = 18


class MalformedResponse(http.client.HTTPException):
    """The response head breaks a rule; the message names it (never the response's bytes)."""


class Headers:
    """Header fields in order, looked up by name case-insensitively."""

    __slots__ = ("_fields", "_first")

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        # (name as sent, value) in the order received
        self._fields = fields
        # lower-cased name -> its first value
        self._first = {name.lower(): value for name, value in reversed(fields)}

    def get(self, name: str, default: Any = None) -> Any:
        """The first value of ``name``, or ``default``."""
        return self._first.get(name.lower(), default)

    def get_all(self, name: str, default: Any = None) -> Any:
        """Every value of ``name`` in order, or ``default`` when there is none."""
        key = name.lower()
        if key not in self._first:
            return default
        return [v for k, v in self._fields if k.lower() == key]

    def items(self) -> list[tuple[str, str]]:
        return list(self._fields)

    def keys(self) -> list[str]:
        return [k for k, _ in self._fields]

    def values(self) -> list[str]:
        return [v for _, v in self._fields]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._first

    def __getitem__(self, name: str) -> str | None:
        value: str | None = self.get(name)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._fields)


# a well-formed status line, field line (its name visible ASCII but ":", what http.client's email
# parser takes) and continuation line: the fast path; anything else is explained by _bad_*
_STATUS_RE = re.compile(rb"[ \t]*HTTP/1\.([0-9])[ \t]+([1-9][0-9][0-9])(?:[ \t]+([^\r\n\0]*?))?[ \t]*\r?\n")
_FIELD_RE = re.compile(rb"([!-9;-~]+):[ \t]*([^\r\n\0]*?)[ \t]*\r?\n")
# the same over a block of lines decoded as latin-1: each match is one whole line
_FIELDS_RE = re.compile(r"^([!-9;-~]+):[ \t]*([^\r\n\0]*?)[ \t]*\r?\n", re.MULTILINE)
_FOLD_RE = re.compile(rb"[ \t]+([^\r\n\0]*?)[ \t]*\r?\n")


def _lines(fp: Any) -> list[bytes]:
    """The raw lines of one header block, its ending empty line excluded; ``MalformedResponse``
    when a line is over the cap, there are too many, or the connection closed inside the block."""
    lines: list[bytes] = []
    readline = fp.readline
    while True:
        raw: bytes = readline(MAX_LINE + 1)
        if raw == b"\r\n" or raw == b"\n":
            return lines
        what = f"header line {len(lines) + 1}"
        if len(raw) > MAX_LINE:
            raise MalformedResponse(f"the {what} is longer than {MAX_LINE} bytes")
        if not raw.endswith(b"\n"):
            raise MalformedResponse(f"the connection closed inside the {what}")
        lines.append(raw)
        if len(lines) >= MAX_HEADERS:  # with the empty line still to come, over the cap
            raise MalformedResponse(f"more than {MAX_HEADERS} header lines")


def _bad_field(raw: bytes, n: int, folds: bool) -> MalformedResponse:
    """Why header line ``n`` (``raw``, a line the fast path did not match) is refused."""
    what = f"header line {n}"
    line = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    if b"\r" in line or b"\0" in line:
        return MalformedResponse(f"the {what} contains a bare CR or a NUL byte")
    if line[:1] in (b" ", b"\t") and not folds:
        return MalformedResponse(f"{what} continues a header field but none came before it")
    if b":" not in line:
        return MalformedResponse(f"{what} has no ':'")
    return MalformedResponse(f"{what} has an empty or invalid field name "
                             "(visible ASCII characters other than ':' only)")


def read_headers(fp: Any) -> Headers:
    """The header fields up to the empty line (see the module docstring for the rules)."""
    lines = _lines(fp)
    # fast path: every line a field line (a match starts at a line's start and ends at its end,
    # so as many matches as lines means every line matched whole)
    fields: list[tuple[str, str]] = _FIELDS_RE.findall(b"".join(lines).decode("iso-8859-1"))
    if len(fields) == len(lines):
        return Headers(fields)
    fields = []
    for n, raw in enumerate(lines, 1):
        m = _FIELD_RE.fullmatch(raw)
        if m is not None:
            fields.append((m.group(1).decode("ascii"), m.group(2).decode("iso-8859-1")))
            continue
        fold = _FOLD_RE.fullmatch(raw) if fields else None
        if fold is None:
            raise _bad_field(raw, n, bool(fields))
        name, value = fields[-1]  # obs-fold: the previous field continues, joined with one space
        more = fold.group(1).decode("iso-8859-1")
        fields[-1] = (name, f"{value} {more}" if value and more else value or more)
    return Headers(fields)


def _bad_status(raw: bytes) -> Exception:
    """Why status line ``raw`` (one the fast path did not match) is refused."""
    if not raw:
        # the server closed the connection before answering (a stale keep-alive connection)
        return http.client.RemoteDisconnected("Remote end closed connection without response")
    if len(raw) > MAX_LINE:
        return MalformedResponse(f"the status line is longer than {MAX_LINE} bytes")
    if not raw.endswith(b"\n"):
        return MalformedResponse("the connection closed inside the status line")
    line = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    if b"\r" in line or b"\0" in line:
        return MalformedResponse("the status line contains a bare CR or a NUL byte")
    version = (line.split(None, 1) or [b""])[0]
    if len(version) != 8 or not version.startswith(b"HTTP/1.") or not version[7:].isdigit():
        return MalformedResponse("the status line does not start with 'HTTP/1.x ' (x a digit)")
    return MalformedResponse("the status line has no 3-digit status code (100-999) after the version")


def _status(fp: Any) -> tuple[int, int, str]:
    """(version, status, reason) of one status line."""
    raw: bytes = fp.readline(MAX_LINE + 1)
    m = _STATUS_RE.fullmatch(raw) if len(raw) <= MAX_LINE else None
    if m is None:
        raise _bad_status(raw)
    reason = m.group(3)
    return (10 if m.group(1) == b"0" else 11), int(m.group(2)), reason.decode("iso-8859-1") if reason else ""


class BoundedResponse(http.client.HTTPResponse):
    """``http.client.HTTPResponse`` whose head is read by this module (see the module docstring)."""

    def begin(self) -> None:
        if self.headers is not None:
            return
        for _ in range(MAX_INTERIM + 1):
            version, status, reason = _status(self.fp)
            if status != http.client.CONTINUE:
                break
            read_headers(self.fp)  # an interim answer's fields are skipped
        else:
            raise MalformedResponse(f"more than {MAX_INTERIM} interim '100 Continue' answers")
        headers = read_headers(self.fp)
        self.code = self.status = status
        self.reason = reason
        self.version = version
        self.headers = self.msg = headers
        self._frame(headers, status)

    def _frame(self, headers: Headers, status: int) -> None:
        """chunked, length and will_close, exactly as ``http.client.HTTPResponse.begin`` sets them."""
        tr_enc = headers.get("transfer-encoding")
        self.chunked = bool(tr_enc) and tr_enc.lower() == "chunked"
        self.chunk_left = None
        self.will_close = self._check_close()  # type: ignore[attr-defined]
        self.length = None
        lengths: list[str] | None = headers.get_all("content-length")
        if lengths:
            for v in lengths:
                if not v.isascii() or not v.isdigit() or len(v) > _MAX_LENGTH_DIGITS:
                    raise MalformedResponse(f"Content-Length is not a decimal number of at most "
                                            f"{_MAX_LENGTH_DIGITS} digits")
            if len(lengths) > 1 and len({int(v) for v in lengths}) > 1:
                raise MalformedResponse("several Content-Length fields with different values")
            if not self.chunked:
                self.length = int(lengths[0])
        if status in (http.client.NO_CONTENT, http.client.NOT_MODIFIED) or 100 <= status < 200 \
                or self._method == "HEAD":  # type: ignore[attr-defined]
            self.length = 0
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True
