"""``gpupool simulate`` (#16): replaying jobs against a pool config (docs/design/simulate.md).

Pure modules only here; traces and reports live at the edges.  Every MIG, GRES and
request rule comes from the modules the real tool uses (catalog, planner, gres, submit).
"""
