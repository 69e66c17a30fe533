"""escaler.kube: talking to the API server — configuration, discovery, dynamic/typed access, scale,
status writes and Events.

Layering: imports ``escaler.informers`` (interfaces only), ``escaler.clock`` and ``escaler.errors``;
nothing above. Every error a caller sees is an ``escaler.errors.StatusError`` (an HTTP status, shaped
as ``metav1.Status``) or ``ConnectionFailure``, or a ``ValueError`` for arguments refused before any
request is sent.

Typical wiring, one of each per manager::

    cfg = load_config(kubeconfig, context)                 # a new Configuration, never the global one
    api = new_api_client(cfg, pool_size=pool_size_for(informers, workers))
    rest = RestClient(api)
    mapper = RESTMapper(rest)
    dynamic = DynamicClient(rest, mapper)
    scale = ScaleClient(dynamic)
    recorder = EventRecorder(dynamic, component="escaler", instance=pod_name)
    new_lw = lister_watcher_factory(rest, mapper)         # for the informers' factory
"""

from escaler.kube.config import ConfigError, load_config, new_api_client, pool_size_for
from escaler.kube.discovery import ResourceMapping, RESTMapper, parse_api_version
from escaler.kube.dynamic import (
    DynamicClient,
    MappingRef,
    PatchType,
    ResourceKeyLike,
    ResourceListerWatcher,
    lister_watcher_factory,
    resource_path,
)
from escaler.kube.events import EventRecorder, EventType, FakeRecorder, RecordedEvent, Recorder
from escaler.kube.rest import RestClient
from escaler.kube.scale import Scale, ScaleClient
from escaler.kube.typed import to_dict, typed

__all__ = [
    "ConfigError",
    "DynamicClient",
    "EventRecorder",
    "EventType",
    "FakeRecorder",
    "MappingRef",
    "PatchType",
    "RESTMapper",
    "RecordedEvent",
    "Recorder",
    "ResourceKeyLike",
    "ResourceListerWatcher",
    "ResourceMapping",
    "RestClient",
    "Scale",
    "ScaleClient",
    "lister_watcher_factory",
    "load_config",
    "new_api_client",
    "parse_api_version",
    "pool_size_for",
    "resource_path",
    "to_dict",
    "typed",
]
