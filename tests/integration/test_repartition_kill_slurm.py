"""The repartitioner killed (kill -9) after each journaled step in turn, in the real
sandbox Slurm: the next run finishes the switch.  A module of its own (about 3 min)
so that pytest-xdist runs it beside the other repartition tests.
"""

from __future__ import annotations

import pytest

from .repartition_support import assert_converged, repartition

pytestmark = pytest.mark.integration

KILL_STEPS = [
    "waiting",
    "reserved",
    "applying",
    "applied",
    "drained",
    "gres_installing",
    "gres_installed",
    "restarting",
    "restarted",
    "verifying",
    "done",
    "others_restarting",
    "others_restarted",
    "finished",
]


def test_killed_at_each_step_the_next_run_converges(night):
    """kill -9 right after each journaled step in turn; the next run finishes the switch.
    The target alternates, so every step is also tried from the other layout."""
    nodes = ["a30n1", "v100n1"]
    rest = {n: "night" for n in night.nodes if n not in nodes}
    for i, step in enumerate(KILL_STEPS):
        target = "day" if i % 2 == 0 else "night"
        killed = repartition(night, "--to", target, "--nodes", ",".join(nodes), env={"SLURM_GPUPOOL_KILL_AT": step})
        assert killed.returncode == -9, (step, killed.stdout, killed.stderr)
        again = repartition(night, "--to", target, "--nodes", ",".join(nodes), "--json")
        assert again.returncode == 0, (step, again.stdout, again.stderr)
        assert_converged(night, {**rest, **{n: target for n in nodes}})
