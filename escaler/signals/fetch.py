"""One bounded HTTP GET to a user-named endpoint (Prometheus, a SignalTrigger pull endpoint).

Contract of ``fetch``:

* The URL must pass ``escaler.scaling.endpoints.check_endpoint_url`` and, when an ``allowed(host)``
  hook is given (``--allowed-endpoint-hosts``), be allowed by it; otherwise no request is sent.
* Redirects are not followed (a 3xx is returned like any other status): following one would let
  an endpoint send escaler, and its bearer token, to a host the allow-list never saw.
* ``timeout`` bounds the connect, every socket read, *and* the whole exchange (a server trickling
  bytes cannot stretch it), measured on the injected clock. Bodies larger than ``max_bytes`` are
  refused rather than buffered.
* It returns ``(status, body)`` for every HTTP answer, and raises ``FetchError`` (a message naming
  the endpoint and the cause, never the token) for everything else: refused URL, timeout,
  connection or TLS failure, oversized body.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import requests

from escaler.clock import Clock, RealClock
from escaler.scaling.endpoints import check_endpoint_url

__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "FetchError", "Response", "fetch"]

# Largest body read from an endpoint; a Prometheus answer with one sample is a few hundred bytes.
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
_CHUNK_BYTES = 64 * 1024

HostAllowed = Callable[[str], bool]


_USERINFO_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)[^/?#]*@")


def _redact(url: str) -> str:
    """The URL without its user-info, so a password written into a spec never reaches a message."""
    return _USERINFO_RE.sub(r"\1***@", url)


class FetchError(Exception):
    """The request could not be made or did not complete; the message says why."""


@dataclass(frozen=True)
class Response:
    # HTTP status code
    status: int
    # the body, at most max_bytes long
    body: bytes
    # the Location header of a redirect ("" otherwise)
    location: str = ""


def fetch(
    session: requests.Session,
    url: str,
    *,
    timeout: float,
    params: Mapping[str, str] | None = None,
    bearer_token: str | None = None,
    allowed: HostAllowed | None = None,
    max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    clock: Clock | None = None,
) -> Response:
    """GET ``url`` (see the module docstring)."""
    if timeout <= 0:
        raise ValueError(f"fetch: timeout must be > 0, got {timeout}")
    if max_bytes < 1:
        raise ValueError(f"fetch: max_bytes must be >= 1, got {max_bytes}")
    try:
        host = check_endpoint_url(url)
    except ValueError as err:
        raise FetchError(f"endpoint {_redact(url)!r}: {err}") from None
    if allowed is not None and not allowed(host):
        raise FetchError(f"endpoint host {host!r} is not allowed by --allowed-endpoint-hosts")
    clock = clock or RealClock()
    deadline = clock.monotonic() + timeout
    headers = {"Accept": "application/json"}
    if bearer_token:
        headers["Authorization"] = f"Bearer {bearer_token}"
    try:
        resp = session.get(url, params=dict(params or {}), headers=headers, timeout=(timeout, timeout),
                           allow_redirects=False, stream=True)
    except requests.Timeout:
        raise FetchError(f"GET {url}: timed out after {timeout:g}s") from None
    except requests.RequestException as err:
        raise FetchError(f"GET {url}: {type(err).__name__}: {err}") from None
    try:
        body = bytearray()
        for chunk in resp.iter_content(_CHUNK_BYTES):
            body += chunk
            if len(body) > max_bytes:
                raise FetchError(f"GET {url}: response larger than {max_bytes} bytes")
            if clock.monotonic() > deadline:
                raise FetchError(f"GET {url}: timed out after {timeout:g}s reading the response")
    except requests.RequestException as err:
        # requests reports a read timeout inside the body as a ConnectionError
        if isinstance(err, requests.Timeout) or "timed out" in str(err):
            raise FetchError(f"GET {url}: timed out after {timeout:g}s reading the response") from None
        raise FetchError(f"GET {url}: reading the response: {type(err).__name__}: {err}") from None
    finally:
        resp.close()
    location = resp.headers.get("Location", "") if resp.is_redirect else ""
    return Response(resp.status_code, bytes(body), location)
