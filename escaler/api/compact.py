"""``share_bookkeeping``: a parsed model kept for a long time, without its per-instance bookkeeping.

Every pydantic v2 model instance carries, next to its field values, a ``__pydantic_fields_set__``
(a ``set`` of the field names the input gave: 216 bytes for up to four names, 728 for up to 18)
and, with ``extra="allow"`` (every ``KubeModel``), a ``__pydantic_extra__`` dict (64 bytes even
when empty). A parsed ElasticScaler is a tree of ~10-20 models, so this bookkeeping was about half
of each parse kept by the reconciler's ``ParseCache`` (issue 10: memory per scaler,
``python bench/run.py bench_memory``), and it is the same few sets over and over across a fleet.

Contract of ``share_bookkeeping(model)`` (returns ``model``, changed in place, with every model
nested in its fields, lists, tuples and dict values):

* Each ``__pydantic_fields_set__`` made only of declared field names becomes one shared
  ``SharedFieldSet`` per distinct set of names (interned; the table is bounded by the schema, not
  by the input: a set that names an unknown (extra) field is left as it is). A ``SharedFieldSet``
  *is* a ``set`` (pydantic-core's ``exclude_unset`` requires one), equal to the original, and
  refuses mutation with ``TypeError`` (``READ_ONLY_MESSAGE``): one model changing it would change
  it for every model sharing it. ``copy``/``deepcopy`` of it give a plain ``set``.
* An empty ``__pydantic_extra__`` becomes ``None``, which pydantic treats as "no extra fields"
  (``==``, ``model_dump``, ``model_dump_json``, ``exclude_unset``, ``repr`` are unchanged).
* So everything that *reads* the model behaves exactly as before; what changes is that writing
  is loud: assigning any field (pydantic adds its name to the shared set) or an unknown attribute
  (no extra dict) raises ``TypeError`` — after pydantic has stored a field's value, so the error
  reports a misuse, it does not undo it. Use it only on
  models nobody mutates (the reconciler's parse cache); ``model_copy()`` or ``copy.deepcopy``
  give a mutable copy.
* Each model's instance dict becomes a *key-sharing* dict (PEP 412): a dict holding only its
  values, its keys kept once for every model of its class. pydantic stores a model's fields in a
  dict of its own (a whole hash table: 184 bytes for up to five fields, 272 for up to ten); the
  dict that replaces it is created as the instance dict of a plain class made once per model class
  (``_values_class``), with the same keys in the same order, so CPython shares that class's keys
  table. It is a ``dict`` equal to the original, so every read (``model_dump``, ``==``, ``copy``,
  pickling, pydantic-core's serializer) is unchanged; an insertion CPython cannot share turns it
  back into an ordinary dict on its own. What it saves is measured, not assumed: ~640 bytes a
  parsed ElasticScaler (``python bench/rss_cuts.py``: RSS of 20,000 parses kept).
* One pass over the tree, no validation: about as costly as walking ``__dict__`` once. It is
  meant to run once per parse, never per read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NoReturn, TypeVar

from pydantic import BaseModel

__all__ = ["READ_ONLY_MESSAGE", "SharedFieldSet", "share_bookkeeping"]

READ_ONLY_MESSAGE = "this model's fields-set is shared with other models (share_bookkeeping); copy the model"

_M = TypeVar("_M", bound=BaseModel)


def _read_only(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise TypeError(READ_ONLY_MESSAGE)


class SharedFieldSet(set[str]):
    """A ``set`` of field names shared by many models; every mutating method raises ``TypeError``."""

    __slots__ = ()

    add = discard = remove = pop = clear = update = _read_only
    difference_update = intersection_update = symmetric_difference_update = _read_only
    __ior__ = __iand__ = __isub__ = __ixor__ = _read_only

    def __copy__(self) -> set[str]:
        return set(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> set[str]:
        return set(self)

    def __reduce__(self) -> tuple[type[set[str]], tuple[list[str]]]:
        return (set, (list(self),))


# model class → a plain class whose instances' dicts share one keys table (``_shared_keys_dict``)
_VALUES: dict[type[BaseModel], type] = {}
# (model class, names) → the one SharedFieldSet for them; bounded by each class's declared fields
_SHARED: dict[tuple[type[BaseModel], frozenset[str]], SharedFieldSet] = {}
_set_attr = object.__setattr__


def _shared_fields_set(cls: type[BaseModel], names: set[str]) -> SharedFieldSet | None:
    if type(names) is SharedFieldSet:
        return names
    key = (cls, frozenset(names))
    shared = _SHARED.get(key)
    if shared is None:
        if not key[1] <= cls.model_fields.keys():
            return None  # names an extra field: unbounded input, keep the model's own set
        shared = _SHARED.setdefault(key, SharedFieldSet(names))
    return shared


def _values_class(cls: type[BaseModel]) -> type:
    values = _VALUES.get(cls)
    if values is None:
        values = _VALUES.setdefault(cls, type(f"{cls.__name__}Values", (), {"__module__": __name__}))
    return values


def _shared_keys_dict(cls: type[BaseModel], fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` copied into a dict that shares its keys with every other of ``cls``'s."""
    holder = _values_class(cls)()
    for name, value in fields.items():
        _set_attr(holder, name, value)
    shared: dict[str, Any] = holder.__dict__
    return shared


def _share(model: BaseModel) -> None:
    shared = _shared_fields_set(type(model), model.__pydantic_fields_set__)
    if shared is not None:
        _set_attr(model, "__pydantic_fields_set__", shared)
    extra = model.__pydantic_extra__
    if extra is not None and not extra:
        _set_attr(model, "__pydantic_extra__", None)
    _set_attr(model, "__dict__", _shared_keys_dict(type(model), model.__dict__))
    _share_values(model.__dict__.values())
    if extra:
        _share_values(extra.values())


def _share_values(values: Iterable[Any]) -> None:
    for value in values:
        if isinstance(value, BaseModel):
            _share(value)
        elif isinstance(value, list | tuple):
            _share_values(value)
        elif isinstance(value, dict):
            _share_values(value.values())


def share_bookkeeping(model: _M) -> _M:
    """``model`` with its (and its nested models') fields-sets shared and empty extras dropped."""
    _share(model)
    return model
