"""#17: in an elastic period gpupool-sbatch chooses across every layout, and takes an idle
whole GPU when nothing idle holds the slice or shares it would ask for; the simulator
replays the same rule.  sinfo's output as each release prints it (22.05 from the sandbox)."""

from __future__ import annotations

import copy
import json
import os
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.core.gres.node_gres import idle_records
from slurm_gpupool.core.submit.request import Request, decide
from slurm_gpupool.pool.submit_catalog import submit_catalog

from .test_wrapper import FAKE, given, wrapper

TOP = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 25, 10, 0).astimezone()

# sinfo -h -N -O NodeList:100,StateComplete:100,Gres:4000,GresUsed:4000 (spaces squeezed)
SINFO_2205 = """\
a100n1 mixed gpu:1g.5gb:32(S:0-1),gpu:3g.20gb:2(S:1),gpu:2g.10gb:2(S:1),gpu:a100:2(S:1) \
gpu:1g.5gb:30(IDX:0-29),gpu:3g.20gb:0(IDX:N/A),gpu:2g.10gb:0(IDX:N/A),gpu:a100:1(IDX:38),shard:0
a100n2 idle gpu:a100:8(S:0-1) gpu:a100:0(IDX:N/A),shard:0
a100n2 idle gpu:a100:8(S:0-1) gpu:a100:0(IDX:N/A),shard:0
h100n1 idle+drain gpu:h100_80gb_hbm3:8(S:0-1) gpu:h100_80gb_hbm3:0(IDX:N/A),shard:0
a30n1 mixed+maint gpu:a30:4(S:0-1) gpu:a30:0(IDX:N/A),shard:0
v100n1 mixed gpu:v100:4(S:0-1),gpu:v100_shared:4(S:0-1),shard:v100_shared:16(S:0-1) \
gpu:v100:0(IDX:N/A),gpu:v100_shared:0(IDX:N/A),shard:v100_shared:2(IDX:4-5)
"""
SINFO_2411 = "v100n1 mixed shard:v100_shared:16(S:0-1) shard:v100_shared:6(3/4,3/4,0/4,0/4)\n"
SINFO_2411_BUSY = "v100n1 mixed shard:v100_shared:16(S:0-1) shard:v100_shared:9(3/4,3/4,2/4,1/4)\n"


def test_idle_records_read_each_release_s_form():
    idle = idle_records(SINFO_2205, {"v100_shared": 4})
    # a100n1: 2 slices and 1 whole A100 left; a100n2 (listed twice: two partitions) 8;
    # h100n1 drained and a30n1 in a maintenance reservation: nothing there takes a job now
    assert idle["1g.5gb"] == 2 and idle["a100"] == 1 + 8 and idle["3g.20gb"] == 2
    assert "h100_80gb_hbm3" not in idle and "a30" not in idle
    # time-sliced: the most shards free on one GPU (a job's shards come from one GPU). 22.05
    # says only that 2 of the 4 GPUs have shards in use: the 2 others are free, all 4 shares;
    # the GPU records of the time-sliced type are not devices to count
    assert idle["v100_shared"] == 4 and idle["v100"] == 4
    assert idle_records(SINFO_2411, {"v100_shared": 4}) == {"v100_shared": 4}  # per-GPU used/total
    assert idle_records(SINFO_2411_BUSY, {"v100_shared": 4}) == {"v100_shared": 3}  # 10 free, at most 3 on one
    every_gpu = SINFO_2205.replace("shard:v100_shared:2(IDX:4-5)", "shard:v100_shared:4(IDX:4-7)")
    assert idle_records(every_gpu, {"v100_shared": 4})["v100_shared"] == 0  # 22.05: none known free


@pytest.fixture(scope="module")
def catalog() -> dict:
    raw = copy.deepcopy(yaml.safe_load((TOP / "etc" / "gpupool.yaml").read_text()))
    raw.pop("mig_parted")
    raw["schedule"].update(timezone="UTC", mode="elastic", elastic={"floors": {"1g.5gb": 1}})
    return submit_catalog(parse_config(raw, str(TOP / "etc" / "gpupool.yaml")), installed="night")


