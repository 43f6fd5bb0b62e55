"""Every decision of the repartitioner's ``next_action`` on made-up journals and cluster views.

Each test builds the journal's state (``RunRecord``, ``NodeRecord``), what Slurm shows
(``ClusterView``) and the time, and asserts the step: no Slurm, no clock, no files.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest

from slurm_gpupool.repartition.actions import (
    Apply,
    BeginVerify,
    CancelStale,
    Done,
    Drain,
    Fail,
    Finish,
    FinishRestart,
    InstallGres,
    NextWave,
    NoteWaiting,
    Release,
    Requeue,
    Reserve,
    Restart,
    RestartOthers,
    RestoreFiles,
    Revert,
    RollBack,
    SeenSwitched,
    Signal,
    Skip,
    Wait,
)
from slurm_gpupool.repartition.next_action import (
    ClusterView,
    JournalState,
    NodeRecord,
    Policy,
    RunRecord,
    _within_wave,
    how_to_begin,
    journal_state,
    next_action,
    recovery,
)
from slurm_gpupool.slurm.types import JobInfo, NodeInfo, Reservation

T0 = 1_790_000_000.0  # when this process took the run
NOW = T0 + 100
POLICY = Policy(
    poll_s=1.0, verify_timeout_s=120.0, checkpoint=lambda qos: ("USR2", 90) if qos == "gold" else ("USR1", 30)
)
DAY_GRES = "gpu:1g.10gb:7"


def rec(step: str = "waiting", **kw) -> NodeRecord:
    kw.setdefault("since", T0)
    return NodeRecord(step=step, target="day", previous="night", layout="night", **kw)


def journal(nodes: dict[str, NodeRecord], steps=("reserved",), **run) -> JournalState:
    run.setdefault("deadline", T0 + 600)
    record = RunRecord(
        id="r1",
        target="day",
        nodes=tuple(sorted(nodes)),
        reservation="gpupool_day",
        steps=tuple(steps),
        taken=T0,
        **run,
    )
    return JournalState(record, nodes)


def info(name: str, layout: str = "night", flags=(), gres: str = "gpu:a100:1", state: str = "idle") -> NodeInfo:
    return NodeInfo(name, state, frozenset(flags), gres, ("a100", f"layout_{layout}"), "")


def resv(name: str, nodes, start: float = T0) -> Reservation:
    return Reservation(name, frozenset(nodes), datetime.fromtimestamp(start), datetime.fromtimestamp(start + 7200))


def job(jid: int, node: str, requeue: bool = False, qos: str = "", name: str = "j", state: str = "RUNNING") -> JobInfo:
    return JobInfo(jid, state, frozenset({node}), "alice", name, 600, int(T0) + 10, requeue, "", qos=qos)


def view(j: JournalState, jobs=(), infos=None, reservations=None, unreachable: str = "") -> ClusterView:
    """Slurm as the journal's run left it: its reservation holding the nodes not yet through."""
    assert j.run is not None
    if infos is None:
        infos = {n: info(n) for n in j.run.nodes}
    if reservations is None:
        held = [n for n in j.run.nodes if j.nodes[n].step not in ("done", "failed", "rolled_back")]
        held = [n for n in held if j.nodes[n].resumed_at is None]
        reservations = {"gpupool_day": resv("gpupool_day", held)} if held else {}
    return ClusterView(infos, tuple(jobs), reservations, unreachable)


def decide(j: JournalState, v: ClusterView | None = None, now: float = NOW, policy: Policy = POLICY):
    return next_action(j, v if v is not None else view(j), now, policy)


# -- before anything else -----------------------------------------------------------------------------------------


def test_a_finished_run_or_none_is_nothing_to_do():
    assert decide(journal({"a": rec("done")}, steps=("reserved", "finished"))) == ()
    assert next_action(JournalState(None), ClusterView(), NOW, POLICY) == ()


