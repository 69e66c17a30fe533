"""``ParseCache``: an ElasticScaler object parsed once per resourceVersion, not once per sync.

A poll whose inputs did not change must cost next to nothing, and parsing the cached object into
the pydantic model, running the spec rules (``escaler.api.rules.validate``) and parsing the
annotations was a quarter of an idle poll's CPU (bench/bench_reconcile_cost.py). The object a
reconcile starts from is the informer's, and its ``(uid, resourceVersion)`` names its content
exactly: ``load(req, obj)`` returns the ``Parsed`` of the last call for that pair, and parses afresh
for anything else (an edit, a status write, a recreated scaler). An object without a
resourceVersion is never cached. An object that does not parse is not cached either (it says so
on every sync, as before).

The parsed model is shared between syncs: callers never mutate it (the reconciler reads it only).
It carries **no status**: the reconciler reads the status from the cached object itself (only to
seed a restarted scaler's pipeline, ``Reporter.previous_status``), so a parsed copy of every
scaler's conditions, metric rows and decisions would only cost memory (issue 10: memory per
scaler; ``python bench/run.py bench_memory``).
One entry per scaler key; ``forget(req)`` drops it when the scaler is deleted.

Kept small (issue 10's memory per scaler): the model goes through
``escaler.api.compact.share_bookkeeping`` (pydantic's per-model fields-sets shared across the
fleet, empty extras dropped: the model reads and dumps the same and refuses assignment), and
annotations left at their defaults (most scalers) are the one shared instance of their trigger's
defaults (``DEFAULTS``, or ``STATE_TRIGGER_DEFAULTS`` for a StateTrigger: no scale-down window).

Equal spec parts are shared across scalers (issue 30): ``spec.trigger``, ``spec.fallback``,
``spec.floorFrom`` and ``spec.scaleDown`` go through one ``escaler.api.share.SubModelTable`` per cache,
so a fleet made from one template holds one parsed trigger (its metrics, targets and selectors), not
one per scaler. The key is the raw subtree's canonical JSON and a swap needs ``==`` too, so each
``Parsed`` reads, dumps and compares exactly as an unshared parse; the table is an LRU of
``DEFAULT_MAX_ENTRIES`` distinct parts (an evicted part only costs a scaler its own copy). The cache's
entries stay keyed by ``(uid, resourceVersion)`` as above: sharing never decides what is reparsed.
A fleet whose triggers differ only in their queries (one PromQL per scaler) shares nothing at
that level, so each metric's source also goes through the table for its ``target`` and ``metric``
parts (``SHARED_SOURCE_FIELDS``, a second table of the same kind and bound, ``sources``): one
parsed ``AverageValue 10`` for the fleet, not one per scaler. An ExternalServer query is
interned (``sys.intern``): every status write gives the scaler a new resourceVersion and so a new
parse, and what was made from the last one (the metric rows of the last collection, the
per-scaler series, the PromQL verdict cache) held the previous parse's copy of the text: 2.6
copies a scaler in all after a surge at 3,000 scalers (``bench/memprobe.py``'s duplicate strings,
issue 30). The parse's other strings come interned from the cache's decode
(``escaler.informers.frozen.loads_frozen``).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from escaler.api.compact import share_bookkeeping
from escaler.api.elasticscaler import ElasticScaler, TriggerType
from escaler.api.rules import validate
from escaler.api.share import SubModelTable
from escaler.runtime.types import Request
from escaler.scaling.annotations import DEFAULTS as ANNOTATION_DEFAULTS
from escaler.scaling.annotations import (
    STATE_TRIGGER_DEFAULTS,
    AnnotationProblem,
    ScalerAnnotations,
    parse_annotations,
)

__all__ = ["SHARED_SOURCE_FIELDS", "SHARED_SPEC_FIELDS", "ParseCache", "Parsed", "defaults_for"]

# the spec's parts a fleet made from one template has in common (not targetRef: one per scaler)
SHARED_SPEC_FIELDS = ("trigger", "fallback", "floor_from", "scale_down")
# a metric source's parts shared when its trigger is not (the query or the selector differs)
SHARED_SOURCE_FIELDS = ("target", "metric")
# MetricSpec's source fields and their names in the raw metric
_SOURCES = (("resource", "resource"), ("custom", "custom"), ("external", "external"),
            ("external_server", "externalServer"))


def defaults_for(scaler: ElasticScaler) -> ScalerAnnotations:
    """The annotation defaults of ``scaler``'s trigger (``escaler.scaling.annotations``)."""
    return STATE_TRIGGER_DEFAULTS if scaler.spec.trigger.type == TriggerType.STATE else ANNOTATION_DEFAULTS


