"""Endpoint URLs a scaler spec names (Prometheus, ExternalServer, SignalTrigger, custom provider).

``check_endpoint_url(url)`` is the one syntax rule, shared by the admission webhook (refuse at
create/update) and the collectors (refuse before a request):

* a string of at most 2048 characters with no whitespace or control characters;
* scheme ``http`` or ``https``;
* a host: a DNS name (``prometheus.monitoring``, ``prometheus.monitoring.svc.cluster.local``)
  or an IP literal (``10.0.0.7``, ``[fd00::1]``), with an optional port in 1..65535;
* no user-info (``user:password@host``): credentials in a spec are readable by everyone who
  can read the object, and end up in condition messages;
* with ``base=True`` (an ExternalServer endpoint, to which escaler appends ``/api/v1/query`` and
  the query), no ``?`` and no ``#``: a query string or fragment there would end up in the middle
  of the request path, or be dropped; the PromQL goes in the spec's ``query`` field.

``host_allowed(host, patterns)`` implements ``--allowed-endpoint-hosts``: an empty pattern list
allows every host; otherwise a host must equal a pattern or, for a pattern ``*.example.com``,
end with ``.example.com``. Comparison is case-insensitive. Ports are not part of the match.

Pure: no DNS lookups, no I/O.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from urllib.parse import urlsplit

__all__ = ["ENDPOINT_SCHEMES", "MAX_URL_LENGTH", "check_endpoint_url", "host_allowed", "parse_host_patterns"]

ENDPOINT_SCHEMES = ("http", "https")
MAX_URL_LENGTH = 2048
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_BAD_CHARS_RE = re.compile(r"[\s\x00-\x1f\x7f]")
_DNS_LABEL_RE = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_\-]{0,61}[A-Za-z0-9_])?$")
_PATTERN_RE = re.compile(r"^(?:\*\.)?[A-Za-z0-9_\-.:\[\]]+$")


def _check_host(host: str) -> None:
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    if not name or len(name) > 253 or not all(_DNS_LABEL_RE.match(label) for label in name.split(".")):
        raise ValueError(f"host {host!r} is neither a DNS name nor an IP address")


def check_endpoint_url(url: object, *, base: bool = False) -> str:
    """The host of a valid endpoint URL (lowercased); ``ValueError`` naming the rule otherwise."""
    if not isinstance(url, str) or not url:
        raise ValueError("must be a non-empty http(s) URL")
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"must be at most {MAX_URL_LENGTH} characters")
    if _BAD_CHARS_RE.search(url):
        raise ValueError("must not contain whitespace or control characters")
    if base and ("?" in url or "#" in url):
        raise ValueError("must be a base URL without '?' or '#' (the query goes in the query field, "
                         "escaler appends /api/v1/query)")
    m = _SCHEME_RE.match(url)
    if m is None:
        raise ValueError("must be an absolute URL starting with http:// or https://")
    if m.group(1).lower() not in ENDPOINT_SCHEMES:
        raise ValueError(f"scheme {m.group(1)!r} is not supported (use http or https)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"is not a valid URL ({exc})") from None
    if "@" in parts.netloc:
        raise ValueError("must not carry credentials (user:password@); they would be readable in the spec")
    host = parts.hostname
    if not host:
        raise ValueError("must name a host")
    _check_host(host)
    if port == 0:
        raise ValueError("port must be in 1..65535")
    return host.lower()


def parse_host_patterns(text: str | Sequence[str]) -> tuple[str, ...]:
    """``--allowed-endpoint-hosts`` (a comma list, or a sequence) → normalised patterns."""
    items = text.split(",") if isinstance(text, str) else list(text)
    patterns = []
    for item in items:
        pattern = item.strip().lower()
        if not pattern:
            continue
        if not _PATTERN_RE.match(pattern) or "*" in pattern[1:]:
            raise ValueError(
                f"host pattern {item!r}: must be a host name, an IP, or '*.' followed by a domain")
        patterns.append(pattern)
    return tuple(patterns)


def host_allowed(host: str, patterns: Sequence[str]) -> bool:
    """True when ``patterns`` is empty or ``host`` matches one of them (see the module docstring)."""
    if not patterns:
        return True
    host = host.lower().rstrip(".")
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]):
                return True
        elif host == pattern.strip("[]"):
            return True
    return False
