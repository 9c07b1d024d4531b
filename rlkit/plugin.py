"""What a plugin author imports: the hook marker and the record a communicator is registered by."""

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
    recipe's ``communication.options``; ``recipe`` is the validated :class:`rlkit.config.RunConfig`.
    """

    name: str
    factory: Callable[[Any, Any], Any]
    options_schema: type
    summary: str
