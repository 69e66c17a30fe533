"""escaler.scaling: the pure decision layer (see ARCHITECTURE.md) — no I/O, no clock reads, no kube.

Public API so far:

* the algorithm contract and registry (SPEC §5.2): ``Algorithm``, ``AlgorithmContext``,
  ``MetricValue``, ``Recommendation``, ``NoDecision``, ``register_algorithm``, ``get_algorithm``,
  ``registered_algorithms``, ``is_known_algorithm``, ``unregister_algorithm``, ``HPA``,
  ``DEFAULT_ALGORITHM``; the built-in ``apa`` (``escaler.scaling.apa``);
* ``escaler.scaling.annotations`` — the pause and §5.4 annotation keys, defaults and parser;
* ``escaler.scaling.schedule`` — Tidal's ``CRON_TZ=<zone> <cron>`` syntax;
* ``escaler.scaling.endpoints`` — endpoint URL syntax and ``--allowed-endpoint-hosts`` matching.

Registering an algorithm::

    from escaler.scaling import AlgorithmContext, register_algorithm

    def at_least_two(ctx: AlgorithmContext) -> int:
        return max(2, ctx.current_replicas)

    register_algorithm("at-least-two", at_least_two)
"""

from escaler.scaling.algorithm import (
    Algorithm,
    AlgorithmContext,
    MetricValue,
    NoDecision,
    Recommendation,
)
from escaler.scaling.apa import apa
from escaler.scaling.registry import (
    DEFAULT_ALGORITHM,
    HPA,
    AlgorithmNotRegistered,
    get_algorithm,
    is_known_algorithm,
    register_algorithm,
    registered_algorithms,
    unregister_algorithm,
)

__all__ = [
    "DEFAULT_ALGORITHM",
    "HPA",
    "Algorithm",
    "AlgorithmContext",
    "AlgorithmNotRegistered",
    "MetricValue",
    "NoDecision",
    "Recommendation",
    "apa",
    "get_algorithm",
    "is_known_algorithm",
    "register_algorithm",
    "registered_algorithms",
    "unregister_algorithm",
]
