"""Layer 6, bench: ``rlkit bench``. rlkit against its plain reference loop, the raw env and SB3, and
the throughput of its parts. Nothing in training or below imports it."""
