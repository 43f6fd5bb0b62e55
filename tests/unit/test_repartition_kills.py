"""A run "killed" (kill -9) right after each journaled step, and after each restart command
(``restart:K``, ``others:K``), then a fresh run: it converges.  Both directions.

The fake Slurm's state is what the killed process left (its reservation, drains, stopped
slurmds, a slurmctld restarted without its slurmds); the journal's kill hook raises
:class:`~slurm_gpupool.slurm.fake.Killed` instead of SIGKILL, and stops every thread of the
process from then on.  Converged: every node in its layout (GPUs, Slurm's GRES and layout
feature), none drained, every slurmd answering, no reservation of ours left, the run
finished, and no job signalled, requeued or lost.  The 6 points where Slurm itself is
left half-way are also tried on real Slurm (tests/integration/test_repartition_kill_slurm.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
from pathlib import Path

import pytest

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.controller.gres_install import render
from slurm_gpupool.repartition import journal
from slurm_gpupool.repartition.journal import Journal
from slurm_gpupool.slurm.fake import Killed
from slurm_gpupool.slurm.types import gres_counts
from tests.integration.test_repartition_kill_slurm import SLURM_STEPS

from .repartition_site import START, KillAt, Site, copy_site, job, repartitioner, site_templates

# The points that change only the journal and the simulated GPUs (no Slurm release sees them
# differently): proven here only.  With SLURM_STEPS, every kill point of a switch.
JOURNAL_STEPS = [
    "waiting",
    "applying",
    "applied",
    "gres_installing",
    "gres_installed",
    "restarting",
    "verifying",
    "done",
    "others_restarting",
    "others_restarted",
    "finished",
]
KILL_POINTS = SLURM_STEPS + JOURNAL_STEPS
SWITCHING = ["a30n1", "v100n1"]  # as on real Slurm: the others do not switch (their slurmds restart)


def test_the_two_lists_are_every_journaled_step_and_restart_once():
    failures = {journal.FAILED, journal.SKIPPED, journal.ROLLED_BACK}  # outcomes no switch reaches here
    journaled = {*journal.NODE_STEPS, *journal.CLUSTER_STEPS} - failures
    assert len(KILL_POINTS) == len(set(KILL_POINTS))
    assert set(KILL_POINTS) == journaled | {"restart:0", "restart:1", "others:0"}


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, Site]:
    return site_templates(tmp_path_factory)


def busy_site(tmp_path: Path, template: Site) -> Site:
    """Every node as in ``template``; a long job runs on h100n1 (which does not switch) and a
    short one holds a30n1 for its first seconds (so a30n1 waits, and switches in a second wave)."""
    site = copy_site(template, tmp_path)
    site.slurm.add_job(job(7, "h100n1", limit_s=3600, start=int(START)))
    site.slurm.add_job(job(8, "a30n1", limit_s=600, start=int(START)), ends_at=START + 3)
    return site


@pytest.mark.parametrize("point", KILL_POINTS)
@pytest.mark.parametrize(("start", "target"), [("night", "day"), ("day", "night")])
def test_killed_right_after_each_step_the_next_run_converges(templates, tmp_path: Path, point, start, target):
    site = busy_site(tmp_path, templates[start])
    kill = KillAt(point)
    with pytest.raises(Killed):
        repartitioner(site, kill=kill).run(target, SWITCHING)
    assert kill.fired
    again = repartitioner(site).run(target, SWITCHING)
    assert again.exit_code == 0, (point, again.to_dict())
    assert_converged(site, {n: target if n in SWITCHING else start for n in site.cfg.all_nodes()})


@pytest.mark.parametrize("point", ["drained", "applied", "gres_installed"])
def test_a_narrower_run_to_another_layout_never_leaves_a_killed_runs_nodes_midway(templates, tmp_path: Path, point):
    """A run killed midway to day, then a run to night of h100n1 alone (``--nodes``, as the
    elastic step's few nodes): it closed the killed run and left a30n1 with day's GPUs and
    night's GRES (or drained, or reserved), and every later run to night called it kept,
    exit 0.  It is refused now, naming the nodes and the run that finishes them, and that
    run converges them."""
    from slurm_gpupool.errors import StateError

    site = busy_site(tmp_path, templates["night"])
    with pytest.raises(Killed):
        repartitioner(site, kill=KillAt(point)).run("day", SWITCHING)
    with pytest.raises(StateError, match=r"unfinished run to layout day left v100n1 midway") as err:
        repartitioner(site).run("night", ["h100n1"])
    assert err.value.hint is not None and "gpupool repartition --to day" in err.value.hint
    assert Journal(Path(site.cfg.paths.controller_dir)).load().unfinished() is not None  # nothing closed
    assert repartitioner(site).run("day", SWITCHING).exit_code == 0
    assert repartitioner(site).run("night").exit_code == 0
    assert_converged(site, dict.fromkeys(site.cfg.all_nodes(), "night"))


def test_a_scheduled_dry_run_after_a_killed_run_plans_as_the_real_run_does(templates, tmp_path: Path):
    """``repartition --scheduled --dry-run``: the due run (to day) would finish the killed
    run's nodes first, so the next layout's reservation ahead is planned as after it, not
    refused for the nodes the killed run left midway."""
    from datetime import datetime

    site = busy_site(tmp_path, templates["night"])
    with pytest.raises(Killed):
        repartitioner(site, kill=KillAt("drained")).run("day", SWITCHING)
    rp = repartitioner(site)
    due = rp.plan("day", ["h100n1"])  # the due run resumes the killed one: no refusal
    rp.prepare("night", datetime.fromtimestamp(site.clock.time() + 7200), ["h100n1"], after=due)


def test_a_narrower_run_may_supersede_a_killed_run_whose_nodes_were_not_touched(templates, tmp_path: Path):
    """Killed once its reservation was made, every node still waiting for its jobs: nothing
    was done to them, so a narrower run to another layout goes ahead and deletes the earlier
    reservation (refusing it would stop the elastic step for nothing)."""
    site = copy_site(templates["night"], tmp_path)
    with pytest.raises(Killed):
        repartitioner(site, kill=KillAt("reserved")).run("day", SWITCHING)
    assert "gpupool_day" in site.slurm.resv
    assert repartitioner(site).run("night", ["h100n1"]).exit_code == 0
    assert not [r for r in site.slurm.resv if r.startswith("gpupool_")], site.slurm.resv
    assert_converged_nodes(site, dict.fromkeys(site.cfg.all_nodes(), "night"))
    assert Journal(Path(site.cfg.paths.controller_dir)).load().unfinished() is None


@pytest.mark.parametrize("point", ["applied", "gres_installed", "verifying"])
def test_a_clock_stepped_back_mid_run_costs_no_busy_loop(templates, tmp_path: Path, point, monkeypatch):
    """NTP steps the clock back 60 s while a node is verified: every note the run wrote then
    looked older than when it took the run, never counted, and was written again at once (a
    loop without a wait, thousands of journal writes; for ever on a clock that does not move
    by itself).  The run takes itself again at the new time and ends as any other."""
    site = copy_site(templates["night"], tmp_path)
    stepped = []

    def step_back(step: str) -> None:
        if step == point and not stepped:
            stepped.append(step)
            site.clock.t -= 60.0

    writes = []
    save = Journal._save

    def counted(self: Journal, event: dict) -> None:
        writes.append(event)
        assert len(writes) < 500, "a loop without a wait: " + str(event)  # it ran for ever before the fix
        save(self, event)

    monkeypatch.setattr(Journal, "_save", counted)
    assert repartitioner(site, kill=step_back).run("day", ["v100n1"]).exit_code == 0
    assert stepped == [point]
    lines = (Path(site.cfg.paths.controller_dir) / "journal.log").read_text().splitlines()
    assert len(lines) < 60 and any('"retaken"' in line for line in lines), len(lines)
    assert_converged_nodes(site, {"v100n1": "day"})


def assert_converged_nodes(site: Site, layouts: dict[str, str]) -> None:
    """``layouts``' nodes: GPUs and Slurm's GRES in their layout, not drained."""
    from slurm_gpupool.cli.main import main

    infos = site.slurm.nodes()
    for node, layout in layouts.items():
        with contextlib.redirect_stdout(io.StringIO()):
            argv = ["--node", node, "--sim-dir", str(site.sim), "--config", str(site.config_path)]
            assert main([*argv, "node", "assert", layout]) == 0, node
        (expected,) = render(site.cfg, [node], layout).nodes
        assert infos[node].gres_counts() == gres_counts(expected.gres_value()) and not infos[node].drained


def waves_of_one(tmp_path: Path, template: Site) -> tuple[Site, PoolConfig]:
    """Both switching nodes idle (the long job runs on h100n1), in waves of one node
    (``repartition.wave_size``): the second applies only after the first is through."""
    site = copy_site(template, tmp_path)
    site.slurm.add_job(job(7, "h100n1", limit_s=3600, start=int(START)))
    return site, dataclasses.replace(site.cfg, repartition=dataclasses.replace(site.cfg.repartition, wave_size=1))


# the steps a run in two waves reaches once (the run's own), the others once a wave
ONCE_A_RUN = {"reserved", "others:0", "others_restarting", "others_restarted", "finished"}
IN_WAVES = [(point, 1) for point in KILL_POINTS] + [(point, 2) for point in KILL_POINTS if point not in ONCE_A_RUN]


@pytest.mark.parametrize(("point", "nth"), IN_WAVES)
def test_in_waves_of_one_node_killed_right_after_each_step_the_next_run_converges(
    templates, tmp_path: Path, point, nth
):
    """Killed at the first or the second wave's step (``nth``): the run after it finishes."""
    site, cfg = waves_of_one(tmp_path, templates["night"])
    kill = KillAt(point, nth)
    with pytest.raises(Killed):
        repartitioner(site, cfg, kill=kill).run("day", SWITCHING)
    again = repartitioner(site, cfg)
    assert again.run("day", SWITCHING).exit_code == 0, point
    assert_converged(site, {n: "day" if n in SWITCHING else "night" for n in site.cfg.all_nodes()})


def test_in_waves_of_one_node_each_wave_restarts_slurmctld_and_the_second_applies_after_the_first(
    templates, tmp_path: Path
):
    site, cfg = waves_of_one(tmp_path, templates["night"])
    rp = repartitioner(site, cfg)
    report = rp.run("day", SWITCHING)
    assert report.exit_code == 0 and report.to_dict()["waves"] == 2
    first, second = SWITCHING
    assert rp.restarter.log[:6] == [  # type: ignore[attr-defined]
        ["stop-slurmd", first],
        ["restart-slurmctld"],
        ["start-slurmd", first],
        ["stop-slurmd", second],
        ["restart-slurmctld"],
        ["start-slurmd", second],
    ]
    # then the slurmds that did not switch, for the new slurm.conf (restart_unswitched)
    assert ["restart-slurmctld"] not in rp.restarter.log[6:]  # type: ignore[attr-defined]
    assert_converged(site, {n: "day" if n in SWITCHING else "night" for n in site.cfg.all_nodes()})


def test_an_unkilled_run_passes_every_kill_point(templates, tmp_path: Path):
    """The points above are all reached by one run of this scenario (none is tried in vain)."""
    site = busy_site(tmp_path, templates["night"])
    seen: list[str] = []
    report = repartitioner(site, kill=seen.append).run("day", SWITCHING)  # type: ignore[arg-type]
    assert report.exit_code == 0 and report.waves == 2  # a30n1 was busy: it applied after the first wave
    assert set(KILL_POINTS) <= set(seen), set(KILL_POINTS) - set(seen)


def test_a_journal_the_earlier_executor_wrote_is_resumed(templates, tmp_path: Path):
    """The journal's format is the earlier executor's (same keys; it wrote no notes of waits
    and no ``taken_epoch``): a run it left at ``drained`` is finished by this one."""
    site = busy_site(tmp_path, templates["night"])
    with pytest.raises(Killed):
        repartitioner(site, kill=KillAt("drained")).run("day", SWITCHING)
    path = Path(site.cfg.paths.controller_dir) / "journal.json"
    j = Journal(path.parent).load()
    news = {"taken_epoch", "refused"}
    notes = {"signalled_at", "requeue_at", "requeued_at", "gpus_busy", "gpus_busy_at", "apply_failed"}
    notes |= {"apply_failed_at", "seen_switched_at", "resumed_at", "revert", "expected"}
    j.data["run"] = {k: v for k, v in j.data["run"].items() if k not in news}
    j.data["nodes"] = {n: {k: v for k, v in r.items() if k not in notes} for n, r in j.data["nodes"].items()}
    j._save({"test": "as the earlier executor left it"})
    assert {r["step"] for r in j.data["nodes"].values()} == {journal.WAITING, journal.DRAINED}
    rp = repartitioner(site)
    again = rp.run("day", SWITCHING)
    assert again.exit_code == 0 and any("resuming the unfinished run" in m for m in rp.said)
    assert_converged(site, {n: "day" if n in SWITCHING else "night" for n in site.cfg.all_nodes()})


def assert_converged(site: Site, layouts: dict[str, str]) -> None:
    from slurm_gpupool.cli.main import main

    slurm = site.slurm
    infos = slurm.nodes()
    for node, layout in layouts.items():
        with contextlib.redirect_stdout(io.StringIO()):
            argv = ["--node", node, "--sim-dir", str(site.sim), "--config", str(site.config_path)]
            assert main([*argv, "node", "assert", layout]) == 0, node  # its GPUs
        (expected,) = render(site.cfg, [node], layout).nodes
        info = infos[node]
        assert info.gres_counts() == gres_counts(expected.gres_value()), (node, info.gres)
        assert info.layout == layout and not info.drained and info.responding, (node, info)
    assert not [r for r in slurm.resv if r.startswith("gpupool_")], slurm.resv
    run = Journal(Path(site.cfg.paths.controller_dir)).load().run
    assert run is not None and journal.FINISHED in run["steps"]
    assert [j.job_id for j in slurm.jobs()] == [7]  # the long job runs on; the short one ended by itself
    assert not [c for c in slurm.calls if c[0] in ("signal", "requeue")]
