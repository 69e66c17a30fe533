"""The scaling-algorithm registry (docs/guide/elasticscaler.md#the-triggers): algorithm names → pure
functions.

Contract:

* ``register_algorithm(name, fn)`` makes ``fn`` (an ``Algorithm``: a pure function of an
  ``AlgorithmContext`` to a count — an ``int``, or an ``AlgorithmResult`` when it caps its own
  step, see ``escaler.scaling.algorithm``) selectable as ``spec.trigger.metricsTrigger.scalingAlgorithm:
  <name>``. Names are RFC 1123 DNS labels (lowercase letters, digits and ``-``, at most 63
  characters, alphanumeric at both ends), so they read well in YAML and in condition messages.
  Registering a taken name raises ``ValueError`` unless ``replace=True``.
* ``register_algorithm(name, fn, history=N)`` says how many past recommendations ``fn`` reads
  (``AlgorithmContext.history``): the caller keeps the newest ``N`` per scaler between polls and
  gives them to ``fn`` (``escaler.scaling.metricdecision``). The default,
  ``ALGORITHM_HISTORY`` (64), is what every plug-in was given before the knob existed; ``0``
  says "reads none", and a scaler using such an algorithm keeps no history at all (issue 30:
  64 entries are ~1.1 KiB a scaler). ``history_length(name)`` answers it (``ALGORITHM_HISTORY``
  for a name not registered). A history is per scaler and in memory only: a scaler whose
  algorithm changes starts the new one's history from what the old one kept (none after an
  algorithm that reads none), as a restarted manager starts every scaler's from none.
* ``HPA`` is *reserved*: it is not a function but "delegate to a companion HorizontalPodAutoscaler"
  (docs/guide/elasticscaler.md#the-triggers), so it can be neither registered nor looked up;
  ``is_known_algorithm("HPA")`` is True. The reservation is case-insensitive (``hpa`` is refused too) so that
  no plug-in can be mistaken for it.
* ``apa`` (``escaler.scaling.apa``, which returns an ``AlgorithmResult``) and ``flow``
  (``escaler.scaling.flowalgorithm``: stateless flow sizing on token-rate metrics) are registered
  at import, each with ``history=0``: neither reads ``AlgorithmContext.history``.
* ``get_algorithm(name)`` raises ``AlgorithmNotRegistered`` (a ``KeyError``) whose message names
  the algorithm and lists the registered ones.
* The registry is process-wide and thread-safe. The admission webhook and the reconcilers run in
  the manager process, so an embedding operator registers its algorithms before
  ``Manager.start()`` and both see them.
"""

from __future__ import annotations

import re
import threading

from escaler.scaling.algorithm import ALGORITHM_HISTORY, Algorithm
from escaler.scaling.apa import APA, apa
from escaler.scaling.flowalgorithm import FLOW, flow

__all__ = [
    "ALGORITHM_HISTORY",
    "DEFAULT_ALGORITHM",
    "HPA",
    "AlgorithmNotRegistered",
    "get_algorithm",
    "history_length",
    "is_known_algorithm",
    "register_algorithm",
    "registered_algorithms",
    "unregister_algorithm",
    "validate_algorithm_name",
]

# the reserved name: delegate to a companion HPA (docs/guide/elasticscaler.md#the-triggers)
HPA = "HPA"
# what an omitted scalingAlgorithm means
DEFAULT_ALGORITHM = APA

_NAME_RE = re.compile(r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?$")
_MAX_NAME_LENGTH = 63


class AlgorithmNotRegistered(KeyError):
    """``get_algorithm`` of an unknown name; ``str()`` is the plain message (no KeyError quotes)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        # the human-readable message
        self.message = message

    def __str__(self) -> str:
        return self.message


# guards _algorithms
_mu = threading.Lock()
# name → function; names are valid DNS labels, never HPA
_algorithms: dict[str, Algorithm] = {APA: apa, FLOW: flow}
# name → how many past recommendations it reads (register_algorithm's history=); same keys
_history: dict[str, int] = {APA: 0, FLOW: 0}


def validate_algorithm_name(name: str) -> None:
    """``ValueError`` naming the rule when ``name`` cannot be registered."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"algorithm name: must be a non-empty string, got {name!r}")
    if name.upper() == HPA:
        raise ValueError(f"algorithm name {name!r}: reserved (HPA delegates to a companion HPA)")
    if len(name) > _MAX_NAME_LENGTH or not _NAME_RE.match(name):
        raise ValueError(
            f"algorithm name {name!r}: must be a DNS label (lowercase letters, digits and '-', "
            f"alphanumeric at both ends, at most {_MAX_NAME_LENGTH} characters)"
        )


def register_algorithm(name: str, fn: Algorithm, *, replace: bool = False,
                       history: int = ALGORITHM_HISTORY) -> None:
    """Make ``fn`` selectable as ``scalingAlgorithm: name``, given its newest ``history`` past
    recommendations; see the module docstring."""
    validate_algorithm_name(name)
    if not callable(fn):
        raise ValueError(f"algorithm {name!r}: must be callable, got {type(fn).__name__}")
    if type(history) is not int or not 0 <= history <= ALGORITHM_HISTORY:
        raise ValueError(f"algorithm {name!r}: history must be an integer from 0 to {ALGORITHM_HISTORY} "
                         f"(the past recommendations it reads), got {history!r}")
    with _mu:
        if name in _algorithms and not replace:
            raise ValueError(f"algorithm {name!r}: already registered (pass replace=True to replace it)")
        _algorithms[name] = fn
        _history[name] = history


def unregister_algorithm(name: str) -> None:
    """Remove a registration (plug-in teardown, tests); ``AlgorithmNotRegistered`` if absent."""
    with _mu:
        if name not in _algorithms:
            raise AlgorithmNotRegistered(_not_registered(name))
        del _algorithms[name]
        del _history[name]


def _not_registered(name: str) -> str:
    known = ", ".join(sorted(_algorithms)) or "none"
    return f"scaling algorithm {name!r} is not registered (registered: {known}; or {HPA})"


def get_algorithm(name: str) -> Algorithm:
    """The function registered as ``name``; ``AlgorithmNotRegistered`` otherwise (also for HPA)."""
    with _mu:
        fn = _algorithms.get(name)
        if fn is None:
            if name == HPA:
                raise AlgorithmNotRegistered(
                    f"scaling algorithm {HPA!r} is not a function: it delegates to a companion HPA")
            raise AlgorithmNotRegistered(_not_registered(name))
        return fn


def history_length(name: str) -> int:
    """How many past recommendations the algorithm registered as ``name`` reads
    (``ALGORITHM_HISTORY`` when none is registered under it)."""
    with _mu:
        return _history.get(name, ALGORITHM_HISTORY)


def registered_algorithms() -> list[str]:
    """The registered names, sorted (``HPA`` is not among them)."""
    with _mu:
        return sorted(_algorithms)


def is_known_algorithm(name: str) -> bool:
    """True for ``HPA`` and every registered name — what ``scalingAlgorithm`` may say."""
    if not isinstance(name, str):
        return False
    if name == HPA:
        return True
    with _mu:
        return name in _algorithms
