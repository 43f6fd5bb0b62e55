"""``gpupool inventory`` against the simulation, and its error when NVML is absent."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_gpupool.config.machines import find_machine
from slurm_gpupool.hw import open_backend
from slurm_gpupool.hw.sim.state import create_node_state
from slurm_gpupool.model import Placement


def gpupool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def sim_dir(tmp_path: Path) -> Path:
    create_node_state(tmp_path / "dgx1.json", "dgx1", find_machine("dgx1-v100"))
    create_node_state(tmp_path / "a30.json", "a30", find_machine("pcie-a30"))
    return tmp_path


def test_topology_matrix_in_nvidia_smi_notation(sim_dir: Path):
    res = gpupool("--sim-dir", str(sim_dir), "--node", "dgx1", "inventory")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    row0 = next(line for line in lines if line.startswith("GPU0  X"))
    assert row0.split()[:9] == ["GPU0", "X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"]
    assert "0-19,40-59" in row0


def test_json_lists_instances_with_uuids_and_device_files(sim_dir: Path):
    with open_backend("a30", sim_dir) as b:
        b.set_mig_mode(2, True)
        b.reset_gpu(2)  # Ampere with persistenced: the mode change waits for a reset
        gi = b.create_gpu_instance(2, 5, Placement(2, 2))  # 2g.12gb at 2
        ci, uuid = b.create_compute_instance(2, gi, 2)
    res = gpupool("--sim-dir", str(sim_dir), "--node", "a30", "inventory", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    gpu = data["gpus"][2]
    assert gpu["mig_current"] and gpu["model"] == "A30"
    (inst,) = gpu["instances"]
    (dev,) = inst["devices"]
    assert (inst["profile"], inst["placement"]) == ("2g.12gb", {"start": 2, "size": 2})
    assert dev["uuid"] == uuid and dev["uuid"].startswith("MIG-")
    gi_minor = 3 + 135 * 2 + 9 * gi
    assert dev["device_files"] == [
        "/dev/nvidia2",
        f"/dev/nvidia-caps/nvidia-cap{gi_minor}",
        f"/dev/nvidia-caps/nvidia-cap{gi_minor + 1 + ci}",
    ]
    assert data["topology"]["matrix"][0][1] == "NODE" and data["topology"]["matrix"][0][2] == "SYS"
    table = gpupool("--sim-dir", str(sim_dir), "--node", "a30", "inventory").stdout
    assert uuid in table and "2g.12gb" in table


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has NVML")
def test_without_nvml_a_clear_error_and_exit_69():
    env = {k: v for k, v in os.environ.items() if k != "SLURM_GPUPOOL_SIM_DIR"}
    res = subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.cli.main", "inventory"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert res.returncode == 69
    assert res.stderr.startswith("gpupool: ") and "NVML" in res.stderr and "hint:" in res.stderr
    assert "Traceback" not in res.stderr


def test_unknown_sim_node_is_69_not_a_traceback(tmp_path: Path):
    res = gpupool("--sim-dir", str(tmp_path), "--node", "ghost", "inventory")
    assert res.returncode == 69 and "no state file" in res.stderr and "Traceback" not in res.stderr


def test_newer_profiles_are_seen_with_an_older_nvidia_ml_py(tmp_path: Path, monkeypatch):
    """The review: with a binding whose NVML_GPU_INSTANCE_PROFILE_COUNT predates +gfx/-me/+me.all
    (enums 0xA-0x10), such instances were never listed; and the board is told by its PCI id."""
    import pynvml

    create_node_state(tmp_path / "rtx.json", "rtx", find_machine("rtx-pro-6000-server"))
    monkeypatch.setattr(pynvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 9)
    with open_backend("rtx", tmp_path) as b:
        b.set_mig_mode(0, True)
        gi = b.create_gpu_instance(0, 65, Placement(0, 3))  # 1g.24gb+me.all at 0
        b.create_compute_instance(0, gi, 1)
        g = b.inventory().gpus[0]
    assert g.model == "RTX-PRO-6000" and g.pci_device_id == 0x2BB5
    assert [d.profile for d in g.mig_devices] == ["1g.24gb+me.all"]
