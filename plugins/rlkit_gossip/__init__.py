"""The ``gossip`` communicator (GALA-A2C): K A2C learners, each with its own envs, model and
optimizer, mixing parameters with their peers after every update without waiting for them."""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.api import CommunicatorSpec, hookimpl, opt
from rlkit_gossip.graphs import GRAPHS


@dataclass
class GossipConfig:
    graph: str = opt("ring", "peer graph: ring (1 out-peer), exponential (peers at 2^i), bipartite_exponential "
                             "(odd offsets 2^i-1), full", choices=GRAPHS)
    peers_per_itr: int = opt(1, "out-peers each learner sends to per update (at most the graph's degree)", ge=1)
    rotate_peers: bool = opt(False, "cycle through the graph's peers, peers_per_itr at a time, one step per update")
    mixing: str = opt("auto", "uniform (1/(k+1), GALA as coded), push_sum (de-biased weights), auto (uniform on "
                              "regular graphs: every built-in one)", choices=("auto", "uniform", "push_sum"))
    sync_freq: int = opt(1_000_000, "staleness bound: wait for a peer only after this many updates without a "
                                    "fresh message (0 = lock-step; large = fully asynchronous)", ge=0)
    transport: str = opt("auto", "how messages travel: shm (shared memory, learners on one host), dist "
                                 "(torch.distributed isend/irecv, learners on any hosts); auto = shm on one node, "
                                 "dist across nodes", choices=("auto", "shm", "dist"))
    dist_backend: str = opt("gloo", "process-group backend of the dist transport: gloo (messages in CPU memory, "
                                    "any host) or nccl (messages stay on the GPU; needs trainer.accelerator=gpu "
                                    "and placement.learners_per_device=1)", choices=("gloo", "nccl"))
    peer_timeout_s: float = opt(60.0, "a peer that makes a learner wait longer than this has failed", gt=0)
    on_peer_failure: str = opt("drop", "drop the failed peer and go on, or stop the run cleanly",
                               choices=("drop", "stop"))
    consensus_every: int = opt(0, "updates between consensus-distance measurements (0 = every log interval)",
                               ge=0)
    timeout_s: float = opt(120.0, "process-group set-up waiting longer than this fails the run", gt=0)


def _factory(options: GossipConfig, recipe):
    from rlkit_gossip.communicator import GossipCommunicator

    return GossipCommunicator(options, recipe)


@hookimpl
def rlkit_communicators():
    return [CommunicatorSpec(name="gossip", factory=_factory, options_schema=GossipConfig,
                             summary="K learners gossiping parameters with peers, asynchronously (GALA)")]
