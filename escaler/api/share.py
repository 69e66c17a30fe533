"""``SubModelTable``: equal parsed sub-models shared across parses, keyed by the input they came from.

A fleet made from one template parses the same ``spec.trigger`` (its metrics, targets, selectors)
once per scaler: thousands of equal trees of pydantic models, each kept for as long as the scaler
lives (the reconciler's ``ParseCache``; issue 30: memory per scaler, ``python bench/bench_memory.py``).
``share(model, raw, names)`` replaces each named field of ``model`` by the instance the table already
holds for an equal input, so the fleet holds one tree per distinct input instead of one per scaler.

Contract:

* **Keyed by the input, checked by the value.** The key is the field's class and name and the
  canonical JSON of the raw input subtree (``raw[alias]``, keys sorted: ``1`` and ``1.0``, ``true``
  and ``1`` stay apart). A model is swapped for the table's only when the two are also ``==``
  (pydantic's equality: the same field values and extras), so a validator that made the parse
  depend on anything outside the subtree can never hand one scaler another's value.
* **Read-only models only.** Shared instances are read by many owners: use it only on models
  nobody mutates (``escaler.api.compact.share_bookkeeping``'s models, which refuse assignment).
  The swap writes the parent's ``__dict__`` entry directly (assignment is refused on such models).
* **Bounded.** The table is an LRU of ``max_entries`` inputs (the key text and one model each);
  an input evicted or never seen only costs its parse its own copy, as before. Nothing a parse
  returns differs from an unshared parse: equal by ``==``, the same dumps; only ``is`` changes.
* Thread-safe (one lock around the LRU); a lookup costs one ``json.dumps`` of the subtree and, on a
  hit, one ``==``: it is meant to run once per parse, never per read.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from cachetools import LRUCache
from pydantic import BaseModel

__all__ = ["DEFAULT_MAX_ENTRIES", "SubModelTable"]

# distinct inputs remembered per table (a few hundred bytes of key text and one model tree each)
DEFAULT_MAX_ENTRIES = 1024


class SubModelTable:
    """See the module docstring."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"SubModelTable.max_entries: must be >= 1, got {max_entries}")
        # guards _models (LRUCache is not thread-safe, and get() reorders it)
        self._mu = threading.Lock()
        # (parent class, field name, canonical JSON of the input) → the shared model
        self._models: LRUCache[tuple[type[BaseModel], str, str], BaseModel] = LRUCache(maxsize=max_entries)
        # fields swapped for a shared instance / fields kept (first of their input, or unequal)
        self.hits = 0
        self.misses = 0

    def share(self, model: BaseModel, raw: Mapping[str, Any], names: Iterable[str]) -> None:
        """Swap each field of ``model`` in ``names`` (a nested model parsed from ``raw[alias]``) for the
        table's equal instance, or remember it as the one to share."""
        fields = type(model).model_fields
        for name in names:
            value = model.__dict__.get(name)
            info = fields.get(name)
            if not isinstance(value, BaseModel) or info is None:
                continue
            sub = raw.get(info.alias or name)
            if not isinstance(sub, Mapping):
                continue
            try:
                text = json.dumps(sub, sort_keys=True, separators=(",", ":"), allow_nan=True)
            except (TypeError, ValueError):
                continue
            key = (type(model), name, text)
            with self._mu:
                shared = self._models.get(key)
                if shared is None or type(shared) is not type(value) or shared != value:
                    self._models[key] = value
                    self.misses += 1
                    continue
                self.hits += 1
            model.__dict__[name] = shared

    def __len__(self) -> int:
        with self._mu:
            return len(self._models)
