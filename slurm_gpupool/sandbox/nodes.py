"""The emulated GPU nodes: simulated GPUs, their device files, and a first MIG layout.

What a real node has before its slurmd starts: GPUs (``sim/<node>.json`` stands in for
the driver), ``/dev/nvidia*`` (``mknod``) and ``/proc/driver/nvidia-caps/mig-minors``
under ``nodes/<node>/``, and a layout applied (``gpupool node apply``) so that
``gpupool gres install`` has live GPUs to describe.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from typing import Any

from slurm_gpupool.errors import StateError, UsageError
from slurm_gpupool.sandbox import devices
from slurm_gpupool.sandbox.paths import SandboxPaths
from slurm_gpupool.sandbox.plan import NodePlan


def prepare_nodes(paths: SandboxPaths, plans: list[NodePlan]) -> None:
    """Simulated GPU state, device files and mig-minors of each node (and its slurmd spool)."""

    from slurm_gpupool.hw.sim.state import create_node_state

    for plan in plans:
        state_path = paths.sim_state(plan.name)
        dev = paths.node_dev(plan.name)
        overwrite = False
        if state_path.exists():
            try:
                overwrite = json.loads(state_path.read_text()).get("machine") != plan.machine.name
            except (OSError, ValueError):
                overwrite = True
        if overwrite:  # the node now plays another machine: start it afresh
            shutil.rmtree(paths.nodes / plan.name, ignore_errors=True)
        create_node_state(state_path, plan.name, plan.machine, overwrite=overwrite, dev_root=str(dev))
        (paths.spool / f"slurmd-{plan.name}").mkdir(parents=True, exist_ok=True)
        devices.ensure_char_devices(dev, devices.device_plan(g.minor for g in plan.machine.gpus))
        devices.ensure_mig_minors(paths.node_proc(plan.name))


def initial_layout(cfg: Any, requested: str | None) -> str:
    """The layout new GPUs get: the one asked for, else the schedule's default, else the first."""
    if requested:
        return requested
    if cfg.schedule is not None:
        return str(cfg.schedule.default)
    return str(cfg.layout_names()[0])


def apply_initial_layout(
    paths: SandboxPaths, cfg: Any, plans: list[NodePlan], layout: str, progress: Callable[[str], None]
) -> None:
    """`gpupool node apply` on nodes that have no node state yet (fresh GPUs).  Its modules
    are imported here: `sandbox start|stop|restart`, which the repartitioner runs as its
    `systemctl`, need none of them."""
    from slurm_gpupool.hw import open_backend
    from slurm_gpupool.node.apply import apply_node
    from slurm_gpupool.node.state import state_file

    for plan in plans:
        state_dir = cfg.paths.for_node("state_dir", plan.name)
        if state_file(state_dir).exists():
            continue
        if not cfg.covers(layout, plan.name):
            raise UsageError(f"sandbox layout {layout}", f"does not cover node {plan.name}")
        progress(f"{plan.name}: node apply {layout}")
        with open_backend(plan.name, paths.sim) as backend:
            report = apply_node(backend, cfg, layout, state_dir)
        if report.failed:
            raise StateError(f"sandbox node {plan.name}", f"initial `node apply {layout}` failed")
