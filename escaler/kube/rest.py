"""Raw JSON requests to the API server over the manager's ``ApiClient``.

Contract:

* ``RestClient.request`` sends one request to ``path`` (e.g. ``/apis/apps/v1/namespaces/x/deployments``)
  through ``api_client.call_api``, so the host, bearer token (refreshed by the Configuration's hook),
  client certificate, CA bundle and connection pool all come from the ``Configuration``. It returns
  the decoded JSON object (``{}`` for an empty body).
* A non-2xx answer raises ``StatusError`` built from the body (a ``metav1.Status`` when the server
  sent one; otherwise the raw text capped at 1 KiB) and the ``Retry-After`` header. Refused, reset or
  timed-out connections and TLS failures raise ``ConnectionFailure``. Nothing else escapes except
  ``ValueError`` for arguments that cannot be encoded.
* ``stream_lines`` opens a long-running GET (a watch) and returns ``(lines, close)``. Every socket
  read is bounded by ``read_timeout``, so a silently dead connection raises ``ConnectionFailure``
  instead of hanging; a clean end of the body ends the iterator. ``close()`` may be called from any
  thread: it shuts the socket down so a blocked read returns, and the iterator then stops without
  raising. An error status at open time raises before anything is returned.
* **Write guard** (``set_write_guard``): a callable ``(method, path)`` run immediately before any
  POST/PUT/PATCH/DELETE goes on the wire (after the token hook, so nothing slow runs between the
  check and the send). It raises to refuse the write — the manager installs its leader-election
  ``WriteFence`` here, so every target, status, HPA and Event write is fenced by one check. It is
  also installed in the ApiClient's urllib3 connections (``escaler.kube.fencedpool``), where it
  runs once more immediately before the whole request is written to the socket in one piece.
* ``retries=False`` sends one request with no urllib3 retries at all (no connect retry, no
  stale-connection retry) and a float ``timeout`` as one total bound: for calls that must not
  outlive a deadline (lease renewals).
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast
from urllib.parse import urlencode

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from escaler import __version__
from escaler.errors import ConnectionFailure, StatusError, cap_body
from escaler.kube import fencedpool

__all__ = [
    "DEFAULT_TIMEOUT",
    "STREAM_READ_BYTES",
    "USER_AGENT",
    "WRITE_METHODS",
    "Query",
    "RestClient",
    "Timeout",
    "WriteGuard",
]

log = logging.getLogger(__name__)

Timeout = float | tuple[float, float]
Query = list[tuple[str, str]]
# Called with (method, path) right before a write is sent; raises to refuse it.
WriteGuard = Callable[[str, str], None]
# The methods the write guard sees.
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

USER_AGENT = f"escaler/{__version__}"
# (connect, read) seconds for ordinary requests; a read timeout bounds each socket read.
DEFAULT_TIMEOUT: tuple[float, float] = (5.0, 30.0)
# Bytes asked of the socket per read while streaming; a read returns as soon as any data arrives.
STREAM_READ_BYTES = 64 * 1024
# Connect timeout for streaming requests (their read timeout is the caller's).
DEFAULT_STREAM_CONNECT_TIMEOUT = 5.0

# Transport failures: urllib3's (MaxRetryError, ProtocolError, ReadTimeoutError, ...), raw socket
# errors and http.client's (IncompleteRead, RemoteDisconnected, ...).
_TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError, http.client.HTTPException)


class RestClient:
    """JSON over HTTP to one API server; thread-safe (the pool and Configuration are shared)."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        user_agent: str = USER_AGENT,
        default_timeout: Timeout = DEFAULT_TIMEOUT,
    ) -> None:
        if not user_agent:
            raise ValueError("RestClient: user_agent must not be empty")
        _validate_timeout(default_timeout, "default_timeout")
        # the manager's kubernetes.client.ApiClient; owns the Configuration and urllib3 pool
        self._api = api_client
        # sent as User-Agent on every request (overrides the generated client's default)
        self._user_agent = user_agent
        # used when request() is given no timeout
        self._default_timeout = default_timeout
        # run right before every write is sent (None: no guard); set once, before use
        self._write_guard: WriteGuard | None = None

    def set_write_guard(self, guard: WriteGuard | None) -> None:
        """Install the check run immediately before every POST/PUT/PATCH/DELETE (see the module
        docstring); ``None`` removes it."""
        self._write_guard = guard
        pool = getattr(getattr(self._api, "rest_client", None), "pool_manager", None)
        if isinstance(pool, urllib3.PoolManager):
            fencedpool.install(pool, guard)

    @property
    def api_client(self) -> ApiClient:
        return self._api

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: object = None,
        content_type: str = "application/json",
        timeout: Timeout | None = None,
        retries: bool = True,
    ) -> dict[str, Any]:
        """Send one request and return the decoded JSON response body (``retries=False``: no
        transport retries, a float ``timeout`` bounds the whole call)."""
        status, data = self._read(method, path, query, body, content_type, timeout, retries)
        if not data:
            return {}
        try:
            decoded = json.loads(data)
        except ValueError:
            decoded = None
        if not isinstance(decoded, dict):
            raise StatusError(
                500, "InternalError",
                f"{method} {path}: HTTP {status} response is not a JSON object: {cap_body(data)}",
            )
        return decoded

    def request_raw(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: object = None,
        content_type: str = "application/json",
        timeout: Timeout | None = None,
        retries: bool = True,
    ) -> bytes:
        """``request`` without the decoding: the 2xx response body as it came (a caller that
        decodes it its own way, e.g. ``escaler.kube.listdecode``); errors as ``request``."""
        return self._read(method, path, query, body, content_type, timeout, retries)[1]

    def _read(self, method: str, path: str, query: Query | None, body: object, content_type: str,
              timeout: Timeout | None, retries: bool) -> tuple[int, bytes]:
        """Send the request; return the 2xx status and the whole body."""
        if timeout is not None:
            _validate_timeout(timeout, "timeout")
        resp = self._open(method, path, query, body, content_type,
                          self._default_timeout if timeout is None else timeout, retries=retries)
        try:
            try:
                data: bytes = resp.read()
            except _TRANSPORT_ERRORS as exc:
                raise ConnectionFailure(f"{method} {path}: reading response: {exc}") from exc
        finally:
            resp.release_conn()
        return resp.status, data

    def stream_lines(
        self,
        path: str,
        query: Query | None,
        read_timeout: float,
        *,
        connect_timeout: float = DEFAULT_STREAM_CONNECT_TIMEOUT,
    ) -> tuple[Iterator[bytes], Callable[[], None]]:
        """Open a streaming GET; return (non-empty lines without their newline, close)."""
        if read_timeout <= 0 or connect_timeout <= 0:
            raise ValueError(
                f"stream_lines: read_timeout ({read_timeout}) and connect_timeout ({connect_timeout}) "
                "must be > 0"
            )
        resp = self._open("GET", path, query, None, "application/json", (connect_timeout, read_timeout))
        stream = _LineStream(resp, f"GET {path}")
        return stream.lines(), stream.close

    def _open(
        self,
        method: str,
        path: str,
        query: Query | None,
        body: object,
        content_type: str,
        timeout: Timeout,
        *,
        retries: bool = True,
    ) -> urllib3.BaseHTTPResponse:
        """Send the request; return the undrained 2xx response or raise the mapped error."""
        if not path.startswith("/"):
            raise ValueError(f"request path must start with '/': {path!r}")
        api: Any = self._api  # the generated client is only partly typed
        headers: dict[str, str] = dict(api.default_headers)
        headers["Accept"] = "application/json"
        headers["User-Agent"] = self._user_agent
        if body is not None:
            headers["Content-Type"] = content_type
        auth_query: list[tuple[str, str]] = []
        # the Configuration's bearer token (its refresh hook runs here, so rotating tokens work)
        api.update_params_for_auth(headers, auth_query, ["BearerToken"], path, method, body)
        url = api.configuration.host.rstrip("/") + path
        all_query = list(query or []) + auth_query
        if all_query:
            url += "?" + urlencode(all_query)
        wire_body = None if body is None else api.sanitize_for_serialization(body)
        guard = self._write_guard
        if guard is not None and method.upper() in WRITE_METHODS:
            guard(method.upper(), path)  # last thing before the send: a fence lapse is seen here
        try:
            if not retries:
                return self._checked(self._send_once(method, url, headers, wire_body, timeout))
            raw = api.call_api(method, url, header_params=headers, body=wire_body, _request_timeout=timeout)
        except ApiException as exc:
            # the generated client wraps TLS failures as status 0; anything else is an encoding problem
            if not exc.status and "SSLError" in str(exc.reason):
                raise ConnectionFailure(f"{method} {path}: {exc.reason}") from exc
            raise ValueError(f"{method} {path}: cannot send request: {exc.reason}") from exc
        except _TRANSPORT_ERRORS as exc:
            raise ConnectionFailure(f"{method} {path}: {exc}") from exc
        return self._checked(cast(urllib3.BaseHTTPResponse, raw.response))

    def _send_once(self, method: str, url: str, headers: dict[str, str], wire_body: object,
                   timeout: Timeout) -> urllib3.BaseHTTPResponse:
        """One attempt on the ApiClient's pool: no retries, a float timeout is the total bound."""
        api: Any = self._api
        if isinstance(timeout, tuple):
            bound = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        else:
            bound = urllib3.Timeout(total=timeout)
        data = None if wire_body is None else json.dumps(wire_body).encode("utf-8")
        pool = api.rest_client.pool_manager
        return cast(urllib3.BaseHTTPResponse, pool.request(
            method, url, body=data, headers=headers, timeout=bound, retries=False, preload_content=False))

    @staticmethod
    def _checked(resp: urllib3.BaseHTTPResponse) -> urllib3.BaseHTTPResponse:
        """Return a 2xx response undrained; raise the mapped ``StatusError`` otherwise."""
        if 200 <= resp.status <= 299:
            return resp
        try:
            err_body = resp.read()
        except _TRANSPORT_ERRORS:
            err_body = b""
        finally:
            resp.release_conn()
        raise StatusError.from_response(resp.status, err_body, resp.headers.get("Retry-After"))


