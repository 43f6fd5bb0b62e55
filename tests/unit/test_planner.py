"""Planner: exact placements, feasibility against the reference tables, and reasons."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from slurm_gpupool.core.mig import catalog
from slurm_gpupool.core.mig.catalog import all_models, get_model
from slurm_gpupool.core.mig.planner import (
    PlacedInstance,
    all_layouts,
    default_profiles,
    maximal_layouts,
    nearest_feasible,
    plan_gpu,
)
from slurm_gpupool.errors import ConfigError, InfeasibleError
from slurm_gpupool.model import Placement

MIG_MODELS = sorted(k for k, m in all_models().items() if m.mig)

# The MIG user guide's A100-40GB combinations (reference §1.6), written as multisets.
A100_MAXIMAL = {
    ("7g",),
    ("4g", "3g"),
    ("4g", "2g", "1g"),
    ("4g", "1g", "1g", "1g"),
    ("3g", "3g"),
    ("3g", "2g", "1g"),
    ("3g", "1g", "1g", "1g"),
    ("2g", "2g", "3g"),
    ("2g", "1g", "1g", "3g"),
    ("1g", "1g", "2g", "3g"),
    ("1g", "1g", "1g", "1g", "3g"),
    ("2g", "2g", "2g", "1g"),
    ("2g", "2g", "1g", "1g", "1g"),
    ("2g", "1g", "1g", "2g", "1g"),
    ("2g", "1g", "1g", "1g", "1g", "1g"),
    ("1g", "1g", "2g", "2g", "1g"),
    ("1g", "1g", "2g", "1g", "1g", "1g"),
    ("1g", "1g", "1g", "1g", "2g", "1g"),
    ("1g",) * 7,
}


def _short(lay):
    return tuple(sorted(i.profile.split(".")[0] for i in lay))


def test_a100_maximal_layouts_are_the_user_guides_19():
    m = get_model("A100-SXM4-40GB")
    layouts = maximal_layouts(m, default_profiles(m))
    assert len(layouts) == 19
    assert Counter(_short(lay) for lay in layouts) == Counter(tuple(sorted(x)) for x in A100_MAXIMAL)
    assert len({_short(lay) for lay in layouts}) == 14
    # non-maximal ones too, and with +me / double-memory 1g (reference counts)
    assert len(all_layouts(m, default_profiles(m))) - 1 == 297
    assert len(all_layouts(m)) - 1 == 2318
    assert len(maximal_layouts(m)) == 239


@pytest.mark.parametrize("model_key", ["A100-SXM4-40GB", "H100-SXM5-80GB"])
def test_famous_answers(model_key):
    m = get_model(model_key)
    names = {p.name.split(".")[0] + ("me" if p.has_media_extensions else ""): p.name for p in m.mig.profiles}
    g1, g3, g4 = names["1g"], names["3g"], names["4g"]
    plan = plan_gpu(m, {g4: 1, g3: 1})
    assert [(i.profile, i.placement.start) for i in plan.instances] == [(g4, 0), (g3, 4)]
    with pytest.raises(InfeasibleError) as e:
        plan_gpu(m, {g3: 2, g1: 1})
    assert e.value.exit_code == 65
    assert f"two {g3} use all 8 memory slices; no slot is left for {g1}" in e.value.why
    assert f"{{{g3}: 2}}" in (e.value.hint or "")


@pytest.mark.parametrize("model_key", MIG_MODELS)
def test_every_feasible_multiset_plans_without_overlap(model_key):
    m = get_model(model_key)
    geo = m.mig
    seen = set()
    for lay in all_layouts(m):
        counts = Counter(i.profile for i in lay)
        key = tuple(sorted(counts.items()))
        if key in seen or not counts:
            continue
        seen.add(key)
        plan = plan_gpu(m, dict(counts))
        assert Counter(i.profile for i in plan.instances) == counts
        cells = [s for i in plan.instances for s in range(i.placement.start, i.placement.end)]
        assert len(cells) == len(set(cells)) and max(cells) < geo.memory_slots
        for i in plan.instances:
            assert i.placement.start in geo.by_name(i.profile).placement_starts
        assert sum(geo.by_name(i.profile).compute_slices for i in plan.instances) <= geo.compute_slices


@pytest.mark.parametrize("model_key", MIG_MODELS)
def test_infeasible_multisets_are_rejected(model_key):
    """Every multiset that no valid layout contains is refused (exhaustive, small)."""
    m = get_model(model_key)
    feasible = {tuple(sorted(Counter(i.profile for i in lay).items())) for lay in all_layouts(m)}
    profs = [p for p in m.mig.profiles if not p.has_media_extensions]
    checked = 0
    for p in profs:
        for q in profs:
            for n in (1, 2, 3):
                counts = Counter({p.name: n})
                counts[q.name] += 1
                key = tuple(sorted(counts.items()))
                if key in feasible:
                    plan_gpu(m, dict(counts))
                else:
                    with pytest.raises(InfeasibleError):
                        plan_gpu(m, dict(counts))
                    checked += 1
    assert checked > 0


def test_plan_keeps_existing_instances_where_possible():
    m = get_model("A100-SXM4-40GB")
    current = [PlacedInstance(Placement(4, 4), "3g.20gb"), PlacedInstance(Placement(0, 1), "1g.5gb")]
    plan = plan_gpu(m, {"3g.20gb": 1, "1g.5gb": 3}, current)
    assert set(plan.kept) == set(current)
    assert Counter(i.profile for i in plan.instances) == {"3g.20gb": 1, "1g.5gb": 3}
    # a 3g at 0 cannot stay when the target needs a 4g (only start 0)
    plan = plan_gpu(m, {"4g.20gb": 1, "3g.20gb": 1}, [PlacedInstance(Placement(0, 4), "3g.20gb")])
    assert plan.kept == ()


def test_deterministic():
    m = get_model("H100-SXM5-80GB")
    a = plan_gpu(m, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1})
    b = plan_gpu(m, {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})
    assert a == b


def test_nearest_feasible_prefers_dropping_the_least():
    m = get_model("A100-SXM4-40GB")
    assert nearest_feasible(m, {"1g.5gb": 8}) == {"1g.5gb": 7}
    assert nearest_feasible(m, {"7g.40gb": 1, "1g.5gb": 1}) == {"7g.40gb": 1}


def test_unknown_profile_and_count_limits():
    m = get_model("A30")
    with pytest.raises(Exception) as e:
        plan_gpu(m, {"1g.5gb": 1})
    assert "unknown MIG profile" in str(e.value) and "1g.6gb" in str(e.value)
    with pytest.raises(InfeasibleError) as e2:
        plan_gpu(m, {"1g.6gb": 5})
    assert "at most 4" in e2.value.why


@pytest.mark.parametrize("key", MIG_MODELS)
def test_layout_profiles_lists_every_model_with_its_source(key: str, capsys):
    """`gpupool layout profiles MODEL`: the full table and the maximal combinations, for every model
    (by catalog key or by NVML name), with where the values come from."""
    from slurm_gpupool.cli.main import main

    m = get_model(key)
    assert main(["layout", "profiles", m.nvml_name, "--all"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{key} ({m.nvml_name}): {m.mig.compute_slices} compute slices")
    assert f"source: {m.source}" in out
    for p in m.mig.profiles:
        assert f"{{{','.join(map(str, p.placement_starts))}}}:{p.memory_slices}" in out
        assert p.name in out
    assert f"{len(maximal_layouts(m))} maximal layouts" in out


def test_rtx_pro_6000_placements_are_on_its_12_unit_axis():
    m = get_model("RTX-PRO-6000")
    plan = plan_gpu(m, {"2g.48gb": 1, "1g.24gb": 2})
    assert sorted((i.profile, i.placement.start, i.placement.size) for i in plan.instances) == [
        ("1g.24gb", 6, 3),
        ("1g.24gb", 9, 3),
        ("2g.48gb", 0, 6),
    ]
    with pytest.raises(InfeasibleError):
        plan_gpu(m, {"4g.96gb": 1, "1g.24gb": 1})
    assert Counter(_short(lay) for lay in maximal_layouts(m, default_profiles(m))) == Counter(
        {("4g",): 1, ("2g", "2g"): 1, ("1g", "1g", "2g"): 2, ("1g", "1g", "1g", "1g"): 1}
    )


def test_me_all_takes_every_media_engine_so_only_me_less_profiles_share_its_gpu():
    """nvml.h: _ALL_ME profiles block all but _NO_ME ones (the review found 1g.24gb+me.all planned
    beside three 1g.24gb, and 156 invalid maximal layouts listed)."""
    m = get_model("RTX-PRO-6000")
    with pytest.raises(InfeasibleError) as e:
        plan_gpu(m, {"1g.24gb+me.all": 1, "1g.24gb": 3})
    assert "only -me profiles can share its GPU, not 1g.24gb" in e.value.why
    plan = plan_gpu(m, {"1g.24gb+me.all": 1, "1g.24gb-me": 3})
    assert len(plan.instances) == 4
    with pytest.raises(InfeasibleError):
        plan_gpu(m, {"2g.48gb+me.all": 1, "2g.48gb+gfx": 1})
    for lay in maximal_layouts(m):
        names = [i.profile for i in lay]
        if any(n.endswith("+me.all") for n in names):
            assert all(n.endswith("+me.all") or n.endswith("-me") for n in names), names


def test_a_catalog_models_plan_is_remembered_and_another_models_is_not():
    """A command plans the same GPU layouts for every node of a machine: plan_gpu answers a
    catalog model's repeat from memory, keyed by the counts in their order and the GPU's
    current instances; a model that is not the catalog's (a test's, or one from before a
    site's models rebuilt the catalog) is planned every time, and so are counts that are not
    whole numbers (equal to whole ones as keys) and refusals."""
    a100 = get_model("A100-SXM4-40GB")
    counts = {"1g.5gb": 3, "2g.10gb": 2}
    first = plan_gpu(a100, counts)
    assert plan_gpu(a100, dict(counts)) is first
    kept = first.instances[:1]
    assert plan_gpu(a100, counts, kept) is not first and plan_gpu(a100, counts, kept).kept == kept
    copy = dataclasses.replace(a100)
    assert plan_gpu(copy, counts) == first and plan_gpu(copy, counts) is not first
    for bad in (3.0, True):  # the config checks them; a direct caller gets the same refusal
        with pytest.raises(ConfigError):
            plan_gpu(a100, {**counts, "1g.5gb": bad})
    for _ in range(2):  # a refusal is not remembered as a plan
        with pytest.raises(InfeasibleError):
            plan_gpu(a100, {"7g.40gb": 2})
    try:
        catalog.set_site_models({"L20": catalog.site_model_entry("NVIDIA L20", 0x26BA, 46068, (8, 9), 0, "test")})
        rebuilt = get_model("A100-SXM4-40GB")
        assert rebuilt is not a100 and plan_gpu(rebuilt, counts) == first
        assert plan_gpu(rebuilt, counts) is plan_gpu(rebuilt, counts) is not first
        assert plan_gpu(a100, counts) is not plan_gpu(a100, counts)  # the old model: planned again
    finally:
        catalog.set_site_models({})
