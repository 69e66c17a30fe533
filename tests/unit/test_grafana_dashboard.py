"""``manifests/grafana/escaler-dashboard.json``: valid JSON, a Grafana dashboard of schemaVersion
~39 whose datasource is the ``${datasource}`` variable, with ``namespace``/``scaler`` templating,
unique panel ids, a gridPos on every panel, and PromQL that names only the families the manager
exports (``escaler.cli.metricsdoc``, histogram and counter suffixes accounted for)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from escaler.cli import metricsdoc

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "manifests" / "grafana" / "escaler-dashboard.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# the panels issue 14 asks for: (a word of the title, a family its queries must use)
REQUIRED = [
    ("reconcile rate", "controller_runtime_reconcile_total"),
    ("reconcile latency", "controller_runtime_reconcile_time_seconds"),
    ("workqueue depth", "workqueue_depth"),
    ("desired vs current", "escaler_desired_replicas"),
    ("desired vs current", "escaler_current_replicas"),
    ("metric errors", "escaler_metric_errors_total"),
    ("decision latency", "escaler_decision_latency_seconds"),
    ("leader", "leader_election_master_status"),
]
_LABEL_VALUES = re.compile(r"^label_values\((?:([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s*,\s*)?(\w+)\)$")


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


@pytest.fixture(scope="module")
def families() -> list[metricsdoc.Family]:
    return metricsdoc.metric_families(metricsdoc.manager_registry())


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in panels:
        yield p
        yield from all_panels(p.get("panels", []))


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    for p in all_panels(dashboard["panels"]):
        for t in p.get("targets", []):
            yield p, t["expr"]


def test_dashboard_shape(dashboard: dict[str, Any]) -> None:
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["uid"] and dashboard["title"]
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert {"datasource", "namespace", "scaler"} <= set(names)
    ds = next(v for v in dashboard["templating"]["list"] if v["name"] == "datasource")
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"


def test_panel_ids_are_unique_and_every_panel_has_a_grid_position(dashboard: dict[str, Any]) -> None:
    panels = list(all_panels(dashboard["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    for p in panels:
        pos = p["gridPos"]
        assert {"h", "w", "x", "y"} <= pos.keys(), p["title"]
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] + pos["w"] <= 24, p["title"]


def test_panels_do_not_overlap(dashboard: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in all_panels(dashboard["panels"]):
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


def test_every_query_panel_uses_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    query_panels = [p for p in all_panels(dashboard["panels"]) if p["type"] != "row"]
    assert len(query_panels) >= 8
    for p in query_panels:
        assert p["datasource"] == DATASOURCE, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE and t["expr"].strip(), p["title"]
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            assert v["datasource"] == DATASOURCE, v["name"]


def test_every_expr_names_only_exported_families(dashboard: dict[str, Any],
                                                 families: list[metricsdoc.Family]) -> None:
    seen = 0
    for panel, expr in queries(dashboard):
        series = metricsdoc.promql_metric_names(expr)
        assert series, f"{panel['title']}: no metric in {expr}"
        unknown = {s for s in series if metricsdoc.family_of(s, families) is None}
        assert not unknown, f"{panel['title']}: {sorted(unknown)} not exported (docs/metrics.md)"
        seen += 1
    assert seen >= 10


def test_template_queries_name_exported_families(dashboard: dict[str, Any],
                                                 families: list[metricsdoc.Family]) -> None:
    by_name = {f.name: f for f in families}
    for v in dashboard["templating"]["list"]:
        if v["type"] != "query":
            continue
        m = _LABEL_VALUES.match(v["query"]["query"])
        assert m is not None and m.group(1), v["name"]
        metric, label = m.group(1), m.group(2)
        assert metric in by_name and label in by_name[metric].labels, v["name"]


def test_the_panels_the_issue_asks_for(dashboard: dict[str, Any],
                                       families: list[metricsdoc.Family]) -> None:
    for word, family in REQUIRED:
        used = {metricsdoc.family_of(s, families) for p, expr in queries(dashboard)
                if word in p["title"].lower() for s in metricsdoc.promql_metric_names(expr)}
        assert family in {f.name for f in used if f is not None}, f"no {word!r} panel on {family}"


def test_per_scaler_panels_filter_by_namespace_and_scaler(dashboard: dict[str, Any]) -> None:
    for p, expr in queries(dashboard):
        if "escaler_desired_replicas" in expr or "escaler_metric_errors_total" in expr:
            assert 'namespace=~"$namespace"' in expr and 'name=~"$scaler"' in expr, p["title"]


def test_latency_panel_has_p50_and_p99_by_controller(dashboard: dict[str, Any]) -> None:
    exprs = [e for p, e in queries(dashboard) if "controller_runtime_reconcile_time_seconds_bucket" in e]
    assert any(e.startswith("histogram_quantile(0.5,") for e in exprs)
    assert any(e.startswith("histogram_quantile(0.99,") for e in exprs)
    assert all("by (controller, le)" in e for e in exprs)
