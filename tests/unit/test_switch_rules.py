"""The repartitioner's rules on made-up cluster views, in milliseconds (#15, items 1-9).

First the pure rules (repartition/rules.py), then the executor against the shipped fake
Slurm (slurm/fake.py) with a clock that moves only when someone waits: every defect found
on the real sandbox gets its decision pinned here; the real-Slurm tests prove the
executor does what is decided.  (Each decision of next_action: test_next_action.py; a run
killed at each step: test_repartition_kills.py.)
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.repartition import rules as rules
from slurm_gpupool.slurm.fake import Killed
from slurm_gpupool.slurm.runner import Result
from slurm_gpupool.slurm.types import NodeInfo, Reservation

from .repartition_site import KillAt, job, make_site, outcome, repartitioner

TOP = Path(__file__).resolve().parents[2]


def info(name: str = "n1", state: str = "idle", flags=(), gres: str = "gpu:a100:8", layout: str = "night", reason=""):
    return NodeInfo(name, state, frozenset(flags), gres, ("a100", f"layout_{layout}"), reason)


# -- the pure rules -------------------------------------------------------------------------


def test_jobs_are_waited_for_then_requeued_once_or_the_node_skipped_never_killed():
    assert rules.after_jobs([], 0, 10, False, False).action == "apply"
    assert rules.after_jobs([job(1, "n1")], 5, 10, True, False).action == "wait"
    assert rules.after_jobs([job(1, "n1", requeue=True)], 10, 10, True, False).action == "requeue"
    assert rules.after_jobs([job(1, "n1", requeue=True)], 70, 10, True, True).action == "skip"  # once only
    skip = rules.after_jobs([job(1, "n1")], 10, 10, True, False, "1 (alice, 5m left)")
    assert skip.action == "skip" and skip.reason == "jobs still running at the deadline: 1 (alice, 5m left); not killed"


def test_switched_means_the_rendered_gres_the_layout_and_an_answering_node():
    want = {"gpu:a100": 8}
    assert rules.verify_problem(info(), want, "night") == ""
    assert "expected gpu:a100:8" in rules.verify_problem(info(gres="gpu:a100:2"), want, "night")
    assert "layout day" in rules.verify_problem(info(layout="day"), want, "night")
    assert "NOT_RESPONDING" in rules.verify_problem(info(flags={"NOT_RESPONDING"}), want, "night")
    assert rules.verify_problem(None, want, "night") == "Slurm does not know the node"


def test_done_means_slurm_would_start_a_job_there_now():
    """#15.7: reported done while idle* (not responding) and still in the reservation."""
    assert rules.ready_problem(info()) == ""
    assert rules.ready_problem(info(state="mixed")) == ""
    assert rules.ready_problem(info(flags={"NOT_RESPONDING"})).startswith("not answering")
    assert rules.ready_problem(info(flags={"DRAIN"})) == "flags DRAIN"
    assert rules.ready_problem(info(state="down")).startswith("not answering")
    # MAINTENANCE/RESERVED lag a reservation's update: the node's flags alone do not block
    assert rules.ready_problem(info(flags={"MAINTENANCE", "RESERVED"})) == ""


def test_a_dry_run_reserves_ahead_on_the_layouts_the_due_switch_leaves():
    """#15.3: ``--scheduled --dry-run`` said nothing would be reserved (every node was in the
    next layout already, before the due switch), and the real run reserved them all."""
    from slurm_gpupool.core.policy.switch_plan import NodeView, changing_after, plan_switch

    views = {
        "a": NodeView("a", "night"),
        "b": NodeView("b", "night"),
        "c": NodeView("c", "day"),  # in day already: the due switch keeps it
        "d": NodeView("d", "night", usable=False, state="down"),  # skipped by both
    }
    due = plan_switch("day", "abcd", views)
    after = plan_switch("night", "abcd", views)
    assert after.changing == ["c"]  # judged on today's layouts: the old dry run's answer
    assert changing_after(after, due) == ["a", "b", "c"]
    # the due switch to the same layout leaves nothing for the next one
    assert changing_after(plan_switch("night", "abc", views), plan_switch("night", "abc", views)) == []


