"""Measurement over the core and the export layer: hidden-state extraction, drafter training,
acceptance tables, benchmarks, the losslessness check, device profiles and text metrics."""
