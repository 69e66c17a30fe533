"""apa's rate cap applied after stabilization (the HPA's order): a scale-down of several rate steps
waits one stabilization window, not one window per step."""

from __future__ import annotations

from escaler.api.scaler import BoundBy
from escaler.scaling.algorithm import AlgorithmContext, MetricValue
from escaler.scaling.annotations import ScalerAnnotations
from escaler.scaling.apa import apa
from escaler.scaling.pipeline import Behavior, PipelineInput, PipelineState, RecommendResult, decide

WINDOW = 60.0


def _recommend(current: int, load: float) -> RecommendResult:
    # an External Value metric at target 10: the load / 10 is the count apa asks for
    result = apa(AlgorithmContext(current_replicas=current, metrics=(
        MetricValue(name="queue", type="External", value=load, target_value=10.0, target_type="Value"),)))
    return RecommendResult.from_metrics(result.replicas, evaluated=1, total=1, uncapped=result.uncapped,
                                        rate_band=result.band)


def _run(loads: list[tuple[float, float]], current: int) -> list[tuple[float, int]]:
    """(time, load) every sync → the writes (time, new count)."""
    behavior = Behavior.from_annotations(
        ScalerAnnotations(scale_down_stabilization_seconds=WINDOW), min_replicas=1, max_replicas=20,
        defer_timeout_seconds=600)
    state, writes = PipelineState(), []
    for now, load in loads:
        d = decide(PipelineInput(now=now, current_replicas=current, recommend=_recommend(current, load),
                                 behavior=behavior, state=state))
        state = d.state
        if d.write:
            writes.append((now, d.desired))
            current = d.desired
    return writes


def test_a_scale_down_of_several_rate_steps_waits_one_window_not_one_per_step() -> None:
    # 8 replicas busy until t=0, then the load drops to what 1 replica serves; a sync every 2 s
    loads = [(0.0, 80.0)] + [(float(t), 10.0) for t in range(2, 200, 2)]
    writes = _run(loads, current=8)
    # the window holds 8 until t=60; then apa halves per sync: 8 → 4 → 2 → 1 on consecutive syncs
    assert writes == [(60.0, 4), (62.0, 2), (64.0, 1)]


def test_the_rate_cap_is_reported_after_stabilization() -> None:
    behavior = Behavior.from_annotations(ScalerAnnotations(), min_replicas=1, max_replicas=20,
                                         defer_timeout_seconds=600)
    d = decide(PipelineInput(now=0.0, current_replicas=2, recommend=_recommend(2, 80.0), behavior=behavior))
    names = [s.name for s in d.steps]
    assert names.index("stabilize") < names.index("rateLimit")
    assert (d.desired, d.bound_by, d.limited_by) == (4, BoundBy.RATE_LIMIT, "ScaleUpLimit")
