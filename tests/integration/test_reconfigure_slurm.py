"""#17: what `scontrol reconfigure` alone (no daemon restart) does with a node's new GRES,
on each Slurm release, measured on the sandbox (docs/elastic.md, "What each Slurm release
allows for a node's GRES change").

The node's GPUs change as the repartitioner changes them (``gpupool --node N node apply``,
then ``gpupool gres install`` writes gres.conf and the node lines), and then only
``scontrol reconfigure`` runs:

1. a100n2 night -> day (gpu:a100:8 -> 38 records: 32 1g.5gb, 2 3g.20gb, 2 2g.10gb and
   GPUs 6-7 whole) while a job runs on another node (a100n1);
2. a100n2 day -> night (38 -> 8 records) while a job runs on a100n2's GPU 6, which the
   switch leaves whole (``node apply``: "GPU 6: unchanged"). The sandbox's layouts have no
   pair in which a GPU keeps its GRES *record*: gres.conf lists records by type, so whole
   GPU 6 is record 36 in day and record 6 in night. This is the closest case, and the one
   an elastic per-GPU change would meet on these layouts.

What each release did is asserted exactly (the measurements are cited where they are
asserted). The test ends with the node back in night by the ordinary restart sequence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from slurm_gpupool.config.load import load_config
from slurm_gpupool.controller.gres_install import render
from slurm_gpupool.slurm.types import gres_counts

from .conftest import transient
from .repartition_support import (
    SLURM_WAIT_S,
    Gate,
    Sdiag,
    job_state,
    sdiag_now,
    state_after_scheduling,
    wait_jobs_done,
    wait_until,
)

pytestmark = pytest.mark.integration

NODE, OTHER = "a100n2", "a100n1"


@dataclass
class Observed:
    gres: dict[str, int]
    flags: frozenset[str]
    state: str
    reason: str
    layout: str | None  # the node's layout_* feature
    errors: list[str] = field(default_factory=list)  # slurmctld log errors since the reconfigure


def layout_counts(sb, layout: str) -> dict[str, int]:
    cfg = load_config(sb.root / "etc" / "gpupool.yaml")
    (expected,) = render(cfg, [NODE], layout, mig_ids="simulated").nodes
    return gres_counts(expected.gres_value())


def log_lines(sb) -> list[str]:
    return (sb.root / "log" / "slurmctld.log").read_text(errors="replace").splitlines()


def ctld_errors(lines: list[str]) -> list[str]:
    # the sandbox has no PMIx: every (re)start says so; 24.11 may log the end of a
    # persistent connection's thread at a reconfigure (seen once in a CI trial, under load:
    # "slurm_persist_conn_recv_server_fini: pthread_join(): Invalid argument"); and a reply
    # to a client that gave up under load (the reconfigure's own, or a query's) fails to
    # send ("slurm_send_node_msg: ... slurm_bufs_sendto(msg_type=RESPONSE_SLURM_RC) failed"
    # from 24.11, "slurm_msg_sendto: ... msg_type=8001: ..." on 22.05): not about GRES
    noise = (
        "pmix",
        "MPI:",
        "mpi/",
        "slurm_persist_conn",
        "slurm_send_node_msg",
        "slurm_bufs_sendto",
        "slurm_msg_sendto",
    )
    return [x.split("] ", 1)[-1] for x in lines if "error:" in x and not any(n in x for n in noise)]


def node_now(sb):
    from slurm_gpupool.slurm.parse import parse_sinfo_json

    # from 23.11 slurmctld re-execs on reconfigure: a moment without answers
    proc = wait_until(lambda: (p := sb.run(["sinfo", "--json"], check=False)).returncode == 0 and p, "slurmctld")
    return parse_sinfo_json(proc.stdout)[NODE]


def registered_again(sb, before: Sdiag) -> bool:
    """After a reconfigure every slurmd registers again (each reads the new files first):
    slurmctld has processed as many registrations as there are nodes since ``before``."""
    now = Sdiag.read(sb)
    return now is not None and now.grown(before).registrations >= len(sb.nodes)


def reconfigure(sb, start: int) -> None:
    """``scontrol reconfigure``; a reply lost to a busy slurmctld is not a refusal. From 24.11
    slurmctld answers only once every connection is processed, just before it re-execs, and
    on 22.05 once it has read the files again: under CI's load a client waited more than
    ``MessageTimeout`` ("Socket timed out on send/recv operation") for a reconfigure
    slurmctld went on with. Then its log says whether it took the request (whether it
    worked, the nodes' registrations that follow say)."""
    proc = sb.run(["scontrol", "reconfigure"], check=False)
    if proc.returncode == 0:
        return
    assert transient(proc), proc.stderr
    taken = ("Attempting to reconfigure", "_slurm_rpc_reconfigure_controller: completed")
    wait_until(
        lambda: any(t in line for line in log_lines(sb)[start:] for t in taken),
        f"slurmctld to take the reconfigure its reply to was lost ({proc.stderr.strip()})",
    )


def switch_by_reconfigure(sb, layout: str) -> Observed:
    """The node's GPUs and the Slurm files to ``layout``, then ``scontrol reconfigure`` only;
    observed once slurmctld has processed the nodes' registrations that follow it (what it
    makes of the node's new GRES is decided there), not after a fixed settling time."""
    target = layout_counts(sb, layout)
    sb.gpupool("--node", NODE, "node", "apply", layout)
    sb.gpupool("gres", "install")
    start = len(log_lines(sb))
    before = sdiag_now(sb)
    reconfigure(sb, start)
    wait_until(lambda: registered_again(sb, before), "the nodes to register after the reconfigure")
    if sb.slurm_version >= (23, 11, 0):  # these take the new counts (asserted below): let them show
        wait_until(lambda: gres_counts(node_now(sb).gres) == target, f"{NODE}'s GRES after the reconfigure")
    info = node_now(sb)
    obs = Observed(
        gres_counts(info.gres), info.flags, info.state, info.reason, info.layout, ctld_errors(log_lines(sb)[start:])
    )
    print(f"\n[{'.'.join(map(str, sb.slurm_version))}] {NODE} to {layout} by reconfigure: {obs}")
    return obs


def submit(sb, node: str, gres: str, wrap: str) -> str:
    proc = sb.run(["sbatch", "--parsable", "-w", node, f"--gres={gres}", "-t", "60", "--wrap", wrap])
    return proc.stdout.strip().split(";")[0]


def job_detail(sb, job: str) -> str:
    return sb.run(["scontrol", "-d", "show", "job", job], check=False).stdout


def wait_running(sb, job: str, timeout: float = SLURM_WAIT_S) -> None:
    try:
        wait_until(lambda: "JobState=RUNNING" in job_detail(sb, job), f"job {job} to start", timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}: {job_detail(sb, job)}") from None


def gres_idx(sb, job: str) -> str:
    """The record indexes Slurm gave the job on NODE: ``GRES=gpu:a100:1(IDX:36)`` -> "36"."""
    m = re.search(r"Nodes=" + NODE + r"\b.*?GRES=\S*?\(IDX:([^)]*)\)", job_detail(sb, job))
    return m.group(1) if m else ""


def restart_into_files(sb) -> None:
    """The sequence that takes new GRES on every release (stop the node's slurmd, restart
    slurmctld, start it; docs/repartition.md), then the node resumed."""
    sb.gpupool("sandbox", "restart", "--root", str(sb.root), "--controller", "--nodes", NODE)
    info = node_now(sb)
    if info.drained or "INVALID" in info.flags or "INVALID_REG" in info.flags:
        sb.run(["scontrol", "update", f"nodename={NODE}", "state=resume"])


def test_reconfigure_alone_after_a_gres_change(night, tmp_path):
    sb = night
    other_gate, mine_gate, probe_gate = Gate(tmp_path, "other"), Gate(tmp_path, "mine"), Gate(tmp_path, "probe")
    version = sb.slurm_version
    night_counts, day_counts = layout_counts(sb, "night"), layout_counts(sb, "day")
    assert night_counts == {"gpu:a100": 8} and sum(day_counts.values()) == 38
    try:
        # 1 + 2: a100n2 night -> day while a job runs on a100n1
        other = submit(sb, OTHER, "gpu:a100:1", other_gate.wrap())
        wait_running(sb, other)
        up = switch_by_reconfigure(sb, "day")
        # the controller's view (squeue): accounting learns of a start later, and under load
        # `sacct` still said PENDING for a job slurmctld had been running for seconds
        other_state = job_state(sb, other)[0]
        assert up.layout == "day", up  # features follow a reconfigure on every release
        if version < (23, 11, 0):
            # Measured 2026-11-25 on 22.05.8: slurmctld keeps the old count ("Attempt to change
            # gres/gpu Count on node a100n2 from 8 to 38 invalid with File configuration");
            # the node's slurmd, re-reading gres.conf, reports more than configured, which
            # slurmctld accepts silently: the node stays idle with gpu:a100:8.
            assert up.gres == night_counts, up
            assert up.errors == [
                f"error: Attempt to change gres/gpu Count on node {NODE} from 8 to 38 invalid with File configuration"
            ], up.errors
            assert up.state == "idle" and not up.flags & {"DRAIN", "INVALID", "INVALID_REG"}, up
        else:
            # Measured 2026-11-25 on 24.11.5 and 26.05.5: reconfigure alone takes the new counts
            # (slurmctld and slurmd re-exec), no error in slurmctld's log, the node stays idle.
            assert up.gres == day_counts, up
            assert up.errors == [], up.errors
            assert up.state == "idle" and not up.flags & {"DRAIN", "INVALID", "INVALID_REG"}, up
        assert other_state == "RUNNING"  # a job on another node is untouched
        if up.gres != day_counts:
            restart_into_files(sb)
            assert gres_counts(node_now(sb).gres) == day_counts

        # 3: a job on a100n2's GPU 6 (whole in both layouts), the node day -> night
        mine = submit(sb, NODE, "gpu:a100:1", mine_gate.wrap())
        wait_running(sb, mine)
        assert gres_idx(sb, mine) == "36"  # GPU 6, after the 36 MIG records
        down = switch_by_reconfigure(sb, "night")
        # may the node's 8 whole GPUs now go to another job while `mine` holds GPU 6? (the probe
        # runs until its gate opens: while it holds the GPUs, nothing else starts there)
        probe = submit(sb, NODE, "gpu:a100:8", probe_gate.wrap())
        probe_state, probe_reason = state_after_scheduling(sb, probe)
        mine_state = job_state(sb, mine)[0]
        mine_idx = gres_idx(sb, mine)
        mine_detail = job_detail(sb, mine)
        history = sb.run(["sacct", "-X", "-D", "-n", "-P", "-j", mine, "-o", "State,ExitCode"]).stdout.split()
        assert down.layout == "night", down
        print(
            f"job on GPU 6: {mine_state} IDX:{mine_idx} (accounting: {history});"
            f" gpu:a100:8 job: {probe_state} ({probe_reason})"
        )
        if version < (23, 11, 0):
            # Measured 2026-11-25 on 22.05.8: reconfigure refused ("from 38 to 8 invalid");
            # the slurmd now reports fewer GPUs than configured, so slurmctld sets the node
            # INVAL and drains it ("gres/gpu count reported lower than configured (8 < 38)");
            # the job keeps running with its GRES and completes; nothing else starts there.
            assert down.gres == day_counts, down
            assert down.errors == [
                f"error: Attempt to change gres/gpu Count on node {NODE} from 38 to 8 invalid with File configuration",
                f"error: Setting node {NODE} state to INVAL with reason:gres/gpu count reported lower than"
                " configured (8 < 38)",
                f"error: _slurm_rpc_node_registration node={NODE}: Invalid argument",
            ], down.errors
            assert {"DRAIN", "INVALID_REG"} <= down.flags, down
            assert down.reason.startswith("gres/gpu count reported lower than configured (8 < 38)"), down
            assert (mine_state, mine_idx, probe_state) == ("RUNNING", "36", "PENDING"), probe_reason
            assert history == ["RUNNING|0:0"], history
            sb.run(["scancel", probe])
            other_gate.open()
            mine_gate.open()
            states = wait_jobs_done(sb, [other, mine])
            assert states == {other: "COMPLETED", mine: "COMPLETED"}, states
        else:
            # Measured 2026-11-25 on 24.11.5 and 26.05.5: reconfigure takes the new counts, but the
            # re-exec'd slurmctld, recovering its jobs, kills the job whose GRES record
            # changed although its GPU did not ("_find_invalid_job_gres_on_node: Killing job
            # N: gres/gpu count mismatch on node a100n2 (38 != 8)", "Aborting JobId=N due to
            # use of invalid GRES configuration") and requeues it ("due to node failure"):
            # pending again; the node is idle with 8 whole GPUs and
            # the next 8-GPU job runs there.
            assert down.gres == night_counts, down
            assert down.errors == [
                f"error: _find_invalid_job_gres_on_node: Killing job {mine}: gres/gpu count mismatch on node"
                f" {NODE} (38 != 8)",
                f"error: Aborting JobId={mine} due to use of invalid GRES configuration",
            ], down.errors
            assert down.state == "idle" and not down.flags & {"DRAIN", "INVALID", "INVALID_REG"}, down
            assert (mine_state, mine_idx, probe_state) == ("PENDING", "", "RUNNING"), probe_reason
            assert "Restarts=1" in mine_detail, mine_detail
            # accounting names the killed run differently: REQUEUED on 24.11.5, NODE_FAIL
            # (exit 1) on 26.05.5 (measured 2026-11-25, twice each)
            first = "REQUEUED|0:0" if version < (25, 0, 0) else "NODE_FAIL|1:0"
            assert history == [first, "PENDING|0:0"], history
            sb.run(["scancel", mine])
            other_gate.open()
            probe_gate.open()
            states = wait_jobs_done(sb, [other, probe])
            assert states == {other: "COMPLETED", probe: "COMPLETED"}, states
    finally:
        sb.run(["scancel", "--full", "--user=root"], check=False)  # only what a failure left
        info = node_now(sb)
        if gres_counts(info.gres) != night_counts or info.drained or info.flags & {"INVALID", "INVALID_REG"}:
            sb.gpupool("--node", NODE, "node", "apply", "night")
            restart_into_files(sb)
