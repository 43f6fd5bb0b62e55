"""The hooks as Slurm runs them (a subprocess with Slurm's environment), on a simulated node.

Covers the happy path and every way they must fail open: no NVML, a corrupt
state file, an unwritable spool, symlinks planted in the spool, hostile job
strings.  Nothing may be written outside the spool and state directories.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.config.machines import find_machine
from slurm_gpupool.hw import open_backend
from slurm_gpupool.hw.sim import inject
from slurm_gpupool.hw.sim.state import SimStore, create_node_state
from slurm_gpupool.node.apply import apply_node

NODE = "h1"
CONFIG = {
    "version": 1,
    "nodesets": {"h": {"nodes": NODE, "machine": "hgx-h100"}},
    "layouts": {
        "day": {"h": {"0-3": {"mig": {"1g.10gb": 7}}, "4-5": {"mig": {"3g.40gb": 2}}, "6-7": {"shared": 4}}},
        # #28 item 3: GPUs 4-5's MIG devices time-sliced 2 ways (test_hooks_mps.py)
        "mig_shares": {
            "h": {"0-3": {"mig": {"1g.10gb": 7}}, "4-5": {"mig": {"3g.40gb": 2}, "shared": 2}, "6-7": "whole"}
        },
    },
}


@pytest.fixture
def site(tmp_path: Path) -> dict:
    sim, etc = tmp_path / "sim", tmp_path / "etc"
    etc.mkdir()
    create_node_state(sim / f"{NODE}.json", NODE, find_machine("hgx-h100"))
    state_dir = tmp_path / "state" / NODE
    with open_backend(NODE, sim) as b:
        apply_node(b, parse_config(CONFIG, "t.yaml", Path(".")), "day", state_dir)
    settings = {
        "schema": 1,
        "state_dir": str(tmp_path / "state" / "{node}"),
        "run_dir": str(tmp_path / "run" / "{node}"),
        "spool_dir": str(tmp_path / "spool" / "{node}"),
        "sim_dir": str(sim),
        "kmsg": str(sim / "{node}.kmsg"),
        "usage_interval_s": 0,  # no sampler, except where a test turns it on
    }
    (etc / "gpupool-hooks.json").write_text(json.dumps(settings))
    table = json.loads((state_dir / "node-state.json").read_text())["slurm_devices"]
    return {"root": tmp_path, "sim": sim, "etc": etc, "settings": settings, "table": table, "state": state_dir}


def hook_env(site: dict, **env: str) -> dict[str, str]:
    """The environment slurmd gives a hook for job 42."""
    return {
        "PATH": os.environ["PATH"],
        "SLURM_CONF": str(site["etc"] / "slurm.conf"),
        "SLURMD_NODENAME": NODE,
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_UID": str(os.getuid()),
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_ACCOUNT": "physics",
        **env,
    }


def run(site: dict, hook: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", f"slurm_gpupool.hooks.{hook}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=hook_env(site, **env),
    )


def index_of(site: dict, kind: str, type_: str | None = None) -> int:
    return next(d["index"] for d in site["table"] if d["kind"] == kind and (type_ is None or d["type"] == type_))


def files_outside(root: Path, allowed: tuple[str, ...]) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not str(p.relative_to(root)).startswith(allowed)
    }


def test_prolog_taskprolog_epilog_on_a_mig_job(site: dict):
    i = index_of(site, "mig", "3g.40gb")
    assert run(site, "prolog", SLURM_JOB_GPUS=str(i)).returncode == 0
    rec = json.loads((site["root"] / "spool" / NODE / "jobs" / "42.json").read_text())
    assert (rec["user"], rec["account"], rec["layout"]) == ("alice", "physics", "day")
    uuid = site["table"][i]["mig_uuid"]
    assert rec["devices"][0]["mig_uuid"] == uuid
    tp = run(site, "taskprolog", SLURM_STEP_GPUS=str(i), CUDA_VISIBLE_DEVICES="0")
    assert tp.returncode == 0
    assert tp.stdout.splitlines() == [
        f"export CUDA_VISIBLE_DEVICES={uuid}",
        "export SLURM_GPUPOOL_LAYOUT=day",
        "export SLURM_GPUPOOL_PROFILE=3g.40gb",
    ]
    ep = run(site, "epilog", SLURM_JOB_GPUS=str(i))
    assert ep.returncode == 0, ep.stderr
    rec = json.loads((site["root"] / "spool" / NODE / "jobs" / "42.json").read_text())
    assert rec["end_time"] >= rec["start_time"] and rec["usage"][0]["memory_total_mib"] == 40448


def test_taskprolog_shards_and_slurm_set_uuids(site: dict):
    i = index_of(site, "shared")
    tp = run(site, "taskprolog", SLURM_STEP_GPUS=str(i), SLURM_SHARDS_ON_NODE="1", CUDA_VISIBLE_DEVICES="0")
    assert "export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in tp.stdout.splitlines()
    # a Slurm built with NVML already puts UUIDs there: leave them alone
    same = run(site, "taskprolog", SLURM_STEP_GPUS=str(i), CUDA_VISIBLE_DEVICES="MIG-abc")
    assert same.stdout == ""
    assert run(site, "taskprolog").stdout == ""  # no GPUs: nothing to say


def test_a_shard_jobs_steps_ask_for_untyped_shards(site: dict):
    """#28 item 3: inside a job of typed shards (``--gpu-share``'s ``shard:<type>:k``) a plain
    ``srun`` inherits the typed request, which 22.05, 24.11 and 26.05 refuse for steps; srun reads
    ``SLURM_GRES`` as ``--gres``, so the TaskProlog gives the job its untyped shard count."""
    i = str(index_of(site, "shared"))
    tp = run(site, "taskprolog", SLURM_STEP_GPUS=i, SLURM_SHARDS_ON_NODE="3", CUDA_VISIBLE_DEVICES="0")
    assert "export SLURM_GRES=shard:3" in tp.stdout.splitlines()
    mine = run(site, "taskprolog", SLURM_STEP_GPUS=i, SLURM_SHARDS_ON_NODE="3", SLURM_GRES="shard:1")
    assert "SLURM_GRES" not in mine.stdout and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" in mine.stdout  # the job's own
    mig = str(index_of(site, "mig"))
    assert "SLURM_GRES" not in run(site, "taskprolog", SLURM_STEP_GPUS=mig, CUDA_VISIBLE_DEVICES="0").stdout


@pytest.mark.parametrize(
    ("tres", "wanted"),
    [
        ("gres/gpu:3g.40gb:2", "3g.40gb"),  # 23.11+ spelling
        ("gpu:3g.40gb:2", "3g.40gb"),  # 22.05
        ("gres:gpu:1g.10gb:1,gres:shard:0", "1g.10gb"),
    ],
)
def test_taskprolog_narrows_an_exclusive_allocation_to_the_requested_type(site: dict, tres: str, wanted: str):
    """--exclusive --gres=gpu:TYPE:N gets every GPU of the node; CUDA uses the first MIG
    device of a list, so the job must see its requested type only (#15 item 11)."""
    every = ",".join(str(d["index"]) for d in site["table"])
    tp = run(site, "taskprolog", SLURM_JOB_GPUS=every, SLURM_TRES_PER_NODE=tres, CUDA_VISIBLE_DEVICES="0")
    cvd = tp.stdout.splitlines()[0].removeprefix("export CUDA_VISIBLE_DEVICES=").split(",")
    assert cvd == [d["mig_uuid"] for d in site["table"] if d["type"] == wanted], tp.stdout + tp.stderr
    # Slurm built with NVML lists every UUID: narrowed all the same
    uuids = ",".join(d.get("mig_uuid") or d["gpu_uuid"] for d in site["table"])
    nvml = run(site, "taskprolog", SLURM_JOB_GPUS=every, SLURM_TRES_PER_NODE=tres, CUDA_VISIBLE_DEVICES=uuids)
    assert nvml.stdout.splitlines()[0] == tp.stdout.splitlines()[0]


def test_taskprolog_reads_the_request_gpupool_sbatch_handed_down_where_slurm_gives_none(site: dict):
    every = ",".join(str(d["index"]) for d in site["table"])
    tp = run(site, "taskprolog", SLURM_JOB_GPUS=every, SLURM_GPUPOOL_GRES="gpu:3g.40gb:2", CUDA_VISIBLE_DEVICES="0")
    wanted = ",".join(d["mig_uuid"] for d in site["table"] if d["type"] == "3g.40gb")
    assert tp.stdout.splitlines()[0] == f"export CUDA_VISIBLE_DEVICES={wanted}"


def test_taskprolog_shows_an_untyped_exclusive_job_whole_gpus_first(site: dict):
    every = ",".join(str(d["index"]) for d in site["table"])
    for tres in ("gres/gpu:2", "gres/gpu:nosuch:1", "\nrm -rf /", None):
        env = {"SLURM_TRES_PER_NODE": tres} if tres else {}
        tp = run(site, "taskprolog", SLURM_JOB_GPUS=every, CUDA_VISIBLE_DEVICES="0", **env)
        cvd = tp.stdout.splitlines()[0].removeprefix("export CUDA_VISIBLE_DEVICES=").split(",")
        whole = [d["gpu_uuid"] for d in site["table"] if "mig_uuid" not in d]
        assert len(cvd) == len(site["table"]) and cvd[: len(whole)] == whole, (tres, tp.stdout)


def test_taskprolog_leaves_a_single_type_allocation_in_slurm_order(site: dict):
    ids = [d["index"] for d in site["table"] if d["type"] == "1g.10gb"][:3]
    tp = run(site, "taskprolog", SLURM_STEP_GPUS=",".join(map(str, ids)), SLURM_TRES_PER_NODE="gres/gpu:a100:3")
    assert tp.stdout.splitlines()[0] == "export CUDA_VISIBLE_DEVICES=" + ",".join(
        site["table"][i]["mig_uuid"] for i in ids
    )


def test_health_failure_exits_1_with_a_readable_reason(site: dict):
    inject.add_ecc_errors(SimStore(site["sim"] / f"{NODE}.json"), 6, uncorrected=1)
    i = next(d["index"] for d in site["table"] if d["gpu"] == 6)
    res = run(site, "prolog", SLURM_JOB_GPUS=str(i))
    assert res.returncode == 1
    health = json.loads((site["state"] / "health.json").read_text())
    assert health["status"] == "fail" and health["by"] == "prolog" and health["job"] == "42"
    assert "GPU 6: 1 uncorrectable ECC errors since driver load" in health["problems"]
    assert not (site["root"] / "spool" / NODE / "jobs" / "42.json").exists()
    # a job on a healthy GPU of the same node still starts
    assert run(site, "prolog", SLURM_JOB_GPUS=str(index_of(site, "mig", "1g.10gb"))).returncode == 0


def test_xid_and_mig_drift_fail_the_check(site: dict):
    store = SimStore(site["sim"] / f"{NODE}.json")
    inject.add_xid(store, 7, 79)
    i7 = next(d["index"] for d in site["table"] if d["gpu"] == 7)
    assert run(site, "prolog", SLURM_JOB_GPUS=str(i7)).returncode == 1
    assert "GPU 7: recent Xid 79" in json.loads((site["state"] / "health.json").read_text())["problems"]
    inject.reset_gpu(store, 0)  # a reset lost GPU 0's instances behind Slurm's back
    res = run(site, "prolog", SLURM_JOB_GPUS=str(index_of(site, "mig", "1g.10gb")))
    assert res.returncode == 1
    assert any(
        "MIG instances changed" in p for p in json.loads((site["state"] / "health.json").read_text())["problems"]
    )


@pytest.mark.parametrize("hook", ["prolog", "epilog"])
def test_fails_open_without_nvml(site: dict, hook: str):
    settings = {**site["settings"], "sim_dir": None}
    (site["etc"] / "gpupool-hooks.json").write_text(json.dumps(settings))
    res = run(site, hook, SLURM_JOB_GPUS="0")
    assert res.returncode == 0 and "failing open" in res.stderr and "NVML" in res.stderr


def test_fails_open_on_a_corrupt_state_file(site: dict):
    (site["state"] / "node-state.json").write_text("{not json")
    for hook in ("prolog", "epilog", "taskprolog"):
        res = run(site, hook, SLURM_JOB_GPUS="0", SLURM_STEP_GPUS="0")
        assert res.returncode == 0 and "failing open" in res.stderr, hook


def test_fails_open_on_an_unwritable_spool(site: dict):
    settings = {**site["settings"], "spool_dir": "/proc/gpupool-cannot-exist/{node}"}
    (site["etc"] / "gpupool-hooks.json").write_text(json.dumps(settings))
    res = run(site, "prolog", SLURM_JOB_GPUS="0")
    assert res.returncode == 0 and "failing open" in res.stderr


def test_a_symlink_planted_in_the_spool_is_not_followed(site: dict, tmp_path: Path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    jobs = site["root"] / "spool" / NODE / "jobs"
    jobs.mkdir(parents=True)
    (jobs / "42.json").symlink_to(victim)
    assert run(site, "prolog", SLURM_JOB_GPUS="0").returncode == 0
    assert victim.read_text() == "precious\n"
    assert not (jobs / "42.json").is_symlink()  # replaced by our own file
    # a symlinked spool directory is refused
    other = tmp_path / "elsewhere"
    other.mkdir()
    (site["root"] / "spool" / NODE / "jobs").rename(tmp_path / "old-jobs")
    (site["root"] / "spool" / NODE / "jobs").symlink_to(other)
    res = run(site, "prolog", SLURM_JOB_ID="43", SLURM_JOB_GPUS="0")
    assert res.returncode == 0 and "failing open" in res.stderr
    assert list(other.iterdir()) == []


def test_hostile_job_strings_are_data_not_paths(site: dict):
    before = files_outside(site["root"], ("spool", "state", "sim", "run"))
    hostile = {
        "SLURM_JOB_NAME": "../../etc/passwd; rm -rf /",
        "SLURM_JOB_COMMENT": "$(touch /tmp/pwned) ../../../x",
        "SLURM_JOB_USER": "../../../root",
        "SLURM_JOB_ACCOUNT": "a\nb",
        "SLURM_JOB_WORK_DIR": "/etc",
    }
    assert run(site, "prolog", SLURM_JOB_GPUS="0", **hostile).returncode == 0
    assert run(site, "epilog", SLURM_JOB_GPUS="0", **hostile).returncode == 0
    rec = json.loads((site["root"] / "spool" / NODE / "jobs" / "42.json").read_text())
    assert rec["user"] == "../../../root"  # recorded as data
    assert files_outside(site["root"], ("spool", "state", "sim", "run")) == before
    assert not Path("/tmp/pwned").exists()
    for bad in ("../../x", "42; rm", ""):
        res = run(site, "prolog", SLURM_JOB_ID=bad, SLURM_JOB_GPUS="0")
        assert res.returncode == 0
    assert sorted(p.name for p in (site["root"] / "spool" / NODE / "jobs").iterdir()) == ["42.json"]
    assert run(site, "prolog", SLURM_JOB_GPUS="0,../1").returncode == 0


def test_running_a_hook_loads_nothing_heavy(site: dict):
    i = index_of(site, "mig", "1g.10gb")
    code = (
        "import json, sys\n"
        "from slurm_gpupool.hooks import prolog, taskprolog, epilog\n"
        "rc = [prolog.main([]), taskprolog.main([]), epilog.main([])]\n"
        "sys.stderr.write(json.dumps({'rc': rc, 'mods': sorted(sys.modules)}))\n"
    )
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_CONF": str(site["etc"] / "slurm.conf"),
        "SLURMD_NODENAME": NODE,
        "SLURM_JOB_ID": "44",
        "SLURM_JOB_GPUS": str(i),
        "SLURM_STEP_GPUS": str(i),
    }
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    data = json.loads(res.stderr[res.stderr.index("{") :])
    assert data["rc"] == [0, 0, 0]
    assert not set(data["mods"]) & {"pandas", "click", "jinja2", "pyslurm", "yaml", "matplotlib", "ClusterShell"}


def test_the_epilog_never_signals_itself_or_its_parent(site: dict):
    """A GPU-process entry whose pid now belongs to the epilog's parent (pid reuse), and
    that parent carries the job's SLURM_JOB_ID, as slurmd's epilog environment does."""
    i = index_of(site, "mig", "1g.10gb")
    d = site["table"][i]
    parent = (
        "import os, subprocess, sys\n"
        "from slurm_gpupool.hw.sim import inject\n"
        "from slurm_gpupool.hw.sim.state import SimStore\n"
        f"inject.add_process(SimStore({str(site['sim'] / f'{NODE}.json')!r}), {d['gpu']}, os.getpid(), 100, "
        f"{d['mig_uuid']!r})\n"
        "r = subprocess.run([sys.executable, '-m', 'slurm_gpupool.hooks.epilog'])\n"
        "print('epilog exit', r.returncode)\n"
    )
    assert run(site, "prolog", SLURM_JOB_GPUS=str(i)).returncode == 0
    env = hook_env(site, SLURM_JOB_GPUS=str(i))
    p = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=60, env=env)
    assert (p.returncode, p.stdout.strip()) == (0, "epilog exit 0"), p.stderr
    rec = json.loads((site["root"] / "spool" / NODE / "jobs" / "42.json").read_text())
    assert rec["killed"] == []


