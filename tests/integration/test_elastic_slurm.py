"""#17 on the real sandbox Slurm: the elastic policy reshapes idle nodes to what the queue
waits for, without killing a job, and does not thrash; under a load that leaves no node
idle, it drains a busy node for jobs that have waited ``max_wait``.

The pool config of the test: the sandbox's, with ``schedule.mode: elastic``; only the two
DGX nodes may change (day or night), a floor of one 1g.5gb GPU-equivalent keeps that type
submittable (job_submit.lua refuses a GRES type no node has), batching window 10 s,
cool-down 60 s.  Every step is one ``gpupool repartition --elastic`` run, as cron makes it.
The test starts and ends with every node in the night layout.
"""

from __future__ import annotations

import copy
import itertools
import json
import time

import pytest
import yaml

from slurm_gpupool.config.load import load_config

from .repartition_support import (
    GPUPOOL,
    assert_converged,
    never_requeued,
    nodes_info,
    report_of,
    sacct_states,
    wait_jobs_done,
)

pytestmark = pytest.mark.integration

WINDOW_S, COOLDOWN_S = 10, 60


def elastic_config(sb, **extra: str) -> str:
    cfg = load_config(sb.root / "etc" / "gpupool.yaml")
    raw = copy.deepcopy(cfg.raw)
    raw["schedule"] = {
        **raw["schedule"],
        "mode": "elastic",
        "rules": [],  # demand decides at all hours
        "elastic": {
            "layouts": {"dgx": ["day", "night"], "hopper": ["night"], "a30": ["night"], "volta": ["night"]},
            "floors": {"1g.5gb": 1},
            "max_changing": 2,
            "window": f"{WINDOW_S}s",
            "cooldown": f"{COOLDOWN_S}s",
            "min_gain": 1,
            **extra,
        },
    }
    path = sb.root / "etc" / "gpupool-elastic.yaml"  # beside the sandbox's: its relative paths hold
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(path)


