"""GPU boundary: open the backend for this node, real NVML or simulated.

The simulation is chosen by ``SLURM_GPUPOOL_SIM_DIR`` (or ``sim_dir``): the node's
GPUs are then ``<sim_dir>/<node>.json``.  Node name: argument, else
``SLURMD_NODENAME`` (set by slurmd for hooks), else the short hostname.
"""

from __future__ import annotations

import os
import re

from slurm_gpupool.errors import NvmlUnavailableError, UsageError

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from pathlib import Path

    from slurm_gpupool.hw.backend import GpuBackend


SIM_DIR_ENV = "SLURM_GPUPOOL_SIM_DIR"
_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def node_name(node: str | None = None) -> str:
    name = node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    if not _NODE_RE.match(name):
        raise UsageError(f"node name {name!r}", "not a valid host name")
    return name


def sim_state_path(sim_dir: str | Path, node: str) -> str:
    """Where a simulated node's GPUs live; ``node`` is validated, never a path."""
    return os.path.join(str(sim_dir), f"{node_name(node)}.json")


def open_backend(node: str | None = None, sim_dir: str | Path | None = None) -> GpuBackend:
    """The GPU backend for a node: simulated if a sim dir is configured, else NVML."""
    from slurm_gpupool.hw.nvml import NvmlBackend

    name = node_name(node)
    sim = sim_dir or os.environ.get(SIM_DIR_ENV)
    if not sim:
        return NvmlBackend(name)
    from slurm_gpupool.hw.sim.lib import SimNvmlLibrary
    from slurm_gpupool.hw.sim.state import SimStore

    store = SimStore(sim_state_path(sim, name))
    if not store.exists():
        raise NvmlUnavailableError(
            f"simulated GPUs of node {name}",
            f"no state file {store.path}",
            hint="start the sandbox (`gpupool sandbox up`) or create the node with `gpupool sim init`",
        )
    dev_root = store.read().get("dev_root", "/dev")
    return NvmlBackend(
        name,
        kind="sim",
        library=SimNvmlLibrary(store),
        dev_root=dev_root,
        reset=lambda index, _bus: _sim_reset(store, index),
    )


def _sim_reset(store: object, index: int) -> None:
    """``nvidia-smi --gpu-reset`` for a simulated GPU."""
    from slurm_gpupool.hw.sim import inject

    inject.reset_gpu(store, index)  # type: ignore[arg-type]
