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
