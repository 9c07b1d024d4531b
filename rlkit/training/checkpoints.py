"""Reading checkpoints safely: weights-only loading, so a checkpoint can never execute code."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

from rlkit.infra.errors import UserError


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint dict; a UserError for a missing file, a non-checkpoint or a pickle payload."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path}")
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols before refusing
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UserError(f"checkpoint {path}: refused by weights-only loading: it holds pickled objects other than tensors and "
                        f"plain data{_offender(exc)}; rlkit never runs code from a checkpoint") from None
    except Exception as exc:  # truncated file, not a zip/pickle at all, ...
        raise UserError(f"checkpoint {path}: not a readable torch checkpoint ({type(exc).__name__})") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "recipe" not in ckpt.get("hyper_parameters", {}):
        raise UserError(f"checkpoint {path}: not an rlkit checkpoint (no state_dict / recipe)")
    return ckpt


def stored_step(path: Path) -> int | None:
    """The update counter a checkpoint holds, read through a memory map (no tensor is loaded);
    None where the file is no readable checkpoint (empty, cut short, not torch's)."""
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"])
    except Exception:
        return None


def newest_first(paths) -> list[Path]:
    """Checkpoint files, the furthest-trained first: by the update counter stored in each, then
    by modification time. A copied run folder gives every file the same fresh mtime, so mtime
    alone would not say which is newest. Files whose counter cannot be read come last, newest
    mtime first (loading them will say why)."""
    def key(path: Path) -> tuple[int, int, float]:
        step = stored_step(path)
        return (0, 0, path.stat().st_mtime) if step is None else (1, step, path.stat().st_mtime)

    return sorted((Path(p) for p in paths), key=key, reverse=True)


def pick_checkpoint(folder: Path, say) -> tuple[Path, dict[str, Any]]:
    """The newest checkpoint in ``folder`` that loads, and its dict. ``say`` gets one line for
    every file passed over and why (a run killed while writing, a damaged disk), then one naming
    the checkpoint chosen. A UserError where none loads."""
    ckpts = newest_first(folder.glob("*.ckpt"))
    if not ckpts:
        raise UserError(f"resume: {folder.parent} has no checkpoint to resume from (checkpoints/*.ckpt)")
    chosen, reasons = None, []
    for path in ckpts:
        if chosen is not None:  # older ones are not loaded; an unreadable one is still named
            if stored_step(path) is None:
                reasons.append(f"rlkit: resume: skipping {path}: not a readable torch checkpoint")
            continue
        try:
            chosen = (path, load_checkpoint(path))
        except UserError as exc:
            reasons.append(f"rlkit: resume: skipping {path}: {str(exc).removeprefix(f'checkpoint {path}: ')}")
    for line in reasons:
        say(line)
    if chosen is None:
        raise UserError(f"resume: no checkpoint in {folder} can be read (each is named above)")
    path, ckpt = chosen
    say(f"rlkit: resume: continuing from {path} (update {int(ckpt.get('global_step', 0)):,})")
    return chosen


def _offender(exc: Exception) -> str:
    """The global the unpickler refused, e.g. ' (posix.system)', when torch names it."""
    import re

    found = re.search(r"GLOBAL ([\w.]+)", str(exc)) or re.search(r"Unsupported global: ([\w.]+)", str(exc))
    return f" ({found.group(1)})" if found else ""


def recipe_of(ckpt: dict[str, Any], overrides: list[str] | None = None):
    """The validated RunConfig stored in a checkpoint, with ``key=value`` overrides applied."""
    from rlkit.config.recipes import build_config

    return build_config(dict(ckpt["hyper_parameters"]["recipe"]), list(overrides or []))
