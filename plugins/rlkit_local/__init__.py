"""The ``local`` communicator: one learner, no communication. The smallest complete plugin."""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.errors import UserError
from rlkit.plugin import CommunicatorSpec, hookimpl


@dataclass
class LocalConfig:
    """``local`` takes no options."""


class LocalCommunicator:
    """Single learner: checks the layout, keeps Lightning's single-device strategy."""

    def __init__(self, options: LocalConfig, recipe):
        self.options = options
        self.recipe = recipe

    @hookimpl
    def rlkit_configure(self, run) -> None:
        if run.recipe.placement.learners != 1:
            raise UserError(f"placement.learners: {run.recipe.placement.learners} is not allowed with the local "
                            "communicator; it runs exactly 1 learner (pick allreduce, gossip or queues for more)")
        if run.recipe.trainer.devices != 1 or run.recipe.trainer.num_nodes != 1:
            raise UserError("trainer.devices / trainer.num_nodes: the local communicator runs on 1 device of 1 node")

    @hookimpl
    def rlkit_make_strategy(self, run):
        from rlkit.strategies import single_device_strategy

        return single_device_strategy(run.recipe.trainer.accelerator)


@hookimpl
def rlkit_communicators():
    return [CommunicatorSpec(name="local", factory=LocalCommunicator, options_schema=LocalConfig,
                             summary="one learner, no communication (plain A2C)")]