def test_in_an_elastic_period_the_choice_spans_every_layout_and_takes_what_is_idle(catalog: dict):
    mem = Request("mem", 4 * 1024, "4G")
    # every layout's offers: the smallest MIG slice with 4G, though the installed layout is night
    assert decide(catalog, mem, NOW).choice.gres == "gpu:1g.5gb:1"
    assert decide(catalog, mem, NOW, lambda: {"1g.5gb": 1, "a100": 8}).choice.gres == "gpu:1g.5gb:1"
    c = decide(catalog, mem, NOW, lambda: {"1g.5gb": 0, "a100": 8, "v100": 2}).choice
    assert c.gres == "gpu:v100:1" and "no 1g.5gb MIG slice idle now, v100 is" in c.why  # the smallest idle
    # a slice of the same size on another model first, then a whole GPU, a larger slice last
    assert decide(catalog, mem, NOW, lambda: {"1g.10gb": 1, "a100": 8}).choice.gres == "gpu:1g.10gb:1"
    assert decide(catalog, mem, NOW, lambda: {"2g.10gb": 1, "a100": 8}).choice.gres == "gpu:a100:1"
    assert decide(catalog, mem, NOW, lambda: {"2g.10gb": 1}).choice.gres == "gpu:2g.10gb:1"
    big = Request("mem", 36 * 1024, "36G")  # a 3g.40gb (H100) or more: the v100 (32G) is too small
    assert decide(catalog, big, NOW, lambda: {"v100": 2, "a100": 1}).choice.gres == "gpu:a100:1"
    assert decide(catalog, mem, NOW, lambda: {}).choice.gres == "gpu:1g.5gb:1"  # nothing idle: it waits for a slice
    assert decide(catalog, mem, NOW, lambda: None).choice.gres == "gpu:1g.5gb:1"  # sinfo did not answer
    share = Request("share", 0.25, "0.25")
    primary = decide(catalog, share, NOW).choice.gres  # one shard of a time-sliced type
    typ = primary.split(":")[1]
    assert primary == f"shard:{typ}:1" and decide(catalog, share, NOW, lambda: {typ: 1}).choice.gres == primary
    other = next(o["type"] for o in catalog["elastic"]["offers"] if o["kind"] == "shared" and o["type"] != typ)
    assert decide(catalog, share, NOW, lambda: {other: 2, "a30": 1}).choice.gres == f"shard:{other}:1"
    assert decide(catalog, share, NOW, lambda: {"a30": 1}).choice.gres == "gpu:a30:1"
    # whole-GPU requests never ask: nothing to trade
    asked = []
    decide(catalog, Request("nvlink", 8, "8"), NOW, lambda: asked.append(1) or {})
    assert asked == []


def test_idle_first_keeps_to_what_the_jobs_tier_may_use(catalog: dict):
    """A tier that may use only shards and slices (docs/tiers.md's `shared`) gets a larger
    idle slice, never a whole GPU: that refused the job (exit 2) when the cluster was busy."""
    from slurm_gpupool.core.submit.plan import plan

    tiered = copy.deepcopy(catalog)
    tiered["tiers"] = {
        "shared": {"qos": "gpupool_shared", "default": True, "gres": ["shard", "mig"], "signal": None, "grace_s": 0},
        "exclusive": {"qos": "gpupool_exclusive", "default": False, "gres": ["whole"], "signal": None, "grace_s": 0},
    }
    busy = {"1g.5gb": 0, "v100": 8}
    p = plan(["--gpu-mem=4G", "--wrap", "x"], None, tiered, NOW, lambda: busy)
    assert "--gres=gpu:1g.5gb:1" in p.argv and "--qos=gpupool_shared" in p.argv  # waits for its slice
    p = plan(["--gpu-mem=4G", "--wrap", "x"], None, tiered, NOW, lambda: {**busy, "3g.20gb": 1})
    assert "--gres=gpu:3g.20gb:1" in p.argv
    p = plan(["--gpu-mem=4G", "--wrap", "x"], None, catalog, NOW, lambda: busy)
    assert "--gres=gpu:v100:1" in p.argv  # no tiers: the whole GPU


