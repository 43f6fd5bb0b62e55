"""slurm_gpupool: a Slurm cluster's NVIDIA GPUs as an elastic pool.

MIG instances and time-sliced GPU shares become Slurm GRES; job hooks make each
allocation true on the GPU; a repartitioner switches layouts between day and
night without killing jobs; reports read Slurm accounting.
"""

__version__ = "0.1.0"
