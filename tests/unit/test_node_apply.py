"""node apply / assert / export against simulated GPUs (no Slurm needed)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.config.machines import find_machine
from slurm_gpupool.errors import ConfigError
from slurm_gpupool.hw import open_backend
from slurm_gpupool.hw.sim import inject
from slurm_gpupool.hw.sim.state import SimStore, create_node_state
from slurm_gpupool.node.apply import ApplyReport, apply_node, assert_node
from slurm_gpupool.node.state import read_node_state

CONFIG = {
    "version": 1,
    "nodesets": {"dgx": {"nodes": "dgx1", "machine": "dgx-a100"}, "hgx": {"nodes": "hgx1", "machine": "hgx-h100"}},
    "layouts": {
        "day": {
            "dgx": {
                "0-3": {"mig": {"1g.5gb": 7}},
                "4-5": {"mig": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}},
                "6-7": "whole",
            },
            "hgx": {"0-3": {"mig": {"1g.10gb": 7}}, "4-5": {"mig": {"3g.40gb": 2}}, "6-7": {"shared": 4}},
        },
        "night": {"dgx": {"all": "whole"}, "hgx": {"all": "whole"}},
    },
}
MUTATING = (
    "nvmlDeviceSetMigMode",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlDeviceCreateGpuInstance",
    "nvmlGpuInstanceDestroy",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlComputeInstanceDestroy",
    "simGpuReset",
)


@pytest.fixture
def env(tmp_path: Path):
    sim = tmp_path / "sim"
    create_node_state(sim / "dgx1.json", "dgx1", find_machine("dgx-a100"))
    create_node_state(sim / "hgx1.json", "hgx1", find_machine("hgx-h100"))
    return sim, tmp_path / "state"


def calls(sim: Path, node: str) -> Counter:
    c = inject.call_counts(SimStore(sim / f"{node}.json"))
    return Counter({k: v for k, v in c.items() if k in MUTATING})


def do_apply(sim: Path, state: Path, node: str, layout: str, cfg: dict = CONFIG, **kw):
    with open_backend(node, sim) as b:
        return apply_node(b, parse_config(cfg, "test.yaml", Path(".")), layout, state / node, **kw)


def instances(sim: Path, node: str) -> list[list[tuple[str, int]]]:
    with open_backend(node, sim) as b:
        inv = b.inventory()
    return [sorted((gi.profile, gi.placement.start) for gi in g.instances) for g in inv.gpus]


def mig_modes(sim: Path, node: str) -> list[tuple[bool, bool]]:
    with open_backend(node, sim) as b:
        return [(g.mig_current, g.mig_pending) for g in b.inventory().gpus]


def test_second_apply_makes_zero_nvml_changes(env):
    sim, state = env
    first = do_apply(sim, state, "dgx1", "day")
    assert first.changed and calls(sim, "dgx1")["nvmlDeviceCreateGpuInstanceWithPlacement"] == 4 * 7 + 2 * 4
    before = calls(sim, "dgx1")
    second = do_apply(sim, state, "dgx1", "day")
    assert not second.changed and all(g.status == "unchanged" for g in second.gpus)
    assert calls(sim, "dgx1") == before


class CountingBackend:
    """The backend, counting its inventories (each one is ``nvidia-smi -q`` and ``mig -lgi
    -lci`` of every GPU: about 1,400 NVML calls on a DGX)."""

    def __init__(self, backend) -> None:
        self.backend, self.inventories = backend, 0

    def inventory(self):
        self.inventories += 1
        return self.backend.inventory()

    def __getattr__(self, name: str):
        return getattr(self.backend, name)


def counted_apply(sim: Path, state: Path, node: str, layout: str) -> tuple[ApplyReport, int]:
    with open_backend(node, sim) as b:
        counting = CountingBackend(b)
        report = apply_node(counting, parse_config(CONFIG, "test.yaml", Path(".")), layout, state / node)
    return report, counting.inventories


def test_a_node_that_matches_is_read_once_and_its_state_written_from_that_read(env):
    """cron and the repartitioner re-apply the layout a node already has, most of the time:
    one inventory, not one before and one after (the second read only follows a change)."""
    sim, state = env
    first, reads = counted_apply(sim, state, "hgx1", "day")
    assert first.changed and reads == 2  # a change: the GPUs are read again, to write what they became
    written = read_node_state(state / "hgx1")
    again, reads = counted_apply(sim, state, "hgx1", "day")
    assert not again.changed and reads == 1
    rewritten = read_node_state(state / "hgx1")
    drop = ("applied_at", "applied_at_epoch")
    assert {k: v for k, v in rewritten.items() if k not in drop} == {k: v for k, v in written.items() if k not in drop}
    assert rewritten["status"] == "ok" and rewritten["layout"] == "day"


def test_an_apply_waits_for_no_gpu_read_when_another_holds_the_node(env):
    """The lock comes before the read, so what an apply reads is what it writes back."""
    from slurm_gpupool.errors import BusyError
    from slurm_gpupool.node.apply import node_lock

    sim, state = env
    with node_lock(state / "dgx1"), open_backend("dgx1", sim) as b:
        counting = CountingBackend(b)
        with pytest.raises(BusyError, match="another `gpupool node apply` is running"):
            apply_node(counting, parse_config(CONFIG, "test.yaml", Path(".")), "day", state / "dgx1")
    assert counting.inventories == 0
    assert do_apply(sim, state, "dgx1", "day").changed  # the lock is free again


def test_changing_one_gpu_touches_only_that_gpu(env):
    sim, state = env
    do_apply(sim, state, "dgx1", "day")
    with open_backend("dgx1", sim) as b:
        uuids_before = [[d.uuid for d in g.mig_devices] for g in b.inventory().gpus]
    cfg = copy.deepcopy(CONFIG)
    cfg["layouts"]["day"]["dgx"] = {
        "0-3": {"mig": {"1g.5gb": 7}},
        "4": {"mig": {"3g.20gb": 1, "1g.5gb": 4}},
        "5": {"mig": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}},
        "6-7": "whole",
    }
    before = calls(sim, "dgx1")
    report = do_apply(sim, state, "dgx1", "day", cfg)
    assert [g.index for g in report.gpus if g.status == "changed"] == [4]
    with open_backend("dgx1", sim) as b:
        uuids_after = [[d.uuid for d in g.mig_devices] for g in b.inventory().gpus]
    assert [u for i, u in enumerate(uuids_after) if i != 4] == [u for i, u in enumerate(uuids_before) if i != 4]
    delta = calls(sim, "dgx1") - before
    # the 3g and the two 1g stay; only the 2g goes and two 1g come
    assert delta == Counter(
        {
            "nvmlComputeInstanceDestroy": 1,
            "nvmlGpuInstanceDestroy": 1,
            "nvmlDeviceCreateGpuInstanceWithPlacement": 2,
            "nvmlGpuInstanceCreateComputeInstance": 2,
        }
    )
    kept = set(uuids_before[4]) & set(uuids_after[4])
    assert len(kept) == 3


@pytest.mark.parametrize("node", ["dgx1", "hgx1"])
def test_day_night_day_cycle(env, node):
    sim, state = env
    do_apply(sim, state, node, "day")
    day = instances(sim, node)
    do_apply(sim, state, node, "night")
    assert instances(sim, node) == [[]] * 8
    assert mig_modes(sim, node) == [(False, False)] * 8
    do_apply(sim, state, node, "day")
    assert instances(sim, node) == day
    counts = [Counter(p for p, _ in g) for g in day]
    if node == "dgx1":
        assert counts[:4] == [Counter({"1g.5gb": 7})] * 4
        assert counts[4] == Counter({"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2})
    else:
        assert counts[4:6] == [Counter({"3g.40gb": 2})] * 2 and counts[6:] == [Counter()] * 2
    st = read_node_state(state / node)
    assert st["layout"] == "day" and st["status"] == "ok"
    assert [g["mode"] for g in st["gpus"]][6:] == (["whole"] * 2 if node == "dgx1" else ["shared"] * 2)
    for g in st["gpus"]:
        for inst in g["instances"]:
            assert inst["uuid"].startswith("MIG-") and len(inst["device_files"]) == 3


def test_ampere_needs_a_reset_hopper_does_not(env):
    sim, state = env
    do_apply(sim, state, "dgx1", "day")
    do_apply(sim, state, "hgx1", "day")
    assert calls(sim, "dgx1")["simGpuReset"] == 6  # persistenced holds Ampere GPUs
    assert calls(sim, "hgx1")["simGpuReset"] == 0


def test_dry_run_changes_nothing_and_names_nvml_calls(env):
    sim, state = env
    report = do_apply(sim, state, "hgx1", "day", dry_run=True)
    assert calls(sim, "hgx1") == Counter()
    ops = report.gpus[4].ops
    assert ops[0].startswith("nvmlDeviceSetMigMode(GPU 4, NVML_DEVICE_MIG_ENABLE)")
    assert "nvmlDeviceCreateGpuInstanceWithPlacement(GPU 4, profile 9 3g.40gb, start 0 size 4)" in ops
    assert "nvmlDeviceCreateGpuInstanceWithPlacement(GPU 4, profile 9 3g.40gb, start 4 size 4)" in ops
    assert read_node_state(state / "hgx1") is None


def test_injected_failure_rolls_the_gpu_back(env):
    sim, state = env
    do_apply(sim, state, "dgx1", "day")
    before = instances(sim, "dgx1")
    store = SimStore(sim / "dgx1.json")
    # night: GPU 5 fails on its 2nd GI destroy (after its CIs are gone)
    inject.add_fault(store, "nvmlGpuInstanceDestroy", 999, gpu=5, after=1)
    report = do_apply(sim, state, "dgx1", "night")
    assert report.failed
    statuses = {g.index: g.status for g in report.gpus}
    assert statuses[5] == "rolled-back" and statuses[0] == "changed"
    after = instances(sim, "dgx1")
    assert after[5] == before[5]  # same profiles at the same placements
    assert after[0] == []
    st = read_node_state(state / "dgx1")
    assert st["status"] == "rolled-back" and "GPU 5" in st["message"]
    assert st["gpus"][5]["matches_layout"] is False and len(st["gpus"][5]["instances"]) == 4
    assert st["gpus"][0]["mode"] == "whole"


def cli(sim: Path, state: Path, cfg_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SLURM_GPUPOOL_SIM_DIR": str(sim),
        "SLURM_GPUPOOL_STATE_DIR": str(state / "{node}"),
        "SLURM_GPUPOOL_CONFIG": str(cfg_path),
    }
    return subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.cli.main", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_busy_gpu_is_refused_with_75_and_pids(env, tmp_path: Path):
    sim, state = env
    cfg_path = tmp_path / "pool.yaml"
    cfg_path.write_text(yaml.safe_dump(CONFIG))
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        inject.add_process(SimStore(sim / "hgx1.json"), 5, sleeper.pid, 1000)
        res = cli(sim, state, cfg_path, "--node", "hgx1", "node", "apply", "day")
        assert res.returncode == 75, res.stderr
        assert f"GPU 5: pids {sleeper.pid}" in res.stderr and "Traceback" not in res.stderr
        assert calls(sim, "hgx1") == Counter()  # nothing was touched
    finally:
        sleeper.kill()
        sleeper.wait()
    res = cli(sim, state, cfg_path, "--node", "hgx1", "node", "apply", "day")  # the process is gone
    assert res.returncode == 0, res.stderr


def test_recorded_layout_comes_back_after_a_reboot(env, tmp_path: Path):
    """What the boot unit runs before slurmd: `node apply --recorded [--fallback L]`."""
    sim, state = env
    cfg_path = tmp_path / "pool.yaml"
    cfg_path.write_text(yaml.safe_dump(CONFIG))
    res = cli(sim, state, cfg_path, "--node", "dgx1", "node", "apply", "--recorded")
    assert res.returncode == 0 and "GPUs left as they are" in res.stdout, res.stderr
    assert calls(sim, "dgx1") == Counter()  # nothing recorded, no fallback: untouched

    assert cli(sim, state, cfg_path, "--node", "dgx1", "node", "apply", "day").returncode == 0
    inject.reboot(SimStore(sim / "dgx1.json"))
    lost = cli(sim, state, cfg_path, "--node", "dgx1", "node", "assert", "day")
    assert lost.returncode == 1 and "GPU 0" in lost.stdout  # MIG mode kept (Ampere), instances gone
    res = cli(sim, state, cfg_path, "--node", "dgx1", "node", "apply", "--recorded")
    assert res.returncode == 0 and "applying the recorded layout day" in res.stderr, res.stderr
    assert cli(sim, state, cfg_path, "--node", "dgx1", "node", "assert", "day").returncode == 0

    res = cli(sim, state, cfg_path, "--node", "hgx1", "node", "apply", "--recorded", "--fallback", "day")
    assert res.returncode == 0 and "applying the fallback layout day" in res.stderr, res.stderr
    assert read_node_state(state / "hgx1")["layout"] == "day"

    # a state naming a layout the config dropped, or a corrupt state: the fallback, else a clear error
    state_path = state / "hgx1" / "node-state.json"
    renamed = json.loads(state_path.read_text())
    state_path.write_text(json.dumps({**renamed, "layout": "old-day"}))
    res = cli(sim, state, cfg_path, "--node", "hgx1", "node", "apply", "--recorded")
    assert res.returncode == 78 and "the recorded layout 'old-day' is not in the pool config" in res.stderr
    res = cli(sim, state, cfg_path, "--node", "hgx1", "node", "apply", "--recorded", "--fallback", "night")
    assert res.returncode == 0 and "warning: the recorded layout 'old-day'" in res.stderr, res.stderr
    assert "applying the fallback layout night" in res.stderr
    state_path.write_text("{not json")
    res = cli(sim, state, cfg_path, "--node", "hgx1", "node", "apply", "--recorded")
    assert res.returncode == 1 and f"node state {state_path}" in res.stderr and "Traceback" not in res.stderr
    res = cli(sim, state, cfg_path, "--node", "hgx1", "node", "apply", "--recorded", "--fallback", "day")
    assert res.returncode == 0 and "applying the fallback layout day" in res.stderr, res.stderr

    # nothing recorded, --json: still JSON
    res = cli(sim, state, cfg_path, "--node", "nonode", "node", "apply", "--recorded", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["layout"] is None

    for bad in (["apply"], ["apply", "day", "--recorded"], ["apply", "day", "--fallback", "night"]):
        res = cli(sim, state, cfg_path, "--node", "dgx1", "node", *bad)
        assert res.returncode == 2 and "gpupool: node apply" in res.stderr and "Traceback" not in res.stderr


def test_assert_export_and_round_trip_through_the_cli(env, tmp_path: Path):
    sim, state = env
    cfg_path = tmp_path / "pool.yaml"
    cfg_path.write_text(yaml.safe_dump(CONFIG))
    res = cli(sim, state, cfg_path, "--node", "hgx1", "node", "assert", "day")
    assert res.returncode == 1 and "GPU 0: is whole (MIG off), wants mig {1g.10gb: 7}" in res.stdout
    assert cli(sim, state, cfg_path, "--node", "hgx1", "node", "apply", "day").returncode == 0
    assert cli(sim, state, cfg_path, "--node", "hgx1", "node", "assert", "day").returncode == 0
    exported = cli(sim, state, cfg_path, "--node", "hgx1", "node", "export")
    assert exported.returncode == 0, exported.stderr
    data = yaml.safe_load(exported.stdout)
    assert data["layouts"]["day"]["hgx1"] == {
        "0-3": {"mig": {"1g.10gb": 7}},
        "4-5": {"mig": {"3g.40gb": 2}},
        "6-7": {"shared": 4},
    }
    exp_path = tmp_path / "exported.yaml"
    exp_path.write_text(exported.stdout)
    before = calls(sim, "hgx1")
    res = cli(sim, state, exp_path, "--node", "hgx1", "node", "apply", "day", "--json")
    assert res.returncode == 0, res.stderr
    assert all(g["status"] == "unchanged" for g in json.loads(res.stdout)["gpus"])
    assert calls(sim, "hgx1") == before


def test_assert_lists_differences(env):
    sim, state = env
    with open_backend("dgx1", sim) as b:
        diffs = assert_node(parse_config(CONFIG, "t.yaml", Path(".")), "day", b.inventory())
    assert len(diffs) == 6 and diffs[0] == "GPU 0: is whole (MIG off), wants mig {1g.5gb: 7}"


def test_a_gpu_the_catalog_does_not_know_is_named_with_its_pci_id_before_anything_changes(env, monkeypatch, capsys):
    """A GPU NVML reports that neither the catalog nor gpu_models knows (a newer product):
    node apply refuses it with its name, PCI id and how to describe it (78) before touching
    any GPU. A MIG layout used to end in an internal error in the planner; a whole one failed
    only after the changes, when the node's state was written."""
    sim, state = env
    from slurm_gpupool.cli.main import main
    from slurm_gpupool.core.mig import catalog

    do_apply(sim, state, "dgx1", "day")
    real = catalog.detect
    monkeypatch.setattr(catalog, "detect", lambda name, dev: None if dev == 0x20B0 else real(name, dev))
    with open_backend("dgx1", sim) as b:
        assert {g.model for g in b.inventory().gpus} == {None}
    cfg_path = state.parent / "pool.yaml"
    cfg_path.write_text(yaml.safe_dump(CONFIG))
    monkeypatch.setenv("SLURM_GPUPOOL_SIM_DIR", str(sim))
    monkeypatch.setenv("SLURM_GPUPOOL_STATE_DIR", str(state / "{node}"))
    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(cfg_path))
    before = calls(sim, "dgx1")
    for layout in ("night", "day"):
        capsys.readouterr()
        code = main(["--node", "dgx1", "node", "apply", layout])
        err = capsys.readouterr().err
        assert code == 78, err
        assert "dgx1: GPU 0 (00000000:07:00.0)" in err and "PCI device id 10de:20b0" in err, err
        assert "hint:" in err and "gpu_models" in err and "Traceback" not in err
        assert calls(sim, "dgx1") == before  # nothing touched
    with pytest.raises(ConfigError, match="10de:20b0"), open_backend("dgx1", sim) as b:
        assert_node(parse_config(CONFIG, "test.yaml", Path(".")), "day", b.inventory())


def test_a_backend_whose_nvml_init_fails_leaves_pynvml_as_it_found_it(env):
    """The integration tests read nodes in their own long-lived process (``node_matches``): a
    backend that could not start must not leave its simulated library beneath pynvml."""
    import pynvml

    from slurm_gpupool.errors import GpuOperationError

    sim, _ = env
    inject.add_fault(SimStore(sim / "dgx1.json"), "nvmlInitWithFlags", 999)  # NVML_ERROR_UNKNOWN
    before = pynvml.nvmlLib
    with pytest.raises(GpuOperationError, match="initialise NVML on dgx1"):
        open_backend("dgx1", sim)
    assert pynvml.nvmlLib is before
    assert len(instances(sim, "hgx1")) == 8  # the next backend reads its node
