"""Pool config validation: good configs load; broken ones name file and key, with
exit 78 (invalid) or 65 (infeasible), through the real CLI and never a traceback."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml

from slurm_gpupool.config.load import load_config, parse_config
from slurm_gpupool.core.mig.layouts import GpuTarget

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
        _set(["layouts", "day", "a30"], {"all": {"shared": 4, "whole": True}}),
        78,
        ["exactly one of"],
    ),
    (  # #28 item 3: shares on MIG devices take the same checks as a whole GPU's
        "MIG shares one",
        _set(["layouts", "day", "a30"], {"all": {"shared": 1, "mig": {"1g.6gb": 4}}}),
        78,
        ["layouts.day.a30.all.shared", "shares must be 2..128"],
    ),
    (
        "MIG shares over 128",
        _set(["layouts", "day", "a30"], {"all": {"mig": {"1g.6gb": 4}, "shared": 129}}),
        78,
        ["layouts.day.a30.all.shared", "shares must be 2..128"],
    ),
    (
        "MIG shares as text",
        _set(["layouts", "day", "a30"], {"all": {"mig": {"1g.6gb": 4}, "shared": "4"}}),
        78,
        ["layouts.day.a30.all.shared"],
    ),
    (
        "MIG shares on a GPU without MIG",
        lambda c: (
            c["nodesets"].update(volta={"nodes": "v01", "machine": "dgx1-v100"}),
            c["layouts"]["day"].update(volta={"all": {"mig": {"1g.5gb": 7}, "shared": 4}}),
            c["layouts"]["night"].update(volta={"all": "whole"}),
        ),
        78,
        ["layouts.day.volta", "does not support MIG"],
    ),
    (
        "an unknown key beside mig",
        _set(["layouts", "day", "a30"], {"all": {"mig": {"1g.6gb": 4}, "shares": 4}}),
        78,
        ["layouts.day.a30.all.shares", "unknown key beside mig", "shared: N"],
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


# Hostile values (#15): none may reach a Slurm file; each is refused with its key.
HOSTILE = [
    (
        "hostlist with a newline",
        _set(["nodesets", "a30", "nodes"], "pcie01\nNodeName=evil Gres=gpu:99"),
        78,
        ["nodesets.a30.nodes", "not a Slurm hostlist"],
    ),
    ("hostlist with a space", _set(["nodesets", "a30", "nodes"], "pcie01 x"), 78, ["not a"]),
    ("node name with =", _set(["nodesets", "a30", "nodes"], "a=b"), 78, ["nodesets.a30.nodes"]),
    ("empty hostlist", _set(["nodesets", "a30", "nodes"], ""), 78, ["empty hostlist names no node"]),
    ("hostlist of 20 million", _set(["nodesets", "a30", "nodes"], "a[1-20000000]"), 78, ["names 20000000 nodes"]),
    ("unknown hostlist group", _set(["nodesets", "a30", "nodes"], "n[1-3],@nosuchgroup"), 78, ["nodesets.a30.nodes"]),
    (
        "layout name with a space",
        lambda c: c["layouts"].update({"day shift": c["layouts"].pop("day")}),
        78,
        ["layout name 'day shift' is not a name"],
    ),
    (
        "node set name with a newline",
        lambda c: c["nodesets"].update({"a\nb": c["nodesets"].pop("a30")}),
        78,
        ["node set name"],
    ),
    ("300-character machine", _set(["nodesets", "a30", "machine"], "m" * 300), 78, ["nodesets.a30.machine"]),
    ("machine name as a path", _set(["nodesets", "a30", "machine"], "../../etc/passwd"), 78, ["not a name"]),
    ("MIG count 10^19", _set(["layouts", "day", "dgx", "0-3"], {"mig": {"1g.5gb": 10**19}}), 78, ["0..64"]),
    ("MIG count 10^9", _set(["layouts", "day", "dgx", "0-3"], {"mig": {"1g.5gb": 10**9}}), 78, ["0..64"]),
    ("selector 0-99999999999", _set(["layouts", "day", "dgx"], {"0-99999999999": "whole"}), 78, ["0..255"]),
    (
        "node_params with a newline",
        _set(["slurm"], {"node_params": {"pcie01": "CPUs=32\nNodeName=evil"}}),
        78,
        ["slurm.node_params.pcie01", "not a NodeName parameter"],
    ),
    (
        "node_params with Gres",
        _set(["slurm"], {"node_params": {"pcie01": "Gres=gpu:8"}}),
        78,
        ["Gres= is written by gpupool"],
    ),
    ("node_params key twice", _set(["slurm"], {"node_params": {"pcie01": "Weight=1 weight=2"}}), 78, ["twice"]),
    ("NaN price", _set(["reports"], {"prices": {"A30": float("nan")}}), 78, ["reports.prices.A30"]),
    ("infinite price", _set(["reports"], {"prices": {"A30": float("inf")}}), 78, ["reports.prices.A30"]),
    (
        "preload without its library",
        _set(["hooks"], {"share_enforcement": "preload"}),
        78,
        ["hooks.preload_library", "required with share_enforcement: preload"],
    ),
    (
        "relative preload library",
        _set(["hooks"], {"share_enforcement": "preload", "preload_library": "libvgpu.so"}),
        78,
        ["hooks.preload_library", "must be an absolute path"],
    ),
    (
        "preload library splitting LD_PRELOAD",
        _set(["hooks"], {"share_enforcement": "preload", "preload_library": "/opt/a.so:/tmp/b.so"}),
        78,
        ["hooks.preload_library", "LD_PRELOAD"],
    ),
    (
        "preload and mps both",
        _set(["hooks"], {"share_enforcement": "preload", "preload_library": "/opt/l.so", "mps": True}),
        78,
        ["hooks.mps", "contradicts share_enforcement: preload"],
    ),
    ("unknown share enforcement", _set(["hooks"], {"share_enforcement": "hami"}), 78, ["hooks.share_enforcement"]),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_values_are_refused_with_their_key(tmp_path: Path, case):
    test_broken_configs(tmp_path, case)


def test_yaml_that_would_silently_lose_or_crash_is_refused(tmp_path: Path):
    text = yaml.safe_dump(BASE, sort_keys=False)
    dup = text.replace("version: 1\n", "version: 1\nversion: 1\n")
    res = run_check(tmp_path, dup)
    assert res.returncode == 78 and "key 'version' is written twice in one mapping" in res.stderr
    (tmp_path / "bytes.yaml").write_bytes(text.encode() + b"\x80\xff")
    res = subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.cli.main", "layout", "check", str(tmp_path / "bytes.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 78 and "not UTF-8 text" in res.stderr
    res = run_check(tmp_path, text + "deep: " + "[" * 1000 + "]" * 1000 + "\n")
    assert res.returncode == 78 and ("nested" in res.stderr or "nesting" in res.stderr)
    assert "Traceback" not in res.stderr


def test_site_node_params_merge_with_ours():
    """Features are added to ours, a site's value replaces ours key by key, a CPU layout
    given by the site replaces ours whole, and RealMemory defaults to 95 % of the machine's."""
    from slurm_gpupool.controller.gres_install import render

    cfg = parse_config(
        mutate(
            _set(
                ["slurm"],
                {
                    "node_params": {
                        "gpu[01-02]": "Features=ib,fast Weight=10",
                        "gpu02": "RealMemory=900000 Features=big",
                        "pcie01": "CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=2",
                    }
                },
            )
        ),
        "t.yaml",
        TOP,
    )
    lines = {
        ln.split()[0]: ln
        for ln in render(cfg, cfg.all_nodes(), "night")["nodes.conf"].splitlines()
        if ln.startswith("NodeName=")
    }
    one, two, a30 = lines["NodeName=gpu01"], lines["NodeName=gpu02"], lines["NodeName=pcie01"]
    assert one.count("RealMemory=") == 1 and "RealMemory=979450" in one and "Weight=10" in one
    assert one.endswith("Features=a100,dgx-a100,nvswitch,nvlink,nvlink2,nvlink4,nvlink8,layout_night,ib,fast")
    assert "RealMemory=900000" in two and two.endswith(",layout_night,ib,fast,big") and two.count("Features=") == 1
    assert "Sockets=2 " not in a30 and "CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=2" in a30


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