def test_what_a_killed_run_left_half_way_comes_first_and_needs_no_slurmctld():
    down = ClusterView(unreachable="slurmctld down")
    restart = journal({"a": rec("drained")}, steps=("reserved", "gres_installed", "restarting"), restart_nodes=("a",))
    assert decide(restart, down) == (FinishRestart(("a",)),) and recovery(restart) == FinishRestart(("a",))
    others = journal({"a": rec("done")}, steps=("reserved", "others_restarting"), others=("b", "c"))
    assert decide(others, down) == (RestartOthers(("b", "c"), resumed=True),)
    refused = journal(
        {"a": rec("drained"), "b": rec("waiting")},
        steps=("reserved", "gres_installed", "restarting"),
        restart_nodes=("a", "x"),
        refused="slurmctld: fatal",
    )  # files Slurm refused go back before any restart is tried again
    assert decide(refused, down) == (RestoreFiles("slurmctld: fatal", ("a",), ("a", "x")),)
    assert recovery(journal({"a": rec("drained")}, steps=("reserved", "restarting", "restarted"))) is None


def test_how_a_run_begins():
    assert how_to_begin("day", "day", []) == "resume"  # even with nothing new: it finishes what it has
    assert how_to_begin("night", "day", ["a"]) == "start"  # supersedes the other run
    assert how_to_begin(None, "day", ["a"]) == "start"
    assert how_to_begin("night", "day", []) == "close"
    assert how_to_begin(None, "day", []) == "nothing"


# -- the reservation ---------------------------------------------------------------------------------------------


def test_the_reservation_is_made_then_holds_exactly_the_nodes_not_through():
    j = journal({"a": rec(), "b": rec(reason="waiting for jobs 4 to end"), "c": rec("skipped")}, steps=())
    (r,) = decide(j, view(j, reservations={}))
    assert r == Reserve("gpupool_day", frozenset("abc"), "create", False, 500 + 120 + 3600, (), ("a",))
    j = journal(
        {
            "a": rec("verifying", resumed_at=T0 + 50),  # released by this process: out
            "b": rec("done"),
            "c": rec("skipped"),  # its jobs run on: kept, no new job lands there
            "d": rec("verifying", resumed_at=T0 - 50),  # released by a killed process: back in
        }
    )
    (r,) = decide(j, view(j, reservations={"gpupool_day": resv("gpupool_day", "abcd")}))
    assert (r.how, r.nodes, r.waiting) == ("update", frozenset("cd"), ())
    # held as they should be: nothing to do about it
    assert not isinstance(decide(j, view(j, reservations={"gpupool_day": resv("gpupool_day", "cd")}))[0], Reserve)


def test_a_reservation_made_ahead_is_folded_into_the_runs():
    j = journal({"a": rec(reason="x")})
    (r,) = decide(
        j, view(j, reservations={"gpupool_day": resv("gpupool_day", "a"), "gpupool_day_ahead": resv("x", "ab")})
    )
    assert (r.how, r.delete_first) == ("keep", ("gpupool_day_ahead",))
    (r,) = decide(j, view(j, reservations={"gpupool_day": resv("gpupool_day", "a", start=NOW + 3600)}))
    assert (r.how, r.start_now) == ("update", True)  # made to begin at the switch: begin now


def test_a_resumed_run_with_every_node_through_deletes_its_reservation():
    j = journal({"a": rec("done"), "b": rec("failed")}, steps=())
    (r,) = decide(j, view(j, reservations={"gpupool_day": resv("gpupool_day", "a")}))
    assert (r.how, r.nodes) == ("delete", frozenset())


def test_no_reservation_is_touched_while_slurmctld_does_not_answer():
    j = journal({"a": rec(reason="x")}, steps=())
    assert decide(j, view(j, unreachable="connect failure")) != () and not isinstance(
        decide(j, view(j, unreachable="connect failure"))[0], Reserve
    )


# -- a node's jobs, then its GPUs ----------------------------------------------------------------------------------


