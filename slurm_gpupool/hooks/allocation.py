"""Slurm's GPU indices → the GPUs and MIG devices behind them (pure, stdlib only).

``node-state.json`` (written by ``gpupool node apply``) lists slurmd's device
order in ``slurm_devices``: entry k is what index k of ``SLURM_JOB_GPUS`` /
``SLURM_STEP_GPUS`` means on this node.
"""

from __future__ import annotations

from typing import Any

from slurm_gpupool.hooks.runtime import HookError


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
