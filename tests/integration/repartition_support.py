"""What the repartitioner's integration tests share: running it, reading Slurm, convergence."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from slurm_gpupool.config.load import load_config
from slurm_gpupool.controller.gres_install import render
from slurm_gpupool.slurm.parse import parse_reservations, parse_sinfo_json
from slurm_gpupool.slurm.types import gres_counts

GPUPOOL = [sys.executable, "-m", "slurm_gpupool.cli.main"]


def repartition(sb, *args: str, env: dict[str, str] | None = None, timeout: float = 600):
    return sb.run([*GPUPOOL, "repartition", *args], timeout=timeout, check=False, env={**sb.env, **(env or {})})


def report_of(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def nodes_info(sb) -> dict:
    return parse_sinfo_json(sb.run(["sinfo", "--json"]).stdout)


def our_reservations(sb) -> dict:
    out = sb.run(["scontrol", "-o", "show", "reservation"]).stdout
    return {k: v for k, v in parse_reservations(out).items() if k.startswith("gpupool_")}


def assert_converged(sb, layouts: dict[str, str]) -> None:
    """Each node: GPUs in its layout (node assert), Slurm's GRES those of the layout, the layout
    feature, not drained; no reservation of ours; the journal's run finished."""
    cfg = load_config(sb.root / "etc" / "gpupool.yaml")
    infos = nodes_info(sb)
    for node, layout in layouts.items():
        sb.gpupool("--node", node, "node", "assert", layout)
        (expected,) = render(cfg, [node], layout).nodes
        info = infos[node]
        assert gres_counts(info.gres) == gres_counts(expected.gres_value()), (node, info.gres)
        assert info.layout == layout and not info.drained, (node, info.features, info.reason)
    assert our_reservations(sb) == {}
    path = sb.root / "controller" / "journal.json"
    if path.exists():  # no run yet on a fresh sandbox already in its layouts
        assert "finished" in json.loads(path.read_text())["run"]["steps"]


def sacct_states(sb, jobs: list[str]) -> dict[str, str]:
    out = sb.run(["sacct", "-X", "-n", "-P", "-j", ",".join(jobs), "-o", "JobID,State"]).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if line)


def never_requeued(sb, jobs: list[str]) -> dict[str, list[str]]:
    """Every run of each job (``sacct -D``: a requeued job shows each attempt, so a job
    killed, requeued and then completed is not taken for one that ran through)."""
    out = sb.run(["sacct", "-D", "-X", "-n", "-P", "-j", ",".join(jobs), "-o", "JobID,State"]).stdout
    runs: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line:
            job, state = line.split("|", 1)
            runs.setdefault(job, []).append(state.split(" ")[0])
    return runs


def wait_jobs_done(sb, jobs: list[str], timeout: float = 240) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = sacct_states(sb, jobs)
        if len(states) == len(jobs) and all(s not in ("PENDING", "RUNNING", "COMPLETING") for s in states.values()):
            return states
        time.sleep(2)
    raise AssertionError(f"jobs not done: {states}")


class Gate:
    """A job that runs until the test opens its gate, not for a fixed time: on a loaded
    machine a test's own steps can outlast any ``sleep N`` and the job would end too soon."""

    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / f"gate-{name}"

    def wrap(self) -> str:
        return f"while [ ! -e {self.path} ]; do sleep 0.5; done"

    def open(self) -> None:
        self.path.touch()