def test_idle_nodes_apply_at_once_and_together():
    j = journal({"a": rec(), "b": rec("applying"), "c": rec(drained_by_us=True)})  # b: an apply a kill interrupted
    infos = {"a": info("a"), "b": info("b"), "c": info("c", flags={"DRAIN"})}
    assert decide(j, view(j, infos=infos)) == (
        Apply("a", "day"),
        Apply("b", "day"),
        Apply("c", "day", resume_first=True),  # srun refuses a drained node: the reservation holds it
    )
    # our own srun job, seen between two steps in our reservation: it outlived its srun (a
    # slurmctld crash), so it is cancelled first, never waited for; once it is completing,
    # the node applies.  While a killed run's srun still runs here, it may still be applying
    # (its job is no stale one): the run waits instead.
    ours = dataclasses.replace(job(3, "a", name="gpupool-repartition"), user="root", reservation="gpupool_day")
    assert decide(j, view(j, jobs=[ours])) == (CancelStale((3,)),)
    v = dataclasses.replace(view(j, jobs=[ours]), earlier_sruns=1)
    (w,) = decide(j, v)
    assert isinstance(w, Wait) and "earlier run" in w.why
    completing = dataclasses.replace(ours, state="COMPLETING")
    assert decide(j, view(j, jobs=[completing]))[0] == Apply("a", "day")
    # saved before its allocation, it comes back pending (24.11): as stale, never waited for
    pending = dataclasses.replace(ours, state="PENDING", state_reason="Reservation")
    assert decide(j, view(j, jobs=[pending])) == (CancelStale((3,)),)
    # a job of the same name that is not in one of our reservations is someone else's: left alone
    theirs = [job(4, "a", name="gpupool-repartition"), job(5, "", name="gpupool-repartition", state="PENDING")]
    assert decide(j, view(j, jobs=theirs))[0] == Apply("a", "day")


def test_a_busy_node_waits_and_says_why_then_is_skipped_at_the_deadline_never_killed():
    j = journal({"a": rec()})
    busy = [job(41, "a")]
    assert decide(j, view(j, jobs=busy)) == (NoteWaiting("a", "waiting for jobs 41 to end"),)
    j = journal({"a": rec(reason="waiting for jobs 41 to end")})
    (w,) = decide(j, view(j, jobs=busy))
    assert isinstance(w, Wait) and w.seconds == 1.0
    (s,) = decide(j, view(j, jobs=busy), now=T0 + 600)
    assert s == Skip("a", "jobs still running at the deadline: 41 (alice, 10s left); not killed")


def test_with_requeue_each_job_gets_its_tiers_signal_then_is_requeued_after_the_longest_grace():
    policy = Policy(requeue=True, checkpoint=POLICY.checkpoint)
    busy = [job(41, "a", requeue=True, qos="gold"), job(42, "a", requeue=True), job(43, "a")]  # 43: not requeueable
    j = journal({"a": rec(reason="waiting for jobs 41, 42, 43 to end")})
    assert decide(j, view(j, jobs=busy), T0 + 600, policy) == (Signal("a", ((41, "USR2"), (42, "USR1")), 90),)
    j = journal({"a": rec(reason="x", signalled_at=T0 + 600, requeue_at=T0 + 690)})
    assert isinstance(decide(j, view(j, jobs=busy), T0 + 650, policy)[0], Wait)
    assert decide(j, view(j, jobs=busy[1:]), T0 + 690, policy) == (Requeue("a", (42,)),)  # 41 ended meanwhile
    # requeued: a minute more for them to leave (and 43 to end), then skipped
    j = journal({"a": rec(reason="x", signalled_at=T0 + 600, requeue_at=T0 + 690, requeued_at=T0 + 690)})
    assert isinstance(decide(j, view(j, jobs=busy[2:]), T0 + 700, policy)[0], NoteWaiting)
    assert isinstance(decide(j, view(j, jobs=busy[2:]), T0 + 750, policy)[0], Skip)
    assert decide(j, view(j), T0 + 700, policy) == (Apply("a", "day"),)


def test_a_killed_processs_waits_start_over():
    """A checkpoint signal a killed process sent: the new process signals again at its deadline."""
    policy = Policy(requeue=True, checkpoint=POLICY.checkpoint)
    j = journal({"a": rec(reason="x", signalled_at=T0 - 10, requeue_at=T0 + 80)})
    busy = [job(41, "a", requeue=True)]
    assert isinstance(decide(j, view(j, jobs=busy), NOW, policy)[0], NoteWaiting)  # not a Requeue at T0 + 80
    assert isinstance(decide(j, view(j, jobs=busy), T0 + 600, policy)[0], Signal)


