"""Where the GRES generator's view of each node comes from.

* **planned**: the config's layout and the node set's machine description, with
  placements from the planner.  GPU-instance IDs are predicted with the slot
  scheme recent drivers use; the live render is authoritative.
* **live**: the node state written by ``node apply`` (``node-state.json``).
"""

from __future__ import annotations

from pathlib import Path

from slurm_gpupool.config import PoolConfig
from slurm_gpupool.core.catalog import get_model, gi_slot_id
from slurm_gpupool.core.gres import GresGpu, GresNode, MigInstance
from slurm_gpupool.core.layouts import MIG
from slurm_gpupool.core.planner import plan_gpu
from slurm_gpupool.errors import ConfigError, StateError
from slurm_gpupool.machines import MachineSpec
from slurm_gpupool.ops.node_state import controller_copy_dir, gres_gpus, newest_node_state, state_file


def _cpu_layout(cfg: PoolConfig, node: str) -> MachineSpec | None:
    return cfg.nodeset_of(node).machine


def _node(
    cfg: PoolConfig,
    node: str,
    gpus: tuple[GresGpu, ...],
    links: tuple[tuple[int, ...], ...],
    switch: tuple[int, ...],
    layout: str | None,
) -> GresNode:
    m = _cpu_layout(cfg, node)
    params = cfg.slurm.params_for(node)
    if m is None and not {k.lower() for k, _ in params} & {"sockets", "cpus"}:
        raise ConfigError(
            cfg.source,
            f"nodesets.{cfg.nodeset_of(node).name}",
            f"node {node}: the NodeName line needs a CPU layout",
            hint="give the node set a machine: description, or slurm.node_params with `slurmd -C` values",
        )
    return GresNode(
        name=node,
        gpus=gpus,
        links=links,
        nvswitch_links=switch,
        sockets=m.sockets if m else 0,
        cores_per_socket=m.cores_per_socket if m else 0,
        threads_per_core=m.threads_per_core if m else 0,
        memory_mib=m.memory_mib if m else None,
        layout=layout,
        machine=m.name if m else None,
        params=params,
    )


def planned_node(cfg: PoolConfig, layout: str, node: str) -> GresNode:
    """A node as it will be after ``node apply LAYOUT`` (from its machine description)."""
    m = _cpu_layout(cfg, node)
    targets = cfg.machine_targets(layout, node)
    assert m is not None  # machine_targets insists
    gpus = []
    for spec, t in zip(m.gpus, targets):
        model = get_model(spec.model)
        instances: tuple[MigInstance, ...] = ()
        if t.mode == MIG:
            assert model.mig is not None
            plan = plan_gpu(model, t.counts)
            insts = [
                MigInstance(i.profile, gi_slot_id(model.mig, i.placement.start, i.placement.size), 0)
                for i in plan.instances
            ]
            instances = tuple(sorted(insts, key=lambda x: (x.gi_id, x.ci_id)))
        gpus.append(GresGpu(spec.index, spec.minor, spec.model, t.mode, t.shares, spec.cpus, instances))
    n = len(m.gpus)
    links = tuple(tuple(m.nvlinks(a, b) for b in range(n)) for a in range(n))
    switch = tuple(m.nvswitch_links_per_gpu if m.interconnect == "nvswitch" else 0 for _ in range(n))
    return _node(cfg, node, tuple(gpus), links, switch, layout)


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
    return _node(cfg, node, gpus, links, tuple(topo["nvswitch_links"]), st.get("layout"))


def select_nodes(cfg: PoolConfig, hostlist: str | None) -> list[str]:
    if not hostlist:
        return cfg.all_nodes()
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    try:
        wanted = set(NodeSet(hostlist))
    except NodeSetParseError as e:
        raise ConfigError("--nodes", "", f"not a hostlist: {hostlist} ({e})") from None
    unknown = wanted - set(cfg.all_nodes())
    if unknown:
        raise ConfigError(cfg.source, "nodesets", f"nodes {', '.join(sorted(unknown))} are in no node set")
    return sorted(wanted)


def state_paths(cfg: PoolConfig, nodes: list[str]) -> dict[str, Path]:
    return {n: state_file(cfg.paths.for_node("state_dir", n)) for n in nodes}
