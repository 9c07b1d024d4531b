"""What a plugin's run hooks are handed and what they hand back, as protocols: the learner
(:class:`Learner`), a source of training batches (:class:`RolloutSource`) and a channel between
learners (:class:`Transport`). The core's objects satisfy them; a plugin relies on nothing else."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Iterator, Optional, Protocol, runtime_checkable

from rlkit.hooks.layout import Topology

if TYPE_CHECKING:
    import gymnasium
    import torch

    from rlkit.hooks.batch import Batch


class Learner(Protocol):
    """What a plugin may read and do on the learner its hooks receive (``module``).

    Everything else on the object (it is a Lightning module) is the core's and may change."""

    global_rank: int  # this learner's rank, 0 .. world_size - 1
    world_size: int  # learners in the run
    device: "torch.device"  # where its parameters live
    global_step: int  # optimizer updates done so far (the ``update`` hooks get is this after the step)
    agent_steps: int  # environment steps this learner has trained on
    recent_scores: deque  # raw episode scores of the score window (every learner's when synchronous)
    recipe: Any  # the validated recipe (rlkit.config.schema.RunConfig)
    topology: Topology
    # The policy/value network: ``act(obs) -> (actions, values)`` samples actions for a batch of
    # observations, ``env_actions(actions)`` turns them into what the env takes. A plugin that acts
    # in its own threads (queues' predictors) may call these; the optimizer's parameters are its.
    model: "torch.nn.Module"
    observation_space: "gymnasium.Space"  # one env's observation space
    action_space: "gymnasium.Space"  # one env's action space
    discrete: bool  # the action space is Discrete (else a Box)

    def parameters(self) -> Iterator["torch.nn.Parameter"]:
        """The parameters the optimizer steps (a plugin may read and overwrite them in place)."""

    def env_seed(self) -> int:
        """The seed for this learner's envs: its own per learner, and new after a resume (restarted
        envs should not replay the episodes the run began with)."""

    def request_stop(self, reason: str) -> None:
        """End the run after this update, for every learner, with ``reason`` printed once. From
        a per-update hook of synchronous learners, all stop after the same update."""

    @property
    def stop_requested(self) -> bool:
        """The run is stopping after this update (any learner's request, or the score target)."""

    @property
    def interrupted(self) -> bool:
        """Training is ending by Ctrl-C or SIGTERM (each learner writes a checkpoint to resume from)."""

    def lost_peers(self) -> str:
        """After a failed collective: which learner processes have exited, in words."""


@runtime_checkable
class RolloutSource(Protocol):
    """What ``rlkit_make_rollout_source`` returns: training batches, one per update, produced with
    the learner's current parameters (or, for a queue, as fresh as the protocol allows). The core
    calls ``close()`` once when the learner ends, after training, also after an error."""

    def __iter__(self) -> Iterator["Batch"]: ...

    def close(self) -> None:
        """Release the envs, processes and threads the source holds; never raises."""


@runtime_checkable
class Transport(Protocol):
    """A mailbox per (source, destination, kind) between learners, holding one message (a header
    and a flat tensor) at a time: the shape gossip's shared-memory and torch.distributed
    transports share, for protocols that move parameters without a collective."""

    def ready(self, src: int, dst: int, kind: int) -> bool:
        """The mailbox is free: a send will not overwrite an unread message."""

    def send(self, src: int, dst: int, kind: int, header: "torch.Tensor", data: "torch.Tensor") -> None: ...

    def waiting(self, src: int, dst: int, kind: int) -> bool:
        """A message is there to take."""

    def take(self, src: int, dst: int, kind: int) -> "Optional[tuple[torch.Tensor, torch.Tensor]]": ...

    def close(self, remove: bool = False) -> None: ...