def test_gpus_busy_are_tried_again_then_skipped_at_the_deadline():
    j = journal({"a": rec(reason="GPUs busy: in use", gpus_busy="GPU 3 in use", gpus_busy_at=NOW - 1)})
    (w,) = decide(j)
    assert isinstance(w, Wait) and w.seconds == 1.0  # two polls after the answer
    assert decide(j, now=NOW + 1) == (Apply("a", "day"),)
    assert decide(j, now=T0 + 600) == (Skip("a", "GPUs still busy at the deadline: GPU 3 in use"),)


def test_without_slurmctld_a_node_waits_and_is_skipped_at_the_deadline():
    j = journal({"a": rec(reason="x")})
    down = view(j, unreachable="connect failure")
    assert isinstance(decide(j, down)[0], NoteWaiting)  # jobs unknown: waits
    (s,) = decide(j, down, now=T0 + 600)
    assert s == Skip("a", "slurmctld not answering at the deadline (connect failure): its jobs unknown, none killed")


def test_nodes_midway_are_mended_first():
    j = journal({"a": rec("applied"), "b": rec("applying", apply_failed="GPU 5: error", apply_failed_at=NOW - 1)})
    assert decide(j) == (Drain("a", "day"), RollBack("b", "day", "night", "GPU 5: error"))
    stale = journal({"b": rec("applying", apply_failed="x", apply_failed_at=T0 - 1)})  # a killed process's
    assert decide(stale) == (Apply("b", "day"),)


# -- waves ----------------------------------------------------------------------------------------------------------


def test_a_wave_waits_for_nodes_free_to_apply_not_for_busy_ones():
    j = journal({"a": rec("drained"), "b": rec()})
    assert decide(j) == (Apply("b", "day"),)  # b is free: it joins the wave
    j = journal({"a": rec("drained"), "b": rec(reason="waiting for jobs 41 to end")})
    assert decide(j, view(j, jobs=[job(41, "b")])) == (InstallGres(("a",)),)  # b's jobs do not hold it


def test_a_wave_installs_restarts_verifies_and_then_the_next_one_applies():
    nodes = {"a": rec("drained"), "b": rec()}
    j = journal(nodes, steps=("reserved", "gres_installing"))
    assert decide(j) == (InstallGres(("a",)),)  # killed mid-install: again
    j = journal(nodes, steps=("reserved", "gres_installing", "gres_installed"), restart_nodes=("a", "z"))
    assert decide(j) == (Restart(("a", "z")),)
    j = journal(nodes, steps=("reserved", "gres_installed", "restarting", "restarted"), restart_nodes=("a",))
    assert decide(j) == (BeginVerify("a"),)  # b, free meanwhile, applies after this wave
    j = journal({"a": rec("done"), "b": rec()}, steps=("reserved", "gres_installed", "restarting", "restarted"))
    assert decide(j) == (NextWave(),)


def test_a_bounded_wave_takes_at_most_wave_size_nodes_an_interrupted_apply_first():
    """``repartition.wave_size``: a node is out of service for its own wave only.  Five idle
    nodes, waves of two: two apply (a killed run's apply first), the others wait for the
    next wave; once two are drained the wave installs, restarts and verifies; after it, the
    next two apply."""
    policy = dataclasses.replace(POLICY, wave_size=2)
    nodes = {n: rec() for n in "abcde"} | {"d": rec("applying")}
    j = journal(nodes)
    assert decide(j, policy=policy) == (Apply("a", "day"), Apply("d", "day"))  # d before b
    # the others are held back for the next wave (a Wait each, dropped from a step that acts)
    per_node = [Apply(n, "day") for n in "abcde"]
    held = [x for x in _within_wave(per_node, j, policy) if not isinstance(x, Apply)]
    assert [x.why for x in held] == [f"{n}: free, applies after the wave under way" for n in "bce"]
    assert decide(j) == tuple(Apply(n, "day") for n in "abcde")  # unbounded: every free node at once
    # one drained already: room for one more
    j = journal(nodes | {"d": rec("drained")})
    assert [a for a in decide(j, policy=policy) if isinstance(a, Apply)] == [Apply("a", "day")]
    # the wave is full: it is committed, the free nodes wait
    j = journal(nodes | {"a": rec("drained"), "d": rec("drained")})
    assert decide(j, policy=policy) == (InstallGres(("a", "d")),)
    # after it (its nodes done, the wave's steps cleared by NextWave): the next two apply
    j = journal(nodes | {"a": rec("done"), "d": rec("done")})
    assert [a for a in decide(j, policy=policy) if isinstance(a, Apply)] == [Apply("b", "day"), Apply("c", "day")]


