"""Scheduler boundary: run Slurm commands (never from hooks) and parse their output."""