def test_a_fifo_nothing_writes_to_is_refused_and_one_a_writer_holds_is_read(tmp_path: Path):
    """A FIFO named as the config (or left where it goes) made ``open`` wait for a writer
    forever; now it is a config error at once.  A FIFO a writer holds open, as
    ``--config <(generate)`` gives, is still read, however late the text comes."""
    import threading
    import time

    fifo = tmp_path / "pool.yaml"
    os.mkfifo(fifo)
    cmd = [sys.executable, "-m", "slurm_gpupool.cli.main", "layout", "check", str(fifo)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 78 and "a FIFO or pipe that gave nothing (no writer within 1 s)" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr

    text = yaml.safe_dump(BASE).encode()

    def write() -> None:
        with open(fifo, "wb") as f:  # waits for the reader's open, as a pipe's writer does
            time.sleep(0.3)  # the reader finds the writer there and nothing written yet
            f.write(text[:100])
            f.flush()
            time.sleep(0.1)
            f.write(text[100:])

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(0.1)
        cfg = load_config(fifo)
    finally:
        writer.join(10)
    assert set(cfg.nodesets) == {"dgx", "a30"}

    def late_writer() -> None:  # opens the FIFO only after the reader did (a race, not a hang)
        time.sleep(0.3)
        with open(fifo, "wb") as f:
            f.write(text)

    writer = threading.Thread(target=late_writer)
    writer.start()
    try:
        cfg = load_config(fifo)
    finally:
        writer.join(10)
    assert set(cfg.nodesets) == {"dgx", "a30"}


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


def test_a_rule_ending_at_24_00_changes_at_the_next_midnight():
    """A rule's ``24:00`` is kept as 23:59:59.999999; its change came out as 23:59 (the
    wrapper said "from ... 23:59") where job_submit.lua says 00:00 of the next day."""
    cfg = copy.deepcopy(BASE)
    cfg["schedule"] = {
        "timezone": "UTC",
        "default": "night",
        "rules": [{"layout": "day", "days": "mon-fri", "start": "08:00", "end": "24:00"}],
    }
    pc = parse_config(cfg, "mem.yaml", Path("."))
    utc = ZoneInfo("UTC")
    when, layout = pc.schedule.next_change(datetime(2026, 11, 23, 21, 0, tzinfo=utc))
    assert (when.isoformat(), layout) == ("2026-11-24T00:00:00+00:00", "night")
    assert pc.schedule.due(when) == "night" and pc.schedule.due(when - timedelta(minutes=1)) == "day"


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
                "mig-configs": {"bad": [{"devices": "all", "mig-enabled": True, "device-filter": "20B010DE"}]},
            }
        )
    )
    cfg = copy.deepcopy(BASE)
    cfg["mig_parted"] = {"file": "mp.yaml", "nodesets": ["dgx"]}
    res = run_check(tmp_path, cfg)
    assert res.returncode == 78
    assert f"{tmp_path / 'mp.yaml'}: mig-configs.bad[0]" in res.stderr and "mig-devices" in res.stderr


