"""The Grafana dashboard (packaging/grafana/otcp.json) queries only metrics
the services really export: the names come from the controller's collector
(`otcp.service.metrics`) and the agent's registry (`otcp.agent.metrics`), not from
a list kept by hand."""

import json
import pathlib
import re

from otcp.agent.metrics import AgentMetrics
from otcp.service.live import LiveView
from otcp.service.metrics import registry_for
from support.controller_fakes import new_core

DASHBOARD = pathlib.Path(__file__).resolve().parents[1] / "packaging" / "grafana" / "otcp.json"
# What PromQL lets stand bare in the dashboard's queries besides metric names.
PROMQL_WORDS = {"rate", "increase", "sum", "histogram_quantile", "time", "by"}
SAMPLE_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
}


def exported_names(tmp_path):
    """Every sample name the controller and the agent expose."""
    registries = [registry_for(LiveView(new_core()), str(tmp_path / "controller.db")), AgentMetrics().registry]
    return {family.name + suffix for registry in registries for family in registry.collect()
            for suffix in SAMPLE_SUFFIXES[family.type]}


def expressions(panels):
    for panel in panels:
        yield from expressions(panel.get("panels", []))
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def metric_names(expr):
    """The metric names a PromQL expression reads, and any other bare word it holds."""
    bare = re.sub(r'"[^"]*"', "", expr)  # label values
    bare = re.sub(r"\{[^}]*\}", "", bare)  # label matchers
    bare = re.sub(r"\[[^]]*\]", "", bare)  # range durations
    bare = re.sub(r"\b(by|without)\s*\([^)]*\)", r"\1", bare)  # grouping labels
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare))
    return {w for w in words if w.startswith("otcp_")}, words - PROMQL_WORDS - {w for w in words if w.startswith("otcp_")}


def test_every_dashboard_query_names_only_exported_metrics(tmp_path):
    exported = exported_names(tmp_path)
    assert "otcp_controller_link_delay_seconds" in exported and "otcp_agent_rejects_total" in exported
    queries = list(expressions(json.loads(DASHBOARD.read_text())["panels"]))
    assert len(queries) > 20
    used = set()
    for title, expr in queries:
        names, others = metric_names(expr)
        assert names, f"panel {title!r}: {expr!r} reads no OTCP metric"
        assert names <= exported, f"panel {title!r}: {sorted(names - exported)} not exported"
        assert not others, f"panel {title!r}: {sorted(others)} is neither an OTCP metric nor a known PromQL word"
        used |= names
    # Both services are on the dashboard.
    assert any(n.startswith("otcp_agent_") for n in used) and any(n.startswith("otcp_controller_") for n in used)


def test_the_check_catches_a_metric_nobody_exports(tmp_path):
    names, others = metric_names('sum by (le) (rate(otcp_controller_plan_seconds_bucket{job="x"}[5m])) + node_load1')
    assert names == {"otcp_controller_plan_seconds_bucket"} and others == {"node_load1"}
    assert not names <= exported_names(tmp_path)
