"""Which Slurm the controller runs, and what that means for the MIG device files we write.

``slurm.version`` in the config wins; else ``sinfo -V``.  Slurm before 23.02.7 splits
``MultipleFiles`` records (fix 4438cab1d8), so each MIG record is then its CI cap file alone."""

from __future__ import annotations

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.gres.records import MIG_FILES_CI_CAP, MIG_FILES_MULTIPLE, MULTIPLE_FILES_FIXED_IN
from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.slurm.runner import SlurmRunner, slurm_version
from slurm_gpupool.slurm.versions import parse_version


def cluster_version(cfg: PoolConfig) -> tuple[int, int, int]:
    """The cluster's Slurm: ``slurm.version`` from the config, else what ``sinfo -V`` says,
    else the oldest Slurm we support (22.05), whose behaviour is the safe assumption."""

    try:
        return parse_version(cfg.slurm.version) if cfg.slurm.version else slurm_version(SlurmRunner())
    except SlurmUnavailableError:
        return (22, 5, 0)


def mig_files_mode(cfg: PoolConfig) -> str:
    """``multiple`` unless the cluster's Slurm predates the MultipleFiles fix (23.02.7)."""
    if cfg.slurm.mig_device_files != "auto":
        return cfg.slurm.mig_device_files
    return MIG_FILES_MULTIPLE if cluster_version(cfg) >= MULTIPLE_FILES_FIXED_IN else MIG_FILES_CI_CAP
