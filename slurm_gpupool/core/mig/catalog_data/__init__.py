"""GPU models and their MIG profiles, as data: the one source for planner and simulator.

One :class:`ModelRow` per model, written with keywords and carrying its ``source`` (keys of
docs/research/gpu-catalog-sources.md).  A MIG profile table is defined once, by name, and
shared by the boards that have it (``A100_40GB`` serves the A100 SXM4 and PCIe 40GB and the
A800 40GB).  Transcribed from ``reference/mig-nvml-facts.md`` §1.4 (NVIDIA MIG user guide
tables and ``nvidia-smi mig -lgip`` / ``-lgipp`` transcripts); values the reference marks
UNVERIFIED are kept as data, said so in the row's source or beside the value, never as code.

By generation: ``ampere``, ``hopper``, ``blackwell`` (MIG boards and their tables),
``whole_gpus`` (no MIG); the row types in ``rows``.  Only ``core/mig/catalog.py`` reads this
package: it turns the rows into the models the rest of the code uses.
"""

from __future__ import annotations

from slurm_gpupool.core.mig.catalog_data import ampere, blackwell, hopper, whole_gpus
from slurm_gpupool.core.mig.catalog_data.rows import AMPERE, BLACKWELL, HOPPER, NVLINK3, MigTable, ModelRow, ProfileRow

__all__ = [
    "CI_ENUM_BY_SLICES",
    "CI_SIZES_BY_GI_SLICES",
    "MODELS",
    "NVLINK3",
    "RESET_FOR_MIG_MODE",
    "ROWS",
    "MigTable",
    "ModelRow",
    "ProfileRow",
]

# In catalog order: what ``gpupool layout models`` lists.
ROWS: tuple[ModelRow, ...] = (*ampere.ROWS, *hopper.ROWS, *blackwell.ROWS, *whole_gpus.ROWS)


def _by_key(rows: tuple[ModelRow, ...]) -> dict[str, ModelRow]:
    """The rows by catalog key; two rows with one key are a mistake in the data, caught at import."""
    out: dict[str, ModelRow] = {}
    for row in rows:
        if row.key in out:
            raise ValueError(f"GPU catalog: two rows for {row.key}")
        out[row.key] = row
    return out


MODELS: dict[str, ModelRow] = _by_key(ROWS)

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

# Architectures on which enabling MIG needs a GPU reset (reference §3.3): Ampere yes,
# Hopper and later apply it at once (and lose it on driver reload).
RESET_FOR_MIG_MODE = {AMPERE: True, HOPPER: False, BLACKWELL: False}
