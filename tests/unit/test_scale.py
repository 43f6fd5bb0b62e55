"""The scale harness of ``benchmarks/bench_scale.py`` on 16 synthetic nodes, as a correctness
test (times are the benchmark's business, DESIGN §5); and what made status and the
repartitioner quadratic in nodes, held by counting reads, not by a clock."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_scale as bs
from slurm_gpupool.core.gres.hostlist import slurm_hostlist
from slurm_gpupool.observe.status import pool_status
from slurm_gpupool.repartition.executor import Repartitioner
from slurm_gpupool.repartition.journal import Journal
from slurm_gpupool.repartition.next_action import Policy, journal_state, next_action


class CountedList(list):
    """A list that counts the elements read through it (``in`` reads them all, at worst)."""

    def __init__(self, items: Any) -> None:
        super().__init__(items)
        self.reads = 0

    def __contains__(self, x: object) -> bool:
        self.reads += len(self)
        return super().__contains__(x)

    def __iter__(self) -> Any:
        self.reads += len(self)
        return super().__iter__()


class CountedTuple(tuple):
    """A tuple that counts how often it is walked."""

    walks = 0

    def __iter__(self) -> Any:
        type(self).walks += 1
        return super().__iter__()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> bs.Site:
    return bs.build_site(16, tmp_path_factory.mktemp("scale"))


def test_the_synthetic_cluster_is_what_the_benchmark_says(site: bs.Site) -> None:
    assert len(site.nodes) == 16 and len(set(site.nodes)) == 16
    assert set(site.layouts.values()) == {"day", "night"}
    assert site.drained and site.busy and site.run_nodes
    assert not set(site.run_nodes) & site.drained


def test_status_shows_every_node_with_its_layout_drain_and_run_state(site: bs.Site) -> None:
    st = bs.status_pure(site)()
    bs.check_status(site, st)  # raises BenchError on any difference
    rows = {n["node"]: n for n in st["nodes"]}
    assert sorted(rows) == site.nodes
    assert {n for n, r in rows.items() if r["state"] == "draining"} == set(site.run_nodes)


def test_one_scrape_parses_and_has_every_node(site: bs.Site) -> None:
    text = bs.metrics_scrape(site)()
    bs.check_metrics(site, text)
    fams = bs.parse_metrics(text)
    shown = {ln.split('node="', 1)[1].split('"', 1)[0] for ln in fams["gpupool_node_layout_info"]}
    assert shown == set(site.nodes)
    with pytest.raises(bs.BenchError):
        bs.parse_metrics(text + "not a sample line\n")


def test_the_plan_and_the_next_step_switch_the_nodes_they_must(site: bs.Site) -> None:
    bs.check_render(site, bs.gres_render(site)())
    described = bs.plan(site)()
    bs.check_plan(site, described)
    step = bs.next_step(site)()
    applies = {a.node for a in step if type(a).__name__ == "Apply"}
    assert applies == bs.expected_changing(site) - site.busy
    assert applies and not applies & site.drained


def test_status_reads_the_runs_nodes_once_not_once_per_node(site: bs.Site) -> None:
    """Each node looked itself up in the run's node list: N x N reads (10,000 nodes, a quarter
    in a run: 25 million, a third of a second)."""
    data = Journal(Path(site.cfg.paths.controller_dir)).load().data
    counted = CountedList(data["run"]["nodes"])
    journal = {**data, "run": {**data["run"], "nodes": counted}}
    st = pool_status(site.cfg, site.slurm.nodes(), journal, site.slurm.reservations(), bs.NOW)
    assert sum(n["state"] == "draining" for n in st["nodes"]) == len(site.run_nodes)
    assert counted.reads <= len(counted)


def test_a_step_of_the_run_walks_the_jobs_once_not_once_per_node(site: bs.Site) -> None:
    """Each waiting node walked every job to find its own: N x J per step (10,000 nodes and
    2,000 jobs: 1.3 s per step of the executor's loop)."""
    data, view = bs.run_under_way(site)
    CountedTuple.walks = 0
    step = next_action(
        journal_state(data), dataclasses.replace(view, jobs=CountedTuple(view.jobs)), bs.NOW.timestamp(), Policy()
    )
    waiting = len(bs.expected_changing(site))
    assert waiting > 2 and len(step) == waiting  # every node decided: applies and notes of its jobs
    assert CountedTuple.walks == 1


def test_the_dry_run_walks_the_jobs_once_not_once_per_node(site: bs.Site, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = CountedList(site.slurm.jobs())
    monkeypatch.setattr(site.slurm, "jobs", lambda: jobs)
    rp = Repartitioner(site.cfg, site.slurm, clock=site.slurm.clock)
    described = rp.describe(rp.plan(bs.SWITCH_TO), 1800, False)
    assert {n["node"] for n in described["nodes"] if n["jobs"]} == site.busy
    assert jobs.reads <= 2 * len(jobs)  # once to index them, and what else reads them whole


def test_folding_a_hostlist_parses_no_name_as_a_nodeset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Folding whole names (NodeSet.fromlist) parsed every name again: 0.1 ms a name, seconds
    for the restart batches of 10,000 nodes; only the trailing numbers are folded now."""
    from ClusterShell.NodeSet import NodeSet

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("a name parsed as a NodeSet")

    monkeypatch.setattr(NodeSet, "fromlist", refuse)
    monkeypatch.setattr(NodeSet, "update", refuse)
    names = [f"dgx{i:04d}" for i in range(1, 1001) if i % 9] + ["login"]
    text = slurm_hostlist(names)
    monkeypatch.undo()
    assert text.startswith("dgx[0001-0008,0010-0017,") and text.endswith(",0991-0998,1000],login")
    assert set(NodeSet(text)) == set(names)


def test_the_dry_run_shows_each_wave_with_its_own_restarts(site: bs.Site) -> None:
    """``repartition.wave_size``: the plan installs, restarts and verifies wave by wave."""
    cfg = dataclasses.replace(site.cfg, repartition=dataclasses.replace(site.cfg.repartition, wave_size=4))
    rp = Repartitioner(cfg, site.slurm, clock=site.slurm.clock)
    plan = rp.plan(bs.SWITCH_TO)
    steps = rp.describe(plan, 1800, False)["steps"]
    waves = -(-len(plan.changing) // 4)
    assert waves >= 2
    ctld = " ".join(cfg.repartition.restart_slurmctld)
    restarts = [s.split(": ", 1) for s in steps if s.endswith(ctld)]
    assert [w for w, _ in restarts] == [w for w, _ in (s.split(": ", 1) for s in steps if "gres install" in s)]
    assert len(restarts) == waves, steps  # one slurmctld restart a wave
    assert [s.split(":")[0].split(" (")[0] for s in steps if "gres install" in s] == [
        f"wave {k}/{waves}" for k in range(1, waves + 1)
    ]
    one = Repartitioner(site.cfg, site.slurm, clock=site.slurm.clock).describe(plan, 1800, False)["steps"]
    assert not [s for s in one if s.startswith("wave ")] and sum("gres install" in s for s in one) == 1
