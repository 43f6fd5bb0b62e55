"""CUDA MPS for shard jobs: the pure settings, the simulated MPS (stand-in control daemon and
client model), and the hooks' daemon lifecycle and user separation end to end on it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_gpupool.hooks.mps import admission, client_env, thread_percentage
from slurm_gpupool.hw.sim import mps as sim_mps
from slurm_gpupool.hw.sim.mps_control import PID_FILE, write_stand_in
from slurm_gpupool.hw.sim.state import SimStore
from tests.unit.test_hooks import NODE, index_of, run, site  # noqa: F401  (the fixture)

# ------------------------------------------------------------------ the one place: client_env


def test_client_env_under_mps_gives_pipe_log_threads_and_memory():
    env = dict(client_env(1, 4, 81559, mps={"pipe_dir": "/run/p/GPU-1", "log_dir": "/run/p/GPU-1.log"}))
    assert env == {
        "CUDA_MPS_PIPE_DIRECTORY": "/run/p/GPU-1",
        "CUDA_MPS_LOG_DIRECTORY": "/run/p/GPU-1.log",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20389M",  # a quarter of 81559 MiB, device ordinal 0
    }


def test_client_env_a_smaller_memory_request_lowers_the_limit_never_raises_it():
    mps = {"pipe_dir": "/p", "log_dir": "/l"}
    assert dict(client_env(2, 4, 16000, mps=mps, mem_request_mib=3000))["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=3000M"
    assert (
        dict(client_env(2, 4, 16000, mps=mps, mem_request_mib=99000))["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8000M"
    )


def test_client_env_without_mps_gives_no_pipe_directory():
    env = dict(client_env(2, 4, 16000))
    assert env == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" in dict(client_env(2, 4, 16000, memory_limit=True))


@pytest.mark.parametrize(("shards", "shares", "pct"), [(1, 4, 25), (4, 4, 100), (9, 4, 100), (1, 300, 1), (1, 3, 33)])
def test_thread_percentage_is_the_share_clamped_to_1_100(shards: int, shares: int, pct: int):
    assert thread_percentage(shards, shares) == pct


def test_admission_one_user_per_server():
    alice = {"uid": "1000", "user": "alice", "jobs": ["7"]}
    assert admission(None, "1000", set(), "absent") == ("start", "")
    assert admission(alice, "1000", {"7"}, "running") == ("join", "")
    action, why = admission(alice, "1001", {"7"}, "running")
    assert action == "plain" and "alice" in why and "job 7" in why
    # alice's job is gone (its .devices file too): bob gets a fresh daemon of his own
    assert admission(alice, "1001", set(), "running")[0] == "restart"
    assert admission(alice, "1000", set(), "running") == ("join", "")
    # a broken daemon: replaced when nobody uses it, left to its jobs otherwise
    assert admission(alice, "1000", set(), "wedged")[0] == "restart"
    assert admission(None, "1000", set(), "dead")[0] == "restart"
    assert admission(alice, "1000", {"7"}, "wedged")[0] == "plain"


# ------------------------------------------------------------------ the simulated MPS


@pytest.fixture
def control(site: dict, tmp_path: Path):  # noqa: F811
    """The stand-in nvidia-cuda-mps-control, MPS on in the hooks' settings; every daemon
    it started is killed at the end."""
    exe = tmp_path / "bin" / "nvidia-cuda-mps-control"
    exe.parent.mkdir()
    write_stand_in(str(exe))
    settings = {
        **site["settings"],
        "mps": {"enabled": True, "control": str(exe), "pipe_dir": str(tmp_path / "mps" / "{node}"), "timeout_s": 3},
    }
    (site["etc"] / "gpupool-hooks.json").write_text(json.dumps(settings))
    store = SimStore(site["sim"] / f"{NODE}.json")
    yield {"exe": str(exe), "store": store, "base": tmp_path / "mps" / NODE}
    for d in store.read().get("mps", []):
        with contextlib.suppress(OSError):
            os.kill(d["pid"], signal.SIGCONT)
            os.kill(d["pid"], signal.SIGKILL)


def ctl(control: dict, pipes: Path, uuid: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "CUDA_VISIBLE_DEVICES": uuid,
        "CUDA_MPS_PIPE_DIRECTORY": str(pipes),
        "CUDA_MPS_LOG_DIRECTORY": str(pipes) + ".log",
        "SLURM_GPUPOOL_SIM_STATE": str(control["store"].path),
    }
    return subprocess.run([control["exe"], *args], input=stdin, env=env, capture_output=True, text=True, timeout=30)


@contextlib.contextmanager
def procs(n: int):
    """Real processes to stand for CUDA programs (the simulation checks that pids live)."""
    ps = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]) for _ in range(n)]
    try:
        yield [p.pid for p in ps]
    finally:
        for p in ps:
            p.kill()
            p.wait()


def test_stand_in_daemon_pipe_dir_match_one_user_per_server_and_memory_limit(site: dict, control: dict, tmp_path):  # noqa: F811
    uuid = site["table"][index_of(site, "shared")]["gpu_uuid"]
    pipes = tmp_path / "p"
    assert ctl(control, pipes, uuid, "-d").returncode == 0
    assert (pipes / PID_FILE).exists() and "started" in (tmp_path / "p.log" / "control.log").read_text()
    assert ctl(control, pipes, uuid, "-d").returncode == 1  # one daemon per pipe directory
    store = control["store"]
    base = {"CUDA_VISIBLE_DEVICES": uuid, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25"}
    with procs(4) as (a1, a2, b1, other):
        # a client of another pipe directory does not reach the daemon: plain CUDA
        assert (
            sim_mps.cuda_init(store, {**base, "CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "x")}, 1000, other) == "plain"
        )
        mps_env = {**base, "CUDA_MPS_PIPE_DIRECTORY": str(pipes), "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1000M"}
        assert sim_mps.cuda_init(store, mps_env, 1000, a1) == "mps"
        assert sim_mps.cuda_init(store, mps_env, 1000, a2) == "mps"
        assert sim_mps.cuda_init(store, mps_env, 1001, b1) == "queued"  # another user waits at CUDA init
        assert sim_mps.thread_percentages(store, str(pipes)) == {a1: 25, a2: 25}
        server = ctl(control, pipes, uuid, stdin="get_server_list\n").stdout.strip()
        assert server and ctl(control, pipes, uuid, stdin=f"get_client_list {server}\n").stdout.split() == [
            str(a1),
            str(a2),
        ]
        sim_mps.allocate(store, a1, 900)
        with pytest.raises(sim_mps.SimMpsError, match="pinned device memory limit"):
            sim_mps.allocate(store, a1, 200)  # 1100 > 1000 MiB
        sim_mps.allocate(store, other, 5000)  # a plain process has no MPS limit
        with pytest.raises(sim_mps.SimMpsError, match="waiting"):
            sim_mps.allocate(store, b1, 1)
        sim_mps.cuda_exit(store, a1)
        assert sim_mps.status(store, b1) == "queued"  # alice still has a client
        sim_mps.cuda_exit(store, a2)
        assert sim_mps.status(store, b1) == "mps"  # alice's server ended; bob's started
        assert ctl(control, pipes, uuid, stdin="get_server_list\n").stdout.strip() != server
    assert ctl(control, pipes, uuid, stdin="quit\n").returncode == 0
    assert not (pipes / PID_FILE).exists()
    assert ctl(control, pipes, uuid, stdin="get_server_list\n").returncode == 1  # no daemon


def test_pre_volta_gpus_ignore_the_client_limits():
    st = {"model_facts": {"architecture": "pascal"}}
    assert st["model_facts"]["architecture"] in sim_mps.PRE_VOLTA
    assert sim_mps.parse_mem_limit("0=4096M,1=2G") == {0: 4096, 1: 2048}
    with pytest.raises(sim_mps.SimMpsError):
        sim_mps.parse_mem_limit("4096M")


# ------------------------------------------------------------------ the hooks, end to end


def shard_job(site: dict, jid: str, uid: int, user: str, shards: str = "1") -> dict[str, str]:  # noqa: F811
    """Prolog then TaskProlog of a shard job; the TaskProlog's exports and prints."""
    i = str(index_of(site, "shared"))
    ids = {"SLURM_JOB_ID": jid, "SLURM_JOB_UID": str(uid), "SLURM_JOB_USER": user}
    pro = run(site, "prolog", SLURM_JOB_GPUS=i, **ids)
    assert pro.returncode == 0, pro.stderr
    tp = run(site, "taskprolog", SLURM_STEP_GPUS=i, SLURM_SHARDS_ON_NODE=shards, CUDA_VISIBLE_DEVICES="0", **ids)
    assert tp.returncode == 0, tp.stderr
    out = {}
    for line in tp.stdout.splitlines():
        if line.startswith("export "):
            k, _, v = line[7:].partition("=")
            out[k] = v
        else:
            out.setdefault("_lines", "")
            out["_lines"] += line + "\n"
    out["_prolog_log"] = pro.stderr
    return out