def test_no_reservation_ahead_for_a_period_where_demand_decides():
    """A night run of ``--scheduled`` reserved the nodes that switch to day at 08:00, even
    when day is an elastic period, where the clock switches nothing: the nodes stayed out
    of long jobs' reach, and in the elastic step the reservation counted as a switch."""
    from slurm_gpupool.config.elastic import ElasticSettings
    from slurm_gpupool.core.policy.elastic import Bounds
    from slurm_gpupool.repartition.scheduled import clock_switch_ahead

    now = datetime(2026, 11, 25, 7, 0)
    nxt = (now + timedelta(hours=1), "day")
    assert clock_switch_ahead(nxt, now, 7200, None) == nxt  # clock mode: reserve ahead
    assert clock_switch_ahead(nxt, now, 1800, None) is None  # not yet within the lead time
    assert clock_switch_ahead(None, now, 7200, None) is None
    by_day = ElasticSettings(Bounds(), during=("day",))
    assert clock_switch_ahead(nxt, now, 7200, by_day.active) is None
    assert clock_switch_ahead((nxt[0], "night"), now, 7200, by_day.active) == (nxt[0], "night")
    assert clock_switch_ahead(nxt, now, 7200, ElasticSettings(Bounds()).active) is None  # elastic always


def test_only_our_reservations_active_now_hold_a_node():
    """The reservation table, not the node's lagging flags, says whether a job can start."""
    now = datetime(2026, 11, 25, 12, 0)
    hour = timedelta(hours=1)

    def resv(name: str, start: datetime, nodes: str = "a") -> Reservation:
        return Reservation(name, frozenset(nodes.split(",")), start, start + hour)

    table = [
        resv("gpupool_night", now - hour / 2),
        resv("gpupool_night_ahead", now + hour),  # starts later: holds nothing yet
        resv("admin_maint", now - hour / 2, "b"),  # an admin's: not ours to wait for
        resv("gpupool_day", now - 2 * hour),  # ended
    ]
    assert rules.held_problem("a", table, "gpupool_", now) == "still in reservation gpupool_night"
    assert rules.held_problem("b", table, "gpupool_", now) == ""
    assert rules.held_problem("a", table[1:], "gpupool_", now) == ""


def test_a_node_leaves_the_reservation_when_it_is_through_skipped_ones_stay():
    steps = {"a": "done", "b": "waiting", "c": "skipped", "d": "failed", "e": "rolled_back", "f": "drained"}
    assert rules.still_held(steps) == {"b", "c", "f"}


def test_a_killed_restart_is_redone_before_anything_that_needs_slurmctld():
    assert rules.redo_first(["reserved", "gres_installing", "gres_installed", "restarting"]) == "restart"
    assert rules.redo_first(["reserved", "gres_installed", "restarting", "restarted"]) is None
    assert rules.redo_first(["reserved"]) is None
    # killed between stopping and starting the unswitched nodes' slurmds
    assert rules.redo_first(["reserved", "restarted", "others_restarting"]) == "others"
    assert rules.redo_first(["reserved", "restarted", "others_restarting", "others_restarted"]) is None


def test_the_unswitched_nodes_to_restart_are_the_answering_ones_not_yet_restarted():
    view = {
        "a": info("a"),
        "b": info("b", "allocated"),  # busy: its jobs run on through a slurmd restart
        "c": info("c", "down", ["NOT_RESPONDING"]),  # reads the new file when it starts
        "d": info("d", "idle", ["POWERED_DOWN"]),
        "e": info("e"),
    }
    assert rules.unswitched_to_restart(view, ["e"]) == ["a", "b"]


def test_exit_zero_only_when_every_node_is_in_the_layout():
    assert rules.run_exit_code({"a": "done", "b": "kept"}) == 0
    assert rules.run_exit_code({"a": "done", "b": "not_switched"}) == 75  # e.g. its slurmd is dead
    assert rules.run_exit_code({"a": "done", "b": "skipped"}) == 75
    assert rules.run_exit_code({"a": "failed", "b": "skipped"}) == 1
    assert rules.run_exit_code({}) == 0


def test_lead_time_leaves_room_for_jobs_without_a_time_limit():
    """#15.3: MaxTime (1 day) as lead time with switches every 12 h reserved every node for good."""
    day = 86400
    assert rules.lead_time_default(day, [12 * 3600, 12 * 3600], day) == 6 * 3600
    assert rules.lead_time_default(2 * 3600, [12 * 3600], day) == 2 * 3600  # short MaxTime: it suffices
    assert rules.lead_time_default(None, [], day) == day
    assert rules.lead_time_default(day, [30], day) == 60


