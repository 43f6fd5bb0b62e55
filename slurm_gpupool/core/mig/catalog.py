"""Typed view of the GPU model catalog (``catalog_data``: one keyword row per model).

Pure: no I/O.  The planner, the simulator and the GRES generator all read MIG
facts from here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from slurm_gpupool.core.mig import catalog_data
from slurm_gpupool.errors import ConfigError


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile, as ``nvidia-smi mig -lgip`` lists it."""

    name: str  # NVIDIA spelling, e.g. "1g.10gb" or "1g.10gb+me"
    nvml_enum: int  # NVML_GPU_INSTANCE_PROFILE_* (query key)
    profile_id: int  # info.id: what create/list calls take
    compute_slices: int
    memory_slices: int  # placement size on the memory-slice axis
    memory_mib: int
    max_count: int
    sm_count: int
    copy_engines: int
    decoders: int
    jpegs: int
    ofas: int
    placement_starts: tuple[int, ...]

    @property
    def attributes(self) -> tuple[str, ...]:
        """GPU-instance attributes after the size: ``+me``, ``+me.all``, ``+gfx``, ``-me``."""
        rest = self.name.partition("gb")[2]
        if rest.startswith("-"):
            return (rest,)
        return tuple(rest[1:].split(",")) if rest else ()

    @property
    def has_media_extensions(self) -> bool:
        """Takes the GPU's shared media engines (``+me``, ``+me.all``): one such instance per GPU."""
        return any(a in ("me", "me.all") for a in self.attributes)

    def excludes(self, other: MigProfile) -> str | None:
        """Why this instance and ``other`` cannot share a GPU whatever their placements, or None.

        nvml.h: ``_ALL_ME`` profiles (``+me.all``) block all but ``_NO_ME`` ones (``-me``);
        and one media-extension instance per GPU."""
        for a, b in ((self, other), (other, self)):
            if "me.all" in a.attributes and "-me" not in b.attributes:
                return f"{a.name} takes every media engine: only -me profiles can share its GPU, not {b.name}"
        if self.has_media_extensions and other.has_media_extensions:
            return "only one instance with media extensions (+me) per GPU"
        return None

    @property
    def full_ci_slices(self) -> int:
        """Compute slices of the full-size CI, the one ``-cgi ... -C`` creates."""
        return self.compute_slices


@dataclass(frozen=True)
class MigGeometry:
    """A GPU model's MIG slots and profiles (``nvidia-smi mig -lgip``): what the planner fits layouts into."""

    memory_slots: int
    compute_slices: int
    max_mig_devices: int
    profiles: tuple[MigProfile, ...]

    def by_name(self, name: str) -> MigProfile | None:
        for p in self.profiles:
            if p.name == name:
                return p
        return None

    def by_id(self, profile_id: int) -> MigProfile | None:
        for p in self.profiles:
            if p.profile_id == profile_id:
                return p
        return None

    def by_enum(self, nvml_enum: int) -> MigProfile | None:
        for p in self.profiles:
            if p.nvml_enum == nvml_enum:
                return p
        return None


@dataclass(frozen=True)
class GpuModel:
    """A GPU model of the catalog: how NVML and PCI name it and what it can be split into."""

    key: str  # catalog name, e.g. "A100-SXM4-40GB"
    nvml_names: tuple[str, ...]  # nvmlDeviceGetName, e.g. "NVIDIA A100-SXM4-40GB" (first: canonical)
    pci_device_ids: tuple[int, ...]  # `lspci -nn` [10de:XXXX] (first: canonical)
    architecture: str
    compute_capability: tuple[int, int]
    memory_mib: int
    nvlink_version: int  # nvmlDeviceGetNvLinkVersion; 0: no NVLink
    nvlinks: int
    temp_slowdown_c: int
    temp_shutdown_c: int
    mig: MigGeometry | None
    source: str  # where the values come from, and what is unverified

    @property
    def nvml_name(self) -> str:
        return self.nvml_names[0]

    @property
    def pci_device_id(self) -> int:
        return self.pci_device_ids[0]

    @property
    def mig_capable(self) -> bool:
        return self.mig is not None

    @property
    def mig_mode_needs_reset(self) -> bool:
        return catalog_data.RESET_FOR_MIG_MODE.get(self.architecture, False)

    def profile(self, name: str) -> MigProfile:
        """The named profile, or a ConfigError listing the ones this model has."""
        if self.mig is None:
            raise ConfigError(self.key, "", f"{self.nvml_name} does not support MIG (no profile {name!r})")
        p = self.mig.by_name(name)
        if p is None:
            names = ", ".join(q.name for q in self.mig.profiles)
            raise ConfigError(self.key, "", f"unknown MIG profile {name!r}; {self.key} has: {names}")
        return p


