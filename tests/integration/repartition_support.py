"""What the repartitioner's integration tests share: running it, reading Slurm, convergence;
and what every integration test needs on a loaded machine: waiting on Slurm's evidence
rather than on a fixed time (#25).  Up to nine sandbox clusters share two cores in CI, so
a step of a test may take many times what it takes on an idle machine: a test waits for
what it expects with a deadline that only a failure reaches (:data:`SLURM_WAIT_S`), lets a
job end when the test decides (:class:`Gate`), and takes "Slurm did not start it" from
slurmctld's own counters (:func:`state_after_scheduling`), never from a sleep."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from slurm_gpupool.config.load import load_config
from slurm_gpupool.controller.gres_install import render
from slurm_gpupool.hw import open_backend
from slurm_gpupool.node.apply import assert_node
from slurm_gpupool.slurm.parse import parse_reservations, parse_sinfo_json
from slurm_gpupool.slurm.types import gres_counts

GPUPOOL = [sys.executable, "-m", "slurm_gpupool.cli.main"]
# How long a test waits for something Slurm does (a job to start or end, a node to register):
# minutes, though it takes seconds on an idle machine. Only a failure waits it out.
SLURM_WAIT_S = 300.0
T = TypeVar("T")


def repartition(sb, *args: str, env: dict[str, str] | None = None, timeout: float = 600):
    return sb.run([*GPUPOOL, "repartition", *args], timeout=timeout, check=False, env={**sb.env, **(env or {})})


class Background:
    """A repartitioner run in the background, its output in files (a pipe could fill while
    the test waits on something else)."""

    def __init__(self, sb, tmp: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.out, self.err = (tmp / "run.out").open("w+"), (tmp / "run.err").open("w+")
        argv = [*GPUPOOL, "repartition", *args]
        self.proc = subprocess.Popen(argv, env={**sb.env, **(env or {})}, stdout=self.out, stderr=self.err, text=True)

    def wait(self, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        rc = self.proc.wait(timeout=timeout)
        self.out.seek(0), self.err.seek(0)
        return subprocess.CompletedProcess(self.proc.args, rc, self.out.read(), self.err.read())

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:  # the test failed while it ran: no run left holding the lock
            self.proc.kill()
            self.proc.wait()
        self.out.close(), self.err.close()


def report_of(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def nodes_info(sb) -> dict:
    return parse_sinfo_json(sb.run(["sinfo", "--json"]).stdout)


def our_reservations(sb) -> dict:
    out = sb.run(["scontrol", "-o", "show", "reservation"]).stdout
    return {k: v for k, v in parse_reservations(out).items() if k.startswith("gpupool_")}


def reserved(sb, reservation: str, node: str) -> bool:
    """``node`` is in our reservation ``reservation`` (a run under way has reserved it)."""
    resv = our_reservations(sb).get(reservation)
    return resv is not None and node in resv.nodes


def assert_converged(sb, layouts: dict[str, str]) -> None:
    """Each node: GPUs in its layout, Slurm's GRES those of the layout, the layout feature, not
    drained; no reservation of ours; the journal's run finished.

    The GPUs are compared in this process, by the function ``gpupool node assert`` runs
    (``node_matches``): a command a node cost about 0.3 s of CPU, and CI ran over a hundred
    of them a release on its two cores.  The command itself is tested where it is the subject
    (test_layouts_sandbox.py, test_ansible.py)."""
    cfg = load_config(sb.root / "etc" / "gpupool.yaml")
    infos = nodes_info(sb)
    for node, layout in layouts.items():
        differs = node_matches(cfg, node, layout)  # (this module's asserts are not rewritten: say it all)
        assert not differs, f"{node} does not match layout {layout}: " + "; ".join(differs)
        (expected,) = render(cfg, [node], layout).nodes
        info = infos[node]
        assert gres_counts(info.gres) == gres_counts(expected.gres_value()), (node, info.gres)
        assert info.layout == layout and not info.drained, (node, info.features, info.reason)
    assert our_reservations(sb) == {}
    path = sb.root / "controller" / "journal.json"
    if path.exists():  # no run yet on a fresh sandbox already in its layouts
        assert "finished" in json.loads(path.read_text())["run"]["steps"]


def node_matches(cfg, node: str, layout: str) -> list[str]:
    """What ``gpupool --node NODE node assert LAYOUT`` prints for each GPU that differs from
    the layout (``nvidia-smi mig -lgi -lci`` against it), read in this process."""
    with open_backend(node, cfg.sim_dir) as gpu:
        return assert_node(cfg, layout, gpu.inventory())


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


def wait_jobs_done(sb, jobs: list[str], timeout: float = SLURM_WAIT_S) -> dict[str, str]:
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


def job_files(out: Path) -> list[str]:
    """sbatch's ``-o OUT -e OUT.err``: a job's stdout holds its own lines only.  Slurm writes
    notes of its own into a batch job's stderr ("Prolog hung on node N" once a Prolog outlasts
    MessageTimeout - 2 s on a loaded machine; "CANCELLED"; what `scontrol notify` sends)."""
    return ["-o", str(out), "-e", f"{out}.err"]


def text_of(path: Path) -> str:
    """A file's text, empty until it exists (a job's output before its step starts)."""
    return path.read_text() if path.exists() else ""


def wait_until(pred: Callable[[], T], what: str, timeout: float = SLURM_WAIT_S, interval: float = 0.5) -> T:
    """``pred()``'s first truthy value, asked every ``interval`` s; a failure after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (got := pred()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return got


