"""What each node offers in each layout, as a replay needs it (pure over the config).

Built from ``pool.capacity.node_offers`` (the planned view the reports and the submit
catalog use), so a simulated node has exactly the GRES records ``gres render --planned``
would write: one ``gpu`` record per whole GPU or MIG device, and per time-sliced GPU one
``gpu:<model>_shared`` record plus its shards (Slurm gives such a GPU either as a GPU or
as shards, never both).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_gpupool.config.machines import MachineSpec
from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.gres.hostlist import node_order_key
from slurm_gpupool.core.gres.records import device_order
from slurm_gpupool.pool.capacity import node_offers
from slurm_gpupool.pool.planned import planned_node
from slurm_gpupool.pool.submit_catalog import layout_offers, merged_offers


@dataclass(frozen=True)
class Shape:
    """One node in one layout: its GRES records by type."""

    plain: tuple[tuple[str, int], ...]  # (gpu type, records): whole GPUs and MIG devices
    shared: tuple[tuple[str, int, int], ...]  # (type, GPUs, shards per GPU): time-sliced GPUs
    eq: tuple[tuple[str, float], ...]  # GPU-equivalents of one record (a shared GPU: 1.0)
    kind: tuple[tuple[str, str], ...]  # mig | whole | shared
    # where the records sit, for cons_tres's choice of node (``simulate.cores``): per plain
    # type its records on each socket and, last, those bound to none; per time-sliced type
    # each GPU's socket (-1: none); the node's cores on each socket and threads per core
    sockets: tuple[tuple[str, tuple[int, ...]], ...] = ()
    gpu_sockets: tuple[tuple[str, tuple[int, ...]], ...] = ()
    cores: tuple[int, ...] = ()
    tpc: int = 1

    @property
    def gpu_eq(self) -> float:
        eq = dict(self.eq)
        return sum(eq[t] * n for t, n in self.plain) + sum(eq[t] * g for t, g, _ in self.shared)


EMPTY = Shape((), (), (), ())


def node_shape(cfg: PoolConfig, layout: str, node: str) -> Shape:
    """``node`` in ``layout`` (EMPTY when the layout does not cover it, or it has no machine description)."""
    offers = node_offers(cfg, layout, node)
    plain = tuple((o.type, o.count) for o in offers if o.kind != "shared")
    shared = tuple((o.type, o.count, o.shares) for o in offers if o.kind == "shared")
    sockets, gpu_sockets, cores, tpc = _topology(cfg, layout, node, {o.type for o in offers if o.kind == "shared"})
    return Shape(
        plain,
        shared,
        tuple((o.type, o.eq_each) for o in offers),
        tuple((o.type, o.kind) for o in offers),
        sockets,
        gpu_sockets,
        cores,
        tpc,
    )


def _topology(
    cfg: PoolConfig, layout: str, node: str, shared: set[str]
) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], tuple[tuple[str, tuple[int, ...]], ...], tuple[int, ...], int]:
    """Each record's socket, from the machine description's GPU CPUs (what gres.conf's
    ``Cores=`` says, ``gres render``): plain types' records per socket (one count more, last:
    those bound to no socket), time-sliced types' GPUs' sockets in device order (-1: none),
    cores per socket, threads per core.  Nothing when the layout does not cover the node or
    it has no machine description (such a node is not in a replay)."""
    if not cfg.covers(layout, node) or (m := cfg.nodeset_of(node).machine) is None:
        return (), (), (), 1
    per: dict[str, list[int]] = {}
    gpus: dict[str, list[int]] = {}
    for g, _, typ in device_order(planned_node(cfg, layout, node).gpus, cfg.slurm.type_naming, cfg.slurm.autodetect):
        s = gres_socket(m, g.cpus)
        if typ in shared:
            gpus.setdefault(typ, []).append(s)
        else:
            per.setdefault(typ, [0] * (m.sockets + 1))[s] += 1
    return (
        tuple((t, tuple(v)) for t, v in sorted(per.items())),
        tuple((t, tuple(v)) for t, v in sorted(gpus.items())),
        (m.cores_per_socket,) * m.sockets,
        m.threads_per_core,
    )


def gres_socket(m: MachineSpec, cpus: Sequence[int]) -> int:
    """The socket cons_tres counts a device's records on (``_build_sock_gres_by_topo``): the
    first socket its ``Cores=`` reach, or -1 (any socket, ``cnt_any_sock``) when it has no
    CPUs or they reach every socket (an NPS0 or single-socket machine)."""
    socks = {m.socket_of_cpu(c) for c in cpus}
    return -1 if not socks or len(socks) == m.sockets else min(socks)


@dataclass(frozen=True)
class PoolSpec:
    """The nodes of a replay and their shapes in every layout a policy may use."""

    nodes: tuple[str, ...]  # Slurm's node order (natural order of names): first fit walks it
    shapes: dict[tuple[str, str], Shape]  # (layout, node) -> shape, for the layouts that cover it
    offers: dict[str, list[dict[str, Any]]]  # layout -> the submit catalog's offers (mapping)
    naming: str
    autodetect: bool
    fallback: str  # the layout a node no other layout covers stays in (the schedule's default)

    def covers(self, layout: str, node: str) -> bool:
        return (layout, node) in self.shapes

    def resolve(self, layout: str, node: str) -> str:
        """The layout ``node`` is in when ``layout`` is applied: a layout that does not cover
        it leaves it where it was (the repartitioner switches covered nodes only)."""
        return layout if self.covers(layout, node) else self.fallback

    def shape(self, layout: str, node: str) -> Shape:
        return self.shapes.get((self.resolve(layout, node), node), EMPTY)

    def gpu_eq(self, layout: str) -> float:
        return sum(self.shape(layout, n).gpu_eq for n in self.nodes)


def pool_spec(
    cfg: PoolConfig, layouts: Iterable[str], nodes: Sequence[str] | None = None, fallback: str = ""
) -> PoolSpec:
    """Shapes of ``nodes`` (default: every node with a machine description) in ``layouts``;
    ``fallback`` (default: the schedule's default layout) holds the nodes a layout leaves out."""
    names = tuple(nodes) if nodes is not None else tuple(n for n in cfg.all_nodes() if cfg.nodeset_of(n).machine)
    names = tuple(sorted(names, key=node_order_key))  # the order Slurm walks them in
    fallback = fallback or (cfg.schedule.default if cfg.schedule is not None else "")
    wanted = sorted({*layouts, *([fallback] if fallback else [])})
    shapes = {(lay, n): node_shape(cfg, lay, n) for lay in wanted for n in names if cfg.covers(lay, n)}
    offers = {}
    for lay in wanted:  # what the nodes offer with ``lay`` applied: the others stay in the fallback
        left = [n for n in names if not cfg.covers(lay, n)]
        offers[lay] = merged_offers(
            layout_offers(cfg, lay, names), layout_offers(cfg, fallback, left) if fallback else []
        )
    return PoolSpec(names, shapes, offers, cfg.slurm.type_naming, cfg.slurm.autodetect, fallback)
