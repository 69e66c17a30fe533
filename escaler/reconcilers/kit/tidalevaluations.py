"""``TidalEvaluations``: a Tidal's spec parsed once per (uid, resourceVersion) and its rules evaluated
once per (uid, resourceVersion, minute), shared by the Tidal reconciler and every ``spec.floorFrom``
read of that Tidal (issue 27 item 2).

* ``parsed(obj)`` → ``ParsedTidal``: the Tidal object as the pydantic model reads it (or why it does
  not), its rules' schedules and dates parsed (``escaler.scaling.tidal.parse_rule_schedules``) and
  every schedule error. Kept per (namespace, name, uid, resourceVersion): a spec change is a new
  resourceVersion, so a changed spec is never answered from the cache.
* ``evaluate(obj, parsed, now)`` → the ``Evaluation`` at ``now`` (``escaler.scaling.tidal.evaluate``),
  or ``TooManyExcludedFires`` raised, kept per (namespace, name, uid, resourceVersion, minute of
  ``now``): a Tidal's fires are whole minutes, so its evaluation is the same all minute long. The
  Tidal reconcile and the syncs of 10,000 scalers whose ``floorFrom`` names that Tidal in that
  minute share one evaluation. Concurrent callers of one key wait for the first one's answer
  instead of evaluating it again.
* An object without a uid or a resourceVersion (a test's fake) is parsed and evaluated every time.

Both caches are LRU and bounded by weight, not count, whatever tenants write: a parsed Tidal weighs
its rules plus its excluded dates (``PARSED_WEIGHT`` in all), an evaluation its rules
(``EVALUATION_WEIGHT``). Each namespace holds at most its share of each
(``escaler.tenantcache.TenantLRU``: ``max(total // active namespaces, floor)``, the floors
``PARSED_FLOOR`` — one Tidal of the largest spec the CRD admits — and ``EVALUATION_FLOOR``): a
namespace writing many or large Tidals evicts its own entries, never another namespace's.
``SHARED`` is the process's instance (the manager runs one; a uid is
unique in its cluster, so one cache serves it); tests pass their own or clear it (a fake API server
hands out the same uids and resourceVersions in every test). Thread-safe: one lock guards both
caches and the in-flight map. No clock is read: ``now`` is an argument.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import ValidationError

from escaler.api.tidal import MAX_EXCLUDE_DATES, MAX_TIDAL_RULES, Tidal
from escaler.scaling.tidal import (
    Evaluation,
    RuleSchedule,
    ScheduleError,
    TooManyExcludedFires,
    evaluate,
    parse_rule_schedules,
)
from escaler.tenantcache import TenantLRU

__all__ = ["EVALUATION_FLOOR", "EVALUATION_WEIGHT", "PARSED_FLOOR", "PARSED_WEIGHT", "SHARED", "ParsedTidal",
           "TidalEvaluations"]

# total weight of the parsed Tidals kept: one per rule, one per excluded date (a date ~ 100 bytes)
PARSED_WEIGHT = 250_000
# total weight of the evaluations kept: one per rule state (the worst Tidal: 65)
EVALUATION_WEIGHT = 65_536
# the share of each a namespace keeps however many namespaces are active: the largest parsed Tidal
# the CRD admits (64 rules of 366 dates each: 23,489), and 64 evaluations of the largest (4,160)
PARSED_FLOOR = 1 + MAX_TIDAL_RULES * (1 + MAX_EXCLUDE_DATES)
EVALUATION_FLOOR = 64 * (1 + MAX_TIDAL_RULES)

_T = TypeVar("_T")
# an evaluation kept (or the error it raised), with its weight
_Kept = tuple[Evaluation | TooManyExcludedFires, int]


@dataclass(frozen=True)
class ParsedTidal:
    """A Tidal's spec, parsed (see the module docstring)."""

    # the rules whose schedules and dates parsed, in spec order
    rules: tuple[RuleSchedule, ...]
    # spec.defaultReplicas
    default_replicas: int | None
    # every schedule or date that does not parse
    errors: tuple[ScheduleError, ...]
    # (field path, message) of each pydantic error when the object does not read as a Tidal; then
    # rules and errors are empty
    invalid: tuple[tuple[str, str], ...] = ()

    @property
    def weight(self) -> int:
        return 1 + sum(1 + len(r.exclude_dates) for r in self.rules)


def parse_tidal(obj: Mapping[str, Any]) -> ParsedTidal:
    """``obj`` parsed (uncached)."""
    try:
        spec = Tidal.parse(obj).spec
    except ValidationError as err:
        return ParsedTidal((), None, (), tuple((".".join(str(p) for p in e["loc"]), str(e["msg"]))
                                               for e in err.errors()))
    rules, errors = parse_rule_schedules(
        [(r.name, r.start, r.end, r.replicas, r.exclude_dates) for r in spec.rules])
    return ParsedTidal(tuple(rules), spec.default_replicas, tuple(errors))


