"""Where the GRES generator's view of each node comes from.

* **planned**: the config's layout and the node set's machine description, with
  placements from the planner.  MIG device files name GPU- and compute-instance IDs
  that only the driver chooses (real transcripts contradict any slot scheme), so a
  planned render takes them from the node's state where the node already has those
  instances, and otherwise says it cannot name them.  ``simulated`` IDs (the
  simulator's scheme) are for simulated nodes and golden files only.
* **live**: the node state written by ``node apply`` (``node-state.json``).
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_gpupool.config.machines import MachineSpec
from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.gres.hostlist import expand
from slurm_gpupool.core.gres.records import GresGpu, GresNode, MigInstance
from slurm_gpupool.core.mig.catalog import get_model, gi_slot_id
from slurm_gpupool.core.mig.layouts import MIG
from slurm_gpupool.core.mig.planner import plan_gpu
from slurm_gpupool.errors import ConfigError, StateError


def _cpu_layout(cfg: PoolConfig, node: str) -> MachineSpec | None:
    return cfg.nodeset_of(node).machine


def gres_node(
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


IDS_NONE = "none"  # types and counts only: no device file is named
IDS_LIVE = "live"  # from the node's state, where it has the planned instances; else an error
IDS_SIMULATED = "simulated"  # the simulator's driver scheme (simulated nodes, golden files)


def planned_node(
    cfg: PoolConfig,
    layout: str,
    node: str,
    mig_ids: str = IDS_NONE,
    live: Mapping[tuple[int, str, int], tuple[int, int, int, int]] | None = None,
) -> GresNode:
    """A node as it will be after ``node apply LAYOUT`` (from its machine description).

    ``mig_ids``: where MIG instance IDs come from (:data:`IDS_NONE`, :data:`IDS_LIVE`,
    :data:`IDS_SIMULATED`); with ``none`` they are -1 and only types and counts are usable.
    ``live``: the node's own instances by (GPU, profile, placement start), read by the caller
    (``node/live_gres.live_ids``) for :data:`IDS_LIVE`: this view reads no file."""
    m = _cpu_layout(cfg, node)
    targets = cfg.machine_targets(layout, node)
    assert m is not None  # machine_targets insists
    live = live or {}
    missing: list[str] = []
    gpus = []
    for spec, t in zip(m.gpus, targets):
        model = get_model(spec.model)
        instances: tuple[MigInstance, ...] = ()
        if t.mode == MIG:
            assert model.mig is not None
            keyed = []
            for i in plan_gpu(model, t.counts).instances:
                start = i.placement.start
                if mig_ids == IDS_SIMULATED:
                    gi = gi_slot_id(model.mig, start, i.placement.size)
                    keyed.append(((gi, 0), MigInstance(i.profile, gi, 0)))
                elif (ids := live.get((spec.index, i.profile, start))) is not None:
                    keyed.append(((ids[0], 0), MigInstance(i.profile, ids[1], ids[2], ids[3])))
                else:
                    if mig_ids == IDS_LIVE:
                        missing.append(f"GPU {spec.index}: {i.profile} at memory slice {start}")
                    keyed.append(((start, 0), MigInstance(i.profile, -1, -1)))
            instances = tuple(inst for _, inst in sorted(keyed, key=lambda x: x[0]))
        gpus.append(GresGpu(spec.index, spec.minor, spec.model, t.mode, t.shares, spec.cpus, instances))
    if missing:
        raise StateError(
            f"planned layout {layout} on {node}",
            "its MIG device files name GPU-instance ids that only the driver chooses, and the node does not "
            f"have these instances yet ({'; '.join(missing[:3])}{'; ...' if len(missing) > 3 else ''})",
            hint=f"apply the layout first (`gpupool node apply {layout}` on {node}, or the repartitioner), then "
            f"render --live; to see the files here: `gpupool gres render --planned {layout} --preview`",
        )
    n = len(m.gpus)
    links = tuple(tuple(m.nvlinks(a, b) for b in range(n)) for a in range(n))
    switch = tuple(m.nvswitch_links_per_gpu if m.interconnect == "nvswitch" else 0 for _ in range(n))
    return gres_node(cfg, node, tuple(gpus), links, switch, layout)


def select_nodes(cfg: PoolConfig, hostlist: str | None) -> list[str]:
    if not hostlist:
        return cfg.all_nodes()
    from slurm_gpupool.config.schema import refuse_hostlist_bomb

    refuse_hostlist_bomb(hostlist)
    try:
        wanted = set(expand(hostlist))
    except Exception as e:
        from ClusterShell.NodeSet import NodeSetParseError  # loaded: expand() asked ClusterShell

        if not isinstance(e, NodeSetParseError):
            raise
        raise ConfigError("--nodes", "", f"not a hostlist: {hostlist} ({e})") from None
    unknown = wanted - set(cfg.all_nodes())
    if unknown:
        named = sorted(unknown)
        more = f" and {len(named) - 10} more" if len(named) > 10 else ""
        raise ConfigError(cfg.source, "nodesets", f"nodes {', '.join(named[:10])}{more} are in no node set")
    return sorted(wanted)
