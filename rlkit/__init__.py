"""rlkit: distributed actor-critic RL with pluggable communication (allreduce, gossip, queues)."""

__version__ = "0.1.0"