# -- verify, release, done -------------------------------------------------------------------------------------------

RESTARTED = ("reserved", "gres_installing", "gres_installed", "restarting", "restarted")


def switched(name: str, flags=()) -> NodeInfo:
    return info(name, "day", flags=flags, gres=DAY_GRES)


def verifying(**kw) -> JournalState:
    return journal({"a": rec("verifying", **kw)}, steps=RESTARTED, expected={"a": {"gpu:1g.10gb": 7}})


def test_a_node_is_verified_on_two_looks_then_released():
    j = verifying()
    assert decide(j, view(j, infos={"a": switched("a")})) == (SeenSwitched("a", NOW),)
    j = verifying(seen_switched_at=NOW - 1)
    (w,) = decide(j, view(j, infos={"a": switched("a")}))
    assert isinstance(w, Wait) and w.seconds == 1.0  # 2 s after the first look
    j = verifying(seen_switched_at=NOW - 2, drained_by_us=True)
    assert decide(j, view(j, infos={"a": switched("a", {"DRAIN"})})) == (Release("a", resume=True),)
    # flagged not responding on the second look (slurmctld pings late after its restart): look again
    assert decide(j, view(j, infos={"a": switched("a", {"NOT_RESPONDING"})})) == (SeenSwitched("a", None),)


def test_a_node_slurm_does_not_show_switched_fails_at_the_verify_timeout():
    j = verifying()
    stale = view(j)  # still the night GRES
    assert isinstance(decide(j, stale, now=T0 + 119)[0], Wait)
    (f,) = decide(j, stale, now=T0 + 120)
    assert isinstance(f, Fail) and f.reason.startswith("gpupool: verify after switch to day failed: Slurm shows GRES")
    # the timeout runs from when this process took the run, not from a killed one's step
    old = journal({"a": rec("verifying", since=T0 - 500)}, steps=RESTARTED, expected={"a": {"gpu:1g.10gb": 7}})
    assert isinstance(decide(old, stale, now=T0 + 60)[0], Wait)
    (f,) = decide(j, view(j, unreachable="connect failure"), now=T0 + 120)
    assert isinstance(f, Fail) and f.reason.endswith("connect failure")


def test_done_once_slurm_would_start_a_job_there():
    j = verifying(resumed_at=NOW - 1)
    assert decide(j, view(j, infos={"a": switched("a")}, reservations={})) == (Done("a", "done", "day"),)
    held = {"gpupool_night": resv("gpupool_night", "a")}  # e.g. a superseded run's, deleted at the end
    assert isinstance(decide(j, view(j, infos={"a": switched("a")}, reservations=held))[0], Wait)
    (f,) = decide(j, view(j, infos={"a": switched("a")}, reservations=held), now=NOW + 30)
    why = "gpupool: switched to day, but Slurm would not start a job there: still in reservation gpupool_night"
    assert f == Fail("a", why)
    # the run's own reservation still holding it (its release failed): the reservation is mended first
    (r,) = decide(j, view(j, infos={"a": switched("a")}, reservations={"gpupool_day": resv("gpupool_day", "a")}))
    assert (r.how, r.nodes) == ("delete", frozenset())


def test_nodes_verified_together_act_together():
    j = journal(
        {"a": rec("verifying", seen_switched_at=NOW - 2), "b": rec("verifying"), "c": rec("drained")},
        steps=RESTARTED,
        expected={n: {"gpu:1g.10gb": 7} for n in "abc"},
    )
    infos = {n: switched(n) for n in "abc"}
    assert decide(j, view(j, infos=infos)) == (Release("a", resume=False), SeenSwitched("b", NOW), BeginVerify("c"))


