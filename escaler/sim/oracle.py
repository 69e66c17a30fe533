"""The oracle: perfect foresight of the trace, aware of cold starts — the bound on cost.

Contract of ``OraclePolicy(arrivals, profile, utilization)``:

* **Work.** Each request costs a replica the least prefill and decode seconds
  ``escaler.sim.bound.work`` gives (its share of full-batch iterations, ``B = max_batch``, the
  context its steps read, its prompt less what a prefix cache can serve it: the cheapest a replica
  can serve it). ``demand(b)`` is the work of the requests arriving in the
  bucket ``b`` of ``bucket_s`` seconds (they are served over the bucket), and the bucket needs
  ``ceil(demand / (bucket_s x utilization))`` replicas (at least 1): ``utilization`` is the one
  knob — how full the oracle runs its replicas (above 1, fewer than the work needs: only a
  calibration to a low attainment goal uses that, ``MAX_UTILIZATION``).
* **Foresight.** At a tick at ``t`` the oracle asks for the most any bucket in
  ``[t, t + lead + tick_s]`` needs, ``lead`` = ``cold_start_p90_s`` plus ``node_delay_s`` when
  some new replicas need a node (``lead_s``): a replica ordered now serves after its start-up (9
  times in 10 within ``lead``), and one removed now cannot come back sooner. So it never waits for
  load to show: capacity is serving when the load arrives, and released as soon as no load within
  a start-up needs it. It knows the trace, not the start-ups the fleet will draw.
* ``calibrate`` (``escaler.sim.runner``) searches ``utilization`` for the cheapest oracle that
  still meets an attainment goal, which is what the report compares the policies against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from escaler.sim.bound import reusable, work
from escaler.sim.engine import View
from escaler.sim.model import ReplicaProfile
from escaler.sim.trace import Arrival

__all__ = ["MAX_UTILIZATION", "OraclePolicy", "bucket_replicas", "lead_s"]

# above 1 the oracle deliberately runs short of capacity (requests queue): only a calibration to a
# policy's lower attainment goes there
MAX_UTILIZATION = 4.0


def bucket_replicas(arrivals: Sequence[Arrival], profile: ReplicaProfile, utilization: float,
                    bucket_s: float) -> list[int]:
    """Replicas each bucket needs (see the module docstring)."""
    if not 0 < utilization <= MAX_UTILIZATION:
        raise ValueError(f"oracle utilization: must be in (0, {MAX_UTILIZATION:g}], got {utilization}")
    n = int(arrivals[-1].t // bucket_s) + 1 if arrivals else 1
    demand = [0.0] * n
    for a, cached in zip(arrivals, reusable(arrivals, profile), strict=True):
        pre, dec = work(a, profile, cached)
        demand[int(a.t // bucket_s)] += pre + dec
    return [max(1, math.ceil(w / (bucket_s * utilization) - 1e-9)) for w in demand]


def lead_s(profile: ReplicaProfile) -> float:
    """How far ahead the oracle orders capacity (module docstring)."""
    return profile.cold_start_p90_s + (profile.node_delay_s if profile.node_delay_share > 0 else 0.0)


@dataclass
class OraclePolicy:
    """See the module docstring."""

    arrivals: Sequence[Arrival]
    profile: ReplicaProfile
    utilization: float = 0.7
    bucket_s: float = 10.0
    tick_s: float = 5.0
    name: str = "oracle"
    _need: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._need = bucket_replicas(self.arrivals, self.profile, self.utilization, self.bucket_s)

    @property
    def period_s(self) -> float:
        return self.tick_s

    def decide(self, view: View) -> int:
        first = int(view.now // self.bucket_s)
        last = int((view.now + lead_s(self.profile) + self.tick_s) // self.bucket_s)
        ahead = self._need[first:last + 1]
        return max(ahead) if ahead else 1
