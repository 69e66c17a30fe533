"""The claim index's validity memo (``escaler.reconcilers.kit.claims.Claims``) follows the
fleet, not its history: deleted scalers are dropped, so a manager whose scalers churn keeps a memo
of about twice its live scalers (issue 15, "Resource bounds"), and the memo still answers right."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from es_fakes import NS, external_metric, harness, metrics_trigger, scaler

from escaler.api.elasticscaler import ElasticScaler
from escaler.reconcilers.kit.claims import PRUNE_FLOOR, Claims

CHURNED = PRUNE_FLOOR + 500


def _obj(uid: str, generation: int = 1) -> dict[str, Any]:
    obj = scaler(uid, metrics_trigger(external_metric("queue", "10")))
    obj["metadata"].update(uid=uid, generation=generation)
    return obj


def test_deleted_uids_are_pruned_against_the_live_objects() -> None:
    live: dict[str, dict[str, Any]] = {}
    claims = Claims(live=lambda: list(live.values()))
    most = 0
    for i in range(CHURNED):
        obj = live[f"u{i}"] = _obj(f"u{i}")
        assert claims.can_act(obj)
        live.pop(f"u{i - 10}", None)  # ten live at a time
        most = max(most, claims.remembered())
    assert most <= PRUNE_FLOOR + 1
    assert claims.remembered() <= PRUNE_FLOOR


def test_the_memo_grows_with_the_live_fleet_above_the_floor() -> None:
    live = [_obj(f"u{i}") for i in range(3 * PRUNE_FLOOR)]
    claims = Claims(live=lambda: live)
    for obj in live:
        claims.can_act(obj)
    # nothing live is dropped, so nothing live is recomputed
    assert claims.remembered() == len(live)


def test_one_computation_per_generation() -> None:
    calls: list[str] = []

    def can_act(obj: Mapping[str, Any]) -> bool:
        calls.append(str(obj["metadata"]["uid"]))
        return bool(obj["metadata"]["generation"] % 2)

    claims = Claims(can_act=can_act, live=lambda: [])
    assert [claims.can_act(_obj("a", 1)) for _ in range(3)] == [True] * 3
    assert claims.can_act(_obj("a", 2)) is False
    assert claims.can_act(_obj("a", 2)) is False
    assert calls == ["a", "a"]


def test_without_live_the_newest_are_kept() -> None:
    claims = Claims(cache_size=3)
    for i in range(10):
        claims.can_act(_obj(f"u{i}"))
    assert claims.remembered() == 3


def test_a_churning_fleet_leaves_the_managers_memo_bounded() -> None:
    """Through setup_elasticscaler, the informer and the store: create and delete scalers one by one
    (at most five live); the ElasticScaler claim source's memo stays near the floor, not one entry per
    scaler ever seen (the old LRU kept all of them, up to 65,536)."""
    with harness() as h:
        h.start()
        api = h.api("elasticscalers")
        for i in range(CHURNED):
            api.create(scaler(f"s{i}", metrics_trigger(external_metric("queue", "10"))))
            if i >= 5:
                api.delete(f"{NS}/s{i - 5}")
        h.wait_synced()
        sources = {kind: target_of for kind, _, target_of in h.es.bindings.claim_sources()}
        claims = sources[ElasticScaler.KIND].__self__
        assert isinstance(claims, Claims)
        assert claims.remembered() <= PRUNE_FLOOR + 1, claims.remembered()
