"""What an informer needs from the API: the ``ListerWatcher`` protocol and its value types.

The informers layer sits below ``escaler.kube`` and never imports it: ``escaler.kube`` provides
the real implementation over HTTP, and ``tests/unit`` provides an in-process fake with scripted
streams and faults. Objects are plain JSON dicts (unstructured), exactly as the API server
serialises them.

Contract of an implementation:

* ``list`` returns one page (``limit``/``continue_``) with the list's ``metadata.resourceVersion``
  and, when known, the size of the response body in bytes (``body_bytes``; 0 = unknown); failures
  raise ``escaler.errors.StatusError`` (HTTP status) or ``ConnectionFailure``.
* ``watch`` opens a stream from ``resource_version`` with ``allowWatchBookmarks`` and the server-side
  ``timeoutSeconds``; a client-side read timeout bounds every read so a dead TCP connection raises
  ``ConnectionFailure`` instead of hanging. Iterating yields ``WatchEvent``s until the server
  ends the stream (normal end: iteration stops) or the connection fails (raises). A watch ERROR
  event is yielded as ``WatchEvent("ERROR", <metav1.Status>)``; the reflector turns it into a
  ``StatusError``. ``close`` may be called from another thread to abort a blocked read; it is
  idempotent (the reflector closes every stream it opened, and its stop path may close it too),
  and after it iteration ends (normally or by raising ``ConnectionFailure``) without hanging.
* ``ItemwiseLister`` (optional, checked with ``isinstance``): ``list_each(..., each=f)`` is ``list``
  whose items are ``f(item)``, each item decoded and passed to ``f`` before the next is decoded, so
  a page of large objects that ``f`` shrinks never lives decoded all at once (the reflector passes
  the informer's transform). ``f`` sees each item as ``list`` would return it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["ADDED", "BOOKMARK", "DELETED", "ERROR", "MODIFIED", "ItemwiseLister", "ListResult",
           "ListerWatcher", "WatchEvent", "WatchStream"]

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
ADDED: EventType = "ADDED"
MODIFIED: EventType = "MODIFIED"
DELETED: EventType = "DELETED"
BOOKMARK: EventType = "BOOKMARK"
ERROR: EventType = "ERROR"


@dataclass(frozen=True)
class ListResult:
    # the items of this page, as unstructured dicts
    items: list[dict[str, Any]]
    # the list's metadata.resourceVersion (the point a watch resumes from)
    resource_version: str
    # metadata.continue for the next page; None/"" on the last page
    continue_token: str | None = None
    # the size of the response body this page was decoded from; 0 when unknown (fakes)
    body_bytes: int = 0


@dataclass(frozen=True)
class WatchEvent:
    # ADDED | MODIFIED | DELETED | BOOKMARK | ERROR
    type: EventType
    # the object (for ERROR, a metav1.Status; for BOOKMARK, only metadata.resourceVersion is meaningful)
    object: dict[str, Any] = field(default_factory=dict)


class WatchStream(Protocol):
    def __iter__(self) -> Iterator[WatchEvent]: ...

    def close(self) -> None: ...


class ListerWatcher(Protocol):
    """List and watch one resource (optionally one namespace / label selector)."""

    def list(self, *, resource_version: str = "", limit: int | None = None,
             continue_: str | None = None) -> ListResult: ...

    def watch(self, *, resource_version: str, timeout_seconds: int,
              allow_bookmarks: bool = True) -> WatchStream: ...


@runtime_checkable
class ItemwiseLister(Protocol):
    """A lister that decodes a page item by item (see the module docstring); optional."""

    def list_each(self, *, resource_version: str = "", limit: int | None = None,
                  continue_: str | None = None,
                  each: Callable[[dict[str, Any]], dict[str, Any]]) -> ListResult: ...
