"""From a GPU's live state and its target to the exact NVML operations (pure).

``desired_state`` turns a layout target into explicit placements (keeping the
instances that can stay); ``diff_ops`` lists the operations that get there, in
an order the driver accepts: compute instances before their GPU instance,
destroys before creates, a GPU instance before its compute instance, MIG mode
before instances.  The executor in ``node/apply.py`` runs them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from slurm_gpupool.core.mig.catalog import GpuModel
from slurm_gpupool.core.mig.layouts import MIG, GpuTarget
from slurm_gpupool.core.mig.planner import PlacedInstance, plan_gpu
from slurm_gpupool.model import GpuInfo, GpuInstanceInfo, Placement

SET_MIG, RESET, DESTROY_CI, DESTROY_GI, CREATE_GI, CREATE_CI = (
    "set_mig",
    "reset_if_pending",
    "destroy_ci",
    "destroy_gi",
    "create_gi",
    "create_ci",
)


@dataclass(frozen=True)
class Op:
    """One NVML operation on one GPU."""

    kind: str
    gpu: int
    enable: bool = False  # SET_MIG
    profile: str = ""
    profile_id: int = -1
    placement: Placement | None = None  # GI placement (identifies GIs still to be created)
    gi_id: int | None = None  # existing GI
    ci_id: int | None = None
    ci_slices: int = 0

    def describe(self, bus_id: str = "") -> str:
        """The call as an admin would recognise it (``--dry-run``)."""
        g = f"GPU {self.gpu}"
        if self.kind == SET_MIG:
            mode = "NVML_DEVICE_MIG_ENABLE" if self.enable else "NVML_DEVICE_MIG_DISABLE"
            return f"nvmlDeviceSetMigMode({g}, {mode})    # nvidia-smi -i {self.gpu} -mig {int(self.enable)}"
        if self.kind == RESET:
            return f"nvidia-smi --gpu-reset -i {bus_id or self.gpu}    # only if the mode change is pending (Ampere)"
        if self.kind == DESTROY_CI:
            return f"nvmlComputeInstanceDestroy({g}, GI {self.gi_id}, CI {self.ci_id})"
        if self.kind == DESTROY_GI:
            return f"nvmlGpuInstanceDestroy({g}, GI {self.gi_id} {self.profile} at {self.placement})"
        if self.kind == CREATE_GI:
            assert self.placement is not None
            return (
                f"nvmlDeviceCreateGpuInstanceWithPlacement({g}, profile {self.profile_id} {self.profile}, "
                f"start {self.placement.start} size {self.placement.size})"
            )
        if self.kind == CREATE_CI:
            return (
                f"nvmlGpuInstanceCreateComputeInstance({g}, GI {self.profile} at {self.placement}, "
                f"{self.ci_slices}c full-size CI)"
            )
        return f"{self.kind} {g}"


@dataclass(frozen=True)
class DesiredGpu:
    """Exactly what a GPU should be: MIG on or off, and if on, these instances."""

    mig_on: bool
    instances: tuple[PlacedInstance, ...] = ()


def _healthy(gi: GpuInstanceInfo, model: GpuModel | None) -> bool:
    """A GI we manage has exactly one compute instance, of full size."""
    if len(gi.devices) != 1 or model is None or model.mig is None:
        return False
    prof = model.mig.by_name(gi.profile)
    return prof is not None and gi.devices[0].ci_slices == prof.compute_slices


def current_instances(gpu: GpuInfo, model: GpuModel | None) -> tuple[PlacedInstance, ...]:
    return tuple(sorted(PlacedInstance(gi.placement, gi.profile) for gi in gpu.instances if _healthy(gi, model)))


def matches(gpu: GpuInfo, target: GpuTarget, model: GpuModel | None) -> bool:
    """Does the GPU already satisfy the target?  (``gpupool node assert``)."""
    if target.mode != MIG:
        return not gpu.mig_capable or (not gpu.mig_current and not gpu.mig_pending)
    if not (gpu.mig_current and gpu.mig_pending):
        return False
    if any(not _healthy(gi, model) for gi in gpu.instances):
        return False
    have = Counter(gi.profile for gi in gpu.instances)
    return have == Counter(target.counts)


def mismatch(gpu: GpuInfo, target: GpuTarget, model: GpuModel | None) -> str:
    """One line saying how a GPU differs from its target."""
    return f"GPU {gpu.index}: is {describe(gpu, model)}, wants {target}"


def describe(gpu: GpuInfo, model: GpuModel | None) -> str:
    """The GPU's state in layout terms: ``whole (MIG off)``, ``mig {1g.5gb: 7}``..."""
    if not gpu.mig_capable:
        state = "whole (no MIG)"
    elif gpu.mig_current != gpu.mig_pending:
        state = f"MIG {'on' if gpu.mig_current else 'off'}, pending {'on' if gpu.mig_pending else 'off'}"
    elif not gpu.mig_current:
        state = "whole (MIG off)"
    else:
        counts = Counter(gi.profile for gi in gpu.instances)
        state = "mig {" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + "}"
        odd = [gi for gi in gpu.instances if not _healthy(gi, model)]
        if odd:
            state += f" ({len(odd)} instance(s) without exactly one full compute instance)"
    return state


