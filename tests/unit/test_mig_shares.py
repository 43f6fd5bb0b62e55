"""Shares on MIG devices (#28 item 3) as the pool's planned view counts them: the offers the
wrapper, the Lua and the simulator choose from, the reports' GPU-equivalents of a shard
grant, and the simulator's capacity."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.core.mig.catalog import get_model
from slurm_gpupool.pool.capacity import node_offers, type_table
from slurm_gpupool.pool.submit_catalog import layout_offers
from slurm_gpupool.reports.gpu_frame import Resolver
from slurm_gpupool.simulate.pool import node_shape

RAW = {
    "version": 1,
    "nodesets": {"a30": {"nodes": "a30n1", "machine": "pcie-a30"}},
    "layouts": {
        # GPU 0: four 1g.6gb slices, each time-sliced 4 ways; GPU 1 the same slices unshared;
        # GPUs 2-3: whole A30s time-sliced 2 ways
        "day": {"a30": {"0": {"mig": {"1g.6gb": 4}, "shared": 4}, "1": {"mig": {"1g.6gb": 4}}, "2-3": {"shared": 2}}},
    },
}


@pytest.fixture(scope="module")
def cfg():
    return parse_config(RAW, "t.yaml", Path("."))


def test_a_time_sliced_mig_device_is_a_shared_offer_of_its_profiles_memory_and_compute(cfg):
    a30 = get_model("A30")
    prof = a30.profile("1g.6gb")
    by_type = {o.type: o for o in node_offers(cfg, "day", "a30n1")}
    shared = by_type["1g.6gb_shared"]
    assert (shared.kind, shared.count, shared.shares, shared.profile) == ("shared", 4, 4, "1g.6gb")
    assert shared.memory_mib == prof.memory_mib < a30.memory_mib
    assert shared.eq_each == pytest.approx(1 / 4)  # one of the A30's four compute slices
    assert by_type["1g.6gb"].kind == "mig" and by_type["1g.6gb"].count == 4
    assert (by_type["a30_shared"].eq_each, by_type["a30_shared"].shares) == (1.0, 2)
    # GPU-equivalents: 4 slices of each MIG GPU and 2 whole GPUs
    assert sum(o.eq for o in by_type.values()) == pytest.approx(4)
    info = type_table(cfg)["1g.6gb_shared"]
    assert (info.kind, info.fraction, info.memory_mib) == ("shared", pytest.approx(0.25), prof.memory_mib)


def test_the_submit_catalog_offers_mig_shares_with_their_compute_share(cfg):
    offers = {(o["kind"], o["type"]): o for o in layout_offers(cfg, "day")}
    o = offers[("shared", "1g.6gb_shared")]
    assert (o["shares"], o["count"], o["per_node"], o["compute_share"]) == (4, 4, 4, 0.25)
    assert o["memory_mib"] == get_model("A30").profile("1g.6gb").memory_mib
    assert "compute_share" not in offers[("shared", "a30_shared")]  # a whole GPU's shares: all of it


def test_a_shard_of_a_mig_device_counts_its_share_of_the_slice_in_the_reports(cfg):
    r = Resolver(cfg)
    (mig,) = r.grants("gres/shard:1g.6gb_shared=2", "a30n1", "day")
    assert mig.kind == "shard" and mig.count == 2
    assert mig.eq == pytest.approx(2 / 4 * 1 / 4)  # 2 of the slice's 4 shares, the slice a quarter GPU
    assert mig.memory_mib == pytest.approx(get_model("A30").profile("1g.6gb").memory_mib * 2 / 4)
    (whole,) = r.grants("gres/shard:a30_shared=1", "a30n1", "day")
    assert whole.eq == pytest.approx(1 / 2)  # 1 of a whole A30's 2 shares


def test_the_simulators_capacity_counts_mig_shares_as_their_slices(cfg):
    shape = node_shape(cfg, "day", "a30n1")
    assert ("1g.6gb_shared", 4, 4) in shape.shared and ("a30_shared", 2, 2) in shape.shared
    assert dict(shape.kind)["1g.6gb_shared"] == "shared"
    assert shape.gpu_eq == pytest.approx(4.0)  # the node's four GPUs, however cut


def test_a_quota_in_gpu_equivalents_converts_shards_only_where_every_shard_holds_the_same(cfg):
    """``shard`` in GPU-equivalents needs one size of shard across the pool: here a shard of a
    whole A30 (1/2) and of a 1g slice (1/16) differ, so it has none (quotas refuse it)."""
    from slurm_gpupool.pool.tiers import pool_types

    assert pool_types(cfg)["shard"].eq_each == 0.0
    only_mig = {**RAW, "layouts": {"day": {"a30": {"all": {"mig": {"1g.6gb": 4}, "shared": 4}}}}}
    same = pool_types(parse_config(only_mig, "t.yaml", Path(".")))
    assert same["shard"].eq_each == pytest.approx(1 / 16) and same["1g.6gb_shared"].kind == "shared"


def test_the_simulator_maps_a_small_fraction_to_shards_of_a_slice_holding_their_share(cfg):
    """A trace's 0.05 GPU, as ``--gpu-share=0.05`` chooses: 1 of a 1g slice's 4 shares (1/16
    of a GPU) rather than 1 of a whole A30's 2 (1/2); the demand holds 1/16, not 1/4."""
    from slurm_gpupool.simulate.mapping import PREFER_SHARD, TraceRequest, map_request

    d = map_request(TraceRequest(1, 50), layout_offers(cfg, "day"), "day", cfg.slurm.type_naming, PREFER_SHARD)
    assert d is not None and d.kind == "shard" and d.gres == "shard:1g.6gb_shared:1"
    assert d.allocated_eq == pytest.approx(1 / 16)
