"""The real slurmd and slurmctld accept what `gpupool gres` renders, and jobs get what it says.

* every golden case (machine × layout kind × MIG file mode) parses with ``slurmd -G``
  into exactly the records we wrote;
* the sandbox, switched to the day layout, registers exactly the GRES of nodes.conf;
* jobs for every GRES type run, and the index Slurm gives a MIG job is the record whose
  device files belong to an instance of that profile on that node;
* N one-shard jobs share a GPU time-sliced into N, and the next one waits;
* whole-GPU jobs and shard jobs never share a GPU;
* sacct records typed usage for typed requests;
* the planned render of the night layout equals the live render after applying it.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import pytest

from slurm_gpupool.controller.gres_install import render
from slurm_gpupool.sandbox import devices
from tests.unit.test_gres import ALL_CASES, case_config, golden_name

from .repartition_support import SLURM_WAIT_S, Gate, job_files, state_after_scheduling, text_of, wait_until

pytestmark = pytest.mark.integration

NODES = ["a100n1", "a100n2", "h100n1", "a30n1", "v100n1"]


def records(gres_text: str, node: str) -> list[dict[str, str]]:
    """Our gres.conf lines for a node (NodeName may be a hostlist), as key=value dicts."""
    from ClusterShell.NodeSet import NodeSet

    out = []
    for line in gres_text.splitlines():
        if not line.startswith("NodeName="):
            continue
        fields = dict(kv.split("=", 1) for kv in line.split())
        if node in NodeSet(fields.pop("NodeName")):
            out.append(fields)
    return out


def slurmd_g(sandbox, conf: Path, node: str) -> list[dict[str, str]]:
    out = sandbox.run(["slurmd", "-G", "-N", node, "-f", str(conf)], check=False)
    lines = [x for x in (out.stdout + out.stderr).splitlines() if "Gres Name=" in x]
    assert lines, out.stderr
    parsed = []
    for line in lines:
        fields = dict(kv.split("=", 1) for kv in line.split("Gres ", 1)[1].split() if "=" in kv)
        parsed.append(fields)
    return parsed


@pytest.mark.parametrize("machine,variant,mig_files", ALL_CASES, ids=[golden_name(*c) for c in ALL_CASES])
def test_slurmd_parses_every_rendered_case(sandbox, tmp_path: Path, machine: str, variant: str, mig_files: str):
    cfg = case_config(machine, variant, mig_files)
    dev = tmp_path / "dev"
    raw = dict(cfg.raw)
    raw["slurm"] = {**raw["slurm"], "dev_root": str(dev), "config_dir": str(tmp_path)}
    from slurm_gpupool.config.load import parse_config

    cfg = parse_config(raw, cfg.source, Path("."))
    r = render(cfg, cfg.all_nodes(), variant, mig_ids="simulated")
    machine_spec = cfg.nodesets["n"].machine
    devices.ensure_char_devices(dev, devices.device_plan(g.minor for g in machine_spec.gpus))
    (tmp_path / "gres.conf").write_text(r["gres.conf"])
    (tmp_path / "nodes.conf").write_text(r["nodes.conf"])
    (tmp_path / "slurm.conf").write_text(
        "ClusterName=gresparse\nSlurmctldHost=localhost\nSlurmdParameters=config_overrides\n"
        # slurmd -G asks munge for a credential from 24.11 on: the sandbox's munged
        f"AuthType=auth/munge\nAuthInfo=socket={sandbox.root / 'munge' / 'munge.socket'}\n"
        f"SlurmdSpoolDir={tmp_path}/spool\nSlurmdLogFile={tmp_path}/slurmd.log\n"
        + "\n".join(x for x in r["gres-types.conf"].splitlines() if x.startswith("GresTypes"))
        + f"\nInclude {tmp_path}/nodes.conf\nPartitionName=p Nodes=ALL\n"
    )
    got = slurmd_g(sandbox, tmp_path / "slurm.conf", "node01")
    ours = records(r["gres.conf"], "node01")
    gpu_recs = [(rec["Type"], rec.get("File") or rec["MultipleFiles"]) for rec in ours if rec["Name"] == "gpu"]
    if sandbox.slurm_version >= (24, 11, 0):  # one line per record, its files as we wrote them
        want_gpu = Counter(gpu_recs)
    else:  # 22.05: one line per file of every gpu record, with its type
        want_gpu = Counter((t, f) for t, files in gpu_recs for f in files.split(","))
    got_gpu = Counter((g["Type"], g["File"]) for g in got if g["Name"] == "gpu")
    assert got_gpu == want_gpu
    want_shard = sorted((rec["File"], rec["Count"]) for rec in ours if rec["Name"] == "shard")
    got_shard = sorted((g["File"], g["Count"]) for g in got if g["Name"] == "shard" and g["Count"] != "0")
    assert got_shard == want_shard


# -- the sandbox in its day layout -------------------------------------------------------


@pytest.fixture(scope="module")
def day(_sandbox_session):
    sb = _sandbox_session.ready()
    sb.switch("day")
    yield sb
    sb.switch("night")


def cfg_tres(sandbox, node: str) -> dict[str, int]:
    out = sandbox.run(["scontrol", "-o", "show", "node", node]).stdout
    tres = re.search(r"CfgTRES=(\S+)", out).group(1)
    return {k: int(v) for k, v in (t.split("=", 1) for t in tres.split(",")) if k.startswith("gres/")}


def installed(sandbox, name: str) -> str:
    return (sandbox.root / "etc" / name).read_text()


def expected_tres(nodes_conf: str, node: str) -> dict[str, int]:
    from ClusterShell.NodeSet import NodeSet

    for line in nodes_conf.splitlines():
        if line.startswith("NodeName=") and node in NodeSet(line.split()[0].split("=", 1)[1]):
            gres = re.search(r"Gres=(\S+)", line).group(1)
            out: dict[str, int] = {}
            for item in gres.split(","):
                parts = item.split(":")
                out[f"gres/{parts[0]}"] = out.get(f"gres/{parts[0]}", 0) + int(parts[-1])
                if len(parts) == 3:
                    out[f"gres/{parts[0]}:{parts[1]}"] = int(parts[2])
            return out
    raise AssertionError(f"{node} not in nodes.conf")


def test_slurm_reads_every_hostlist_we_write(sandbox):
    """``Nodes=``, ``-w`` and NodeName get hostlists folded only where Slurm reads them:
    ClusterShell's ``a[30,100]n1`` made slurmctld refuse a reservation update."""
    from slurm_gpupool.core.gres.hostlist import slurm_hostlist

    names = ["a100n1", "a100n2", "a30n1", "h100n1", "n1-ib", "n2-ib", "gpu01", "gpu02", "gpu10", "login", "7"]
    text = slurm_hostlist(names)
    out = sandbox.run(["scontrol", "show", "hostnames", text])
    assert sorted(out.stdout.split()) == sorted(names), (text, out.stderr)