def build_model(key: str, raw: dict) -> GpuModel:
    """A site's model from its :func:`site_model_entry` (a catalog row's fields but the key)."""
    return _model(catalog_data.ModelRow(key=key, **raw))


def _model(row: catalog_data.ModelRow) -> GpuModel:
    return GpuModel(
        key=row.key,
        nvml_names=row.nvml_names,
        pci_device_ids=row.pci_device_ids,
        architecture=row.architecture,
        compute_capability=row.compute_capability,
        memory_mib=row.memory_mib,
        nvlink_version=row.nvlink_version,
        nvlinks=row.nvlinks,
        temp_slowdown_c=row.temp_slowdown_c,
        temp_shutdown_c=row.temp_shutdown_c,
        mig=None if row.mig is None else _geometry(row.mig),
        source=row.source,
    )


def _geometry(table: catalog_data.MigTable) -> MigGeometry:
    return MigGeometry(
        memory_slots=table.memory_slots,
        compute_slices=table.compute_slices,
        max_mig_devices=table.max_mig_devices,
        profiles=tuple(_profile(p) for p in table.profiles),
    )


def _profile(row: catalog_data.ProfileRow) -> MigProfile:
    return MigProfile(
        name=row.name,
        nvml_enum=row.nvml_enum,
        profile_id=row.profile_id,
        compute_slices=row.compute_slices,
        memory_slices=row.memory_slices,
        memory_mib=row.memory_mib,
        max_count=row.max_count,
        sm_count=row.sm_count,
        copy_engines=row.copy_engines,
        decoders=row.decoders,
        jpegs=row.jpegs,
        ofas=row.ofas,
        placement_starts=row.placement_starts,
    )


# The pool config's own models (``gpu_models:``): GPUs the catalog does not know yet, as
# whole or time-shared GPUs.  Set by the config parser; the built-in models never change.
_site_models: dict[str, dict] = {}
_generation = 0  # changes with the site models: caches of derived values key on it


def generation() -> int:
    return _generation


def set_site_models(raw: dict[str, dict]) -> None:
    """Make the config's ``gpu_models`` known beside the built-in ones (replacing earlier ones)."""
    global _site_models, _generation
    if raw == _site_models:
        return
    _site_models = dict(raw)
    _generation += 1
    all_models.cache_clear()
    _by_name.cache_clear()
    _by_pci.cache_clear()


def site_model_entry(
    nvml_name: str, pci_device_id: int, memory_mib: int, cc: tuple[int, int], nvlinks: int, source: str
) -> dict:
    """A whole-GPU catalog entry for a model a site describes (no MIG: its tables need research):
    the fields of a catalog row but its key, as the pool config keeps it."""
    return {
        "nvml_names": (nvml_name,),
        "pci_device_ids": (pci_device_id,),
        "architecture": "site",
        "compute_capability": cc,
        "memory_mib": memory_mib,
        "nvlink_version": catalog_data.NVLINK3 if nvlinks else 0,
        "nvlinks": nvlinks,
        "temp_slowdown_c": 87,  # not the site's GPU's own thresholds: those of the Hopper boards
        "temp_shutdown_c": 92,
        "mig": None,
        "source": source,
    }


@cache
def all_models() -> dict[str, GpuModel]:
    out = {k: _model(row) for k, row in catalog_data.MODELS.items()}
    out.update((k, build_model(k, v)) for k, v in _site_models.items())
    return out


def get_model(key: str) -> GpuModel:
    models = all_models()
    if key in models:
        return models[key]
    by_name = model_by_nvml_name(key)
    if by_name is not None:
        return by_name
    raise ConfigError(
        "GPU model catalog",
        key,
        "unknown GPU model",
        hint="a catalog key or an NVML name (`gpupool layout models` lists them): " + ", ".join(sorted(models)),
    )


