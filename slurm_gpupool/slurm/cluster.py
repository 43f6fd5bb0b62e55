"""What the repartitioner asks of and does to Slurm, from the controller.

Reads: nodes (``sinfo --json``), jobs (``squeue --json``), reservations
(``scontrol -o show reservation``), a partition's ``MaxTime``
(``scontrol -o show partition``) and ``scontrol ping``.  Acts: drain and resume
(``scontrol update nodename=...``), reservations (``scontrol create/update/delete
reservation``), ``srun`` inside a reservation, job signal and requeue.

Parsers are pure functions over the commands' text, tested on output recorded
from the sandbox on each supported release (``tests/fixtures/slurm/<series>/``);
what differs between data parser versions is read in :mod:`.json_output`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from slurm_gpupool.core.policy.durations import parse_slurm_time_s
from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.slurm.parse import (
    parse_one_line,
    parse_reservations,
    parse_sinfo_json,
    parse_squeue_json,
    parse_will_run,
    slurm_time,
)
from slurm_gpupool.slurm.runner import Result, SlurmRunner, slurm_version, standard_times
from slurm_gpupool.slurm.types import JobInfo, NodeInfo, Reservation, WillRun, hostlist
from slurm_gpupool.slurm.versions import restart_crashes_on_finished_shard_jobs

READ_ATTEMPTS = 3
# what Slurm's clients print when a connection to slurmctld failed midway (not a refusal)
TRANSIENT = ("Connection reset by peer", "Socket timed out", "Resource temporarily unavailable")


def lost_midway(returncode: int, stderr: str) -> bool:
    """A Slurm client that failed because it lost slurmctld midway (``TRANSIENT``), not on a
    refusal: a query that failed so may be asked again."""
    return returncode != 0 and any(t in stderr for t in TRANSIENT)


def _controller_down(stderr: str) -> bool:
    """sbatch could not ask slurmctld at all (not a refusal of the job)."""
    return any(t in stderr for t in ("Unable to contact slurm controller", "Could not establish a configuration"))


class SlurmCluster:
    """The controller-side Slurm operations, over an injectable command runner."""

    def __init__(self, runner: SlurmRunner | None = None) -> None:
        self.runner = runner or SlurmRunner()

    def _run(self, argv: Sequence[str], what: str, timeout_s: float | None = None) -> Result:
        return self.runner.run(argv, timeout_s=timeout_s).check(what)

    def _read(self, argv: Sequence[str], what: str) -> Result:
        """A query (sinfo, squeue, scontrol show), asked again when slurmctld dropped the
        connection: a busy slurmctld (24.11 right after a restart) resets one now and then,
        and one lost answer must not fail a node's switch."""
        r = self.runner.run(argv)
        for attempt in range(1, READ_ATTEMPTS):
            if not lost_midway(r.returncode, r.stderr):
                break
            time.sleep(attempt)
            r = self.runner.run(argv)
        return r.check(what)

    # -- reading -------------------------------------------------------------------------

    def nodes(self) -> dict[str, NodeInfo]:
        """``sinfo --json``."""
        return parse_sinfo_json(self._read(["sinfo", "--json"], "sinfo --json").stdout)

    def jobs(self) -> list[JobInfo]:
        """``squeue --json --states=all``: every user's jobs, the finished ones slurmctld still
        remembers included (22.05 lists them anyway, 24.11 only with ``--states=all``)."""
        return parse_squeue_json(self._read(["squeue", "--json", "--states=all"], "squeue --json").stdout)

    def reservations(self) -> dict[str, Reservation]:
        """``scontrol -o show reservation``."""
        return parse_reservations(self._read(["scontrol", "-o", "show", "reservation"], "show reservation").stdout)

    def partition_max_time_s(self, partition: str | None) -> int | None:
        """The partition's ``MaxTime`` (the default partition if None); None when UNLIMITED."""

        out = self._read(["scontrol", "-o", "show", "partition"], "show partition").stdout
        for line in out.splitlines():
            f = parse_one_line(line)
            if (partition and f.get("PartitionName") == partition) or (not partition and f.get("Default") == "YES"):
                return parse_slurm_time_s(f.get("MaxTime", "UNLIMITED"))
        raise SlurmUnavailableError(f"partition {partition or '(default)'}", "not found in scontrol show partition")

    def config(self) -> dict[str, str]:
        """``scontrol show config`` as key → value (``MinJobAge`` → ``300 sec``)."""
        out = self._run(["scontrol", "show", "config"], "show config").stdout
        pairs = (line.partition("=") for line in out.splitlines())
        return {k.strip(): v.strip() for k, sep, v in pairs if sep and k.strip() and " " not in k.strip()}

    def version(self) -> tuple[int, int, int]:

        return slurm_version(self.runner)

    def await_forgotten_shard_jobs(
        self, nodes: Iterable[str], progress: Callable[[str], None], poll_s: float = 1.0
    ) -> list[int]:
        """Before a slurmctld restart with new GRES for ``nodes``: on releases where it is
        unsafe (:func:`~slurm_gpupool.slurm.versions.restart_crashes_on_finished_shard_jobs`),
        wait until slurmctld has forgotten the finished shard jobs of those nodes.

        It forgets a job MinJobAge after the job ended (300 s by default); the wait is
        bounded by that plus two minutes.  Returns the jobs still remembered then (the
        caller restarts anyway, with a warning)."""

        changing = set(nodes)
        if not changing or not restart_crashes_on_finished_shard_jobs(self.version()):
            return []

        def remembered() -> list[int]:
            return [j.job_id for j in self.jobs() if j.finished and j.uses_shards and j.nodes & changing]

        found = remembered()
        if not found:
            return []
        age = self.config().get("MinJobAge", "300").split()[0]
        limit_s = (int(age) if age.isdigit() else 300) + 120
        progress(
            f"waiting up to {limit_s} s until slurmctld forgets finished shard job(s) "
            f"{', '.join(map(str, found))} (MinJobAge): restarting it before then crashes this Slurm release"
        )
        deadline = time.monotonic() + limit_s
        while found and time.monotonic() < deadline:
            time.sleep(poll_s)
            found = remembered()
        if found:
            progress(f"warning: slurmctld still remembers shard job(s) {', '.join(map(str, found))}; restarting")
        return found

    def will_run(self, argv: Sequence[str]) -> WillRun:
        """``sbatch --test-only ARGV``: when and where Slurm would start the job now (nothing is
        submitted; job_submit.lua runs as for a real submission).  Run with
        ``SLURM_TIME_FORMAT=standard`` so the time reads the same whatever the caller set."""
        runner = standard_times(self.runner) if isinstance(self.runner, SlurmRunner) else self.runner
        r = runner.run(["sbatch", "--test-only", *argv], timeout_s=30)
        answer = parse_will_run(r.stderr + r.stdout)
        if answer.start is None and _controller_down(r.stderr):
            r.check("sbatch --test-only")
        return answer

    def ping(self) -> bool:
        """``scontrol ping`` says the primary controller is UP."""
        try:
            r = self.runner.run(["scontrol", "ping"], timeout_s=10)
        except SlurmUnavailableError:
            return False
        return r.returncode == 0 and "is UP" in r.stdout

    # -- acting --------------------------------------------------------------------------

    def drain(self, nodes: Iterable[str], reason: str) -> None:
        """``scontrol update nodename=... state=drain reason=...``."""
        hl = hostlist(nodes)
        if hl:
            self._run(["scontrol", "update", f"nodename={hl}", "state=drain", f"reason={reason}"], f"drain {hl}")

    def resume(self, nodes: Iterable[str]) -> None:
        """``scontrol update nodename=... state=resume``; a node not drained is left as it is."""
        hl = hostlist(nodes)
        if hl:
            r = self.runner.run(["scontrol", "update", f"nodename={hl}", "state=resume"])
            if r.returncode != 0 and "Invalid node state specified" not in r.stderr:
                r.check(f"resume {hl}")

    def create_reservation(self, name: str, nodes: Iterable[str], start: datetime | None, duration_s: int) -> None:
        """A MAINT reservation for root that ignores running jobs (they finish; new ones wait)."""
        argv = [
            "scontrol",
            "create",
            "reservation",
            f"ReservationName={name}",
            f"StartTime={slurm_time(start) if start else 'now'}",
            f"Duration={max(1, duration_s // 60)}",
            f"Nodes={hostlist(nodes)}",
            "Flags=MAINT,IGNORE_JOBS",
            "Users=root",
        ]
        self._run(argv, f"create reservation {name}")

    def update_reservation(
        self,
        name: str,
        nodes: Iterable[str] | None = None,
        start: datetime | None = None,
        duration_s: int | None = None,
    ) -> None:
        argv = ["scontrol", "update", f"ReservationName={name}"]
        if nodes is not None:
            argv.append(f"Nodes={hostlist(nodes)}")
        if start is not None:
            argv.append(f"StartTime={slurm_time(start)}")
        if duration_s is not None:
            argv.append(f"Duration={max(1, duration_s // 60)}")
        self._run(argv, f"update reservation {name}")

    def delete_reservation(self, name: str) -> None:
        r = self.runner.run(["scontrol", "delete", f"ReservationName={name}"])
        if r.returncode != 0 and "not exist" not in (r.stderr + r.stdout).lower() and "invalid" not in r.stderr.lower():
            r.check(f"delete reservation {name}")

    def srun(self, node: str, reservation: str, argv: Sequence[str], timeout_s: float, job_name: str) -> Result:
        """``srun --reservation=R -w NODE -N1 -n1 -J NAME ARGV``: run ARGV on the node, as the
        caller (root).  The name is how the repartitioner knows its own jobs: one that outlives
        its srun (slurmctld killed after the srun ended, before it saved the end: the job comes
        back RUNNING, ``Reason=Prolog``, and no InactiveLimit ends it) is cancelled."""
        cmd = [
            "srun",
            f"--reservation={reservation}",
            f"--nodelist={node}",
            "--nodes=1",
            "--ntasks=1",
            "--immediate=60",
            f"--job-name={job_name}",
            "--quiet",
            *argv,
        ]
        return self.runner.run(cmd, timeout_s=timeout_s)

    def cancel_job(self, job_id: int) -> None:
        """``scancel JOB`` (a job already gone is no error)."""
        r = self.runner.run(["scancel", str(job_id)])
        if r.returncode != 0 and "invalid job id" not in r.stderr.lower():
            r.check(f"scancel {job_id}")

    def signal_job(self, job_id: int, signal: str) -> None:
        """``scancel --batch --signal=SIG JOB``: the checkpoint hint before a requeue."""
        self.runner.run(["scancel", "--batch", f"--signal={signal}", str(job_id)])

    def requeue(self, job_id: int) -> Result:
        """``scontrol requeue JOB``."""
        return self.runner.run(["scontrol", "requeue", str(job_id)])

    def release(self, job_id: int, priority: int | None = None) -> Result:
        """``scontrol release JOB`` (and ``update jobid=JOB priority=P`` if given)."""
        r = self.runner.run(["scontrol", "release", str(job_id)])
        if r.returncode == 0 and priority:
            r = self.runner.run(["scontrol", "update", f"jobid={job_id}", f"priority={priority}"])
        return r
