"""Per-slice activity series of `gpupool metrics` (issue #30 item 4): the usage sampler's latest
GPM and memory measures on simulated GPUs with injected load, one series per slice in use
whatever the job count (per job only with ``per_job``), and Prometheus' lint."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from slurm_gpupool.config.machines import find_machine
from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.hooks import sampler
from slurm_gpupool.hooks.runtime import open_dir
from slurm_gpupool.hw import open_backend
from slurm_gpupool.hw.sim import inject
from slurm_gpupool.hw.sim.state import SimStore, create_node_state
from slurm_gpupool.node.apply import apply_node
from slurm_gpupool.node.state import read_node_state
from slurm_gpupool.observe.metrics import collect

from .test_metrics import cfg, parse, promtool_ok, value  # noqa: F401  (cfg: the fixture)

NODE = "h100n1"  # the shipped config's day layout: GPUs 0-3 1g.10gb × 7, 4-5 3g.40gb × 2, 6-7 shared 4
ACTIVITY = ("gpupool_slice_sm_active_ratio", "gpupool_slice_tensor_active_ratio", "gpupool_slice_dram_active_ratio")


def _h100(cfg: PoolConfig, tmp_path: Path, layout: str = "day") -> tuple[Path, list[dict[str, Any]]]:  # noqa: F811
    """A simulated HGX H100 node in ``layout``; its sim dir and slurmd's device table."""
    sim = tmp_path / "sim"
    sim.mkdir()
    create_node_state(sim / f"{NODE}.json", NODE, find_machine("hgx-h100"))
    state_dir = cfg.paths.for_node("state_dir", NODE)
    with open_backend(NODE, sim) as b:
        apply_node(b, cfg, layout, state_dir)
    state = read_node_state(state_dir)
    assert state is not None
    cfg.paths.for_node("run_dir", NODE).mkdir(parents=True)
    return sim, state["slurm_devices"]


def _start(cfg: PoolConfig, job: str, *devices: dict[str, Any]) -> None:  # noqa: F811
    """What the Prolog leaves the sampler: ``<run_dir>/<job>.devices``."""
    (cfg.paths.for_node("run_dir", NODE) / f"{job}.devices").write_text(json.dumps(list(devices)))


def _sample(cfg: PoolConfig, sim: Path, rounds: int = 2) -> None:  # noqa: F811
    fd = open_dir(str(cfg.paths.for_node("run_dir", NODE)))
    try:
        with open_backend(NODE, sim) as backend:  # one backend: GPM measures between its samples
            for _ in range(rounds):
                sampler.sample_round(fd, backend)
    finally:
        os.close(fd)


def _series(m: dict, name: str) -> list[dict[str, str]]:
    return [dict(ls) for n, ls in m if n == name]


def test_injected_gpm_load_is_exported_per_mig_slice_with_its_labels(cfg, tmp_path: Path):  # noqa: F811
    sim, table = _h100(cfg, tmp_path)
    small = next(d for d in table if d.get("profile") == "1g.10gb" and d["gpu"] == 0)
    big = next(d for d in table if d.get("profile") == "3g.40gb" and d["gpu"] == 4)
    store = SimStore(sim / f"{NODE}.json")
    inject.set_activity(store, 0, 35, tensor_pct=20, dram_pct=15, mig_uuid=small["mig_uuid"])
    inject.set_activity(store, 4, 90, tensor_pct=70, dram_pct=50, mig_uuid=big["mig_uuid"])
    _start(cfg, "101", small)
    _start(cfg, "102", big)
    _sample(cfg, sim)
    text = collect(cfg, scope="node").text()
    m = parse(text)
    one = {"node": NODE, "gpu": "0", "gi": str(small["gi"]), "kind": "mig", "profile": "1g.10gb"}
    assert value(m, "gpupool_slice_sm_active_ratio", **one) == pytest.approx(0.35, abs=0.002)
    assert value(m, "gpupool_slice_tensor_active_ratio", **one) == pytest.approx(0.20, abs=0.002)
    assert value(m, "gpupool_slice_dram_active_ratio", **one) == pytest.approx(0.15, abs=0.002)
    three = {"node": NODE, "gpu": "4", "profile": "3g.40gb", "type": big["type"]}
    assert value(m, "gpupool_slice_sm_active_ratio", **three) == pytest.approx(0.90, abs=0.002)
    assert value(m, "gpupool_slice_jobs", **three) == 1
    # what the slice offers: a 1g.10gb's memory, as NVML reports it for the MIG device
    assert 9 << 30 < value(m, "gpupool_slice_memory_total_bytes", **one) <= 10 << 30
    assert value(m, "gpupool_slice_memory_used_bytes", **one) == 0
    for name in ACTIVITY:
        assert len(_series(m, name)) == 2  # the two slices in use; idle slices are not exported
        assert all(set(s) == {"node", "gpu", "gi", "kind", "type", "profile"} for s in _series(m, name))
    assert "gpupool_slice_utilization_ratio" not in {n for n, _ in m}  # NVML has none for MIG
    promtool_ok(text)


def _shared_usage(cfg: PoolConfig, job: str, device: dict[str, Any], mib: int, peak: int, share: float) -> None:  # noqa: F811
    """A shard job's record as the sampler keeps it (its own processes' memory and share)."""
    _start(cfg, job, device)
    entry = {"memory_mib": mib, "peak_memory_mib": peak, "memory_total_mib": 81559, "util_last": share}
    usage = {"samples": 3, "devices": {str(device["index"]): {**entry, "own_processes": True}}}
    (cfg.paths.for_node("run_dir", NODE) / f"{job}.usage.json").write_text(json.dumps(usage))


