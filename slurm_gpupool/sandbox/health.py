"""Does each daemon answer, and have the nodes registered?  Asked the way an admin would.

A live pid or an open port is not enough: the kernel completes a connection to a hung
daemon's listening socket, and a restarted slurmctld lists nodes it has not heard from.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.sandbox import procs
from slurm_gpupool.sandbox.client import SlurmCommand
from slurm_gpupool.sandbox.daemons import DaemonSpec

# one probe's timeout: a running daemon that misses every probe for lifecycle.ANSWER_GRACE_S
# is restarted by `up`
DAEMON_ANSWER_S = 10


def ctld_ready(slurm: SlurmCommand) -> bool:
    """``scontrol ping`` says UP (a bare TCP probe would log errors in slurmctld.log)."""
    try:
        proc = slurm("scontrol", "ping", timeout_s=5)
    except SlurmUnavailableError:  # timed out: not ready (wait_until checks the pid and the deadline)
        return False
    return proc.returncode == 0 and "is UP" in proc.stdout


def dbd_answers(slurm: SlurmCommand) -> bool:
    """slurmdbd answers a query (a TCP probe is not enough: the kernel completes a
    connection to a hung or stopped daemon's listening socket)."""
    try:
        proc = slurm("sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster", timeout_s=DAEMON_ANSWER_S)
    except SlurmUnavailableError:
        return False
    return proc.returncode == 0


def node_states(slurm: SlurmCommand) -> dict[str, dict[str, str]]:
    """``sinfo -N -h -o '%N|%T|%G|%E'`` as node → {state, gres, reason}; empty if slurmctld is down."""
    proc = slurm("sinfo", "-N", "-h", "-o", "%N|%T|%G|%E", timeout_s=10)
    if proc.returncode != 0:
        return {}
    out = {}
    for line in proc.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 4:
            out[parts[0]] = {"state": parts[1], "gres": parts[2], "reason": parts[3]}
    return out


def slurmd_start_times(slurm: SlurmCommand) -> dict[str, float]:
    """Node → ``SlurmdStartTime`` (epoch seconds) from ``scontrol -o show node``."""
    proc = slurm("scontrol", "-o", "show", "node", timeout_s=10)
    out: dict[str, float] = {}
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        with contextlib.suppress(KeyError, ValueError):
            stamp = datetime.datetime.strptime(fields["SlurmdStartTime"], "%Y-%m-%dT%H:%M:%S")
            out[fields["NodeName"]] = stamp.timestamp()
    return out


def wait_nodes_registered(
    slurm: SlurmCommand,
    nodes: list[str],
    started: dict[str, int],
    started_at: Mapping[str, float],
    slurmd_spec: Callable[[str], DaemonSpec],
    log_dir: Path,
    progress: Callable[[str], None],
    timeout_s: float | None = None,
) -> None:
    """Until slurmctld sees every node registered: a state without ``*`` and not UNKNOWN/DOWN.

    (A restarted slurmctld shows recovered nodes as UNKNOWN until they register,
    and schedules nothing on them before.)  ``started`` maps the nodes whose slurmd was
    just started to its pid, ``started_at`` to its wall start time: fails fast if one dies.
    """
    progress(f"waiting for {len(nodes)} nodes to register")
    # 128 slurmds registering on two cores take longer than 5 do, and a poll of sinfo and
    # scontrol every 0.25 s would cost slurmctld time they need (#29): both grow with the nodes
    timeout_s = timeout_s if timeout_s is not None else 60 + 0.5 * len(nodes)
    interval_s = min(1.0, 0.25 + len(nodes) / 128)
    last: dict[str, dict[str, str]] = {}
    t0_wall = min(started_at.get(n, time.time()) for n in started) if started else time.time()

    def ready() -> bool:
        nonlocal last
        for node, pid in started.items():
            if not procs.is_alive(pid):
                spec = slurmd_spec(node)
                raise SlurmUnavailableError(
                    f"{spec.name} of the sandbox", "the process exited" + procs.log_excerpt(spec.logs)
                )
        last = node_states(slurm)
        if not all(
            n in last
            and not last[n]["state"].endswith("*")
            and not last[n]["state"].startswith(("unknown", "down", "future"))
            for n in nodes
        ):
            return False
        if not started:
            return True
        # a restarted slurmd has registered once slurmctld shows its new start time
        since = slurmd_start_times(slurm)
        return all(since.get(n, 0) >= int(t0_wall) for n in started)

    try:
        procs.wait_until(ready, what="sandbox nodes", timeout_s=timeout_s, interval_s=interval_s)
    except SlurmUnavailableError as e:
        if e.what != "sandbox nodes":
            raise
        states = ", ".join(f"{n}={last.get(n, {}).get('state', 'missing')}" for n in nodes)
        bad = [n for n in nodes if n not in last or last[n]["state"].startswith(("unknown", "down"))]
        excerpt = "".join(procs.log_excerpt([log_dir / f"slurmd-{n}.log"]) for n in bad[:1])
        excerpt += procs.log_excerpt([log_dir / "slurmctld.log"])
        raise SlurmUnavailableError("sandbox nodes", f"not all nodes registered: {states}" + excerpt, e.hint) from None
