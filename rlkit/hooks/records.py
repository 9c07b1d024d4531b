"""What a plugin author imports: the hook marker and the records a communicator or an environment
family is registered by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pluggy

hookimpl = pluggy.HookimplMarker("rlkit")


@dataclass(frozen=True)
class CommunicatorSpec:
    """One communication protocol, as a plugin registers it.

    ``factory(options, recipe)`` builds the per-run communicator object that implements the run
    hooks; ``options`` is an instance of ``options_schema`` (a dataclass) validated from the
    recipe's ``communication.options``; ``recipe`` is the validated :class:`rlkit.config.schema.RunConfig`.
    """

    name: str
    factory: Callable[[Any, Any], Any]
    options_schema: type
    summary: str
    # cores one run keeps busy, ``cores(options, recipe)``, for schedulers that run several at once
    # (``rlkit sweep``); None: one per learner process (``placement.learners``)
    cores: Callable[[Any, Any], int] | None = None

    def cores_used(self, options: Any, recipe: Any) -> int:
        return self.cores(options, recipe) if self.cores else recipe.placement.learners


@dataclass(frozen=True)
class EnvFamilySpec:
    """A family of gymnasium environments that a plugin makes available to recipes.

    ``prefixes`` are the env-id beginnings the family owns (``("MinAtar/",)``). ``register()``
    registers the family's ids with gymnasium; rlkit calls it, in whichever process builds an env,
    only when a recipe asks for an id that starts with one of ``prefixes`` and gymnasium does not
    know it yet, so the family's package is imported only by the runs that use it.
    """

    name: str
    prefixes: tuple[str, ...]
    register: Callable[[], None]
    summary: str
