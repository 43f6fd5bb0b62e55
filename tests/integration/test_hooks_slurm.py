"""The job hooks in the real sandbox Slurm: MIG UUIDs, shard limits, health, leftovers."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from slurm_gpupool.core.mig.catalog import get_model

from .repartition_support import (
    SLURM_WAIT_S,
    Gate,
    assert_converged,
    job_files,
    repartition,
    text_of,
    wait_jobs_done,
    wait_until,
)

pytestmark = pytest.mark.integration


def parse_env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def sbatch(sandbox, *args: str) -> str:
    return sandbox.run(["sbatch", "--parsable", *args]).stdout.strip().split(";")[0]


def state_of(sandbox, job: str) -> str:
    return sandbox.run(["squeue", "-h", "-j", job, "-o", "%T"], check=False).stdout.strip()


def wait_for(pred, timeout: float = SLURM_WAIT_S, what: str = "") -> None:
    wait_until(pred, what, timeout, interval=0.3)


@pytest.fixture(scope="module")
def day(_sandbox_session):
    sb = _sandbox_session.ready()
    sb.switch("day")
    yield sb
    sb.switch("night")


def job_env(sandbox, tmp: Path, name: str, *args: str) -> tuple[str, dict[str, str]]:
    out = tmp / f"{name}.out"
    job = sbatch(sandbox, "--wait", "-o", str(out), *args, "--wrap", "env")
    return job, parse_env(out.read_text())


def slurm_device(sandbox, node: str, env: dict[str, str]) -> list[dict]:
    table = sandbox.node_state(node)["slurm_devices"]
    return [table[int(i)] for i in env["SLURM_JOB_GPUS"].split(",")]


def test_two_jobs_on_one_gpu_each_see_their_own_mig_uuid(day, tmp_path: Path):
    outs = [tmp_path / f"m{k}.out" for k in range(2)]
    gate = Gate(tmp_path, "mig")  # both run at once: neither ends before both have printed
    jobs = [
        sbatch(day, "-w", "h100n1", "--gres=gpu:1g.10gb:1", "-o", str(o), "--wrap", f"env; {gate.wrap()}") for o in outs
    ]
    wait_for(lambda: all("CUDA_VISIBLE_DEVICES=" in text_of(o) for o in outs), what="envs")
    assert all(state_of(day, j) == "RUNNING" for j in jobs)
    gate.open()
    wait_for(lambda: all(state_of(day, j) == "" for j in jobs), what="both MIG jobs to finish")
    envs = [parse_env(o.read_text()) for o in outs]
    uuids = [e["CUDA_VISIBLE_DEVICES"] for e in envs]
    assert all(re.fullmatch(r"MIG-[0-9a-f-]{36}", u) for u in uuids) and uuids[0] != uuids[1]
    devs = [slurm_device(day, "h100n1", e)[0] for e in envs]
    assert [d["mig_uuid"] for d in devs] == uuids  # exactly Slurm's allocation
    assert devs[0]["gpu"] == devs[1]["gpu"] == 0  # two MIG instances of the same GPU
    assert all(e["SLURM_GPUPOOL_PROFILE"] == "1g.10gb" and e["SLURM_GPUPOOL_LAYOUT"] == "day" for e in envs)


def test_a_job_with_two_instances_and_across_a_layout_change(day, tmp_path: Path):
    _, env = job_env(day, tmp_path, "two", "-w", "h100n1", "--gres=gpu:3g.40gb:2")
    uuids = env["CUDA_VISIBLE_DEVICES"].split(",")
    assert len(uuids) == 2 and [d["mig_uuid"] for d in slurm_device(day, "h100n1", env)] == uuids
    day.switch("night")
    day.switch("day")  # instances are re-created: new UUIDs, and jobs see the new ones
    _, env2 = job_env(day, tmp_path, "two-again", "-w", "h100n1", "--gres=gpu:3g.40gb:2")
    uuids2 = env2["CUDA_VISIBLE_DEVICES"].split(",")
    assert set(uuids2).isdisjoint(uuids)
    assert [d["mig_uuid"] for d in slurm_device(day, "h100n1", env2)] == uuids2
    live = json.loads(day.gpupool("--node", "h100n1", "inventory", "--json").stdout)
    assert set(uuids2) <= {d["uuid"] for g in live["gpus"] for gi in g["instances"] for d in gi["devices"]}


def test_an_exclusive_job_sees_the_gpu_type_it_asked_for(day, tmp_path: Path):
    """#15.11: --exclusive gets every GPU of the node (by day 36 MIG devices and 2 A100s);
    CUDA_VISIBLE_DEVICES listed the MIG UUIDs first, so CUDA ran on a 1g.5gb slice."""
    request = ["-w", "a100n1", "--exclusive", "--gres=gpu:a100:2"]
    out = tmp_path / "wrapped.out"
    day.run([wrapper(), "--parsable", "--wait", *request, "-o", str(out), "--wrap", "env"])
    env = parse_env(out.read_text())
    allocated = slurm_device(day, "a100n1", env)
    assert {d["kind"] for d in allocated} == {"mig", "whole"}, allocated  # Slurm gave it everything
    whole = [d["gpu_uuid"] for d in allocated if d["type"] == "a100"]
    assert len(whole) == 2 and env["CUDA_VISIBLE_DEVICES"].split(",") == whole  # exactly its request
    assert env["SLURM_GPUPOOL_PROFILE"] == "a100,a100"
    # plain sbatch: 23.11+ tell the job its request (SLURM_TRES_PER_NODE): the same; 22.05
    # does not, so the job sees every device, its whole GPUs first (CUDA's devices 0 and 1)
    _, plain = job_env(day, tmp_path, "plain", *request)
    cvd = plain["CUDA_VISIBLE_DEVICES"].split(",")
    if "SLURM_TRES_PER_NODE" in plain:
        assert cvd == whole, plain["SLURM_TRES_PER_NODE"]
    else:
        assert cvd[:2] == whole and len(cvd) == len(allocated), cvd


def wrapper() -> str:
    return shutil.which("gpupool-sbatch") or f"{Path(sys.executable).parent}/gpupool-sbatch"


def test_shards_get_a_thread_percentage_and_whole_gpus_do_not(day, tmp_path: Path):
    _, env = job_env(day, tmp_path, "shard", "-w", "v100n1", "--gres=shard:2")
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"  # 2 of the GPU's 4 shares
    (dev,) = slurm_device(day, "v100n1", env)
    assert env["CUDA_VISIBLE_DEVICES"] == dev["gpu_uuid"] and dev["kind"] == "shared"
    _, whole = job_env(day, tmp_path, "whole", "-w", "v100n1", "--gres=gpu:v100:1")
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in whole
    (wdev,) = slurm_device(day, "v100n1", whole)
    assert whole["CUDA_VISIBLE_DEVICES"] == wdev["gpu_uuid"] and wdev["kind"] == "whole"


def _write_hooks_settings(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.test")
    tmp.write_bytes(data)
    tmp.chmod(path.stat().st_mode & 0o777)
    os.replace(tmp, path)


@contextlib.contextmanager
def mps_enabled(sandbox, timeout_s: float | None = None) -> Iterator[None]:
    """hooks.mps on with the simulated GPUs' stand-in nvidia-cuda-mps-control (and
    ``hooks.mps_timeout_s`` if given); the settings as they were after.  Both in the pool
    config, whose ``gres install`` (a switch's) writes gpupool-hooks.json again, and in that
    file itself, which the hooks read at every job: no restart."""
    from slurm_gpupool.hooks.mps import PID_FILE
    from slurm_gpupool.sandbox.configs import MPS_CONTROL, mps_control_stand_in

    mps_control_stand_in(sandbox.root / "libexec", set())
    control = str(sandbox.root / "libexec" / MPS_CONTROL)
    hooks, config = sandbox.root / "etc" / "gpupool-hooks.json", sandbox.root / "etc" / "gpupool.yaml"
    saved = {path: path.read_bytes() for path in (hooks, config)}
    on = json.loads(saved[hooks])
    # The previous test's last Epilog may still be stopping its daemon (its job shows as
    # COMPLETING, or has just left squeue): a job started now on that GPU would find a
    # daemon serving another user and run without MPS (CI, 24.11, a loaded machine).
    left = f"{str(on['mps']['pipe_dir']).replace('{node}', '*')}/*/{PID_FILE}"
    wait_for(lambda: not glob.glob(left), what="earlier tests' MPS daemons to stop")
    on["mps"] = {**on.get("mps", {}), "enabled": True, "control": control}
    cfg = yaml.safe_load(saved[config])
    cfg["hooks"] = {**(cfg.get("hooks") or {}), "mps": True, "mps_control": control}
    if timeout_s is not None:
        on["mps"]["timeout_s"] = cfg["hooks"]["mps_timeout_s"] = timeout_s
    _write_hooks_settings(config, yaml.safe_dump(cfg).encode())
    _write_hooks_settings(hooks, json.dumps(on).encode())
    try:
        yield
    finally:
        for path, data in saved.items():
            _write_hooks_settings(path, data)


def test_a_shard_job_runs_under_its_gpus_mps_daemon_and_the_last_epilog_stops_it(day, tmp_path: Path):
    """The job gets its GPU's daemon, its directories and its limits."""
    with mps_enabled(day):
        _, env = job_env(day, tmp_path, "mps", "-w", "v100n1", "--gres=shard:1")
        pipes = Path(env["CUDA_MPS_PIPE_DIRECTORY"])
        # the job was the GPU's only shard job: its Epilog stopped the daemon
        wait_for(lambda: not (pipes / "nvidia-cuda-mps-control.pid").exists(), what="the MPS daemon to stop")
    (dev,) = slurm_device(day, "v100n1", env)
    assert pipes.name == dev["gpu_uuid"] and env["CUDA_MPS_LOG_DIRECTORY"] == f"{pipes}.log"
    assert "started (simulated)" in (Path(f"{pipes}.log") / "control.log").read_text()
    memory = next(g["memory_mib"] for g in day.node_state("v100n1")["gpus"] if g["index"] == dev["gpu"])
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"  # 1 of the GPU's 4 shares
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={memory // 4}M"


def sim_client(sandbox, node: str, over_mib: int, under_mib: int) -> str:
    """A job's CUDA program on the simulated GPUs (``hw/sim/mps_client.py``): it initialises
    CUDA with the job's environment, allocates ``over_mib`` then ``under_mib``, prints one
    JSON line.  (On a real node libcuda finds the GPU; here the node's simulated state.)"""
    state = sandbox.root / "sim" / f"{node}.json"
    return (
        f"SLURM_GPUPOOL_SIM_STATE={state} {sys.executable} -m slurm_gpupool.hw.sim.mps_client "
        f"{over_mib} {under_mib} < /dev/null"
    )


def test_two_users_share_an_mps_gpu_and_neither_hangs_and_over_the_limit_an_allocation_fails(day, tmp_path: Path):
    """#28 in real jobs: one user's job runs a CUDA client under its GPU's MPS server, whose
    pinned memory limit refuses an allocation over the job's share and grants one under it.
    Then a second user's shard job holds the GPU's server (one user per server, NVIDIA's MPS
    documentation): another user's shard job on that GPU is kept off MPS by the Prolog,
    told so, and its CUDA client runs at once (plain time-slicing) instead of waiting for
    the server at cuInit while its time limit runs."""
    user = day.sandbox.users[0].name  # an unprivileged user the sandbox made
    shared = day.root / "jobs-two-users"  # where the second user's job can write
    shared.mkdir(exist_ok=True)
    shared.chmod(0o1777)
    memory = min(g["memory_mib"] for g in day.node_state("v100n1")["gpus"])
    limit = memory // 4  # 1 of the GPU's 4 shares
    client = sim_client(day, "v100n1", limit + 1, limit // 2)
    gate = Gate(shared, "user2")
    held = ""
    with mps_enabled(day):
        try:
            out = tmp_path / "alone.out"
            first_job = sbatch(
                day, "--wait", "-o", str(out), "-w", "v100n1", "--gres=shard:1", "--wrap", f"env; {client}"
            )
            alone = out.read_text()
            # --wait returns once the job ended, its Epilog (which stops root's MPS daemon) may
            # still run: a job started meanwhile would find the daemon serving another user
            wait_for(lambda: state_of(day, first_job) == "", what="the first job's Epilog")
            held = day.sbatch_as(
                user, "-o", str(shared / "held.out"), "--chdir", str(shared), "-w", "v100n1", "--gres=shard:1",
                "--wrap", f"env > {shared / 'held.env'}; {gate.wrap()}",
            )  # fmt: skip
            wait_for(lambda: (shared / "held.env").exists(), what=f"{user}'s job to start")
            out = tmp_path / "other.out"
            sbatch(day, "--wait", "-o", str(out), "-w", "v100n1", "--gres=shard:1", "--wrap", f"env; {client}")
            other = out.read_text()
            gate.open()
            wait_for(lambda: state_of(day, held) in ("", "COMPLETED", "COMPLETING"), what=f"{user}'s job to end")
        finally:
            gate.open()
            if held:
                day.run(["scancel", held], check=False)
    env_alone, env_held, env_other = (parse_env(t) for t in (alone, (shared / "held.env").read_text(), other))
    first = client_records(alone)[-1]
    assert first["sim_mode"] == "mps", alone
    assert first["steps"]["cuMemAlloc_over"] == "CUDA_ERROR_OUT_OF_MEMORY", first
    assert first["steps"]["cuMemAlloc_under"] == "CUDA_SUCCESS", first
    assert env_alone["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={limit}M"
    # the held job and the other one share a GPU: the case the rule is for
    assert env_other["CUDA_VISIBLE_DEVICES"] == env_held["CUDA_VISIBLE_DEVICES"], (env_held, env_other)
    assert "CUDA_MPS_PIPE_DIRECTORY" in env_held and "CUDA_MPS_PIPE_DIRECTORY" not in env_other
    assert "runs without CUDA MPS" in other and "serves another user" in other and user in other, other
    second = client_records(other)[-1]
    assert second["sim_mode"] == "plain" and second["steps"]["cuInit"] == "CUDA_SUCCESS", second
    # without MPS nothing limits it: what the note tells the user
    assert second["steps"]["cuMemAlloc_over"] == "CUDA_SUCCESS", second


def clients(out: Path) -> list[dict]:
    """The JSON lines the job's simulated CUDA clients printed so far, in order."""
    return client_records(text_of(out))


def client_records(text: str) -> list[dict]:
    """A job output's client lines (Slurm's own notes may come before or after them)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith('{"pid"')]


def notes(out: Path) -> list[str]:
    """A job's output without its environment: what the hooks told it and its clients' lines."""
    return [line for line in out.read_text().splitlines() if "=" not in line or line.startswith("{")]


def daemon_pid(pipes: Path) -> int:
    """The pid the GPU's MPS control daemon wrote into its pipe directory."""
    return int((pipes / "nvidia-cuda-mps-control.pid").read_text())


def running(pid: int) -> bool:
    """The process exists and has not exited (a killed daemon nobody reaped is a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def healthcheck_program(sandbox) -> str:
    """slurm.conf's HealthCheckProgram."""
    (program,) = re.findall(r"^HealthCheckProgram=(\S+)$", Path(sandbox.env["SLURM_CONF"]).read_text(), re.M)
    return program


def limits_held(client: dict) -> bool:
    """The client ran under MPS: its allocation over the pinned limit failed, the one under it not."""
    steps = client["steps"]
    return client["sim_mode"] == "mps" and (steps["cuMemAlloc_over"], steps["cuMemAlloc_under"]) == (
        "CUDA_ERROR_OUT_OF_MEMORY",
        "CUDA_SUCCESS",
    )


# a hook waits this long for a daemon that does not answer (hooks.mps_timeout_s; 5 s by
# default).  Longer here than the default, not shorter: it is also how long a new daemon may
# take to answer, and on a loaded CI machine (24.11's container) a job's daemon that took
# longer than 3 s left that job off MPS, failing the test's first check; with the machine
# at a load average of 240, 10 s did not do either
MPS_TIMEOUT_S = 20.0


# The hooks' own handling of a crashed and a wedged daemon (against the stand-in
# nvidia-cuda-mps-control); Slurm only runs the jobs and their hooks, which the MPS tests
# above and below prove on every release: run once (docs/development.md).
@pytest.mark.release_independent
def test_a_killed_and_a_wedged_mps_daemon_cost_no_hang_no_drain_and_the_next_job_gets_a_fresh_one(day, tmp_path: Path):
    """#28: while shard jobs run, one GPU's MPS control daemon is killed (-9, as a crash) and
    another's is stopped (SIGSTOP: alive, answering nothing).  What the hooks promise
    (docs/hooks.md): the running jobs are left alone and complete (a CUDA process that job
    starts after the crash finds no daemon and runs without MPS); a new shard job on such a
    GPU runs without MPS, is told why, and never waits (for a wedged daemon its Prolog waits
    ``mps_timeout_s``); the GPU's last Epilog kills what is left and removes the pipe
    directory, so the next job gets a fresh daemon and its limits; a third GPU's daemon and
    job are untouched; the node is not drained (a daemon is not the GPU's health)."""
    memory = min(g["memory_mib"] for g in day.node_state("v100n1")["gpus"])
    big, small = memory * 3 // 4, memory // 4  # 3 and 1 of a GPU's 4 shares
    big_client, small_client = sim_client(day, "v100n1", big + 1, big // 2), sim_client(day, "v100n1", small + 1, 1)
    out = {n: tmp_path / f"{n}.out" for n in ("killed", "wedged", "untouched", "beside", "wedged2", "fresh")}
    gates = {n: Gate(tmp_path, n) for n in ("killed", "wedged", "untouched", "beside")}
    jobs: dict[str, str] = {}
    pids: dict[str, int] = {}
    with mps_enabled(day, timeout_s=MPS_TIMEOUT_S):
        try:
            # three jobs of 3 shares each: one per GPU; each runs a client under its daemon
            for name in ("killed", "wedged", "untouched"):
                after = big_client if name != "wedged" else "true"  # a real client would hang at a stopped daemon
                wrap = f"env; {big_client}; {gates[name].wrap()}; {after}"
                jobs[name] = sbatch(day, "-o", str(out[name]), "-w", "v100n1", "--gres=shard:3", "--wrap", wrap)
            wait_for(lambda: all(clients(out[n]) for n in jobs), what="the three jobs' first CUDA clients")
            env = {n: parse_env(out[n].read_text()) for n in jobs}
            gpu = {n: env[n]["CUDA_VISIBLE_DEVICES"] for n in jobs}
            assert len(set(gpu.values())) == 3, gpu  # Slurm gave each its own GPU
            held = {n: clients(out[n])[0] for n in jobs}
            # (only the ones that failed, whole: with ``why`` from the simulated driver)
            assert all(limits_held(c) for c in held.values()), str(
                {n: c for n, c in held.items() if not limits_held(c)}
            )
            pipes = {n: Path(env[n]["CUDA_MPS_PIPE_DIRECTORY"]) for n in jobs}
            pids = {n: daemon_pid(pipes[n]) for n in jobs}
            control_log = Path(f"{pipes['killed']}.log") / "control.log"  # kept across daemons and tests
            logged = len(control_log.read_text())
            os.kill(pids["killed"], signal.SIGKILL)
            os.kill(pids["wedged"], signal.SIGSTOP)
            wait_for(lambda: not running(pids["killed"]), what="the killed daemon to be gone")
            health = day.run([healthcheck_program(day)], env={"SLURMD_NODENAME": "v100n1"}, check=False)
            assert health.returncode == 0, health.stdout + health.stderr  # no GPU problem: nothing to drain

            # a new job on each broken GPU (first fit: the one shard each has left) runs without MPS at once
            wrap = f"env; {small_client}; {gates['beside'].wrap()}"
            jobs["beside"] = sbatch(day, "-o", str(out["beside"]), "-w", "v100n1", "--gres=shard:1", "--wrap", wrap)
            wait_for(lambda: clients(out["beside"]), what="the job beside the killed daemon's")
            wrap = f"env; {small_client}"
            jobs["wedged2"] = sbatch(day, "--wait", "-o", str(out["wedged2"]), "-w", "v100n1", "--gres=shard:1", "--wrap", wrap)  # fmt: skip
            for name, broken, state in (("beside", "killed", "dead"), ("wedged2", "wedged", "wedged")):
                text = out[name].read_text()
                assert parse_env(text)["CUDA_VISIBLE_DEVICES"] == gpu[broken], (name, text)
                assert "CUDA_MPS_PIPE_DIRECTORY" not in parse_env(text), text
                assert f"runs without CUDA MPS: the GPU's MPS daemon is {state}" in text, text
                assert f"left to the jobs using it ({jobs[broken]})" in text, text
                (c,) = clients(out[name])
                assert c["sim_mode"] == "plain" and c["steps"]["cuInit"] == "CUDA_SUCCESS", c
            assert running(pids["wedged"]) and running(pids["untouched"])  # the hooks killed nothing in use
            for name in ("killed", "wedged", "beside"):
                gates[name].open()
            done = ("killed", "wedged", "beside")
            wait_for(lambda: all(state_of(day, jobs[n]) == "" for n in done), what="the broken GPUs' jobs to end")
            # their last Epilogs: the wedged daemon killed, both pipe directories and records gone
            broken = (pipes["killed"], pipes["wedged"])
            wait_for(lambda: not any(p.exists() for p in broken), what="the Epilogs to clean up both daemons")
            assert not any((p.parent / f"{p.name}.json").exists() for p in broken)
            assert not running(pids["wedged"])
            (_, after) = clients(out["killed"])
            assert after["sim_mode"] == "plain", after  # its CUDA process after the crash: no daemon, no MPS

            # the next shard job on the killed daemon's GPU gets a fresh daemon and its limits
            job_out = out["fresh"]
            jobs["fresh"] = sbatch(day, "--wait", "-o", str(job_out), "-w", "v100n1", "--gres=shard:1", "--wrap", f"env; {small_client}")  # fmt: skip
            fresh = parse_env(job_out.read_text())
            assert fresh["CUDA_MPS_PIPE_DIRECTORY"] == str(pipes["killed"]), job_out.read_text()
            assert fresh["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={small}M"
            (c,) = clients(job_out)
            assert limits_held(c), c
            since_kill = control_log.read_text()[logged:]
            assert since_kill.count("Control daemon started") == 1, since_kill  # the fresh one

            # the third GPU: the same daemon all along, its job's clients under it
            assert daemon_pid(pipes["untouched"]) == pids["untouched"] and running(pids["untouched"])
            gates["untouched"].open()
            wait_for(lambda: state_of(day, jobs["untouched"]) == "", what="the untouched GPU's job to end")
            assert all(limits_held(c) for c in clients(out["untouched"])), clients(out["untouched"])
            left = (pipes["killed"], pipes["untouched"])
            wait_for(lambda: not any(p.exists() for p in left), what="the last Epilogs to stop the daemons")
            assert not running(pids["untouched"])
        finally:
            for gate in gates.values():
                gate.open()
            if jobs:
                day.run(["scancel", *jobs.values()], check=False)
                wait_for(lambda: all(state_of(day, j) == "" for j in jobs.values()), what="the jobs to end")
            for pid in pids.values():  # a failure left a daemon: nothing of this test outlives it
                if running(pid):
                    os.kill(pid, signal.SIGKILL)
    node = day.run(["sinfo", "-h", "-n", "v100n1", "-o", "%T|%E"]).stdout.strip()
    assert "drain" not in node and "down" not in node, node
    states = wait_jobs_done(day, list(jobs.values()))
    assert set(states.values()) == {"COMPLETED"}, states  # every job, the killed daemon's too


def test_epilog_ends_its_own_leftover_and_spares_another_jobs(day, tmp_path: Path):
    """Two jobs on two MIG devices of GPU 0; job A leaves a daemonised process behind."""
    node, table = "h100n1", day.node_state("h100n1")["slurm_devices"]
    register = "gpupool --node h100n1 sim process {gpu} {pid} --mig-uuid {uuid} --memory-mib 2000"
    # job B: a process on its own MIG device that must survive A's epilog
    b_out = tmp_path / "b.out"
    b = sbatch(
        day,
        "-w",
        node,
        "--gres=gpu:1g.10gb:1",
        "-o",
        str(b_out),
        "--wrap",
        "sleep 3600 & echo $! > "
        + str(tmp_path / "b.pid")
        + "; "
        + register.format(gpu=0, pid="$!", uuid="$CUDA_VISIBLE_DEVICES")
        + "; wait",
    )
    wait_for(lambda: (tmp_path / "b.pid").exists() and state_of(day, b) == "RUNNING", what="job B")
    # job A: daemonises a process that escapes Slurm's process tracking, then ends
    a = sbatch(
        day,
        "--wait",
        "-w",
        node,
        "--gres=gpu:1g.10gb:1",
        "-o",
        str(tmp_path / "a.out"),
        "--wrap",
        "setsid sleep 3600 < /dev/null > /dev/null 2>&1 & echo $! > "
        + str(tmp_path / "a.pid")
        + "; "
        + register.format(gpu=0, pid="$!", uuid="$CUDA_VISIBLE_DEVICES"),
    )
    a_pid, b_pid = int((tmp_path / "a.pid").read_text()), int((tmp_path / "b.pid").read_text())
    try:
        wait_for(lambda: not os.path.exists(f"/proc/{a_pid}"), what="A's leftover to be ended")
        assert os.path.exists(f"/proc/{b_pid}")  # B's process on the same GPU lives
        rec_path = day.root / "nodes" / node / "spool" / "jobs" / f"{a}.json"
        wait_for(lambda: "killed" in json.loads(rec_path.read_text()), what="A's epilog to finish")
        rec = json.loads(rec_path.read_text())
        assert rec["killed"] == [a_pid]
        assert rec["usage"][0]["peak_memory_mib"] == 2000  # the leftover's memory counts
        assert {d["type"] for d in rec["devices"]} == {"1g.10gb"} and rec["usage"][0]["mig_uuid"]
        b_rec = json.loads((day.root / "nodes" / node / "spool" / "jobs" / f"{b}.json").read_text())
        assert b_rec["devices"][0]["gpu"] == rec["devices"][0]["gpu"]  # the same GPU
        assert b_rec["devices"][0]["mig_uuid"] != rec["devices"][0]["mig_uuid"]
        assert table[rec["devices"][0]["index"]]["mig_uuid"] == rec["devices"][0]["mig_uuid"]
    finally:
        day.run(["scancel", b], check=False)
        if "a_pid" in locals() and os.path.exists(f"/proc/{a_pid}"):  # the epilog failed to end it
            os.kill(a_pid, signal.SIGKILL)
        for pid in ("a_pid", "b_pid"):  # leave no stale entry whose pid a later process could reuse
            if pid in locals():
                day.gpupool("--node", node, "sim", "process", "0", str(locals()[pid]), "--remove")


# the injected load of the GPM job: a 3g.40gb that a 1g.10gb would serve (below)
SM_PCT, TENSOR_PCT, MEMORY_MIB = 20.0, 10.0, 4000


def test_the_sampler_records_gpm_activity_of_a_mig_job_and_the_reports_read_it(day, tmp_path: Path):
    """A job on an H100 MIG instance under load: the sampler (started by the real Prolog)
    measures GPM's SM activity of that instance and its process's memory, and the Epilog
    writes them into the record.  Once slurmdbd has the job, ``report efficiency`` shows it
    with what was injected, and ``report advice`` proposes the smaller profile the load fits:
    20 % of a 3g.40gb is 60 % of a 1g.10gb's compute (under the rule's 80 %) and 4000 MiB
    fit its 9.75 GiB."""
    node, gate = "h100n1", Gate(tmp_path, "gpm")
    job, pid, uuid = gated_job(day, tmp_path, gate, node, "--gres=gpu:3g.40gb:1", "CUDA_VISIBLE_DEVICES")
    gpu = next(d["gpu"] for d in day.node_state(node)["slurm_devices"] if d.get("mig_uuid") == uuid)
    run_dir = day.root / "nodes" / node / "run"
    try:

        def intervals() -> int:
            """GPM intervals the sampler has measured for the job so far."""
            return sampled(run_dir, job, "sm_activity_samples")

        # the job's shell holds memory on its instance (a CUDA process would)
        on = ["--node", node, "sim"]
        day.gpupool(*on, "process", str(gpu), pid, "--mig-uuid", uuid, "--memory-mib", str(MEMORY_MIB))
        day.gpupool(*on, "activity", str(gpu), str(SM_PCT), "--tensor-pct", str(TENSOR_PCT), "--mig-uuid", uuid)
        # counted once the load is set: of the next intervals one may still be in the writing
        # (measured before it) and one may have begun before it; the third lies wholly under it
        before = intervals()
        try:
            wait_for(lambda: intervals() >= before + 3, what="three GPM intervals sampled under the load")
        except AssertionError as e:
            usage = text_of(run_dir / f"{job}.usage.json")
            raise AssertionError(f"{e}; {sorted(p.name for p in run_dir.iterdir())}; usage: {usage[:2000]}") from None
        gate.open()
        rec_path = day.root / "nodes" / node / "spool" / "jobs" / f"{job}.json"
        wait_for(lambda: "usage" in json.loads(rec_path.read_text()), what="the epilog's record")
        (u,) = json.loads(rec_path.read_text())["usage"]
        assert u["activity_source"] == "gpm" and u["mig_uuid"] == uuid
        assert (u["peak_sm_activity_pct"], u["peak_tensor_activity_pct"]) == (SM_PCT, TENSOR_PCT)
        assert 0 < u["mean_sm_activity_pct"] <= SM_PCT  # the first interval may have begun before the load
        assert u["peak_memory_mib"] == MEMORY_MIB
    finally:
        gate.open()
        day.gpupool("--node", node, "sim", "activity", str(gpu), "0", "--mig-uuid", uuid, check=False)
        day.gpupool("--node", node, "sim", "process", str(gpu), pid, "--remove", check=False)
    reports_read_the_gpm_job(day, tmp_path, job, u["mean_sm_activity_pct"])


def gated_job(day, tmp_path: Path, gate: Gate, node: str, gres: str, var: str) -> tuple[str, str, str]:
    """A job on ``node`` holding ``gres`` until ``gate`` opens, once started: its id, its
    shell's pid (for a simulated process of it) and its ``$var``."""
    seen, pid_file = tmp_path / f"{var}.seen", tmp_path / f"{var}.pid"
    job = sbatch(
        day, "-w", node, gres, "-o", "/dev/null",
        "--wrap", f"echo $$ > {pid_file}; echo ${var} > {seen}; {gate.wrap()}",
    )  # fmt: skip
    wait_for(lambda: seen.exists() and seen.read_text().strip(), what=f"job {job} to start")
    return job, pid_file.read_text().strip(), seen.read_text().strip()


def sampled(run_dir: Path, job: str, count: str) -> int:
    """How many rounds the sampler has measured ``count`` (``util_samples``,
    ``sm_activity_samples``) of the job on each of its devices so far: the fewest."""
    try:
        devices = json.loads((run_dir / f"{job}.usage.json").read_text())["devices"]
    except (OSError, ValueError):
        return 0
    return min((d.get(count, 0) for d in devices.values()), default=0)


def sacct_done(sandbox, job: str) -> tuple[datetime, datetime] | None:
    """The job's Start and End once slurmdbd has it as COMPLETED (``sacct -X -P``), else None."""
    out = sandbox.run(["sacct", "-X", "-n", "-P", "-o", "State,Start,End", "-j", job]).stdout.strip()
    state, *times = (out.splitlines() or ["||"])[0].split("|")
    if state != "COMPLETED":
        return None
    start, end = (datetime.fromisoformat(t).astimezone(UTC) for t in times)  # sacct prints local time
    return start, end


def job_reports(day, tmp_path: Path, job: str) -> tuple[Callable[..., dict], float]:
    """A ``report NAME`` (JSON) on the job's own window of accounting, read from the sandbox's
    spool by the config's default paths (``paths.spool_dir`` per node), and the job's hours.
    ``reports.advice.min_jobs: 1``: one job is below the default 5 the rule wants behind it."""
    start, end = wait_until(lambda: sacct_done(day, job), f"slurmdbd to have job {job} completed")
    cfg = yaml.safe_load((day.root / "etc" / "gpupool.yaml").read_text())
    cfg.setdefault("reports", {})["advice"] = {"min_jobs": 1}
    # the module switched the nodes to day by hand, past the repartitioner: its journal (from
    # the tests before this module on the same sandbox) may say night; the report reads an
    # empty journal, and the schedule says day
    cfg["schedule"] = {**cfg["schedule"], "default": "day", "rules": []}
    cfg.setdefault("paths", {})["controller_dir"] = str(tmp_path / "no-journal")
    cfg_path = tmp_path / "gpupool.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    window = ["--since", start.isoformat(), "--until", (end + timedelta(seconds=1)).isoformat(), "--format", "json"]

    def report(name: str, *args: str) -> dict:
        out = day.gpupool("--config", str(cfg_path), "report", name, *window, *args).stdout
        (doc,) = json.loads(out)["reports"]
        return doc

    return report, (end - start).total_seconds() / 3600


def reports_read_the_gpm_job(day, tmp_path: Path, job: str, mean_sm: float) -> None:
    """``report efficiency`` and ``report advice`` read the job's measured use."""
    report, hours = job_reports(day, tmp_path, job)
    slice_mib = next(p.memory_mib for p in get_model("H100-SXM5-80GB").mig.profiles if p.name == "3g.40gb")
    eq_hours = hours * 3 / 7  # a 3g.40gb is 3 of the H100's 7 compute slices
    eff = report("efficiency")
    (row,) = [r for r in eff["tables"]["measured jobs"] if r["job_id"] == job]
    assert row["gres"] == "gpu:3g.40gb" and row["eq_hours"] == pytest.approx(eq_hours)
    assert (row["peak_mem_mib"], row["slice_mib"]) == (MEMORY_MIB, slice_mib)
    assert (row["sm_activity_pct"], row["peak_sm_activity_pct"]) == (pytest.approx(mean_sm), SM_PCT)
    assert 0 < row["tensor_pct"] <= TENSOR_PCT
    (flagged,) = [r for r in eff["tables"]["jobs"] if r["job_id"] == job]  # 4000 of 40 GB: under a quarter
    assert flagged["why"] == "peak memory < 25% of the slice", flagged
    advice = report("advice", "--no-simulate")
    (rule,) = [r for r in advice["tables"]["advice"] if r["rule"] == "oversized slices"]
    assert "most 3g.40gb jobs (1 of 1) peaked below 9.8 GB" in rule["advice"], rule
    assert "offer more 1g.10gb in the day layout" in rule["advice"], rule
    assert rule["weight"] == pytest.approx(eq_hours)
    # the planner's mix for the day layout's H100s with 3g.40gb: one gives way to 1g.10gb
    change = "layouts.day.hopper.4-5: mig {3g.40gb: 2} -> {1g.10gb: 4, 3g.40gb: 1}"
    change += " (placed by the planner on H100-SXM5-80GB)"
    assert rule["layout_change"] == change, rule


# the injected load of the shard job: 2 of an A30's 4 shares (12 GB offered), a tenth of the
# memory used, 15 % of the GPU busy: one share would have done (60 % of it busy, under 80 %)
SHARE_UTIL_PCT, SHARE_MEMORY_MIB = 15, 1200


def test_the_sampler_records_a_shard_jobs_own_use_and_the_reports_read_it(day, tmp_path: Path):
    """A shard job on a time-sliced A30 under load: the sampler (started by the real Prolog)
    measures the memory of the job's own processes on the shared GPU and its part of the GPU's
    utilization (NVML: no per-job counter exists for time slices), and the Epilog records them.
    ``report efficiency`` shows them against the share the job was offered, flags it, and
    ``report advice`` proposes the smaller share its peak fits."""
    node, gate = "a30n1", Gate(tmp_path, "share")
    job, pid, gpus = gated_job(day, tmp_path, gate, node, "--gres=shard:2", "SLURM_JOB_GPUS")
    (dev,) = slurm_device(day, node, {"SLURM_JOB_GPUS": gpus})
    gpu, run_dir = dev["gpu"], day.root / "nodes" / node / "run"
    on = ["--node", node, "sim"]
    try:

        def samples() -> int:
            return sampled(run_dir, job, "util_samples")

        day.gpupool(*on, "process", str(gpu), pid, "--memory-mib", str(SHARE_MEMORY_MIB))
        day.gpupool(*on, "activity", str(gpu), str(SHARE_UTIL_PCT))
        before = samples()  # of the next rounds one may have been under way when the load was set
        wait_for(lambda: samples() >= before + 3, what="three sampler rounds under the load")
        gate.open()
        rec_path = day.root / "nodes" / node / "spool" / "jobs" / f"{job}.json"
        wait_for(lambda: "usage" in json.loads(rec_path.read_text()), what="the epilog's record")
        (u,) = json.loads(rec_path.read_text())["usage"]
        assert u["peak_memory_mib"] == SHARE_MEMORY_MIB
        assert u["peak_utilization_pct"] == SHARE_UTIL_PCT  # its processes are all the GPU's: all of it
        assert 0 < u["mean_utilization_pct"] <= SHARE_UTIL_PCT
    finally:
        gate.open()
        day.gpupool(*on, "activity", str(gpu), "0", check=False)
        day.gpupool(*on, "process", str(gpu), pid, "--remove", check=False)
    report, hours = job_reports(day, tmp_path, job)
    offered = get_model("A30").memory_mib * 2 // 4
    eff = report("efficiency")
    (row,) = [r for r in eff["tables"]["measured jobs"] if r["job_id"] == job]
    assert row["gres"].startswith("shard") and row["eq_hours"] == pytest.approx(hours * 2 / 4), row
    assert (row["peak_mem_mib"], row["slice_mib"]) == (SHARE_MEMORY_MIB, offered), row
    assert row["util_pct"] == pytest.approx(u["mean_utilization_pct"]), row
    (flagged,) = [r for r in eff["tables"]["jobs"] if r["job_id"] == job]  # 1.2 of 12 GB
    assert flagged["why"] == "peak memory < 25% of the slice", flagged
    advice = report("advice", "--no-simulate")
    (rule,) = [r for r in advice["tables"]["advice"] if r["rule"] == "oversized shares"]
    assert "most a30_shared shard jobs (1 of 1) held more shards than they used" in rule["advice"], rule
    assert "median 2 held, 1 would have done" in rule["advice"], rule
    assert rule["weight"] == pytest.approx(hours * 2 / 4)


def _clear_ecc(sandbox) -> None:
    """a100n1's GPUs without ECC errors, in the day layout, and back in service."""
    for g in range(8):  # (a reset clears the ECC counts, and the MIG instances with them)
        sandbox.gpupool("--node", "a100n1", "sim", "reset", str(g))
    # the layout again, as an admin would after a reset: else the health check, at a later
    # slurmd start (a switch in a test after this one), drains the node "MIG instances
    # changed since the layout was applied (0 live, 7 recorded)" for the modules after it
    sandbox.gpupool("--node", "a100n1", "node", "apply", "day")
    sandbox.run(["scontrol", "update", "nodename=a100n1", "state=resume"], check=False)


ECC_ATTEMPTS = 3


def test_ecc_error_drains_the_node_and_the_job_runs_elsewhere(day, tmp_path: Path):
    """Both a100 nodes are alike; a100n2 is held out so the job first lands on a100n1, whose
    Prolog finds the ECC errors: Slurm drains the node and requeues the job, which then runs
    on a100n2.  slurmctld's periodic health check (``HealthCheckInterval``) may see the errors
    first and drain a100n1 before the job starts there (a clean-clone trial on a slow machine
    had it fall between the errors and the Prolog): a right outcome, but not the Prolog's, so the
    scenario is run again (at most three times)."""
    day.run(["scontrol", "update", "nodename=a100n2", "state=drain", "reason=test: kept free"])
    reason = ""

    def drained() -> bool:
        nonlocal reason
        reason = day.run(["sinfo", "-h", "-n", "a100n1", "-o", "%E"]).stdout.strip()
        return reason not in ("", "none")

    try:
        for attempt in range(ECC_ATTEMPTS):
            out = tmp_path / f"rq{attempt}.out"
            for g in range(8):
                day.gpupool("--node", "a100n1", "sim", "ecc", str(g), "--uncorrected", "1")
            job = sbatch(day, "--gres=gpu:a100:1", *job_files(out), "--wrap", "echo $SLURMD_NODENAME")
            wait_for(drained, what="a100n1 drained")
            if "Prolog error" in reason:
                break
            # the periodic health check drained it first (the job is pending, or requeued if
            # its Prolog ran meanwhile): the same run again
            assert "uncorrectable ECC" in reason, reason
            print(f"attempt {attempt + 1}: the periodic health check drained a100n1 first ({reason[:60]})")
            day.run(["scancel", job], check=False)
            wait_for(lambda j=job: state_of(day, j) == "", what=f"job {job} cancelled")
            _clear_ecc(day)
        else:
            pytest.fail(f"the periodic health check drained a100n1 before the Prolog ran, {ECC_ATTEMPTS} times")
        show = day.gpupool("--node", "a100n1", "health", "--show", check=False)
        assert show.returncode == 1 and "uncorrectable ECC" in show.stdout  # the readable reason
        day.run(["scontrol", "update", "nodename=a100n2", "state=resume"])
        # Slurm delays a requeued batch job by 2 minutes; let it go now (once it is requeued:
        # an update before would be undone by the requeue's delay)
        wait_for(lambda: state_of(day, job) == "PENDING", what="the job to be requeued")
        day.run(["scontrol", "update", f"jobid={job}", "starttime=now"])
        # its record is read while it is listed, to its last (Slurm forgets a job MinJobAge,
        # 20 s, after its end): Restarts counts each requeue, so a second one shows too
        shown = [""]

        def ran_again() -> bool:
            shown[0] = day.run(["scontrol", "-o", "show", "job", job], check=False).stdout or shown[0]
            return out.exists() and state_of(day, job) == ""

        wait_for(ran_again, what="the requeued job")
        assert out.read_text().strip() == "a100n2"
        assert "Restarts=1 " in shown[0], shown[0]
    finally:
        _clear_ecc(day)
        day.run(["scontrol", "update", "nodename=a100n[1-2]", "state=resume"], check=False)


def test_healthcheck_program_drains_with_a_clear_reason(sandbox):
    """Run the HealthCheckProgram as slurmd does: no arguments, SLURMD_NODENAME as the only
    variable (measured: slurmd 22.05 passes nothing else, not even PATH or SLURM_CONF)."""
    program = healthcheck_program(sandbox)
    env = {"SLURMD_NODENAME": "a30n1"}
    try:
        ok = sandbox.run([program], env=env, check=False)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        sandbox.gpupool("--node", "a30n1", "sim", "temperature", "3", "95")
        res = sandbox.run([program], env=env, check=False)
        assert res.returncode == 1 and "GPU 3: 95 C" in res.stdout
        reason = sandbox.run(["sinfo", "-h", "-n", "a30n1", "-o", "%T|%E"]).stdout.strip()
        assert reason.startswith("drain") and "gpupool: GPU 3: 95 C, slowdown at 90 C" in reason
    finally:
        sandbox.gpupool("--node", "a30n1", "sim", "temperature", "3", "34")
        sandbox.run(["scontrol", "update", "nodename=a30n1", "state=resume"], check=False)


def test_slurmd_itself_runs_the_health_check_and_drains(sandbox):
    """slurmd runs the HealthCheckProgram when it starts: a hot GPU drains its node."""
    sandbox.gpupool("--node", "a30n1", "sim", "temperature", "2", "96")
    try:
        sandbox.gpupool("sandbox", "restart", "--root", str(sandbox.root), "--nodes", "a30n1")
        reason = ""

        def drained() -> bool:
            nonlocal reason
            reason = sandbox.run(["sinfo", "-h", "-n", "a30n1", "-o", "%T|%E"]).stdout.strip()
            return "GPU 2: 96 C" in reason

        try:
            wait_for(drained, what="the health check's drain")
        except AssertionError as e:
            raise AssertionError(f"{e}: {reason}") from None
        assert reason.startswith("drain") and "gpupool: GPU 2: 96 C" in reason, reason
    finally:
        sandbox.gpupool("--node", "a30n1", "sim", "temperature", "2", "34")
        sandbox.run(["scontrol", "update", "nodename=a30n1", "state=resume"], check=False)


# -- #28 item 3: shares on a MIG device --------------------------------------------------

MIG_SHARES = {  # a30n1: GPU 0's one 4g.24gb device time-sliced 2 ways, GPU 1's whole 4g.24gb not
    "0": {"mig": {"4g.24gb": 1}, "shared": 2},
    "1": {"mig": {"4g.24gb": 1}},
    "2-3": {"shared": 4},
}


@contextlib.contextmanager
def a30_mig_shares(sandbox, tmp: Path) -> Iterator[Path]:
    """a30n1 in a layout of the sandbox's config plus ``mig_shares`` (node apply, gres install,
    restarts as a switch does); then back to ``day`` with the sandbox's own config."""
    raw = yaml.safe_load((sandbox.root / "etc" / "gpupool.yaml").read_text())
    raw["layouts"]["mig_shares"] = {"a30": MIG_SHARES}
    conf = tmp / "mig-shares.yaml"
    conf.write_text(yaml.safe_dump(raw))

    def switch(*config: str, layout: str) -> None:
        sandbox.gpupool(*config, "--node", "a30n1", "node", "apply", layout)
        sandbox.gpupool(*config, "gres", "install")
        sandbox.gpupool("sandbox", "restart", "--root", str(sandbox.root), "--controller", "--nodes", "a30n1")

    switch("--config", str(conf), layout="mig_shares")
    try:
        yield conf
    finally:
        switch(layout="day")


def test_shard_jobs_share_one_mig_device_under_its_own_mps_daemon(day, tmp_path: Path):
    """A node whose MIG device is time-sliced registers exactly the rendered GRES; two shard
    jobs run side by side on that one MIG device, each with CUDA_VISIBLE_DEVICES=<its MIG
    UUID>, the MPS daemon of that MIG device (pipe directory named by it) and a memory limit
    from the profile's memory; the over-limit allocation fails there.  A plain ``srun`` step
    of such a typed shard job runs (22.05, 24.11 and 26.05 refuse the typed request a step would
    otherwise inherit).  A ``gpu:4g.24gb`` job meanwhile gets the other GPU's device, never
    the shared one."""
    prof = get_model("A30").profile("4g.24gb")
    with a30_mig_shares(day, tmp_path):
        nodes_conf = (day.root / "etc" / "nodes.conf").read_text()
        line = next(ln for ln in nodes_conf.splitlines() if ln.startswith("NodeName=a30n1 "))
        gres = re.search(r"Gres=(\S+)", line).group(1)
        assert gres == "gpu:4g.24gb_shared:1,gpu:4g.24gb:1,gpu:a30_shared:2,shard:10", gres
        show = day.run(["scontrol", "-o", "show", "node", "a30n1"]).stdout
        tres = dict(t.split("=", 1) for t in re.search(r"CfgTRES=(\S+)", show).group(1).split(","))
        got = {k: int(v) for k, v in tres.items() if k.startswith("gres/")}
        assert got == {
            "gres/gpu": 4, "gres/gpu:4g.24gb_shared": 1, "gres/gpu:4g.24gb": 1, "gres/gpu:a30_shared": 2,
            "gres/shard": 10,
        }, show  # fmt: skip
        limit = prof.memory_mib // 2  # 1 of the device's 2 shares
        client = sim_client(day, "a30n1", limit + 1, limit // 2)
        outs = [tmp_path / f"ms{k}.out" for k in range(2)]
        gate = Gate(tmp_path, "mig-shares")
        with mps_enabled(day):
            step = tmp_path / "step.out"  # the first job runs a plain srun step (SLURM_GRES)
            steps = [f"srun -n1 printenv CUDA_VISIBLE_DEVICES > {step};", ""]
            jobs = [
                sbatch(day, "-w", "a30n1", "--gres=shard:4g.24gb_shared:1", "-o", str(o),
                       "--wrap", f"env; {client}; {s} {gate.wrap()}")
                for o, s in zip(outs, steps, strict=True)
            ]  # fmt: skip
            try:
                wait_for(lambda: all("sim_mode" in text_of(o) for o in outs), what="both")
                wait_for(lambda: step.exists() and step.read_text().strip(), what="the job's step")
                assert [state_of(day, j) for j in jobs] == ["RUNNING", "RUNNING"]  # side by side
                _, whole = job_env(day, tmp_path, "whole-mig", "-w", "a30n1", "--gres=gpu:4g.24gb:1")
            finally:
                gate.open()
            wait_for(lambda: all(state_of(day, j) == "" for j in jobs), what="both shard jobs to finish")
        envs = [parse_env(o.read_text()) for o in outs]
        devs = [slurm_device(day, "a30n1", e)[0] for e in envs]
        (wdev,) = slurm_device(day, "a30n1", whole)  # (the table of this layout)
    mig = devs[0]["mig_uuid"]
    assert re.fullmatch(r"MIG-[0-9a-f-]{36}", mig) and devs[1]["mig_uuid"] == mig and devs[0]["kind"] == "shared"
    assert step.read_text().strip() == mig  # its plain srun step ran, on the same MIG device
    for e, o in zip(envs, outs, strict=True):
        assert e["CUDA_VISIBLE_DEVICES"] == mig and e["SLURM_GPUPOOL_PROFILE"] == "4g.24gb"
        assert Path(e["CUDA_MPS_PIPE_DIRECTORY"]).name == mig, e  # the MIG device's own daemon
        assert e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={limit}M" and e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
        ran = clients(o)[-1]  # its client's line (srun may note a retried step creation after it)
        assert ran["sim_mode"] == "mps", ran
        assert ran["steps"]["cuMemAlloc_over"] == "CUDA_ERROR_OUT_OF_MEMORY", ran
        assert ran["steps"]["cuMemAlloc_under"] == "CUDA_SUCCESS", ran
    assert whole["CUDA_VISIBLE_DEVICES"] == wdev["mig_uuid"] != mig and wdev["kind"] == "mig" and wdev["gpu"] == 1


def test_shard_jobs_under_mps_ride_out_another_nodes_switch_and_leave_nothing_behind(day, tmp_path: Path):
    """#28: two shard jobs share a V100 under its MPS daemon while the repartitioner switches
    another node (a30n1 to night: slurmctld and a30n1's slurmd restarted).
    The jobs keep running; their daemon is the same process, with both jobs in its record;
    their CUDA clients after the switch still run under it with their limits; both complete;
    the last Epilog stops the daemon and removes its pipe directory and record.

    The module's last test: a30n1 stays in night (a switch back would cost as much again, and
    the ``day`` fixture switches every node to night after this test anyway)."""
    memory = min(g["memory_mib"] for g in day.node_state("v100n1")["gpus"])
    limit = memory // 4
    client = sim_client(day, "v100n1", limit + 1, limit // 2)
    gate = Gate(tmp_path, "switch")
    outs = [tmp_path / f"s{k}.out" for k in range(2)]
    jobs: list[str] = []
    with mps_enabled(day):
        try:
            for o in outs:
                wrap = f"env; {client}; {gate.wrap()}; {client}"
                jobs.append(sbatch(day, "-o", str(o), "-w", "v100n1", "--gres=shard:1", "--wrap", wrap))
            wait_for(lambda: all(clients(o) for o in outs), what="both jobs' first CUDA clients")
            envs = [parse_env(o.read_text()) for o in outs]
            pipes = Path(envs[0]["CUDA_MPS_PIPE_DIRECTORY"])
            assert envs[1]["CUDA_MPS_PIPE_DIRECTORY"] == str(pipes), envs  # one GPU, one daemon
            pid = daemon_pid(pipes)
            proc = repartition(day, "--to", "night", "--nodes", "a30n1", "--json")
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert json.loads(proc.stdout)["nodes"]["a30n1"]["outcome"] == "done", proc.stdout
            assert [state_of(day, j) for j in jobs] == ["RUNNING", "RUNNING"]
            assert_converged(day, {"a30n1": "night"})
            assert daemon_pid(pipes) == pid and running(pid)
            record = json.loads((pipes.parent / f"{pipes.name}.json").read_text())
            assert sorted(record["jobs"]) == sorted(jobs), record  # both, in the order their Prologs ran
            gate.open()
            wait_for(lambda: all(state_of(day, j) == "" for j in jobs), what="both shard jobs to end")
            wait_for(lambda: not pipes.exists(), what="the last Epilog to stop the daemon")
        finally:
            gate.open()
            if jobs:
                day.run(["scancel", *jobs], check=False)
    for o, env in zip(outs, envs, strict=True):
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={limit}M"
        before, after = clients(o)
        assert limits_held(before) and limits_held(after), (before, after)
    assert not running(pid)
    assert not (pipes.parent / f"{pipes.name}.json").exists()
    assert "Control daemon exited (quit)" in (Path(f"{pipes}.log") / "control.log").read_text()
    assert wait_jobs_done(day, jobs) == dict.fromkeys(jobs, "COMPLETED")
