"""hw/sim."""
