"""A node's GRES view as its last ``node apply`` left it (``node-state.json``, or the controller's copy).

The live source of the GRES generator; planned views are ``pool/planned.py``."""

from __future__ import annotations

from pathlib import Path

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.gres.records import GresNode
from slurm_gpupool.errors import StateError
from slurm_gpupool.node.state import controller_copy_dir, gres_gpus, newest_node_state, state_file
from slurm_gpupool.pool.planned import gres_node


def live_ids(cfg: PoolConfig, node: str) -> dict[tuple[int, str, int], tuple[int, int, int, int]]:
    """(GPU, profile, placement start) → (MIG index, GI id, CI id, MiB) of the node's instances."""
    st = newest_node_state(
        cfg.paths.for_node("state_dir", node),
        controller_copy_dir(cfg.paths.for_node("controller_dir", node), node),
    )
    out = {}
    for g in st["gpus"] if st else ():
        for i in g["instances"]:
            key = (g["index"], i["profile"], i["placement"]["start"])
            out[key] = (i["mig_index"], i["gi_id"], i["ci_id"], i.get("memory_mib") or 0)
    return out


def live_node(cfg: PoolConfig, node: str) -> GresNode:
    """A node as its last ``node apply`` left it (``node-state.json``, or the controller's copy)."""
    state_dir = cfg.paths.for_node("state_dir", node)
    st = newest_node_state(state_dir, controller_copy_dir(cfg.paths.for_node("controller_dir", node), node))
    if st is None:
        raise StateError(
            f"node state of {node}",
            f"no {state_file(state_dir)}",
            hint=f"run `gpupool node apply LAYOUT` on {node} first (or render --planned)",
        )
    gpus = gres_gpus(st)
    topo = st["topology"]
    links = tuple(tuple(r) for r in topo["nvlinks"])
    return gres_node(cfg, node, gpus, links, tuple(topo["nvswitch_links"]), st.get("layout"))


def state_paths(cfg: PoolConfig, nodes: list[str]) -> dict[str, Path]:
    return {n: state_file(cfg.paths.for_node("state_dir", n)) for n in nodes}
