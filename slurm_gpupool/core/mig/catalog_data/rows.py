"""The catalog's row types: one keyword-built row per GPU model and per MIG profile.

Plain frozen data, no behaviour: ``core/mig/catalog.py`` turns rows into the models the code
uses.  Every field is named where it is written (``kw_only``), as in go-nvml's machine
presets, so a row reads without a column legend.  A variant of a profile (``+me``, ``+gfx``,
``-me``) is written as ``dataclasses.replace`` of its size's plain profile: what it changes.
"""

from __future__ import annotations

from dataclasses import dataclass

AMPERE, HOPPER, BLACKWELL = "ampere", "hopper", "blackwell"
ADA, TURING, VOLTA = "ada", "turing", "volta"

# nvmlDeviceGetNvLinkVersion values (nvmlNvlinkVersion_t); NO_NVLINK: PCIe-only boards.
NO_NVLINK, NVLINK2, NVLINK3, NVLINK4, NVLINK5 = 0, 2, 4, 6, 7


@dataclass(frozen=True, kw_only=True)
class ProfileRow:
    """One GPU-instance profile, as ``nvidia-smi mig -lgip`` lists it (placements: ``-lgipp``)."""

    name: str  # NVIDIA spelling, e.g. "1g.10gb" or "1g.10gb+me"
    nvml_enum: int  # NVML_GPU_INSTANCE_PROFILE_*: what nvmlDeviceGetGpuInstanceProfileInfo takes
    profile_id: int  # info.id, the -lgip "ID" every later call takes; it differs from the enum
    compute_slices: int
    memory_slices: int  # placement size on the memory-slice axis
    memory_mib: int
    max_count: int
    sm_count: int
    copy_engines: int
    decoders: int
    jpegs: int
    ofas: int
    placement_starts: tuple[int, ...]  # on the memory-slice axis


@dataclass(frozen=True, kw_only=True)
class MigTable:
    """A board's MIG geometry and profiles; boards with the same table share one, by name."""

    memory_slots: int
    compute_slices: int
    max_mig_devices: int
    profiles: tuple[ProfileRow, ...]


@dataclass(frozen=True, kw_only=True)
class ModelRow:
    """One GPU model: how a node names it, what it is, and where each value comes from."""

    key: str  # catalog name used in machine descriptions and the pool config
    nvml_names: tuple[str, ...]  # what nvmlDeviceGetName returns (first: canonical)
    pci_device_ids: tuple[int, ...]  # `lspci -nn` [10de:XXXX], nvidia-smi -q "Device Id" >> 16 (first: canonical)
    architecture: str
    compute_capability: tuple[int, int]
    memory_mib: int  # whole-GPU memory as NVML reports it
    nvlink_version: int  # NVLINK* above
    nvlinks: int
    temp_slowdown_c: int
    temp_shutdown_c: int
    mig: MigTable | None  # None: no MIG (nvmlDeviceGetMigMode is NOT_SUPPORTED)
    source: str  # keys of docs/research/gpu-catalog-sources.md, and what is unverified


# --- 7 compute slices on 8 memory slots (A100, H100/H200, B200/B300): one geometry --------
ALL7 = (0, 1, 2, 3, 4, 5, 6)
QUARTERS = (0, 2, 4, 6)
HALVES = (0, 4)


@dataclass(frozen=True, kw_only=True)
class ProfileSize:
    """What one size of a 7-slice family differs in from board to board."""

    name: str
    memory_mib: int
    sm_count: int


def seven_slice(*profiles: ProfileRow) -> MigTable:
    """The MIG geometry of 7-compute-slice, 8-memory-slot boards."""
    return MigTable(memory_slots=8, compute_slices=7, max_mig_devices=7, profiles=profiles)
