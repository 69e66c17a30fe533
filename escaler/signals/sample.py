"""``Sample``: one reading of one metric, or why there is none.

Contract:

* Exactly one of ``value`` and ``error`` is set. ``value`` is a finite float; NaN and ±Inf never
  reach a ``Sample`` as a value: ``Sample.of`` turns them into an error naming the metric, and the
  constructor refuses them (a programming error).
* ``error`` is a message a user can act on (it names the source and the cause), capped at 1 KiB
  (``escaler.errors.cap_body``) because it ends up in a condition message and an Event.
* ``pods`` (Resource metrics only, with a value): the HPA's grouping of the target's pods behind
  the value (``escaler.scaling.algorithm.PodCounts``): the value is over the *ready* pods that
  report, and ``pods`` says how many that was and how many are unready or missing a metric, so
  the algorithm can apply the HPA's rules for them.
* Collectors never raise for data problems (an unreachable server, an empty result, a malformed
  body): they return an error ``Sample``. They raise only for programming errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from escaler.errors import cap_body
from escaler.scaling.algorithm import PodCounts

__all__ = ["PodTarget", "Sample"]


class PodTarget(Protocol):
    """What a collector needs of the scale target: its identity (for messages) and its pods.

    ``escaler.targets.TargetSnapshot`` satisfies it; ``escaler.signals`` does not import
    ``escaler.targets`` (the two packages are independent layers).
    """

    @property
    def kind(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def selector(self) -> str: ...


@dataclass(frozen=True)
class Sample:
    """A metric value, or the reason there is none (see the module docstring)."""

    # the reading; a finite float, or None when error is set
    value: float | None
    # why there is no reading (capped at 1 KiB); None when value is set
    error: str | None = None
    # Resource metrics: the pod groups behind value (see the module docstring); None otherwise
    pods: PodCounts | None = None

    def __post_init__(self) -> None:
        if (self.value is None) == (self.error is None):
            raise ValueError(f"Sample: exactly one of value and error must be set, got {self!r}")
        if self.pods is not None and (self.value is None or not isinstance(self.pods, PodCounts)):
            raise ValueError(f"Sample: pods must be PodCounts, and only next to a value, got {self!r}")
        if self.value is not None:
            if isinstance(self.value, bool) or not isinstance(self.value, int | float) \
                    or not math.isfinite(self.value):
                raise ValueError(f"Sample: value must be a finite number (use Sample.of), got {self.value!r}")
            object.__setattr__(self, "value", float(self.value))
        else:
            object.__setattr__(self, "error", cap_body(self.error))

    @classmethod
    def of(cls, value: float, what: str, pods: PodCounts | None = None) -> Sample:
        """``value`` as a sample; NaN or ±Inf become an error naming ``what``."""
        if not math.isfinite(value):
            return cls.fail(f"{what} is {value} (not a finite number)")
        return cls(value, pods=pods)

    @classmethod
    def fail(cls, message: str) -> Sample:
        return cls(None, message or "unknown error")

    @property
    def ok(self) -> bool:
        return self.error is None
