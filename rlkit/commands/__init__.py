"""Layer 6, commands: what the CLI does beyond one run. Sweeps, comparisons and their statistics,
evaluation of a checkpoint, plots."""
