"""slurmctld killed with -9 (and started again, as systemd would) right after each journaled
step and restart command of a switch, or one switching node's slurmd killed there: the run
goes on, and it or the next run converges.  Both directions, on the shipped fake Slurm.

A slurmctld killed with -9 comes back with its last saved state (measured on 22.05:
``slurm/fake.py`` says what it keeps): here the worst case, the state from before the run,
so the run's reservation, its drains and resumes are all undone at once.  A slurmd killed
with -9 stays down until its node's restart starts it, or an admin does.  Converged, as
after a kill of the repartitioner itself (``test_repartition_kills.py``): every node in its
layout, none drained, every slurmd answering, no reservation of ours left, the run finished,
and no job signalled, requeued or lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_gpupool.repartition.rules import srun_not_started
from slurm_gpupool.slurm.runner import Result

from .repartition_site import Site, repartitioner, site_templates
from .test_repartition_kills import KILL_POINTS, SWITCHING, assert_converged, busy_site


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, Site]:
    return site_templates(tmp_path_factory)


class CrashAt:
    """The journal's fault hook: at ``point``, once, run ``fault`` and go on (the repartitioner
    is not killed: what it does next meets a Slurm that lost what it did)."""

    def __init__(self, point: str, fault) -> None:
        self.point, self.fault, self.fired = point, fault, False

    def __call__(self, step: str) -> None:
        if not self.fired and step == self.point:
            self.fired = True
            self.fault()


def run_until_converged(site: Site, target: str, first_kill) -> list[dict]:
    """The run with the fault, then fresh runs (as cron would start them) until one changes
    nothing: at most two.  Every run's report."""
    reports = [repartitioner(site, kill=first_kill).run(target, SWITCHING).to_dict()]
    for _ in range(2):
        again = repartitioner(site).run(target, SWITCHING)
        reports.append(again.to_dict())
        if again.exit_code == 0 and not again.every_node():
            break
    return reports


@pytest.mark.parametrize("point", KILL_POINTS)
@pytest.mark.parametrize(("start", "target"), [("night", "day"), ("day", "night")])
def test_slurmctld_killed_after_each_step_loses_what_it_had_not_saved_and_the_switch_converges(
    templates, tmp_path: Path, point, start, target
):
    site = busy_site(tmp_path, templates[start])
    site.slurm.save_interval_s = None  # it saves only when told: a crash loses everything since
    site.slurm.save_state()
    crash = CrashAt(point, site.slurm.crash_controller)
    reports = run_until_converged(site, target, crash)
    assert crash.fired and site.slurm.crashes == 1
    assert reports[-1]["exit_code"] == 0, (point, reports)
    assert_converged(site, {n: target if n in SWITCHING else start for n in site.cfg.all_nodes()})


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_switching_nodes_slurmd_killed_after_each_step_and_started_by_the_next_restart(
    templates, tmp_path: Path, point
):
    """Its slurmd dies; the switch's restart of that node, or the admin's start after a node
    failed (``systemctl start slurmd``), brings it back; then a run converges."""
    site = busy_site(tmp_path, templates["night"])
    crash = CrashAt(point, lambda: site.slurm.kill_slurmd("v100n1"))
    reports = [repartitioner(site, kill=crash).run("day", SWITCHING).to_dict()]
    assert crash.fired
    if "v100n1" in site.slurm.killed_slurmd:  # nothing restarted it after the kill: the admin does
        site.slurm.register_from_files(["v100n1"])
    reports += run_until_converged(site, "day", None)
    assert reports[-1]["exit_code"] == 0, (point, reports)
    assert_converged(site, {n: "day" if n in SWITCHING else "night" for n in site.cfg.all_nodes()})


def converges_cancelling_only_own_leftovers(site: Site, point: str) -> None:
    """slurmctld killed at ``point`` of a switch to day, then runs until one changes nothing:
    the switch converged, and only srun's own jobs were cancelled, none left."""
    crash = CrashAt(point, site.slurm.crash_controller)
    reports = run_until_converged(site, "day", crash)
    assert crash.fired
    assert reports[-1]["exit_code"] == 0, reports
    assert_converged(site, {n: "day" if n in SWITCHING else "night" for n in site.cfg.all_nodes()})
    cancelled = [c[1] for c in site.slurm.calls if c[0] == "cancel"]
    assert cancelled and all(j >= 100_000 for j in cancelled), cancelled  # only srun's own jobs
    assert not [j for j in site.slurm.jobs() if j.name == "gpupool-repartition"]