def end_job(site: dict, jid: str) -> None:  # noqa: F811
    ep = run(site, "epilog", SLURM_JOB_ID=jid, SLURM_JOB_GPUS=str(index_of(site, "shared")))
    assert ep.returncode == 0, ep.stderr


def test_shard_jobs_run_under_their_gpus_daemon_and_its_limits_hold(site: dict, control: dict):  # noqa: F811
    store = control["store"]
    uuid = site["table"][index_of(site, "shared")]["gpu_uuid"]
    a = shard_job(site, "51", 1000, "alice", shards="1")
    pipes = str(control["base"] / uuid)
    assert a["CUDA_MPS_PIPE_DIRECTORY"] == pipes and a["CUDA_MPS_LOG_DIRECTORY"] == pipes + ".log"
    assert a["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert a["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20389M"  # 1 of 4 shares of an 81559 MiB H100
    assert sim_mps.daemon_at(store.read(), pipes) is not None
    with procs(1) as (p,):
        assert sim_mps.cuda_init(store, {k: v for k, v in a.items() if not k.startswith("_")}, 1000, p) == "mps"
        sim_mps.allocate(store, p, 20000)
        with pytest.raises(sim_mps.SimMpsError, match="limit"):
            sim_mps.allocate(store, p, 1000)
    # the same user's next job joins the daemon (no second start)
    a2 = shard_job(site, "52", 1000, "alice")
    assert a2["CUDA_MPS_PIPE_DIRECTORY"] == pipes
    started = [x for x in store.read()["mps"] if x["pipe_dir"] == pipes]
    assert len(started) == 1
    end_job(site, "51")
    assert sim_mps.daemon_at(store.read(), pipes) is not None  # job 52 still uses it
    end_job(site, "52")
    assert sim_mps.daemon_at(store.read(), pipes) is None  # the last job's Epilog stopped it
    assert not Path(pipes).exists()  # and left no pipe directory behind
    assert "Control daemon exited (quit)" in (Path(pipes + ".log") / "control.log").read_text()  # the log stays
    mig = str(index_of(site, "mig"))
    assert run(site, "prolog", SLURM_JOB_ID="53", SLURM_JOB_GPUS=mig).returncode == 0
    tp = run(site, "taskprolog", SLURM_JOB_ID="53", SLURM_STEP_GPUS=mig, CUDA_VISIBLE_DEVICES="0")
    assert "CUDA_MPS" not in tp.stdout and not store.read()["mps"]  # MIG jobs get no MPS


def test_mps_turned_off_while_a_job_runs_its_epilog_still_stops_the_daemon(site: dict, control: dict):  # noqa: F811
    """The admin turns MPS off (``hooks.mps: false``: a switch's ``gres install`` writes the
    hooks' settings again) while a shard job runs under its GPU's daemon.  Its Epilog stops
    the daemon all the same: nothing would stop it later (CI, 24.11: a test's settings
    restored before its job's Epilog ran left a daemon serving that user for good, and the
    next user's jobs ran without MPS).  With MPS off and no daemon, an Epilog does nothing
    and reports no failure."""
    store = control["store"]
    uuid = site["table"][index_of(site, "shared")]["gpu_uuid"]
    pipes = str(control["base"] / uuid)
    shard_job(site, "71", 1000, "alice")
    assert sim_mps.daemon_at(store.read(), pipes) is not None
    hooks = site["etc"] / "gpupool-hooks.json"
    off = json.loads(hooks.read_text())
    off["mps"] = {**off["mps"], "enabled": False, "control": "nvidia-cuda-mps-control"}  # the defaults again
    hooks.write_text(json.dumps(off))
    ep = run(site, "epilog", SLURM_JOB_ID="71", SLURM_JOB_GPUS=str(index_of(site, "shared")))
    assert ep.returncode == 0, ep.stderr
    assert sim_mps.daemon_at(store.read(), pipes) is None  # stopped (killed: no control program now)
    assert not Path(pipes).exists() and "stopped the MPS daemon" in ep.stderr
    ep = run(site, "epilog", SLURM_JOB_ID="72", SLURM_JOB_GPUS=str(index_of(site, "shared")))
    assert ep.returncode == 0 and "MPS" not in ep.stderr, ep.stderr


def test_another_users_job_runs_without_mps_and_never_waits(site: dict, control: dict):  # noqa: F811
    store = control["store"]
    shard_job(site, "61", 1000, "alice")
    b = shard_job(site, "62", 1001, "bob")
    assert "CUDA_MPS_PIPE_DIRECTORY" not in b  # no pipe directory: CUDA runs without MPS
    assert "print gpupool: this job runs without CUDA MPS" in b["_lines"] and "alice" in b["_lines"]
    assert "runs without MPS" in b["_prolog_log"]  # and the hook's log says so
    with procs(1) as (p,):  # bob's CUDA starts at once, as a plain time-sliced process
        env = {k: v for k, v in b.items() if not k.startswith("_")}
        assert sim_mps.cuda_init(store, env, 1001, p) == "plain"
    end_job(site, "62")
    end_job(site, "61")
    c = shard_job(site, "63", 1001, "bob")  # alice is gone: bob gets the GPU's daemon
    assert "CUDA_MPS_PIPE_DIRECTORY" in c
    end_job(site, "63")


def test_a_wedged_daemon_is_left_to_its_jobs_and_replaced_when_none_uses_it(site: dict, control: dict):  # noqa: F811
    store = control["store"]
    uuid = site["table"][index_of(site, "shared")]["gpu_uuid"]
    pipes = str(control["base"] / uuid)
    shard_job(site, "71", 1000, "alice")
    old = sim_mps.daemon_at(store.read(), pipes)["pid"]
    os.kill(old, signal.SIGSTOP)  # wedged: alive, answers nothing
    b = shard_job(site, "72", 1000, "alice")
    assert "CUDA_MPS_PIPE_DIRECTORY" not in b and "wedged" in b["_lines"]
    assert Path(f"/proc/{old}").exists()  # job 71's daemon is not touched
    end_job(site, "72")
    assert Path(f"/proc/{old}").exists()
    end_job(site, "71")  # the last job: the daemon that does not answer quit is killed
    deadline = time.monotonic() + 10
    while _running(old) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _running(old)
    c = shard_job(site, "73", 1000, "alice")
    assert c["CUDA_MPS_PIPE_DIRECTORY"] == pipes
    assert sim_mps.daemon_at(store.read(), pipes)["pid"] != old
    end_job(site, "73")


def test_a_dead_daemon_is_replaced_by_the_next_job(site: dict, control: dict):  # noqa: F811
    store = control["store"]
    uuid = site["table"][index_of(site, "shared")]["gpu_uuid"]
    pipes = str(control["base"] / uuid)
    shard_job(site, "81", 1000, "alice")
    old = sim_mps.daemon_at(store.read(), pipes)["pid"]
    os.kill(old, signal.SIGKILL)
    end_job(site, "81")  # its Epilog finds a dead daemon: cleaned up, its pipes and directory gone
    assert not Path(pipes).exists()
    shard_job(site, "82", 1000, "alice")
    os.kill(sim_mps.daemon_at(store.read(), pipes)["pid"], signal.SIGKILL)  # dies under job 82...
    (site["root"] / "run" / NODE / "82.devices").unlink()  # ...whose Epilog never ran
    c = shard_job(site, "83", 1001, "bob")  # no live job uses the dead daemon: replaced
    assert c["CUDA_MPS_PIPE_DIRECTORY"] == pipes
    end_job(site, "83")


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# ------------------------------------------------------------------ one set of settings


def test_the_config_the_hook_settings_file_and_the_hooks_defaults_agree(tmp_path: Path):
    """hooks.mps* in the pool config -> gpupool-hooks.json (pool/hook_settings.py) -> the
    hooks' defaults (hooks/runtime.py): the same keys, the same default values."""
    from slurm_gpupool.config.load import parse_config
    from slurm_gpupool.config.model import HookSettings
    from slurm_gpupool.hooks.runtime import DEFAULTS, load_settings
    from slurm_gpupool.pool.hook_settings import hook_settings
    from tests.unit.test_hooks import CONFIG

    written = hook_settings(parse_config(CONFIG, "t.yaml", Path(".")))
    assert written["mps"] == DEFAULTS["mps"]  # defaults: the config's run_dir is the hooks' run_dir
    assert written["shard_memory_limit"] == DEFAULTS["shard_memory_limit"] == HookSettings().shard_memory_limit
    on = {**CONFIG, "hooks": {"mps": True, "mps_control": "/opt/bin/mps-control", "mps_timeout_s": 2}}
    (tmp_path / "gpupool-hooks.json").write_text(json.dumps(hook_settings(parse_config(on, "t.yaml", Path(".")))))
    loaded = load_settings({"SLURM_CONF": str(tmp_path / "slurm.conf")})["mps"]
    assert loaded == {**DEFAULTS["mps"], "enabled": True, "control": "/opt/bin/mps-control", "timeout_s": 2.0}


def test_the_sandbox_installs_the_stand_in_and_names_it_in_its_config(tmp_path: Path):
    """Beside the hook launchers, written once (then only if it changed); the sandbox's pool
    config names it as hooks.mps_control, so `hooks: {mps: true}` works on a sandbox."""
    from slurm_gpupool.config.load import parse_config
    from slurm_gpupool.sandbox.configs import MPS_CONTROL, mps_control_stand_in
    from slurm_gpupool.sandbox.poolconfig import sandbox_config
    from tests.unit.test_hooks import CONFIG

    changed: set[Path] = set()
    mps_control_stand_in(tmp_path, changed)
    assert changed == {tmp_path / MPS_CONTROL} and os.access(tmp_path / MPS_CONTROL, os.X_OK)
    again: set[Path] = set()
    mps_control_stand_in(tmp_path, again)
    assert not again
    raw = sandbox_config(parse_config(CONFIG, "t.yaml", Path(".")), tmp_path, {NODE: ("127.0.0.2", 6818)})
    assert raw["hooks"]["mps_control"] == f"{tmp_path}/libexec/{MPS_CONTROL}"
    assert parse_config(raw, "sandbox.yaml", tmp_path).hooks.mps_control == raw["hooks"]["mps_control"]


def test_a_job_can_lower_its_own_memory_limit_never_raise_it(site: dict, control: dict):  # noqa: F811
    i = str(index_of(site, "shared"))
    ids = {"SLURM_JOB_ID": "91", "SLURM_JOB_UID": "1000", "SLURM_JOB_USER": "alice"}
    assert run(site, "prolog", SLURM_JOB_GPUS=i, **ids).returncode == 0
    for asked, limit in (("4000", "0=4000M"), ("90000", "0=20389M"), ("4000M", "0=20389M")):
        tp = run(
            site, "taskprolog", SLURM_STEP_GPUS=i, SLURM_SHARDS_ON_NODE="1", SLURM_GPUPOOL_GPU_MEM_MIB=asked, **ids
        )
        assert f"export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={limit}" in tp.stdout.splitlines(), (asked, tp.stdout)
    end_job(site, "91")


def test_an_inherited_pipe_directory_of_ours_is_unset_unless_the_job_is_admitted(site: dict, control: dict):  # noqa: F811
    """A job submitted from inside an MPS job inherits its CUDA_MPS_PIPE_DIRECTORY (sbatch's
    --export=ALL): pointing at another user's daemon, CUDA would wait there."""
    shard_job(site, "95", 1000, "alice")
    theirs = str(control["base"] / site["table"][index_of(site, "shared")]["gpu_uuid"])
    mig = str(index_of(site, "mig"))
    ids = {"SLURM_JOB_ID": "96", "SLURM_JOB_UID": "1001", "CUDA_MPS_PIPE_DIRECTORY": theirs}
    assert run(site, "prolog", SLURM_JOB_GPUS=mig, **ids).returncode == 0
    tp = run(site, "taskprolog", SLURM_STEP_GPUS=mig, CUDA_VISIBLE_DEVICES="0", **ids)
    assert "unset CUDA_MPS_PIPE_DIRECTORY" in tp.stdout.splitlines()
    other = run(site, "taskprolog", SLURM_STEP_GPUS=mig, **{**ids, "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps"})
    assert "unset" not in other.stdout  # the user's own MPS elsewhere is theirs to use
    end_job(site, "95")


# ------------------------------------------------------------------ preload enforcement (#28 item 4)


def test_client_env_with_a_preload_library_gives_the_same_limits_as_mps():
    """One share rule: the HAMi-core variables carry MPS's numbers, LD_PRELOAD keeps the job's own."""
    env = dict(client_env(1, 4, 81559, preload="/opt/hami/libvgpu.so", ld_preload="/home/a/libx.so"))
    assert env["LD_PRELOAD"] == "/home/a/libx.so:/opt/hami/libvgpu.so"
    assert env["CUDA_DEVICE_SM_LIMIT"] == env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_DEVICE_MEMORY_LIMIT"] == "20389m"  # the MPS pinned limit's 20389M, in HAMi-core's units
    mps = dict(client_env(1, 4, 81559, mps={"pipe_dir": "/p", "log_dir": "/l"}))
    assert mps["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20389M" and "LD_PRELOAD" not in mps
    low = dict(client_env(2, 4, 16000, preload="/l.so", mem_request_mib=3000))
    high = dict(client_env(2, 4, 16000, preload="/l.so", mem_request_mib=99000))
    assert (low["CUDA_DEVICE_MEMORY_LIMIT"], high["CUDA_DEVICE_MEMORY_LIMIT"]) == ("3000m", "8000m")
    assert "CUDA_DEVICE_MEMORY_LIMIT" not in dict(client_env(1, 4, None, preload="/l.so"))  # memory unknown


def test_preload_list_appends_and_never_clobbers():
    from slurm_gpupool.hooks.mps import preload_list

    assert preload_list("", "/l.so") == "/l.so"
    assert preload_list("/a.so /b.so", "/l.so") == "/a.so:/b.so:/l.so"
    assert preload_list("/l.so:/a.so", "/l.so") == "/l.so:/a.so"  # already there: once
    assert preload_list("/a.so\nexport X=1", "/l.so") == "/l.so"  # would break the output line


@pytest.fixture
def preload(site: dict, tmp_path: Path):  # noqa: F811
    """share_enforcement: preload in the hooks' settings, with a stand-in library file."""
    lib = tmp_path / "opt" / "libvgpu.so"
    lib.parent.mkdir()
    lib.write_bytes(b"\x7fELF stand-in")
    settings = {**site["settings"], "share_enforcement": "preload", "preload_library": str(lib)}
    (site["etc"] / "gpupool-hooks.json").write_text(json.dumps(settings))
    return {"lib": str(lib), "settings": settings}


def _exports(stdout: str) -> dict[str, str]:
    return {k: v for k, _, v in (ln[7:].partition("=") for ln in stdout.splitlines() if ln.startswith("export "))}


def test_a_shard_jobs_taskprolog_preloads_the_limiter_with_its_shares(site: dict, preload: dict):  # noqa: F811
    i = str(index_of(site, "shared"))
    job = {"SLURM_JOB_ID": "101", "SLURM_STEP_GPUS": i, "CUDA_VISIBLE_DEVICES": "0"}
    tp = run(site, "taskprolog", SLURM_SHARDS_ON_NODE="1", LD_PRELOAD="/home/alice/libmine.so", **job)
    assert tp.returncode == 0, tp.stderr
    env = _exports(tp.stdout)
    assert env["LD_PRELOAD"] == f"/home/alice/libmine.so:{preload['lib']}"  # appended, never clobbered
    assert env["CUDA_DEVICE_SM_LIMIT"] == "25" and env["CUDA_DEVICE_MEMORY_LIMIT"] == "20389m"  # 1 of 4, H100
    assert "CUDA_MPS_PIPE_DIRECTORY" not in env and "print" not in tp.stdout
    two = _exports(run(site, "taskprolog", SLURM_SHARDS_ON_NODE="2", **job).stdout)
    assert (two["LD_PRELOAD"], two["CUDA_DEVICE_SM_LIMIT"], two["CUDA_DEVICE_MEMORY_LIMIT"]) == (
        preload["lib"],
        "50",
        "40779m",
    )
    for asked, limit in (("4000", "4000m"), ("90000", "20389m"), ("4000M", "20389m")):  # --gpu-mem lowers only
        tp = run(site, "taskprolog", SLURM_SHARDS_ON_NODE="1", SLURM_GPUPOOL_GPU_MEM_MIB=asked, **job)
        assert _exports(tp.stdout)["CUDA_DEVICE_MEMORY_LIMIT"] == limit, (asked, tp.stdout)


def test_mig_and_whole_gpu_jobs_get_no_preload(site: dict, preload: dict):  # noqa: F811
    from slurm_gpupool.hooks.taskprolog import exports

    mig = str(index_of(site, "mig"))
    tp = run(site, "taskprolog", SLURM_JOB_ID="102", SLURM_STEP_GPUS=mig, CUDA_VISIBLE_DEVICES="0")
    assert tp.returncode == 0 and "CUDA_VISIBLE_DEVICES" in tp.stdout
    assert "LD_PRELOAD" not in tp.stdout and "CUDA_DEVICE_" not in tp.stdout
    # a whole GPU (this site has none by day: the shared GPU's record as a whole one), even
    # with a stray SLURM_SHARDS_ON_NODE in the job's environment
    state = json.loads((site["state"] / "node-state.json").read_text())
    i = index_of(site, "shared")
    state["slurm_devices"][i] = {**state["slurm_devices"][i], "kind": "whole", "shares": 0}
    env = {"SLURM_STEP_GPUS": str(i), "SLURM_SHARDS_ON_NODE": "1"}
    names = {k for k, _ in exports(env, state, preload["settings"], None, preload["lib"])}
    assert "CUDA_VISIBLE_DEVICES" in names and not names & {"LD_PRELOAD", "CUDA_DEVICE_SM_LIMIT"}


def test_a_limiter_missing_on_the_node_is_not_preloaded_and_the_job_is_told(site: dict, preload: dict):  # noqa: F811
    os.unlink(preload["lib"])
    i = str(index_of(site, "shared"))
    tp = run(site, "taskprolog", SLURM_JOB_ID="103", SLURM_STEP_GPUS=i, SLURM_SHARDS_ON_NODE="1")
    assert tp.returncode == 0 and "LD_PRELOAD" not in tp.stdout and "CUDA_DEVICE_" not in tp.stdout
    assert f"print gpupool: the share limiter {preload['lib']} is not on this node" in tp.stdout
    relative = {**preload["settings"], "preload_library": "libvgpu.so"}  # never trusted as a path
    (site["etc"] / "gpupool-hooks.json").write_text(json.dumps(relative))
    tp = run(site, "taskprolog", SLURM_JOB_ID="103", SLURM_STEP_GPUS=i, SLURM_SHARDS_ON_NODE="1")
    assert "LD_PRELOAD" not in tp.stdout and "not an absolute path" in tp.stdout


def test_the_share_enforcement_settings_reach_the_hooks(tmp_path: Path):
    """hooks.share_enforcement / preload_library -> gpupool-hooks.json -> the hooks' defaults."""
    from slurm_gpupool.config.load import parse_config
    from slurm_gpupool.config.model import HookSettings
    from slurm_gpupool.hooks.runtime import DEFAULTS, load_settings
    from slurm_gpupool.pool.hook_settings import hook_settings
    from tests.unit.test_hooks import CONFIG

    written = hook_settings(parse_config(CONFIG, "t.yaml", Path(".")))
    assert written["share_enforcement"] == DEFAULTS["share_enforcement"] == HookSettings().share_enforcement
    assert written["preload_library"] == DEFAULTS["preload_library"] is None and not HookSettings().preload_library
    on = {**CONFIG, "hooks": {"share_enforcement": "preload", "preload_library": "/opt/hami/libvgpu.so"}}
    (tmp_path / "gpupool-hooks.json").write_text(json.dumps(hook_settings(parse_config(on, "t.yaml", Path(".")))))
    loaded = load_settings({"SLURM_CONF": str(tmp_path / "slurm.conf")})
    assert (loaded["share_enforcement"], loaded["preload_library"]) == ("preload", "/opt/hami/libvgpu.so")
    assert loaded["mps"]["enabled"] is False
    old = {k: v for k, v in written.items() if k not in ("share_enforcement", "preload_library")}
    (tmp_path / "gpupool-hooks.json").write_text(json.dumps(old))  # a file written before these keys
    assert load_settings({"SLURM_CONF": str(tmp_path / "slurm.conf")})["share_enforcement"] == "none"


def test_time_sliced_mig_devices_each_get_their_own_daemon_and_the_profiles_memory(site: dict, control: dict):  # noqa: F811
    """#28 item 3: a shard job on a time-sliced MIG device sees that MIG device, its own MPS
    daemon (keyed by the MIG UUID, as NVIDIA runs MPS on MIG) and a memory limit from the
    profile; a job on the GPU's other MIG device gets another daemon."""
    from slurm_gpupool.config.load import parse_config as parse
    from slurm_gpupool.core.mig.catalog import get_model
    from slurm_gpupool.hw import open_backend
    from slurm_gpupool.node.apply import apply_node
    from tests.unit.test_hooks import CONFIG

    with open_backend(NODE, site["sim"]) as b:
        apply_node(b, parse(CONFIG, "t.yaml", Path(".")), "mig_shares", site["state"])
    site["table"] = json.loads((site["state"] / "node-state.json").read_text())["slurm_devices"]
    devs = [d for d in site["table"] if d["type"] == "3g.40gb_shared"]
    assert len(devs) == 4 and all(d["kind"] == "shared" and d["shares"] == 2 for d in devs)
    limit = (
        get_model(json.loads((site["state"] / "node-state.json").read_text())["gpus"][4]["model"])
        .profile("3g.40gb")
        .memory_mib
        // 2
    )
    store = control["store"]
    a = shard_job(site, "71", 1000, "alice")  # index_of(site, "shared"): the first of them
    mig = devs[0]["mig_uuid"]
    pipes = str(control["base"] / mig)
    assert a["CUDA_VISIBLE_DEVICES"] == mig and a["SLURM_GPUPOOL_PROFILE"] == "3g.40gb"
    assert a["CUDA_MPS_PIPE_DIRECTORY"] == pipes and a["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert a["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={limit}M"
    daemon = sim_mps.daemon_at(store.read(), pipes)
    assert daemon is not None and daemon["gpu_uuid"] == mig
    with procs(1) as (p,):  # the simulated client runs on that MIG device, under its limit
        env = {k: v for k, v in a.items() if not k.startswith("_")}
        assert sim_mps.cuda_init(store, env, 1000, p) == "mps"
        sim_mps.allocate(store, p, limit - 10)
        with pytest.raises(sim_mps.SimMpsError, match="limit"):
            sim_mps.allocate(store, p, 20)
    other = devs[1]
    assert other["gpu"] == devs[0]["gpu"] and other["mig_uuid"] != mig  # the same GPU's other device
    ids = {"SLURM_JOB_ID": "72", "SLURM_JOB_UID": "1000", "SLURM_JOB_USER": "alice"}
    assert run(site, "prolog", SLURM_JOB_GPUS=str(other["index"]), **ids).returncode == 0
    assert sim_mps.daemon_at(store.read(), str(control["base"] / other["mig_uuid"])) is not None
    end_job(site, "71")
    assert sim_mps.daemon_at(store.read(), pipes) is None  # its last job's Epilog stopped it
    assert run(site, "epilog", SLURM_JOB_GPUS=str(other["index"]), **ids).returncode == 0
    assert not store.read()["mps"]


def test_the_daemon_directories_take_a_gpu_or_mig_uuid_and_nothing_else():
    from slurm_gpupool.hooks.mps import daemon_dirs, daemon_key
    from slurm_gpupool.hooks.runtime import HookError

    s = {"mps": {"pipe_dir": "/run/mps"}}
    mig = "MIG-0a1b2c3d-1111-5222-8333-444455556666"
    assert daemon_dirs(s, "n", mig)[1:] == (f"/run/mps/{mig}", f"/run/mps/{mig}.log")
    assert daemon_key({"gpu_uuid": "GPU-1", "mig_uuid": mig}) == mig
    assert daemon_key({"gpu_uuid": "GPU-0a1b2c3d"}) == "GPU-0a1b2c3d"
    for bad in ("MIG-GPU-0a1b2c3d-1111/1/0", "../GPU-0a1b2c3d", "MIG-0a1b2c3d/.."):
        with pytest.raises(HookError):
            daemon_dirs(s, "n", bad)


def test_a_hook_waits_for_the_mps_lock_as_long_as_its_holder_may_keep_it():
    """A Prolog replacing a daemon may hold the node's MPS lock for four ``timeout_s`` (ask,
    quit, wait for the end, start); a fixed 15 s wait made the Epilogs beside a wedged
    daemon's give up at ``timeout_s: 20``, and the dead daemon's pipes stayed."""
    from slurm_gpupool.hooks.mps import lock_wait_s

    assert lock_wait_s({"mps": {"timeout_s": 20}}) >= 4 * 20
    assert lock_wait_s({"mps": {"timeout_s": 5}}) >= 4 * 5
    assert lock_wait_s({"mps": {}}) >= 15.0  # never shorter than before
