"""QueuesCommunicator: the run hooks of GA3C. One learner (Lightning's single-device strategy);
its batches come from :class:`~rlkit_queues.pipeline.Pipeline` instead of its own envs.

``env.num_envs`` keeps its meaning for the learner, "env segments per update": one training
batch is ``num_envs`` segments of ``rollout_len`` steps (GA3C's minimum training batch, in agent
steps, is ``num_envs x rollout_len``). The envs stepped are ``actors x envs_per_actor``. A segment
runs through episode ends (the done mask cuts the n-step return there), so every batch has the
same shape; GA3C instead sends a shorter segment at an episode end: the returns are the same.
"""

from __future__ import annotations

from rlkit.api import UserError, hookimpl, write_atomic


class QueuesCommunicator:
    def __init__(self, options, recipe):
        self.options = options
        self.recipe = recipe
        self.pipeline = None
        self.resumed: dict = {}  # the pipeline state a resumed run starts from

    @hookimpl
    def rlkit_configure(self, run) -> None:
        o = self.options  # one learner (the default layout): its actors are communication.options.actors
        for name, limit in (("actors", "max_actors"), ("predictors", "max_predictors"),
                            ("trainers", "max_trainers")):
            if getattr(o, name) > getattr(o, limit):
                raise UserError(f"communication.options.{name}: {getattr(o, name)} is more than "
                                f"communication.options.{limit}={getattr(o, limit)}")

    @hookimpl
    def rlkit_make_rollout_source(self, run, module):
        from rlkit_queues.pipeline import Pipeline, Shape

        obs_space = module.observation_space
        action_shape = () if module.discrete else tuple(module.action_space.shape)
        shape = Shape(tuple(obs_space.shape), _torch_dtype(obs_space.dtype), action_shape,
                      "int64" if module.discrete else "float32", run.recipe.env.num_envs)
        self.pipeline = Pipeline(run.recipe, self.options, shape, module.model, module.device,
                                 lambda: module.global_step, module.env_seed()).start(self.resumed)
        return self.pipeline

    @hookimpl
    def rlkit_state_dict(self, run, module):
        return {"queues": self.pipeline.state()} if self.pipeline is not None else {}

    @hookimpl
    def rlkit_load_state_dict(self, run, module, state):
        self.resumed = dict(state.get("queues", {}))

    @hookimpl
    def rlkit_metrics(self, run, module):
        return self.pipeline.metrics() if self.pipeline is not None else {}

    @hookimpl
    def rlkit_unconfigure(self, run, error) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
            if self.pipeline.tuning_log:
                write_atomic(run.run_dir / "queues-tuning.log", "\n".join(self.pipeline.tuning_log) + "\n")


def _torch_dtype(np_dtype):
    import numpy as np
    import torch

    return torch.from_numpy(np.zeros(1, dtype=np_dtype)).dtype

