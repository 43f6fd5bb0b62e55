"""gpupool-sbatch and job_submit.lua against the real slurmctld.

* 30 sbatch invocations, plain to exotic, give the same job with and without the
  wrapper (``scontrol show job`` fields and the stored batch script);
* friendly requests land on the intended GRES and node; a night-only request by
  day is reported with its start time; impossible ones exit 2;
* on a cluster mixing a DGX-1 and NVSwitch nodes, N NVLink-connected GPUs go only
  where N are connected;
* job_submit.lua rewrites the same requests to the same GRES as the wrapper.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

WITH_JOB_IDS = {"StdOut", "StdErr", "StdIn", "Dependency", "Comment"}
IGNORED = {
    "JobId",
    "ArrayJobId",
    "SubmitTime",
    "EligibleTime",
    "AccrueTime",
    "StartTime",
    "EndTime",
    "LastSchedEval",
    "Priority",
    "Reason",
    "HetJobId",
    "HetJobIdSet",
    "HetJobOffset",
    "Deadline",
    "SuspendTime",
    "PreemptEligibleTime",
    "PreemptTime",
    "RunTime",
    "TimeLeft",
    "BatchHost",
    "NodeList",
    "SchedNodeList",
    "Dependency",
    "SubmitLine",  # compared on its own below
}


def wrapper() -> str:
    return shutil.which("gpupool-sbatch") or f"{Path(sys.executable).parent}/gpupool-sbatch"


def show(sandbox, job: str) -> list[dict[str, str]]:
    """``scontrol -o show job``: one dict per record (array tasks, het components)."""
    out = sandbox.run(["scontrol", "-o", "show", "job", job]).stdout
    line = submit_line(sandbox, job)
    if line is not None:  # a command line with options, spaces and newlines of its own
        out = out.replace(f"SubmitLine={line}", "")
    ids = {str(int(job) + k): f"<id+{k}>" for k in range(3, 0, -1)} | {job: "<id>"}  # het components

    def norm(v: str) -> str:
        # in a file's name only: a directory such as the checkout's may hold a number
        # that equals one of the ids (a worktree named h-a26 and job 26)
        head, slash, name = v.rpartition("/")
        return head + slash + re.sub(r"\d+", lambda m: ids.get(m.group(0), m.group(0)), name)

    recs = []
    for line in out.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        # only fields that can carry a job id; elsewhere a number such as a session id or
        # 1024 (MiB) may equal job+1 by chance
        recs.append({k: norm(v) if k in WITH_JOB_IDS else v for k, v in fields.items() if k not in IGNORED})
    return recs


def script_of(sandbox, job: str) -> str:
    return sandbox.run(["scontrol", "write", "batch_script", job, "-"]).stdout


def submit(sandbox, program: str, args: list[str], stdin: str | None = None, tmp: Path | None = None):
    proc = (
        sandbox.run([program, "--parsable", "--hold", *args], check=False, env={**sandbox.env})
        if stdin is None
        else None
    )
    if stdin is not None:
        import subprocess

        proc = subprocess.run(
            [program, "--parsable", "--hold", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=sandbox.env,
            timeout=300,  # a hang, not a measure
        )
    return proc


SCRIPT = "#!/bin/bash\n#SBATCH -J fromscript\n#SBATCH -t 10\n#SBATCH --comment='from the script'\necho \"$@\"\n"
HET = "#!/bin/bash\n#SBATCH -n1\n#SBATCH hetjob\n#SBATCH -n2\nsrun true\n"


# The sbatch arguments the wrapper runs where it changes a request (after --parsable --hold:
# options it adds come first, options it edits stay where the user put them)
REWRITTEN = {
    "untyped gres, typed by its constraint": [
        "--parsable",
        "--hold",
        "-C",
        "a100",
        "--gres=gpu:a100:1",
        "--wrap",
        "true",
    ],
    "typed multi-GPU": ["--constraint=nvlink2", "--parsable", "--hold", "--gres=gpu:a100:2", "--wrap", "true"],
    "untyped gpus, typed by its constraint": [
        *("--parsable", "--hold", "--constraint=v100&nvlink2", "--gpus=v100:2", "--wrap", "true"),
    ],
}


def submit_line(sandbox, job: str) -> str | None:
    """``SubmitLine``, where the release records it (from 23.02; 26.05 shows it as typed)."""
    jobs = json.loads(sandbox.run(["squeue", "--json", "--states=all", "-j", job]).stdout)["jobs"]
    return jobs[0].get("submit_line") if jobs else None


def cases(tmp: Path) -> list[tuple[str, list[str], str | None]]:
    script = tmp / "job.sh"
    script.write_text(SCRIPT)
    het = tmp / "het.sh"
    het.write_text(HET)
    w = "--wrap"
    return [
        ("wrap", [w, "true"], None),
        ("job name with spaces", ["-J", "name with  spaces", w, "echo hi"], None),
        ("quotes", [w, "echo 'single' \"double\" $HOME `date` \\ back"], None),
        ("newlines", [w, "echo one\necho two\n\necho three"], None),
        ("nodes and tasks", ["-N", "2", "-n", "4", w, "true"], None),
        ("array", ["--array=1-3", w, "true"], None),
        ("array with limit", ["--array=0-9%2", w, "true"], None),
        ("script file", [str(script)], None),
        ("script with args", [str(script), "arg one", "two\nlines", "--gpu-mem=8G"], None),
        ("CLI overrides #SBATCH", ["-J", "from cli", "-t", "5", str(script)], None),
        ("stdin script", [], "#!/bin/bash\necho from stdin\n"),
        ("stdin with directives", [], SCRIPT),
        ("untyped gres, typed by its constraint", ["-C", "a100", "--gres=gpu:1", w, "true"], None),
        ("typed multi-GPU", ["--gres=gpu:a100:2", w, "true"], None),
        ("untyped gpus, typed by its constraint", ["-C", "v100", "--gpus=2", w, "true"], None),
        ("constraint", ["-C", "nvswitch", "--gres=gpu:a100:1", w, "true"], None),
        ("het job on the CLI", ["-n1", ":", "-n2", str(het)], None),
        ("het job in the script", [str(het)], None),
        ("export", ["--export=ALL,FOO=bar baz", w, "true"], None),
        ("memory and time", ["--mem=2G", "--time=00:10:00", w, "true"], None),
        ("output patterns", ["-o", str(tmp / "x-%j.out"), "-e", str(tmp / "x-%j.err"), w, "true"], None),
        ("comment with symbols", ["--comment", "a;b | c & d > e", w, "true"], None),
        ("dependency", ["--dependency=singleton", "-J", "single", w, "true"], None),
        ("begin", ["--begin=now+1hour", w, "true"], None),
        ("chdir", ["--chdir=/tmp", w, "pwd"], None),
        ("exclusive", ["--exclusive", w, "true"], None),
        ("nice", ["--nice=10", w, "true"], None),
        ("requeue", ["--requeue", w, "true"], None),
        ("short option cluster", ["-N1", "-n1", "-c2", w, "true"], None),
        ("double dash", ["-J", "dd", "--", str(script), "x"], None),
    ]


def test_thirty_invocations_give_the_same_job_with_and_without_the_wrapper(sandbox, tmp_path: Path):
    table = cases(tmp_path)
    assert len(table) >= 25
    jobs = []
    try:
        for name, args, stdin in table:
            plain = submit(sandbox, "sbatch", args, stdin)
            ours = submit(sandbox, wrapper(), args, stdin)
            assert (plain.returncode, ours.returncode) == (0, 0), (name, plain.stderr, ours.stderr)
            a, b = plain.stdout.strip().split(";")[0], ours.stdout.strip().split(";")[0]
            assert re.fullmatch(r"\d+", a) and re.fullmatch(r"\d+", b), (name, plain.stdout, ours.stdout)
            jobs += [a, b]
            assert show(sandbox, a) == show(sandbox, b), name
            assert script_of(sandbox, a) == script_of(sandbox, b), name
            line = submit_line(sandbox, a)
            if line is not None:  # the wrapper runs sbatch with the user's line, or its rewrite
                assert line == " ".join(["sbatch", "--parsable", "--hold", *args]), name
                ran = REWRITTEN.get(name, ["--parsable", "--hold", *args])
                assert submit_line(sandbox, b) == " ".join(["sbatch", *ran]), name
    finally:
        if jobs:
            sandbox.run(["scancel", *jobs], check=False)


@pytest.fixture(scope="module")
def day(_sandbox_session):
    sb = _sandbox_session.ready()
    sb.switch("day")
    yield sb
    sb.switch("night")
    sb.gpupool("gres", "install")  # back to the config's own schedule in the catalog and Lua


def catalog_now(sandbox, layout: str, until_minutes: int = 90) -> datetime:
    """Rewrite the submit catalog and job_submit.lua so that ``layout`` is due now and the
    other switches in ``until_minutes`` (what the wrapper and the Lua both read)."""
    import copy

    from slurm_gpupool.config.load import load_config, parse_config
    from slurm_gpupool.controller.support_files import install_support_files

    cfg = load_config(sandbox.root / "etc" / "gpupool.yaml")
    raw = copy.deepcopy(cfg.raw)
    now = datetime.now().astimezone()
    start = (now - timedelta(minutes=30)).strftime("%H:%M")
    end_t = now + timedelta(minutes=until_minutes)
    other = "night" if layout == "day" else "day"
    raw["schedule"] = {
        "timezone": "local",
        "default": other,
        "rules": [{"layout": layout, "days": "daily", "start": start, "end": end_t.strftime("%H:%M")}],
    }
    install_support_files(parse_config(raw, cfg.source))
    return end_t.replace(second=0, microsecond=0)


def tres_of(sandbox, job: str) -> tuple[str, str]:
    rec = show(sandbox, job)[0]
    return rec.get("TresPerNode", ""), rec.get("Features", "")


def dry_run(sandbox, *args: str) -> str:
    return sandbox.run([wrapper(), "--dry-run", *args, "--wrap", "true"]).stdout.splitlines()[0]


def test_friendly_requests_land_on_the_intended_gres_and_node(day, tmp_path: Path):
    from .repartition_support import job_files

    catalog_now(day, "day")
    expectations = [
        (["--gpu-mem=18G"], "gpu:3g.20gb:1", ("a100n1", "a100n2")),
        (["--gpu-mem=35G"], "gpu:3g.40gb:1", ("h100n1",)),
        (["--gpu-share=0.5"], "shard:v100_shared:2", ("v100n1",)),
        (["--gpus-nvlink=4"], "gpu:v100:4", ("v100n1",)),
    ]
    for args, gres, nodes in expectations:
        out = tmp_path / "o.out"
        job = day.run(
            [
                wrapper(),
                "--parsable",
                "--wait",
                *args,
                *job_files(out),  # stdout alone: Slurm may note "Prolog hung" in stderr
                "--wrap",
                "echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES $SLURM_JOB_GPUS",
            ]
        ).stdout.strip()
        tres, feats = tres_of(day, job)
        assert tres == day.tres(gres), args
        node, devices, indices = out.read_text().split()
        assert node in nodes, args
        assert devices.startswith(("MIG-", "GPU-")), args
        if args == ["--gpus-nvlink=4"]:
            assert feats == "nvlink4"
            state = day.node_state(node)
            gpus = sorted(state["slurm_devices"][int(i)]["gpu"] for i in indices.split(","))
            assert gpus == [4, 5, 6, 7]  # by day the DGX-1's whole GPUs, a connected set


def test_the_installed_layout_is_offered_whatever_the_clock(day):
    """`gres install` records the layout every node is in; wrapper and Lua offer that, not the schedule's."""
    day.gpupool("gres", "install")
    catalog = json.loads((day.root / "etc" / "gpupool-submit.json").read_text())
    assert catalog["installed"] == "day"
    assert dry_run(day, "--gpu-mem=18G").split()[1] == "--gres=gpu:3g.20gb:1"
    job = day.run(["sbatch", "--parsable", "--hold", "--comment=gpupool: gpu-mem=18G", "--wrap", "true"])
    jid = job.stdout.strip()
    try:
        assert tres_of(day, jid)[0] == day.tres("gpu:3g.20gb:1")
    finally:
        day.run(["scancel", jid], check=False)


