"""The Grafana dashboard shipped in the package: every query names only metrics `gpupool metrics`
exports (the integration test also runs each one against a real Prometheus)."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

from slurm_gpupool.observe.metrics import collect
from slurm_gpupool.repartition import journal as jr

from .test_metrics import FakeCluster, cfg, pending  # noqa: F401  (cfg: the fixture)

# PromQL's functions, aggregations and keywords: what may stand in a query beside metric names
PROMQL_WORDS = {
    *("sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values", "group"),
    *("by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"),
    *("rate", "irate", "increase", "delta", "idelta", "deriv", "resets", "changes", "histogram_quantile"),
    *("abs", "ceil", "floor", "round", "clamp_min", "clamp_max", "vector", "scalar", "time", "timestamp", "sort"),
    *("avg_over_time", "max_over_time", "min_over_time", "sum_over_time", "last_over_time", "label_values", "absent"),
}
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def dashboard() -> dict:
    return json.loads((resources.files("slurm_gpupool.data") / "grafana" / "gpupool.json").read_text())


def queries(dash: dict) -> list[str]:
    out = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        out.append(q["query"] if isinstance(q, dict) else q)
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers left once strings, label
    matchers, grouping clauses, ranges and PromQL's own words are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"label_values\(([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*[A-Za-z_]+\)", r"\1", text)
    return {w for w in _IDENT.findall(text) if w not in PROMQL_WORDS and not re.fullmatch(r"[0-9.e]+", w)}


def exported(cfg, tmp: Path) -> set[str]:  # noqa: F811
    """Every series name one full scrape gives (histograms with their suffixes)."""
    j = jr.Journal(Path(cfg.paths.controller_dir))
    j.start("day", ["a100n1"], "gpupool_day", 0, {"a100n1": "night"})
    j.step("a100n1", jr.APPLYING, applying_at=1.0)
    j.step("a100n1", jr.DONE, released_at=2.0)
    j.cluster_step(jr.FINISHED)
    state = Path(cfg.paths.for_node("state_dir", "a100n1"))
    state.mkdir(parents=True)
    (state / "health.json").write_text(json.dumps({"status": "ok"}))
    run = Path(cfg.paths.for_node("run_dir", "a100n1"))  # a MIG job and a shard job the sampler measured
    run.mkdir(parents=True)
    mig = {"index": 0, "gpu": 0, "gi": 7, "kind": "mig", "type": "1g.5gb", "profile": "1g.5gb"}
    shared = {"index": 1, "gpu": 6, "kind": "shared", "type": "a100_shared"}
    (run / "7.devices").write_text(json.dumps([mig, shared]))
    last = {f"{k}_last": 10 for k in ("sm_activity", "tensor_activity", "dram_bw", "util")}
    measured = {"memory_mib": 1, "peak_memory_mib": 2, "memory_total_mib": 4864, **last}
    (run / "7.usage.json").write_text(json.dumps({"devices": {"0": measured, "1": measured}}))
    text = collect(cfg, FakeCluster("24.11", pending), scope="all").text()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def test_every_dashboard_query_names_only_metrics_we_export(cfg, tmp_path: Path):  # noqa: F811
    names = exported(cfg, tmp_path)
    dash = dashboard()
    qs = queries(dash)
    assert len(qs) >= 20
    used: set[str] = set()
    for q in qs:
        found = metric_names(q)
        assert found, f"query names no metric: {q}"
        assert found <= names, f"{q}: not exported: {sorted(found - names)}"
        used |= found
    # the panels: utilisation by type and layout, pending demand, switches
    for needed in (
        "gpupool_allocated_gpu_equivalents",
        "gpupool_capacity_gpu_equivalents",
        "gpupool_pending_devices",
        "gpupool_node_switch_state",
        "gpupool_node_switches_total",
        "gpupool_repartition_runs_total",
        "gpupool_slice_sm_active_ratio",  # right-sizing (#30): activity and peak memory per slice
        "gpupool_slice_memory_peak_bytes",
    ):
        assert needed in used, needed


def test_the_checker_catches_a_metric_we_do_not_export():
    assert metric_names('sum by (type) (rate(slurm_gpus_alloc{x="gpupool_y"}[5m])) / 2') == {"slurm_gpus_alloc"}
    assert metric_names("label_values(gpupool_capacity_gpu_equivalents, layout)") == {
        "gpupool_capacity_gpu_equivalents"
    }


def test_the_dashboard_asks_for_its_data_source_and_has_unique_panel_ids():
    dash = dashboard()
    assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    assert all(t["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in dash["panels"] for t in p.get("targets", []))
