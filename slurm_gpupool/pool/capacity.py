"""What each node offers in each layout, in GPU-equivalents.

A GPU-equivalent is a whole GPU's compute: a MIG device counts as its share of
the GPU's compute slices (``1g`` of seven = 1/7; on an A30, ``1g`` of four =
1/4), a shard of a GPU time-sliced into N counts 1/N.  The reports measure
allocation and capacity in these units, so a day of 1g slices and a night of
whole GPUs compare.  Built from the planned view (config + machine description).
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.gres.records import device_order, shared_type, slurm_type
from slurm_gpupool.core.mig.catalog import GpuModel, all_models, get_model
from slurm_gpupool.core.mig.layouts import MIG, SHARED
from slurm_gpupool.pool.planned import planned_node


@dataclass(frozen=True)
class Offer:
    """One GRES type a node offers in a layout."""

    type: str  # the gpu GRES Type
    kind: str  # mig | whole | shared
    model: str  # catalog key
    count: int  # gpu records of this type
    eq_each: float  # GPU-equivalents of one record
    memory_mib: int  # memory of one record
    shares: int = 0  # shared: shards per GPU
    profile: str = ""  # mig: the MIG profile (NVIDIA's name) behind the type

    @property
    def eq(self) -> float:
        return self.count * self.eq_each


def mig_fraction(model: GpuModel, profile: str) -> float:
    """Compute share of a MIG profile: compute slices / the GPU's compute slices."""
    assert model.mig is not None
    return model.profile(profile).compute_slices / model.mig.compute_slices


_MEMO: dict[tuple[int, str, str, str], tuple[PoolConfig, tuple[Offer, ...]]] = {}


def node_offers(cfg: PoolConfig, layout: str, node: str) -> tuple[Offer, ...]:
    """``node``'s GRES in ``layout``, by type (empty if the layout does not cover it)."""
    if not cfg.covers(layout, node):
        return ()
    # nodes of one node set under the same layout entry offer the same: plan one of them
    key = (id(cfg), layout, cfg.nodeset_of(node).name, cfg.entry(layout, node).key)
    if key not in _MEMO:  # the entry keeps cfg alive, so its id is never reused by another config
        _MEMO[key] = (cfg, _node_offers(cfg, layout, node))
    return _MEMO[key][1]


def _node_offers(cfg: PoolConfig, layout: str, node: str) -> tuple[Offer, ...]:

    if not cfg.covers(layout, node) or cfg.nodeset_of(node).machine is None:
        return ()
    view = planned_node(cfg, layout, node)
    agg: dict[str, Offer] = {}
    for g, inst, typ in device_order(view.gpus, cfg.slurm.type_naming, cfg.slurm.autodetect):
        model = get_model(g.model)
        if inst is not None:
            assert model.mig is not None
            prof = model.profile(inst.profile)
            kind, eq = ("shared", g.shares) if g.shares else (MIG, 0)  # a time-sliced MIG device: shared
            o = Offer(typ, kind, model.key, 1, mig_fraction(model, inst.profile), prof.memory_mib, eq, inst.profile)
        elif g.mode == SHARED:
            o = Offer(typ, "shared", model.key, 1, 1.0, model.memory_mib, g.shares)
        else:
            o = Offer(typ, "whole", model.key, 1, 1.0, model.memory_mib)
        prev = agg.get(typ)
        agg[typ] = o if prev is None else Offer(**{**prev.__dict__, "count": prev.count + 1})
    return tuple(sorted(agg.values(), key=lambda o: o.type))


@dataclass(frozen=True)
class TypeInfo:
    """What a GRES type name stands for."""

    kind: str  # mig | whole | shared | unknown
    model: str | None
    fraction: float  # GPU-equivalents of one device of this type
    memory_mib: int | None


def type_table(cfg: PoolConfig | None) -> dict[str, TypeInfo]:
    """Every GRES type name this pool's layouts can produce (plus the catalog's own
    names for whole GPUs and profiles that are unambiguous), name → meaning."""
    out: dict[str, TypeInfo] = {}
    # the catalog first: names any Slurm site would use; ambiguous names are dropped
    seen: dict[str, set[TypeInfo]] = {}
    for model in all_models().values():
        for naming in ("profile", "model_profile", "autodetect"):
            seen.setdefault(slurm_type(model, None, naming), set()).add(
                TypeInfo("whole", model.key, 1.0, model.memory_mib)
            )
            for p in model.mig.profiles if model.mig else ():
                info = TypeInfo(MIG, model.key, mig_fraction(model, p.name), p.memory_mib)
                seen.setdefault(slurm_type(model, p.name, naming), set()).add(info)
        seen.setdefault(shared_type(model), set()).add(TypeInfo("shared", model.key, 1.0, model.memory_mib))
    for name, infos in seen.items():
        if len(infos) == 1:
            out[name] = next(iter(infos))
        elif len({(i.kind, i.fraction) for i in infos}) == 1:  # e.g. 1g.10gb on A100-80GB and H100
            i = next(iter(infos))
            out[name] = TypeInfo(i.kind, None, i.fraction, i.memory_mib)
    if cfg is not None:  # the pool's own names win: they say which model a type is here
        for layout in cfg.layout_names():
            for node in cfg.all_nodes():
                for o in node_offers(cfg, layout, node):
                    out[o.type] = TypeInfo(o.kind, o.model, o.eq_each, o.memory_mib)
    return out


def node_shares(cfg: PoolConfig | None, layout: str | None, node: str) -> int | None:
    """Shards per GPU of ``node``'s time-sliced GPUs in ``layout`` (None: not known or none)."""
    if cfg is None or layout is None or node not in cfg.all_nodes():
        return None
    shares = [o.shares for o in node_offers(cfg, layout, node) if o.shares]
    return min(shares) if shares else None