def test_shares_of_a_gpu_are_one_series_whatever_the_job_count(cfg, tmp_path: Path):  # noqa: F811
    _sim, table = _h100(cfg, tmp_path)
    shared = next(d for d in table if d["kind"] == "shared" and d["gpu"] == 6)
    for j in range(10):
        _shared_usage(cfg, str(200 + j), shared, mib=1000, peak=1500, share=4.0)
    m = parse(collect(cfg, scope="node").text())
    gpu6 = {"node": NODE, "gpu": "6", "kind": "shared", "gi": "", "profile": ""}
    assert value(m, "gpupool_slice_jobs", **gpu6) == 10
    assert value(m, "gpupool_slice_memory_used_bytes", **gpu6) == 10 * 1000 << 20
    assert value(m, "gpupool_slice_memory_peak_bytes", **gpu6) == 10 * 1500 << 20
    assert value(m, "gpupool_slice_utilization_ratio", **gpu6) == pytest.approx(0.40)
    assert value(m, "gpupool_slice_memory_total_bytes", **gpu6) == 81559 << 20
    for name in ("gpupool_slice_jobs", "gpupool_slice_memory_used_bytes", "gpupool_slice_utilization_ratio"):
        assert len(_series(m, name)) == 1, name  # 10 jobs, one slice: one series
    assert not [s for n, _ in m for s in _series(m, n) if "job" in s]


def test_series_count_follows_slices_not_jobs_unless_per_job_is_asked(cfg, tmp_path: Path):  # noqa: F811
    sim, table = _h100(cfg, tmp_path)
    slices = [d for d in table if d.get("profile") == "1g.10gb"][:5]
    store = SimStore(sim / f"{NODE}.json")
    for k, d in enumerate(slices):
        inject.set_activity(store, d["gpu"], 10 * (k + 1), mig_uuid=d["mig_uuid"])
        _start(cfg, str(300 + k), d)
    shared = next(d for d in table if d["kind"] == "shared" and d["gpu"] == 7)
    _sample(cfg, sim)
    for j in range(6):
        _shared_usage(cfg, str(400 + j), shared, mib=100, peak=100, share=1.0)
    text = collect(cfg, scope="node").text()
    m = parse(text)
    assert len(_series(m, "gpupool_slice_sm_active_ratio")) == 5  # N slices → N series
    assert len(_series(m, "gpupool_slice_jobs")) == 6  # and the shared GPU, once for its 6 jobs
    assert sorted(value(m, "gpupool_slice_sm_active_ratio", gi=str(d["gi"]), gpu=str(d["gpu"])) for d in slices) == (
        pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5], abs=0.002)
    )
    per_job_text = collect(cfg, scope="node", per_job=True).text()
    per_job = parse(per_job_text)
    assert len(_series(per_job, "gpupool_slice_jobs")) == 11  # one per job and slice: the admin's choice
    assert {s["job"] for s in _series(per_job, "gpupool_slice_memory_used_bytes")} >= {str(400 + j) for j in range(6)}
    assert value(per_job, "gpupool_slice_sm_active_ratio", job="302") == pytest.approx(0.3, abs=0.002)
    promtool_ok(text)
    promtool_ok(per_job_text)


def test_a_job_without_a_sample_yet_or_a_bad_file_exports_nothing(cfg, tmp_path: Path):  # noqa: F811
    _sim, table = _h100(cfg, tmp_path)
    run_dir = cfg.paths.for_node("run_dir", NODE)
    _start(cfg, "500", table[0])  # no usage file yet
    (run_dir / "501.devices").write_text("{not json")
    (run_dir / "501.usage.json").write_text("[]")
    (run_dir / "502.usage.json").write_text(json.dumps({"devices": {"0": {"memory_mib": 5}}}))  # job gone
    text = collect(cfg, scope="node").text()
    assert not _series(parse(text), "gpupool_slice_jobs")
    promtool_ok(text)  # families without samples are still valid exposition


def test_a_whole_hopper_gpu_has_gpm_activity_and_utilization(cfg, tmp_path: Path):  # noqa: F811
    sim, table = _h100(cfg, tmp_path, "night")  # every GPU whole
    whole = next(d for d in table if d["gpu"] == 3)
    inject.set_activity(SimStore(sim / f"{NODE}.json"), 3, 60, tensor_pct=30, dram_pct=45)
    _start(cfg, "600", whole)
    _sample(cfg, sim)
    m = parse(collect(cfg, scope="node").text())
    gpu3 = {"node": NODE, "gpu": "3", "gi": "", "kind": "whole", "profile": "", "type": whole["type"]}
    assert value(m, "gpupool_slice_sm_active_ratio", **gpu3) == pytest.approx(0.60, abs=0.002)
    assert value(m, "gpupool_slice_dram_active_ratio", **gpu3) == pytest.approx(0.45, abs=0.002)
    assert value(m, "gpupool_slice_utilization_ratio", **gpu3) == pytest.approx(0.60)
    assert value(m, "gpupool_slice_memory_total_bytes", **gpu3) > 79 << 30  # an H100 80GB
