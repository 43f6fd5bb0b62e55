"""Pure views of a loaded config: capacity, the submit catalog, planned nodes, tiers, elastic bounds, hook settings."""