def test_gpupool_avail_agrees_with_scontrol_and_with_what_slurm_does(day):
    """``gpupool avail --json``, a user's command: its GRES per node set are ``scontrol show
    node``'s, and a request it says Slurm starts now does start, where it said, when submitted
    right after as gpupool-sbatch would submit it."""
    import time

    from ClusterShell.NodeSet import NodeSet

    from slurm_gpupool.core.gres.node_gres import gres_by_type
    from slurm_gpupool.slurm.parse import parse_one_line

    from .repartition_support import nodes_info, wait_until

    # both A100 nodes idle and answering first: a test before may have left a job ending or a
    # slurmd restarting there (seen once on 26.05), and which nodes are free is what is checked
    wait_until(
        lambda: all(
            i.responding and i.state == "idle" and not i.drained
            for n, i in nodes_info(day).items()
            if n.startswith("a100")
        ),
        "a100n1 and a100n2 idle and answering",
    )
    a = json.loads(day.gpupool("avail", "--json", "--gpu-mem=18G", "-t", "5").stdout)
    shown = {}
    for line in day.run(["scontrol", "-d", "-o", "show", "node"]).stdout.splitlines():
        f = parse_one_line(line)
        shown[f["NodeName"]] = (gres_by_type(f["Gres"]), gres_by_type(f.get("GresUsed", "")), f["ActiveFeatures"])
    for s in a["nodesets"]:
        total: dict[tuple[str, str], int] = {}
        used: dict[tuple[str, str], int] = {}
        for node in NodeSet(s["nodes"]):
            gres, held, features = shown[node]
            assert "layout_day" in features.split(",") and s["layout"] == "day"
            for key, n in gres.items():
                if n and key[0] in ("gpu", "shard"):
                    total[key] = total.get(key, 0) + n
                    used[key] = used.get(key, 0) + min(n, held.get(key, 0))
        assert {(g["gres"], g["type"]): (g["total"], g["used"]) for g in s["gres"]} == {
            k: (total[k], used[k]) for k in total
        }, s["name"]
    r = a["request"]
    assert r["per_node"] == [{"gres": "gpu", "type": "3g.20gb", "count": 1}] and r["later"] is None
    assert r["slurm"]["starts_now"] and r["fits_now"], r
    assert set(r["slurm"]["nodes"]) <= set(r["free_on"]) == {"a100n1", "a100n2"}
    job = day.run(["sbatch", "--parsable", "-o", "/dev/null", *r["sbatch"]]).stdout.strip().split(";")[0]
    try:
        from .repartition_support import SLURM_WAIT_S

        deadline = time.monotonic() + SLURM_WAIT_S  # a hang, not a measure
        while (rec := dict(re.findall(r"(\w+)=(\S*)", day.run(["scontrol", "-o", "show", "job", job]).stdout)))[
            "JobState"
        ] == "PENDING" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert rec["JobState"] in ("RUNNING", "COMPLETING", "COMPLETED"), rec
        assert rec["NodeList"] in r["free_on"]
    finally:
        day.run(["scancel", job], check=False)


