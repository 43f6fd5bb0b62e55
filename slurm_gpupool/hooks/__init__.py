"""Slurm job hooks: Prolog, Epilog, TaskProlog and the health check.

They run as root on every job, so they import only the standard library and the
GPU layer: never click, jinja2, pandas or pyslurm.
"""
