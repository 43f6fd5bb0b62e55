"""The repartitioner killed (kill -9) where it leaves Slurm itself half-way (a reservation
made, nodes drained, slurmds or slurmctld stopped), in the real sandbox Slurm of each
release, with jobs running: the next run finishes the switch and no job is lost.  A module
of its own so that pytest-xdist runs it beside the other repartition tests.

The other kill points (``JOURNAL_STEPS``: they change only the journal and the simulated
GPUs, which no release sees differently) are no longer tried here: a run killed after each
of them, and after these, converges in the unit tests on the shipped fake Slurm
(tests/unit/test_repartition_kills.py, both directions, well under a second each), which also checks
that these lists together are every journaled step and restart point.
"""

from __future__ import annotations

import pytest

from .repartition_support import assert_converged, nodes_info, repartition, wait_jobs_done, wait_until

# on one release a commit, in turn (``one_release``: CI's time budget)
pytestmark = [pytest.mark.integration, pytest.mark.one_release]

SLURM_STEPS = [
    "reserved",  # the MAINT reservation made, nothing drained
    "drained",
    "restart:0",  # the switching nodes' slurmds stopped, slurmctld not yet restarted
    "restart:1",  # slurmctld restarted, those slurmds not started again
    "restarted",
    "others:0",  # the unswitched nodes' slurmds stopped (their jobs running), not started again
]


def test_killed_where_slurm_is_half_way_the_next_run_converges(night):
    killed_at_each(night, SLURM_STEPS)


def killed_at_each(night, steps: list[str]) -> None:
    """kill -9 right after each journaled step and restart command in turn; the next run
    finishes the switch.  The target alternates, so every step is also tried from the other
    layout.  A GPU job runs through it all on a node that does not switch (its slurmd is
    restarted and killed around it), and a short one is submitted at each step: none lost."""
    nodes = ["a30n1", "v100n1"]
    rest = {n: "night" for n in night.nodes if n not in nodes}
    gpu = "--gres=gpu:" + next(k for k in nodes_info(night)["h100n1"].gres_counts() if k.startswith("gpu:"))[4:] + ":1"
    # until cancelled below (a limit far beyond the longest run: twelve repartitioner runs on a loaded machine)
    long = submit(night, "-w", "h100n1", gpu, "-t", "600", "--wrap", "sleep 36000")
    shorts = []
    try:
        for i, step in enumerate(steps):
            # (its limit generous: a100n1's slurmd, which reports the job's end, may be stopped a while)
            shorts.append(submit(night, "-w", "a100n1", "-t", "60", "--wrap", "sleep 2"))
            target = "day" if i % 2 == 0 else "night"
            env = {"SLURM_GPUPOOL_KILL_AT": step}
            killed = repartition(night, "--to", target, "--nodes", ",".join(nodes), env=env)
            assert killed.returncode == -9, (step, killed.stdout, killed.stderr)
            again = repartition(night, "--to", target, "--nodes", ",".join(nodes), "--json")
            assert again.returncode == 0, (step, again.stdout, again.stderr)
            assert_converged(night, {**rest, **{n: target for n in nodes}})
            # slurmds restarted last register within seconds (minutes under load)
            wait_until(lambda: all(i.responding for i in nodes_info(night).values()), f"nodes responding after {step}")
            state = night.run(["squeue", "-h", "-j", long, "-o", "%T"]).stdout.strip()
            assert state == "RUNNING", (step, state)
        assert set(wait_jobs_done(night, shorts).values()) == {"COMPLETED"}
    finally:
        night.run(["scancel", long], check=False)


def submit(sb, *args: str) -> str:
    return sb.run(["sbatch", "--parsable", *args]).stdout.strip().split(";")[0]
