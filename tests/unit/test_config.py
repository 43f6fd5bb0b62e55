"""Pool config validation: good configs load; broken ones name file and key, with
exit 78 (invalid) or 65 (infeasible), through the real CLI and never a traceback."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml

from slurm_gpupool.config import load_config, parse_config
from slurm_gpupool.core.layouts import GpuTarget

TOP = Path(__file__).resolve().parents[2]

BASE = {
    "version": 1,
    "nodesets": {
        "dgx": {"nodes": "gpu[01-02]", "machine": "dgx-a100"},
        "a30": {"nodes": "pcie01", "machine": "pcie-a30"},
    },
    "layouts": {
        "day": {
            "dgx": {"0-3": {"mig": {"1g.5gb": 7}}, "4-7": "whole"},
            "a30": {"all": {"shared": 4}},
        },
        "night": {"dgx": {"all": "whole"}, "a30": {"all": "whole"}},
    },
    "schedule": {"default": "night", "rules": [{"layout": "day", "days": "mon-fri", "start": "08:00", "end": "20:00"}]},
}


def run_check(tmp_path: Path, cfg: object, name: str = "pool.yaml") -> subprocess.CompletedProcess[str]:
    path = tmp_path / name
    path.write_text(cfg if isinstance(cfg, str) else yaml.safe_dump(cfg))
    return subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.cli.main", "layout", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def mutate(fn):
    cfg = copy.deepcopy(BASE)
    fn(cfg)
    return cfg


def _set(path: list, value):
    def fn(cfg):
        d = cfg
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value

    return fn


def _del(path: list):
    def fn(cfg):
        d = cfg
        for k in path[:-1]:
            d = d[k]
        del d[path[-1]]

    return fn


BROKEN = [
    # (id, mutation, exit code, words that must be in the message)
    ("unknown top key", _set(["colour"], "blue"), 78, ["colour", "unknown key"]),
    ("missing version", _del(["version"]), 78, ["version", "required"]),
    ("future version", _set(["version"], 9), 78, ["version", "unsupported"]),
    ("version as text", _set(["version"], "one"), 78, ["version", "expected an integer"]),
    ("nodesets not a map", _set(["nodesets"], ["dgx"]), 78, ["nodesets", "expected a mapping"]),
    ("bad hostlist", _set(["nodesets", "dgx", "nodes"], "gpu[01-"), 78, ["nodesets.dgx.nodes", "hostlist"]),
    ("node in two sets", _set(["nodesets", "a30", "nodes"], "gpu01"), 78, ["nodes", "gpu01 is also in node set"]),
    ("unknown machine", _set(["nodesets", "dgx", "machine"], "dgx-z9"), 78, ["nodesets.dgx.machine", "dgx-z9"]),
    ("unknown nodeset key", _set(["nodesets", "dgx", "gpus"], 8), 78, ["nodesets.dgx.gpus", "unknown key"]),
    (
        "unknown profile for model",
        _set(["layouts", "day", "dgx", "0-3"], {"mig": {"1g.10gb+gfx": 7}}),
        78,
        ["layouts.day.dgx", "1g.10gb+gfx", "A100-SXM4-40GB"],
    ),
    (
        "A30 profile on A100",
        _set(["layouts", "day", "dgx", "0-3"], {"mig": {"1g.6gb": 4}}),
        78,
        ["unknown MIG profile", "A100-SXM4-40GB", "1g.5gb"],
    ),
    (
        "overlapping selectors",
        _set(["layouts", "day", "dgx"], {"0-3": "whole", "3-7": "whole"}),
        78,
        ["layouts.day.dgx", "overlap"],
    ),
    ("uncovered GPUs", _set(["layouts", "night", "dgx"], {"0-5": "whole"}), 78, ["layouts.night.dgx", "6,7"]),
    ("GPU out of range", _set(["layouts", "night", "a30"], {"0-7": "whole"}), 78, ["GPU 4 does not exist"]),
    ("bad selector", _set(["layouts", "night", "a30"], {"first": "whole"}), 78, ["not a GPU selector"]),
    (
        "hostlist matching no node set",
        _set(["layouts", "night", "gpu[07-08]"], {"all": "whole"}),
        78,
        ["layouts.night", "gpu[07-08]", "neither a node set nor a hostlist"],
    ),
    (
        "two kinds at once",
        _set(["layouts", "day", "a30"], {"all": {"shared": 4, "mig": {"1g.6gb": 4}}}),
        78,
        ["exactly one of"],
    ),
    ("shared one", _set(["layouts", "day", "a30"], {"all": {"shared": 1}}), 78, ["shares must be 2..128"]),
    (
        "count as text",
        _set(["layouts", "day", "dgx", "0-3"], {"mig": {"1g.5gb": "seven"}}),
        78,
        ["expected an integer"],
    ),
    ("MIG on V100", _set(["nodesets", "dgx", "machine"], "dgx1-v100"), 78, ["does not support MIG"]),
    (
        "schedule unknown layout",
        _set(["schedule", "rules"], [{"layout": "dusk", "start": "08:00", "end": "09:00"}]),
        78,
        ["schedule.rules[0].layout", "dusk"],
    ),
    (
        "schedule bad clock",
        _set(["schedule", "rules"], [{"layout": "day", "start": "8am", "end": "20:00"}]),
        78,
        ["HH:MM"],
    ),
    ("schedule bad zone", _set(["schedule", "timezone"], "Mars/Olympus"), 78, ["time zone"]),
    (
        "infeasible 3g+3g+1g",
        _set(["layouts", "day", "dgx", "0-3"], {"mig": {"3g.20gb": 2, "1g.5gb": 1}}),
        65,
        ["A100-SXM4-40GB", "two 3g.20gb use all 8 memory slices; no slot is left for 1g.5gb", "nearest feasible"],
    ),
    (
        "infeasible compute",
        _set(["layouts", "day", "dgx", "0-3"], {"mig": {"7g.40gb": 1, "1g.5gb": 1}}),
        65,
        ["needs 8 compute slices"],
    ),
    ("too many of a profile", _set(["layouts", "day", "dgx", "0-3"], {"mig": {"1g.5gb": 8}}), 65, ["at most 7"]),
]


@pytest.mark.parametrize("case", BROKEN, ids=[c[0] for c in BROKEN])
def test_broken_configs(tmp_path: Path, case):
    _, fn, code, words = case
    res = run_check(tmp_path, mutate(fn))
    assert res.returncode == code, res.stderr
    assert res.stderr.startswith(f"gpupool: {tmp_path / 'pool.yaml'}")
    for w in words:
        assert w in res.stderr, (w, res.stderr)
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_not_yaml_and_missing_file(tmp_path: Path):
    res = run_check(tmp_path, "version: 1\nnodesets: [unclosed\n")
    assert res.returncode == 78 and "not valid YAML" in res.stderr and "line" in res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.cli.main", "layout", "check", str(tmp_path / "nope.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 78 and "cannot read" in res.stderr


def test_good_config_and_shipped_example(tmp_path: Path):
    res = run_check(tmp_path, BASE)
    assert res.returncode == 0, res.stderr
    assert "GPU 0-3: mig {1g.5gb: 7}  [1g.5gb@0 1g.5gb@1" in res.stdout
    res = subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.cli.main", "layout", "check", str(TOP / "etc" / "gpupool.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr


def test_hostlist_entries_override_their_node_set():
    cfg = copy.deepcopy(BASE)
    cfg["layouts"]["night"]["gpu02"] = {"0": {"mig": {"7g.40gb": 1}}, "1-7": "whole"}
    pc = parse_config(cfg, "mem.yaml", Path("."))
    t1 = pc.machine_targets("night", "gpu01")
    t2 = pc.machine_targets("night", "gpu02")
    assert t1[0] == GpuTarget.whole() and t2[0] == GpuTarget.mig_counts({"7g.40gb": 1})


def test_schedule_due_and_next():
    cfg = copy.deepcopy(BASE)
    cfg["schedule"]["timezone"] = "Europe/Paris"
    pc = parse_config(cfg, "mem.yaml", Path("."))
    paris = ZoneInfo("Europe/Paris")
    assert pc.schedule.due(datetime(2026, 11, 23, 9, 0, tzinfo=paris)) == "day"  # Monday
    assert pc.schedule.due(datetime(2026, 11, 21, 9, 0, tzinfo=paris)) == "night"  # Saturday
    assert pc.schedule.due(datetime(2026, 11, 23, 20, 0, tzinfo=paris)) == "night"
    # same instant seen from UTC: 08:30 UTC = 09:30 Paris
    assert pc.schedule.due(datetime(2026, 11, 23, 8, 30, tzinfo=ZoneInfo("UTC"))) == "day"
    when, layout = pc.schedule.next_change(datetime(2026, 11, 20, 19, 0, tzinfo=paris))
    assert (when.isoformat(), layout) == ("2026-11-20T20:00:00+01:00", "night")
    when, layout = pc.schedule.next_change(datetime(2026, 11, 21, 12, 0, tzinfo=paris))
    assert (when.isoformat(), layout) == ("2026-11-23T08:00:00+01:00", "day")


def test_overnight_rule_wraps_midnight():
    cfg = copy.deepcopy(BASE)
    cfg["schedule"] = {
        "timezone": "UTC",
        "default": "day",
        "rules": [{"layout": "night", "days": "fri", "start": "22:00", "end": "06:00"}],
    }
    pc = parse_config(cfg, "mem.yaml", Path("."))
    utc = ZoneInfo("UTC")
    assert pc.schedule.due(datetime(2026, 11, 20, 23, 0, tzinfo=utc)) == "night"  # Fri 23:00
    assert pc.schedule.due(datetime(2026, 11, 21, 5, 0, tzinfo=utc)) == "night"  # Sat 05:00
    assert pc.schedule.due(datetime(2026, 11, 22, 5, 0, tzinfo=utc)) == "day"  # Sun 05:00


def test_shipped_example_loads_mig_parted_layouts():
    pc = load_config(TOP / "etc" / "gpupool.yaml")
    assert {"day", "night", "all-disabled", "all-1g", "all-balanced", "half-half"} <= set(pc.layouts)
    # device-filter picks the profile set per GPU model
    assert pc.machine_targets("all-1g", "a100n1")[0] == GpuTarget.mig_counts({"1g.5gb": 7})
    assert pc.machine_targets("all-1g", "h100n1")[0] == GpuTarget.mig_counts({"1g.10gb": 7})
    half = pc.machine_targets("half-half", "a100n1")
    assert half[:4] == (GpuTarget.mig_counts({"3g.20gb": 2}),) * 4 and half[4] == GpuTarget.whole()
    assert not pc.covers("half-half", "h100n1")  # filtered to A100-40GB only
    assert not pc.covers("all-1g", "a30n1")  # not listed under mig_parted.nodesets


def test_mig_parted_errors_point_into_its_file(tmp_path: Path):
    (tmp_path / "mp.yaml").write_text(
        yaml.safe_dump(
            {
                "version": "v1",
                "mig-configs": {"bad": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1c.3g.20gb": 2}}]},
            }
        )
    )
    cfg = copy.deepcopy(BASE)
    cfg["mig_parted"] = {"file": "mp.yaml", "nodesets": ["dgx"]}
    res = run_check(tmp_path, cfg)
    assert res.returncode == 78
    assert f"{tmp_path / 'mp.yaml'}: mig-configs.bad[0].mig-devices" in res.stderr and "sub-profiles" in res.stderr
