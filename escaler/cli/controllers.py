"""``--controllers``: which of the manager's controllers run, as kube-controller-manager's flag says.

Contract:

* ``CONTROLLERS`` names every controller ``escaler manager`` runs, in registration order, with the
  kinds it needs served (``Needed``: apiVersion, kind, CRD name): ``elasticscaler`` (ElasticScaler),
  ``tidal`` (Tidal), ``rsg`` (ResourceScalingGroup; it also watches ElasticScalers, the kind it
  shares targets with), ``slo`` (the SLO decision engine: LLMSLORequirement and JobSLORequirement)
  and ``llmscaler`` (LLMScaler; it also watches ElasticScalers). A kind a controller only *reads when
  served* is not a need: the Tidal of a scaler's ``spec.floorFrom`` (``escaler.reconcilers.kit.floor``).
* ``enabled_controllers(value)`` parses the flag's value — a comma list of ``*`` (every
  controller), ``name`` (enable it) and ``-name`` (disable it) — into the set of enabled names,
  kube-controller-manager's rule: for each controller the first item naming it (``name`` or
  ``-name``) decides, else ``*`` enables it, else it is off. Default ``*``. Refused with a
  ``ValueError`` (the caller prefixes the flag): an unknown name (the message lists the valid ones),
  an empty item, ``name`` together with ``-name``, and a value that enables no controller.
"""

from __future__ import annotations

from escaler.api.registry import KINDS
from escaler.runtime.crdgate import Needed

__all__ = ["ALL", "CONTROLLERS", "DEFAULT_CONTROLLERS", "FLAG", "enabled_controllers", "valid_names"]

FLAG = "--controllers"
ALL = "*"
DEFAULT_CONTROLLERS = ALL


def _needed(kind: str) -> Needed:
    info = KINDS[kind]
    return Needed(info.api_version, info.kind, info.crd_name)


# name → the kinds it needs served, in the order the manager registers them
CONTROLLERS: dict[str, tuple[Needed, ...]] = {
    "elasticscaler": (_needed("ElasticScaler"),),
    "tidal": (_needed("Tidal"),),
    "rsg": (_needed("ResourceScalingGroup"), _needed("ElasticScaler")),
    "slo": (_needed("LLMSLORequirement"), _needed("JobSLORequirement")),
    "llmscaler": (_needed("LLMScaler"), _needed("ElasticScaler")),
}


def valid_names() -> str:
    return ", ".join(CONTROLLERS)


def enabled_controllers(value: str) -> frozenset[str]:
    """The controllers ``value`` enables (module docstring); ``ValueError`` saying what is wrong."""
    items = [item.strip() for item in value.split(",")]
    if any(not item for item in items):
        raise ValueError(f"empty item in {value!r}: give a comma list of {ALL}, <name> and -<name> "
                         f"(controllers: {valid_names()})")
    for item in items:
        name = item[1:] if item.startswith("-") else item
        if item != ALL and name not in CONTROLLERS:
            raise ValueError(f"unknown controller {name!r}: valid names are {valid_names()} "
                             f"({ALL} for all, -<name> to disable one)")
    for name in CONTROLLERS:
        if name in items and f"-{name}" in items:
            raise ValueError(f"{name} is both enabled and disabled ({name} and -{name})")
    enabled = frozenset(name for name in CONTROLLERS if _decide(name, items))
    if not enabled:
        raise ValueError(f"{value!r} enables no controller: valid names are {valid_names()} "
                         f"({ALL} for all, -<name> to disable one)")
    return enabled


def _decide(name: str, items: list[str]) -> bool:
    for item in items:
        if item == name:
            return True
        if item == f"-{name}":
            return False
    return ALL in items