# between an apply and the wave's restart (a graceful stop of slurmctld saves all)
@pytest.mark.parametrize("point", ["applied", "drained", "gres_installed", "restart:0"])
def test_an_srun_job_whose_end_slurmctld_lost_is_cancelled_and_the_switch_converges(templates, tmp_path: Path, point):
    """slurmctld saved while a node's apply ran under srun, and was killed after that srun had
    ended: it comes back with the srun's job RUNNING and nothing behind it (measured on 22.05:
    ``Reason=Prolog``, until its time limit; no InactiveLimit).  Found on the sandbox: the job
    held the run's reservation ("Requested reservation is in use") and the run asked to delete
    it again and again, without pause, never finishing.  Now the run cancels its own leftover
    srun jobs, and a reservation it cannot delete is asked again after a poll."""
    site = busy_site(tmp_path, templates["night"])
    site.slurm.save_interval_s = None
    apply_on_node = site.slurm.srun_handler
    assert apply_on_node is not None

    def srun_saved_meanwhile(node, argv):
        site.slurm.save_state()  # the save thread ran while the srun's job ran
        return apply_on_node(node, argv)

    site.slurm.srun_handler = srun_saved_meanwhile
    converges_cancelling_only_own_leftovers(site, point)


# between an apply and the wave's restart (a graceful stop of slurmctld saves all)
@pytest.mark.parametrize("point", ["applied", "drained", "gres_installed", "restart:0"])
def test_an_srun_job_saved_while_pending_comes_back_pending_is_cancelled_and_the_switch_converges(
    templates, tmp_path: Path, point
):
    """slurmctld saved while a node's srun was still waiting for its allocation, and was killed
    after that srun had ended: it comes back with the srun's job PENDING in the run's
    reservation and nothing behind it.  Found on 24.11 in CI: the node had left the
    reservation (its drain failed in the crash), so the job waited there (``Reason=Reservation``)
    for ever, the reservation could not be deleted ("Requested reservation is in use"), and
    the run asked again every second until the test's 600 s ran out.  Our own srun jobs seen
    pending between two steps are as stale as running ones: cancelled."""
    site = busy_site(tmp_path, templates["night"])
    site.slurm.save_interval_s = None
    add_job = site.slurm.add_job

    def saved_while_pending(job, ends_at=None):
        add_job(job, ends_at)
        if job.name == "gpupool-repartition":
            site.slurm.save_state()  # the save thread ran between the srun's submission and its allocation

    site.slurm.add_job = saved_while_pending
    converges_cancelling_only_own_leftovers(site, point)


def test_an_apply_srun_started_nothing_is_tried_again_not_rolled_back(templates, tmp_path: Path):
    """slurmctld killed while a node's srun was launching (another node's apply going on):
    srun says "Something is wrong with the boot of the nodes" and runs nothing (seen on the
    sandbox).  The node was rolled back and failed, to wait for the next run; nothing had
    changed on it.  Now its apply is tried again after a poll, in the same run."""
    site = busy_site(tmp_path, templates["night"])
    apply_on_node = site.slurm.srun_handler
    assert apply_on_node is not None
    refused: list[str] = []

    def launch_fails_once(node, argv):
        if node == "v100n1" and not refused:
            refused.append(node)
            return Result(tuple(argv), 1, "", "srun: error: Something is wrong with the boot of the nodes.\n")
        return apply_on_node(node, argv)

    site.slurm.srun_handler = launch_fails_once
    report = repartitioner(site).run("day", SWITCHING)
    assert refused and report.exit_code == 0, report.to_dict()
    assert {n: r["outcome"] for n, r in report.nodes.items()} == {n: "done" for n in SWITCHING}, report.to_dict()
    assert_converged(site, {n: "day" if n in SWITCHING else "night" for n in site.cfg.all_nodes()})


