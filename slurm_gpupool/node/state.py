"""The node-local state file written by ``node apply`` (``<state_dir>/node-state.json``).

It records the layout, when it was applied, and per GPU its mode, shares and
MIG instances with placements, UUIDs and device files.  The GRES generator
(live render) and the job hooks read it; the hooks parse it with ``json`` only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slurm_gpupool.core.gres.records import GresGpu, MigInstance, device_order
from slurm_gpupool.core.mig.catalog import get_model, identify
from slurm_gpupool.core.mig.layouts import MIG, SHARED, WHOLE, GpuTarget
from slurm_gpupool.model import NodeInventory
from slurm_gpupool.util.atomic import write_json_atomic
from slurm_gpupool.util.records import read_record

SCHEMA = 1
FILE_NAME = "node-state.json"


def state_file(state_dir: Path) -> Path:
    return state_dir / FILE_NAME


def read_node_state(state_dir: Path) -> dict[str, Any] | None:
    """The recorded state, None if there is none; StateError if it is corrupt."""
    return read_record(state_file(state_dir), "node state", SCHEMA)


def build_node_state(
    inv: NodeInventory,
    layout: str | None,
    targets: Sequence[GpuTarget | None],
    status: str,
    message: str = "",
) -> dict[str, Any]:
    """State for the GPUs as they are; ``targets[i]`` is None where GPU i missed its target."""
    gpus = []
    for g, t in zip(inv.gpus, targets):
        if t is not None:
            mode, shares = t.mode, t.shares
        else:
            mode, shares = (MIG if g.mig_current else WHOLE), 0
        gpus.append(
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "model": g.model,
                "pci_bus_id": g.pci_bus_id,
                "pci_device_id": g.pci_device_id,
                "minor": g.minor,
                "numa_node": g.numa_node,
                "cpus": list(g.cpus),
                "memory_mib": g.memory_mib,
                "mode": mode,
                "shares": shares if mode in (SHARED, MIG) else 0,  # MIG: shards on each MIG device
                "matches_layout": t is not None,
                "mig_current": g.mig_current,
                "mig_pending": g.mig_pending,
                "instances": [
                    {
                        "profile": d.profile,
                        "profile_id": d.profile_id,
                        "placement": {"start": d.placement.start, "size": d.placement.size},
                        "gi_id": d.gi_id,
                        "ci_id": d.ci_id,
                        "uuid": d.uuid,
                        "mig_index": d.mig_index,
                        "memory_mib": d.memory_mib,
                        "device_files": list(d.device_files),
                    }
                    for d in g.mig_devices
                ],
            }
        )
    return {
        "schema": SCHEMA,
        "node": inv.node,
        "backend": inv.backend,
        "layout": layout,
        "status": status,
        "message": message,
        "applied_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "applied_at_epoch": int(time.time()),
        "driver_version": inv.driver_version,
        "gpus": gpus,
        "topology": {
            "nvlinks": [list(r) for r in inv.topology.nvlinks],
            "nvswitch_links": list(inv.topology.nvswitch_links),
            "pcie": [list(r) for r in inv.topology.pcie],
        },
    }


def write_node_state(state_dir: Path, state: dict[str, Any]) -> Path:
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_file(state_dir)
    write_json_atomic(path, state)
    return path


def controller_copy_dir(controller_dir: str | Path, node: str) -> Path:
    """Where the controller keeps a node's state, as the repartitioner received it through srun."""
    return Path(controller_dir) / "nodes" / node


def newest_node_state(own_dir: Path, copy_dir: Path) -> dict[str, Any] | None:
    """The node's own state file or the controller's copy, whichever was applied last.

    On a controller the node's own file is not there; in the sandbox (one host)
    both are, and a hand-run `node apply` is newer than the repartitioner's copy."""
    own, copy = read_node_state(own_dir), read_node_state(copy_dir)
    if own is None or copy is None:
        return own or copy
    return copy if copy.get("applied_at_epoch", 0) > own.get("applied_at_epoch", 0) else own


def gres_gpus(state: dict[str, Any]) -> tuple[GresGpu, ...]:
    """The GPUs of a node state as the GRES generator sees them."""
    gpus = []
    for g in state["gpus"]:
        # a state written before the catalog knew the GPU: identify it now, or say clearly what it is
        model = (
            g.get("model")
            or identify(
                str(g.get("name")), int(g.get("pci_device_id") or 0), f"GPU {g['index']} of {state.get('node')}"
            ).key
        )
        insts = sorted(g["instances"], key=lambda i: i["mig_index"])
        gpus.append(
            GresGpu(
                g["index"],
                g["minor"],
                model,
                g["mode"],
                g.get("shares", 0),
                tuple(g.get("cpus", ())),
                tuple(MigInstance(i["profile"], i["gi_id"], i["ci_id"], i.get("memory_mib") or 0) for i in insts),
                str(g.get("name") or ""),
            )
        )
    return tuple(gpus)


def add_slurm_devices(state: dict[str, Any], naming: str, autodetect: bool) -> dict[str, Any]:
    """Record slurmd's device order: entry k is what index k of ``SLURM_JOB_GPUS`` means.

    The job hooks read this to turn Slurm's indices into GPUs and MIG UUIDs.
    """
    inst_by = {(g["index"], i["gi_id"], i["ci_id"]): i for g in state["gpus"] for i in g["instances"]}
    gpu_by = {g["index"]: g for g in state["gpus"]}
    devices = []
    for k, (g, inst, t) in enumerate(device_order(gres_gpus(state), naming, autodetect)):
        entry: dict[str, Any] = {
            "index": k,
            "gpu": g.index,
            "type": t,
            "kind": g.mode,
            "gpu_uuid": gpu_by[g.index]["uuid"],
        }
        if inst is not None:
            found = inst_by[(g.index, inst.gi_id, inst.ci_id)]
            entry["mig_uuid"], entry["profile"] = found["uuid"], found["profile"]
            entry["gi"] = inst.gi_id  # dcgm-exporter's GPU_I_ID: `gpupool metrics` labels slices by it
            if g.shares:  # a time-sliced MIG device: a shard device, its limits from the profile's memory
                entry["kind"], entry["shares"] = SHARED, g.shares
                entry["memory_mib"] = get_model(g.model).profile(inst.profile).memory_mib
        if g.mode == SHARED:
            entry["shares"] = g.shares
        devices.append(entry)
    state["slurm_devices"] = devices
    state["slurm_naming"] = naming
    return state
