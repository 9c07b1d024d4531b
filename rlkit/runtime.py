"""The per-run object every run hook receives."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.config import RunConfig


@dataclass
class Run:
    """One run: the validated recipe, the communicator's validated options, where outputs go.

    ``state`` is scratch space for plugins (one dict shared by the run's hooks, per process).
    """

    recipe: RunConfig
    options: Any
    run_dir: Path
    recipe_name: str = "recipe"
    state: dict = field(default_factory=dict)

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"
