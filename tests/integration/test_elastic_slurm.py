"""#17 on the real sandbox Slurm: the elastic policy reshapes idle nodes to what the queue
waits for, without killing a job, and does not thrash; under a load that leaves no node
idle, it drains a busy node for jobs that have waited ``max_wait``.

The pool config of the test: the sandbox's, with ``schedule.mode: elastic``; only the two
DGX nodes may change (day or night), a floor of one 1g.5gb GPU-equivalent keeps that type
submittable (job_submit.lua refuses a GRES type no node has), batching window 10 s,
cool-down 120 s.  Every step is one ``gpupool repartition --elastic`` run, as cron makes it.
The test starts and ends with every node in the night layout.

On a loaded machine a step takes many times what it takes alone (#25): the jobs whose
running or waiting a step must see run until the test opens their gate, a job becomes due
when the test says (``StartTime=now``), and where a step must come *before* a bound (a
cool-down, ``max_wait``) the bound leaves minutes for what takes seconds on an idle machine.
Where a step must come *after* a bound, the test moves the policy's clock on instead of
sleeping through it (the bounds' arithmetic is unit-tested on an injected clock; here what
matters is Slurm's side): a cool-down is passed by ageing every time ``elastic.json``
recorded, as the passing of that time would, and ``max_wait`` by a second step whose
config has a ``max_wait`` the jobs have already waited.
"""

from __future__ import annotations

import itertools
import json
import time

import pytest

from .repartition_support import (
    GPUPOOL,
    SLURM_WAIT_S,
    Gate,
    assert_converged,
    job_state,
    never_requeued,
    nodes_info,
    report_of,
    sacct_states,
    wait_jobs_done,
    wait_until,
)

pytestmark = pytest.mark.integration

# the batching window, and the cool-down: step 4 of the first test must come within it after a
# switch, past a burst of jobs, seven submissions and a window (about 40 s on CI's load, and
# whatever more a busier machine takes: the cool-down is never waited for, the test moves the
# policy's clock past it, so it costs no time to make it long)
WINDOW_S, COOLDOWN_S = 10, 600
# the second test's max_wait: its first step must come before it (a window and a step after
# the jobs were submitted: seconds, more on a busy machine); its later steps run with a
# max_wait of WINDOW_S, which the jobs have waited by then
MAX_WAIT_S = 600


def elastic_config(sb, **extra: str) -> str:
    from benchmarks.bench_sandbox_scale import elastic_config as write

    settings = {
        "layouts": {"dgx": ["day", "night"], "hopper": ["night"], "a30": ["night"], "volta": ["night"]},
        "floors": {"1g.5gb": 1},
        "max_changing": 2,
        "window": f"{WINDOW_S}s",
        "cooldown": f"{COOLDOWN_S}s",
        "min_gain": 1,
        **extra,
    }
    return str(write(sb.root, settings))


