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
per-scaler series, the PromQL verdict cache) held the previous parse's copy of the text, two
copies a scaler beyond the parse's own after a surge (``bench/memprobe.py``'s duplicate strings,
issue 30). The parse's other strings come interned from the cache's decode
(``escaler.informers.frozen.loads_frozen``).

**Kept packed** (issue 30, second memory pass): a parse kept as a tree of pydantic models is ~2.2
KB of RSS a scaler even with the cuts above (each model's object and instance dict; ``python
bench/rss_cuts.py``), the largest thing the manager kept per scaler. Each entry keeps the model
pickled and deflated against the pickle of a typical parse (``escaler.packed.PicklePacker``,
``_packer``): ~300 bytes (``python bench/rss_cuts.py``: 2,212 → 714 bytes of RSS a kept parse,
every cost of the entry included). The ``recent`` latest loads and peeks (``DEFAULT_RECENT``; an
``escaler.boundeddict.BoundedDict``) stay models, so the poller's ``peek`` and the reconcile that
its collection wakes unpack a parse once; a version not among them is unpacked (``pickle.loads``,
its fields-sets turned back into the shared ones, ``escaler.api.compact.unpickle_id``, its queries
interned: tens of microseconds, against ~150 for a parse), never parsed again. An unpacked parse
reads, dumps and compares as the parse it was packed from (equal by ``==``, the same dumps) and
refuses assignment as one does; only ``is`` differs between two unpacks, and the shared-part tables
share only what is parsed, not what is unpacked. A model that does not pickle is kept as it is (a
debug log line; nothing is lost, it costs memory).
``ParseCache(pack=False)`` keeps every parse as a model (the cache before 2026-12-08; measurements).
"""

from __future__ import annotations

import functools
import io
import json
import logging
import pickle
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from escaler.api.compact import pickle_id, share_bookkeeping, unpickle_id
from escaler.api.elasticscaler import ElasticScaler, TriggerType
from escaler.api.rules import validate
from escaler.api.share import SubModelTable
from escaler.api.typical import SPEC_TEXT
from escaler.boundeddict import BoundedDict
from escaler.packed import PicklePacker
from escaler.runtime.types import Request
from escaler.scaling.annotations import DEFAULTS as ANNOTATION_DEFAULTS
from escaler.scaling.annotations import (
    STATE_TRIGGER_DEFAULTS,
    AnnotationProblem,
    ScalerAnnotations,
    parse_annotations,
)

__all__ = ["DEFAULT_RECENT", "SHARED_SOURCE_FIELDS", "SHARED_SPEC_FIELDS", "ParseCache", "Parsed",
           "defaults_for"]

_log = logging.getLogger(__name__)

# the latest parses kept as models (a few hundred bytes to ~3 KB each): at 10,000 scalers polled
# every 30 s, a few seconds of polls, longer than a poll's collection takes to wake its reconcile
DEFAULT_RECENT = 1024

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

    def __init__(self, recent: int = DEFAULT_RECENT, pack: bool = True) -> None:
        # guards _entries and _recent
        self._mu = threading.Lock()
        # scaler key → its last parse, kept packed (_Kept)
        self._entries: dict[Request, _Kept] = {}
        # scaler key → ((uid, resourceVersion), the parse as a model): the latest loads and peeks,
        # so the poller's peek and the reconcile its collection wakes unpack a parse once
        self._recent: BoundedDict[Request, tuple[tuple[str, str], Parsed]] = BoundedDict(recent)
        # False: keep every parse as a model (what the cache did before 2026-12-08; measurements)
        self._pack = pack
        # equal spec parts shared across the scalers parsed here (thread-safe on its own)
        self.shared = SubModelTable()
        # equal metric-source parts (SHARED_SOURCE_FIELDS) shared likewise, in a table of their own
        self.sources = SubModelTable()

    def load(self, req: Request, obj: Mapping[str, Any]) -> Parsed:
        """``obj`` parsed (``pydantic.ValidationError`` when it does not parse)."""
        version = _version(obj)
        kept = self._kept(req, version)
        if kept is not None:
            return kept
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
            entry = self._keep(version, parsed)
            with self._mu:
                self._entries[req] = entry
                self._recent[req] = (version, parsed)
        return parsed

    def peek(self, req: Request, obj: Mapping[str, Any]) -> Parsed | None:
        """The parse of ``obj`` if it was loaded already (same uid and resourceVersion), else None:
        never parses (the poller's shortcut leaves anything new to a reconcile); it may unpack."""
        return self._kept(req, _version(obj))

    def forget(self, req: Request) -> None:
        with self._mu:
            self._entries.pop(req, None)
            self._recent.pop(req, None)

    def __len__(self) -> int:
        with self._mu:
            return len(self._entries)

    def _kept(self, req: Request, version: tuple[str, str]) -> Parsed | None:
        """The parse kept for ``req`` at ``version`` (a recent model, or the packed one unpacked)."""
        if not version[1]:
            return None
        with self._mu:
            recent = self._recent.get(req)
            entry = self._entries.get(req)
        if recent is not None and recent[0] == version:
            return recent[1]
        if entry is None or (entry.uid, entry.resource_version) != version:
            return None
        parsed = entry.parsed if isinstance(entry.parsed, Parsed) else _unpacked(entry, entry.parsed)
        with self._mu:
            if self._entries.get(req) is entry:  # not replaced or forgotten meanwhile
                self._recent[req] = (version, parsed)
        return parsed

    def _keep(self, version: tuple[str, str], parsed: Parsed) -> _Kept:
        """What ``_entries`` keeps of ``parsed``: its model packed (the model itself when packing is
        off or the model does not pickle: nothing is lost, it only costs memory)."""
        packed: bytes | Parsed = parsed
        if self._pack:
            try:
                packed = _packer().pack(parsed.scaler)
            except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as err:
                _log.debug("ElasticScaler %s kept unpacked: %s", parsed.scaler.name, err)
        return _Kept(version[0], version[1], packed, parsed.problems, parsed.annotations,
                     parsed.annotation_problems)

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


@dataclass(frozen=True, slots=True)
class _Kept:
    """One scaler's last parse as ``ParseCache`` keeps it: the model packed (``_packer``), the rest
    as parsed (the findings are usually empty, the annotations the shared defaults)."""

    # metadata.uid and metadata.resourceVersion of the object parsed (the cache's interned strings)
    uid: str
    resource_version: str
    # the model pickled and deflated; the whole Parse when it could not be packed
    parsed: bytes | Parsed
    problems: tuple[str, ...]
    annotations: ScalerAnnotations
    annotation_problems: tuple[AnnotationProblem, ...]


def _version(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")


def _unpacked(entry: _Kept, packed: bytes) -> Parsed:
    """``entry``'s model unpacked: a fresh tree equal to the one parsed, read-only as a parse is (its
    fields-sets unpickled as the shared ones: ``escaler.api.compact.unpickle_id``), and the strings
    that outlive a sync interned, as a parse's are (the parse's came from the cache: its queries
    interned by ``_share_sources``, its names by the cache's decode and ``freeze``)."""
    scaler: ElasticScaler = _packer().unpack(packed)  # its fields-sets the shared ones: read-only
    _intern_fields(scaler.metadata, _META_STRINGS)
    _intern_fields(scaler.spec.target_ref, _REF_STRINGS)
    _intern_queries(scaler)
    return Parsed(scaler, entry.problems, entry.annotations, entry.annotation_problems)


# what a sync keeps of a parse beyond itself: the scaler's names and uid (the per-scaler memory, the
# status writer's and the Reporter's keys), its target's reference (the watch index, the bindings)
_META_STRINGS = ("name", "namespace", "uid", "resource_version")
_REF_STRINGS = ("api_version", "kind", "name")


def _intern_fields(model: Any, names: tuple[str, ...]) -> None:
    fields = model.__dict__ if model is not None else {}
    for name in names:
        value = fields.get(name)
        if type(value) is str:
            fields[name] = sys.intern(value)


def _intern_queries(scaler: ElasticScaler) -> None:
    mt = scaler.spec.trigger.metrics_trigger if scaler.spec.trigger is not None else None
    for metric in mt.metrics if mt is not None else ():
        source = metric.__dict__.get("external_server")
        if source is not None:
            _intern_query(source)


@functools.cache
def _packer() -> PicklePacker:
    """The packer of kept parses: deflated against the pickles of typical ElasticScalers parsed, the
    guide's sample spec (``escaler.api.typical.SPEC_TEXT``, with server-set metadata) and each of its
    four metrics alone (a fleet's scalers most often read one metric): ~270 bytes a parse of
    bench/bench_capacity.py's scaler, whose pickle is ~1.6 KB."""
    typical = json.loads(SPEC_TEXT)
    typical["metadata"] = {"name": "llama-decode", "namespace": "default", "generation": 1,
                           "uid": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "resourceVersion": "123456",
                           "creationTimestamp": "2026-01-01T00:00:00Z"}
    trigger = typical["spec"]["trigger"]
    singles = [{**typical, "spec": {**typical["spec"], "trigger": {
        **trigger, "metricsTrigger": {**trigger["metricsTrigger"], "metrics": [metric]}}}}
        for metric in trigger["metricsTrigger"]["metrics"]]
    zdict = b"".join(_pickled(share_bookkeeping(ElasticScaler.parse(obj))) for obj in (*singles, typical))
    return PicklePacker(zdict, persistent_id=pickle_id, persistent_load=unpickle_id)


def _pickled(model: ElasticScaler) -> bytes:
    """``model`` as the packer pickles it (its shared sets and enum members by number)."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=5)
    pickler.persistent_id = pickle_id  # type: ignore[method-assign]
    pickler.dump(model)
    return out.getvalue()