def test_a_night_only_request_by_day_is_reported_with_its_start(day):
    ends = catalog_now(day, "day", until_minutes=120)
    res = day.run([wrapper(), "--gpus-nvlink=8", "--wrap", "true"], check=False)
    assert res.returncode == 75
    assert "offered only by layout night" in res.stderr and f"{ends:%H:%M}" in res.stderr
    assert "Traceback" not in res.stderr
    lua = day.run(["sbatch", "--comment=gpupool: gpus-nvlink=8", "--wrap", "true"], check=False)
    assert lua.returncode != 0 and "offered only by layout night" in lua.stderr


@pytest.mark.parametrize(
    "args", [["--gpu-mem=2T"], ["--gpus-nvlink=16"], ["--gpu-share=3"], ["--gpu-mem=4G", "--gres=gpu:1"]]
)
def test_impossible_requests_exit_2(sandbox, args):
    res = sandbox.run([wrapper(), *args, "--wrap", "true"], check=False)
    assert res.returncode == 2 and res.stderr.startswith("gpupool-sbatch: ") and "Traceback" not in res.stderr


def test_nvlink_sets_on_a_cluster_mixing_dgx1_and_nvswitch(sandbox, tmp_path: Path):
    """By night: 8 connected GPUs only on NVSwitch nodes; 4 fit the DGX-1's cube-mesh too."""
    from .repartition_support import job_files

    catalog_now(sandbox, "night")
    assert dry_run(sandbox, "--gpus-nvlink=8").split()[1:3] == ["--constraint=nvlink8", "--gres=gpu:a100:8"]
    out = tmp_path / "v.out"
    job = sandbox.run(
        [wrapper(), "--parsable", "--wait", "--gres=gpu:v100:4", *job_files(out), "--wrap", "echo $SLURM_JOB_GPUS"]
    ).stdout.strip()
    tres, feats = tres_of(sandbox, job)
    assert (tres, feats) == (sandbox.tres("gpu:v100:4"), "nvlink4")
    idx = out.read_text().strip().split(",")
    gpus = sorted(sandbox.node_state("v100n1")["slurm_devices"][int(i)]["gpu"] for i in idx)
    from slurm_gpupool.config.machines import find_machine

    m = find_machine("dgx1-v100")
    assert len(gpus) == 4 and all(m.nvlink_connected(a, b) for a in gpus for b in gpus if a != b), gpus
    note = sandbox.run([wrapper(), "--dry-run", "--gres=gpu:v100:8", "--wrap", "true"])
    assert "no node can give 8 NVLink-connected v100 GPUs" in note.stderr
    sandbox.gpupool("gres", "install")


