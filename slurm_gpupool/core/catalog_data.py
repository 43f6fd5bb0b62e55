"""GPU models and their MIG profiles, as data: the one source for planner and simulator.

Transcribed from ``reference/mig-nvml-facts.md`` §1.4 (NVIDIA MIG user guide tables and
``nvidia-smi mig -lgip`` / ``-lgipp`` transcripts).  Values the reference marks UNVERIFIED
are kept here as data with a ``# unverified`` note, never as code.

Profile rows are::

    (name, nvml_enum, profile_id, compute_slices, memory_slices, memory_mib,
     max_count, sm_count, copy_engines, decoders, jpegs, ofas, placement_starts)

* ``nvml_enum`` is the ``NVML_GPU_INSTANCE_PROFILE_*`` value passed to
  ``nvmlDeviceGetGpuInstanceProfileInfo``; ``profile_id`` is the ``info.id`` that
  every later call takes (``nvidia-smi mig -lgip`` "ID").  They differ.
* ``placement_starts`` are on the memory-slice axis (``nvidia-smi mig -lgipp``).
"""

from __future__ import annotations

from typing import Any

ALL7 = (0, 1, 2, 3, 4, 5, 6)
QUARTERS = (0, 2, 4, 6)
HALVES = (0, 4)

# Compute-instance sizes offered inside a GI of N compute slices (reference §2.2),
# the largest being the full-size CI created by ``nvidia-smi mig -cgi ... -C``.
CI_SIZES_BY_GI_SLICES: dict[int, tuple[int, ...]] = {
    1: (1,),
    2: (1, 2),
    3: (1, 2, 3),
    4: (1, 2, 4),
    7: (1, 2, 3, 4, 7),
}

# NVML_COMPUTE_INSTANCE_PROFILE_* enum by CI compute-slice count; CI profile IDs equal
# the enum values (``nvidia-smi mig -lcip``: 1c=0, 2c=1, 3c=2, 4c=3, 7c=4).
CI_ENUM_BY_SLICES: dict[int, int] = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


def _h100_family(names: tuple[str, ...], mem: tuple[int, ...], sm_1g_rev2: int = 26) -> list[tuple[Any, ...]]:
    """Hopper 7-slice boards share IDs, placements and engines; names and memory differ.

    ``names``/``mem``: 1g, 1g REV2 (double memory), 2g, 3g, 4g, 7g.
    """
    n1, n1r2, n2, n3, n4, n7 = names
    m1, m1r2, m2, m3, m4, m7 = mem
    return [
        (n1, 0, 19, 1, 1, m1, 7, 16, 1, 1, 1, 0, ALL7),
        (n1 + "+me", 7, 20, 1, 1, m1, 1, 16, 1, 1, 1, 1, ALL7),
        (n1r2, 9, 15, 1, 2, m1r2, 4, sm_1g_rev2, 1, 1, 1, 0, QUARTERS),
        (n2, 1, 14, 2, 2, m2, 3, 32, 2, 2, 2, 0, (0, 2, 4)),
        (n3, 2, 9, 3, 4, m3, 2, 60, 3, 3, 3, 0, HALVES),
        (n4, 3, 5, 4, 4, m4, 1, 64, 4, 4, 4, 0, (0,)),
        (n7, 4, 0, 7, 8, m7, 1, 132, 8, 7, 7, 1, (0,)),
    ]


def _a100_family(names: tuple[str, ...], mem: tuple[int, ...]) -> list[tuple[Any, ...]]:
    """Ampere 7-slice boards: IDs 19/20/15/14/9/5/0, A100 SM and engine counts."""
    n1, n1me, n1r2, n2, n3, n4, n7 = names
    m1, m1r2, m2, m3, m4, m7 = mem
    return [
        (n1, 0, 19, 1, 1, m1, 7, 14, 1, 0, 0, 0, ALL7),
        (n1me, 7, 20, 1, 1, m1, 1, 14, 1, 1, 1, 1, ALL7),
        (n1r2, 9, 15, 1, 2, m1r2, 4, 14, 1, 1, 0, 0, QUARTERS),
        (n2, 1, 14, 2, 2, m2, 3, 28, 2, 1, 0, 0, (0, 2, 4)),
        (n3, 2, 9, 3, 4, m3, 2, 42, 3, 2, 0, 0, HALVES),
        (n4, 3, 5, 4, 4, m4, 1, 56, 4, 2, 0, 0, (0,)),
        (n7, 4, 0, 7, 8, m7, 1, 98, 7, 5, 1, 1, (0,)),
    ]


