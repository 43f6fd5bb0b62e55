"""The repartitioner against the real sandbox Slurm (5 nodes): switches with jobs running,
faults at every step, a config slurmctld refuses, busy nodes, reservations ahead of a switch.

Every test starts and ends with the whole cluster in the night layout.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from .repartition_support import (
    GPUPOOL,
    Background,
    Gate,
    assert_converged,
    job_state,
    never_requeued,
    nodes_info,
    our_reservations,
    repartition,
    report_of,
    reserved,
    state_after_scheduling,
    wait_jobs_done,
    wait_until,
)

pytestmark = pytest.mark.integration


def test_dry_run_prints_the_plan_and_changes_nothing(night):
    files = {p: p.read_bytes() for p in (night.root / "etc").glob("*.conf")}
    path = night.root / "controller" / "journal.json"
    journal = path.read_bytes() if path.exists() else None
    proc = repartition(night, "--to", "day", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert {n["node"]: n["action"] for n in plan["nodes"]} == {n: "change" for n in night.nodes}
    steps = "\n".join(plan["steps"])
    assert "create reservation ReservationName=gpupool_day" in steps and "node apply day --json" in steps
    assert "sandbox stop" in steps and "--controller" in steps and "sandbox start" in steps
    text = repartition(night, "--to", "day", "--dry-run")
    assert text.returncode == 0 and "steps:" in text.stdout and "a100n1" in text.stdout
    assert {p: p.read_bytes() for p in (night.root / "etc").glob("*.conf")} == files
    assert (path.read_bytes() if path.exists() else None) == journal
    assert our_reservations(night) == {} and all(i.layout == "night" for i in nodes_info(night).values())


class JobStream(threading.Thread):
    """Submits short jobs (some asking for a GPU) every second until stopped."""

    def __init__(self, sb) -> None:
        super().__init__(daemon=True)
        self.sb, self.jobs, self.stop = sb, [], threading.Event()

    def run(self) -> None:
        k = 0
        while not self.stop.is_set():
            args = ["-C", "a100", "--gres=gpu:1"] if k % 2 == 0 else []  # typed by job_submit.lua
            out = self.sb.run(
                ["sbatch", "--parsable", "-t", "2", "-J", f"stream{k}", *args, "--wrap", f"sleep {1 + k % 4}"],
                check=False,
            )
            if out.returncode == 0:
                self.jobs.append(out.stdout.strip().split(";")[0])
            k += 1
            time.sleep(1.0)


def test_day_night_day_with_a_stream_of_jobs_loses_none(night, tmp_path: Path):
    """Jobs keep coming through two switches; a long job holds its node until it ends (the
    test ends it once the switch waits for it); none is killed, failed or lost; the night
    layout runs an 8-GPU NVLink job."""
    gate = Gate(tmp_path, "long")
    long_job = night.run(
        ["sbatch", "--parsable", "-w", "v100n1", "--gres=gpu:v100:2", "-t", "30", "--wrap", gate.wrap()]
    ).stdout.strip()
    wait_until(lambda: job_state(night, long_job)[0] == "RUNNING", "the long job to start")
    stream = JobStream(night)
    stream.start()
    try:
        time.sleep(4)  # (a few stream jobs first)
        with Background(night, tmp_path, "--to", "day", "--deadline", "10m", "--json") as run:
            # the switch has reserved v100n1 and waits for the long job, still running
            wait_until(lambda: reserved(night, "gpupool_day", "v100n1"), "the switch to reserve v100n1")
            assert job_state(night, long_job)[0] == "RUNNING"
            gate.open()
            day = run.wait()
        assert day.returncode == 0, day.stdout + day.stderr
        rep = report_of(day)
        assert {n: v["outcome"] for n, v in rep["nodes"].items()} == {n: "done" for n in night.nodes}
        time.sleep(3)
        back = repartition(night, "--to", "night", "--deadline", "10m", "--json")
        assert back.returncode == 0, back.stdout + back.stderr
        wrapper = str(Path(sys.executable).parent / "gpupool-sbatch")
        nvlink = night.run(
            [wrapper, "--parsable", "--wait", "--gpus-nvlink=8", "-t", "2", "--wrap", "echo $SLURM_JOB_GPUS"],
            timeout=600,  # it waits for a whole A100 node among the stream's jobs
        )
        nv_job = nvlink.stdout.strip().split(";")[0]
        time.sleep(3)
        again = repartition(night, "--to", "day", "--deadline", "10m", "--json")
        assert again.returncode == 0, again.stdout + again.stderr
    finally:
        stream.stop.set()
        stream.join()
    states = wait_jobs_done(night, [*stream.jobs, long_job, nv_job], timeout=600)
    assert len(stream.jobs) >= 10
    assert set(states.values()) == {"COMPLETED"}, {j: s for j, s in states.items() if s != "COMPLETED"}
    # one run each, not killed and run again (a requeued job's rerun ends COMPLETED too): v100n1
    # waited for the long job; sacct has every end once wait_jobs_done returned (a switch
    # restarts slurmctld, which sends its job ends to slurmdbd again once it is back)
    every = [*stream.jobs, long_job, nv_job]
    assert never_requeued(night, every) == {j: ["COMPLETED"] for j in every}
    assert_converged(night, {n: "day" for n in night.nodes})


def test_nvml_failure_mid_apply_rolls_that_node_back_and_the_others_switch(night):
    # GPU 5 of h100n1 gets two 3g.40gb by day: the second creation fails
    night.gpupool(
        "--node", "h100n1", "sim", "fault", "nvmlDeviceCreateGpuInstanceWithPlacement", "--gpu", "5", "--after", "1"
    )
    proc = repartition(night, "--to", "day", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = report_of(proc)
    assert rep["nodes"]["h100n1"]["outcome"] == "failed"
    assert "node apply day failed" in rep["nodes"]["h100n1"]["reason"]
    assert "rolled back to layout night" in rep["nodes"]["h100n1"]["reason"]
    others = {n: "day" for n in night.nodes if n != "h100n1"}
    assert {n: rep["nodes"][n]["outcome"] for n in others} == {n: "done" for n in others}
    info = nodes_info(night)["h100n1"]
    assert info.drained and "rolled back to layout night" in info.reason and info.layout == "night"
    night.gpupool("--node", "h100n1", "node", "assert", "night")  # its GPUs are back
    for n in others:
        assert nodes_info(night)[n].layout == "day"
    # the admin looks, resumes; the next run switches it
    # (under heavy load slurmctld has been seen to answer "Invalid node state" here once: the
    # outcome below is what matters, and it shows the node's state if it goes wrong)
    night.run(["scontrol", "update", "nodename=h100n1", "state=resume"], check=False)
    again = repartition(night, "--to", "day", "--json")
    show = night.run(["scontrol", "-o", "show", "node", "h100n1"]).stdout
    assert again.returncode == 0 and report_of(again)["nodes"]["h100n1"]["outcome"] == "done", (again.stdout, show)
    assert_converged(night, {n: "day" for n in night.nodes})


def _site_config(sb, tmp_path: Path, mutate) -> Path:
    raw = yaml.safe_load((sb.root / "etc" / "gpupool.yaml").read_text())
    raw = copy.deepcopy(raw)
    mutate(raw)
    path = tmp_path / "gpupool.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_slurmctld_refusing_the_new_config_is_reverted(night, tmp_path: Path):
    """A site template that slurmctld cannot parse: the old files come back, the GPUs too."""
    site = tmp_path / "templates"
    site.mkdir()
    from slurm_gpupool.util.resources import templates_dir

    text = (templates_dir() / "nodes.conf.j2").read_text()
    site.joinpath("nodes.conf.j2").write_text(text.replace("NodeName=", "NodeName=", 1) + "BogusKey=1\n")

    def bad(raw):
        raw["slurm"]["templates_dir"] = str(site)

    conf = _site_config(night, tmp_path, bad)
    before = {p.name: p.read_text() for p in (night.root / "etc").glob("*.conf")}
    proc = repartition(night, "--to", "day", "--nodes", "a30n1", "--json", env={"SLURM_GPUPOOL_CONFIG": str(conf)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = report_of(proc)
    assert rep["nodes"]["a30n1"]["outcome"] == "rolled_back", rep
    assert "refused" in rep["nodes"]["a30n1"]["reason"]
    assert {p.name: p.read_text() for p in (night.root / "etc").glob("*.conf")} == before
    assert night.run(["scontrol", "ping"]).returncode == 0
    assert_converged(night, {n: "night" for n in night.nodes})


def test_a_node_busy_past_the_deadline_is_skipped_and_its_job_completes(night, tmp_path: Path):
    # the job outlives the run whatever the run takes: it ends when the test opens its gate
    # (it once ran 60 s, and a loaded CI machine took over 20 s for the run)
    gate = Gate(tmp_path, "busy")
    job = night.run(
        ["sbatch", "--parsable", "-w", "v100n1", "--gres=gpu:v100:1", "-t", "30", "--wrap", gate.wrap()]
    ).stdout.strip()
    wait_until(lambda: job_state(night, job)[0] == "RUNNING", "the job to start")
    proc = repartition(night, "--to", "day", "--nodes", "v100n1,a30n1", "--deadline", "5s", "--json")
    assert proc.returncode == 75, proc.stdout + proc.stderr
    rep = report_of(proc)
    assert rep["nodes"]["a30n1"]["outcome"] == "done"
    v = rep["nodes"]["v100n1"]
    assert v["outcome"] == "skipped" and f"{job} (root" in v["reason"] and "not killed" in v["reason"]
    assert our_reservations(night)["gpupool_day"].nodes == {"v100n1"}  # still due: no new job lands there
    assert night.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() == "RUNNING"
    gate.open()
    assert wait_jobs_done(night, [job]) == {job: "COMPLETED"}
    again = repartition(night, "--to", "day", "--nodes", "v100n1,a30n1", "--json")
    assert again.returncode == 0 and report_of(again)["nodes"]["v100n1"]["outcome"] == "done"
    assert_converged(night, {"v100n1": "day", "a30n1": "day", "a100n1": "night", "a100n2": "night", "h100n1": "night"})


# The night switch of the scheduled tests comes this many minutes after they start: a whole
# day switch, its checks and a short job (minutes on a loaded machine) all come before it.
NIGHT_IN_MIN = 20


def _day_now_night_soon(sb, tmp_path: Path) -> tuple[datetime, dict[str, str]]:
    """A site config whose schedule has day due now and night in :data:`NIGHT_IN_MIN`
    minutes (lead time 30m): the time of the night switch, and the environment that selects
    the config."""
    now = datetime.now().astimezone()
    switch_at = (now + timedelta(minutes=NIGHT_IN_MIN)).replace(second=0, microsecond=0)

    def schedule(raw):
        raw["schedule"] = {
            "timezone": "local",
            "default": "night",
            "rules": [
                {
                    "layout": "day",
                    "days": "daily",
                    "start": (now - timedelta(minutes=30)).strftime("%H:%M"),
                    "end": switch_at.strftime("%H:%M"),
                }
            ],
        }
        raw["repartition"]["lead_time"] = "30m"

    return switch_at, {"SLURM_GPUPOOL_CONFIG": str(_site_config(sb, tmp_path, schedule))}


def test_scheduled_runs_obey_a_pause_and_a_pin(night, tmp_path: Path):
    """An admin's hand switch is not undone by cron: paused, a scheduled run does nothing;
    pinned, it keeps the pinned layout and reserves nothing ahead; a pause deletes the
    reservation made ahead of the next switch; resumed, the schedule rules again."""
    _, env = _day_now_night_soon(night, tmp_path)

    def schedule(*args: str) -> subprocess.CompletedProcess[str]:
        return night.run([*GPUPOOL, "schedule", *args], check=False, env={**night.env, **env})

    night.run(
        ["scontrol", "create", "reservation", "ReservationName=gpupool_night_ahead", "StartTime=now+1hour",
         "Duration=10", "Users=root", "Flags=maint,ignore_jobs", "Nodes=a30n1"]
    )  # fmt: skip
    paused = schedule("pause", "--until", "1h", "--why", "hand switch")
    assert paused.returncode == 0 and "schedule paused until " in paused.stdout, paused.stdout + paused.stderr
    assert "deleted reservation gpupool_night_ahead" in paused.stdout and our_reservations(night) == {}
    try:
        _paused_then_pinned(night, env, schedule)
    finally:
        schedule("resume")  # never leave the next test's schedule held
    plan = report_of(repartition(night, "--scheduled", "--dry-run", "--json", env=env))
    assert plan["target"] == "day" and plan["ahead"]["reservation"] == "gpupool_night_ahead", plan
    assert our_reservations(night) == {}  # a dry run changes nothing


def _paused_then_pinned(night, env: dict[str, str], schedule) -> None:
    proc = repartition(night, "--scheduled", "--json", env=env)
    held = report_of(proc)
    assert proc.returncode == 0 and held["target"] is None, proc.stdout + proc.stderr
    assert held["held"]["why"] == "hand switch" and held["held"]["layout"] is None, held
    text = repartition(night, "--scheduled", env=env)
    assert text.returncode == 0 and "nothing done: schedule paused" in text.stderr, text.stdout + text.stderr
    status = json.loads(night.run([*GPUPOOL, "status", "--json"], env={**night.env, **env}).stdout)
    assert status["hold"]["text"].startswith("schedule paused until") and "(hand switch)" in status["hold"]["text"]

    assert schedule("pin", "nosuch").returncode == 2  # a usage error (EXIT_USAGE), named
    pinned = schedule("pin", "night")
    assert pinned.returncode == 0 and "pinned to layout night" in pinned.stdout
    proc = repartition(night, "--scheduled", "--json", env=env)  # day is due: the pin wins
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(i.layout == "night" for i in nodes_info(night).values()) and our_reservations(night) == {}
    assert schedule("resume").stdout.strip() == "schedule resumed"


def test_scheduled_run_switches_the_due_layout_and_reserves_ahead(night, tmp_path: Path):
    """--scheduled: day is due now and night starts in 20 minutes (lead time 30m): the run
    switches to day and reserves the nodes from the night switch; short jobs still start
    on them, jobs that would run past the switch wait."""
    switch_at, env = _day_now_night_soon(night, tmp_path)
    proc = repartition(night, "--scheduled", "--deadline", "10m", "--json", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(i.layout == "day" for i in nodes_info(night).values())
    resv = our_reservations(night)["gpupool_night_ahead"]  # its own, apart from any run's
    assert resv.nodes == set(night.nodes) and resv.start == switch_at.replace(tzinfo=None)
    short = night.run(["sbatch", "--parsable", "-w", "a30n1", "-t", "5", "--wrap", "sleep 2"]).stdout.strip()
    long = night.run(["sbatch", "--parsable", "-w", "a30n1", "-t", "60", "--wrap", "sleep 2"]).stdout.strip()
    try:
        assert wait_jobs_done(night, [short]) == {short: "COMPLETED"}  # ends before the switch
        state, reason = state_after_scheduling(night, long)  # both schedulers passed it over
        # squeue: "ReqNodeNotAvail, Reserved for maintenance"
        assert state == "PENDING" and reason.startswith("ReqNodeNotAvail") and "maintenance" in reason, reason
    finally:
        night.run(["scancel", long], check=False)
    status = json.loads(night.gpupool("status", "--json").stdout)
    assert [r["name"] for r in status["reservations"]] == ["gpupool_night_ahead"]
    # the switch itself (run early here) takes over the reservation made ahead and removes it
    back = repartition(night, "--to", "night", "--json")
    assert back.returncode == 0, back.stdout + back.stderr
    assert our_reservations(night) == {}


def test_a_partial_switch_leaves_no_slurmd_with_an_old_slurm_conf(night):
    """#15.9: `--nodes a30n1` restarted only a30n1's slurmd; the others kept the old
    slurm.conf and slurmctld warned at each of their registrations."""
    plan = report_of(repartition(night, "--to", "day", "--nodes", "a30n1", "--dry-run", "--json"))
    assert any("not switched, for the new slurm.conf" in s and "v100n1" in s for s in plan["steps"]), plan["steps"]
    log = night.root / "log" / "slurmctld.log"
    try:
        proc = repartition(night, "--to", "day", "--nodes", "a30n1", "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        offset = log.stat().st_size
        night.sandbox.restart(controller=True, files=False)  # slurmctld asks every slurmd to register
        wait_until(lambda: all(i.responding for i in nodes_info(night).values()), "every node to register")
        with log.open("rb") as f:
            f.seek(offset)
            warned = [ln for ln in f.read().decode(errors="replace").splitlines() if "different slurm.conf" in ln]
        assert warned == [], warned
    finally:
        back = repartition(night, "--to", "night", "--nodes", "a30n1", "--json")
        assert back.returncode == 0, back.stdout + back.stderr


@pytest.mark.release_independent  # the repartitioner's own lock: no Slurm release sees it differently
def test_two_runs_never_overlap(night, tmp_path: Path):
    """While one run holds the lock, another exits 75 at once.  The first holds it as long as
    the test needs: it waits for a job on its node that ends when the test opens its gate."""
    gate = Gate(tmp_path, "busy")
    job = night.run(
        ["sbatch", "--parsable", "-w", "a30n1", "--gres=gpu:a30:1", "-t", "30", "--wrap", gate.wrap()]
    ).stdout.strip()
    wait_until(lambda: job_state(night, job)[0] == "RUNNING", "the job to start")
    with Background(night, tmp_path, "--to", "day", "--nodes", "a30n1", "--deadline", "30m", "--json") as first:
        lock = night.root / "controller" / "repartition.lock"
        wait_until(lambda: lock.exists() and lock.read_text().strip() == str(first.proc.pid), "the lock", interval=0.05)
        second = repartition(night, "--to", "day", "--nodes", "a30n1")
        assert second.returncode == 75 and "another run" in second.stderr
        assert first.proc.poll() is None  # the lock was the first run's all along
        gate.open()
        done = first.wait()
    assert done.returncode == 0, done.stdout + done.stderr
    assert report_of(done)["nodes"]["a30n1"]["outcome"] == "done"


def test_requeue_signals_and_requeues_only_requeueable_jobs(night, tmp_path: Path):
    """--requeue at the deadline: SIGUSR1 to the requeueable job, requeue after the grace
    time; the job that may not be requeued runs to its end, then the node switches.  Both
    jobs run until the test ends them (the first until requeued, the second until its gate
    opens), so both are running at the deadline whatever the run's own speed."""

    def quick(raw):
        raw["repartition"]["checkpoint_grace"] = "3s"

    conf = _site_config(night, tmp_path, quick)
    marker, trapped = tmp_path / "checkpointed", tmp_path / "trapped"
    gate = Gate(tmp_path, "keep")
    ckpt = night.run(
        [
            "sbatch",
            "--parsable",
            "--requeue",
            "-w",
            "v100n1",
            "--gres=gpu:v100:1",
            "-t",
            "30",
            "--wrap",
            f"trap 'touch {marker}' USR1; touch {trapped}; while :; do sleep 1; done",
        ]
    ).stdout.strip()
    keep = night.run(
        ["sbatch", "--parsable", "--no-requeue", "-w", "v100n1", "--gres=gpu:v100:1", "-t", "30", "--wrap", gate.wrap()]
    ).stdout.strip()
    wait_until(lambda: {job_state(night, j)[0] for j in (ckpt, keep)} == {"RUNNING"}, "both jobs to run")
    # RUNNING is the allocation: the Prolog and the script's start come after, and a signal
    # sent before the trap is set ends the script (or is dropped before its step exists)
    wait_until(trapped.exists, "the checkpointing job's trap")
    try:
        args = ["--to", "day", "--nodes", "v100n1", "--deadline", "3s", "--requeue", "--json"]
        with Background(night, tmp_path, *args, env={"SLURM_GPUPOOL_CONFIG": str(conf)}) as run:
            # at the deadline the checkpoint signal reaches the job's batch script, then it is
            # requeued (pending again: requeued, not killed); the other still runs
            wait_until(marker.exists, "the checkpoint signal")
            assert job_state(night, keep)[0] == "RUNNING"

            def requeued() -> str:
                shown = night.run(["scontrol", "-o", "show", "job", ckpt]).stdout
                return shown if "Restarts=1" in shown and "JobState=PENDING" in shown else ""

            wait_until(requeued, "the requeue")
            gate.open()  # the other runs to its end now; the switch waits for it
            proc = run.wait()
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert report_of(proc)["nodes"]["v100n1"]["outcome"] == "done"
        wait_jobs_done(night, [keep])  # sacct has its end (see above)
        assert never_requeued(night, [keep]) == {keep: ["COMPLETED"]}  # ran to its end before the switch
        assert "Restarts=1" in night.run(["scontrol", "-o", "show", "job", ckpt]).stdout
    finally:
        night.run(["scancel", ckpt, keep], check=False)
