"""Submit domain: friendly requests to GRES decisions, the sbatch argument model."""
