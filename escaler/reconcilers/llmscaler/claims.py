"""Which target an LLMScaler object claims in the shared binding index (``kit.bindings``).

An LLMScaler claims ``spec.targetRef`` — so an LLMScaler and an ElasticScaler on one Deployment are a
TargetConflict, and the older wins (the same claim rules as ``escaler.reconcilers.kit.claims``):
nothing when it is Advisory (it never writes), when the object does not parse, or when
a spec rule fails that stops it from acting (``minReplicas > maxReplicas``, a URL without a host).
A spec whose only failing rule is the missing provider section (``metricProvider: Custom`` without
``customProvider``, ``Flow`` without ``flow``: an object older than the CEL rule) still claims: it reports
``ScalingActive=False/InvalidSpec`` and holds its target's count inside the bounds, which is a write.

``llm_claims()`` is the index function with its (uid, generation) validity cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from escaler.api.llmscaler import LLMScaler
from escaler.api.rules import validate
from escaler.reconcilers.kit.claims import Claims

__all__ = ["PROVIDER_PATHS", "llm_can_act", "llm_claims", "provider_problems"]

# spec rules about the selected provider's section: the pipeline still runs (InvalidSpec, held)
PROVIDER_PATHS = ("spec.customProvider", "spec.prometheus", "spec.flow")


def provider_problems(problems: list[str]) -> tuple[list[str], list[str]]:
    """``(provider, other)``: the findings of ``validate`` split by ``PROVIDER_PATHS`` (the section
    itself missing; a rule inside a section, such as ``spec.flow.selector``'s, is another problem)."""
    provider = [p for p in problems if p.partition(": ")[0] in PROVIDER_PATHS and "required" in p]
    return provider, [p for p in problems if p not in provider]


def llm_can_act(obj: Mapping[str, Any]) -> bool:
    """True when the LLMScaler ``obj`` may write its target (see the module docstring; uncached)."""
    try:
        scaler = LLMScaler.parse(obj)
    except (ValidationError, ValueError, TypeError):
        return False
    _, other = provider_problems([str(e) for e in validate(scaler)])
    return not other


def llm_claims(live: Callable[[], Iterable[Mapping[str, Any]]] | None = None) -> Claims:
    """The LLMScaler binding index function (``Claims.target_of``), with its validity memo (pruned
    against ``live``, the LLMScaler informer's ``list``; see ``kit.claims``)."""
    return Claims(can_act=llm_can_act, live=live)
