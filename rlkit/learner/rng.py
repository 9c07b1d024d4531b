"""Random-number-generator states as plain data (tensors, ints, lists), so that a checkpoint holding
them still loads with weights-only unpickling."""

from __future__ import annotations

import random

import numpy as np
import torch


def capture() -> dict:
    """torch (CPU and every initialised CUDA device), numpy and Python ``random`` states."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {"torch": torch.get_rng_state(),
             "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached": float(cached)},
             "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict) -> None:
    """Put back what :func:`capture` returned (CUDA only where the same devices exist)."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
