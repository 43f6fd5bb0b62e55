"""#17: the elastic step's reading of Slurm (repartition/elastic.py) and squeue's submit time."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import pytest

from slurm_gpupool.config.elastic import ElasticSettings
from slurm_gpupool.config.load import load_config
from slurm_gpupool.core.policy.elastic import GPU, SHARD, Bounds, Decision
from slurm_gpupool.repartition.elastic import State, cluster_view, finish_drains, free_records, pending_jobs, record
from slurm_gpupool.slurm.parse import parse_squeue_json
from slurm_gpupool.slurm.types import JobInfo, NodeInfo, Reservation

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm"
ETC = Path(__file__).parent.parent.parent / "etc" / "gpupool.yaml"


def job(i, state="PENDING", gres="", nodes=frozenset(), priority=100, submit=1000, per_job="", count=1, why=""):
    return JobInfo(i, state, nodes, "u", "j", 60, 0, True, "", gres, priority, why, count, per_job, "", submit)


@pytest.mark.parametrize("series", ["22.05", "24.11", "26.05"])
def test_squeue_gives_the_submit_time(series):
    jobs = parse_squeue_json((FIXTURES / series / "squeue.json").read_text())
    assert jobs and all(j.submit_time > 1_700_000_000 for j in jobs)


def test_pending_jobs_read_each_release_s_gres_forms_in_priority_order():
    kinds = {"a100": "whole", "h100": "whole", "1g.5gb": "mig", "a30_shared": "shared"}
    jobs = [
        job(1, gres="gres:gpu:1g.5gb:2", submit=900),  # 22.05
        job(2, gres="gres/shard:3", priority=200),  # 23.11+, untyped: any shared type
        job(3, gres="gres/gpu:2", count=2, submit=800),  # untyped GPUs: any whole type, on 2 nodes
        job(4, per_job="gres/gpu:a100:8", count=2),  # --gpus=8 on 2 nodes: 4 per node
        job(5, state="RUNNING", gres="gres/gpu:a100:1"),
        job(6),  # no GPU
        job(8, gres="gres/gpu:a100:8", why="BeginTime"),  # not demand before its begin time
        job(9, gres="gres/gpu:a100:8", why="Dependency"),
    ]
    out = pending_jobs(jobs, kinds, now=1600)
    assert [j.job_id for j in out] == ["2", "3", "1", "4"]
    by = {j.job_id: j for j in out}
    assert (by["2"].kind, by["2"].types, by["2"].count) == (SHARD, ("a30_shared",), 3)
    assert (by["3"].types, by["3"].count, by["3"].nodes, by["3"].waited_s) == (("a100", "h100"), 2, 2, 800)
    assert (by["1"].kind, by["1"].types, by["1"].count) == (GPU, ("1g.5gb",), 2)
    assert (by["4"].types, by["4"].count, by["4"].nodes) == (("a100",), 4, 2)


def test_free_records_from_sinfo_gres_and_gres_used():
    info = NodeInfo(
        "n", "mixed", frozenset(), "gpu:1g.5gb:28(S:0-1),gpu:a100:2(S:0-1),shard:a100_shared:8", (), "",
        "gpu:1g.5gb:3(IDX:0-2),gpu:a100:0,shard:a100_shared:1(IDX:4)", "cpu=2,gres/shard=3",
    )  # fmt: skip
    assert free_records(info) == {"1g.5gb": 25, "a100": 2, "a100_shared": 5}


def test_cluster_view_and_the_recorded_decision(tmp_path):
    cfg = load_config(ETC)
    settings = ElasticSettings(Bounds(), {"dgx": ("day", "night")})
    infos = {
        n: NodeInfo(n, "idle", frozenset(), "", ("layout_night",), "")
        for n in ("a100n1", "a100n2", "h100n1", "a30n1", "v100n1")
    }
    infos["a30n1"] = NodeInfo("a30n1", "idle", frozenset({"DRAIN"}), "", ("layout_night",), "x")
    jobs = [job(7, "RUNNING", nodes=frozenset({"a100n2"}))]
    journal = {
        "run": {"target": "day", "nodes": ["h100n1"], "steps": ["reserved"]},
        "nodes": {"h100n1": {"step": "waiting"}},
    }
    state = State(switched_at={"a100n1": 500.0})
    nodes, _ = cluster_view(cfg, settings, infos, jobs, {}, journal, state, now=1000)
    by = {n.name: n for n in nodes}
    assert by["a100n1"].allowed == ("day", "night") and by["a100n1"].last_switch_s == 500
    assert by["a100n1"].idle and by["a100n1"].usable and not by["a100n2"].idle
    assert by["h100n1"].target == "day" and not by["h100n1"].usable
    assert not by["a30n1"].usable  # drained by someone: never a candidate
    assert by["v100n1"].last_switch_s == -math.inf
    d = Decision(1000, (), (), (("-", "why"),), ())
    record(tmp_path, state, d, {}, 1000, 1000)
    again = State.load(tmp_path)
    assert again.switched_at == {"a100n1": 500.0} and again.last["held"] == [{"node": "-", "why": "why"}]
    assert '"elastic"' in (tmp_path / "journal.log").read_text()


def test_a_drained_node_is_switching_while_reserved_and_finished_once_its_jobs_end():
    """A drain leaves the node skipped in the run's reservation ``gpupool_<layout>``: later
    steps see it switching to that layout (its capacity is incoming), with when its jobs end,
    and switch it at the first step after they have ended."""
    cfg = load_config(ETC)
    settings = ElasticSettings(Bounds(), {"dgx": ("day", "night")})
    infos = {
        n: NodeInfo(n, "idle", frozenset(), "", ("layout_night",), "")
        for n in ("a100n1", "a100n2", "h100n1", "a30n1", "v100n1")
    }
    t = datetime(2026, 11, 25)
    held = {
        "gpupool_day": Reservation("gpupool_day", frozenset({"a100n1", "a100n2"}), t, t),
        "gpupool_day_ahead": Reservation("gpupool_day_ahead", frozenset({"h100n1"}), t, t),
    }
    running = job(7, "RUNNING", nodes=frozenset({"a100n1"}))  # started at 0 with 60 s: ends at 60
    nodes, _ = cluster_view(cfg, settings, infos, [running], held, {}, State(switched_at={}), now=30)
    by = {n.name: n for n in nodes}
    assert by["a100n1"].target == "day" and not by["a100n1"].usable and by["a100n1"].free_at_s == 60
    assert by["a100n2"].target == "day" and by["a100n2"].free_at_s == 30  # idle: free now
    assert by["h100n1"].target is None  # a reservation ahead of a clock switch: not switching yet
    # a100n2 is idle: switched at this step, in one run with a100n1, which is skipped again
    # (busy) and stays reserved; once its job has ended, both go
    assert finish_drains(cfg, infos, [running], held) == {"day": (["a100n1", "a100n2"], {"a100n1"})}
    assert finish_drains(cfg, infos, [], held) == {"day": (["a100n1", "a100n2"], set())}
    infos["a100n2"] = NodeInfo("a100n2", "idle", frozenset(), "", ("layout_day",), "")
    assert finish_drains(cfg, infos, [], held) == {"day": (["a100n1"], set())}  # a100n2 is there already
    assert finish_drains(cfg, infos, [running], held) == {}  # only a busy one left: nothing to run


class FakeCluster:
    def __init__(self, infos, jobs, reservations):
        self.infos, self.job_list, self.resv = infos, jobs, reservations

    def nodes(self):
        return self.infos

    def jobs(self):
        return self.job_list

    def reservations(self):
        return self.resv


def test_every_run_to_a_layout_takes_the_drains_under_way_to_it(tmp_path, monkeypatch):
    """A run sets its reservation to its own nodes: a drained node left out of a later run
    to the same layout would be released and its switch forgotten.  So the finish run and
    every decision's run to that layout carry all of its reserved nodes, and only their
    skips (busy) are planned."""
    import slurm_gpupool.repartition.elastic as el
    from slurm_gpupool.core.policy.elastic import Action

    cfg = load_config(ETC)
    cfg = type(cfg)(
        **{**cfg.__dict__, "paths": type(cfg.paths)(**{**cfg.paths.__dict__, "controller_dir": str(tmp_path)})}
    )
    infos = {n: NodeInfo(n, "idle", frozenset(), "", ("layout_night",), "") for n in ("a100n1", "a100n2", "h100n1")}
    t = datetime(2026, 11, 25)
    resv = {"gpupool_day": Reservation("gpupool_day", frozenset({"a100n1", "a100n2"}), t, t)}
    busy = job(7, "RUNNING", nodes=frozenset({"a100n1"}))
    runs = []
    cluster = FakeCluster(infos, [busy], resv)

    def run_switch(target, nodes, may_skip):
        """The repartitioner as Slurm would show it after: switched nodes in the layout and
        out of the reservation, which holds exactly the run's skipped nodes."""
        runs.append((target, list(nodes), set(may_skip)))
        out = {n: "skipped" if n in may_skip else "done" for n in nodes}
        for n, o in out.items():
            if o == "done":
                cluster.infos[n] = NodeInfo(n, "idle", frozenset(), "", (f"layout_{target}",), "")
        left = frozenset(n for n, o in out.items() if o == "skipped")
        cluster.resv = {f"gpupool_{target}": Reservation(f"gpupool_{target}", left, t, t)} if left else {}
        return out

    act = Action("h100n1", "night", "day", "demand", 2.0, ("9",), "demand: ...")
    monkeypatch.setattr(el, "decide", lambda *a, **k: Decision(1000, (act,), (), (), ()))
    decision, outcomes = el.step(cfg, cluster, run_switch, now=1000)
    # the finish run (a100n2 idle, a100n1 busy), then the decision's run to day with a100n1 still reserved
    assert runs == [
        ("day", ["a100n1", "a100n2"], {"a100n1"}),
        ("day", ["a100n1", "h100n1"], {"a100n1"}),
    ]
    assert cluster.resv["gpupool_day"].nodes == {"a100n1"}  # still reserved: its drain goes on
    assert outcomes == {"a100n2": "done", "h100n1": "done"}  # a busy drain's skip is not an outcome
    state = State.load(tmp_path)
    assert state.last["drains_finished"] == {"a100n2": "done"} and set(state.switched_at) == {"a100n2", "h100n1"}


