"""slurmctld killed with -9 in the middle of a switch, and started again at once (as systemd
would), on the real sandbox Slurm of each release; and a switching node's slurmd killed with
-9.  The run goes on against a Slurm that lost what it had not saved (#26 item 9: the run's
reservation, a drain, a resume); it or the next run converges, and no job is lost.

Killed at every journaled step and restart command, both directions, on the shipped fake
Slurm (tests/unit/test_repartition_crashes.py, which models what a killed slurmctld keeps,
measured on 22.05); here the points where what Slurm loses matters most: the reservation
just made, the daemons' restart under way (where the defect was found), a node just
resumed (its drain comes back).
"""

from __future__ import annotations

import json
import time

import pytest

from slurm_gpupool.slurm.fake import SAVE_MAX_WAIT_S

from .repartition_support import GPUPOOL, assert_converged, job_state, nodes_info, repartition, wait_until

pytestmark = pytest.mark.integration

NODES = ["a30n1", "v100n1"]
CTLD_POINTS = ["reserved", "restart:1", "done"]


RESTART_LOG = "crash-restart.log"  # in the sandbox's log/: what each restart after a kill said


def crash_ctld(sb) -> list[str]:
    """The fault command the journal runs (no shell): kill -9 this sandbox's slurmctld, then
    ``gpupool sandbox up``, which starts the daemon that died, as systemd's Restart= would:
    again if it fails (at most three times), each attempt's output kept in
    ``log/crash-restart.log``.  (The journal runs the fault command with its output captured:
    once, under load, slurmctld was never restarted after a kill and the rest of that run had
    no controller; the likely cause, a dead process reaped between the wait's ``exists`` and
    its read of ``/proc/PID/stat``, killed the script with FileNotFoundError before it
    restarted anything.)"""
    script = (
        "import os, signal, subprocess, sys, time\n"
        "root = sys.argv[1]\n"
        "pid = int(open(root + '/run/slurmctld.pid').read())\n"
        "os.kill(pid, signal.SIGKILL)\n"
        "def gone():  # or a zombie; reaped between two reads, /proc/PID vanishes: gone too\n"
        "    try:\n"
        "        return open(f'/proc/{pid}/stat').read().split()[2] == 'Z'\n"
        "    except OSError:\n"
        "        return True\n"
        "while not gone():\n"
        "    time.sleep(0.05)\n"
        f"with open(root + '/log/{RESTART_LOG}', 'a') as log:\n"
        "    for attempt in range(3):\n"
        "        p = subprocess.run([*sys.argv[2:], 'sandbox', 'up', '--root', root], capture_output=True, text=True)\n"
        "        log.write(f'{time.ctime()} killed {pid}; sandbox up: exit {p.returncode}\\n{p.stdout}{p.stderr}\\n')\n"
        "        log.flush()\n"
        "        if p.returncode == 0:\n"
        "            break\n"
        "        time.sleep(5)\n"
    )
    return [GPUPOOL[0], "-c", script, str(sb.root), *GPUPOOL]


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


def kill_slurmd(sb, node: str) -> list[str]:
    script = "import os, signal, sys\nos.kill(int(open(sys.argv[1]).read()), signal.SIGKILL)\n"
    return [GPUPOOL[0], "-c", script, str(sb.root / "run" / f"slurmd-{node}.pid")]


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


def test_slurmctld_killed_mid_switch_loses_what_it_had_not_saved_and_the_switch_converges(night):
    """A GPU job runs through it all on a node that does not switch: it runs on after every
    crash.  (What slurmctld had not saved when killed, Slurm itself loses: a job submitted
    just before a kill -9 is gone, its id given to the next job and the node drained
    "Duplicate jobid"; a job started after the last save comes back PENDING, "Registered
    PENDING JobId=N StepId=N.batch", and Slurm kills the running copy and starts it again,
    measured on 22.05.  So the test waits until slurmctld has saved the job as running.)"""
    rest = {n: "night" for n in night.nodes if n not in NODES}
    gpu = "--gres=gpu:" + next(k for k in nodes_info(night)["h100n1"].gres_counts() if k.startswith("gpu:"))[4:] + ":1"
    long = submit(night, "-w", "h100n1", gpu, "-t", "600", "--wrap", "sleep 36000")
    wait_until(lambda: job_state(night, long)[0] == "RUNNING", "the long job to start")
    wait_saved_after_start(night, long)
    try:
        for i, point in enumerate(CTLD_POINTS):
            target = "day" if i % 2 == 0 else "night"
            runs = switch_with_fault(night, target, point, crash_ctld(night))
            assert runs[-1]["rc"] == 0, (point, runs, restart_log(night))
            assert_converged(night, {**rest, **{n: target for n in NODES}})
            wait_until(lambda: all(i.responding for i in nodes_info(night).values()), f"nodes responding after {point}")
            assert job_state(night, long)[0] == "RUNNING", (point, ctld_log_of(night, long))
    finally:
        night.run(["scancel", long], check=False)


def test_a_switching_nodes_slurmd_killed_mid_switch_and_the_switch_converges(night):
    """Killed once drained: the switch's own restart of that node starts it again."""
    rest = {n: "night" for n in night.nodes if n not in NODES}
    runs = switch_with_fault(night, "day", "drained", kill_slurmd(night, "v100n1"))
    assert runs[-1]["rc"] == 0, runs
    assert_converged(night, {**rest, **{n: "day" for n in NODES}})


def submit(sb, *args: str) -> str:
    return sb.run(["sbatch", "--parsable", *args]).stdout.strip().split(";")[0]