def test_untyped_gpu_types_name_whole_gpu_types_for_auto():
    """#26 item 6: the preferred types of untyped GPU requests; what they may name."""
    from slurm_gpupool.errors import ConfigError
    from slurm_gpupool.pool.submit_catalog import submit_catalog

    ok = parse_config(mutate(_set(["submit"], {"untyped_gpu_types": "a30"})), "t.yaml", TOP)
    assert ok.submit["untyped_gpu_types"] == ["a30"]  # one name: a default type
    assert submit_catalog(ok)["rules"]["untyped_gpu_types"] == ["a30"]
    for value, words in (
        ({"untyped_gpus": "reject", "untyped_gpu_types": ["a100"]}, "goes with untyped_gpus: auto"),
        ({"untyped_gpu_types": ["a100", "a100"]}, "names a type twice"),
        ({"untyped_gpu_types": ["a 100\n"]}, "not a GPU type name"),
        ({"untyped_gpu_types": [7]}, "not a GPU type name"),
    ):
        with pytest.raises(ConfigError, match=words):
            parse_config(mutate(_set(["submit"], value)), "t.yaml", TOP)
    for name in ("1g.5gb", "a30_shared", "tpu"):  # a MIG slice, a time-sliced type, nothing
        cfg = parse_config(mutate(_set(["submit"], {"untyped_gpu_types": ["a100", name]})), "t.yaml", TOP)
        with pytest.raises(ConfigError, match=r"submit.untyped_gpu_types\[1\].*not a whole-GPU type"):
            submit_catalog(cfg)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("usage_interval_s", 1e-300),
        ("usage_interval_s", -1),
        ("usage_interval_s", 10**9),
        ("epilog_kill_grace_s", -1),
        ("epilog_kill_grace_s", 1e9),
        ("temperature_margin_c", -3),
        ("xid_window_s", 0),
        ("critical_xids", [48, -1]),
        ("ecc_uncorrected_max", -1),
    ],
)
def test_hook_numbers_out_of_range_are_refused(key, value):
    """A sampler period of 1e-300 s spins, a negative grace never waits (#26 item 18)."""
    from slurm_gpupool.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        parse_config(mutate(lambda c: c.update(hooks={key: value})), "pool.yaml")
    assert e.value.key == f"hooks.{key}" and "must be" in e.value.why