def test_outside_the_elastic_periods_the_clock_decides(catalog: dict):
    by_day = copy.deepcopy(catalog)
    by_day["elastic"] = {**catalog["elastic"], "during": ["day"]}
    by_day["schedule"]["rules"] = [{"layout": "day", "days": [0, 1, 2, 3, 4], "start": "08:00", "end": "20:00"}]
    mem = Request("mem", 4 * 1024, "4G")
    assert decide(by_day, mem, NOW, lambda: {"a100": 8}).choice.gres == "gpu:a100:1"  # elastic day (Wed 10:00)
    night = datetime(2026, 11, 25, 22, 0).astimezone()
    d = decide(by_day, mem, night, lambda: {"1g.5gb": 9})
    assert d.choice.layout == "night" and d.choice.gres == "gpu:a30:1"  # the clock's night layout


def test_the_wrapper_asks_sinfo_only_in_an_elastic_period_and_goes_on_without_it(catalog: dict, tmp_path: Path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "gpupool-submit.json").write_text(json.dumps(catalog))
    fake = tmp_path / "sbatch"
    fake.write_text(FAKE.replace("PYTHON", sys.executable))
    fake.chmod(0o755)
    sinfo = tmp_path / "sinfo"
    sinfo.write_text(f"#!{sys.executable}\nimport os, sys\nopen(os.environ['ASKED'], 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                     "sys.stdout.write(open(os.environ['SINFO_OUT']).read())\nsys.exit(int(os.environ.get('SINFO_RC', '0')))\n")  # fmt: skip
    sinfo.chmod(0o755)
    out = tmp_path / "sinfo.txt"
    site = {
        "out": tmp_path / "sbatch.json",
        "env": {
            "PATH": os.environ["PATH"],
            "SLURM_CONF": str(etc / "slurm.conf"),
            "SLURM_GPUPOOL_SBATCH": str(fake),
            "SLURM_GPUPOOL_SINFO": str(sinfo),
            "FAKE_SBATCH_OUT": str(tmp_path / "sbatch.json"),
            "SINFO_OUT": str(out),
            "ASKED": str(tmp_path / "asked"),
        },
    }
    full = SINFO_2205.replace("gpu:1g.5gb:30(IDX:0-29)", "gpu:1g.5gb:32(IDX:0-31)")  # every 1g.5gb taken
    out.write_text(full)
    r = wrapper(site, "--gpu-mem=4G", "--explain", "--wrap", "true")
    assert r.returncode == 0, r.stderr
    assert "--gres=gpu:v100:1" in given(site)["argv"] and "no 1g.5gb MIG slice idle now" in r.stderr
    no_whole = full.replace("gpu:a100:0(IDX:N/A)", "gpu:a100:8(IDX:0-7)").replace("gpu:v100:0", "gpu:v100:4")
    out.write_text(no_whole.replace("gpu:a100:1(IDX:38)", "gpu:a100:2(IDX:38-39)"))
    assert wrapper(site, "--gpu-mem=4G", "--wrap", "true").returncode == 0
    assert "--gres=gpu:2g.10gb:1" in given(site)["argv"]  # no whole GPU idle either: a larger slice
    assert (tmp_path / "asked").read_text().split()[:3] == ["-h", "-N", "-O"]
    out.write_text(SINFO_2205)  # two slices idle
    assert wrapper(site, "--gpu-mem=4G", "--wrap", "true").returncode == 0
    assert "--gres=gpu:1g.5gb:1" in given(site)["argv"]
    site["env"]["SINFO_RC"] = "1"  # sinfo fails: the choice as if nothing were idle, and the job goes in
    assert wrapper(site, "--gpu-mem=4G", "--wrap", "true").returncode == 0
    assert "--gres=gpu:1g.5gb:1" in given(site)["argv"]
    (tmp_path / "asked").unlink()
    assert wrapper(site, "--gres=gpu:a100:2", "--wrap", "true").returncode == 0  # no friendly request: no sinfo
    assert not (tmp_path / "asked").exists()
