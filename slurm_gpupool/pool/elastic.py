"""What the elastic policy may do with each node, from the config alone:
the shapes each allowed layout offers, and the floors.

One place for the real step (repartition/elastic.py) and the simulator's elastic policy."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_gpupool.config.elastic import ElasticSettings, floor_keys_known
from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.policy.elastic import KINDS, Records, Shape
from slurm_gpupool.errors import ConfigError
from slurm_gpupool.pool.capacity import node_offers


def shapes_of(cfg: PoolConfig, node: str, layouts: Sequence[str]) -> dict[str, Shape]:
    """What ``node`` offers in each of ``layouts`` (planned from its machine description)."""
    return {
        lay: tuple(Records(o.type, o.kind, o.count, o.eq_each, o.shares) for o in node_offers(cfg, lay, node))
        for lay in layouts
        if cfg.covers(lay, node)
    }


def check_floors(cfg: PoolConfig, settings: ElasticSettings) -> None:
    """Every floor names a kind or a GRES type some layout offers (exit 78): a misspelt
    key kept nothing, silently."""
    types = {
        r.type
        for node in cfg.all_nodes()
        if cfg.nodeset_of(node).machine is not None
        for shape in shapes_of(cfg, node, cfg.layout_names()).values()
        for r in shape
    }
    for key in floor_keys_known(settings.bounds.floors, types):
        raise ConfigError(
            cfg.source,
            f"schedule.elastic.floors.{key}",
            f"{key!r} is neither a kind nor a GRES type the layouts offer",
            hint="kinds: " + ", ".join(KINDS) + "; types: " + ", ".join(sorted(types)),
        )


def allowed_layouts(cfg: PoolConfig, settings: ElasticSettings, node: str) -> tuple[str, ...]:
    """The layouts the policy may put ``node`` in: its node set's list, else every layout
    covering it (one function for the real step and the simulator's elastic policy)."""
    ns = cfg.nodeset_of(node).name
    lays = settings.layouts[ns] if ns in settings.layouts else tuple(cfg.layout_names())
    return tuple(lay for lay in lays if cfg.covers(lay, node))