def _elastic_raw(**elastic):
    import yaml

    raw = yaml.safe_load(ETC.read_text())
    raw.pop("mig_parted")
    raw["schedule"]["mode"] = "elastic"
    raw["schedule"]["elastic"] = elastic
    return raw


@pytest.mark.parametrize(
    ("schedule", "where", "why"),
    [
        ({"mode": "demand"}, "schedule.mode", "unknown mode 'demand'"),
        ({"mode": "clock", "elastic": {}}, "schedule.elastic", "only with mode: elastic"),
        ({"elastic": {"during": ["dusk"]}}, "schedule.elastic.during[0]", "no layout named 'dusk'"),
        ({"elastic": {"layouts": {"dgxx": ["day"]}}}, "schedule.elastic.layouts.dgxx", "no node set named 'dgxx'"),
        ({"elastic": {"layouts": {"dgx": []}}}, "schedule.elastic.layouts.dgx", "at least one layout"),
        ({"elastic": {"layouts": {"dgx": ["dusk"]}}}, "schedule.elastic.layouts.dgx[0]", "no layout named"),
        ({"elastic": {"floors": {"whole": -1}}}, "schedule.elastic.floors.whole", "cannot be negative"),
        ({"elastic": {"max_changing": 0}}, "schedule.elastic.max_changing", "at least 1"),
        ({"elastic": {"cooldown": "soon"}}, "schedule.elastic.cooldown", ""),
        ({"elastic": {"flors": {}}}, "schedule.elastic", "flors"),
    ],
)
def test_elastic_config_errors_name_the_key(schedule, where, why):
    import yaml

    from slurm_gpupool.config.load import parse_config
    from slurm_gpupool.errors import ConfigError

    raw = yaml.safe_load(ETC.read_text())
    raw.pop("mig_parted")
    elastic = schedule.pop("elastic", None)
    raw["schedule"].update({"mode": "elastic", **schedule})
    if elastic is not None:
        raw["schedule"]["elastic"] = elastic
    with pytest.raises(ConfigError) as err:
        parse_config(raw, str(ETC))
    assert err.value.exit_code == 78
    assert where in err.value.message() and why in err.value.message(), err.value.message()


def test_a_misspelt_floor_is_refused_by_the_step_and_the_simulator(tmp_path):
    """A floor key that is neither a kind nor a type kept nothing, silently."""
    from slurm_gpupool.config.load import parse_config
    from slurm_gpupool.errors import ConfigError
    from slurm_gpupool.pool.elastic import check_floors
    from slurm_gpupool.simulate.policies import elastic_settings

    good = parse_config(_elastic_raw(floors={"1g.5gb": 1, "whole": 8, "mig": 1}), str(ETC))
    check_floors(good, good.elastic)
    bad = parse_config(_elastic_raw(floors={"1g.5g": 1}), str(ETC))
    for check in (lambda: check_floors(bad, bad.elastic), lambda: elastic_settings(bad)):
        with pytest.raises(ConfigError) as err:
            check()
        assert "schedule.elastic.floors.1g.5g" in err.value.message() and "1g.5gb" in (err.value.hint or "")
