"""Layer 5, training: one run end to end. Recipe to Trainer and module, the Lightning strategies and
launchers that lay learners out, the one caller of run hooks, checkpoints."""