def test_the_sampler_records_peak_memory_between_prolog_and_epilog(site: dict):
    import time

    settings = {**site["settings"], "usage_interval_s": 0.2}
    (site["etc"] / "gpupool-hooks.json").write_text(json.dumps(settings))
    i = index_of(site, "mig", "3g.40gb")
    uuid = site["table"][i]["mig_uuid"]
    store = SimStore(site["sim"] / f"{NODE}.json")
    assert run(site, "prolog", SLURM_JOB_GPUS=str(i)).returncode == 0
    usage_file = site["root"] / "run" / NODE / "42.usage.json"
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        inject.add_process(store, site["table"][i]["gpu"], sleeper.pid, 12345, uuid)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if (
                usage_file.exists()
                and json.loads(usage_file.read_text())["devices"][str(i)]["peak_memory_mib"] == 12345
            ):
                break
            time.sleep(0.1)
    finally:
        sleeper.kill()
        sleeper.wait()
    inject.remove_process(store, sleeper.pid)  # the job's memory is gone by the epilog
    assert run(site, "epilog", SLURM_JOB_GPUS=str(i)).returncode == 0
    rec = json.loads((site["root"] / "spool" / NODE / "jobs" / "42.json").read_text())
    (u,) = rec["usage"]
    assert u["peak_memory_mib"] == 12345 and u["memory_used_at_end_mib"] == 0 and u["samples"] >= 1
    assert u["mean_utilization_pct"] is None  # NVML has no utilization for MIG devices
    assert not usage_file.exists()  # runtime files removed