@pytest.mark.parametrize(
    ("stdout", "stderr", "started"),
    [
        ("", "srun: error: Something is wrong with the boot of the nodes.\n", False),
        ("", "srun: error: Unable to allocate resources: Requested reservation is invalid\n", False),
        ("", "srun: error: Unable to confirm allocation for job 12: Unable to contact slurm controller\n", False),
        ("", "srun: error: Job allocation 12 has been revoked.\n", False),
        # the node cannot take it: a failure of the node, not of slurmctld
        (
            "",
            "srun: error: Unable to allocate resources: Required node not available (down, drained or reserved)\n",
            True,
        ),
        # the command ran (its own words, or its output)
        ("", "gpupool: GPUs busy\n", True),
        ('{"state": {}}', "srun: error: Something is wrong with the boot of the nodes.\n", True),
        ("", "gpupool: apply failed\nsrun: error: Unable to contact slurm controller (connect failure)\n", True),
        ("", "srun: Force Terminated JobId=12\nsrun: error: a100n1: task 0: Terminated\n", True),
        ("", "srun: error: Job allocation 12 has been revoked\nsrun: error: a100n1: task 0: Killed\n", True),
    ],
)
def test_srun_not_started_is_srun_failing_on_slurmctlds_side_only(stdout, stderr, started):
    assert srun_not_started(stdout, stderr) is (not started)


def test_slurms_gres_count_drain_a_crash_brings_back_after_the_run_is_lifted_by_the_next(templates, tmp_path: Path):
    """Seen on the sandbox with slurmctld killed at every step: killed once the new files were
    installed, slurmctld came back with them while a switching node's slurmd still had the
    old gres.conf, and Slurm drained the node "gres/gpu:v100_shared count too low (0 < 4)".
    The run lifted it once the node showed its layout; killed again after the run, slurmctld
    came back with that drain (saved, the resume not).  The next run called the node "not
    usable" and exited 75, forever: a drain of Slurm's, not ours.  It is the switch's to lift."""
    site = busy_site(tmp_path, templates["night"])
    site.slurm.save_interval_s = None

    def fault(step: str) -> None:
        if step == "gres_installed":
            site.slurm.crash_controller()
            site.slurm.save_state()  # it saves the drain it set at the slurmd's registration
        elif step == "finished":
            site.slurm.crash_controller()  # back with that drain; the resume was never saved

    reports = [repartitioner(site, kill=fault).run("day", SWITCHING).to_dict()]
    assert "count too low" in site.slurm.nodes()["v100n1"].reason
    for _ in range(2):
        again = repartitioner(site).run("day", SWITCHING)
        reports.append(again.to_dict())
        if again.exit_code == 0:
            break
    assert reports[-1]["exit_code"] == 0, reports
    assert_converged(site, {n: "day" if n in SWITCHING else "night" for n in site.cfg.all_nodes()})


def test_an_apply_srun_stuck_in_its_prolog_is_cancelled_and_tried_again(templates, tmp_path: Path):
    """Seen on the sandbox with a switching node's slurmd killed at every step: killed (and
    started again) as our srun's allocation ran its prolog there, slurmctld waited for that
    prolog for ever (``squeue``: RUNNING, reason Prolog), and the srun with it, so the run
    hung until the command timeout.  While sruns run, the run cancels its own that are in
    their prolog past ``launch_timeout``; the srun ends having run nothing; tried again."""
    import dataclasses
    import threading

    site = busy_site(tmp_path, templates["night"])
    apply_on_node = site.slurm.srun_handler
    assert apply_on_node is not None
    timeout_s = 5  # this site's deadline is shorter than the default's two minutes
    cfg = dataclasses.replace(
        site.cfg, repartition=dataclasses.replace(site.cfg.repartition, launch_timeout_s=timeout_s)
    )
    stuck: list[int] = []

    def prolog_never_reported(node, argv):
        if node != "v100n1" or stuck:
            return apply_on_node(node, argv)
        (mine,) = [j for j in site.slurm.jobs() if j.name == "gpupool-repartition" and "v100n1" in j.nodes]
        stuck.append(mine.job_id)
        with site.slurm._lock:
            site.slurm.jobs_ = [
                dataclasses.replace(j, state_reason="Prolog") if j is mine else j for j in site.slurm.jobs_
            ]
        site.clock.sleep(timeout_s + 1)  # its prolog "runs" past the timeout
        gone = threading.Event()
        for _ in range(500):  # real time: the watchdog thread polls every 0.05 s here
            if all(j.job_id != mine.job_id for j in site.slurm.jobs()):
                gone.set()
                break
            gone.wait(0.01)
        assert gone.is_set(), "the stuck srun job was never cancelled"
        return Result(tuple(argv), 1, "", f"srun: error: Job allocation {mine.job_id} has been revoked.\n")

    site.slurm.srun_handler = prolog_never_reported
    report = repartitioner(site, cfg).run("day", SWITCHING)
    assert stuck and ("cancel", stuck[0]) in site.slurm.calls
    assert report.exit_code == 0, report.to_dict()
    assert {n: r["outcome"] for n, r in report.nodes.items()} == {n: "done" for n in SWITCHING}
    assert_converged(site, {n: "day" if n in SWITCHING else "night" for n in site.cfg.all_nodes()})