def test_cluster_registers_exactly_the_rendered_gres(day):
    nodes_conf = installed(day, "nodes.conf")
    for n in NODES:
        assert cfg_tres(day, n) == expected_tres(nodes_conf, n), n
    state = day.run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout.split()
    assert all(s in ("idle", "mixed") for s in state[1::2]), state


def job_gpus(sandbox, node: str, gres: str) -> list[int]:
    out = sandbox.run(["srun", "-w", node, f"--gres={gres}", "printenv", "SLURM_STEP_GPUS"]).stdout
    return [int(x) for x in out.strip().split(",")]


@pytest.mark.parametrize("node", NODES)
def test_jobs_for_every_gres_type_get_their_own_record(day, node: str):
    state = day.node_state(node)
    gpu_recs = [r for r in records(installed(day, "gres.conf"), node) if r["Name"] == "gpu"]
    ci_caps = {}  # CI cap file -> (profile, GPU index)
    for g in state["gpus"]:
        for inst in g["instances"]:
            ci_caps[inst["device_files"][2]] = (inst["profile"], g["index"])
    # (time-sliced GPUs' own type is refused at submission: shard:1 below reaches their records)
    for t in sorted({r["Type"] for r in gpu_recs if not r["Type"].endswith("_shared")}):
        (idx,) = job_gpus(day, node, f"gpu:{t}:1")
        rec = gpu_recs[idx]
        assert rec["Type"] == t, (node, t, idx)
        files = (rec.get("File") or rec["MultipleFiles"]).split(",")
        if "nvidia-caps" in files[-1]:  # a MIG device: its CI cap belongs to an instance of that profile
            assert ci_caps[files[-1]][0] == t
    if any(r["Name"] == "shard" for r in records(installed(day, "gres.conf"), node)):
        (idx,) = job_gpus(day, node, "shard:1")
        assert gpu_recs[idx]["Type"].endswith("_shared")


