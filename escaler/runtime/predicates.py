"""Predicates: filter informer events before a handler turns them into requests.

A ``Predicate`` answers, per event kind, "should this event reach the handler?". Predicates are
pure functions of the objects (plain unstructured dicts) and never block or mutate. A watch with
several predicates passes an event only when *all* of them pass it (controller-runtime's
semantics); build other combinations with ``and_``, ``or_`` and ``not_``.

Tombstones (``DeletedFinalStateUnknown``) are unwrapped by ``source.py`` before predicates run,
so ``delete`` always receives the object's last known state.

The ``*ChangedPredicate`` family only filters *updates*; creates, deletes and generic events pass.
``GenerationChangedPredicate`` is the usual filter for a controller's primary kind: status-only
writes (which do not bump ``metadata.generation``) and informer resyncs do not wake it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "AnnotationChangedPredicate",
    "GenerationChangedPredicate",
    "LabelChangedPredicate",
    "Predicate",
    "PredicateFuncs",
    "ResourceVersionChangedPredicate",
    "and_",
    "not_",
    "or_",
    "predicate_funcs",
]

Obj = Mapping[str, Any]


class Predicate(Protocol):
    def create(self, obj: Obj) -> bool: ...

    def update(self, old: Obj, new: Obj) -> bool: ...

    def delete(self, obj: Obj) -> bool: ...

    def generic(self, obj: Obj) -> bool: ...


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class _UpdateOnly:
    """Base for predicates that pass every event except the updates they reject."""

    def create(self, obj: Obj) -> bool:
        return True

    def update(self, old: Obj, new: Obj) -> bool:
        raise NotImplementedError

    def delete(self, obj: Obj) -> bool:
        return True

    def generic(self, obj: Obj) -> bool:
        return True


class GenerationChangedPredicate(_UpdateOnly):
    """Pass updates whose ``metadata.generation`` changed (spec changes, not status writes)."""

    def update(self, old: Obj, new: Obj) -> bool:
        return _meta(old).get("generation") != _meta(new).get("generation")


class ResourceVersionChangedPredicate(_UpdateOnly):
    """Pass updates whose ``metadata.resourceVersion`` changed (drops informer resyncs)."""

    def update(self, old: Obj, new: Obj) -> bool:
        return _meta(old).get("resourceVersion") != _meta(new).get("resourceVersion")


class LabelChangedPredicate(_UpdateOnly):
    """Pass updates whose ``metadata.labels`` changed (absent and empty are equal)."""

    def update(self, old: Obj, new: Obj) -> bool:
        return dict(_meta(old).get("labels") or {}) != dict(_meta(new).get("labels") or {})


class AnnotationChangedPredicate(_UpdateOnly):
    """Pass updates whose ``metadata.annotations`` changed (absent and empty are equal)."""

    def update(self, old: Obj, new: Obj) -> bool:
        return dict(_meta(old).get("annotations") or {}) != dict(_meta(new).get("annotations") or {})


@dataclass(frozen=True)
class PredicateFuncs:
    """A predicate from plain functions; an omitted function passes every event of its kind."""

    # each is None (pass all) or a pure function deciding one event kind
    create_fn: Callable[[Obj], bool] | None = None
    update_fn: Callable[[Obj, Obj], bool] | None = None
    delete_fn: Callable[[Obj], bool] | None = None
    generic_fn: Callable[[Obj], bool] | None = None

    def create(self, obj: Obj) -> bool:
        return self.create_fn is None or self.create_fn(obj)

    def update(self, old: Obj, new: Obj) -> bool:
        return self.update_fn is None or self.update_fn(old, new)

    def delete(self, obj: Obj) -> bool:
        return self.delete_fn is None or self.delete_fn(obj)

    def generic(self, obj: Obj) -> bool:
        return self.generic_fn is None or self.generic_fn(obj)


def predicate_funcs(
    *,
    create: Callable[[Obj], bool] | None = None,
    update: Callable[[Obj, Obj], bool] | None = None,
    delete: Callable[[Obj], bool] | None = None,
    generic: Callable[[Obj], bool] | None = None,
) -> PredicateFuncs:
    """``predicate.Funcs``: build a predicate from per-event functions (omitted → pass)."""
    return PredicateFuncs(create, update, delete, generic)


@dataclass(frozen=True)
class _And:
    # every member must pass; an empty tuple passes everything
    preds: tuple[Predicate, ...]

    def create(self, obj: Obj) -> bool:
        return all(p.create(obj) for p in self.preds)

    def update(self, old: Obj, new: Obj) -> bool:
        return all(p.update(old, new) for p in self.preds)

    def delete(self, obj: Obj) -> bool:
        return all(p.delete(obj) for p in self.preds)

    def generic(self, obj: Obj) -> bool:
        return all(p.generic(obj) for p in self.preds)


@dataclass(frozen=True)
class _Or:
    # at least one member must pass; an empty tuple passes nothing (controller-runtime's Or)
    preds: tuple[Predicate, ...]

    def create(self, obj: Obj) -> bool:
        return any(p.create(obj) for p in self.preds)

    def update(self, old: Obj, new: Obj) -> bool:
        return any(p.update(old, new) for p in self.preds)

    def delete(self, obj: Obj) -> bool:
        return any(p.delete(obj) for p in self.preds)

    def generic(self, obj: Obj) -> bool:
        return any(p.generic(obj) for p in self.preds)


@dataclass(frozen=True)
class _Not:
    # the negated predicate
    pred: Predicate

    def create(self, obj: Obj) -> bool:
        return not self.pred.create(obj)

    def update(self, old: Obj, new: Obj) -> bool:
        return not self.pred.update(old, new)

    def delete(self, obj: Obj) -> bool:
        return not self.pred.delete(obj)

    def generic(self, obj: Obj) -> bool:
        return not self.pred.generic(obj)


def and_(*preds: Predicate) -> Predicate:
    """Pass an event only when every predicate passes it (short-circuits)."""
    return _And(tuple(preds))


def or_(*preds: Predicate) -> Predicate:
    """Pass an event when any predicate passes it (short-circuits); ``or_()`` passes nothing."""
    return _Or(tuple(preds))


def not_(pred: Predicate) -> Predicate:
    """Invert a predicate for every event kind."""
    return _Not(pred)