def test_held_jobs_get_their_priority_back():
    jobs = [
        job(7, "n1", "PENDING", priority=0, state_reason="BadConstraints"),
        job(8, "n1", "PENDING", priority=0, state_reason="JobHeldUser"),  # the user's hold: not ours
        job(9, "n1", "PENDING", priority=500, state_reason="Priority"),
    ]
    assert rules.priorities_to_restore({7: 4294901758, 9: 400}, jobs) == [(7, 4294901758)]
    assert rules.priorities_to_restore({}, jobs[:1]) == [(7, None)]


# -- the executor against a Slurm of dictionaries -------------------------------------------------


@pytest.fixture
def site(tmp_path: Path):
    """The shipped pool (5 nodes) on simulated GPUs, in the night layout, and a fake Slurm."""
    return make_site(tmp_path)


def test_a_switch_releases_each_node_as_it_is_verified_and_a_busy_one_stays_held(site):
    """#15.1 and 15.2: verified nodes left the reservation only at the end (one busy node
    held all others for its deadline); a skipped node keeps its reservation, and a later
    reservation ahead of the next switch is separate, not the whole cluster from now."""
    cfg, slurm, clock = site.cfg, site.slurm, site.clock
    slurm.add_job(job(41, "v100n1", limit_s=10**6))
    rp = repartitioner(site)
    report = rp.run("day")
    assert report.exit_code == 75 and outcome(report, "v100n1") == "skipped"
    assert {n for n in cfg.all_nodes() if outcome(report, n) == "done"} == {"a100n1", "a100n2", "h100n1", "a30n1"}
    updates = [(c[2], c[3]) for c in slurm.calls if c[0] == "update" and c[1] == "gpupool_day"]
    # released one by one as verified, while the busy node's wait went on (not all at the end)
    assert len(updates) >= 4 and all("v100n1" in left for left, _ in updates) and len(updates[0][0]) == 4
    skipped_at = report.nodes["v100n1"]  # (its skip came at the 60 s deadline, after the others' release)
    assert skipped_at["outcome"] == "skipped" and max(t for _, t in updates[:4]) < rp.journal.run["deadline_epoch"]
    assert slurm.resv["gpupool_day"].nodes == {"v100n1"}  # held: its job runs on, no new job lands
    for n in ("a100n1", "a30n1"):
        assert report.nodes[n]["reserved_s"] is not None and report.nodes[n]["out_of_service_s"] is not None
    # the next --scheduled run reserves ahead: the others from the switch time, apart
    start = datetime.fromtimestamp(clock.time()) + timedelta(hours=3)
    name, held = rp.prepare("night", start)
    assert name == "gpupool_night_ahead" and slurm.resv[name].start == start and "v100n1" not in held
    assert "v100n1" not in slurm.resv[name].nodes and slurm.resv["gpupool_day"].nodes == {"v100n1"}


def test_a_requeue_gives_each_job_its_tiers_checkpoint_signal_and_waits_the_longest_grace(tmp_path: Path):
    """#18: at the deadline with --requeue, a shared-tier job gets its tier's signal, a job of
    no tier the repartitioner's; the requeue comes after the longest of their graces."""
    tiers = {
        "exclusive": {"priority": 1000, "gres": ["whole"]},
        "shared": {"priority": 10, "preempt_mode": "requeue", "grace": "90s", "checkpoint_signal": "USR2"},
    }
    site = make_site(tmp_path, tiers=tiers)
    cfg, slurm, clock = site.cfg, site.slurm, site.clock
    slurm.add_job(job(41, "v100n1", requeue=True, limit_s=10**6, qos="gpupool_shared"))
    slurm.add_job(job(42, "v100n1", requeue=True, limit_s=10**6, qos="normal"))
    when: list[tuple] = []
    slurm.signal_job = lambda j, s: when.append(("signal", j, s, clock.time()))  # type: ignore[method-assign]
    slurm.requeue = lambda j: when.append(("requeue", j, clock.time())) or Result(("scontrol",), 0, "", "")  # type: ignore[method-assign]
    report = repartitioner(site).run("day", ["v100n1"], requeue=True)
    signals = {w[1]: w[2] for w in when if w[0] == "signal"}
    assert signals == {41: "USR2", 42: cfg.repartition.checkpoint_signal}
    signalled = max(w[3] for w in when if w[0] == "signal")
    requeued = [w for w in when if w[0] == "requeue"]
    assert {w[1] for w in requeued} == {41, 42}
    assert min(w[2] for w in requeued) - signalled >= 90  # the shared tier's grace, not the 5 s default
    # this fake's requeue leaves them running: a minute later the node is skipped, the jobs not killed
    assert outcome(report, "v100n1") == "skipped" and "not killed" in report.nodes["v100n1"]["reason"]


