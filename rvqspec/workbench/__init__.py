"""The workbench on top: the main job (demo), its report and figures, the tree-mask explorer, the
listening A/B and the notebooks' recorded results."""
