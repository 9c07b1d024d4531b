"""The per-run object every run hook receives."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.config.schema import RunConfig

RUN_DIR_ENV = "RLKIT_RUN_DIR"  # set for the learner processes a run starts: the run's folder


@dataclass
class Run:
    """One run: the validated recipe, the communicator's validated options, where outputs go.

    ``state`` is scratch space for plugins (one dict shared by the run's hooks, per process).
    ``launcher`` is True in the process the user started and False in the learner processes that
    Lightning launches for a multi-learner run (they run the CLI, and so the run hooks, again):
    release what only the launching process holds when it is True. ``supervised`` is True where
    the launching process trains nothing and supervises the learners (independent learners on one
    host, ``rlkit.training.supervisor``): it hosts ``run_store()``, which then outlives every
    learner, and no learner (learner 0 included) has to stay for the others.
    """

    recipe: RunConfig
    options: Any
    run_dir: Path
    recipe_name: str = "recipe"
    state: dict = field(default_factory=dict)
    launcher: bool = True
    supervised: bool = False

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"