def test_hook_numbers_in_range_and_a_sampler_turned_off_load():
    cfg = parse_config(mutate(lambda c: c.update(hooks={"usage_interval_s": 0, "epilog_kill_grace_s": 0.5})), "p.yaml")
    assert cfg.hooks.usage_interval_s == 0 and cfg.hooks.epilog_kill_grace_s == 0.5


def test_share_enforcement_follows_hooks_mps_when_unset():
    """Configs written before share_enforcement keep their meaning; `mps` turns MPS on."""

    def hooks(**h: object):
        return parse_config(mutate(lambda c: c.update(hooks=h)), "p.yaml").hooks

    assert (hooks().share_enforcement, hooks().mps) == ("none", False)
    assert (hooks(mps=True).share_enforcement, hooks(share_enforcement="mps").mps) == ("mps", True)
    pre = hooks(share_enforcement="preload", preload_library="/opt/hami/libvgpu.so")
    assert (pre.share_enforcement, pre.mps, pre.preload_library) == ("preload", False, "/opt/hami/libvgpu.so")
    assert hooks(share_enforcement="none", mps=False).mps is False


def test_shares_on_mig_devices_parse_and_round_trip():
    """#28 item 3: ``{mig: {...}, shared: N}`` is a MIG target whose devices are time-sliced;
    ``node export`` writes it back in the same form."""
    cfg = mutate(_set(["layouts", "day", "a30"], {"0-1": {"mig": {"1g.6gb": 4}, "shared": 4}, "2-3": "whole"}))
    pc = parse_config(cfg, "t.yaml", Path("."))
    t = pc.machine_targets("day", "pcie01")[0]
    assert t == GpuTarget.mig_counts({"1g.6gb": 4}, shares=4) and t.wants_mig_mode and t.shares == 4
    assert t.to_config() == {"mig": {"1g.6gb": 4}, "shared": 4} and str(t) == "mig {1g.6gb: 4} shared x4"
    assert pc.machine_targets("day", "pcie01")[2] == GpuTarget.whole()
    assert GpuTarget.mig_counts({"1g.6gb": 4}).to_config() == {"mig": {"1g.6gb": 4}}
