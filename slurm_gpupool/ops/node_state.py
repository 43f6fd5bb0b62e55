"""The node-local state file written by ``node apply`` (``<state_dir>/node-state.json``).

It records the layout, when it was applied, and per GPU its mode, shares and
MIG instances with placements, UUIDs and device files.  The GRES generator
(live render) and the job hooks read it; the hooks parse it with ``json`` only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slurm_gpupool.atomic import write_json_atomic
from slurm_gpupool.core.layouts import MIG, SHARED, WHOLE, GpuTarget
from slurm_gpupool.errors import StateError
from slurm_gpupool.model import NodeInventory

SCHEMA = 1
FILE_NAME = "node-state.json"


def state_file(state_dir: Path) -> Path:
    return state_dir / FILE_NAME


def read_node_state(state_dir: Path) -> dict[str, Any] | None:
    """The recorded state, None if there is none; StateError if it is corrupt."""
    path = state_file(state_dir)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise StateError(f"node state {path}", f"unreadable: {e}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise StateError(f"node state {path}", f"unknown schema (expected {SCHEMA})")
    return data


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
                "minor": g.minor,
                "numa_node": g.numa_node,
                "cpus": list(g.cpus),
                "mode": mode,
                "shares": shares if mode == SHARED else 0,
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
