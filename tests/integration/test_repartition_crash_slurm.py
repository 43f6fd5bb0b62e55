"""slurmctld killed with -9 at every journaled step and restart command of a switch, and
started again at once (as systemd would), on the real sandbox Slurm of each release; then a
switching node's slurmd killed with -9 at every one of the way back.  The run goes on
against a Slurm that lost what it had not saved (#26 item 9: the run's reservation, a drain,
a resume); it or the next run converges, and no job is lost.

One run per direction takes every fault in turn (``SLURM_GPUPOOL_FAULT_AT='*'``): each
point's loss is met by the rest of that run, and the points where it matters most (the
reservation just made, the daemons' restart under way, where the defect was found, a node
just resumed, its drain coming back) are among them.  A kill at each point alone, both
directions, runs on the shipped fake Slurm (tests/unit/test_repartition_crashes.py, which
models what a killed slurmctld keeps, measured on 22.05).
"""

from __future__ import annotations

import json
import re
import time

import pytest

from slurm_gpupool.slurm.fake import SAVE_MAX_WAIT_S
from tests.unit.test_repartition_kills import KILL_POINTS

from .repartition_support import GPUPOOL, assert_converged, job_state, nodes_info, repartition, wait_until

# on one release a commit, in turn (``one_release``: CI's time budget)
pytestmark = [pytest.mark.integration, pytest.mark.one_release]

NODES = ["a30n1", "v100n1"]


RESTART_LOG = "crash-restart.log"  # in the sandbox's log/: what each restart after a kill said


def crash(sb, daemon: str) -> list[str]:
    """The fault command the journal runs (no shell): kill -9 this sandbox's ``daemon``
    (``slurmctld`` or ``slurmd-<node>``, by its pid file) if it runs, then starts that daemon
    alone, as systemd's Restart= would (``gpupool sandbox restart --no-files --controller``,
    ``gpupool sandbox start --nodes NODE``; not ``sandbox up``, which repairs the whole
    sandbox and restarted slurmctld gracefully mid-switch): again if it fails
    (at most three times), each attempt's output kept in ``log/crash-restart.log`` with the
    point (``$SLURM_GPUPOOL_FAULT_POINT``).  A daemon the switch has stopped itself (a
    switching node's slurmd between its stop and start) is not running: nothing to kill, and
    nothing is started early.  (The journal runs the fault command with its output captured:
    once, under load, slurmctld was never restarted after a kill and the rest of that run had
    no controller; the likely cause, a dead process reaped between the wait's ``exists`` and
    its read of ``/proc/PID/stat``, killed the script with FileNotFoundError before it
    restarted anything.)"""
    script = (
        "import fcntl, os, signal, subprocess, sys, time\n"
        "root, daemon = sys.argv[1], sys.argv[2]\n"
        "point = os.environ.get('SLURM_GPUPOOL_FAULT_POINT', '?')\n"
        # one fault at a time: a wave's nodes journal their steps from parallel threads, so a
        # point could find the daemon down while another point's restart was still under way
        # (seen under load: 'applied' and 'drained' found nothing to kill while 'applying''s
        # restart ran); each waits for the one before to have restarted what it killed
        "lock = open(root + '/run/crash-fault.lock', 'w')\n"
        "fcntl.flock(lock, fcntl.LOCK_EX)\n"
        "def alive(pid):  # a zombie, or reaped between two reads (/proc/PID gone): dead\n"
        "    try:\n"
        "        return open(f'/proc/{pid}/stat').read().split()[2] != 'Z'\n"
        "    except OSError:\n"
        "        return False\n"
        f"log = open(root + '/log/{RESTART_LOG}', 'a')\n"
        "try:\n"
        "    pid = int(open(f'{root}/run/{daemon}.pid').read())\n"
        "except (OSError, ValueError):\n"
        "    pid = 0\n"
        "if not pid or not alive(pid):\n"
        "    log.write(f'{time.ctime()} at {point} {daemon} not running: nothing killed\\n')\n"
        "    sys.exit(0)\n"
        "os.kill(pid, signal.SIGKILL)\n"
        "while alive(pid):\n"
        "    time.sleep(0.05)\n"
        "if daemon == 'slurmctld':\n"
        "    again = ['restart', '--root', root, '--no-files', '--controller']\n"
        "else:\n"
        "    again = ['start', '--root', root, '--nodes', daemon.removeprefix('slurmd-')]\n"
        "for attempt in range(3):\n"
        "    p = subprocess.run([*sys.argv[3:], 'sandbox', *again], capture_output=True, text=True)\n"
        "    log.write(f'{time.ctime()} at {point} killed {daemon} {pid}; sandbox {again[0]}: exit {p.returncode}\\n{p.stdout}{p.stderr}\\n')\n"
        "    log.flush()\n"
        "    if p.returncode == 0:\n"
        "        break\n"
        "    time.sleep(5)\n"
    )
    return [GPUPOOL[0], "-c", script, str(sb.root), daemon, *GPUPOOL]


