"""Slurm's GPU indices → the GPUs and MIG devices behind them (pure, stdlib only).

``node-state.json`` (written by ``gpupool node apply``) lists slurmd's device
order in ``slurm_devices``: entry k is what index k of ``SLURM_JOB_GPUS`` /
``SLURM_STEP_GPUS`` means on this node.
"""

from __future__ import annotations

import re

from slurm_gpupool.hooks.runtime import HookError

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


# one entry of SLURM_TRES_PER_NODE: "gres/gpu:a100:2" (23.11+), "gpu:1g.5gb:1" or "gres:gpu:2" (22.05)
_TRES = re.compile(r"(?:gres[/:])?([A-Za-z0-9_]+)(?::([A-Za-z0-9_.\-]+))?(?::(\d+))?")


def devices_for(state: dict[str, Any], indices: list[int]) -> list[dict[str, Any]]:
    """The node-state entries for Slurm's indices, in the order given."""
    table = state.get("slurm_devices")
    if not isinstance(table, list):
        raise HookError("node state has no slurm_devices table (run `gpupool node apply`)")
    out = []
    for i in indices:
        if not 0 <= i < len(table) or table[i].get("index") != i:
            raise HookError(f"GPU index {i} is not in the node's GRES table ({len(table)} devices)")
        out.append(table[i])
    return out


def gpus_of(state: dict[str, Any], devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The physical GPUs (node-state entries) behind a set of devices, by index."""
    wanted = sorted({d["gpu"] for d in devices})
    by_index = {g["index"]: g for g in state.get("gpus", [])}
    return [by_index[i] for i in wanted if i in by_index]


def visible_devices(devices: list[dict[str, Any]]) -> str:
    """``CUDA_VISIBLE_DEVICES``: MIG UUIDs for MIG devices, GPU UUIDs otherwise.

    UUIDs are right with and without device cgroups, unlike Slurm's indices, which
    count MIG records and whole GPUs together.
    """
    return ",".join(d.get("mig_uuid") or d["gpu_uuid"] for d in devices)


def requested_gpu_types(tres_per_node: str | None) -> set[str] | None:
    """The GPU types a job asked for, from ``SLURM_TRES_PER_NODE`` (job-controlled, so
    only ever used to narrow the job's own devices); None: untyped, absent or unreadable."""
    if not tres_per_node or len(tres_per_node) > 1000:
        return None
    types: set[str] = set()
    for entry in tres_per_node.split(","):
        m = _TRES.fullmatch(entry.strip())
        if m is None:
            return None
        name, typ, count = m.groups()
        if name != "gpu":
            continue
        if typ is None or (typ.isdigit() and count is None):
            return None  # gpu or gpu:N: any type will do
        types.add(typ)
    return types or None


def for_request(devices: list[dict[str, Any]], types: set[str] | None) -> list[dict[str, Any]]:
    """The devices CUDA should see, in order.

    A job whose allocation mixes GPU types (``--exclusive`` gets every GPU of the node:
    36 MIG devices and 2 whole A100s by day) would otherwise see a MIG device first, and
    CUDA uses only the first MIG device of a list.  A typed request keeps just its types;
    an untyped one sees the whole GPUs first.
    """
    if len({d["type"] for d in devices}) <= 1:
        return devices
    chosen = [d for d in devices if d["type"] in types] if types else []
    return chosen or sorted(devices, key=lambda d: "mig_uuid" in d)