def test_a_symlinked_spool_directory_itself_is_not_followed(site: dict, tmp_path: Path):
    """Not only the last component: spool_dir itself (nodes/<n>/spool in the sandbox) a
    symlink to another root-owned directory put jobs/<id>.json there (measured)."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    spool = site["root"] / "spool"
    spool.mkdir()
    (spool / NODE).symlink_to(other)
    res = run(site, "prolog", SLURM_JOB_GPUS="0")
    assert res.returncode == 0 and "failing open" in res.stderr
    assert list(other.iterdir()) == []
    assert run(site, "epilog", SLURM_JOB_GPUS="0").returncode == 0
    assert list(other.iterdir()) == []


@pytest.mark.parametrize("jid", ["900010\n", "42\n", " 42", "42 ", "４２"])
def test_a_job_id_with_a_newline_or_odd_digits_is_refused(site: dict, jid: str):
    res = run(site, "prolog", SLURM_JOB_ID=jid, SLURM_JOB_GPUS="0")
    assert res.returncode == 0 and "bad or missing SLURM_JOB_ID" in res.stderr
    assert not (site["root"] / "spool" / NODE / "jobs").exists() or not list(
        (site["root"] / "spool" / NODE / "jobs").iterdir()
    )
    assert run(site, "prolog", SLURM_JOB_GPUS="0\n").returncode == 0  # indices likewise
    assert not (site["root"] / "run" / NODE / "42.devices").exists()


def test_a_sample_racing_the_epilog_leaves_no_usage_file(site: dict, monkeypatch):
    """The sampler read <job>.devices, then the Epilog cleaned up, then the sampler wrote
    <job>.usage.json: 7 in 1,000 jobs left one behind (measured)."""
    from slurm_gpupool.hooks import epilog, sampler
    from slurm_gpupool.hooks.runtime import open_dir

    i = index_of(site, "mig", "1g.10gb")
    assert run(site, "prolog", SLURM_JOB_GPUS=str(i)).returncode == 0
    run_dir = site["root"] / "run" / NODE
    assert (run_dir / "42.devices").exists()
    real = sampler._sample

    def epilog_meanwhile(backend, devices, prev, *job):
        epilog._cleanup(str(run_dir), "42")
        return real(backend, devices, prev, *job)

    monkeypatch.setattr(sampler, "_sample", epilog_meanwhile)
    fd = open_dir(str(run_dir))
    try:
        with open_backend(NODE, site["sim"]) as backend:
            assert sampler.sample_round(fd, backend) == 1
    finally:
        os.close(fd)
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith("42.")) == []


def test_a_job_starting_while_the_idle_sampler_stops_is_still_sampled(site: dict, monkeypatch):
    """A Prolog found the sampler alive (so started none) while it was in its last idle
    round: the sampler must not then exit and leave the job unsampled (under CI's load a
    GPM job waited 300 s for a sample that never came)."""
    from slurm_gpupool.hooks import sampler

    i = index_of(site, "mig", "1g.10gb")
    assert run(site, "prolog", SLURM_JOB_GPUS=str(i)).returncode == 0
    run_dir = site["root"] / "run" / NODE
    (run_dir / "42.devices").rename(run_dir / "held")  # the job has not started yet
    sleeps: list[int] = []

    def sleep(_s: float) -> None:
        sleeps.append(1)
        if len(sleeps) == sampler.IDLE_ROUNDS:  # the last idle round: now the Prolog runs
            (run_dir / "held").rename(run_dir / "42.devices")
        elif (run_dir / "42.usage.json").exists() and (run_dir / "42.devices").exists():
            (run_dir / "42.devices").unlink()  # the Epilog, once the job was sampled

    monkeypatch.setattr(sampler.time, "sleep", sleep)
    monkeypatch.setattr(sampler.signal, "signal", lambda *a: None)
    assert sampler.run(hook_env(site)) == 0
    assert (run_dir / "42.usage.json").exists(), "the job that started during the last idle round was never sampled"
    assert not (run_dir / sampler.PID_FILE).exists() and len(sleeps) < 20


def test_a_sampler_is_alive_only_while_it_holds_its_lock_not_by_a_pid_file(site: dict):
    """The pid file outlives a killed sampler, its pid can be reused, and a user's process
    can name the sampler on its command line: a Prolog that took that for a live sampler
    started none, and no job on the node was sampled.  The sampler's lock says it."""
    import fcntl

    from slurm_gpupool.hooks import sampler

    run_dir = site["root"] / "run" / NODE
    run_dir.mkdir(parents=True, exist_ok=True)
    look_alike = subprocess.Popen(["sleep", "60", "slurm_gpupool.hooks.sampler"], user=65534)
    try:
        (run_dir / sampler.PID_FILE).write_text(f"{look_alike.pid}\n")  # as if its pid were reused
        assert not sampler._alive(str(run_dir))
        fd = os.open(run_dir / sampler.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running sampler holds it
            holder = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    f"from slurm_gpupool.hooks import sampler; print(sampler._alive({str(run_dir)!r}))",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert holder.stdout.strip() == "True", holder.stderr
        finally:
            os.close(fd)
        assert not sampler._alive(str(run_dir))  # released: none runs
    finally:
        look_alike.kill()
        look_alike.wait()


def fake_scontrol(site: dict) -> Path:
    """An ``scontrol`` on PATH that records its arguments (the drain) and succeeds."""
    bin_dir = site["root"] / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = site["root"] / "scontrol.args"
    script = bin_dir / "scontrol"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {log}\n')
    script.chmod(0o755)
    return log


def healthcheck(site: dict) -> subprocess.CompletedProcess[str]:
    """As slurmd runs it: no arguments, SLURMD_NODENAME, and SLURM_CONF from the site's shim."""
    env = {
        "PATH": f"{site['root'] / 'bin'}:/usr/bin:/bin",
        "SLURMD_NODENAME": NODE,
        "SLURM_CONF": str(site["etc"] / "slurm.conf"),
    }
    argv = [sys.executable, "-m", "slurm_gpupool.hooks.healthcheck"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)


def test_healthcheck_program_checks_every_gpu_and_drains_with_the_reason(site: dict):
    log = fake_scontrol(site)
    ok = healthcheck(site)
    assert (ok.returncode, ok.stdout) == (0, f"node {NODE}: ok\n"), ok.stderr
    assert not log.exists()  # a healthy node is not touched
    assert json.loads((site["state"] / "health.json").read_text())["status"] == "ok"

    inject.add_ecc_errors(SimStore(site["sim"] / f"{NODE}.json"), 5, uncorrected=2)
    bad = healthcheck(site)
    assert bad.returncode == 1, bad.stderr
    assert "GPU 5: 2 uncorrectable ECC errors since driver load" in bad.stdout
    args = log.read_text().splitlines()
    assert args[:4] == ["update", f"nodename={NODE}", "state=drain", args[3]]
    assert args[3].startswith("reason=gpupool: GPU 5: 2 uncorrectable ECC errors")
    health = json.loads((site["state"] / "health.json").read_text())
    assert health["status"] == "fail" and health["by"] == "healthcheck" and health["job"] is None
    stats = json.loads((site["state"] / "hook-stats.json").read_text())
    assert stats["health_drains"] == {"healthcheck": 1}


def test_healthcheck_program_fails_open_on_its_own_errors(site: dict):
    """A corrupt settings file is the tool's problem, not the node's: logged, exit 0, no drain."""
    log = fake_scontrol(site)
    (site["etc"] / "gpupool-hooks.json").write_text("{not json")
    res = healthcheck(site)
    assert res.returncode == 0 and "internal error, failing open" in res.stderr
    assert not log.exists()


def _sample_rounds(site: dict, rounds: int) -> None:
    """What the node's sampler does every usage_interval_s, here in-process and on cue."""
    from slurm_gpupool.hooks import sampler
    from slurm_gpupool.hooks.runtime import open_dir

    fd = open_dir(str(site["root"] / "run" / NODE))
    try:
        with open_backend(NODE, site["sim"]) as backend:  # one backend: GPM's previous sample
            for _ in range(rounds):
                assert sampler.sample_round(fd, backend) == 1
    finally:
        os.close(fd)


def test_the_sampler_records_gpm_activity_of_a_mig_job_into_its_record(site: dict):
    i = index_of(site, "mig", "3g.40gb")
    uuid, gpu = site["table"][i]["mig_uuid"], site["table"][i]["gpu"]
    store = SimStore(site["sim"] / f"{NODE}.json")
    other = next(d for d in site["table"] if d["kind"] == "mig" and d["gpu"] == gpu and d["index"] != i)
    inject.set_activity(store, gpu, 35, tensor_pct=20, dram_pct=15, mig_uuid=uuid)
    inject.set_activity(store, gpu, 100, tensor_pct=100, dram_pct=100, mig_uuid=other["mig_uuid"])  # not ours
    assert run(site, "prolog", SLURM_JOB_GPUS=str(i)).returncode == 0
    _sample_rounds(site, 3)
    usage = json.loads((site["root"] / "run" / NODE / "42.usage.json").read_text())["devices"][str(i)]
    assert usage["sm_activity_samples"] == 2  # the first round only took the first GPM sample
    assert run(site, "epilog", SLURM_JOB_GPUS=str(i)).returncode == 0
    (u,) = json.loads((site["root"] / "spool" / NODE / "jobs" / "42.json").read_text())["usage"]
    assert u["activity_source"] == "gpm"
    assert (u["mean_sm_activity_pct"], u["mean_tensor_activity_pct"], u["mean_dram_bw_pct"]) == (35.0, 20.0, 15.0)
    assert u["peak_sm_activity_pct"] == pytest.approx(35.0, abs=0.1)
    assert u["mean_utilization_pct"] is None  # NVML's utilization still has nothing for MIG


def test_another_users_process_claiming_the_job_is_not_charged_to_it(site: dict):
    """A user may put ``SLURM_JOB_ID=<another job>`` in a process's environment: the sampler
    counted such a process of user nobody on a shared GPU as job 42's (31,000 MiB and the
    GPU's whole utilization charged to it).  It now asks for the job's user, as the Epilog
    does (the Prolog writes ``<job>.uid`` beside ``<job>.devices``)."""
    i = index_of(site, "shared")
    gpu = site["table"][i]["gpu"]
    store = SimStore(site["sim"] / f"{NODE}.json")
    assert run(site, "prolog", SLURM_JOB_GPUS=str(i), SLURM_SHARDS_ON_NODE="1").returncode == 0
    assert (site["root"] / "run" / NODE / "42.uid").read_text() == hook_env(site)["SLURM_JOB_UID"]
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "42"}
    ours = subprocess.Popen(["sleep", "30"], env=env)
    liar = subprocess.Popen(["sleep", "30"], env=env, user=65534)
    try:
        inject.add_process(store, gpu, ours.pid, 1000)
        inject.add_process(store, gpu, liar.pid, 30000)
        inject.set_activity(store, gpu, 80)
        _sample_rounds(site, 2)
        assert run(site, "epilog", SLURM_JOB_GPUS=str(i)).returncode == 0
        assert liar.poll() is None  # the Epilog spared it too
    finally:
        for p in (ours, liar):
            p.kill()
            p.wait()
    (u,) = json.loads((site["root"] / "spool" / NODE / "jobs" / "42.json").read_text())["usage"]
    assert u["peak_memory_mib"] == 1000 and u["mean_utilization_pct"] == pytest.approx(80 * 1000 / 31000, abs=0.1)
    assert not (site["root"] / "run" / NODE / "42.uid").exists()  # the Epilog's cleanup took it


