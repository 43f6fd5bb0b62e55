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


def _h100_family(
    names: tuple[str, ...], mem: tuple[int, ...], sm: tuple[int, ...] = (16, 26, 32, 60, 64, 132)
) -> list[tuple[Any, ...]]:
    """Hopper 7-slice boards share IDs, placements and engines; names and memory differ.

    ``names``/``mem``: 1g, 1g REV2 (double memory), 2g, 3g, 4g, 7g.
    """
    n1, n1r2, n2, n3, n4, n7 = names
    m1, m1r2, m2, m3, m4, m7 = mem
    s1, s1r2, s2, s3, s4, s7 = sm
    return [
        (n1, 0, 19, 1, 1, m1, 7, s1, 1, 1, 1, 0, ALL7),
        (n1 + "+me", 7, 20, 1, 1, m1, 1, s1, 1, 1, 1, 1, ALL7),
        (n1r2, 9, 15, 1, 2, m1r2, 4, s1r2, 1, 1, 1, 0, QUARTERS),
        (n2, 1, 14, 2, 2, m2, 3, s2, 2, 2, 2, 0, (0, 2, 4)),
        (n3, 2, 9, 3, 4, m3, 2, s3, 3, 3, 3, 0, HALVES),
        (n4, 3, 5, 4, 4, m4, 1, s4, 4, 4, 4, 0, (0,)),
        (n7, 4, 0, 7, 8, m7, 1, s7, 8, 7, 7, 1, (0,)),
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


def _blackwell_family(
    names: tuple[str, ...], mem: tuple[int, ...], sm: tuple[int, ...] = (18, 30, 36, 54, 72, 148)
) -> list[tuple[Any, ...]]:
    """Blackwell 7-slice boards (B200, GB200, B300, GB300): the Hopper IDs (19/20/15/14 seen in
    transcripts; 9/5/0 unverified), MIG-UG copy engines 2/2/2/4/6/8/16 and one NVDEC/JPEG per slice."""
    n1, n1r2, n2, n3, n4, n7 = names
    m1, m1r2, m2, m3, m4, m7 = mem
    s1, s1r2, s2, s3, s4, s7 = sm
    return [
        (n1, 0, 19, 1, 1, m1, 7, s1, 2, 1, 1, 0, ALL7),
        (n1 + "+me", 7, 20, 1, 1, m1, 1, s1, 2, 1, 1, 1, ALL7),
        (n1r2, 9, 15, 1, 2, m1r2, 4, s1r2, 2, 1, 1, 0, QUARTERS),
        (n2, 1, 14, 2, 2, m2, 3, s2, 4, 2, 2, 0, (0, 2, 4)),
        (n3, 2, 9, 3, 4, m3, 2, s3, 6, 3, 3, 0, HALVES),
        (n4, 3, 5, 4, 4, m4, 1, s4, 8, 4, 4, 0, (0,)),
        (n7, 4, 0, 7, 8, m7, 1, s7, 16, 7, 7, 1, (0,)),
    ]


def model_entry(
    names: str | tuple[str, ...],
    pci: int | tuple[int, ...],
    arch: str,
    cc: tuple[int, int],
    memory_mib: int,
    mig: dict[str, Any] | None,
    source: str,
    nvlink: tuple[int, int] = (0, 0),
    temps: tuple[int, int] = (87, 92),
) -> dict[str, Any]:
    """One catalog entry.  ``names``: what ``nvmlDeviceGetName`` returns (first = canonical);
    ``pci``: PCI device ids (``lspci -nn``, ``nvidia-smi -q`` "Device Id" >> 16); ``nvlink``:
    (``nvmlDeviceGetNvLinkVersion`` value, link count), (0, 0) for PCIe-only boards; ``temps``:
    slowdown and shutdown thresholds in °C; ``source``: where the values come from, with what is
    not confirmed by a primary source (keys of docs/research/gpu-catalog-sources.md)."""
    return {
        "nvml_names": (names,) if isinstance(names, str) else names,
        "pci_device_ids": (pci,) if isinstance(pci, int) else pci,
        "architecture": arch,
        "compute_capability": cc,
        "memory_mib": memory_mib,
        "nvlink_version": nvlink[0],
        "nvlinks": nvlink[1],
        "temp_slowdown_c": temps[0],
        "temp_shutdown_c": temps[1],
        "mig": mig,
        "source": source,
    }


NVLINK3, NVLINK4, NVLINK5 = 4, 6, 7  # nvmlNvlinkVersion_t: 3.0, 4.0, 5.0
AMPERE, HOPPER, BLACKWELL = "ampere", "hopper", "blackwell"
A100_TEMPS = (90, 92)


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


H100_80GB = _h100_family(
    ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    (9984, 20096, 20096, 40448, 40448, 81152),
)
# `nvidia-smi mig -lgip` on an H100 PCIe (driver 570): the H100 SXM table with fewer SMs
H100_PCIE = [
    ("1g.10gb", 0, 19, 1, 1, 9984, 7, 14, 1, 1, 1, 0, ALL7),
    ("1g.10gb+me", 7, 20, 1, 1, 9984, 1, 14, 1, 1, 1, 1, ALL7),
    ("1g.20gb", 9, 15, 1, 2, 20096, 4, 14, 1, 1, 1, 0, QUARTERS),
    ("2g.20gb", 1, 14, 2, 2, 20096, 3, 30, 2, 2, 2, 0, (0, 2, 4)),
    ("3g.40gb", 2, 9, 3, 4, 40448, 2, 46, 3, 3, 3, 0, HALVES),
    ("4g.40gb", 3, 5, 4, 4, 40448, 1, 62, 4, 4, 4, 0, (0,)),
    ("7g.80gb", 4, 0, 7, 8, 81152, 1, 114, 8, 7, 7, 1, (0,)),
]
H100_94GB = _h100_family(
    ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    (11008, 22144, 22144, 47488, 47488, 95360),
)
_NAMES_96GB = ("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb")
# GH200 96GB full -lgip: 11.00 / 23.00 / 46.50 / 93.00 GiB; placements unverified
H100_96GB = _h100_family(_NAMES_96GB, (11264, 23552, 23552, 47616, 47616, 95232))
# H20: 1g rows observed (11.75 GiB, 8 SMs); larger sizes derived from that row (twice the
# next smaller plus 256 MiB, 7g kept under the board's 97871 MiB) and SMs scaled from H100 by
# 78/132 (unverified)
_H20_SM = (8, 15, 19, 35, 38, 78)
H20_96GB = _h100_family(_NAMES_96GB, (12032, 24320, 24320, 48896, 48896, 97536), _H20_SM)
GH200_144GB = _h100_family(  # 1g/2g rows observed (17.50 / 35.25 GiB); 3g+ sizes derived
    ("1g.18gb", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb"),
    (17920, 36096, 36096, 72448, 72448, 145152),
)
# B200: 1g 20.50 GiB (driver of March 2025), 1g double and 2g 44.25 GiB, SM 18/30/36 observed;
# 3g+ sizes (twice the next smaller plus 256 MiB, as on Hopper) and SMs derived
B200_180GB = _blackwell_family(
    ("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
    (20992, 45312, 45312, 90880, 90880, 182016),
)
GB200_186GB = _blackwell_family(  # production boards: 22.00 / 45.50 GiB, SM 18/32/38 observed
    ("1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"),
    (22528, 46592, 46592, 93440, 93440, 187136),
    (18, 32, 38, 56, 76, 152),
)
# B300/GB300: names and counts only (the GPU Operator's config); everything else derived
_B300_SM = (20, 32, 40, 60, 80, 160)
B300_288GB = _blackwell_family(
    ("1g.34gb", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb"),
    (34560, 68864, 68864, 137472, 137472, 273664),
    _B300_SM,
)
GB300_288GB = _blackwell_family(
    ("1g.35gb", "1g.70gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb"),
    (35584, 71168, 71168, 142336, 142336, 282880),
    _B300_SM,
)
# RTX PRO 6000 Blackwell: 4 compute slices on a 12-unit memory axis (`-lgipp`: 1g {0,3,6,9}:3,
# 2g {0,6}:6, 4g {0}:12); +gfx (graphics), +me.all (every media engine), -me (none) variants.
_Q, _H = (0, 3, 6, 9), (0, 6)
RTX_PRO_6000_MIG = {
    "memory_slots": 12,
    "compute_slices": 4,
    "max_mig_devices": 4,
    "profiles": [
        ("1g.24gb", 0, 14, 1, 3, 24192, 4, 46, 1, 1, 1, 0, _Q),
        ("1g.24gb+me", 7, 21, 1, 3, 24192, 1, 46, 1, 1, 1, 1, _Q),
        ("1g.24gb+gfx", 0xA, 47, 1, 3, 24192, 4, 46, 1, 1, 1, 0, _Q),
        ("1g.24gb+me.all", 0xF, 65, 1, 3, 24192, 1, 46, 1, 4, 4, 1, _Q),
        ("1g.24gb-me", 0xD, 67, 1, 3, 24192, 4, 46, 1, 0, 0, 0, _Q),
        ("2g.48gb", 1, 5, 2, 6, 48512, 2, 94, 2, 2, 2, 0, _H),
        ("2g.48gb+gfx", 0xB, 35, 2, 6, 48512, 2, 94, 2, 2, 2, 0, _H),
        ("2g.48gb+me.all", 0x10, 64, 2, 6, 48512, 1, 94, 2, 4, 4, 1, _H),
        ("2g.48gb-me", 0xE, 66, 2, 6, 48512, 2, 94, 2, 0, 0, 0, _H),
        ("4g.96gb", 3, 0, 4, 12, 97408, 1, 188, 4, 4, 4, 1, (0,)),
        ("4g.96gb+gfx", 0xC, 32, 4, 12, 97408, 1, 188, 4, 4, 4, 1, (0,)),
    ],
}
# RTX PRO 5000 / 4500 Blackwell: two compute slices (MIG-UG, current copy).  No transcript:
# the memory axis (2 units), IDs (by analogy with the 6000's half and full profiles), SMs and
# sizes are unverified.
RTX_PRO_5000_MIG = {
    "memory_slots": 2,
    "compute_slices": 2,
    "max_mig_devices": 2,
    "profiles": [
        ("1g.24gb", 0, 5, 1, 1, 24192, 2, 55, 1, 1, 0, 0, (0, 1)),
        ("1g.24gb+me", 7, 6, 1, 1, 24192, 1, 55, 1, 1, 1, 1, (0, 1)),
        ("1g.24gb+gfx", 0xA, 35, 1, 1, 24192, 2, 55, 1, 1, 0, 0, (0, 1)),
        ("1g.24gb+me.all", 0xF, 64, 1, 1, 24192, 1, 55, 1, 3, 1, 1, (0, 1)),
        ("1g.24gb-me", 0xD, 66, 1, 1, 24192, 2, 55, 1, 0, 0, 0, (0, 1)),
        ("2g.48gb", 1, 0, 2, 2, 48512, 1, 110, 4, 3, 1, 1, (0,)),
        ("2g.48gb+gfx", 0xB, 32, 2, 2, 48512, 1, 110, 4, 3, 1, 1, (0,)),
    ],
}
RTX_PRO_4500_MIG = {
    "memory_slots": 2,
    "compute_slices": 2,
    "max_mig_devices": 2,
    "profiles": [
        ("1g.16gb", 0, 5, 1, 1, 16128, 2, 41, 1, 1, 1, 0, (0, 1)),
        ("1g.16gb+gfx", 0xA, 35, 1, 1, 16128, 2, 41, 1, 1, 1, 0, (0, 1)),
        ("1g.16gb+me.all", 0xF, 64, 1, 1, 16128, 1, 41, 1, 3, 2, 1, (0, 1)),
        ("1g.16gb-me", 0xD, 66, 1, 1, 16128, 2, 41, 1, 0, 0, 0, (0, 1)),
        ("2g.32gb", 1, 0, 2, 2, 32256, 1, 82, 2, 3, 2, 1, (0,)),
        ("2g.32gb+gfx", 0xB, 32, 2, 2, 32256, 1, 82, 2, 3, 2, 1, (0,)),
    ],
}

H20_141GB = _h100_family(  # H20-3e: H200 names and sizes, H20 SMs (all unverified)
    ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    (16384, 33024, 33024, 71168, 71168, 143104),
    _H20_SM,
)

# Keys are the catalog model names used in machine descriptions and the pool config.
MODELS: dict[str, dict[str, Any]] = {
    # --- Ampere -----------------------------------------------------------------------------
    "A100-SXM4-40GB": model_entry(
        "NVIDIA A100-SXM4-40GB",
        0x20B0,
        AMPERE,
        (8, 0),
        40537,
        _seven_slice(A100_40GB),
        "MIG-UG A100-40GB table [V]; -lgip/-lgipp transcripts (reference §1.4)",
        (NVLINK3, 12),
        A100_TEMPS,
    ),
    "A100-SXM4-80GB": model_entry(
        "NVIDIA A100-SXM4-80GB",
        0x20B2,
        AMPERE,
        (8, 0),
        81920,
        _seven_slice(A100_80GB),
        "MIG-UG [V]; -lgip transcripts S58/S59 [O]; placements as 40GB (unverified)",
        (NVLINK3, 12),
        A100_TEMPS,
    ),
    "A100-PCIE-40GB": model_entry(
        "NVIDIA A100-PCIE-40GB",
        (0x20F1, 0x20B1),
        AMPERE,
        (8, 0),
        40960,
        _seven_slice(A100_40GB),
        "driver README ids [V S3, S5]; MIG-UG covers A100-PCIE 40GB [V S1]; 1g.5gb 4.75 GiB on a real card "
        "[O S56]; other columns as SXM4 (unverified for PCIe)",
        (NVLINK3, 12),
        A100_TEMPS,
    ),
    "A100-PCIE-80GB": model_entry(
        "NVIDIA A100 80GB PCIe",
        0x20B5,
        AMPERE,
        (8, 0),
        81920,
        _seven_slice(A100_80GB),
        "driver README [V S3]; A100 80GB -lgip transcripts (form factor not stated) [O S58, S59]",
        (NVLINK3, 12),
        A100_TEMPS,
    ),
    "A800-SXM4-80GB": model_entry(
        "NVIDIA A800-SXM4-80GB",
        0x20F3,
        AMPERE,
        (8, 0),
        81920,
        _seven_slice(A100_80GB),
        "driver README [V S3]; 81920 MiB [O S42]; MIG table as A100 80GB from mig-parted's config [S S6] "
        "(unverified: A800 is not in the MIG-UG list)",
        (NVLINK3, 8),
        A100_TEMPS,
    ),
    "A800-PCIE-80GB": model_entry(
        ("NVIDIA A800 80GB PCIe", "NVIDIA A800 80GB PCIe LC"),
        0x20F5,
        AMPERE,
        (8, 0),
        81920,
        _seven_slice(A100_80GB),
        "driver README [V S3]; 81920 MiB [O S44]; MIG as A100 80GB [S S6] (unverified)",
        (NVLINK3, 8),  # A800: NVLink cut to 400 GB/s (8 links)
        A100_TEMPS,
    ),
    "A800-PCIE-40GB": model_entry(
        "NVIDIA A800 40GB Active",
        0x20F6,
        AMPERE,
        (8, 0),
        40960,
        _seven_slice(A100_40GB),
        "driver README [V S3]; MIG as A100 40GB [S S6] (unverified); memory as A100-PCIE-40GB (unverified)",
        (NVLINK3, 8),
        A100_TEMPS,
    ),
    "A30": model_entry(
        "NVIDIA A30",
        0x20B7,
        AMPERE,
        (8, 0),
        24576,
        {
            "memory_slots": 4,
            "compute_slices": 4,
            "max_mig_devices": 4,
            "profiles": [
                ("1g.6gb", 0, 14, 1, 1, 5952, 4, 14, 1, 1, 0, 0, (0, 1, 2, 3)),
                ("1g.6gb+me", 7, 21, 1, 1, 5952, 1, 14, 1, 1, 1, 1, (0, 1, 2, 3)),
                ("2g.12gb", 1, 5, 2, 2, 11968, 2, 28, 2, 2, 0, 0, (0, 2)),
                # 2g.12gb+me: profile ID 6 and placements are unverified
                ("2g.12gb+me", 8, 6, 2, 2, 11968, 1, 28, 2, 2, 1, 1, (0, 2)),
                # 23.44 GiB on R525+ drivers (-lgip transcripts with 2g.12gb+me); 23.50 on older ones
                ("4g.24gb", 3, 0, 4, 4, 24000, 1, 56, 4, 4, 1, 1, (0,)),
            ],
        },
        "MIG-UG A30 table [V]; -lgip/-lgipp transcripts (reference §1.4)",
        (NVLINK3, 4),
        (90, 95),
    ),
    # --- Hopper -----------------------------------------------------------------------------
    "H100-SXM5-80GB": model_entry(
        "NVIDIA H100 80GB HBM3",
        0x2330,
        HOPPER,
        (9, 0),
        81559,
        _seven_slice(H100_80GB),
        "MIG-UG H100 80GB table [V S7]; -lgip/-lgipp transcripts (reference §1.4)",
        (NVLINK4, 18),
    ),
    "H100-PCIE": model_entry(
        "NVIDIA H100 PCIe",
        0x2331,
        HOPPER,
        (9, 0),
        81559,
        _seven_slice(H100_PCIE),
        "driver README [V S3]; -lgip on an H100 PCIe, driver 570 (reference §1.4); NVLink bridge count unverified",
        (NVLINK4, 12),
    ),
    "H100-NVL": model_entry(
        "NVIDIA H100 NVL",
        0x2321,
        HOPPER,
        (9, 0),
        95830,
        _seven_slice(H100_94GB),
        "-lgip NVIDIA gpu-operator#900 [V S13], Azure [O S14]; -lgipp [O S16b]",
        (NVLINK4, 12),
    ),
    "H100-SXM5-94GB": model_entry(
        "NVIDIA H100",
        0x2339,
        HOPPER,
        (9, 0),
        95830,
        _seven_slice(H100_94GB),
        "names and max counts: vGPU docs [V S8]; id 0x2339 'NVIDIA H100' from the driver README, product not "
        "stated (unverified); other columns as H100 NVL (unverified)",
        (NVLINK4, 18),
    ),
    "H100-SXM5-96GB": model_entry(
        "NVIDIA H100 96GB HBM3",
        0x233D,
        HOPPER,
        (9, 0),
        97871,
        _seven_slice(H100_96GB),
        "id from mig-parted's H100-96GB filter [S S6]; NVML name unverified; table as H100 on GH200 96GB",
        (NVLINK4, 18),
    ),
    "H800": model_entry(
        "NVIDIA H800",
        0x2324,
        HOPPER,
        (9, 0),
        81559,
        _seven_slice(H100_80GB),
        "driver README [V S3]; 81559 MiB [O S46]; names/max: vGPU docs [V S8]; other columns as H100 SXM "
        "(unverified); H800 NVLink is cut to 8 links",
        (NVLINK4, 8),
    ),
    "H800-PCIE": model_entry(
        "NVIDIA H800 PCIe",
        0x2322,
        HOPPER,
        (9, 0),
        81559,
        _seven_slice(H100_PCIE),
        "driver README [V S3]; names/max: vGPU docs [V S8]; other columns as H100 PCIe (unverified)",
        (NVLINK4, 8),
    ),
    "H800-NVL": model_entry(
        "NVIDIA H800 NVL",
        0x233A,
        HOPPER,
        (9, 0),
        95830,
        _seven_slice(H100_94GB),
        "driver README [V S3]; names/max: vGPU docs [V S8]; other columns as H100 NVL (unverified)",
        (NVLINK4, 8),
    ),
    "H20": model_entry(
        "NVIDIA H20",
        0x2329,
        HOPPER,
        (9, 0),
        97871,
        _seven_slice(H20_96GB),
        "driver README [V S3]; 97871 MiB [O S47]; names/max: vGPU docs [V S8]; 1g rows from -lgip on driver "
        "535.247.01 [O S16] (1g: 11.75 GiB, 8 SMs); larger profiles derived (unverified)",
        (NVLINK4, 18),
    ),
    "H20-141GB": model_entry(
        "NVIDIA H20-3e",
        0x232C,
        HOPPER,
        (9, 0),
        143771,
        _seven_slice(H20_141GB),
        "driver README 610 [V S4]; names/max: vGPU docs [V S8]; everything else derived from H200 and H20 (unverified)",
        (NVLINK4, 18),
    ),
    "H200": model_entry(
        "NVIDIA H200",
        0x2335,
        HOPPER,
        (9, 0),
        143771,
        _seven_slice(H200_141GB),
        "-lgip on an 8-GPU H200, NVIDIA mig-parted#120 [V S9]; placements unverified",
        (NVLINK4, 18),
    ),
    "H200-NVL": model_entry(
        "NVIDIA H200 NVL",
        0x233B,
        HOPPER,
        (9, 0),
        143771,
        _seven_slice(H200_141GB),
        "driver README 610 [V S4]; 143771 MiB [O S48]; names/max: vGPU docs [V S8]; the rest as H200 SXM (unverified)",
        (NVLINK4, 18),
    ),
    "GH200-96GB": model_entry(
        ("NVIDIA GH200 480GB", "NVIDIA GH200 120GB"),
        0x2342,
        HOPPER,
        (9, 0),
        97871,
        _seven_slice(H100_96GB),
        "driver README [V S3] (name by subsystem); full -lgip and -cgi transcript [O S17]; MIG-UG 'H100 on "
        "GH200 96GB' [V S7]; placements unverified",
        (NVLINK4, 18),
    ),
    "GH200-144GB": model_entry(
        "NVIDIA GH200 144G HBM3e",
        0x2348,
        HOPPER,
        (9, 0),
        146831,
        _seven_slice(GH200_144GB),
        "driver README 610 [V S4]; 146831 MiB [O S50]; -lgip 1g/2g rows NVIDIA mig-parted#139 [V S24]; "
        "3g/4g/7g names/max from mig-parted's config [S S6], sizes derived (unverified)",
        (NVLINK4, 18),
    ),
    # --- Blackwell ---------------------------------------------------------------------------
    "B200": model_entry(
        "NVIDIA B200",
        (0x2901, 0x2909),
        BLACKWELL,
        (10, 0),
        183359,
        _seven_slice(B200_180GB),
        "driver README 610 [V S4]; -lgip 1g/2g rows NVIDIA mig-parted#166/#187 [V S10, S11]; MIG-UG names, "
        "copy engines, max [V S7]; 3g/4g/7g IDs, SMs and sizes derived (unverified)",
        (NVLINK5, 18),
    ),
    "GB200": model_entry(
        "NVIDIA GB200",
        0x2941,
        BLACKWELL,
        (10, 0),
        189471,
        _seven_slice(GB200_186GB),
        "driver README 610 [V S4]; 189471 MiB [O S51]; production -lgip 1g/2g rows NVIDIA mig-parted#227 "
        "[V S12]; 3g/4g/7g names/max from mig-parted's config [S S6], IDs, SMs and sizes derived (unverified)",
        (NVLINK5, 18),
    ),
    "B300": model_entry(
        "NVIDIA B300 SXM6 AC",
        0x3182,
        BLACKWELL,
        (10, 3),
        275040,
        _seven_slice(B300_288GB),
        "driver README 610 [V S4]; 275040 MiB [O S52]; names/max from the GPU Operator's config [S S6]; "
        "IDs, SMs, engines and sizes derived (unverified)",
        (NVLINK5, 18),
    ),
    "GB300": model_entry(
        "NVIDIA GB300",
        (0x31C2, 0x31C3),
        BLACKWELL,
        (10, 3),
        284208,
        _seven_slice(GB300_288GB),
        "driver README 610 [V S4]; 284208 MiB [O S53]; names/max from the GPU Operator's config [S S6]; "
        "IDs, SMs, engines and sizes derived (unverified)",
        (NVLINK5, 18),
    ),
    "RTX-PRO-6000": model_entry(
        (
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
            "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        ),
        (0x2BB5, 0x2BB1, 0x2BB4),
        BLACKWELL,
        (12, 0),
        97887,
        RTX_PRO_6000_MIG,
        "driver README 610 [V S4]; full -lgip and -lgipp on Server and Max-Q editions [O S20, S21, S22, S23]; "
        "MIG-UG table [V S7]; NVML enums of the +gfx/+me.all/-me profiles from their names (unverified)",
        temps=(90, 95),
    ),
    "RTX-PRO-5000": model_entry(
        "NVIDIA RTX PRO 5000 Blackwell",
        0x2BB3,
        BLACKWELL,
        (12, 0),
        48947,
        RTX_PRO_5000_MIG,
        "driver README 610 [V S4]; MIG-UG table (current copy) [V S7b]; IDs, SMs, memory axis, sizes and the "
        "total (the 6000's reserve) derived (unverified: no transcript); the 72GB board shares the id",
        temps=(90, 95),
    ),
    "RTX-PRO-5000-72GB": model_entry(  # same device id as the 48GB board (subsystem 227A)
        "NVIDIA RTX PRO 5000 72GB Blackwell",
        0x2BB3,
        BLACKWELL,
        (12, 0),
        73420,
        None,
        "driver README 610 [V S4]; no MIG data found, so whole or time-shared only; memory derived "
        "(72 GiB less the 6000's reserve, unverified)",
        temps=(90, 95),
    ),
    "RTX-PRO-4500": model_entry(
        ("NVIDIA RTX PRO 4500 Blackwell", "NVIDIA RTX PRO 4500 Blackwell Server Edition"),
        (0x2C31, 0x2C3A),
        BLACKWELL,
        (12, 0),
        32623,
        RTX_PRO_4500_MIG,
        "driver README 610 [V S4]; MIG-UG table [V S7b]; memory [S S55]; IDs, SMs, memory axis and sizes "
        "derived (unverified: no transcript)",
        temps=(90, 95),
    ),
    # --- whole or time-shared GPUs (no MIG: nvmlDeviceGetMigMode is NOT_SUPPORTED) ------------
    "L40S": model_entry(
        "NVIDIA L40S",
        0x26B9,
        "ada",
        (8, 9),
        46068,
        None,
        "driver README [V S3]; memory with ECC on [O S66]; PCIe only [S S70]",
        temps=(88, 93),
    ),
    "L40": model_entry(
        "NVIDIA L40",
        0x26B5,
        "ada",
        (8, 9),
        46068,
        None,
        "driver README [V S3]; memory with ECC on [O S67]; PCIe only [S S70]",
        temps=(88, 93),
    ),
    "L4": model_entry(
        "NVIDIA L4",
        0x27B8,
        "ada",
        (8, 9),
        23034,
        None,
        "driver README [V S3]; memory [O S68]; no NVLink (unverified)",
        temps=(88, 93),
    ),
    "RTX-6000-ADA": model_entry(
        "NVIDIA RTX 6000 Ada Generation",
        0x26B1,
        "ada",
        (8, 9),
        49140,
        None,
        "driver README [V S3]; memory with ECC off [O S72]; PCIe only (unverified)",
        temps=(88, 93),
    ),
    "A10": model_entry(
        "NVIDIA A10",
        0x2236,
        AMPERE,
        (8, 6),
        23028,
        None,
        "driver README [V S3]; memory with ECC on [O S69]; no NVLink (unverified)",
        temps=A100_TEMPS,
    ),
    "A40": model_entry(
        "NVIDIA A40",
        0x2235,
        AMPERE,
        (8, 6),
        46068,
        None,
        "driver README [V S3]; memory [O S71]; 2-way NVLink bridge [S S70b]",
        (NVLINK3, 4),
        A100_TEMPS,
    ),
    "A16": model_entry(
        "NVIDIA A16",
        0x25B6,
        AMPERE,
        (8, 6),
        15356,
        None,
        "driver README [V S3]; memory per GPU [O S73]; 4 GPUs per board",
        temps=A100_TEMPS,
    ),
    "A2": model_entry(  # same device id as the A16 (subsystem 157E)
        "NVIDIA A2",
        0x25B6,
        AMPERE,
        (8, 6),
        15356,
        None,
        "driver README [V S3]; memory as one A16 GPU (16 GB GDDR6; unverified)",
        temps=A100_TEMPS,
    ),
    "T4": model_entry(
        "Tesla T4", 0x1EB8, "turing", (7, 5), 15360, None, "driver README [V S3]; memory [O S74]", temps=(85, 90)
    ),
    "V100-PCIE-16GB": model_entry(
        "Tesla V100-PCIE-16GB",
        0x1DB4,
        "volta",
        (7, 0),
        16384,
        None,
        "PCI ID Repository [S76]; memory [O S77]",
        temps=(84, 90),
    ),
    "V100-PCIE-32GB": model_entry(
        "Tesla V100-PCIE-32GB",
        0x1DB6,
        "volta",
        (7, 0),
        32768,
        None,
        "PCI ID Repository [S76]; memory [O S78]",
        temps=(84, 90),
    ),
    "V100-SXM2-16GB": model_entry(
        "Tesla V100-SXM2-16GB",
        0x1DB1,
        "volta",
        (7, 0),
        16384,
        None,
        "PCI ID Repository [S76]; memory [O S79]; NVLink 2.0, 6 links",
        (2, 6),
        (84, 90),
    ),
    "V100-SXM2-32GB": model_entry(
        "Tesla V100-SXM2-32GB",
        0x1DB5,
        "volta",
        (7, 0),
        32768,
        None,
        "PCI ID Repository [S76]; memory [O S80]; NVLink 2.0, 6 links",
        (2, 6),
        (84, 90),
    ),
}

# Architectures on which enabling MIG needs a GPU reset (reference §3.3): Ampere yes,
# Hopper and later apply it at once (and lose it on driver reload).
RESET_FOR_MIG_MODE = {AMPERE: True, HOPPER: False, BLACKWELL: False}