def test_stuck_launches_are_our_jobs_in_their_prolog_past_the_timeout():
    import dataclasses

    from slurm_gpupool.repartition.rules import stuck_launches
    from slurm_gpupool.slurm.types import JobInfo

    from .repartition_site import job

    def ours(jid: int, **kw) -> JobInfo:
        j = job(jid, "a30n1", start=100, **kw)
        return dataclasses.replace(j, name="gpupool-repartition", user="root", reservation="gpupool_day")

    jobs = [
        ours(1, state_reason="Prolog"),  # 120 s in its prolog
        dataclasses.replace(ours(2, state_reason="Prolog"), start_time=150),  # 70 s: not yet
        ours(3),  # running its command
        job(4, "a30n1", start=100, state_reason="Prolog"),  # a user's
        ours(5, state="COMPLETED", state_reason="Prolog"),
        dataclasses.replace(ours(6, state_reason="Prolog"), reservation=""),  # not in one of ours
    ]
    assert stuck_launches(jobs, now=220, timeout_s=120, prefix="gpupool") == (1,)


def test_slurms_gres_count_drain_is_the_switchs_only_on_a_node_of_the_last_run():
    """The same words mean a GPU gone when no switch is behind them (AutoDetect, a GPU off the
    bus): such a node is not usable and never touched; on a node of the last run, switched again."""
    from slurm_gpupool.repartition.rules import node_views
    from slurm_gpupool.slurm.types import NodeInfo

    def drained(name: str) -> NodeInfo:
        return NodeInfo(
            name, "idle", frozenset({"DRAIN"}), "gpu:a100:8", ("layout_night",), "gres/gpu:a100 count too low (7 < 8)"
        )

    views = node_views({"a": drained("a"), "b": drained("b")}, midway=(), last_run=["b"])
    assert (views["a"].usable, views["a"].retry) == (False, False) and "count too low" in views["a"].state
    assert (views["b"].usable, views["b"].retry) == (True, True)


@pytest.mark.parametrize(
    ("reason", "switchs"),
    [
        ("gres/gpu:v100_shared count too low (0 < 4)", True),  # a type's count (seen on 22.05)
        ("gres/gpu count reported lower than configured (4 < 10)", True),  # the total (seen on 24.11)
        ("gres/shard count reported lower than configured (0 < 8)", True),
        ("gres/gpu count reported lower than configured", False),
        ("Not responding", False),
        ("admin: gres/gpu count too low (3 < 4)", False),
    ],
)
def test_slurms_gres_count_drain_in_both_its_wordings(reason, switchs):
    from slurm_gpupool.repartition.rules import switch_gres_drain
    from slurm_gpupool.slurm.types import NodeInfo

    info = NodeInfo("b", "idle", frozenset({"DRAIN"}), "gpu:a30:4", ("layout_night",), reason)
    assert switch_gres_drain(info) is switchs


def on_call(site: Site, call: str, node: str, effect) -> None:
    """Slurm's ``call`` (``drain`` or ``resume``) on ``node`` runs ``effect`` first, which may
    raise (the RPC lost or refused) or crash slurmctld; on other nodes it runs as it is."""
    real = getattr(site.slurm, call)

    def wrapped(nodes, *args):
        nodes = list(nodes)
        if node in nodes:
            effect()
        return real(nodes, *args)

    setattr(site.slurm, call, wrapped)


