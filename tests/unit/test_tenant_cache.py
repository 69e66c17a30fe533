"""``escaler.tenantcache.TenantLRU`` (issue 27): one bounded cache, each namespace held to its share.
A tenant writing ten times the cache's size of distinct entries evicts only its own; the total, each
tenant's share and the number of tenants tracked stay bounded; the heaviest tenant pays when the
floors overlap; an entry heavier than its share is not kept. No clock: nothing here is timed."""

from __future__ import annotations

import random
import threading

import pytest

from escaler.tenantcache import TenantLRU


def test_a_tenant_writing_ten_times_the_cache_evicts_only_its_own_entries() -> None:
    cache: TenantLRU[str, int] = TenantLRU(total=100, floor=10)
    for i in range(20):
        cache.put("team-b", f"b{i}", i)
    for i in range(10 * 100):
        cache.put("team-a", f"a{i}", i)
        assert cache.weight <= 100
    hits = cache.hits
    assert [cache.get("team-b", f"b{i}") for i in range(20)] == list(range(20))
    assert cache.hits == hits + 20  # every one of B's entries answered from the cache
    assert cache.weight_of("team-a") == cache.share("team-a") == 50  # two tenants: half each
    assert [cache.get("team-a", f"a{i}") for i in range(950, 1000)] == list(range(950, 1000))
    assert cache.get("team-a", "a949") is None  # A's own oldest went first


def test_a_tenant_over_its_share_keeps_its_most_recently_used_entries() -> None:
    cache: TenantLRU[str, str] = TenantLRU(total=8, floor=2)
    cache.put("b", "x", "x")  # two tenants: 4 each
    for key in "abcd":
        cache.put("a", key, key)
    assert cache.get("a", "a") == "a"  # now the most recently used of A's
    cache.put("a", "e", "e")
    assert cache.get("a", "b") is None and cache.get("a", "a") == "a"
    assert cache.get("b", "x") == "x" and len(cache) == 5


def test_many_tenants_share_the_total_and_the_floor_holds() -> None:
    cache: TenantLRU[int, int] = TenantLRU(total=100, floor=5)
    for tenant in range(50):
        for i in range(10):
            cache.put(f"ns-{tenant}", i, i)
            assert cache.weight <= 100
    # 50 active tenants: total // 50 = 2 < floor 5, so shares overlap and the heaviest pay
    assert cache.weight == 100 and cache.tenants() <= 100
    assert all(cache.weight_of(f"ns-{t}") <= 5 for t in range(50))
    assert cache.share("ns-0") == 5


def test_a_light_tenant_is_never_the_one_that_pays_for_the_total() -> None:
    cache: TenantLRU[int, int] = TenantLRU(total=10, floor=8)
    cache.put("light", 0, 0)
    for i in range(100):
        cache.put("heavy", i, i)
    assert cache.get("light", 0) == 0 and cache.weight <= 10
    assert cache.weight_of("heavy") == 8  # its floor, under the total


def test_the_tenants_tracked_never_outnumber_the_entries() -> None:
    cache: TenantLRU[int, int] = TenantLRU(total=16, floor=1)
    for tenant in range(1000):
        cache.put(f"ns-{tenant}", 0, 0)
    assert cache.tenants() == len(cache) == 16 == cache.weight


def test_weights_bound_the_shares_and_an_entry_heavier_than_its_share_is_not_kept() -> None:
    cache: TenantLRU[str, bytes] = TenantLRU(total=100, floor=20, weigh=len)
    assert cache.put("b", "small", b"x" * 10)
    assert not cache.put("a", "huge", b"x" * 60)  # share: max(100 // 2, 20) = 50
    assert cache.get("a", "huge") is None
    assert cache.put("a", "half", b"x" * 50)
    assert cache.put("a", "more", b"x" * 30)  # over the share: "half" goes
    assert cache.get("a", "half") is None and cache.weight_of("a") == 30
    assert cache.get("b", "small") == b"x" * 10


def test_putting_a_key_again_replaces_its_value_and_weight() -> None:
    cache: TenantLRU[str, bytes] = TenantLRU(total=100, floor=10, weigh=len)
    cache.put("a", "k", b"12345")
    cache.put("a", "k", b"12")
    assert cache.get("a", "k") == b"12" and cache.weight == 2 and len(cache) == 1