def _seven_slice(profiles: list[tuple[Any, ...]]) -> dict[str, Any]:
    """The MIG geometry of 7-compute-slice, 8-memory-slot boards (A100, H100, H200)."""
    return {"memory_slots": 8, "compute_slices": 7, "max_mig_devices": 7, "profiles": profiles}


A100_40GB = _a100_family(
    ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    (4864, 9856, 9856, 19968, 19968, 40192),
)
A100_80GB = _a100_family(
    ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    # 1g.20gb memory is unverified (~19.50 GiB)
    (9728, 19968, 19968, 40192, 40192, 80896),
)
# `nvidia-smi mig -lgip` on an 8-GPU H200 (NVIDIA/mig-parted issue #120): IDs, SMs
# (16/26/32/60/64/132), engines and max counts as H100; GiB 16.00/32.25/69.50/139.75 (MiB from
# the GiB column, which is truncated to 1/100 GiB); placements unverified
H200_141GB = _h100_family(
    ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    (16384, 33024, 33024, 71168, 71168, 143104),
)


# Keys are the catalog model names used in machine descriptions and the pool config.
MODELS: dict[str, dict[str, Any]] = {
    "A100-SXM4-40GB": {
        "nvml_name": "NVIDIA A100-SXM4-40GB",
        "pci_device_id": 0x20B0,
        "architecture": "ampere",
        "memory_mib": 40537,
        "nvlink_version": 4,  # NVLink 3.0 (nvmlDeviceGetNvLinkVersion enum)
        "nvlinks": 12,
        "temp_slowdown_c": 90,
        "temp_shutdown_c": 92,
        "mig": _seven_slice(A100_40GB),
    },
    "A100-SXM4-80GB": {
        "nvml_name": "NVIDIA A100-SXM4-80GB",
        "pci_device_id": 0x20B2,
        "architecture": "ampere",
        "memory_mib": 81920,
        "nvlink_version": 4,
        "nvlinks": 12,
        "temp_slowdown_c": 90,
        "temp_shutdown_c": 92,
        "mig": _seven_slice(A100_80GB),
    },
    "A30": {
        "nvml_name": "NVIDIA A30",
        "pci_device_id": 0x20B7,
        "architecture": "ampere",
        "memory_mib": 24576,
        "nvlink_version": 4,
        "nvlinks": 4,
        "temp_slowdown_c": 90,
        "temp_shutdown_c": 95,
        "mig": {
            "memory_slots": 4,
            "compute_slices": 4,
            "max_mig_devices": 4,
            "profiles": [
                ("1g.6gb", 0, 14, 1, 1, 5952, 4, 14, 1, 1, 0, 0, (0, 1, 2, 3)),
                ("1g.6gb+me", 7, 21, 1, 1, 5952, 1, 14, 1, 1, 1, 1, (0, 1, 2, 3)),
                ("2g.12gb", 1, 5, 2, 2, 11968, 2, 28, 2, 2, 0, 0, (0, 2)),
                # 2g.12gb+me: profile ID 6 and placements are unverified
                ("2g.12gb+me", 8, 6, 2, 2, 11968, 1, 28, 2, 2, 1, 1, (0, 2)),
                ("4g.24gb", 3, 0, 4, 4, 24064, 1, 56, 4, 4, 1, 1, (0,)),
            ],
        },
    },
    "H100-SXM5-80GB": {
        "nvml_name": "NVIDIA H100 80GB HBM3",
        "pci_device_id": 0x2330,
        "architecture": "hopper",
        "memory_mib": 81559,
        "nvlink_version": 6,  # NVLink 4.0
        "nvlinks": 18,
        "temp_slowdown_c": 87,
        "temp_shutdown_c": 92,
        "mig": {
            "memory_slots": 8,
            "compute_slices": 7,
            "max_mig_devices": 7,
            "profiles": _h100_family(
                ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
                (9984, 20096, 20096, 40448, 40448, 81152),
            ),
        },
    },
    "H100-NVL": {
        "nvml_name": "NVIDIA H100 NVL",
        "pci_device_id": 0x2321,
        "architecture": "hopper",
        "memory_mib": 95830,
        "nvlink_version": 6,
        "nvlinks": 12,
        "temp_slowdown_c": 87,
        "temp_shutdown_c": 92,
        "mig": {
            "memory_slots": 8,
            "compute_slices": 7,
            "max_mig_devices": 7,
            "profiles": _h100_family(
                ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
                (11008, 22144, 22144, 47488, 47488, 95360),
            ),
        },
    },
    "H200": {
        "nvml_name": "NVIDIA H200",
        "pci_device_id": 0x2335,
        "architecture": "hopper",
        "memory_mib": 143771,
        "nvlink_version": 6,
        "nvlinks": 18,
        "temp_slowdown_c": 87,
        "temp_shutdown_c": 92,
        "mig": _seven_slice(H200_141GB),
    },
    # PCIe and NVL boards of the families above: NVML names and PCI ids from NVIDIA's driver
    # README "Compatible GPUs" table (docs/research/gpu-catalog-sources.md §1).
    "A100-PCIE-40GB": {
        "nvml_name": "NVIDIA A100-PCIE-40GB",
        "pci_device_id": 0x20F1,
        "architecture": "ampere",
        "memory_mib": 40960,  # nvidia-smi on a real card
        "nvlink_version": 4,
        "nvlinks": 12,  # through NVLink bridges
        "temp_slowdown_c": 90,  # unverified: as the SXM4 board
        "temp_shutdown_c": 92,
        # the MIG user guide's A100-40GB table covers "A100-PCIE 40GB"; a real card shows 1g.5gb at
        # 4.75 GiB; the other columns as SXM4 (unverified for PCIe)
        "mig": _seven_slice(A100_40GB),
    },
    "A100-PCIE-80GB": {
        "nvml_name": "NVIDIA A100 80GB PCIe",
        "pci_device_id": 0x20B5,
        "architecture": "ampere",
        "memory_mib": 81920,
        "nvlink_version": 4,
        "nvlinks": 12,
        "temp_slowdown_c": 90,  # unverified
        "temp_shutdown_c": 92,
        "mig": _seven_slice(A100_80GB),  # A100 80GB transcripts (form factor not stated)
    },
    "H100-PCIE": {
        "nvml_name": "NVIDIA H100 PCIe",
        "pci_device_id": 0x2331,
        "architecture": "hopper",
        "memory_mib": 81559,
        "nvlink_version": 6,
        "nvlinks": 12,  # through NVLink bridges (unverified)
        "temp_slowdown_c": 87,  # unverified
        "temp_shutdown_c": 92,
        # `nvidia-smi mig -lgip` on an H100 PCIe (driver 570): the H100 SXM table with fewer SMs
        "mig": _seven_slice(
            [
                ("1g.10gb", 0, 19, 1, 1, 9984, 7, 14, 1, 1, 1, 0, ALL7),
                ("1g.10gb+me", 7, 20, 1, 1, 9984, 1, 14, 1, 1, 1, 1, ALL7),
                ("1g.20gb", 9, 15, 1, 2, 20096, 4, 14, 1, 1, 1, 0, QUARTERS),
                ("2g.20gb", 1, 14, 2, 2, 20096, 3, 30, 2, 2, 2, 0, (0, 2, 4)),
                ("3g.40gb", 2, 9, 3, 4, 40448, 2, 46, 3, 3, 3, 0, HALVES),
                ("4g.40gb", 3, 5, 4, 4, 40448, 1, 62, 4, 4, 4, 0, (0,)),
                ("7g.80gb", 4, 0, 7, 8, 81152, 1, 114, 8, 7, 7, 1, (0,)),
            ]
        ),
    },
    "H200-NVL": {
        "nvml_name": "NVIDIA H200 NVL",
        "pci_device_id": 0x233B,
        "architecture": "hopper",
        "memory_mib": 143771,  # nvidia-smi on a real card
        "nvlink_version": 6,
        "nvlinks": 18,  # unverified
        "temp_slowdown_c": 87,  # unverified
        "temp_shutdown_c": 92,
        # NVIDIA's vGPU docs give the H200's names and max counts; the rest is unverified for NVL
        "mig": _seven_slice(H200_141GB),
    },
    "V100-SXM2-32GB": {
        "nvml_name": "Tesla V100-SXM2-32GB",
        "pci_device_id": 0x1DB5,
        "architecture": "volta",
        "memory_mib": 32768,
        "nvlink_version": 2,
        "nvlinks": 6,
        "temp_slowdown_c": 84,
        "temp_shutdown_c": 90,
        "mig": None,
    },
}

# Architectures on which enabling MIG needs a GPU reset (reference §3.3): Ampere yes,
# Hopper and later apply it at once (and lose it on driver reload).
RESET_FOR_MIG_MODE = {"ampere": True, "hopper": False, "blackwell": False}
