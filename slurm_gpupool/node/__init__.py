"""What a GPU node does: apply, assert and export a layout through the GPU backend; its state file; live GRES."""
