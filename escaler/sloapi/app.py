"""The SLO API's HTTP surface: a FastAPI app over ``SLOService`` (docs/sloapi.md).

Routes: ``GET /`` (the form), ``GET /healthz``, ``GET /readyz``, ``GET /config``,
``GET|PUT|DELETE /config/namespaces/{namespace}/{route}``, ``GET /openapi.json`` (no ``/docs``: it
would load assets from a CDN). A route is a serviceId within a namespace (issue 27 item 5); the
unscoped ``GET|PUT|DELETE /config/{route}`` of 0.1 answers 410 ``gone`` naming the new path, for
every route and without a token or a lookup (it tells nothing).

Contract:

* Every error is ``{"error": {"code", "message"}}`` (``escaler.sloapi.errors``), including
  FastAPI's own (unknown path 404, wrong method 405) and an unexpected exception (500, logged).
* **Bodies** (``BodyLimit``, plain ASGI, in front of everything): a ``Content-Length`` above
  ``max_body_bytes`` (``MAX_BODY_BYTES`` = 64 KiB) is 413 before a byte is read, and so is a
  streamed body that grows past it; the whole body must arrive within ``body_deadline``
  seconds (``BODY_DEADLINE_SECONDS``) or the answer is 408. A ``PUT`` body must be JSON
  (``Content-Type`` ``application/json`` or ``application/merge-patch+json``, or none) — else
  415 — and parse as JSON (else 400 ``invalid_request`` naming the problem).
* Handlers run ``SLOService`` (blocking: token reviews, the patch) in the thread pool, never
  on the event loop. A request is authenticated before its body is parsed.
* ``/healthz`` is 200 while the process serves; ``/readyz`` is 200 once the index is ready,
  else 503 ``unavailable`` with the reason. Neither needs a token.
* ``/openapi.json`` documents every route with its answers and the error schema
  (``escaler.sloapi.schema``); the ``PUT`` body is ``LLMRoutePatch`` or ``JobRoutePatch``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from typing import Annotated, Any

import anyio.to_thread
from fastapi import FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from escaler import __version__
from escaler.runtime.httpbase import HttpError, parse_json
from escaler.signals.netpolicy import IPNetwork
from escaler.sloapi.clients import client_address
from escaler.sloapi.errors import ERROR_CODES, SLOApiError, envelope
from escaler.sloapi.form import FORM_CSP, FORM_HTML
from escaler.sloapi.schema import (
    ErrorResponse,
    JobRoute,
    JobRoutePatch,
    LLMRoute,
    LLMRoutePatch,
    Probe,
    RouteList,
)
from escaler.sloapi.service import GONE_MESSAGE, SLOService

__all__ = ["BODY_DEADLINE_SECONDS", "MAX_BODY_BYTES", "BodyLimit", "create_app"]

# The largest request body accepted (an SLO is a few hundred bytes).
MAX_BODY_BYTES = 64 * 1024
# The whole body must arrive within this many seconds.
BODY_DEADLINE_SECONDS = 10.0
JSON_TYPES = ("application/json", "application/merge-patch+json")
ROUTE_DESCRIPTION = ("The route: an SLO requirement's spec.serviceId (LLMSLORequirement or "
                     "JobSLORequirement).")
# the path parameters of /config/namespaces/{namespace}/{route}
RouteParam = Annotated[str, Path(description=ROUTE_DESCRIPTION, examples=["chat-llama"])]
NamespaceParam = Annotated[str, Path(description="The namespace of the route's SLO requirement.",
                                     examples=["team-a"])]
CONFIG_PATH = "/config/namespaces/{namespace}/{route}"
LEGACY_CONFIG_PATH = "/config/{route}"

_log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _error_response(status: int, message: str, code: str | None = None,
                    headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(envelope(code or ERROR_CODES.get(status, "error"), message), status_code=status,
                        headers=headers)


class BodyLimit:
    """ASGI middleware: cap and time-box request bodies; see the module docstring."""

    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES,
                 body_deadline: float = BODY_DEADLINE_SECONDS) -> None:
        if max_body_bytes < 0:
            raise ValueError(f"BodyLimit.max_body_bytes: must be >= 0, got {max_body_bytes!r}")
        if not body_deadline > 0:
            raise ValueError(f"BodyLimit.body_deadline: must be > 0 seconds, got {body_deadline!r}")
        # the wrapped application; fixed
        self.app = app
        # bodies above this many bytes are 413; >= 0, fixed
        self.max_body_bytes = max_body_bytes
        # seconds the whole body may take to arrive (else 408); > 0, fixed
        self.body_deadline = body_deadline

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = f"request body larger than {self.max_body_bytes} bytes"
        for name, value in scope.get("headers") or ():
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    await _error_response(400, "Content-Length is not a number")(scope, receive, send)
                    return
                if length > self.max_body_bytes:
                    await _error_response(413, too_large)(scope, receive, send)
                    return
        try:
            body = await asyncio.wait_for(self._read(receive), self.body_deadline)
        except TimeoutError:
            await _error_response(408, f"request body not received within {self.body_deadline:g} s")(
                scope, receive, send)
            return
        if body is None:
            await _error_response(413, too_large)(scope, receive, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _token(request: Request) -> str | None:
    value = request.headers.get("authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _client(request: Request, trusted: Sequence[IPNetwork] = ()) -> str:
    peer = request.client.host if request.client is not None else "unknown"
    forwarded = ",".join(request.headers.getlist("x-forwarded-for"))
    return client_address(peer, forwarded, trusted)


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    descriptions = {
        400: "invalid_request: a bad body, or the cluster's validation (CRD schema / CEL) refused it",
        401: "unauthorized: no valid bearer token (--auth token)",
        403: "forbidden: the user may list SLO requirements in no namespace holding routes",
        404: "not_found: no SLO requirement has this serviceId, or the user may not get/patch it "
             "(the same answer either way)",
        408: "request_timeout: the body did not arrive in time",
        409: "conflict: more than one SLO requirement CR of the namespace has this serviceId",
        410: "gone: the unscoped path of 0.1; use /config/namespaces/{namespace}/{route}",
        413: "payload_too_large: the body is over 64 KiB",
        415: "unsupported_media_type: the body is not JSON",
        429: "too_many_requests: too many failed authentications from this client, or too many refused "
             "routes for this user",
        502: "upstream_error: the Kubernetes API server failed",
        503: "unavailable: the SLO API is starting (caches not synced) or a review cannot be made",
    }
    return {s: {"model": ErrorResponse, "description": descriptions[s]} for s in statuses}


# a route never answers 403: a denied route is the same 404 as a missing one (escaler.sloapi.service)
_READ_ERRORS = (401, 404, 409, 413, 429, 503)
_WRITE_ERRORS = (400, 401, 404, 408, 409, 413, 415, 429, 502, 503)
_DELETE_ERRORS = (401, 404, 408, 409, 413, 429, 502, 503)


def create_app(service: SLOService, *, max_body_bytes: int = MAX_BODY_BYTES,
               body_deadline: float = BODY_DEADLINE_SECONDS, worker_threads: int | None = None) -> FastAPI:
    """The SLO API over ``service``, with the body limit installed as middleware.

    ``worker_threads`` bounds the thread pool handlers run in (set when the server starts;
    ``None`` keeps anyio's default of 40)."""
    if worker_threads is not None and worker_threads < 1:
        raise ValueError(f"create_app.worker_threads: must be >= 1, got {worker_threads!r}")

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if worker_threads is not None:
            anyio.to_thread.current_default_thread_limiter().total_tokens = worker_threads
        yield

    app = FastAPI(title="escaler SLO API", version=__version__, docs_url=None, redoc_url=None,
                  lifespan=lifespan,
                  description="Read and change the SLOs of LLM and job routes. Errors are "
                              '{"error": {"code", "message"}}.')
    _install_error_handlers(app)
    _add_page_and_probes(app, service)
    _add_config_routes(app, service)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _openapi_document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(BodyLimit, max_body_bytes=max_body_bytes, body_deadline=body_deadline)
    return app


def _install_error_handlers(app: FastAPI) -> None:
    """Every error in the envelope, FastAPI's own included."""

    @app.exception_handler(SLOApiError)
    async def _slo_error(_: Request, exc: SLOApiError) -> JSONResponse:
        return _error_response(exc.status, exc.message, exc.code, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"no such path: {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} not allowed on {request.url.path}"
        return _error_response(exc.status_code, message, headers=dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "path", "query"))
        return _error_response(400, f"{where or 'request'}: {first.get('msg', 'invalid')}")

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        _log.error("unexpected error serving a request", exc_info=exc)
        return _error_response(500, "internal error (logged)")


def _add_page_and_probes(app: FastAPI, service: SLOService) -> None:
    @app.get("/", response_class=HTMLResponse, include_in_schema=True, summary="The SLO form",
             responses={200: {"content": {"text/html": {}}, "description": "A small HTML form."}})
    async def form() -> HTMLResponse:
        return HTMLResponse(FORM_HTML, headers={"Content-Security-Policy": FORM_CSP,
                                                "X-Content-Type-Options": "nosniff",
                                                "Cache-Control": "no-store"})

    @app.get("/healthz", response_model=Probe, summary="Liveness")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", response_model=Probe, summary="Readiness: every served kind has synced",
             responses=_errors(503))
    async def readyz() -> Any:
        reason = service.index.not_ready_reason()
        if reason is not None:
            return _error_response(503, reason)
        return {"status": "ok"}