@dataclass(frozen=True)
class Sdiag:
    """What slurmctld counts (``sdiag``) that shows it has done something: passes of its main
    scheduler and of its backfill, and node registrations processed.  The counts restart
    from 0 with slurmctld (and at midnight UTC): ``since``, their start, tells."""

    since: str
    main: int
    backfill: int
    registrations: int

    @classmethod
    def read(cls, sb) -> Sdiag | None:
        """Now; None while slurmctld does not answer (a restart, a reconfigure's re-exec)."""
        proc = sb.run(["sdiag"], check=False)
        since = re.search(r"^Data since\s+(.+)$", proc.stdout, re.M)
        main_part = proc.stdout.partition("Main schedule statistics")[2].partition("Backfilling stats")[0]
        main = re.search(r"Total cycles:\s*(\d+)", main_part)
        backfill = re.search(r"Total cycles:\s*(\d+)", proc.stdout.partition("Backfilling stats")[2])
        if proc.returncode != 0 or since is None or main is None or backfill is None:
            return None
        reg = re.search(r"MESSAGE_NODE_REGISTRATION_STATUS\s*\(\s*\d+\)\s*count:(\d+)", proc.stdout)
        return cls(since[1].strip(), int(main[1]), int(backfill[1]), int(reg[1]) if reg else 0)

    def grown(self, before: Sdiag) -> Sdiag:
        """What was counted between ``before`` and this reading (all of it after a restart)."""
        if self.since != before.since:
            return self
        return Sdiag(self.since, self.main - before.main, self.backfill - before.backfill,
                     self.registrations - before.registrations)  # fmt: skip


def sdiag_now(sb) -> Sdiag:
    return wait_until(lambda: Sdiag.read(sb), "slurmctld to answer sdiag")


def job_state(sb, job: str) -> tuple[str, str]:
    """(state, reason) as squeue shows them, or the state accounting recorded once squeue
    has forgotten the job."""
    shown = sb.run(["squeue", "-h", "-j", job, "-o", "%T|%r"], check=False).stdout.strip()
    if shown:
        state, _, reason = shown.partition("|")
        return state, reason
    return sacct_states(sb, [job]).get(job, "").split(" ")[0], ""


def state_after_scheduling(sb, job: str, passes: int = 2) -> tuple[str, str]:
    """(state, reason) of ``job`` once it has left PENDING, or once slurmctld's main scheduler
    and its backfill have each counted ``passes`` more passes with it still pending: a pass
    that ended after the call began after it (``passes`` 2 at least), so Slurm had its
    chance to start the job and did not, and the reason says why.  Call it after the
    submission (or the change) whose effect is asked about; a fixed sleep can only guess
    how long the scheduler takes on a loaded machine."""
    before = sdiag_now(sb)

    def settled() -> tuple[str, str] | None:
        state, reason = job_state(sb, job)
        if state != "PENDING":
            return state, reason
        now = Sdiag.read(sb)
        done = now is not None and min(now.grown(before).main, now.grown(before).backfill) >= passes
        return (state, reason) if done else None

    return wait_until(settled, f"job {job} to start, or slurmctld's schedulers to pass over it {passes} times")
