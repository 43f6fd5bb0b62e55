"""#16 groundwork: a trace's GPU request becomes one GRES request by an explicit rule, with
what the rounding costs (internal fragmentation), from the tool's own catalog and rules."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.data import trace_file
from slurm_gpupool.pool.submit_catalog import layout_offers
from slurm_gpupool.reports.traces.openb import OPENB, load_gpu_requests
from slurm_gpupool.simulate.mapping import PREFER_MIG, PREFER_SHARD, RequestMapper, TraceRequest, map_request

TOP = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shipped():
    raw = yaml.safe_load((TOP / "etc" / "gpupool.yaml").read_text())
    raw.pop("mig_parted")
    cfg = parse_config(raw, str(TOP / "etc" / "gpupool.yaml"))
    return cfg, {name: layout_offers(cfg, name) for name in cfg.layout_names()}


def test_fractions_round_up_to_the_smallest_mig_profile_or_to_shards(shipped):
    cfg, offers = shipped
    day = offers["day"]
    small = map_request(TraceRequest(1, 100), day, "day", cfg.slurm.type_naming, PREFER_MIG)
    assert small is not None and small.kind == "mig" and small.allocated_eq == pytest.approx(1 / 7)
    assert small.gres in ("gpu:1g.5gb:1", "gpu:1g.10gb:1", "gpu:1g.6gb:1")
    assert small.loss_eq == pytest.approx(1 / 7 - 0.1)
    # 0.46 of a GPU: 3g is 3/7 (too small), no 4g by day: shards (2 of 4 on a shared GPU)
    mid = map_request(TraceRequest(1, 460), day, "day", cfg.slurm.type_naming)
    assert mid is not None and mid.kind == "shard" and mid.allocated_eq == pytest.approx(0.5)
    shard_first = map_request(TraceRequest(1, 100), day, "day", cfg.slurm.type_naming, PREFER_SHARD)
    assert shard_first is not None and shard_first.kind == "shard" and shard_first.allocated_eq == pytest.approx(0.25)
    # memory decides too: 1g.5gb cannot hold 8 GiB
    mem = map_request(TraceRequest(1, 100, memory_mib=8192), day, "day", cfg.slurm.type_naming)
    assert mem is not None and mem.allocated_eq >= 1 / 7 and "1g.5gb" not in mem.gres
    # whole GPUs stay whole; the night layout has no MIG or shards: a fraction takes a whole GPU
    whole = map_request(TraceRequest(8), offers["night"], "night", cfg.slurm.type_naming)
    assert whole is not None and whole.kind == "whole" and whole.gres.endswith(":8") and whole.loss_eq == 0
    night = map_request(TraceRequest(1, 100), offers["night"], "night", cfg.slurm.type_naming)
    assert night is not None and night.kind == "whole" and night.loss_eq == pytest.approx(0.9)
    assert map_request(TraceRequest(16), offers["night"], "night", cfg.slurm.type_naming) is None  # no node has 16
    with pytest.raises(ValueError):
        map_request(TraceRequest(2, 500), day, "day", cfg.slurm.type_naming)


def test_every_openb_pod_maps_by_day_and_the_rounding_cost_is_measured(shipped):
    """The real fractional mix (44 % of GPU pods ask for a fraction, not MIG-shaped)."""
    cfg, offers = shipped
    by_day = RequestMapper(offers["day"], "day", cfg.slurm.type_naming)
    kinds: Counter[str] = Counter()
    asked = held = 0.0
    num_gpu, gpu_milli = load_gpu_requests(trace_file(f"{OPENB}/openb_pod_list_default.csv"))  # the shipped copy
    for n, milli in zip(num_gpu.tolist(), gpu_milli.tolist(), strict=True):
        if n == 0:
            continue
        req = TraceRequest(n, milli if n == 1 else 1000)
        d = by_day(req)
        if d is None:  # 8 whole GPUs on one node: only the night layout has them
            assert n == 8 and map_request(req, offers["night"], "night", cfg.slurm.type_naming), (n, milli)
            kinds["night only"] += 1
            continue
        assert d.allocated_eq + 1e-9 >= d.requested_eq
        kinds[d.kind] += 1
        asked += d.requested_eq
        held += d.allocated_eq
    assert sum(kinds.values()) == 7064 and kinds["mig"] and kinds["shard"] and kinds["whole"]
    assert kinds["night only"] == 44  # the 8-GPU pods (SOURCE.md: num_gpu 8 -> 44)
    print(f"openb by day: {dict(kinds)}, {asked:.0f} GPU-eq asked, {held:.0f} held")
    loss = 1 - asked / held
    assert 0 < loss < 0.2, loss  # MIG and shard rounding cost a few percent of what is held


def test_types_follow_the_configs_naming_and_autodetect():
    """With AutoDetect=nvml on, MIG types are Slurm's profile strings (7g.40gb is 7g.39gb to it):
    the mapping names them as the config does, or it would find no MIG offer at all."""
    raw = {
        "version": 1,
        "nodesets": {"dgx": {"nodes": "a1", "machine": "dgx-a100"}},
        "layouts": {"big": {"dgx": {"all": {"mig": {"7g.40gb": 1}}}}},
        "slurm": {"autodetect": True, "type_naming": "model_profile"},
    }
    cfg = parse_config(raw, "pool.yaml", Path("."))
    offers = layout_offers(cfg, "big")
    d = map_request(TraceRequest(1, 900), offers, "big", "model_profile", autodetect=True)
    assert d is not None and d.gres == "gpu:a100_7g.39gb:1" and d.loss_eq == pytest.approx(0.1)
    assert map_request(TraceRequest(1, 900), offers, "big", "model_profile") is None  # autodetect's names unknown


def test_idle_alternatives_are_larger_slices_then_whole_gpus_as_the_wrapper_tries_them():
    """What a job asks for instead when nothing idle holds its slice (an elastic period,
    idle_first: core.submit._idle_first): whole GPUs, then the larger slices that cover it."""
    from slurm_gpupool.pool.submit_catalog import merged_offers

    raw = {
        "version": 1,
        "nodesets": {"a30": {"nodes": "n[1-2]", "machine": "pcie-a30"}},
        "layouts": {"day": {"a30": {"all": {"mig": {"1g.6gb": 2, "2g.12gb": 1}}}}, "whole": {"a30": {"all": "whole"}}},
        "paths": {"state_dir": "/tmp/x", "run_dir": "/tmp/x", "spool_dir": "/tmp/x"},
    }
    cfg = parse_config(raw, "t.yaml")
    offers = merged_offers(layout_offers(cfg, "day"), layout_offers(cfg, "whole"))
    mapper = RequestMapper(offers, "elastic", cfg.slurm.type_naming)
    quarter = TraceRequest(1, 250)
    assert mapper(quarter).gres == "gpu:1g.6gb:1"
    assert [d.gres for d in mapper.idle_alternatives(quarter)] == ["gpu:a30:1", "gpu:2g.12gb:1"]
    assert [d.gres for d in mapper.idle_alternatives(TraceRequest(1, 500))] == ["gpu:a30:1"]  # 2g.12gb is its own
    assert mapper.idle_alternatives(TraceRequest(2)) == []  # whole GPUs: nothing to trade


def test_a_sites_job_asks_again_for_the_gres_it_held_where_the_layout_offers_it(shipped):
    """#27: `simulate --from` mapped a site's jobs by their share alone, so one shard of a
    V100 (a quarter of a GPU) came back as an A30's 1g.6gb slice under `prefer: mig`, and a
    1g.5gb job as a shard under `prefer: shard`.  What a job held is asked for again where
    the layout offers it."""
    cfg, offers = shipped
    day, night, naming = offers["day"], offers["night"], cfg.slurm.type_naming
    by_share = map_request(TraceRequest.fraction(0.25), day, "day", naming, PREFER_MIG)
    assert by_share is not None and by_share.gres == "gpu:1g.6gb:1"  # the rules alone: another kind
    held = map_request(TraceRequest(1, 250, 0, None, "shard:v100_shared:1"), day, "day", naming, PREFER_MIG)
    assert held is not None and (held.gres, held.kind) == ("shard:v100_shared:1", "shard")
    assert held.allocated_eq == pytest.approx(0.25)
    one = map_request(TraceRequest.fraction(1 / 7), day, "day", naming, PREFER_SHARD)
    assert one is not None and one.kind == "shard"
    two = map_request(TraceRequest(1, 285, 9728, None, "gpu:1g.5gb:2"), day, "day", naming, PREFER_SHARD)
    assert two is not None and (two.gres, two.kind) == ("gpu:1g.5gb:2", "mig")
    assert two.allocated_eq == pytest.approx(2 / 7)
    # any shared type with as many shards per GPU, as Slurm gives an untyped --gres=shard:1
    any_type = RequestMapper(day, "day", naming, any_model=True)(TraceRequest(1, 250, 0, None, "shard:v100_shared:1"))
    assert any_type is not None and set(any_type.alternatives) == {"a30_shared", "h100_80gb_hbm3_shared"}
    # a layout without the type (night: every GPU whole), or more shards than a GPU has: the rules
    gone = map_request(TraceRequest(1, 250, 0, None, "shard:v100_shared:1"), night, "night", naming)
    assert gone is not None and gone.kind == "whole"
    for bad in ("shard:v100_shared:9", "gpu:1g.5gb:0", "shard:v100_shared:x", "nonsense"):
        d = map_request(TraceRequest(1, 250, 0, None, bad), day, "day", naming, PREFER_MIG)
        assert d is not None and d.gres == "gpu:1g.6gb:1", bad