# -- Slurm refused a wave's files ---------------------------------------------------------------------------------


def test_nodes_of_a_refused_wave_are_reverted_then_verified_against_the_restored_files():
    note = "Slurm refused the configuration for layout day (fatal); restored"
    j = journal({"a": rec("drained", revert=note), "b": rec()})
    assert decide(j) == (Revert("a", "night", note),)
    back = rec("drained", revert=note, expected={"gpu:a100": 1})
    j = journal({"a": back, "b": rec()})
    assert decide(j) == (BeginVerify("a"),)  # no install, no restart: the restored files run; b waits
    j = journal({"a": rec("verifying", revert=note, expected={"gpu:a100": 1}, resumed_at=NOW - 1), "b": rec()})
    assert decide(j) == (Done("a", "rolled_back", "night", note),)


# -- the end of a run -------------------------------------------------------------------------------------------------


def test_at_the_end_the_unswitched_slurmds_restart_then_the_run_finishes_keeping_the_skipped():
    nodes = {"a": rec("done"), "b": rec("skipped"), "c": rec("failed")}
    j = journal(nodes, restarted_nodes=("a", "c"), stale_reservations=("gpupool_night",))
    infos = {"a": info("a"), "b": info("b"), "c": info("c"), "d": info("d"), "e": info("e", flags={"NOT_RESPONDING"})}
    busy = [job(41, "b")]
    assert decide(j, view(j, jobs=busy, infos=infos)) == (RestartOthers(("b", "d")),)  # answering, not restarted
    j = journal(nodes, steps=("reserved", "others_restarting", "others_restarted"), restarted_nodes=("a", "c"))
    (f,) = decide(j, view(j, jobs=busy, infos=infos))
    assert f == Finish("gpupool_day", frozenset("b"), 3600, (), {"a": "done", "b": "skipped", "c": "failed"})
    quiet = Policy(restart_unswitched=False)
    j = journal(nodes, restarted_nodes=("a",))
    assert isinstance(decide(j, view(j, infos=infos), policy=quiet)[0], Finish)
    (r,) = decide(j, view(j, unreachable="connect failure"))
    assert r == RestartOthers((), problem="slurmd not restarted on the nodes that did not switch: connect failure")


def test_nothing_to_do_is_a_wait():
    j = journal({"a": rec(reason="waiting for jobs 41 to end")})
    (w,) = decide(j, view(j, jobs=[job(41, "a")]))
    assert w == Wait(1.0, "waiting for jobs 41 to end")


# -- the journal's JSON ------------------------------------------------------------------------------------------------


def test_a_journal_the_earlier_executor_wrote_reads_with_defaults():
    data = {
        "schema": 1,
        "run": {
            "id": "20260101T080000",
            "target": "day",
            "nodes": ["a", "b"],
            "reservation": "gpupool_day",
            "started_epoch": T0,
            "deadline_epoch": T0 + 600,
            "steps": ["reserved", "gres_installing"],
            "restart_nodes": [],
            "stale_reservations": [],
        },
        "nodes": {
            "a": {
                "target": "day",
                "previous": "night",
                "layout": "day",
                "step": "drained",
                "since_epoch": T0,
                "reason": "",
                "drained_by_us": True,
            },
            "b": {
                "target": "day",
                "previous": "night",
                "layout": "night",
                "step": "waiting",
                "since_epoch": T0,
                "reason": "waiting for jobs 4 to end",
                "drained_by_us": False,
            },
        },
    }
    j = journal_state(data)
    assert j.run is not None and j.run.taken == 0.0 and j.run.refused == "" and j.run.expected == {}
    assert j.nodes["a"] == NodeRecord("drained", "day", "night", "day", "", T0, True)
    assert j.at("waiting") == ["b"]


@pytest.mark.parametrize("step", ["waiting", "applying", "applied", "drained", "verifying"])
def test_every_step_a_node_can_be_at_leads_somewhere(step):
    """No state the journal can hold leaves the run without a next step."""
    j = journal({"a": rec(step), "b": rec("done")}, steps=RESTARTED, expected={"a": {"gpu:1g.10gb": 7}})
    assert decide(j) != ()
