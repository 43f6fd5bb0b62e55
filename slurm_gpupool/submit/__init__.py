"""``gpupool-sbatch``: a drop-in sbatch that understands friendly GPU requests."""