def model_by_nvml_name(nvml_name: str) -> GpuModel | None:
    """Match what ``nvmlDeviceGetName`` returns (old drivers lack the 'NVIDIA ' prefix)."""
    return _by_name().get(nvml_name.strip().removeprefix("NVIDIA "))


def model_by_pci_device_id(device_id: int) -> GpuModel | None:
    """The model with this PCI device id (``lspci -nn`` ``[10de:XXXX]``; NVML's pciDeviceId >> 16),
    None when none or several products share it (A2 and A16; the RTX PRO 5000 boards)."""
    found = models_with_pci_id(device_id)
    return found[0] if len(found) == 1 else None


@cache
def _by_name() -> dict[str, GpuModel]:
    return {n.removeprefix("NVIDIA "): m for m in all_models().values() for n in m.nvml_names}


def models_with_pci_id(device_id: int) -> tuple[GpuModel, ...]:
    return _by_pci().get(device_id, ())


@cache
def _by_pci() -> dict[int, tuple[GpuModel, ...]]:
    out: dict[int, tuple[GpuModel, ...]] = {}
    for m in all_models().values():
        for i in m.pci_device_ids:
            out[i] = (*out.get(i, ()), m)
    return out


def detect(nvml_name: str, pci_device_id: int) -> GpuModel | None:
    """The catalog model of a GPU found on a node: by its NVML name, else by its PCI device id.

    A name is product-specific; one device id can serve several products (told apart by
    the subsystem: A2/A16), and names change with drivers (old ones lack 'NVIDIA '), so the
    id alone decides only when it is unambiguous."""
    return model_by_nvml_name(nvml_name) or model_by_pci_device_id(pci_device_id)


def identify(nvml_name: str, pci_device_id: int, where: str) -> GpuModel:
    """:func:`detect`, or a clear error naming the GPU's name and id and how to describe it."""
    model = detect(nvml_name, pci_device_id)
    if model is None:
        shared = [m.key for m in models_with_pci_id(pci_device_id)]
        also = f"; that id is {' or '.join(shared)}, which the name does not say" if shared else ""
        raise ConfigError(
            where,
            "",
            f"unknown GPU {nvml_name!r} (PCI device id 10de:{pci_device_id:04x}): not in the GPU catalog{also}",
            hint="`gpupool layout models` lists the known ones; describe it in the pool config under "
            f"gpu_models: (nvml_name, pci_device_id: 0x{pci_device_id:04X}, memory_mib) to use it whole or "
            "time-shared (docs/config.md#gpu_models)",
        )
    return model


@cache
def gi_profile_enum_span() -> int:
    """One past the highest ``NVML_GPU_INSTANCE_PROFILE_*`` value any model uses: the enums
    to ask NVML about, whatever the pynvml binding's (older) ``..._PROFILE_COUNT`` says."""
    return 1 + max(p.nvml_enum for m in all_models().values() if m.mig for p in m.mig.profiles)


def ci_sizes(gi_compute_slices: int) -> tuple[int, ...]:
    """CI sizes (compute slices) offered inside a GI (``nvidia-smi mig -lcip``)."""
    return catalog_data.CI_SIZES_BY_GI_SLICES.get(gi_compute_slices, (gi_compute_slices,))


def ci_profile_id(ci_slices: int) -> int:
    """CI profile ID (= NVML_COMPUTE_INSTANCE_PROFILE_* enum) for a CI size."""
    return catalog_data.CI_ENUM_BY_SLICES[ci_slices]


def ci_slices_for_enum(ci_enum: int) -> int | None:
    for slices, enum in catalog_data.CI_ENUM_BY_SLICES.items():
        if enum == ci_enum:
            return slices
    return None


def gi_slot_id(geometry: MigGeometry, start: int, size: int) -> int:
    """The GPU-instance ID recent drivers give a placement ("slot number" scheme).

    Only the simulator uses this: the real tool always reads GI IDs back
    (``nvmlGpuInstanceGetInfo(gi).id``), because transcripts contradict the scheme.
    On 8-slot boards: full GPU 0, halves 1-2, quarters 3-6, eighths 7-13.
    On the 4-slot A30: full 0, halves 1-2, quarters 3-6.
    """
    slots = geometry.memory_slots
    if size >= slots:
        return 0
    if size * 2 == slots:
        return 1 + start // size
    if size * 4 == slots:
        return 3 + start // size
    return 7 + start
