"""MIG domain: the GPU catalog, layouts, the placement planner, GPU diffs."""
