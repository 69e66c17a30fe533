"""Typed access through the official client's generated APIs, on the manager's one ``ApiClient``.

``typed(api_client, AppsV1Api)`` is ``AppsV1Api(api_client)``: it exists so that no code path builds
an API class without an explicit client (which would silently fall back to the library's global
default configuration). ``to_dict`` turns a generated model into the JSON dict the API server would
see (camelCase keys, ``None`` fields dropped), i.e. the shape ``DynamicClient`` and the informers use.

Prefer ``DynamicClient`` for anything an informer also sees; typed models are for the occasional
call where the generated signature documents the API better than a path would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes.client import ApiClient, Configuration

__all__ = ["to_dict", "typed"]

T = TypeVar("T")

# guards _serializer
_serializer_lock = threading.Lock()
# an ApiClient used only for its pure sanitize_for_serialization; never sends a request
_serializer: Any = None


def typed(api_client: ApiClient, api_class: Callable[[ApiClient], T]) -> T:
    """An instance of a generated API class (``CoreV1Api``, ``AppsV1Api``...) bound to ``api_client``."""
    if api_client is None:
        raise ValueError("typed: api_client is required (the global default client is never used)")
    return api_class(api_client)


def to_dict(model: object, api_client: ApiClient | None = None) -> dict[str, Any]:
    """The JSON form of a generated model (or of a dict/list containing models)."""
    client: Any = api_client if api_client is not None else _default_serializer()
    out = client.sanitize_for_serialization(model)
    if not isinstance(out, dict):
        raise TypeError(f"to_dict: {type(model).__name__} does not serialise to a JSON object")
    return out


def _default_serializer() -> Any:
    global _serializer
    with _serializer_lock:
        if _serializer is None:
            # a fresh Configuration: building it reads no files and touches no global default
            _serializer = ApiClient(configuration=Configuration())
        return _serializer