REQUESTS = [
    ("gpu-mem", "18G"),
    ("gpu-mem", "5G"),
    ("gpu-mem", "35G"),
    ("gpu-share", "0.5"),
    ("gpu-share", "1/4"),
    ("gpus-nvlink", "2"),
    ("gpus-nvlink", "4"),
]


def test_job_submit_lua_rewrites_like_the_wrapper(day):
    catalog_now(day, "day")
    jobs = []
    try:
        for key, value in REQUESTS:
            line = dry_run(day, f"--{key}={value}").split()
            want_gres = next(t.split("=", 1)[1] for t in line if t.startswith("--gres="))
            want_feat = next((t.split("=", 1)[1] for t in line if t.startswith("--constraint=")), "(null)")
            job = day.run(
                ["sbatch", "--parsable", "--hold", f"--comment=gpupool: {key}={value}", "--wrap", "true"]
            ).stdout.strip()
            jobs.append(job)
            tres, feats = tres_of(day, job)
            assert (tres, feats) == (day.tres(want_gres), want_feat), (key, value)
        # and plain typed multi-GPU requests get the same constraint both ways
        job = day.run(["sbatch", "--parsable", "--hold", "--gres=gpu:v100:4", "--wrap", "true"]).stdout.strip()
        jobs.append(job)
        assert tres_of(day, job) == (day.tres("gpu:v100:4"), "nvlink4")
        assert "--constraint=nvlink4" in dry_run(day, "--gres=gpu:v100:4")
    finally:
        if jobs:
            day.run(["scancel", *jobs], check=False)