def test_on_a_shared_gpu_the_sampler_counts_the_jobs_own_processes_and_share(site: dict):
    i = index_of(site, "shared")
    gpu = site["table"][i]["gpu"]
    store = SimStore(site["sim"] / f"{NODE}.json")
    assert run(site, "prolog", SLURM_JOB_GPUS=str(i), SLURM_SHARDS_ON_NODE="1").returncode == 0
    env = {"PATH": os.environ["PATH"]}
    ours = subprocess.Popen(["sleep", "30"], env={**env, "SLURM_JOB_ID": "42"})
    theirs = subprocess.Popen(["sleep", "30"], env={**env, "SLURM_JOB_ID": "43"})
    later = subprocess.Popen(["sleep", "30"], env={**env, "SLURM_JOB_ID": "44"})
    try:
        inject.add_process(store, gpu, ours.pid, 3000)
        inject.add_process(store, gpu, theirs.pid, 1000)
        inject.set_activity(store, gpu, 80)
        _sample_rounds(site, 2)
        for p in (ours, theirs):
            p.kill()
            p.wait()
        inject.add_process(store, gpu, later.pid, 5000)  # another job holds memory at our epilog
        assert run(site, "epilog", SLURM_JOB_GPUS=str(i)).returncode == 0
    finally:
        for p in (ours, theirs, later):
            p.kill()
            p.wait()
    (u,) = json.loads((site["root"] / "spool" / NODE / "jobs" / "42.json").read_text())["usage"]
    assert u["peak_memory_mib"] == 3000  # its own processes; never the 5000 MiB of another job
    assert u["mean_utilization_pct"] == 60.0  # 80 % of the GPU x 3000 of 4000 MiB
    assert "activity_source" not in u  # the GPU's GPM is every job's on a shared GPU
    assert u["shares"] == 4