def test_a_kept_value_is_told_apart_from_a_miss_by_the_default() -> None:
    cache: TenantLRU[str, int | None] = TenantLRU(total=4, floor=1)
    missing = object()
    cache.put("a", "none", None)
    assert cache.get("a", "none", missing) is None
    assert cache.get("a", "other", missing) is missing
    assert cache.get("b", "none", missing) is missing  # another tenant's key is another entry


@pytest.mark.parametrize(("total", "floor", "field"), [(0, 1, "total"), (10, 0, "floor"), (10, 11, "floor")])
def test_bad_bounds_are_refused_naming_them(total: int, floor: int, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TenantLRU(total=total, floor=floor)


def test_a_weight_below_one_is_refused() -> None:
    cache: TenantLRU[str, bytes] = TenantLRU(total=4, floor=1, weigh=len)
    with pytest.raises(ValueError, match="at least 1"):
        cache.put("a", "empty", b"")


def test_concurrent_tenants_keep_the_bounds() -> None:
    cache: TenantLRU[int, int] = TenantLRU(total=64, floor=4, weigh=lambda v: 1 + v % 3)
    start = threading.Barrier(4)

    def tenant(name: str) -> None:
        start.wait()
        for i in range(2000):
            cache.put(name, i % 97, i)
            cache.get(name, (i * 7) % 97)

    threads = [threading.Thread(target=tenant, args=(f"ns-{t}",)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.weight <= 64
    assert cache.weight == sum(cache.weight_of(f"ns-{t}") for t in range(4))
    assert cache.tenants() == 4  # the heaviest pays one entry at a time: no tenant is emptied


def test_clear_forgets_every_tenant() -> None:
    cache: TenantLRU[str, int] = TenantLRU(total=4, floor=1)
    cache.put("a", "k", 1)
    cache.clear()
    assert cache.get("a", "k") is None and cache.weight == 0 and cache.tenants() == 0


class _Reference:
    """The policy written plainly (a scan for the heaviest; ties to the first name), to check the
    cache's heap against."""

    def __init__(self, total: int, floor: int) -> None:
        self.total, self.floor = total, floor
        self.shelves: dict[str, dict[int, int]] = {}  # tenant → key → weight, oldest first

    def put(self, tenant: str, key: int, weight: int) -> None:
        shelf = self.shelves.setdefault(tenant, {})
        shelf.pop(key, None)
        active = len([t for t, s in self.shelves.items() if s or t == tenant])
        share = max(self.total // active, self.floor)
        if weight <= share:
            shelf[key] = weight
        while sum(shelf.values()) > share:
            del shelf[next(iter(shelf))]
        while sum(sum(s.values()) for s in self.shelves.values()) > self.total:
            heaviest = min(self.shelves, key=lambda t: (-sum(self.shelves[t].values()), t))
            del self.shelves[heaviest][next(iter(self.shelves[heaviest]))]
        self.shelves = {t: s for t, s in self.shelves.items() if s}

    def get(self, tenant: str, key: int) -> None:
        shelf = self.shelves.get(tenant, {})
        if key in shelf:
            shelf[key] = shelf.pop(key)


def test_the_evictions_match_the_policy_written_plainly() -> None:
    rng = random.Random(27)
    cache: TenantLRU[int, int] = TenantLRU(total=60, floor=7, weigh=lambda v: v)
    ref = _Reference(60, 7)
    for step in range(20_000):
        tenant, key = f"ns-{rng.randrange(12)}", rng.randrange(30)
        if rng.random() < 0.3:
            cache.get(tenant, key)
            ref.get(tenant, key)
        else:
            weight = rng.randint(1, 9)
            cache.put(tenant, key, weight)
            ref.put(tenant, key, weight)
        if step % 97 == 0:
            for t, shelf in ref.shelves.items():
                assert [cache.get(t, k) for k in shelf] == list(shelf.values()), (step, t)
                for k in list(shelf):  # the gets above made them most recent, in this order
                    ref.get(t, k)
            assert cache.weight == sum(sum(s.values()) for s in ref.shelves.values()), step
            assert cache.tenants() == len(ref.shelves), step