def test_every_node_is_in_the_report_with_why(site):
    """#15.8: a node slurmctld would not resume was left out of the next run's report."""
    site.slurm.nodes_["h100n1"].state = "down"
    site.slurm.nodes_["h100n1"].flags.add("NOT_RESPONDING")
    report = repartitioner(site).run("day")
    nodes = report.to_dict()["nodes"]
    assert set(nodes) == set(site.cfg.all_nodes())
    assert nodes["h100n1"]["outcome"] == "not_switched" and "not usable" in nodes["h100n1"]["reason"]
    assert report.exit_code == 75


def test_a_dead_slurmd_fails_its_node_only_and_a_rerun_switches_it_when_back(site):
    """#15.5: one dead slurmd held the healthy nodes 103 s, and after it came back a rerun
    said every node was in the layout while it was still drained."""
    cfg, slurm, clock = site.cfg, site.slurm, site.clock
    slurm.dead_slurmd.add("a30n1")
    rp = repartitioner(site)
    t0 = clock.time()
    first = rp.run("day")
    assert outcome(first, "a30n1") == "failed" and first.exit_code == 1
    assert all(outcome(first, n) == "done" for n in cfg.all_nodes() if n != "a30n1")
    assert first.nodes["a100n1"]["reserved_s"] < 10 and clock.time() - t0 >= 10  # a30n1's verify timeout
    assert slurm.nodes_["a30n1"].reason.startswith("gpupool: verify after switch to day failed")
    slurm.dead_slurmd.clear()
    slurm.register_from_files(["a30n1"])  # its slurmd is back: registers with the day node line
    second = repartitioner(site).run("day")
    assert outcome(second, "a30n1") == "done" and second.exit_code == 0
    assert "DRAIN" not in slurm.nodes_["a30n1"].flags


def test_no_slurmctld_is_exit_69_not_every_node_in_its_layout(site):
    """#15.6: a manual switch said "every node is in layout night" with slurmctld down."""
    site.slurm.ctld_up = False
    with pytest.raises(SlurmUnavailableError) as err:
        repartitioner(site).run("day")
    assert err.value.exit_code == 69


def test_a_node_answering_late_is_done_only_once_it_answers(site):
    """#15.7: "done" while slurmctld still showed it idle* (srun --immediate refused)."""
    slurm = site.slurm
    orig = slurm.register_from_files

    def register(nodes):
        orig(nodes)
        slurm.late["a100n1"] = 8  # after the restart it shows NOT_RESPONDING for a while

    slurm.register_from_files = register  # type: ignore[method-assign]
    report = repartitioner(site).run("day")
    assert outcome(report, "a100n1") == "done" and slurm.late["a100n1"] == 0


def test_killed_while_restarting_the_next_run_restarts_first(site):
    """#15.4: killed mid-restart, slurmctld stayed down and every rerun exited 69."""
    slurm = site.slurm
    rp = repartitioner(site)
    rp.restarter.killed_in_ctld_restart = True  # kill -9 while `systemctl restart slurmctld` runs
    with pytest.raises(Killed):
        rp.run("day")
    assert not slurm.ctld_up
    rp = repartitioner(site)
    report = rp.run("day")
    assert slurm.ctld_up and report.exit_code == 0
    assert all(outcome(report, n) in ("done", "kept") for n in site.cfg.all_nodes())
    assert any("finishing the restart" in m for m in rp.said)
    assert not slurm.resv  # no reservation left


