"""GroupReplication's bounds (issue 27): what one sync and one namespace may make the manager create.

A GroupReplication RSG makes the manager create workloads, and every clone is cached. Without
bounds one RSG of 1,024 groups with a 1 MiB template had the manager create every clone in one
reconcile and cache a GiB of copies. ``ReplicationLimits`` holds the three bounds, each a manager
flag (``escaler manager --help``):

* ``writes_per_sync`` (``--max-clone-writes-per-sync``, default 16): clone creates plus deletes in
  one reconcile of one RSG. The rest waits for the next pass (requeued within a second; the RSG's
  ``Ready`` condition says how far it got). A whole new group is never split across passes: a
  group with more members than the bound is created alone in one pass.
* ``clones_per_namespace`` (``--max-clones-per-namespace``, default 256): clones of every
  ResourceScalingGroup in one namespace together, counted from the clone caches plus the creates
  not seen there yet (``ledger.CloneLedger``). Beyond it the excess groups are refused
  (``Ready=False/CloneLimitReached`` naming ``spec.replicas`` and the limit); never created.
* ``template_bytes`` (``--max-clone-template-bytes``, default 256 KiB): the JSON size of one clone
  (the member's template as it would be created). A larger template is refused
  (``Ready=False/TemplateTooLarge`` naming the member and the limit); nothing of it is created.

Defaults are here and nowhere else; the constructor refuses a bound below 1.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_CLONES_PER_NAMESPACE",
    "DEFAULT_CLONE_TEMPLATE_BYTES",
    "DEFAULT_CLONE_WRITES_PER_SYNC",
    "ReplicationLimits",
]

DEFAULT_CLONE_WRITES_PER_SYNC = 16
DEFAULT_CLONES_PER_NAMESPACE = 256
DEFAULT_CLONE_TEMPLATE_BYTES = 256 * 1024


@dataclass(frozen=True)
class ReplicationLimits:
    """The bounds of GroupReplication (see the module docstring)."""

    # clone creates + deletes per reconcile of one RSG; >= 1
    writes_per_sync: int = DEFAULT_CLONE_WRITES_PER_SYNC
    # clones of all RSGs in one namespace; >= 1
    clones_per_namespace: int = DEFAULT_CLONES_PER_NAMESPACE
    # JSON bytes of one clone; >= 1
    template_bytes: int = DEFAULT_CLONE_TEMPLATE_BYTES

    def __post_init__(self) -> None:
        for name in ("writes_per_sync", "clones_per_namespace", "template_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ReplicationLimits.{name}: must be an integer >= 1, got {value!r}")
