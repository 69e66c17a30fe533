"""escaler.informers: client-go's ``tools/cache`` for unstructured (dict) objects.

A ``Reflector`` lists and watches one resource through a ``ListerWatcher`` (bookmarks, watch
timeouts of 5 to 10 min, relist on 410 Gone, jittered backoff on 429/5xx/connection failures)
into a sink. A ``SharedInformer`` pairs a reflector with an ``Indexer`` cache of read-only
(frozen) objects and delivers ``ResourceEventHandler`` notifications to each handler in order on
its own thread. ``InformerFactory`` shares one informer per ``ResourceKey``; ``DynamicInformers``
reference-counts label-selected informers that start on first use and stop on last release.

This layer never imports ``escaler.kube``: the kube layer implements ``ListerWatcher`` over
HTTP, and ``tests/unit/fakeapi.py`` implements it in memory. Each module's docstring states its
contract.
"""

from escaler.informers.backoff import Backoff
from escaler.informers.dynamic import DynamicInformers, Registration
from escaler.informers.factory import InformerFactory, ResourceKey
from escaler.informers.frozen import READ_ONLY_MESSAGE, FrozenDict, FrozenList, freeze, loads_frozen, thaw
from escaler.informers.handlers import FuncHandler, ResourceEventHandler
from escaler.informers.interfaces import (
    ADDED,
    BOOKMARK,
    DELETED,
    ERROR,
    MODIFIED,
    ListerWatcher,
    ListResult,
    WatchEvent,
    WatchStream,
)
from escaler.informers.reflector import Reflector, ReflectorSink, is_expired
from escaler.informers.shared import HandlerRegistration, SharedInformer
from escaler.informers.store import (
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    Indexer,
    IndexFunc,
    KeyFunc,
    meta_namespace_key,
    namespace_index_func,
    split_key,
)
from escaler.informers.transform import Transform, chain, identity, strip_managed_fields

__all__ = [
    "ADDED",
    "BOOKMARK",
    "DELETED",
    "ERROR",
    "MODIFIED",
    "NAMESPACE_INDEX",
    "READ_ONLY_MESSAGE",
    "Backoff",
    "DeletedFinalStateUnknown",
    "DynamicInformers",
    "FrozenDict",
    "FrozenList",
    "FuncHandler",
    "HandlerRegistration",
    "IndexFunc",
    "Indexer",
    "InformerFactory",
    "KeyFunc",
    "ListResult",
    "ListerWatcher",
    "Reflector",
    "ReflectorSink",
    "Registration",
    "ResourceEventHandler",
    "ResourceKey",
    "SharedInformer",
    "Transform",
    "WatchEvent",
    "WatchStream",
    "chain",
    "freeze",
    "identity",
    "is_expired",
    "loads_frozen",
    "meta_namespace_key",
    "namespace_index_func",
    "split_key",
    "strip_managed_fields",
    "thaw",
]
