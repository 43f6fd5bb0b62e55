"""The Prolog/Epilog keep dcgm-exporter's HPC job mapping files, and count their own failures
and health drains for `gpupool metrics`: run as Slurm runs them, on a simulated node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_gpupool.hooks.jobmap import device_keys
from slurm_gpupool.hooks.runtime import HookError
from slurm_gpupool.hw.sim import inject
from slurm_gpupool.hw.sim.state import SimStore

from .test_hooks import NODE, hook_env, index_of, run, site  # noqa: F401  (site: the fixture)


@pytest.fixture
def mapped(site: dict) -> dict:  # noqa: F811
    """The site with the mapping on (``{node}`` in the directory, as the sandbox has it)."""
    settings = {**site["settings"], "dcgm_job_mapping_dir": str(site["root"] / "dcgm" / "{node}")}
    (site["etc"] / "gpupool-hooks.json").write_text(json.dumps(settings))
    return {**site, "map": site["root"] / "dcgm" / NODE}


def listing(d: Path) -> dict[str, list[str]]:
    """The mapping files dcgm-exporter reads (names that are GPU ids) and their lines."""
    if not d.exists():
        return {}
    return {p.name: p.read_text().splitlines() for p in sorted(d.iterdir()) if not p.name.startswith(".")}


def gi_of(where: dict, index: int) -> str:
    dev = where["table"][index]
    state = json.loads((where["state"] / "node-state.json").read_text())
    (gi,) = [i["gi_id"] for g in state["gpus"] for i in g["instances"] if i["uuid"] == dev["mig_uuid"]]
    return f"{dev['gpu']}.{gi}"


def stats(where: dict) -> dict:
    path = where["state"] / "hook-stats.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_a_mig_job_and_two_shard_jobs_are_listed_while_they_run(mapped: dict):
    mig = index_of(mapped, "mig", "3g.40gb")
    shared = index_of(mapped, "shared")
    gpu = str(mapped["table"][shared]["gpu"])
    assert run(mapped, "prolog", SLURM_JOB_GPUS=str(mig)).returncode == 0
    assert run(mapped, "prolog", SLURM_JOB_ID="43", SLURM_JOB_GPUS=str(shared)).returncode == 0
    assert run(mapped, "prolog", SLURM_JOB_ID="44", SLURM_JOB_GPUS=str(shared)).returncode == 0
    mig_gpu = str(mapped["table"][mig]["gpu"])
    assert mig_gpu != gpu
    # the instance's own file, and its GPU's (what dcgm-exporter reads); the shared GPU's
    assert listing(mapped["map"]) == {gi_of(mapped, mig): ["42"], mig_gpu: ["42"], gpu: ["43", "44"]}
    assert {p.stat().st_mode & 0o777 for p in mapped["map"].iterdir() if not p.name.startswith(".")} == {0o644}
    assert run(mapped, "epilog", SLURM_JOB_ID="43", SLURM_JOB_GPUS=str(shared)).returncode == 0
    assert listing(mapped["map"]) == {gi_of(mapped, mig): ["42"], mig_gpu: ["42"], gpu: ["44"]}
    # a second MIG job on another instance of the same GPU: the GPU's file lists both
    other = next(
        d["index"]
        for d in mapped["table"]
        if str(d["gpu"]) == mig_gpu and d.get("mig_uuid") not in (None, mapped["table"][mig]["mig_uuid"])
    )
    assert run(mapped, "prolog", SLURM_JOB_ID="45", SLURM_JOB_GPUS=str(other)).returncode == 0
    assert listing(mapped["map"])[mig_gpu] == ["42", "45"] and listing(mapped["map"])[gi_of(mapped, other)] == ["45"]
    assert run(mapped, "epilog", SLURM_JOB_GPUS=str(mig)).returncode == 0
    assert listing(mapped["map"])[mig_gpu] == ["45"] and gi_of(mapped, mig) not in listing(mapped["map"])
    assert run(mapped, "epilog", SLURM_JOB_ID="45", SLURM_JOB_GPUS=str(other)).returncode == 0
    assert run(mapped, "epilog", SLURM_JOB_ID="44", SLURM_JOB_GPUS=str(shared)).returncode == 0
    assert listing(mapped["map"]) == {}  # empty files are removed
    assert stats(mapped) == {}  # nothing failed


def test_shard_jobs_starting_together_all_get_listed(mapped: dict):
    shared = index_of(mapped, "shared")
    jobs = [str(100 + k) for k in range(8)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "slurm_gpupool.hooks.prolog"],
            env=hook_env(mapped, SLURM_JOB_ID=j, SLURM_JOB_GPUS=str(shared)),
            stderr=subprocess.PIPE,
        )
        for j in jobs
    ]
    for p in procs:
        assert p.wait(timeout=60) == 0
    assert listing(mapped["map"]) == {str(mapped["table"][shared]["gpu"]): jobs}


def test_a_job_whose_epilog_never_ran_is_dropped_at_the_next_write(mapped: dict):
    mig = index_of(mapped, "mig", "1g.10gb")
    key = gi_of(mapped, mig)
    mapped["map"].mkdir(parents=True)
    (mapped["map"] / key).write_text("17\nnot-a-job\n")  # job 17: slurmd died, no Epilog
    assert run(mapped, "prolog", SLURM_JOB_GPUS=str(mig)).returncode == 0
    assert listing(mapped["map"]) == {key: ["42"], key.split(".")[0]: ["42"]}


def test_a_symlinked_mapping_directory_is_refused_and_the_job_goes_on(mapped: dict, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    mapped["map"].parent.mkdir(parents=True)
    mapped["map"].symlink_to(elsewhere)
    res = run(mapped, "prolog", SLURM_JOB_GPUS=str(index_of(mapped, "mig", "1g.10gb")))
    assert res.returncode == 0 and "DCGM job mapping not written" in res.stderr
    assert list(elsewhere.iterdir()) == []
    assert (mapped["root"] / "spool" / NODE / "jobs" / "42.json").exists()  # the rest of the Prolog ran
    assert stats(mapped)["hook_failures"] == {"prolog": 1}


def test_failures_and_health_drains_are_counted(site: dict):  # noqa: F811
    (site["state"] / "node-state.json").write_text("{not json")
    for hook in ("prolog", "prolog", "epilog"):
        assert run(site, hook, SLURM_JOB_GPUS="0").returncode == 0
    assert stats(site)["hook_failures"] == {"prolog": 2, "epilog": 1}


def test_health_drains_are_counted_by_hook(site: dict):  # noqa: F811
    inject.add_ecc_errors(SimStore(site["sim"] / f"{NODE}.json"), 6, uncorrected=1)
    i = next(d["index"] for d in site["table"] if d["gpu"] == 6)
    assert run(site, "prolog", SLURM_JOB_GPUS=str(i)).returncode == 1
    assert run(site, "epilog", SLURM_JOB_GPUS=str(i)).returncode == 1
    st = stats(site)
    assert st["health_drains"] == {"prolog": 1, "epilog": 1} and "hook_failures" not in st
    assert os.stat(site["state"] / "hook-stats.json").st_mode & 0o777 == 0o644


def test_device_keys_name_whole_gpus_mig_instances_and_shared_gpus_once():
    state = {"gpus": [{"index": 3, "instances": [{"uuid": "MIG-a", "gi_id": 5}, {"uuid": "MIG-b", "gi_id": 1}]}]}
    devices = [
        {"index": 0, "gpu": 3, "mig_uuid": "MIG-b"},
        {"index": 1, "gpu": 3, "mig_uuid": "MIG-a"},
        {"index": 2, "gpu": 0},
        {"index": 3, "gpu": 0},  # two shards' worth of one shared GPU: one file
    ]
    assert device_keys(state, devices) == ["3.1", "3", "3.5", "0"]  # a MIG job is in its GPU's file too
    with pytest.raises(HookError, match="not in the node state"):
        device_keys(state, [{"index": 0, "gpu": 3, "mig_uuid": "MIG-gone"}])


@pytest.mark.parametrize("name", ["gpu", "lock"])
def test_a_fifo_in_the_mapping_directory_blocks_no_hook(mapped: dict, name: str):
    """A FIFO where a mapping file (or the lock) goes: opening it for reading waited for a
    writer forever, with the lock held (#26 item 17).  Now it is opened non-blocking and
    refused as not a regular file: the hook fails open at once, and the next job's runs."""
    shared = index_of(mapped, "shared")
    gpu = str(mapped["table"][shared]["gpu"])
    mapped["map"].mkdir(parents=True)
    os.mkfifo(mapped["map"] / (gpu if name == "gpu" else f".gpupool.{gpu}.lock"))
    res = run(mapped, "prolog", SLURM_JOB_GPUS=str(shared))  # (run's timeout: 60 s)
    assert res.returncode == 0 and "not a regular file" in res.stderr, res.stderr
    assert (mapped["root"] / "spool" / NODE / "jobs" / "42.json").exists()  # the rest of the Prolog ran
    assert stats(mapped)["hook_failures"] == {"prolog": 1}
    assert run(mapped, "epilog", SLURM_JOB_GPUS=str(shared)).returncode == 0


def test_mapping_files_are_replaced_without_an_fsync_and_job_records_with_one(monkeypatch, tmp_path: Path):
    """The mapping is written under the node's lock by every Prolog and Epilog: no fsync there
    (bench_hook_burst: hooks waited over the lock's 2 s); a job record is still made durable."""
    from slurm_gpupool.hooks import jobmap, runtime

    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    d, run_dir = tmp_path / "map", tmp_path / "run"
    d.mkdir()
    run_dir.mkdir()
    (run_dir / "7.devices").write_text("[]")
    jobmap.add_job(str(d), ["3.1", "3"], "7", str(run_dir))
    jobmap.add_job(str(d), ["3"], "8", str(run_dir))  # job 8 has no .devices: not alive, yet just added
    assert listing(d) == {"3": ["7", "8"], "3.1": ["7"]}
    assert synced == []
    fd = runtime.open_dir(str(tmp_path))
    try:
        runtime.write_in_dir(fd, "7.json", b"{}\n")
    finally:
        os.close(fd)
    assert len(synced) == 1 and ".7.json." in synced[0]
    assert (tmp_path / "7.json").read_text() == "{}\n"


def test_an_epilog_edits_only_its_own_jobs_files_and_all_of_them_without_the_node_state(mapped: dict):
    """#29: under a burst (40 jobs starting on one node) every Epilog read every GPU's file
    under the node's lock, and hooks waiting for it past its 2 s lost their jobs' labels.
    The Epilog now edits the files its Prolog wrote, named from the node state; another
    GPU's file is not even read (its stale job 17 stays until that file is next written).
    Without a readable node state it still clears the job from every file."""
    mig, shared = index_of(mapped, "mig", "3g.40gb"), index_of(mapped, "shared")
    assert run(mapped, "prolog", SLURM_JOB_GPUS=str(mig)).returncode == 0
    assert run(mapped, "prolog", SLURM_JOB_ID="43", SLURM_JOB_GPUS=str(shared)).returncode == 0
    other = str(mapped["table"][shared]["gpu"])
    (mapped["map"] / other).write_text("17\n43\n")  # job 17: slurmd died, no Epilog, no .devices
    before = (mapped["map"] / other).stat().st_ino
    assert run(mapped, "epilog", SLURM_JOB_GPUS=str(mig)).returncode == 0
    assert listing(mapped["map"]) == {other: ["17", "43"]}  # job 42's files gone, the other untouched
    assert (mapped["map"] / other).stat().st_ino == before
    # without the node state: the job is taken out of every file (and the stale 17 with it)
    assert run(mapped, "prolog", SLURM_JOB_ID="44", SLURM_JOB_GPUS=str(mig)).returncode == 0
    (mapped["state"] / "node-state.json").write_text("{not json")
    assert run(mapped, "epilog", SLURM_JOB_ID="44", SLURM_JOB_GPUS=str(mig)).returncode == 0
    assert listing(mapped["map"]) == {other: ["43"]}


def test_no_hook_waits_for_a_gpus_lock_the_holder_lists_every_job_that_came_meanwhile(monkeypatch, tmp_path: Path):
    """#29: under a burst (40 jobs starting on one node, two cores) hooks waited for a lock whose
    holder got no CPU, and those past 2 s lost their job's label.  Now a hook states its edit
    and goes: while a hook is stuck inside GPU 3's lock, a job on GPU 5 is listed at once, a
    job on GPU 3 returns at once too (before: HookError after the wait), and the stuck hook
    lists it before it lets go; no intent is left behind."""
    import threading
    import time

    from slurm_gpupool.hooks import jobmap

    d, run_dir = tmp_path / "map", tmp_path / "run"
    d.mkdir()
    run_dir.mkdir()
    for job in ("7", "8", "9"):  # running: their Prologs wrote these first
        (run_dir / f"{job}.devices").write_text("[]")
    inside, go_on = threading.Event(), threading.Event()
    real_read = jobmap.read_jobs

    def slow_read(dir_fd: int, key: str) -> list[str]:
        if key == "3":
            inside.set()
            go_on.wait(30)
        return real_read(dir_fd, key)

    monkeypatch.setattr(jobmap, "read_jobs", slow_read)
    failed: list[BaseException] = []

    def stuck() -> None:
        try:
            jobmap.add_job(str(d), ["3.1", "3"], "7", str(run_dir))
        except BaseException as e:  # reported below
            failed.append(e)

    t = threading.Thread(target=stuck)
    t.start()
    try:
        assert inside.wait(10)
        jobmap.add_job(str(d), ["5"], "8", str(run_dir))
        assert listing(d)["5"] == ["8"]
        t0 = time.monotonic()
        jobmap.add_job(str(d), ["3.2", "3"], "9", str(run_dir))  # before: HookError after the lock's 2 s
        assert time.monotonic() - t0 < 1.0
        assert listing(d) == {"5": ["8"]}  # not yet: the holder has it
        fd = os.open(d, os.O_RDONLY)
        try:
            assert [(job, add) for _, _, job, add in jobmap.pending(fd, "3")] == [("7", True), ("9", True)]
        finally:
            os.close(fd)
    finally:
        go_on.set()
        t.join(30)
    assert not t.is_alive()
    assert failed == []
    assert listing(d) == {"3": ["7", "9"], "3.1": ["7"], "3.2": ["9"], "5": ["8"]}
    assert sorted(p.name for p in d.iterdir() if p.name.startswith(".")) == [".gpupool.3.lock", ".gpupool.5.lock"]


def test_a_busy_gpu_does_not_stop_the_others_and_the_next_hook_on_it_applies_the_left_intent(tmp_path: Path):
    """A lock held by something that is not a hook (or a hook killed in between) applies no
    intent: the Epilog still clears the job's other GPUs at once and succeeds; GPU 3's edit
    waits in its intent, and the next hook on GPU 3 applies it before its own, in order."""
    import fcntl

    from slurm_gpupool.hooks import jobmap

    d, run_dir = tmp_path / "map", tmp_path / "run"
    d.mkdir()
    run_dir.mkdir()
    for key in ("3", "3.1", "5", "6"):
        (d / key).write_text("7\n")
    (run_dir / "7.devices").write_text("[]")
    with open(d / jobmap.lock_name("3"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        jobmap.remove_job(str(d), "7", str(run_dir), ["3.1", "3", "5", "6"])
    assert listing(d) == {"3": ["7"], "3.1": ["7"]}  # GPUs 5 and 6 cleared, GPU 3's edit pending
    fd = os.open(d, os.O_RDONLY)
    try:
        assert [(job, add) for _, _, job, add in jobmap.pending(fd)] == [("7", False)]
        (run_dir / "8.devices").write_text("[]")
        jobmap.add_job(str(d), ["3"], "8", str(run_dir))
        assert listing(d) == {"3": ["8"]}
        assert jobmap.pending(fd) == []
    finally:
        os.close(fd)


def test_many_hooks_on_one_gpu_at_once_leave_exactly_the_running_jobs_and_no_intent(tmp_path: Path):
    """The hand-over under real contention: 8 processes start 12 jobs each on one GPU's two
    files and end two thirds of them, as Prologs and Epilogs do (``.devices`` written first,
    removed after); at the end the files list exactly the jobs still running, and every
    intent was applied by someone."""
    from slurm_gpupool.hooks import jobmap

    d, run_dir = tmp_path / "map", tmp_path / "run"
    d.mkdir()
    run_dir.mkdir()
    pids = []
    for p in range(8):
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            code = 0
            try:
                for n in range(12):
                    job = str(1000 + 12 * p + n)
                    (run_dir / f"{job}.devices").write_text("[]")
                    jobmap.add_job(str(d), ["0.1", "0"], job, str(run_dir))
                    if n % 3:
                        jobmap.remove_job(str(d), job, str(run_dir), ["0.1", "0"])
                        (run_dir / f"{job}.devices").unlink()
            except BaseException:
                code = 1
            os._exit(code)
        pids.append(pid)
    assert all(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 for pid in pids)
    running = sorted((str(1000 + 12 * p + n) for p in range(8) for n in range(0, 12, 3)), key=int)
    assert listing(d) == {"0": running, "0.1": running}
    fd = os.open(d, os.O_RDONLY)
    try:
        assert jobmap.pending(fd) == []
    finally:
        os.close(fd)


def test_a_fifo_or_a_vanished_file_among_the_intents_is_dropped_and_the_others_applied(monkeypatch, tmp_path: Path):
    """A FIFO under an intent's name would block its reader forever, lock held; an intent whose
    file vanished must not read as "every file of the GPU".  Both are dropped; the rest is applied."""
    from slurm_gpupool.hooks import jobmap

    d, run_dir = tmp_path / "map", tmp_path / "run"
    d.mkdir()
    run_dir.mkdir()
    (d / "2").write_text("5\n")
    (run_dir / "5.devices").write_text("[]")
    os.mkfifo(d / ".gpupool.2.1.5.del")
    jobmap.add_job(str(d), ["2"], "6", str(run_dir))
    assert listing(d) == {"2": ["5", "6"]}  # the FIFO's "del" of job 5 applied nothing
    assert not (d / ".gpupool.2.1.5.del").exists()
    fd = os.open(d, os.O_RDONLY)
    try:
        real = jobmap._intents  # an intent listed, then gone before it is read
        monkeypatch.setattr(
            jobmap, "_intents", lambda names, gpu: [(0, ".gpupool.2.0.6.del", "6", False), *real(names, gpu)]
        )
        jobmap._apply(fd, "2", str(run_dir))
        assert listing(d) == {"2": ["5", "6"]}
    finally:
        os.close(fd)


def test_a_requeued_jobs_edits_apply_in_order_and_a_gpus_failure_stops_no_other(tmp_path: Path):
    """A requeued job keeps its id: its Prolog, Epilog and second Prolog may all be pending
    at one holder, and apply in their order (listed).  An "add" whose keys are gone (an
    empty file) is dropped, not taken for "every file".  A FIFO among GPU 1's files fails
    that GPU's edit; the hook's GPU 2 is still edited, and the hook fails naming GPU 1."""
    import pytest

    from slurm_gpupool.hooks import jobmap

    d, run_dir = tmp_path / "map", tmp_path / "run"
    d.mkdir()
    run_dir.mkdir()
    (run_dir / "7.devices").write_text("[]")
    (d / "0.1").write_text("")
    for stamp, op in ((1, "add"), (2, "del"), (3, "add")):
        (d / f".gpupool.0.{stamp}.7.{op}").write_text("0\n")
    (d / ".gpupool.0.4.9.add").write_text("")
    jobmap.add_job(str(d), ["0"], "8", str(run_dir))
    assert listing(d) == {"0": ["7", "8"], "0.1": []}
    os.mkfifo(d / "1")
    with pytest.raises(HookError, match=r"^GPU 1: mapping file 1: not a regular file"):
        jobmap.add_job(str(d), ["1", "2"], "8", str(run_dir))
    assert (d / "2").read_text() == "8\n"  # (not listing(): it would open the FIFO)