def squeue_state(sandbox, job: str) -> str:
    return sandbox.run(["squeue", "-h", "-j", job, "-o", "%T"], check=False).stdout.strip()


def wait_running(sandbox, jobs: list[str], timeout: float = SLURM_WAIT_S) -> None:
    try:
        wait_until(lambda: all(squeue_state(sandbox, j) == "RUNNING" for j in jobs), "jobs to run", timeout)
    except AssertionError as e:
        states = {j: squeue_state(sandbox, j) for j in jobs}
        raise AssertionError(f"{e}: {states}") from None


def sbatch(sandbox, *args: str) -> str:
    return sandbox.run(["sbatch", "--parsable", *args]).stdout.strip().split(";")[0]


def test_n_shard_jobs_share_a_gpu_and_the_next_waits(day, tmp_path: Path):
    # v100n1 by day: GPUs 0-3 time-sliced into 4 shares each (16 shards); each job holds its
    # shard until the test is done with it
    gate = Gate(tmp_path, "shards")
    outs = [tmp_path / f"s{k}.out" for k in range(16)]
    jobs = [
        sbatch(
            day,
            "-w",
            "v100n1",
            "--gres=shard:1",
            *job_files(out),
            "--wrap",
            f"echo gpus=$SLURM_JOB_GPUS; {gate.wrap()}",
        )
        for out in outs
    ]
    try:
        wait_running(day, jobs)
        # RUNNING comes before the batch step writes its output
        wait_until(lambda: all_job_gpus(outs), "the jobs' output")
        # Slurm's own note to a job, as a loaded machine gets one ("Prolog hung on node v100n1"
        # once a Prolog outlasts MessageTimeout - 2 s: a CI run on 26.05 counted it as a GPU)
        # goes to its stderr; sent again while it has not arrived (one try, no retry, on 22.05)
        note = Note(day, jobs[0], Path(f"{outs[0]}.err"))
        wait_until(note.arrived, "Slurm's note in the job's stderr")
        gpus = Counter(wait_until(lambda: all_job_gpus(outs), "the jobs' output"))
        what = {o.name: (o.read_text(), text_of(Path(f"{o}.err"))) for o in outs}
        assert sorted(gpus.values()) == [4, 4, 4, 4] and len(gpus) == 4, what  # four jobs on each shared GPU
        extra = sbatch(day, "-w", "v100n1", "--gres=shard:1", "--wrap", "true")
        state, reason = state_after_scheduling(day, extra)  # both schedulers passed it over
        assert state == "PENDING", (state, reason)
        day.run(["scancel", extra])
    finally:
        day.run(["scancel", *jobs], check=False)


def all_job_gpus(outs: list[Path]) -> list[str] | None:
    """Each job's ``gpus=`` line (its SLURM_JOB_GPUS), once every job has printed it."""
    found = []
    for out in outs:
        lines = text_of(out).splitlines()
        gpus = next((line.removeprefix("gpus=") for line in lines if line.startswith("gpus=")), None)
        if not gpus:
            return None
        found.append(gpus)
    return found


class Note:
    """A note sent to a running job (``scontrol notify``), as Slurm sends its own, and
    sent again every 10 s until it is in the job's stderr file."""

    TEXT = "Prolog hung on node v100n1 (scontrol notify)"

    def __init__(self, sandbox, job: str, err: Path) -> None:
        self.sandbox, self.job, self.err, self.sent = sandbox, job, err, -1e9

    def arrived(self) -> bool:
        if self.TEXT in text_of(self.err):
            return True
        if time.monotonic() - self.sent >= 10:
            self.sandbox.run(["scontrol", "notify", self.job, self.TEXT], check=False)
            self.sent = time.monotonic()
        return False


