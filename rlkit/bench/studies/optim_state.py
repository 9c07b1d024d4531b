"""How big are an RMSprop run's steps, layer by layer? Reads a checkpoint's optimizer state (the mean
square of each weight's gradient) and prints, per parameter tensor, the median gradient RMS and the
ratio of the step norm under TensorFlow's semantics (eps inside the root) to PyTorch's (eps outside),
both at the same lr and the same gradients. The eps a run used is read from the checkpoint.

    python -m rlkit.bench.studies.optim_state RUN_DIR/checkpoints/interrupted.ckpt

A ratio far below 1 means eps, not the gradients, sets that layer's step size under rmsprop_tf.
"""

from __future__ import annotations

import argparse

import torch


def layer_rows(checkpoint: dict) -> list[tuple[str, tuple[int, ...], float, float]]:
    opt = checkpoint["optimizer_states"][0]
    eps = opt["param_groups"][0]["eps"]
    names = [n for n, v in checkpoint["state_dict"].items() if v.is_floating_point()]
    rows = []
    for index, state in sorted(opt["state"].items()):
        ms = state["square_avg"].double()
        rms = ms.sqrt()  # the gradients' RMS per weight, the proxy for a typical gradient
        tf = (rms / (ms + eps).sqrt()).norm()
        pt = (rms / (rms + eps)).norm()
        name = names[index] if index < len(names) else str(index)
        rows.append((name, tuple(ms.shape), float(rms.median()), float(tf / pt)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    args = parser.parse_args()
    checkpoint = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
    eps = checkpoint["optimizer_states"][0]["param_groups"][0]["eps"]
    print(f"eps {eps:g} (sqrt {eps ** 0.5:.2e})")
    print(f"{'parameter':40s} {'shape':>18s} {'median grad RMS':>16s} {'tf/torch step':>14s}")
    for name, shape, median, ratio in layer_rows(checkpoint):
        print(f"{name:40s} {str(shape):>18s} {median:16.2e} {ratio:14.3f}")


if __name__ == "__main__":
    main()
