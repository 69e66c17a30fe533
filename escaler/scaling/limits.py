"""Step limits and the min/max clamp (docs/concepts.md#the-decision-pipeline steps 3 and 4).

Contract:

* ``limit_step(current, desired, up_max_pods, down_max_pods, allow_up_limit=True)`` bounds one
  sync's change: at most ``up_max_pods`` replicas added (``maxPodsPerStep`` of scale-up) and at
  most ``down_max_pods`` removed (``maxPodsPerStep`` of scale-down, or LLMScaler's
  ``scaleDown.maxStepReplicas``). ``None`` means unlimited. LLMScaler passes
  ``allow_up_limit=False``: it never caps scale-up (docs/llmscaler.md), whatever ``up_max_pods`` says.
  The limit is per sync, not per unit of time: a scaler that syncs more often moves faster.
* ``clamp(count, min_replicas, max_replicas)`` bounds the count to ``[min, max]``. The pipeline
  clamps **last**, after stabilization and the step limits, so that lowering ``maxReplicas`` (or
  raising ``minReplicas``) takes effect on the next sync even while a stabilization window or a
  step limit would hold the count elsewhere.

Both raise ``ValueError`` for negative counts, a limit below 1, or ``min > max``. Pure.
"""

from __future__ import annotations

__all__ = ["clamp", "limit_step"]


def _count(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be an integer >= 0, got {value!r}")
    return value


def _limit(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be an integer >= 1 or None (unlimited), got {value!r}")
    return value


def limit_step(
    current: int,
    desired: int,
    up_max_pods: int | None,
    down_max_pods: int | None,
    allow_up_limit: bool = True,
) -> int:
    """``desired`` moved at most the per-step limit away from ``current``; see the module docstring."""
    _count(current, "current")
    _count(desired, "desired")
    up = _limit(up_max_pods, "up_max_pods")
    down = _limit(down_max_pods, "down_max_pods")
    if desired > current and up is not None and allow_up_limit:
        return min(desired, current + up)
    if desired < current and down is not None:
        return max(desired, current - down)
    return desired


def clamp(count: int, min_replicas: int, max_replicas: int) -> int:
    """``count`` bounded to ``[min_replicas, max_replicas]``."""
    _count(count, "count")
    _count(min_replicas, "min_replicas")
    _count(max_replicas, "max_replicas")
    if min_replicas > max_replicas:
        raise ValueError(f"min_replicas ({min_replicas}) must be <= max_replicas ({max_replicas})")
    return max(min_replicas, min(count, max_replicas))
