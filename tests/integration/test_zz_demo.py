"""The README's demo, every step, on this release: ``scripts/demo`` as a user runs it.

It brings up the sandbox a user's demo does (the default root and ports, apart from the
workers'), so it runs as one more module of the release's integration tests: named to be
handed out last but one (before test_zz_down), to the first worker that is free, where it
fills the tail of the run instead of adding its minute and a half after it (#25).  In a
release's container it runs as ``scripts/demo --slurm <release>`` runs it there
(``SLURM_GPUPOOL_DEMO_INSIDE``).  ``scripts/test`` asks for it with
``SLURM_GPUPOOL_DEMO_LOG``, the file its output goes to (and shows); without that variable
it skips, since it would replace a developer's own sandbox at the default root.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slurm_gpupool.sandbox.cluster import Sandbox
from slurm_gpupool.sandbox.container import CONTAINER_ENV

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
STEPS = 12


def test_the_readmes_demo_runs_every_step():
    if os.geteuid() != 0:
        pytest.skip("the demo needs root: the sandbox runs Slurm daemons as root")
    log = os.environ.get("SLURM_GPUPOOL_DEMO_LOG")
    if not log:
        pytest.skip("SLURM_GPUPOOL_DEMO_LOG is not set: the demo replaces the sandbox at the default root")
    # what scripts/test's own environment gives the demo: not pytest's, nor the tests' sandboxes
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "SLURM_GPUPOOL_TEST_")) and k != "SLURM_GPUPOOL_DEMO_LOG"
    }
    if os.environ.get(CONTAINER_ENV):  # inside a release's container: as `scripts/demo --slurm` runs it
        env["SLURM_GPUPOOL_DEMO_INSIDE"] = "1"
    try:
        proc = subprocess.run(
            [str(REPO / "scripts" / "demo")],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=1800,  # a hang, not a measure
            check=False,
        )
    finally:
        Sandbox().down()  # the demo leaves its cluster up for a user; not for the tests
    Path(log).write_text(proc.stdout)
    tail = "\n".join(proc.stdout.splitlines()[-60:])
    assert proc.returncode == 0, f"scripts/demo exited {proc.returncode}:\n{tail}"
    assert f"== {STEPS}. What would" in proc.stdout, tail
    # the replay of the demo's own jobs (live sacct) ordered its queue by the controller's own
    # priority setup and QOS priorities, asked of Slurm (docs/simulate.md): the sandbox's
    assert "priority: priority/multifactor, QOS weight 10000 (scontrol show config)" in proc.stdout, tail
    assert "qos priority: normal 0 (sacctmgr show qos)" in proc.stdout, tail