def _add_config_routes(app: FastAPI, service: SLOService) -> None:
    route_responses: dict[int | str, dict[str, Any]] = {
        200: {"model": LLMRoute | JobRoute, "description": "The route's full SLO."}}

    @app.get("/config", response_model=RouteList, summary="Every route (both kinds)",
             responses=_errors(401, 403, 429, 503))
    async def list_config(request: Request) -> Any:
        token, client = _token(request), _client(request, service.trusted_proxies)

        def run() -> dict[str, Any]:
            return service.list_routes(service.authenticate(token, client))

        return await run_in_threadpool(run)

    @app.get(CONFIG_PATH, summary="One route's full SLO", response_model=None,
             responses={**route_responses, **_errors(*_READ_ERRORS)})
    async def get_config(namespace: NamespaceParam, route: RouteParam, request: Request) -> Any:
        token, client = _token(request), _client(request, service.trusted_proxies)

        def run() -> dict[str, Any]:
            return service.get(namespace, route, service.authenticate(token, client))

        return await run_in_threadpool(run)

    @app.put(CONFIG_PATH, summary="Change a route's SLO (JSON merge patch)", response_model=None,
             responses={**route_responses, **_errors(*_WRITE_ERRORS)},
             openapi_extra={"requestBody": {"required": True, "content": {
                 ctype: {"schema": {"anyOf": [{"$ref": "#/components/schemas/LLMRoutePatch"},
                                              {"$ref": "#/components/schemas/JobRoutePatch"}]}}
                 for ctype in JSON_TYPES}}})
    async def put_config(namespace: NamespaceParam, route: RouteParam, request: Request) -> Any:
        token, client = _token(request), _client(request, service.trusted_proxies)
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        raw = await request.body()

        def run() -> dict[str, Any]:
            user = service.authenticate(token, client)
            if ctype and ctype not in JSON_TYPES:
                raise SLOApiError(415, f"Content-Type {ctype!r}: the body must be JSON "
                                       f"({' or '.join(JSON_TYPES)})")
            try:
                body = parse_json(raw)
            except HttpError as exc:
                raise SLOApiError(400, exc.message) from None
            return service.put(namespace, route, user, body)

        return await run_in_threadpool(run)

    @app.delete(CONFIG_PATH, summary="Clear a route's optional SLO objectives", response_model=None,
                responses={**route_responses, **_errors(*_DELETE_ERRORS)})
    async def delete_config(namespace: NamespaceParam, route: RouteParam, request: Request) -> Any:
        token, client = _token(request), _client(request, service.trusted_proxies)

        def run() -> dict[str, Any]:
            return service.delete(namespace, route, service.authenticate(token, client))

        return await run_in_threadpool(run)

    async def legacy_config(route: RouteParam) -> Any:
        raise SLOApiError(410, GONE_MESSAGE)

    for method in ("GET", "PUT", "DELETE"):
        app.add_api_route(LEGACY_CONFIG_PATH, legacy_config, methods=[method], response_model=None,
                          summary="Gone (0.1): use /config/namespaces/{namespace}/{route}", deprecated=True,
                          operation_id=f"legacy_{method.lower()}_config", responses=_errors(410))


def _openapi_document(app: FastAPI) -> dict[str, Any]:
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    # FastAPI documents a 422 for every route with parameters; this API answers 400 instead
    for path, item in doc.get("paths", {}).items():
        for operation in item.values():
            operation.get("responses", {}).pop("422", None)
            if path == LEGACY_CONFIG_PATH:  # never a 200: FastAPI's default answer is not one of it
                operation.get("responses", {}).pop("200", None)
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    # the PUT body (declared by reference in openapi_extra, so not generated by FastAPI)
    for model in (LLMRoutePatch, JobRoutePatch):
        generated = TypeAdapter(model).json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        schemas.update(generated.pop("$defs", {}))
        schemas[model.__name__] = generated
    return doc
