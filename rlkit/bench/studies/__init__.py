"""The measurements behind docs/benchmarks.md that `rlkit bench` does not make itself: one script per
question (hot path, queues, gossip transport, soak, ...), each run as ``python -m rlkit.bench.studies.NAME``
with the command in its docstring; ``recipes/`` holds the recipe variants they compare."""