def _validate_timeout(timeout: Timeout, name: str) -> None:
    values = timeout if isinstance(timeout, tuple) else (timeout,)
    if isinstance(timeout, tuple) and len(timeout) != 2:
        raise ValueError(f"{name} must be seconds or a (connect, read) pair, got {timeout!r}")
    if any(v <= 0 for v in values):
        raise ValueError(f"{name} must be > 0, got {timeout!r}")


class _LineStream:
    """The body of one streaming response, split into lines; closable from another thread."""

    def __init__(self, resp: urllib3.BaseHTTPResponse, what: str) -> None:
        # the open response; its connection is closed and released exactly once (in _finish)
        self._resp = resp
        # "GET /path", for error messages
        self._what = what
        # guards _closed, _state
        self._lock = threading.Lock()
        # set by close(); once set, read errors and EOF end iteration silently
        self._closed = False
        # "idle" (not iterated yet) → "reading" → "done"; lines() runs at most once
        self._state = "idle"

    def lines(self) -> Iterator[bytes]:
        with self._lock:
            if self._state != "idle" or self._closed:
                self._state = "done"
                self._finish()
                return
            self._state = "reading"
        buf = b""
        try:
            while True:
                try:
                    chunk = self._resp.read1(STREAM_READ_BYTES)
                except _TRANSPORT_ERRORS as exc:
                    if self._closed:
                        return
                    raise ConnectionFailure(f"{self._what}: stream broken: {exc}") from exc
                except ValueError:
                    # reading a response another thread just closed
                    if self._closed:
                        return
                    raise
                if self._closed:
                    return
                if not chunk:
                    if buf.strip():
                        yield buf
                    return
                buf += chunk
                while True:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        break
                    line, buf = buf[:nl], buf[nl + 1:]
                    if line.strip():
                        yield line
        finally:
            with self._lock:
                self._state = "done"
            self._finish()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            state = self._state
        if state == "reading":
            # wake the reader blocked in recv(); it finishes the response itself
            try:
                self._resp.shutdown()
            except (ValueError, RuntimeError, OSError):
                self._resp.close()
        elif state == "idle":
            self._finish()

    def _finish(self) -> None:
        # closing the connection (rather than draining it) is right for an abandoned stream; the
        # pool gets the dead connection back and reconnects on its next use.
        try:
            self._resp.close()
        except OSError as exc:  # pragma: no cover - best effort
            log.debug("%s: closing stream: %s", self._what, exc)
        self._resp.release_conn()