def _as_parsed(value: ParsedTidal) -> ParsedTidal:
    return value


def _parsed_weight(value: ParsedTidal) -> int:
    return value.weight


def _kept_weight(value: _Kept) -> int:
    return value[1]


def _identity(obj: Mapping[str, Any]) -> tuple[str, str, str, str] | None:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    uid, rv = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
    if not uid or not rv:
        return None
    return str(meta.get("namespace") or ""), str(meta.get("name") or ""), uid, rv


class TidalEvaluations:
    """See the module docstring."""

    def __init__(self, parsed_weight: int = PARSED_WEIGHT, evaluation_weight: int = EVALUATION_WEIGHT,
                 parsed_floor: int = PARSED_FLOOR, evaluation_floor: int = EVALUATION_FLOOR) -> None:
        # guards _inflight and the counters (each cache has its own lock, taken inside this one)
        self._mu = threading.Lock()
        # namespace → (namespace, name, uid, resourceVersion) → ParsedTidal
        self._parsed: TenantLRU[tuple[Any, ...], ParsedTidal] = TenantLRU(
            parsed_weight, min(parsed_floor, parsed_weight), _parsed_weight)
        # namespace → (namespace, name, uid, resourceVersion, minute) → Evaluation or the
        # TooManyExcludedFires
        self._evaluations: TenantLRU[tuple[Any, ...], _Kept] = TenantLRU(
            evaluation_weight, min(evaluation_floor, evaluation_weight), _kept_weight)
        # keys being computed → the event set when their value is in the cache (or failed)
        self._inflight: dict[tuple[Any, ...], threading.Event] = {}
        # how many parses and evaluations were computed (not answered from the cache); for tests
        self.parses = 0
        self.evaluations = 0

    def clear(self) -> None:
        """Forget everything (tests whose fake API servers reuse uids and resourceVersions)."""
        with self._mu:
            self._parsed.clear()
            self._evaluations.clear()

    def parsed(self, obj: Mapping[str, Any]) -> ParsedTidal:
        """``obj``'s spec parsed, once per (uid, resourceVersion)."""
        ident = _identity(obj)
        if ident is None:
            return self._count_parse(obj)
        return self._once(self._parsed, ident, lambda: self._count_parse(obj), _as_parsed)

    def evaluate(self, obj: Mapping[str, Any], parsed: ParsedTidal, now: datetime) -> Evaluation:
        """``parsed``'s rules at ``now`` (``TooManyExcludedFires`` raised), once per (uid,
        resourceVersion, minute); ``parsed`` is ``parsed(obj)``."""
        ident = _identity(obj)
        if ident is None:
            value = self._count_evaluation(parsed, now)[0]
        else:
            key = (*ident, int(now.timestamp() // 60))
            value = self._once(self._evaluations, key, lambda: self._count_evaluation(parsed, now),
                               lambda v: v[0])
        if isinstance(value, TooManyExcludedFires):
            # a fresh error each time: re-raising the kept one would grow its traceback
            raise TooManyExcludedFires(value.index, value.name)
        return value

    def _count_parse(self, obj: Mapping[str, Any]) -> ParsedTidal:
        with self._mu:
            self.parses += 1
        return parse_tidal(obj)

    def _count_evaluation(self, parsed: ParsedTidal,
                          now: datetime) -> _Kept:
        with self._mu:
            self.evaluations += 1
        try:
            value: Evaluation | TooManyExcludedFires = evaluate(parsed.rules, parsed.default_replicas, now)
        except TooManyExcludedFires as err:
            value = err
        return value, 1 + len(parsed.rules)

    def _once(self, cache: TenantLRU[tuple[Any, ...], Any], key: tuple[Any, ...],
              compute: Callable[[], Any], answer: Callable[[Any], _T]) -> _T:
        """``cache``'s value for ``key`` (kept in the share of ``key[0]``, the namespace), computed by
        one caller while the others wait for it."""
        namespace = key[0]
        while True:
            with self._mu:
                hit = cache.get(namespace, key)
                if hit is not None:
                    return answer(hit)
                waiting = self._inflight.get(key)
                if waiting is None:
                    done = self._inflight[key] = threading.Event()
                    break
            waiting.wait()  # the computing caller stored it (or failed: then compute it here)
        try:
            value = compute()
            with self._mu:
                cache.put(namespace, key, value)  # heavier than the namespace's share: not kept
            return answer(value)
        finally:
            with self._mu:
                self._inflight.pop(key, None)
            done.set()


# the manager's instance: the Tidal reconciler and every FloorReader share it
SHARED = TidalEvaluations()
