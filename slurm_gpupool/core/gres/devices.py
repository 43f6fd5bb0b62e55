"""Device files of GPUs and MIG instances (pure arithmetic).

``/proc/driver/nvidia-caps/mig-minors`` maps ``gpu<minor>/gi<G>/access`` and
``gpu<minor>/gi<G>/ci<C>/access`` to nvidia-cap minors.  The table is static
(every possible GPU 0..31, GI 0..14, CI 0..7), so it follows a formula
(reference §4.1): 15 GIs × (1 GI cap + 8 CI caps) = 135 minors per GPU.
"""

from __future__ import annotations

MAX_GPUS = 32
MAX_GIS = 15
MAX_CIS = 8
_PER_GPU = MAX_GIS * (1 + MAX_CIS)  # 135


def gi_cap_minor(gpu_minor: int, gi_id: int) -> int:
    """nvidia-cap minor of ``gpu<minor>/gi<gi>/access``."""
    return 3 + _PER_GPU * gpu_minor + (1 + MAX_CIS) * gi_id


def ci_cap_minor(gpu_minor: int, gi_id: int, ci_id: int) -> int:
    """nvidia-cap minor of ``gpu<minor>/gi<gi>/ci<ci>/access``."""
    return 4 + _PER_GPU * gpu_minor + (1 + MAX_CIS) * gi_id + ci_id


def gpu_device_file(gpu_minor: int, dev_root: str = "/dev") -> str:
    return f"{dev_root}/nvidia{gpu_minor}"


def mig_device_files(gpu_minor: int, gi_id: int, ci_id: int, dev_root: str = "/dev") -> tuple[str, str, str]:
    """What Slurm's AutoDetect puts in a MIG record: parent, GI cap, CI cap."""
    caps = f"{dev_root}/nvidia-caps"
    return (
        gpu_device_file(gpu_minor, dev_root),
        f"{caps}/nvidia-cap{gi_cap_minor(gpu_minor, gi_id)}",
        f"{caps}/nvidia-cap{ci_cap_minor(gpu_minor, gi_id, ci_id)}",
    )


def mig_minors_table() -> list[tuple[str, int]]:
    """The full ``/proc/driver/nvidia-caps/mig-minors`` table, in the driver's order."""
    rows: list[tuple[str, int]] = [("config", 1), ("monitor", 2)]
    for gpu in range(MAX_GPUS):
        for gi in range(MAX_GIS):
            rows.append((f"gpu{gpu}/gi{gi}/access", gi_cap_minor(gpu, gi)))
            for ci in range(MAX_CIS):
                rows.append((f"gpu{gpu}/gi{gi}/ci{ci}/access", ci_cap_minor(gpu, gi, ci)))
    return rows
