"""The oracle: perfect foresight of the trace, aware of cold starts — the bound on cost.

Contract of ``OraclePolicy(arrivals, profile, utilization)``:

* **Work.** Each request costs a replica ``prompt / prefill_tokens_per_s + output x
  decode_step_s(B) / B`` seconds, with ``B = max_batch`` (its share of full-batch iterations:
  the cheapest a replica can serve it). ``demand(b)`` is the work of the requests arriving in the
  bucket ``b`` of ``bucket_s`` seconds (they are served over the bucket), and the bucket needs
  ``ceil(demand / (bucket_s x utilization))`` replicas (at least 1): ``utilization`` is the one
  knob — how full the oracle runs its replicas (above 1, fewer than the work needs: only a
  calibration to a low attainment goal uses that, ``MAX_UTILIZATION``).
* **Foresight.** At a tick at ``t`` the oracle asks for the most any bucket in
  ``[t, t + cold_start_s + tick_s]`` needs: a replica ordered now serves after the cold start, and
  one removed now cannot come back sooner. So it never waits for load to show: capacity is
  serving when the load arrives, and released as soon as no load within a cold start needs it.
* ``calibrate`` (``escaler.sim.runner``) searches ``utilization`` for the cheapest oracle that
  still meets an attainment goal, which is what the report compares the policies against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from escaler.sim.engine import View
from escaler.sim.model import ReplicaProfile
from escaler.sim.trace import Arrival

__all__ = ["MAX_UTILIZATION", "OraclePolicy", "bucket_replicas"]

# above 1 the oracle deliberately runs short of capacity (requests queue): only a calibration to a
# policy's lower attainment goes there
MAX_UTILIZATION = 4.0


def bucket_replicas(arrivals: Sequence[Arrival], profile: ReplicaProfile, utilization: float,
                    bucket_s: float) -> list[int]:
    """Replicas each bucket needs (see the module docstring)."""
    if not 0 < utilization <= MAX_UTILIZATION:
        raise ValueError(f"oracle utilization: must be in (0, {MAX_UTILIZATION:g}], got {utilization}")
    b = profile.max_batch
    per_token = profile.decode_step_s(b) / b
    n = int(arrivals[-1].t // bucket_s) + 1 if arrivals else 1
    work = [0.0] * n
    for a in arrivals:
        cost = a.prompt_tokens / profile.prefill_tokens_per_s + a.output_tokens * per_token
        work[int(a.t // bucket_s)] += cost
    return [max(1, math.ceil(w / (bucket_s * utilization) - 1e-9)) for w in work]


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
        last = int((view.now + self.profile.cold_start_s + self.tick_s) // self.bucket_s)
        ahead = self._need[first:last + 1]
        return max(ahead) if ahead else 1