def fails_once(site: Site, call: str, node: str) -> list[str]:
    """slurmctld gone for one ``call`` of ``node``'s: the RPC is lost ("Connection reset by
    peer"); slurmctld answers again at once.  The calls failed."""
    from slurm_gpupool.errors import SlurmUnavailableError

    lost: list[str] = []

    def once() -> None:
        if not lost:
            lost.append(node)
            raise SlurmUnavailableError(f"{call} {node}", "slurm_update error: Connection reset by peer")

    on_call(site, call, node, once)
    return lost


@pytest.mark.parametrize("call", ["drain", "resume"])
def test_a_drain_or_resume_slurmctld_lost_around_a_nodes_apply_is_made_again_not_a_failure(
    templates, tmp_path: Path, call
):
    """``drain``: seen on 24.11 with slurmctld killed during the drain that follows a node's
    apply: the node was failed with its GPUs already in the new layout and its files still
    the old; Slurm drained it itself, "gres/gpu count reported lower than configured (4 <
    10)", and later runs refused it.  Now it stays applied and the next look drains it.
    ``resume``: a node an earlier run drained (our reason) is resumed before its srun; that
    resume lost failed the node, though nothing had changed on it.  Now its apply is tried
    again after a poll, as when srun started nothing.  Either way the run converges at once."""
    site = busy_site(tmp_path, templates["night"])
    if call == "resume":
        site.slurm.drain(["v100n1"], "gpupool: switching to layout day")
    lost = fails_once(site, call, "v100n1")
    report = repartitioner(site).run("day", SWITCHING)
    assert lost, f"no {call} of v100n1 was made"
    assert report.exit_code == 0, report.to_dict()
    assert {n: r["outcome"] for n, r in report.nodes.items()} == {n: "done" for n in SWITCHING}, report.to_dict()
    assert_converged(site, {n: "day" if n in SWITCHING else "night" for n in site.cfg.all_nodes()})


def test_a_drain_slurm_keeps_refusing_after_an_apply_fails_the_node_after_verify_timeout(templates, tmp_path: Path):
    """slurmctld answers but refuses the drain (``scontrol update`` exits non-zero): tried
    again a poll apart, not in a busy loop, and the node failed once ``verify_timeout`` (10 s
    here) has passed, with why; the other node switches."""
    from slurm_gpupool.errors import SlurmUnavailableError

    site = busy_site(tmp_path, templates["night"])
    refused: list[float] = []

    def refuse() -> None:
        refused.append(site.clock.time())
        raise SlurmUnavailableError("drain v100n1", "slurm_update error: Invalid node state specified")

    on_call(site, "drain", "v100n1", refuse)
    report = repartitioner(site).run("day", SWITCHING)
    assert report.nodes["v100n1"]["outcome"] == "failed", report.to_dict()
    assert "refused its drain for 10 s" in report.nodes["v100n1"]["reason"]
    assert report.nodes["a30n1"]["outcome"] == "done", report.to_dict()
    assert refused[-1] - refused[0] >= 10 and len(refused) <= 10 / 0.05 + 5, (len(refused), refused[-1] - refused[0])


def test_slurmctld_gone_for_good_after_an_apply_stops_the_run_and_the_next_drains_the_node(templates, tmp_path: Path):
    """slurmctld killed right after v100n1's apply and not started again: the drain is tried
    a poll apart for ``verify_timeout``, then the run stops with slurmctld unavailable (the
    node still applied in the journal).  With slurmctld back, the next run drains it and
    converges."""
    from slurm_gpupool.errors import SlurmUnavailableError

    site = busy_site(tmp_path, templates["night"])
    real = site.slurm.drain

    def gone() -> None:
        if not site.slurm.crashes:
            site.slurm.crash_controller(up_again=False)

    on_call(site, "drain", "v100n1", gone)
    with pytest.raises(SlurmUnavailableError):
        repartitioner(site).run("day", SWITCHING)
    site.slurm.drain = real
    site.slurm.crash_controller(up_again=True)
    report = repartitioner(site).run("day", SWITCHING)
    assert report.exit_code == 0, report.to_dict()
    assert_converged(site, {n: "day" if n in SWITCHING else "night" for n in site.cfg.all_nodes()})
