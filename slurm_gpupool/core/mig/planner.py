"""MIG placement planner: profile counts → explicit placements, or why not.

Pure and deterministic.  Placements are found by backtracking over each
profile's valid starts on the memory-slice axis (largest instances first),
so the result never depends on the driver's default placement heuristic.
When an existing layout is given, the plan keeps as many of its instances as
the target allows, so a small change does not rebuild a whole GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

from slurm_gpupool.core.mig.catalog import GpuModel, MigGeometry, MigProfile, all_models, get_model
from slurm_gpupool.core.ranges import index_ranges
from slurm_gpupool.errors import ConfigError, InfeasibleError
from slurm_gpupool.model import Placement


@dataclass(frozen=True, order=True)
class PlacedInstance:
    """One GPU instance of ``profile`` at ``placement`` (one full-size CI inside)."""

    placement: Placement
    profile: str

    def __str__(self) -> str:
        return f"{self.profile}@{self.placement.start}"


def _profiles(model: GpuModel, counts: Mapping[str, int]) -> list[MigProfile]:
    """Expand counts into one profile per instance, validating names and counts."""
    if model.mig is None:
        raise ConfigError(model.key, "", f"{model.nvml_name} does not support MIG")
    out: list[MigProfile] = []
    for name, n in counts.items():
        prof = model.profile(name)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ConfigError(model.key, name, f"count must be a whole number >= 0, not {n!r}")
        if n > prof.max_count:  # before expanding: a count of 10**9 is a typo, not a list to build
            raise InfeasibleError(model.key, f"at most {prof.max_count} × {prof.name} fit on {model.key}, not {n}")
        out.extend([prof] * n)
    return out


def _budget_reason(geo: MigGeometry, model: GpuModel, profs: Sequence[MigProfile]) -> str | None:
    """Why a multiset cannot fit regardless of placement, or None."""
    for prof, n in Counter(profs).items():
        if n > prof.max_count:
            return f"at most {prof.max_count} × {prof.name} fit on {model.key}, not {n}"
    for k, a in enumerate(profs):
        for b in profs[k + 1 :]:
            if (why := a.excludes(b)) is not None:
                return why
    compute = sum(p.compute_slices for p in profs)
    if compute > geo.compute_slices:
        return f"needs {compute} compute slices; {model.key} has {geo.compute_slices}"
    return None


def _search(
    geo: MigGeometry, profs: Sequence[MigProfile], fixed: Sequence[PlacedInstance] = ()
) -> tuple[PlacedInstance, ...] | None:
    """Backtracking placement, largest first; ``fixed`` instances stay where they are."""
    order = sorted(profs, key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    used = 0
    for f in fixed:
        used |= ((1 << f.placement.size) - 1) << f.placement.start
    failed: set[tuple[int, int]] = set()  # (depth, mask) known to fail

    def go(i: int, mask: int) -> list[PlacedInstance] | None:
        if i == len(order):
            return []
        if (i, mask) in failed:
            return None
        prof = order[i]
        # Keep the largest free aligned block: try high starts first for small profiles.
        starts = prof.placement_starts if prof.memory_slices >= 4 else tuple(reversed(prof.placement_starts))
        for start in starts:
            bits = ((1 << prof.memory_slices) - 1) << start
            if mask & bits:
                continue
            rest = go(i + 1, mask | bits)
            if rest is not None:
                return [PlacedInstance(Placement(start, prof.memory_slices), prof.name), *rest]
        failed.add((i, mask))
        return None

    found = go(0, used)
    if found is None:
        return None
    return tuple(sorted([*fixed, *found]))


def _conflict_reason(geo: MigGeometry, profs: Sequence[MigProfile]) -> str:
    """Explain a placement conflict: the largest prefix that fits, then what does not."""
    order = sorted(profs, key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    for k in range(len(order) - 1, 0, -1):
        placed = _search(geo, order[:k])
        if placed is None:
            continue
        nxt = order[k]
        used = sorted({s for p in placed for s in range(p.placement.start, p.placement.end)})
        names = Counter(p.profile for p in placed)
        what = " + ".join(f"{_count_word(n)} {name}" for name, n in sorted(names.items()))
        verb = "uses" if len(placed) == 1 else "use"
        starts = ",".join(map(str, nxt.placement_starts))
        if len(used) == geo.memory_slots:
            where = f"all {geo.memory_slots} memory slices"
        else:
            where = f"memory slices {index_ranges(used)}"
        return f"{what} {verb} {where}; no slot is left for {nxt.name} (it can only start at {starts})"
    return "no arrangement of these instances fits the memory-slice placements"


def _count_word(n: int) -> str:
    return {1: "one", 2: "two", 3: "three", 4: "four"}.get(n, str(n))


def format_counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name}: {n}" for name, n in sorted(counts.items()) if n) or "(no instances)"


@dataclass(frozen=True)
class GpuPlan:
    """Placements for one GPU, and which of them existed before."""

    instances: tuple[PlacedInstance, ...]
    kept: tuple[PlacedInstance, ...] = ()


# plan_gpu's answers for the catalog's models: a command plans the same few GPU layouts for
# every node of a machine and every layout (`gres diff` asked 533 plans of 9 kinds). Each plan
# keeps the model it was made for, since `set_site_models` rebuilds every model.
_PLANS: dict[tuple[str, tuple[tuple[str, int], ...], tuple[PlacedInstance, ...]], tuple[GpuModel, GpuPlan]] = {}
_PLANS_MAX = 4096


def plan_gpu(model: GpuModel, counts: Mapping[str, int], current: Iterable[PlacedInstance] = ()) -> GpuPlan:
    """Explicit placements for ``counts`` on ``model``, keeping ``current`` where possible.

    Raises InfeasibleError (exit 65) with the reason and the nearest feasible layout.
    Pure: a plan for a model of the catalog is remembered (the catalog's models are shared
    and never change; another model, a test's own, is planned every time).
    """
    cur = tuple(current)
    if all_models().get(model.key) is not model or not all(type(n) is int for n in counts.values()):
        return _plan_gpu(model, counts, cur)  # (1, 1.0 and True are one key: _profiles refuses the last two)
    key = (model.key, tuple(counts.items()), cur)
    known = _PLANS.get(key)
    if known is not None and known[0] is model:
        return known[1]
    plan = _plan_gpu(model, counts, cur)
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.clear()
    _PLANS[key] = (model, plan)
    return plan


def _plan_gpu(model: GpuModel, counts: Mapping[str, int], current: Sequence[PlacedInstance]) -> GpuPlan:
    profs = _profiles(model, counts)
    geo = model.mig
    assert geo is not None
    reason = _budget_reason(geo, model, profs)
    if reason is None:
        want = Counter(p.name for p in profs)
        cur = sorted(i for i in current if want.get(i.profile))
        # Try to keep the largest subset of current instances (deterministic order).
        for k in range(len(cur), -1, -1):
            for keep in combinations(cur, k):
                kc = Counter(i.profile for i in keep)
                if any(kc[n] > want[n] for n in kc):
                    continue
                if _overlap(keep):
                    continue
                rest = [p for p in profs]
                for i in keep:
                    rest.remove(next(p for p in rest if p.name == i.profile))
                found = _search(geo, rest, keep)
                if found is not None:
                    return GpuPlan(found, tuple(sorted(keep)))
        reason = _conflict_reason(geo, profs)
    suggestion = nearest_feasible(model, counts)
    hint = f"nearest feasible layout: {{{format_counts(suggestion)}}}" if suggestion is not None else None
    raise InfeasibleError(f"MIG layout {{{format_counts(counts)}}} on {model.key}", reason, hint)


def _overlap(instances: Sequence[PlacedInstance]) -> bool:
    return any(a.placement.overlaps(b.placement) for a, b in combinations(instances, 2))


def check_placements(model: GpuModel, instances: Sequence[PlacedInstance]) -> str | None:
    """Why a set of explicit placements is invalid on ``model``, or None."""
    geo = model.mig
    if geo is None:
        return f"{model.key} does not support MIG"
    profs = []
    for inst in instances:
        prof = geo.by_name(inst.profile)
        if prof is None:
            return f"unknown profile {inst.profile}"
        if inst.placement.start not in prof.placement_starts or inst.placement.size != prof.memory_slices:
            return f"{inst} is not a valid placement (starts {prof.placement_starts})"
        profs.append(prof)
    if _overlap(instances):
        return "instances overlap"
    return _budget_reason(geo, model, profs)


@lru_cache(maxsize=64)
def _all_layouts(model_key: str, profile_names: tuple[str, ...]) -> tuple[tuple[PlacedInstance, ...], ...]:
    """Every valid set of placed instances (including the empty one)."""

    model = get_model(model_key)
    geo = model.mig
    assert geo is not None
    profs = [p for p in geo.profiles if p.name in profile_names]
    cands = [(p, s) for p in profs for s in p.placement_starts]
    out: list[tuple[PlacedInstance, ...]] = []

    def go(i: int, mask: int, chosen: list[tuple[MigProfile, int]]) -> None:
        if i == len(cands):
            out.append(tuple(sorted(PlacedInstance(Placement(s, p.memory_slices), p.name) for p, s in chosen)))
            return
        go(i + 1, mask, chosen)
        p, s = cands[i]
        bits = ((1 << p.memory_slices) - 1) << s
        if mask & bits:
            return
        trial = [*chosen, (p, s)]
        if _budget_reason(geo, model, [q for q, _ in trial]) is None:
            go(i + 1, mask | bits, trial)

    go(0, 0, [])
    return tuple(out)


def default_profiles(model: GpuModel) -> tuple[str, ...]:
    """The classic profile set of the MIG user guide's tables: no attribute variants (+me,
    +me.all, +gfx, -me), no double-memory 1g."""
    assert model.mig is not None
    return tuple(p.name for p in model.mig.profiles if not p.attributes and p.nvml_enum != 9)


def all_layouts(model: GpuModel, profiles: Sequence[str] | None = None) -> tuple[tuple[PlacedInstance, ...], ...]:
    names = tuple(profiles) if profiles is not None else tuple(p.name for p in model.mig.profiles)  # type: ignore[union-attr]
    return _all_layouts(model.key, tuple(sorted(names)))


def maximal_layouts(model: GpuModel, profiles: Sequence[str] | None = None) -> list[tuple[PlacedInstance, ...]]:
    """Valid layouts to which no further instance (of ``profiles``) can be added."""
    layouts = all_layouts(model, profiles)
    valid = set(layouts)
    geo = model.mig
    assert geo is not None
    names = set(profiles) if profiles is not None else {p.name for p in geo.profiles}
    cands = [
        PlacedInstance(Placement(s, p.memory_slices), p.name)
        for p in geo.profiles
        if p.name in names
        for s in p.placement_starts
    ]
    out = []
    for lay in layouts:
        if not any(tuple(sorted((*lay, c))) in valid for c in cands if c not in lay):
            out.append(lay)
    return sorted(out, key=lambda lay: [(-i.placement.size, i.placement.start) for i in lay])


def feasible_count_sets(model: GpuModel) -> list[dict[str, int]]:
    """Every distinct multiset of profiles that fits (from all valid layouts)."""
    seen = {tuple(sorted(Counter(i.profile for i in lay).items())) for lay in all_layouts(model)}
    return [dict(s) for s in sorted(seen)]


def nearest_feasible(model: GpuModel, counts: Mapping[str, int]) -> dict[str, int] | None:
    """The feasible multiset closest to ``counts``.

    Distance: compute slices added or removed per profile.  Ties prefer layouts
    that only remove instances, then more compute used, then name order.
    """
    geo = model.mig
    if geo is None:
        return None
    comp = {p.name: p.compute_slices for p in geo.profiles}
    best: tuple[tuple[int, int, int, str], dict[str, int]] | None = None
    for cand in feasible_count_sets(model):
        if not cand:
            continue
        names = set(cand) | {n for n, v in counts.items() if v}
        dist = sum(abs(cand.get(n, 0) - counts.get(n, 0)) * comp.get(n, 1) for n in names)
        grows = int(any(cand.get(n, 0) > counts.get(n, 0) for n in names))
        used = sum(comp[n] * v for n, v in cand.items())
        key = (dist, grows, -used, format_counts(cand))
        if best is None or key < best[0]:
            best = (key, cand)
    return best[1] if best else None
