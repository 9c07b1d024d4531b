"""The ``local`` communicator: one learner, no communication. The smallest complete plugin: the
default layout is one learner, and every hook's default (the learner's own envs, local gradients)
is plain A2C, so it implements no hook at all."""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.api import CommunicatorSpec, hookimpl


@dataclass
class LocalConfig:
    """``local`` takes no options."""


class LocalCommunicator:
    """Single learner (the core checks the placement: 1 learner, 1 device, 1 node)."""

    def __init__(self, options: LocalConfig, recipe):
        self.options = options
        self.recipe = recipe


@hookimpl
def rlkit_communicators():
    return [CommunicatorSpec(name="local", factory=LocalCommunicator, options_schema=LocalConfig,
                             summary="one learner, no communication (plain A2C)")]
