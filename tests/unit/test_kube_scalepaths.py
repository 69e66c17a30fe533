"""``escaler.kube.scalepaths``: a CRD's scale paths stand in for ``GET .../scale`` (issue 10).
Fails on fec3229 (no such module: every reconcile of a ``/scale``-only target GETs ``/scale``)."""

from __future__ import annotations

from typing import Any

import pytest

from escaler.clock import FakeClock
from escaler.errors import StatusError
from escaler.kube.discovery import ResourceMapping
from escaler.kube.scalepaths import CrdScalePaths, ScalePaths, parse_scale_paths

SCALABLES = ResourceMapping("example.com", "v1", "scalables", "Scalable", True, frozenset({"scale"}))


def crd(scale: dict[str, Any] | None, version: str = "v1") -> dict[str, Any]:
    v: dict[str, Any] = {"name": version, "served": True}
    if scale is not None:
        v["subresources"] = {"scale": scale}
    return {"spec": {"versions": [v]}}


PATHS = {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size",
         "labelSelectorPath": ".status.selector"}


@pytest.mark.parametrize(("scale", "want"), [
    (PATHS, ScalePaths(("spec", "size"), ("status", "size"), ("status", "selector"))),
    ({**PATHS, "labelSelectorPath": ""}, ScalePaths(("spec", "size"), ("status", "size"), None)),
    ({**PATHS, "specReplicasPath": ".spec.sizes[0]"}, None),
    ({**PATHS, "statusReplicasPath": "status.size"}, None),
    (None, None),
], ids=["all-paths", "no-selector", "array-path", "not-a-json-path", "no-scale"])
def test_parse_scale_paths(scale: dict[str, Any] | None, want: ScalePaths | None) -> None:
    assert parse_scale_paths(crd(scale), "v1") == want


def test_parse_scale_paths_reads_the_version_asked_for() -> None:
    assert parse_scale_paths(crd(PATHS, version="v2"), "v1") is None


@pytest.mark.parametrize(("obj", "want"), [
    ({"metadata": {"resourceVersion": "7"}, "spec": {"size": 3}, "status": {"size": 2, "selector": "a=b"}},
     (3, 2, "a=b", "7")),
    ({"metadata": {}, "spec": {}, "status": {}}, (0, 0, "", "")),
], ids=["present", "absent-reads-as-zero"])
def test_scale_of_is_what_the_api_server_answers(obj: dict[str, Any], want: tuple[Any, ...]) -> None:
    s = ScalePaths(("spec", "size"), ("status", "size"), ("status", "selector")).scale_of(obj)
    assert (s.spec_replicas, s.status_replicas, s.selector, s.resource_version) == want


@pytest.mark.parametrize("obj", [{"spec": {"size": "3"}}, {"spec": {"size": True}},
                                 {"status": {"selector": {"app": "x"}}}],
                         ids=["string", "bool", "map-selector"])
def test_scale_of_refuses_malformed_fields(obj: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"\.(spec\.size|status\.selector) is not"):
        ScalePaths(("spec", "size"), ("status", "size"), ("status", "selector")).scale_of(obj)


class Crds:
    def __init__(self, obj: dict[str, Any] | None) -> None:
        self.obj = obj
        self.gets: list[str] = []

    def get(self, m: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        self.gets.append(name)
        if self.obj is None:
            raise StatusError(403, "Forbidden", "cannot get customresourcedefinitions")
        return self.obj


def test_paths_are_read_once_per_ttl() -> None:
    clock, crds = FakeClock(), Crds(crd(PATHS))
    paths = CrdScalePaths(crds, clock=clock, ttl=300, miss_ttl=60)
    for _ in range(10):
        assert paths.paths_for(SCALABLES) is not None
    assert crds.gets == ["scalables.example.com"]
    clock.step(301)
    paths.paths_for(SCALABLES)
    assert len(crds.gets) == 2


def test_an_unreadable_crd_means_get_scale_and_is_retried_after_miss_ttl() -> None:
    clock, crds = FakeClock(), Crds(None)
    paths = CrdScalePaths(crds, clock=clock, ttl=300, miss_ttl=60)
    assert paths.paths_for(SCALABLES) is None
    assert paths.paths_for(SCALABLES) is None
    assert len(crds.gets) == 1
    crds.obj = crd(PATHS)
    clock.step(61)
    assert paths.paths_for(SCALABLES) is not None


def test_built_in_kinds_have_no_crd() -> None:
    crds = Crds(crd(PATHS))
    rs = ResourceMapping("apps", "v1", "replicasets", "ReplicaSet", True, frozenset({"scale"}))
    assert CrdScalePaths(crds).paths_for(rs) is None
    assert crds.gets == []
