"""The ``queues`` communicator (GA3C): actor processes step envs and ask for actions on a
prediction queue served by batching predictor threads; they send n-step segments on a training
queue from which trainer threads assemble the learner's batches; the numbers of predictors,
trainers and actors are tuned at run time by measured training throughput."""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.api import CommunicatorSpec, hookimpl, opt


@dataclass
class QueuesConfig:
    actors: int = opt(8, "actor processes at the start (NA)", ge=1)
    envs_per_actor: int = opt(1, "envs each actor steps together (one prediction request covers them all)", ge=1)
    predictors: int = opt(2, "predictor threads at the start (NP)", ge=1)
    trainers: int = opt(2, "trainer threads assembling training batches at the start (NT)", ge=1)
    prediction_batch: int = opt(128, "most requests one predictor serves with one forward pass", ge=1)
    slots_per_actor: int = opt(2, "segment buffers per actor in shared memory (1 filling + the rest waiting "
                                  "to be trained on): an actor that has none free waits", ge=2)
    tune: bool = opt(True, "tune NP, NT and NA at run time by measured training throughput")
    tune_window_s: float = opt(10.0, "seconds of throughput measured before and after each tuning change", gt=0)
    tune_min_gain: float = opt(0.05, "a change is kept only if throughput rose by more than this fraction "
                                     "and by more than the windows' measurement noise", ge=0)
    max_actors: int = opt(64, "tuning never goes above this many actors", ge=1)
    max_predictors: int = opt(8, "tuning never goes above this many predictor threads", ge=1)
    max_trainers: int = opt(8, "tuning never goes above this many trainer threads", ge=1)
    on_actor_failure: str = opt("replace", "an actor that dies is replaced, or the run stops with an error",
                                choices=("replace", "stop"))
    timeout_s: float = opt(60.0, "any wait on a queue or an actor longer than this fails the run", gt=0)


def _factory(options: QueuesConfig, recipe):
    from rlkit_queues.communicator import QueuesCommunicator

    return QueuesCommunicator(options, recipe)


def _cores(options: QueuesConfig, recipe) -> int:
    """The learner (predictor and trainer threads) and every actor process keep a core busy."""
    return 1 + options.actors


@hookimpl
def rlkit_communicators():
    return [CommunicatorSpec(name="queues", factory=_factory, options_schema=QueuesConfig,
                             summary="actors + batched prediction and training queues, tuned at run time (GA3C)",
                             cores=_cores)]