def step(sb, config: str, *args: str) -> dict:
    proc = sb.run([*GPUPOOL, "--config", config, "repartition", "--elastic", "--json", *args], timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return report_of(proc)


def submit(sb, gres: str, seconds: int, count: int, *extra: str) -> list[str]:
    out = []
    for _ in range(count):
        proc = sb.run(["sbatch", "--parsable", f"--gres={gres}", "-t", "2", *extra, "--wrap", f"sleep {seconds}"])
        out.append(proc.stdout.strip().split(";")[0])
    return out


def begin_of(sb, job: str) -> float:
    from datetime import datetime

    out = sb.run(["scontrol", "-o", "show", "job", job]).stdout
    text = out.split("EligibleTime=")[1].split()[0]
    return datetime.fromisoformat(text).timestamp()


def layouts(sb) -> dict[str, str | None]:
    return {n: i.layout for n, i in nodes_info(sb).items()}


def wait_started(sb, jobs: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = sacct_states(sb, jobs)
        if all(states.get(j) in ("RUNNING", "COMPLETED") for j in jobs):
            return
        time.sleep(1)
    raise AssertionError(f"jobs not started: {sacct_states(sb, jobs)}")


def test_slices_then_a_burst_of_eight_gpu_jobs_reshape_idle_nodes_and_nothing_thrashes(night):
    sb = night
    config = elastic_config(sb)
    (sb.root / "controller" / "elastic.json").unlink(missing_ok=True)  # no cool-down from an earlier session
    log_path = sb.root / "controller" / "journal.log"
    log_from = len(log_path.read_text().splitlines()) if log_path.exists() else 0
    # 1. every node whole: the floor makes gpu:1g.5gb submittable first (one DGX to day)
    d = step(sb, config)
    assert [(a["node"], a["to"], a["reason"]) for a in d["actions"]] == [("a100n1", "day", "floor")]
    assert d["outcomes"] == {"a100n1": "done"} and layouts(sb)["a100n1"] == "day"
    # 2. a burst of 8-GPU NVLink jobs is submitted now (a100n2 still has 8 whole A100: Slurm
    # accepts them) to begin in a minute: until then they are not demand
    burst = submit(sb, "gpu:a100:8", 5, 2, "--begin=now+50")
    # a queue of slice jobs: 7 x 6 slices; a100n1 in day has 32 (5 jobs), 2 jobs wait
    slices = submit(sb, "gpu:1g.5gb:6", 15, 7)
    time.sleep(WINDOW_S + 2)  # the jobs count once they waited the batching window
    dry = step(sb, config, "--dry-run")
    assert [(a["node"], a["to"]) for a in dry["actions"]] == [("a100n2", "day")] and dry["outcomes"] == {}
    assert layouts(sb)["a100n2"] == "night"  # a dry run changes nothing
    d = step(sb, config)
    # exactly enough: one node for the 12 slices of the two waiting jobs, not both
    (a,) = d["actions"]
    assert (a["node"], a["to"], a["reason"], sorted(a["jobs"])) == ("a100n2", "day", "demand", sorted(slices[5:]))
    assert a["gain_eq"] == round(12 / 7, 3) and "2 jobs gpu:1g.5gb:6" in a["why"]
    (u,) = d["unmet"]
    assert (u["request"], u["jobs"], u["gpu_eq"]) == ("gpu:1g.5gb:6", 2, round(12 / 7, 3))
    assert u["longest_wait_s"] >= WINDOW_S
    wait_started(sb, slices)
    states = wait_jobs_done(sb, slices, timeout=120)
    assert set(states.values()) == {"COMPLETED"}, states
    # 3. the burst is due: both DGX are in day (2 whole A100 each), nothing holds 8
    while time.time() < begin_of(sb, burst[0]) + WINDOW_S + 2:
        time.sleep(1)
    d = step(sb, config)
    back = [(a["node"], a["to"]) for a in d["actions"]]
    # the floor keeps one DGX in day; a100n1 (switched first) is past its cool-down
    assert back == [("a100n1", "night")], d
    assert any("1g.5gb would drop" in h["why"] or "cool-down" in h["why"] for h in d["held"]), d["held"]
    states = wait_jobs_done(sb, burst, timeout=120)
    assert set(states.values()) == {"COMPLETED"}, states  # one after the other on a100n1
    # 4. the load flips back to slices at once: a100n1 is cooling down, a100n2 holds 32
    again = submit(sb, "gpu:1g.5gb:6", 15, 7)  # 5 start on a100n2, 2 wait for them
    time.sleep(WINDOW_S + 2)
    d = step(sb, config)
    assert d["actions"] == [], d
    assert any(h["node"] == "a100n1" and "cool-down" in h["why"] for h in d["held"]), d["held"]
    states = wait_jobs_done(sb, again, timeout=120)
    assert set(states.values()) == {"COMPLETED"}, states  # they ran on a100n2, in turn
    # no job was killed, and the switches kept their bounds
    everything = [*slices, *burst, *again]
    assert never_requeued(sb, everything) == {j: ["COMPLETED"] for j in everything}  # one run each
    state = json.loads((sb.root / "controller" / "elastic.json").read_text())
    lines = log_path.read_text().splitlines()[log_from:]  # this test's decisions
    log = [json.loads(x)["elastic"] for x in lines if '"elastic"' in x]
    switches = [
        (e["now"], a["node"]) for e in log for a in e["actions"] if e.get("outcomes", {}).get(a["node"]) == "done"
    ]
    assert len(switches) == 3
    per_node: dict[str, list[float]] = {}
    for t, n in switches:
        per_node.setdefault(n, []).append(t)
    for ts in per_node.values():
        assert all(b - a >= COOLDOWN_S for a, b in itertools.pairwise(ts)), per_node
    assert set(state["switched_at"]) == {"a100n1", "a100n2"}
    # gpupool status shows the last decision
    status = json.loads(sb.run([*GPUPOOL, "--config", config, "status", "--json"]).stdout)
    assert status["mode"] == "elastic" and status["elastic"]["held"]
    assert_converged(sb, {"a100n1": "night", "a100n2": "day", "h100n1": "night", "a30n1": "night", "v100n1": "night"})


def test_with_no_idle_node_a_busy_node_is_drained_for_starving_jobs_and_its_job_runs_to_its_end(night):
    sb = night
    config = elastic_config(sb, max_wait="20s", drain_within="3m")
    (sb.root / "controller" / "elastic.json").unlink(missing_ok=True)
    d = step(sb, config)  # the floor: a100n1 to day (32 slices), a100n2 stays whole
    assert [(a["node"], a["to"], a["reason"]) for a in d["actions"]] == [("a100n1", "day", "floor")]
    # every node busy: an 8-GPU job on a100n2 (75 s, limit 2 min), a100n1's slices held by 5
    # long jobs (5 x 6 of 32); two more slice jobs wait, and no idle node can ever serve them
    big = submit(sb, "gpu:a100:8", 75, 1)
    fillers = submit(sb, "gpu:1g.5gb:6", 100, 5)
    wait_started(sb, [*big, *fillers])
    waiting = submit(sb, "gpu:1g.5gb:6", 10, 2)
    time.sleep(WINDOW_S + 2)
    d = step(sb, config)  # waited the window, not max_wait: nothing is drained yet
    assert d["actions"] == [] and d["unmet"][0]["jobs"] == 2, d
    time.sleep(20)
    d = step(sb, config)
    (a,) = d["actions"]
    assert (a["node"], a["from"], a["to"], a["reason"], sorted(a["jobs"])) == (
        "a100n2",
        "night",
        "day",
        "drain",
        sorted(waiting),
    ), d
    assert "no idle node starts them" in a["why"]
    # reserved and skipped at once (--deadline 0): its job is not killed, no new job lands there
    assert d["outcomes"] == {"a100n2": "skipped"}
    assert sacct_states(sb, big) == {big[0]: "RUNNING"}
    assert "a100n2" in sb.run(["scontrol", "show", "reservation", "gpupool_day"]).stdout
    assert layouts(sb)["a100n2"] == "night"
    again = step(sb, config)  # still busy: the drain is under way, the jobs are not demand again
    assert again["actions"] == [] and again["outcomes"] == {} and again["unmet"] == [], again
    assert wait_jobs_done(sb, big, timeout=120) == {big[0]: "COMPLETED"}  # ran to its end
    d = step(sb, config)  # the next step finishes the drain (once Slurm no longer shows the job completing)
    for _ in range(10):
        if d["outcomes"]:
            break
        time.sleep(2)
        d = step(sb, config)
    assert d["outcomes"] == {"a100n2": "done"} and layouts(sb)["a100n2"] == "day", d
    state = json.loads((sb.root / "controller" / "elastic.json").read_text())
    assert state["last"]["drains_finished"] == {"a100n2": "done"} and "a100n2" in state["switched_at"]
    states = wait_jobs_done(sb, [*fillers, *waiting], timeout=180)
    assert set(states.values()) == {"COMPLETED"}, states
    every = [*big, *fillers, *waiting]
    assert never_requeued(sb, every) == {j: ["COMPLETED"] for j in every}  # the drain killed nothing
    assert_converged(sb, {"a100n1": "day", "a100n2": "day", "h100n1": "night", "a30n1": "night", "v100n1": "night"})


def test_in_an_elastic_period_the_wrapper_takes_an_idle_whole_gpu_when_no_slice_is_idle(night):
    """gpupool-sbatch --gpu-mem=4G in an elastic period: a 1g.5gb slice while one is idle;
    with every 1g.5gb busy, the smallest idle whole GPU with that memory (the A30, 24 GB;
    before the DGX's larger 2g.10gb slices, which bigger jobs need), instead of waiting for
    the pool to reshape: the job starts at once (#17, idle_first)."""
    from .test_submit_slurm import wrapper

    sb = night
    config = elastic_config(sb)
    (sb.root / "controller" / "elastic.json").unlink(missing_ok=True)
    d = step(sb, config)  # the floor: a100n1 to day; the submit catalog now says elastic
    assert [(a["node"], a["to"]) for a in d["actions"]] == [("a100n1", "day")]
    jobs: list[str] = []
    try:

        def via_wrapper() -> tuple[str, str]:
            out = sb.run([wrapper(), "--parsable", "--gpu-mem=4G", "-t", "2", "--wrap", "sleep 60"]).stdout
            job = out.strip().split(";")[0]
            jobs.append(job)
            tres = sb.run(["scontrol", "-o", "show", "job", job]).stdout.split("TresPerNode=")[1].split()[0]
            return job, tres

        _, tres = via_wrapper()
        assert tres.endswith("gpu:1g.5gb:1") or tres.endswith("gpu:1g.5gb"), tres  # a slice is idle
        fillers = [*submit(sb, "gpu:1g.5gb:8", 120, 3), *submit(sb, "gpu:1g.5gb:7", 120, 1)]  # the other 31
        jobs += fillers
        wait_started(sb, fillers)
        job, tres = via_wrapper()
        assert "gpu:a30" in tres, tres  # no slice idle: the smallest idle whole GPU
        wait_started(sb, [job])
    finally:
        if jobs:
            sb.run(["scancel", *jobs], check=False)