def desired_state(gpu: GpuInfo, target: GpuTarget, model: GpuModel | None) -> DesiredGpu:
    """Explicit placements for a target, keeping what can stay (planner)."""
    if target.mode != MIG:
        return DesiredGpu(False)
    assert model is not None
    keep = current_instances(gpu, model) if gpu.mig_current else ()
    return DesiredGpu(True, plan_gpu(model, target.counts, keep).instances)


def snapshot(gpu: GpuInfo, model: GpuModel | None) -> DesiredGpu:
    """The GPU as it is now, as a desired state (what a rollback restores)."""
    return DesiredGpu(gpu.mig_current, current_instances(gpu, model) if gpu.mig_current else ())


def diff_ops(gpu: GpuInfo, desired: DesiredGpu, model: GpuModel | None) -> list[Op]:
    """NVML operations from ``gpu`` to ``desired``; empty when nothing differs."""
    ops: list[Op] = []
    i = gpu.index
    if desired.mig_on:
        assert model is not None and model.mig is not None
        keep: set[PlacedInstance] = set()
        if gpu.mig_current:
            if not gpu.mig_pending:  # a disable was requested; cancel it
                ops.append(Op(SET_MIG, i, enable=True))
            wanted = set(desired.instances)
            for gi in gpu.instances:
                placed = PlacedInstance(gi.placement, gi.profile)
                if _healthy(gi, model) and placed in wanted and placed not in keep:
                    keep.add(placed)
                    continue
                ops += _destroy(gi)
        else:
            if not gpu.mig_pending:
                ops.append(Op(SET_MIG, i, enable=True))
            ops.append(Op(RESET, i))
        for inst in desired.instances:
            if inst in keep:
                continue
            prof = model.mig.by_name(inst.profile)
            assert prof is not None
            ops.append(Op(CREATE_GI, i, profile=prof.name, profile_id=prof.profile_id, placement=inst.placement))
            ops.append(Op(CREATE_CI, i, profile=prof.name, placement=inst.placement, ci_slices=prof.compute_slices))
        return ops
    if not gpu.mig_capable:
        return ops
    for gi in gpu.instances:
        ops += _destroy(gi)
    if gpu.mig_current or gpu.mig_pending:
        if gpu.mig_pending:
            ops.append(Op(SET_MIG, i, enable=False))
        ops.append(Op(RESET, i))
    return ops


def _destroy(gi: GpuInstanceInfo) -> list[Op]:
    out = [Op(DESTROY_CI, gi.gpu_index, gi_id=gi.gi_id, ci_id=d.ci_id) for d in gi.devices]
    out.append(Op(DESTROY_GI, gi.gpu_index, profile=gi.profile, placement=gi.placement, gi_id=gi.gi_id))
    return out