def step(sb, config: str, *args: str) -> dict:
    proc = sb.run([*GPUPOOL, "--config", config, "repartition", "--elastic", "--json", *args], timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return report_of(proc)


def submit(sb, gres: str, wrap: str, count: int, *extra: str, limit_min: int = 30) -> list[str]:
    out = []
    for _ in range(count):
        argv = ["sbatch", "--parsable", f"--gres={gres}", "-t", str(limit_min), *extra, "--wrap", wrap]
        out.append(sb.run(argv).stdout.strip().split(";")[0])
    return out


def elastic_state(sb) -> dict:
    return json.loads((sb.root / "controller" / "elastic.json").read_text())


def age_elastic_state(sb, until: float) -> float:
    """Move the policy's clock on to ``until``: every time ``elastic.json`` recorded (the last
    decision, each node's last switch) moves back by what is left until then, exactly what
    waiting that long would do to the state; returns the seconds aged (0 if already past)."""
    path = sb.root / "controller" / "elastic.json"
    raw = json.loads(path.read_text())
    left = until - time.time()
    if left <= 0:
        return 0.0
    if raw.get("last_decision_epoch") is not None:
        raw["last_decision_epoch"] -= left
    raw["switched_at"] = {node: at - left for node, at in raw["switched_at"].items()}
    path.write_text(json.dumps(raw))
    return left


def layouts(sb) -> dict[str, str | None]:
    return {n: i.layout for n, i in nodes_info(sb).items()}


def wait_started(sb, jobs: list[str], timeout: float = SLURM_WAIT_S) -> None:
    def started() -> bool:
        states = sacct_states(sb, jobs)
        return all(states.get(j) in ("RUNNING", "COMPLETED") for j in jobs)

    try:
        wait_until(started, "jobs to start", timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}: {sacct_states(sb, jobs)}") from None


def test_slices_then_a_burst_of_eight_gpu_jobs_reshape_idle_nodes_and_nothing_thrashes(night, tmp_path):
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
    # accepts them) to begin in an hour (the test makes them due in 3.): until then they are
    # not demand
    burst = submit(sb, "gpu:a100:8", "sleep 2", 2, "--begin=now+3600")
    # a queue of slice jobs, each until its gate opens: 7 x 6 slices; a100n1 in day has 32
    # (5 jobs), 2 jobs wait
    slices_gate = Gate(tmp_path, "slices")
    slices = submit(sb, "gpu:1g.5gb:6", slices_gate.wrap(), 7)
    wait_started(sb, slices[:5])
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
    wait_started(sb, slices)  # the two on a100n2, in day now
    slices_gate.open()
    states = wait_jobs_done(sb, slices)
    assert set(states.values()) == {"COMPLETED"}, states
    # 3. the burst is due (once a100n1's cool-down and the batching window are over): both
    # DGX are in day (2 whole A100 each), nothing holds 8
    state = elastic_state(sb)
    aged = age_elastic_state(
        sb, max(state["switched_at"]["a100n1"] + COOLDOWN_S, state["last_decision_epoch"] + WINDOW_S) + 1
    )
    for job in burst:
        sb.run(["scontrol", "update", f"jobid={job}", "StartTime=now"])
    # (Slurm names the reason again once its scheduler has looked at them: then they are demand)
    wait_until(lambda: all(job_state(sb, j)[1] not in ("BeginTime", "") for j in burst), "the burst to be due")
    d = step(sb, config)
    back = [(a["node"], a["to"]) for a in d["actions"]]
    # the floor keeps one DGX in day; a100n1 (switched first) is past its cool-down
    assert back == [("a100n1", "night")], d
    assert any("1g.5gb would drop" in h["why"] or "cool-down" in h["why"] for h in d["held"]), d["held"]
    states = wait_jobs_done(sb, burst)
    assert set(states.values()) == {"COMPLETED"}, states  # one after the other on a100n1
    # 4. the load flips back to slices at once: a100n1 is cooling down, a100n2 holds 32
    again_gate = Gate(tmp_path, "again")
    again = submit(sb, "gpu:1g.5gb:6", again_gate.wrap(), 7)  # 5 start on a100n2, 2 wait for them
    wait_started(sb, again[:5])
    time.sleep(WINDOW_S + 2)
    d = step(sb, config)
    cooling_s = time.time() - elastic_state(sb)["switched_at"]["a100n1"]  # for the message: cool-down left?
    assert d["actions"] == [], (cooling_s, d)
    assert any(h["node"] == "a100n1" and "cool-down" in h["why"] for h in d["held"]), (cooling_s, d["held"])
    again_gate.open()
    states = wait_jobs_done(sb, again)
    assert set(states.values()) == {"COMPLETED"}, states  # they ran on a100n2, in turn
    # no job was killed, and the switches kept their bounds
    everything = [*slices, *burst, *again]
    assert never_requeued(sb, everything) == {j: ["COMPLETED"] for j in everything}  # one run each
    state = json.loads((sb.root / "controller" / "elastic.json").read_text())
    lines = log_path.read_text().splitlines()[log_from:]  # this test's decisions
    records = [json.loads(x) for x in lines]  # (a run's journal lines name "elastic" as its trigger too)
    log = [r["elastic"] for r in records if "elastic" in r]
    switches = [
        (e["now"], a["node"]) for e in log for a in e["actions"] if e.get("outcomes", {}).get(a["node"]) == "done"
    ]
    assert len(switches) == 3
    per_node: dict[str, list[float]] = {}
    for t, n in switches:
        per_node.setdefault(n, []).append(t)
    # in the policy's time: a100n1's clock was moved on by `aged` between its two switches
    for ts in per_node.values():
        assert all(b - a + aged >= COOLDOWN_S for a, b in itertools.pairwise(ts)), (per_node, aged)
    assert set(state["switched_at"]) == {"a100n1", "a100n2"}
    # gpupool status shows the last decision
    status = json.loads(sb.run([*GPUPOOL, "--config", config, "status", "--json"]).stdout)
    assert status["mode"] == "elastic" and status["elastic"]["held"]
    assert_converged(sb, {"a100n1": "night", "a100n2": "day", "h100n1": "night", "a30n1": "night", "v100n1": "night"})


def test_with_no_idle_node_a_busy_node_is_drained_for_starving_jobs_and_its_job_runs_to_its_end(night, tmp_path):
    sb = night
    config = elastic_config(sb, max_wait=f"{MAX_WAIT_S}s", drain_within="30m")
    (sb.root / "controller" / "elastic.json").unlink(missing_ok=True)
    d = step(sb, config)  # the floor: a100n1 to day (32 slices), a100n2 stays whole
    assert [(a["node"], a["to"], a["reason"]) for a in d["actions"]] == [("a100n1", "day", "floor")]
    # every node busy, each job until its gate opens: an 8-GPU job on a100n2 (limit 20 min:
    # due to end within drain_within), a100n1's slices held by 5 jobs (5 x 6 of 32); two more
    # slice jobs wait, and no idle node can ever serve them
    big_gate, fillers_gate = Gate(tmp_path, "big"), Gate(tmp_path, "fillers")
    big = submit(sb, "gpu:a100:8", big_gate.wrap(), 1, limit_min=20)
    fillers = submit(sb, "gpu:1g.5gb:6", fillers_gate.wrap(), 5)
    wait_started(sb, [*big, *fillers])
    waiting = submit(sb, "gpu:1g.5gb:6", "sleep 10", 2)
    submitted = time.time()  # Slurm's submit times are at most this
    time.sleep(WINDOW_S + 2)
    d = step(sb, config)  # waited the window, not max_wait: nothing is drained yet
    assert d["actions"] == [] and d["unmet"][0]["jobs"] == 2, d
    assert d["unmet"][0]["longest_wait_s"] < MAX_WAIT_S, d  # (what the step saw: not starving yet)
    # the jobs have now waited a window and a step: every later step's max_wait is below
    # that (instead of sleeping until they have waited MAX_WAIT_S)
    waited_s = int(time.time() - submitted)
    assert waited_s > WINDOW_S, waited_s
    config = elastic_config(sb, max_wait=f"{WINDOW_S}s", drain_within="30m")
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
    big_gate.open()
    assert wait_jobs_done(sb, big) == {big[0]: "COMPLETED"}  # ran to its end
    # the next step finishes the drain (once Slurm no longer shows the job completing)
    deadline = time.monotonic() + SLURM_WAIT_S
    while not (d := step(sb, config))["outcomes"] and time.monotonic() < deadline:
        time.sleep(2)
    assert d["outcomes"] == {"a100n2": "done"} and layouts(sb)["a100n2"] == "day", d
    state = json.loads((sb.root / "controller" / "elastic.json").read_text())
    assert state["last"]["drains_finished"] == {"a100n2": "done"} and "a100n2" in state["switched_at"]
    fillers_gate.open()
    states = wait_jobs_done(sb, [*fillers, *waiting])
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
            # each job runs until the test cancels it: the slice stays busy while the test looks
            out = sb.run([wrapper(), "--parsable", "--gpu-mem=4G", "-t", "30", "--wrap", "sleep 3600"]).stdout
            job = out.strip().split(";")[0]
            jobs.append(job)
            tres = sb.run(["scontrol", "-o", "show", "job", job]).stdout.split("TresPerNode=")[1].split()[0]
            return job, tres

        _, tres = via_wrapper()
        assert tres.endswith("gpu:1g.5gb:1") or tres.endswith("gpu:1g.5gb"), tres  # a slice is idle
        fillers = [
            *submit(sb, "gpu:1g.5gb:8", "sleep 3600", 3),
            *submit(sb, "gpu:1g.5gb:7", "sleep 3600", 1),
        ]  # the other 31
        jobs += fillers
        wait_started(sb, fillers)
        job, tres = via_wrapper()
        assert "gpu:a30" in tres, tres  # no slice idle: the smallest idle whole GPU
        wait_started(sb, [job])
    finally:
        if jobs:
            sb.run(["scancel", *jobs], check=False)
