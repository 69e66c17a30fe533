"""``HandlerRegistry``: which ``ResourceHandler`` serves a target's ``apiVersion``/``kind``.

Contract:

* Handlers are keyed by ``(group, kind)``: every version of a group's kind shares one handler (the
  handler reads the version it is given from the reference).
* ``handler_for(api_version, kind)`` returns the registered handler, else the generic one (any kind
  with a ``/scale`` subresource, or ``spec.replicas`` without one). It raises ``ValueError`` for an
  unparsable ``api_version`` (the reconciler's ``InvalidSpec``). It never touches the network:
  whether the kind exists is found out by ``read``.
* ``register(group, kind, handler)`` adds or *replaces* a handler, so an embedding operator can
  teach escaler its own workload kinds or override a built-in one. Thread-safe; meant to be
  called at start-up.
* ``default_registry(dynamic, cache_get=..., scale_paths=...)`` holds the built-ins
  (``escaler.targets.workloads``): Deployment, StatefulSet, LeaderWorkerSet, ResourceScalingGroup;
  its generic handler reads a custom resource's ``/scale`` fields from the object at the paths its
  CRD declares (``escaler.kube.scalepaths``), so a cached target costs no GET.
* ``target_problem(mapping)`` says why a kind may **not** be a scaler's target, or None. A target
  must be *namespaced* (a scaler acts only in its own namespace; watching a cluster-scoped kind
  would be a cluster-wide list/watch on the say-so of any namespace user) and *scalable*: it has
  a registered handler or the API server serves a ``scale`` subresource for it. So Secrets,
  ConfigMaps, Nodes, ClusterRoles... are refused, from discovery alone, before anything is
  watched or read. A kind with neither is refused even though the generic handler could patch
  its ``spec.replicas``: only a ``scale`` subresource (or a handler) says a kind means to be scaled.
"""

from __future__ import annotations

import threading

from escaler.kube.discovery import ResourceMapping, parse_api_version
from escaler.kube.dynamic import DynamicClient
from escaler.kube.scalepaths import CrdScalePaths, ScalePathSource
from escaler.targets.handler import CacheGet, GenericScaleHandler, ResourceHandler
from escaler.targets.workloads import (
    DEPLOYMENT,
    LEADER_WORKER_SET,
    RESOURCE_SCALING_GROUP,
    STATEFUL_SET,
    DeploymentHandler,
    LeaderWorkerSetHandler,
    ResourceScalingGroupHandler,
    StatefulSetHandler,
)

__all__ = ["HandlerRegistry", "default_registry", "target_problem"]


class HandlerRegistry:
    """(group, kind) → ResourceHandler, with a generic fallback; thread-safe."""

    def __init__(self, generic: ResourceHandler) -> None:
        # serves every kind nobody registered
        self._generic = generic
        # guards _handlers
        self._lock = threading.Lock()
        # (group, kind) → handler; group "" is the core group
        self._handlers: dict[tuple[str, str], ResourceHandler] = {}

    @property
    def generic(self) -> ResourceHandler:
        return self._generic

    def register(self, group: str, kind: str, handler: ResourceHandler) -> None:
        if not kind:
            raise ValueError("HandlerRegistry.register: kind must not be empty")
        if group:
            parse_api_version(f"{group}/v1")  # validates the group name
        with self._lock:
            self._handlers[(group, kind)] = handler

    def handler_for(self, api_version: str, kind: str) -> ResourceHandler:
        group, _ = parse_api_version(api_version)
        with self._lock:
            return self._handlers.get((group, kind), self._generic)

    def has_handler(self, api_version: str, kind: str) -> bool:
        """True when ``kind`` of ``api_version``'s group has its own handler (not the generic one)."""
        group, _ = parse_api_version(api_version)
        with self._lock:
            return (group, kind) in self._handlers

    def target_problem(self, mapping: ResourceMapping) -> str | None:
        """Why ``mapping``'s kind cannot be a scaler's target, or None (see the module docstring)."""
        return target_problem(mapping, has_handler=self.has_handler(mapping.api_version, mapping.kind))

    def registered(self) -> list[tuple[str, str]]:
        """The (group, kind) pairs with their own handler, sorted."""
        with self._lock:
            return sorted(self._handlers)


def target_problem(mapping: ResourceMapping, *, has_handler: bool) -> str | None:
    """The rule of ``HandlerRegistry.target_problem``, for a kind with or without its own handler."""
    what = f"kind {mapping.kind} ({mapping.group_resource})"
    if not mapping.namespaced:
        return (f"{what} is cluster-scoped: a scaler may only target a namespaced kind, in its own "
                "namespace")
    if not has_handler and "scale" not in mapping.subresources:
        return (f"{what} is not scalable: it has no scale subresource and escaler has no handler for "
                "it (a target must be a Deployment, StatefulSet, LeaderWorkerSet, "
                "ResourceScalingGroup or a kind that serves /scale)")
    return None


def default_registry(dynamic: DynamicClient, *, cache_get: CacheGet | None = None,
                     scale_paths: ScalePathSource | None = None) -> HandlerRegistry:
    """A registry with the built-in handlers, all reading through ``cache_get`` when given; the
    generic handler takes a custom resource's counts from the object at its CRD's scale paths
    (``scale_paths``; by default ``CrdScalePaths(dynamic)``) instead of a GET of ``/scale``."""
    paths = scale_paths if scale_paths is not None else CrdScalePaths(dynamic)
    reg = HandlerRegistry(GenericScaleHandler(dynamic, cache_get=cache_get, scale_paths=paths))
    reg.register(*DEPLOYMENT, DeploymentHandler(dynamic, cache_get=cache_get))
    reg.register(*STATEFUL_SET, StatefulSetHandler(dynamic, cache_get=cache_get))
    reg.register(*LEADER_WORKER_SET, LeaderWorkerSetHandler(dynamic, cache_get=cache_get))
    reg.register(*RESOURCE_SCALING_GROUP, ResourceScalingGroupHandler(dynamic, cache_get=cache_get))
    return reg