def test_jobs_slurm_held_while_their_gres_were_gone_get_their_priority_back(site):
    """#15.10: night jobs pending by day were BadConstraints with priority 0 for good."""
    slurm = site.slurm
    slurm.add_job(job(50, "", "PENDING", priority=4294901758, state_reason="Resources"))
    repartitioner(site).run("day")
    slurm.jobs_ = [job(50, "", "PENDING", priority=0, state_reason="BadConstraints")]  # what Slurm did by day
    repartitioner(site).run("night")
    assert ("release", 50, 4294901758) in slurm.calls


def test_a_partial_switch_restarts_the_slurmds_that_did_not_switch(site):
    """#15.9: after `--nodes a30n1` the other slurmds kept the old slurm.conf (slurmctld warned
    at each registration): they are restarted too, without slurmctld; a dead one is left."""
    from dataclasses import replace

    slurm = site.slurm
    slurm.nodes_["h100n1"].state = "down"
    slurm.nodes_["h100n1"].flags.add("NOT_RESPONDING")
    rp = repartitioner(site)
    report = rp.run("day", ["a30n1"])
    assert outcome(report, "a30n1") == "done" and report.exit_code == 0, report.to_dict()
    assert rp.restarter.log == [
        ["stop-slurmd", "a30n1"],
        ["restart-slurmctld"],
        ["start-slurmd", "a30n1"],
        ["stop-slurmd", "a100n[1-2],v100n1"],  # the others: batch by batch, without slurmctld
        ["start-slurmd", "a100n[1-2],v100n1"],
    ]
    assert rp.journal.load().run["steps"][-3:] == ["others_restarting", "others_restarted", "finished"]

    cfg = site.cfg
    off = replace(cfg, repartition=replace(cfg.repartition, restart_unswitched=False))
    quiet = repartitioner(site, off)
    assert quiet.run("night", ["a30n1"]).exit_code == 0 and quiet.restarter.log == [
        ["stop-slurmd", "a30n1"],
        ["restart-slurmctld"],
        ["start-slurmd", "a30n1"],
    ]


def test_killed_between_stopping_and_starting_the_unswitched_slurmds_the_next_run_starts_them(site):
    cfg, slurm = site.cfg, site.slurm
    with pytest.raises(Killed):
        repartitioner(site, kill=KillAt("others:0")).run("day", ["a30n1"])
    assert slurm.nodes_["a100n1"].state == "down"  # stopped, not started again
    rp = repartitioner(site)
    report = rp.run("day", ["a30n1"])
    others = [n for n in sorted(cfg.all_nodes()) if n != "a30n1"]
    assert report.exit_code == 0 and ["restart-slurmctld"] not in rp.restarter.log  # no second slurmctld restart
    assert rp.restarter.restarted("start-slurmd") == [others]
    assert all(slurm.nodes_[n].state == "idle" for n in cfg.all_nodes())


def test_slurmds_a_killed_run_stopped_are_started_even_with_the_restart_turned_off(site):
    from dataclasses import replace

    cfg, slurm = site.cfg, site.slurm
    with pytest.raises(Killed):
        repartitioner(site, kill=KillAt("others:0")).run("day", ["a30n1"])
    off = replace(cfg, repartition=replace(cfg.repartition, restart_unswitched=False))
    assert repartitioner(site, off).run("day", ["a30n1"]).exit_code == 0
    assert all(slurm.nodes_[n].state == "idle" for n in cfg.all_nodes())


def test_type_names_slurm_would_confuse_stop_a_switch_before_any_node_is_touched(site):
    """The review: a collision surfaced only at the GRES install, with nodes already drained and
    their MIG changed; now the run refuses up front (exit 78): nothing reserved, drained or applied."""
    import unittest.mock as mock

    from slurm_gpupool.errors import ConfigError

    rp = repartitioner(site)
    slurm = site.slurm
    calls = list(slurm.calls)
    # as if the pool mixed A100 7g.40gb and B200 2g.45gb, one type to Slurm (gres_build_id)
    with (
        mock.patch(
            "slurm_gpupool.controller.gres_install.cluster_accounting",
            return_value=["gres/gpu:7g.40gb", "gres/gpu:2g.45gb"],
        ),
        pytest.raises(ConfigError) as e,
    ):
        rp.run("day")
    assert e.value.exit_code == 78 and "2g.45gb and 7g.40gb are one type to Slurm" in e.value.why
    assert slurm.calls == calls and slurm.resv == {}
