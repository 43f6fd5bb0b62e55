"""Per MIG model: an independent brute force over placements, the planner and the simulator agree.

The brute force here knows only the MIG rules of the reference (§2.1): a GPU instance
occupies ``memory_slices`` consecutive slots from one of its placement starts; instances
never overlap; their compute slices fit the GPU; a profile never exceeds its max count;
at most ``max_mig_devices`` instances; one media-extension instance (``+me``, ``+me.all``)
per GPU, and a ``+me.all`` one only beside ``-me`` ones.  It shares no code with the planner or the simulator, so a wrong rule in
either shows up as a difference.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from pathlib import Path

import pynvml
import pytest

from slurm_gpupool.config.machines import GpuSpec, MachineSpec
from slurm_gpupool.core.mig.catalog import GpuModel, all_models, get_model
from slurm_gpupool.core.mig.planner import all_layouts, default_profiles, maximal_layouts, plan_gpu
from slurm_gpupool.errors import InfeasibleError
from slurm_gpupool.hw.sim.state import SimStore, create_node_state

from .conftest import install_sim, uninstall

MIG_MODELS = sorted(k for k, m in all_models().items() if m.mig)
Layout = frozenset[tuple[str, int]]  # (profile name, start)


def brute_force(m: GpuModel, names: set[str] | None = None) -> set[Layout]:
    """Every valid set of placed instances (the empty one included), by plain enumeration."""
    geo = m.mig
    assert geo is not None
    cands = [(p, s) for p in geo.profiles if names is None or p.name in names for s in p.placement_starts]
    out: set[Layout] = set()

    def ok(chosen: list) -> bool:
        cells = [c for p, s in chosen for c in range(s, s + p.memory_slices)]
        per = Counter(p.name for p, _ in chosen)
        return (
            len(cells) == len(set(cells))
            and sum(p.compute_slices for p, _ in chosen) <= geo.compute_slices
            and all(per[p.name] <= p.max_count for p, _ in chosen)
            and len(chosen) <= geo.max_mig_devices
            and sum(1 for p, _ in chosen if "+me" in p.name) <= 1
            # +me.all takes every media engine: only -me profiles may share the GPU (nvml.h)
            and not any(
                p.name.endswith("+me.all") and q is not p and not q.name.endswith("-me")
                for p, _ in chosen
                for q, _ in chosen
            )
        )

    def go(i: int, chosen: list) -> None:
        if i == len(cands):
            out.add(frozenset((p.name, s) for p, s in chosen))
            return
        go(i + 1, chosen)
        chosen.append(cands[i])
        if ok(chosen):
            go(i + 1, chosen)
        chosen.pop()

    go(0, [])
    return out


def as_set(layout) -> Layout:
    return frozenset((i.profile, i.placement.start) for i in layout)


@pytest.mark.parametrize("key", MIG_MODELS)
def test_planner_enumerates_exactly_the_brute_force_layouts(key: str):
    m = get_model(key)
    expected = brute_force(m)
    assert {as_set(lay) for lay in all_layouts(m)} == expected
    maximal = {s for s in expected if not any(s < t for t in expected)}
    assert {as_set(lay) for lay in maximal_layouts(m)} == maximal
    # every multiset some valid layout has is planned; a few that none has are refused
    feasible = {tuple(sorted(Counter(n for n, _ in s).items())) for s in expected}
    for counts in feasible:
        plan = plan_gpu(m, dict(counts))
        assert as_set(plan.instances) in expected
    biggest = max(m.mig.profiles, key=lambda p: (p.memory_slices, p.compute_slices))  # type: ignore[union-attr]
    for p in m.mig.profiles:  # type: ignore[union-attr]
        counts = {biggest.name: 1, p.name: 1} if p != biggest else {p.name: 2}
        if tuple(sorted(Counter(counts).items())) not in feasible:
            with pytest.raises(InfeasibleError):
                plan_gpu(m, counts)


def one_gpu_machine(key: str) -> MachineSpec:
    cpus = tuple(range(8))
    gpu = GpuSpec(0, key, "00000000:17:00.0", 0, 0, cpus)
    return MachineSpec(f"one-{key}", "property test", 1, 8, 1, 65536, {0: cpus}, "pcie", (gpu,))


@pytest.fixture
def sim_gpu(tmp_path: Path):
    def make(key: str):
        path = tmp_path / f"{key}.json"
        create_node_state(path, "simnode", one_gpu_machine(key), overwrite=True)
        store = SimStore(path)
        install_sim(store)
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        pynvml.nvmlDeviceSetMigMode(h, 1)
        if pynvml.nvmlDeviceGetMigMode(h)[0] != 1:
            from slurm_gpupool.hw.sim import inject

            inject.reset_gpu(store, 0)
        return h

    yield make
    uninstall()


def _destroy_all(h, ids: list[int]) -> None:
    for pid in ids:
        info = pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(h, pid)
        arr = (pynvml.c_nvmlGpuInstance_t * info.instanceCount)()
        n = ctypes.c_uint(len(arr))
        pynvml.nvmlDeviceGetGpuInstances(h, pid, arr, ctypes.byref(n))
        for k in range(n.value):
            pynvml.nvmlGpuInstanceDestroy(arr[k])


@pytest.mark.parametrize("key", MIG_MODELS)
def test_simulator_accepts_each_maximal_layout_and_nothing_more(sim_gpu, key: str):
    """Maximal layouts (every one of the classic profiles; a sample of those with +me, +me.all,
    +gfx, -me and double-memory 1g) are created in the simulated driver at their placements,
    and then no further instance of any profile fits."""
    m = get_model(key)
    geo = m.mig
    assert geo is not None
    names = {p.name for p in geo.profiles}
    layouts = brute_force(m, names)
    maximal = [s for s in layouts if not any(s < t for t in layouts)]
    h = sim_gpu(key)
    ids = [p.profile_id for p in geo.profiles]
    # every layout of the user guide's profile set, and an even sample of the others (each
    # simulated create writes the driver's state file: all 458 of an RTX PRO take a minute)
    classic = set(default_profiles(m))
    ordered = sorted(maximal, key=sorted)
    chosen = [lay for lay in ordered if {n for n, _ in lay} <= classic]
    chosen += [lay for lay in ordered if not {n for n, _ in lay} <= classic][:: max(1, len(ordered) // 24)]
    for lay in chosen:
        for name, start in sorted(lay):
            p = geo.by_name(name)
            assert p is not None
            place = pynvml.c_nvmlGpuInstancePlacement_t(start, p.memory_slices)
            pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, p.profile_id, ctypes.byref(place))
        for p in geo.profiles:
            if p.name in names:
                assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, p.profile_id) == 0, (sorted(lay), p.name)
        _destroy_all(h, ids)