@dataclass(frozen=True, slots=True)
class Parsed:
    """One object version, parsed: the model, the spec rules it breaks, its annotations."""

    scaler: ElasticScaler
    # escaler.api.rules.validate's findings, as text (empty: valid)
    problems: tuple[str, ...]
    annotations: ScalerAnnotations
    annotation_problems: tuple[AnnotationProblem, ...]


def _intern_query(source: Any) -> None:
    """An ExternalServer query interned in place (the parent's ``__dict__``, as the table swaps)."""
    query = source.__dict__.get("query")
    if type(query) is str:
        source.__dict__["query"] = sys.intern(query)


class ParseCache:
    """See the module docstring. Thread-safe."""

    def __init__(self) -> None:
        # guards _entries
        self._mu = threading.Lock()
        # scaler key → ((uid, resourceVersion) parsed, what it parsed to)
        self._entries: dict[Request, tuple[tuple[str, str], Parsed]] = {}
        # equal spec parts shared across the scalers parsed here (thread-safe on its own)
        self.shared = SubModelTable()
        # equal metric-source parts (SHARED_SOURCE_FIELDS) shared likewise, in a table of their own
        self.sources = SubModelTable()

    def load(self, req: Request, obj: Mapping[str, Any]) -> Parsed:
        """``obj`` parsed (``pydantic.ValidationError`` when it does not parse)."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        version = (str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
        with self._mu:
            hit = self._entries.get(req)
        if hit is not None and hit[0] == version and version[1]:
            return hit[1]
        scaler = share_bookkeeping(ElasticScaler.parse({k: v for k, v in obj.items() if k != "status"}))
        spec = obj.get("spec")
        if isinstance(spec, Mapping):
            self.shared.share(scaler.spec, spec, SHARED_SPEC_FIELDS)
            self._share_sources(scaler, spec)
        # behavior.* (stabilization, step limits) applies to every trigger; metrics.* only to metrics.
        # A StateTrigger has no scale-down window unless one is set: its source has decided already
        defaults = defaults_for(scaler)
        ann, ann_problems = parse_annotations(scaler.metadata.annotations, policies=True, defaults=defaults)
        ann = defaults if ann == defaults else ann  # one shared instance
        parsed = Parsed(scaler, tuple(str(e) for e in validate(scaler)), ann, tuple(ann_problems))
        if version[1]:
            with self._mu:
                self._entries[req] = (version, parsed)
        return parsed

    def _share_sources(self, scaler: ElasticScaler, spec: Mapping[str, Any]) -> None:
        """Each metric source's ``SHARED_SOURCE_FIELDS`` through the table (a no-op on a trigger
        already shared: its sources are the shared tree's, swapped with it)."""
        mt = scaler.spec.trigger.metrics_trigger if scaler.spec.trigger is not None else None
        trigger = spec.get("trigger")
        raw_mt = trigger.get("metricsTrigger") if isinstance(trigger, Mapping) else None
        raw_metrics = raw_mt.get("metrics") if isinstance(raw_mt, Mapping) else None
        if mt is None or not isinstance(raw_metrics, list | tuple) or len(raw_metrics) != len(mt.metrics):
            return
        for metric, raw in zip(mt.metrics, raw_metrics, strict=True):
            if not isinstance(raw, Mapping):
                continue
            for name, alias in _SOURCES:
                source = metric.__dict__.get(name)
                raw_source = raw.get(alias)
                if source is not None and isinstance(raw_source, Mapping):
                    self.sources.share(source, raw_source, SHARED_SOURCE_FIELDS)
                    _intern_query(source)

    def peek(self, req: Request, obj: Mapping[str, Any]) -> Parsed | None:
        """The parse of ``obj`` if it was loaded already (same uid and resourceVersion), else None:
        never parses (the poller's shortcut leaves anything new to a reconcile)."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        version = (str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
        with self._mu:
            hit = self._entries.get(req)
        return hit[1] if hit is not None and hit[0] == version and version[1] else None

    def forget(self, req: Request) -> None:
        with self._mu:
            self._entries.pop(req, None)

    def __len__(self) -> int:
        with self._mu:
            return len(self._entries)