def faults_of(sb) -> list[tuple[str, str, bool]]:
    """(point, daemon, whether it was running and killed) of every fault the restart log
    records, in order."""
    path = sb.root / "log" / RESTART_LOG
    text = path.read_text(errors="replace") if path.exists() else ""
    found = re.findall(r" at (\S+) (?:killed (\S+) \d+;|(\S+) not running)", text)
    return [(point, killed or idle, bool(killed)) for point, killed, idle in found]


def restart_log(sb) -> str:
    """What the restarts after the kills said (the end of it), for a failure's message."""
    path = sb.root / "log" / RESTART_LOG
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(no restart logged)"


def wait_saved_after_start(sb, job: str) -> None:
    """Until slurmctld's state save thread (src/slurmctld/state_save.c) has written
    ``job_state`` (StateSaveLocation = the sandbox's spool/slurmctld) with ``job`` running: the
    job is then RUNNING in what a kill -9 comes back with.  The test changes the running job
    (``scontrol update ... Comment=``), which makes slurmctld save its jobs within
    SAVE_MAX_WAIT_S on a quiet machine, and waits for a save after that change.  (A fixed
    sleep was a guess: on a loaded machine a CI run's job came back from the first crash
    FAILED.  Comparing the file's time with the job's start, whole seconds, could miss a
    save made in the start's second, and then wait for a save nothing asked for.)"""
    saved = sb.root / "spool" / "slurmctld" / "job_state"
    changed = time.time()
    sb.run(["scontrol", "update", f"JobId={job}", "Comment=running-before-the-crashes"])

    def written() -> bool:
        try:
            return saved.stat().st_mtime > changed
        except FileNotFoundError:
            return False

    wait_until(written, f"slurmctld to save its job state (within {SAVE_MAX_WAIT_S:.0f} s on a quiet machine)")


def ctld_log_of(sb, job: str) -> str:
    """What slurmctld logged about ``job`` (and about lost or missing jobs), for a failure's message."""
    path = sb.root / "log" / "slurmctld.log"
    if not path.exists():
        return "(no slurmctld.log)"
    words = (f"JobId={job} ", f"JobId={job}\n", "missing", "Duplicate", "orphan", "Recovered information")
    lines = [ln for ln in path.read_text(errors="replace").splitlines(keepends=True) if any(w in ln for w in words)]
    return "".join(lines[-40:])


def switch_with_fault(sb, target: str, point: str, fault: list[str]) -> list[dict]:
    """The run with the fault at ``point``, then runs until one changes nothing (at most two);
    every run's exit code and report."""
    env = {"SLURM_GPUPOOL_FAULT_AT": point, "SLURM_GPUPOOL_FAULT_CMD": json.dumps(fault)}
    runs = []
    for attempt in range(3):
        proc = repartition(sb, "--to", target, "--nodes", ",".join(NODES), "--json", env=env if not attempt else None)
        report = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {"stderr": proc.stderr}
        runs.append({"rc": proc.returncode, **report})
        if attempt and proc.returncode == 0 and not report.get("nodes"):
            break
    return runs