def test_untyped_requests_and_shard_jobs_per_release(day):
    """What Slurm itself does with an untyped request beside shard jobs (``untyped_gpus:
    leave``), measured: 22.05 never lets the two share a GPU; 24.11 and 26.05 start the
    untyped job on the GPU a shard job is using, and a shard job on a GPU the untyped job
    holds.  Typed requests never consider time-sliced GPUs on any release."""
    shares_gpus = day.slurm_version >= (24, 11, 0)
    with day.submit_rules(untyped_gpus="leave"):
        expected = "RUNNING" if shares_gpus else "PENDING"

        def typed_step_avoids_the_shared_gpus() -> None:  # while the shard job runs
            assert job_gpus(day, "v100n1", "gpu:v100:4") == [4, 5, 6, 7]

        assert second_job_state(day, "--gres=shard:1", "--gres=gpu:8", typed_step_avoids_the_shared_gpus) == expected
        assert second_job_state(day, "--gres=gpu:8", "--gres=shard:1") == expected


def second_job_state(day, first: str, second: str, meanwhile=None) -> str:
    """The state of a job asking for ``second`` on v100n1 while one asking for ``first`` runs
    (``meanwhile`` is called then, after the second is cancelled)."""
    running = sbatch(day, "-w", "v100n1", first, "--wrap", "sleep 3600")  # until cancelled below
    try:
        wait_running(day, [running])
        other = sbatch(day, "-w", "v100n1", second, "--wrap", "sleep 3600")
        state, _ = state_after_scheduling(day, other)  # running, or passed over by both schedulers
        day.run(["scancel", other])
        if meanwhile is not None:
            meanwhile()
        return state
    finally:
        day.run(["scancel", running], check=False)


def test_untyped_and_shared_type_requests_are_refused_or_typed_by_default(day):
    """``untyped_gpus: auto`` (the default): job_submit.lua and the wrapper refuse an untyped
    request that could land on a shared GPU or a MIG slice, type one that can mean one
    whole-GPU type, and refuse the time-sliced GPUs' own type: on every release."""
    from .test_submit_slurm import wrapper

    for argv in (["--gres=gpu:8"], ["--gpus=2"], ["--gres=gpu:v100_shared:1"]):
        lua = day.run(["sbatch", "-w", "v100n1", *argv, "--wrap", "true"], check=False)
        assert lua.returncode != 0 and "gpupool:" in lua.stderr, (argv, lua.stderr)
        ours = day.run([wrapper(), "-w", "v100n1", *argv, "--wrap", "true"], check=False)
        assert ours.returncode == 2 and "Traceback" not in ours.stderr, (argv, ours.stderr)
    job = sbatch(day, "--hold", "-C", "v100", "--gres=gpu:2", "--wrap", "true")
    try:
        rec = day.run(["scontrol", "-o", "show", "job", job]).stdout
        assert f"TresPerNode={day.tres('gpu:v100:2')}" in rec and "Features=v100&nvlink2" in rec
    finally:
        day.run(["scancel", job], check=False)


def test_sacct_records_typed_usage(day, tmp_path: Path):
    job = sbatch(day, "--wait", "-w", "h100n1", "--gres=gpu:3g.40gb:1", "--wrap", "true")

    def alloc_tres() -> str:  # slurmctld sends accounting to slurmdbd asynchronously
        tres = day.run(["sacct", "-X", "-n", "-P", "-j", job, "-o", "AllocTRES"]).stdout.strip()
        return tres if "gres/gpu" in tres else ""

    items = wait_until(alloc_tres, "the job's accounting").split(",")
    assert "gres/gpu:3g.40gb=1" in items and "gres/gpu=1" in items


def test_planned_night_equals_live_night(_sandbox_session, day):
    """Run last in this module: switch to night, then compare the two renders."""
    sb = _sandbox_session
    sb.switch("night")
    planned = sb.gpupool("gres", "render", "--planned", "night").stdout
    live = sb.gpupool("gres", "render", "--live").stdout

    def strip(text: str) -> str:
        return "\n".join(x for x in text.splitlines() if not x.startswith("# source:"))

    assert strip(planned) == strip(live)
    assert "layout_night" in live and "MultipleFiles=" not in live and "nvidia-caps" not in live