def summary(runs: list[dict]) -> str:
    """Each run's exit code, every node's outcome and why, its messages (a failure's message)."""
    lines = []
    for r in runs:
        nodes = {n: f"{v.get('outcome')}: {v.get('reason', '')}"[:200] for n, v in (r.get("nodes") or {}).items()}
        lines.append(f"exit {r['rc']}: {nodes} {r.get('messages', [])[-5:]} {r.get('stderr', '')[-500:]}")
    return "\n".join(lines)


def test_slurmctld_then_a_slurmd_killed_at_every_step_of_a_switch_and_it_converges(night):
    """night -> day with slurmctld killed (and started again) at every journaled step and
    restart command the run passes; then day -> night with a switching node's slurmd killed at
    every one.  A GPU job runs through it all on a node that does not switch: it runs on
    after every crash.  (What slurmctld had not saved when killed, Slurm itself loses: a job
    submitted just before a kill -9 is gone, its id given to the next job and the node
    drained "Duplicate jobid"; a job started after the last save comes back PENDING,
    "Registered PENDING JobId=N StepId=N.batch", and Slurm kills the running copy and starts
    it again, measured on 22.05.  So the test waits until slurmctld has saved the job as
    running.)"""
    rest = {n: "night" for n in night.nodes if n not in NODES}
    # a graceful restart first: slurmctld saves all its state.  A new sandbox's slurmctld
    # killed before its first save of assoc_usage does not start again on 26.05 ("fatal: No
    # Assoc usage file ... to recover"): Slurm's, on a cluster minutes old, not a switch's
    night.gpupool("sandbox", "restart", "--root", str(night.root), "--no-files", "--controller")
    gpu = "--gres=gpu:" + next(k for k in nodes_info(night)["h100n1"].gres_counts() if k.startswith("gpu:"))[4:] + ":1"
    long = submit(night, "-w", "h100n1", gpu, "-t", "600", "--wrap", "sleep 36000")
    wait_until(lambda: job_state(night, long)[0] == "RUNNING", "the long job to start")
    wait_saved_after_start(night, long)
    try:
        for target, daemon in (("day", "slurmctld"), ("night", f"slurmd-{NODES[1]}")):
            runs = switch_with_fault(night, target, "*", crash(night, daemon))
            assert runs[-1]["rc"] == 0, f"{daemon}: {summary(runs)}\n{restart_log(night)}"
            assert_converged(night, {**rest, **{n: target for n in NODES}})
            wait_until(
                lambda: all(i.responding for i in nodes_info(night).values()), f"nodes responding after {daemon}"
            )
            assert job_state(night, long)[0] == "RUNNING", (daemon, ctld_log_of(night, long))
            faults = [(p, k) for p, d, k in faults_of(night) if d == daemon]
            # every point of a switch (and more: a node waiting or failed after a fault, later restarts)
            assert set(KILL_POINTS) <= {p for p, _ in faults} | {"waiting"}, (daemon, faults, restart_log(night))
            # killed where it ran: slurmctld everywhere; the slurmd but where the switch had stopped it
            # (its wave's restart; or, had the node failed after a kill, the unswitched nodes' one)
            killed = {p for p, k in faults if k}
            stopped = {"restart:0", "restart:1", "others:0"} if daemon.startswith("slurmd") else set()
            assert set(KILL_POINTS) - stopped - {"waiting"} <= killed, (daemon, sorted(killed), restart_log(night))
    finally:
        night.run(["scancel", long], check=False)


def submit(sb, *args: str) -> str:
    return sb.run(["sbatch", "--parsable", *args]).stdout.strip().split(";")[0]
